"""Results of the baseline probes kept on disk, keyed by their inputs.

The raw-pixel and random-init probes (`ssljax.evaluators.raw_pixel_probe`,
`ssljax.evaluators.random_init_probe`) do not depend on training: every run
of a config on the same data, seed and encoder probes the same arrays. On a
2-core CPU they are about a third of the Fashion-MNIST main job's evaluation
time. Their metrics are stored under ``config.eval_inputs.baseline_cache``
and reused when a later run probes the same inputs.

The key is a BLAKE2b digest of everything the probe's result depends on:
the probe's options (L2 grid, validation fraction, iterations, search rows,
seed), the bytes, dtypes and shapes of the four arrays it fits and scores
(train/test features and labels), the source of `ssljax.probes` (the
solver), and the versions of ssljax, jax and jaxlib, the backend, its device
kind and the CPU architecture. Any change of data, encoder initialisation,
options or code gives another key, so a stale entry is never read; deleting
the directory is always safe.

The random-init probe's features cost a forward pass over both splits to
compute, only for their digest. In a single-process run whose splits are
in memory it first looks up a second key, `setup_key`, made of what the
features are a function of: the run's config (without ``epochs`` and
``num_steps``, which do not change the initial state), the source of the
whole ssljax package, the pixels and labels of both splits, the device and
process counts, and the same versions and options. On a hit neither the
features nor the probe are computed; on a miss the result is stored under
both keys.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform

import jax
import numpy as np

import ssljax
from ssljax import compilation_cache, probes

__all__ = ["cache_dir", "key", "setup_key", "load", "store", "METRICS",
           "SETUP_IGNORED"]

# The probe outputs stored and reused (what the evaluator yields).
METRICS = ("test_accuracy", "val_accuracy", "l2")
# Config fields left out of `setup_key`: the run's length, which changes
# neither the initial state nor the data.
SETUP_IGNORED = ("epochs", "num_steps")


def cache_dir(setting: str | None) -> str | None:
  """The directory of ``config.eval_inputs.baseline_cache``.

  Args:
    setting: ``"auto"`` (``$XDG_CACHE_HOME/ssljax/baselines``, else
      ``~/.cache/ssljax/baselines``), a directory path, or ``""``/None (off).

  Returns:
    an absolute path (not created here), or None when off.
  """
  if not setting:
    return None
  if setting == "auto":
    setting = os.path.join(os.path.dirname(compilation_cache.default_dir()),
                           "baselines")
  return os.path.abspath(os.path.expanduser(setting))


def _solver_source() -> bytes:
  with open(probes.__file__, "rb") as f:
    return f.read()


def key(kind: str, options: dict, arrays) -> str:
  """Hex digest naming one probe result.

  Args:
    kind: the evaluator type (e.g. ``"raw_pixel_probe"``).
    options: the probe's options, JSON-serialisable (tuples become lists).
    arrays: the probe's inputs (train X, train y, test X, test y), NumPy
      arrays of any dtype and shape.

  Returns:
    a 64-character hex string.
  """
  h = hashlib.blake2b(digest_size=32)
  device = jax.devices()[0]
  meta = dict(kind=kind, options=options, ssljax=ssljax.__version__,
              jax=jax.__version__, jaxlib=jax.lib.__version__,
              backend=jax.default_backend(),
              device_kind=getattr(device, "device_kind", ""),
              machine=platform.machine())
  h.update(json.dumps(meta, sort_keys=True).encode())
  h.update(hashlib.blake2b(_solver_source(), digest_size=32).digest())
  for a in arrays:
    a = np.ascontiguousarray(a)
    h.update(f"{a.dtype.str}{a.shape}".encode())
    h.update(memoryview(a).cast("B"))
  return h.hexdigest()


def _package_source_digest() -> bytes:
  """BLAKE2b of every .py file of the ssljax package (paths and bytes)."""
  root = os.path.dirname(os.path.abspath(ssljax.__file__))
  h = hashlib.blake2b(digest_size=32)
  for folder, dirs, files in os.walk(root):
    dirs.sort()
    for name in sorted(f for f in files if f.endswith(".py")):
      path = os.path.join(folder, name)
      h.update(os.path.relpath(path, root).encode() + b"\0")
      with open(path, "rb") as f:
        h.update(hashlib.blake2b(f.read(), digest_size=32).digest())
  return h.digest()


def setup_key(kind: str, options: dict, config, arrays) -> str:
  """Hex digest of what a baseline's inputs are computed from, for a lookup
  before they are computed (the random-init probe's features).

  Args:
    kind: the evaluator type.
    options: the probe's options, JSON-serialisable.
    config: the run's ConfigDict (`SETUP_IGNORED` fields left out).
    arrays: the data the inputs are computed from (train pixels, train
      labels, test pixels, test labels), NumPy arrays.

  Returns:
    a 64-character hex string, distinct from every `key`.
  """
  fields = json.loads(config.to_json())
  for name in SETUP_IGNORED:
    fields.pop(name, None)
  h = hashlib.blake2b(digest_size=32)
  h.update(key(kind + ":setup", dict(
      options=options, config=fields, devices=jax.device_count(),
      processes=jax.process_count()), arrays).encode())
  h.update(_package_source_digest())
  return h.hexdigest()


def load(directory: str | None, digest: str) -> dict | None:
  """The stored metrics of ``digest``, or None (off, absent or unreadable)."""
  if directory is None:
    return None
  try:
    with open(os.path.join(directory, digest + ".json")) as f:
      out = json.load(f)
  except (OSError, ValueError):
    return None
  if not isinstance(out, dict) or any(
      not isinstance(out.get(m), (int, float)) for m in METRICS):
    return None
  return {m: out[m] for m in METRICS}


def store(directory: str | None, digest: str, out: dict) -> None:
  """Writes ``out``'s `METRICS` atomically; a failure to write is ignored
  (the cache only saves time)."""
  if directory is None:
    return
  try:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, digest + ".json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
      json.dump({m: float(out[m]) for m in METRICS}, f)
    os.replace(tmp, path)
  except OSError:
    pass
