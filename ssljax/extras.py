"""Optional dependencies: which extra installs a module, and one-line errors.

``pip install ssljax`` brings what the losses, graphs, theory, PAL core,
metrics and models import (jax, numpy, scipy, diffrax, flax). The main job,
tfds datasets and the PAL service need extras; `require` checks that an
extra's modules are installed and, if one is not, raises `MissingExtraError`
whose message is the one line to act on, e.g.

    ssljax.main needs the 'train' extra: pip install 'ssljax[train]'
    (no module 'grain')

`exit_if_missing` prints that line as ``error: ...`` and exits with status 2
(the command-line entry points use it before anything else is imported).
"""

import importlib
import importlib.util
import sys

__all__ = ["EXTRA_MODULES", "MissingExtraError", "exit_if_missing",
           "extra_of", "import_module", "require"]

_TRAIN = ("absl", "ml_collections", "optax", "orbax", "grain", "PIL",
          "dm_pix", "sklearn", "matplotlib", "tqdm")
# extra -> the top-level modules ssljax imports from what it installs. The
# 'train' extra also brings ``tensorboard``, which is optional (without it
# the metrics go to metrics.jsonl only); the service needs the main job's.
EXTRA_MODULES = {
    "train": _TRAIN,
    "tfds": ("tensorflow_datasets",),
    "serve": _TRAIN + ("starlette", "sqlalchemy", "uvicorn", "httpx"),
}


class MissingExtraError(ImportError):
  """An optional dependency is not installed; the message says what to run."""


def extra_of(module: str) -> str | None:
  """The first extra that installs top-level ``module`` ("grain" -> "train")."""
  top = module.partition(".")[0]
  for extra, modules in EXTRA_MODULES.items():
    if top in modules:
      return extra
  return None


def _missing(module: str) -> bool:
  try:
    return importlib.util.find_spec(module) is None
  except (ImportError, ValueError):  # a blocked or broken parent package
    return True


def _message(what: str, extra: str, module: str) -> str:
  return (f"{what} needs the '{extra}' extra: pip install 'ssljax[{extra}]' "
          f"(no module {module!r})")


def require(extra: str, what: str, modules=None) -> None:
  """Checks that the modules of ``extra`` are installed (none is imported).

  Args:
    extra: a key of EXTRA_MODULES ("train", "tfds", "serve").
    what: the feature that needs it, first words of the message
      (e.g. "ssljax.main").
    modules: the top-level modules to check; default: all of the extra's.

  Raises:
    MissingExtraError: naming the first missing module and the pip command.
    KeyError: an unknown extra.
  """
  for module in EXTRA_MODULES[extra] if modules is None else modules:
    if _missing(module):
      raise MissingExtraError(_message(what, extra, module))


def import_module(name: str, what: str):
  """``importlib.import_module(name)``; a missing module of an extra raises
  `MissingExtraError` (one line) instead of ModuleNotFoundError.

  Raises:
    MissingExtraError: ``name``, or a module it imports, belongs to an extra
      and is not installed. ModuleNotFoundError: any other missing module.
  """
  try:
    return importlib.import_module(name)
  except ModuleNotFoundError as e:
    extra = extra_of(e.name or name)
    if extra is None:
      raise
    raise MissingExtraError(_message(what, extra, e.name or name)) from e


def exit_if_missing(extra: str, what: str) -> None:
  """`require`, but prints ``error: <the line>`` to stderr and exits 2."""
  try:
    require(extra, what)
  except MissingExtraError as e:
    print(f"error: {e}", file=sys.stderr, flush=True)
    sys.exit(2)
