"""Evaluators chosen by name from ``config.evals`` (plug-ins, one per module).

``config.evals`` holds named entries::

  evals.probe = dict(type="linear_probe", every_steps=None, max_iter=100)
  evals.knn = dict(type="knn", every_steps=1000, k=20)

An entry set to None is switched off (a variant dropping a baseline).
``type`` names a module ``ssljax.evaluators.<type>`` that defines one class
``Evaluator`` (a subclass of `ssljax.evaluators.base.Evaluator`);
``every_steps`` (None: only after the last step) and the other keys are
passed to its ``__init__``. ``validate(evals)`` checks names, types and
``every_steps`` without building anything (``ssljax.config_validation``
calls it before any data is loaded); ``build(evals, ctx)`` then makes the
instances, whose ``__init__`` checks their own options.

Adding an evaluator = one module with an ``Evaluator`` class + one config
entry; the train loop only calls ``due(step)`` and ``run(state)``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

# check_option: re-exported for evaluators written outside this package.
from ssljax.evaluators.base import EvalContext, Evaluator, check_option

__all__ = ["EvalContext", "Evaluator", "available_types", "validate",
           "build", "load_type", "check_option"]

# Type names are module names of this package.
_TYPE_NAME = re.compile(r"[a-z_][a-z0-9_]*")
# Entry keys become metric prefixes "<name>/<metric>".
_ENTRY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
_NOT_TYPES = ("base", "baseline_cache", "context")


def available_types() -> list[str]:
  """Sorted evaluator type names: the modules of this package but its
  helpers (``base``, ``baseline_cache``, ``context``)."""
  return sorted(m.name for m in pkgutil.iter_modules(__path__)
                if not m.name.startswith("_") and m.name not in _NOT_TYPES)


def _entries(evals) -> list[tuple[str, dict]]:
  """(name, plain dict of options) of each entry of ``evals``."""
  if evals is None:
    return []
  if not hasattr(evals, "items"):
    raise ValueError("evals must be a ConfigDict or dict of named entries "
                     "{name: {'type': ..., ...}}, got "
                     f"{type(evals).__name__}")
  out = []
  for name, entry in evals.items():
    if not isinstance(name, str) or not _ENTRY_NAME.fullmatch(name):
      raise ValueError(f"evals.{name}: an entry name must match "
                       f"{_ENTRY_NAME.pattern} (it prefixes metric names)")
    if entry is None:  # switched off (e.g. by a variant: evals.x = None)
      continue
    if hasattr(entry, "to_dict"):
      entry = entry.to_dict()
    if not isinstance(entry, dict):
      raise ValueError(f"evals.{name} must be a ConfigDict or dict with a "
                       f"'type', got {type(entry).__name__}")
    out.append((name, dict(entry)))
  return out


def _check_type(name: str, entry: dict) -> str:
  if "type" not in entry:
    raise ValueError(f"evals.{name}.type is missing; available types: "
                     f"{', '.join(available_types())}")
  kind = entry["type"]
  if (not isinstance(kind, str) or not _TYPE_NAME.fullmatch(kind)
      or kind not in available_types()):
    raise ValueError(f"evals.{name}.type={kind!r} is not an evaluator type; "
                     f"available types: {', '.join(available_types())}")
  return kind


def _check_every_steps(name: str, every_steps) -> None:
  if every_steps is None:
    return
  if (isinstance(every_steps, bool) or not isinstance(every_steps, int)
      or every_steps <= 0):
    raise ValueError(f"evals.{name}.every_steps must be an integer > 0 (or "
                     f"None: only after the last step), got {every_steps!r}")


def load_type(kind: str) -> type[Evaluator]:
  """The ``Evaluator`` class of module ``ssljax.evaluators.<kind>``.

  Raises:
    ValueError: ``kind`` is not a module of this package, or the module has
      no ``Evaluator`` subclass of the base class.
  """
  if not isinstance(kind, str) or kind not in available_types():
    raise ValueError(f"unknown evaluator type {kind!r}; available types: "
                     f"{', '.join(available_types())}")
  module = importlib.import_module(f"{__name__}.{kind}")
  cls = getattr(module, "Evaluator", None)
  if not (inspect.isclass(cls) and issubclass(cls, Evaluator)):
    raise ValueError(f"ssljax.evaluators.{kind} defines no Evaluator class "
                     "(a subclass of ssljax.evaluators.base.Evaluator)")
  return cls


def _options_of(cls) -> set[str] | None:
  """Keyword options ``cls.__init__`` accepts (None: any, it takes **kw)."""
  params = inspect.signature(cls.__init__).parameters
  if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
    return None
  return {n for n, p in params.items()
          if p.kind in (inspect.Parameter.KEYWORD_ONLY,
                        inspect.Parameter.POSITIONAL_OR_KEYWORD)
          and n not in ("self", "name", "ctx")}


def validate(evals) -> None:
  """Checks ``config.evals`` without a context: nothing is built or loaded.

  Checks each entry's name, that its ``type`` is a module of this package
  with an ``Evaluator`` class, that ``every_steps`` is None or an integer
  > 0, and that every other key is an option of that class's ``__init__``
  (values are checked later, by ``__init__`` in `build`).

  Args:
    evals: ConfigDict or dict ``{name: {"type": str, "every_steps": ...,
      **options}}``; None or empty means no evaluators; an entry that is
      None is skipped.

  Raises:
    ValueError: one line naming ``evals.<name>.<field>`` and what is allowed.
  """
  for name, entry in _entries(evals):
    cls = load_type(_check_type(name, entry))
    _check_every_steps(name, entry.get("every_steps"))
    options = _options_of(cls)
    unknown = sorted(set(entry) - {"type", "every_steps"} - (options or set()))
    if options is not None and unknown:
      raise ValueError(
          f"evals.{name}.{unknown[0]}: not an option of evaluator type "
          f"{entry['type']!r}; its options: "
          f"{', '.join(sorted(options - {'every_steps'})) or 'none'}")


def build(evals, ctx: EvalContext, *, baselines: bool = True
          ) -> list[Evaluator]:
  """Builds the evaluators of ``config.evals``, in the order of
  ``evals.items()`` (a ConfigDict sorts its keys; a dict keeps its order).

  Args:
    evals: as for `validate`.
    ctx: the run's `EvalContext`, given to every evaluator.
    baselines: False leaves out the types marked ``baseline`` (raw-pixel
      and random-init probes; ``config.eval_inputs.baselines``).

  Returns:
    one ``Evaluator`` instance per entry.

  Raises:
    ValueError: as `validate`, or an option value an evaluator rejects
      (its message names ``evals.<name>.<option>``).
  """
  validate(evals)
  built = []
  for name, entry in _entries(evals):
    cls = load_type(entry.pop("type"))
    if cls.baseline and not baselines:
      continue
    every_steps = entry.pop("every_steps", None)
    try:
      built.append(cls(name, ctx, every_steps=every_steps, **entry))
    except TypeError as e:  # an option __init__ does not take
      raise ValueError(f"evals.{name}: bad options {sorted(entry)} for "
                       f"evaluator type {cls.__module__}: {e}") from None
  return built
