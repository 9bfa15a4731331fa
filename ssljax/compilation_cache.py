"""JAX's persistent compilation cache, on by default for every run.

The main job compiles about a hundred XLA programs (train step, feature
extraction, probe and metric solvers); on a 2-core CPU that is tens of
seconds per run. With the persistent cache a second run of the same config
and code reads them from disk instead. ``config.compilation_cache_dir``
picks the directory:

- ``"auto"`` (default): ``$XDG_CACHE_HOME/ssljax/jax``, or
  ``~/.cache/ssljax/jax`` when XDG_CACHE_HOME is unset or empty;
- a path: that directory (created if missing);
- ``""``: off (nothing is read or written).

It works in a process that has already compiled programs (the cache is
reset, so the next compilation opens it). A cache directory already set for
the process (``JAX_COMPILATION_CACHE_DIR``
or ``jax.config.update("jax_compilation_cache_dir", ...)``) wins over
``"auto"``. Every program that takes at least
``MIN_COMPILE_SECONDS`` to compile is written. Entries are keyed by the
program, the jax/jaxlib version and the device, so a stale entry is never
used; deleting the directory is always safe.

`use_threefry_gpu_kernel`, which the main job also calls, cuts what GPU
programs that draw random numbers (initialisation, on-device views, masks)
cost to compile.
"""

from __future__ import annotations

import os

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_cc

__all__ = ["MIN_COMPILE_SECONDS", "default_dir", "enable",
           "use_threefry_gpu_kernel"]

# JAX's default (1 s) leaves out the many small programs of the evaluators,
# whose compile times add up to seconds; writing an entry costs well under
# the compile time it saves.
MIN_COMPILE_SECONDS = 0.0


def default_dir() -> str:
  """``$XDG_CACHE_HOME/ssljax/jax`` (``~/.cache/ssljax/jax`` if unset)."""
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
      os.path.expanduser("~"), ".cache")
  return os.path.join(base, "ssljax", "jax")


def enable(cache_dir: str | None = "auto") -> str | None:
  """Turns JAX's persistent compilation cache on for this process.

  Args:
    cache_dir: ``"auto"`` (`default_dir`, unless the process already set a
      directory), a directory path, or ``""``/None for off.

  Returns:
    the directory in use, or None when the cache is off.

  Raises:
    OSError: the directory cannot be created.
  """
  if not cache_dir:
    return None
  current = jax.config.jax_compilation_cache_dir
  if cache_dir == "auto":
    cache_dir = current or default_dir()
  cache_dir = os.path.abspath(os.path.expanduser(cache_dir))
  os.makedirs(cache_dir, exist_ok=True)
  if current != cache_dir:
    jax.config.update("jax_compilation_cache_dir", cache_dir)
  jax.config.update("jax_persistent_cache_min_compile_time_secs",
                    MIN_COMPILE_SECONDS)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  # JAX decides once per process, at its first compilation, whether a cache
  # is in use; a process that compiled before this call (a notebook, a test
  # session) would otherwise never read or write the cache.
  jax_cc.reset_cache()
  return cache_dir


def use_threefry_gpu_kernel() -> bool:
  """Makes GPU programs draw random bits with JAX's threefry CUDA kernel.

  By default JAX writes the threefry2x32 generator out as XLA element-wise
  operations, which XLA then compiles for every random draw of a program:
  the jitted initialisation of the ResNet-50 ImageNet recipe took 21 s to
  compile and run on one H100, 3.4 s with the kernel, and every one of its
  277 arrays had the same bits (benchmarks/accelerator.py records the
  phases). Sets ``jax_threefry_gpu_kernel_lowering`` for this process; CPU
  and TPU programs are unchanged.

  Returns:
    True if the option was set; False on a jax without it (nothing done).
  """
  if not hasattr(jax.config, "jax_threefry_gpu_kernel_lowering"):
    return False
  jax.config.update("jax_threefry_gpu_kernel_lowering", True)
  return True
