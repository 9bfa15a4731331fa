"""Deprecated: `ssljax.ema` is now `ssljax.methods.ema` (removed in 0.4)."""

from ssljax import deprecation

deprecation.warn_moved("ssljax.ema", "ssljax.methods.ema")

# pylint: disable=wildcard-import,unused-wildcard-import,wrong-import-position
from ssljax.methods.ema import *  # noqa: E402,F401,F403
from ssljax.methods.ema import __all__  # noqa: E402,F401
