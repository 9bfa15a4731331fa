"""Deprecated: `ssljax.masks` is now `ssljax.methods.masks` (removed in 0.4)."""

from ssljax import deprecation

deprecation.warn_moved("ssljax.masks", "ssljax.methods.masks")

# pylint: disable=wildcard-import,unused-wildcard-import,wrong-import-position
from ssljax.methods.masks import *  # noqa: E402,F401,F403
from ssljax.methods.masks import __all__  # noqa: E402,F401
