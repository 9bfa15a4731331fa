"""Deprecated: `ssljax.evaluate` is now `ssljax.probes` (removed in 0.4)."""

from ssljax import deprecation

deprecation.warn_moved("ssljax.evaluate", "ssljax.probes")

# pylint: disable=wildcard-import,unused-wildcard-import,wrong-import-position
from ssljax.probes import *  # noqa: E402,F401,F403
from ssljax.probes import __all__  # noqa: E402,F401
