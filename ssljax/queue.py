"""Deprecated: `ssljax.queue` is now `ssljax.methods.queue` (removed in 0.4)."""

from ssljax import deprecation

deprecation.warn_moved("ssljax.queue", "ssljax.methods.queue")

# pylint: disable=wildcard-import,unused-wildcard-import,wrong-import-position
from ssljax.methods.queue import *  # noqa: E402,F401,F403
from ssljax.methods.queue import __all__  # noqa: E402,F401
