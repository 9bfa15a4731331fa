"""Put this folder first on PYTHONPATH to make modules look uninstalled.

The top-level modules named in $SSLJAX_HIDE_MODULES (comma-separated, e.g.
"tensorflow,tensorflow_datasets") and their submodules are found by no
finder: ``import tensorflow`` raises ModuleNotFoundError and
``importlib.util.find_spec("tensorflow")`` is None, as in an environment
without them. With $SSLJAX_MODULES_AT_EXIT set to a file name, the sorted
top-level names in ``sys.modules`` are written there (one per line) when the
interpreter exits normally. Used by tests/test_extras.py and
tests/test_checkpoints.py.
"""

import atexit
import os
import sys

_HIDDEN = tuple(m for m in os.environ.get("SSLJAX_HIDE_MODULES", "").split(",")
                if m)


class _Hide:
  """Wraps a meta-path finder; finds nothing for a hidden module."""

  def __init__(self, finder):
    self.finder = finder

  def find_spec(self, name, path=None, target=None):
    if any(name == m or name.startswith(m + ".") for m in _HIDDEN):
      return None
    find = getattr(self.finder, "find_spec", None)
    return None if find is None else find(name, path, target)

  def __getattr__(self, attr):
    return getattr(self.finder, attr)


if _HIDDEN:
  sys.meta_path[:] = [_Hide(f) for f in sys.meta_path]


def _write_modules(path):
  with open(path, "w") as f:
    f.write("".join(f"{m}\n" for m in sorted(
        {name.partition(".")[0] for name in list(sys.modules)})))


if os.environ.get("SSLJAX_MODULES_AT_EXIT"):
  atexit.register(_write_modules, os.environ["SSLJAX_MODULES_AT_EXIT"])
