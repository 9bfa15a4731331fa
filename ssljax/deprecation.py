"""Names and modules that moved: they keep working, with a warning, for one
minor version.

The stability policy of the documentation (docs/public_api.md): a renamed or
removed public name keeps working for one minor version and warns in one
line, ``DeprecationWarning: ssljax.old is deprecated, use ssljax.new
(removed in 0.4)``. A module that moved leaves a module at its old path that
warns when imported and re-exports the new one (`warn_moved`); a name that
moved to another module is served by the old module's ``__getattr__``
(`moved_names`).
"""

import importlib
import warnings

__all__ = ["REMOVED_IN", "warn_moved", "moved_names"]

# The release that drops the names deprecated in this one.
REMOVED_IN = "0.4"


def warn_moved(old: str, new: str, *, stacklevel: int = 3) -> None:
  """Warn once, in one line, that ``old`` (a dotted name) is now ``new``.

  Args:
    old, new: dotted names, e.g. "ssljax.inputs.source_labels",
      "ssljax.data.source_labels".
    stacklevel: as in `warnings.warn`; the default points at the caller's
      caller (the code that used the old name).
  """
  warnings.warn(f"{old} is deprecated, use {new} (removed in {REMOVED_IN})",
                DeprecationWarning, stacklevel=stacklevel)


def moved_names(module: str, moves: dict):
  """A module-level ``__getattr__`` for the names that left ``module``.

  Args:
    module: the old module's dotted name (its ``__name__``).
    moves: {old name: dotted path of the object's new home}, e.g.
      {"source_labels": "ssljax.data.source_labels"}.

  Returns:
    ``__getattr__(name)``: the moved object, after `warn_moved`.

  Raises:
    AttributeError (from the returned function): a name that neither is in
      the module nor moved.
  """

  def __getattr__(name):
    if name not in moves:
      raise AttributeError(f"module {module!r} has no attribute {name!r}")
    new = moves[name]
    warn_moved(f"{module}.{name}", new)
    home, _, attr = new.rpartition(".")
    return getattr(importlib.import_module(home), attr)

  return __getattr__
