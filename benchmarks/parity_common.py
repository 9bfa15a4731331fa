"""Shared pieces of ``benchmarks/step_parity.py``'s per-method comparisons:
the checkout's commit, the per-step loss rows, the after-K-steps tensor
drift, the worst relative difference of two arrays, ``--set`` overrides,
float64 on ssljax's side, and the fixed run shape
(Fashion-MNIST images, an epoch of a few steps so that the schedules and
freezes turn within a 20-step run)."""

from __future__ import annotations

import json
import subprocess

import numpy as np

STEPS_PER_EPOCH = 5
BATCH = 16


def commit(path: str) -> str:
  try:
    return subprocess.run(["git", "-C", path, "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True
                          ).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "unknown (not a git checkout)"


def loss_rows(ours, theirs, reference) -> list:
  """One row per step: ssljax's loss, the official one, the official one on
  1 thread (the rounding reference), and the relative differences of ours
  and of the reference from the official loss."""
  return [{"step": k, "ssljax": ours[k], "official": theirs[k],
           "official_1_thread": reference[k],
           "relative": abs(ours[k] - theirs[k]) / abs(theirs[k]),
           "rounding": abs(reference[k] - theirs[k]) / abs(theirs[k])}
          for k in range(len(theirs))]


def recording_meters(module):
  """``module.AverageMeter`` (the official scripts' meter class) replaced
  by one that also keeps every value it is given; returns (the list of
  meters made since, in order, the class to put back). SwAV's and
  SimSiam's ``train`` make batch_time, data_time and losses, in that
  order, so the losses of one call are ``made[first + 2].values``."""
  made, meter = [], module.AverageMeter

  class Recording(meter):
    def __init__(self, *a, **k):
      super().__init__(*a, **k)
      self.values = []
      made.append(self)

    def update(self, val, n=1):
      self.values.append(val)
      super().update(val, n)

  module.AverageMeter = Recording
  return made, meter


def use_float64(config, float64: bool):
  """With ``float64``: x64 on and ssljax's model in float64 (``config``
  changed in place)."""
  if float64:
    import jax  # pylint: disable=import-outside-toplevel
    jax.config.update("jax_enable_x64", True)
    config.model.dtype = "float64"
  return config


def drift(ours: dict, theirs: dict, start: dict, keys) -> dict:
  """The worst tensor after K steps: ‖ours − theirs‖₂ / ‖theirs − start‖₂,
  the disagreement over how far the official step moved that tensor (a
  tensor's own scale would make small, barely moved tensors look far
  apart: Adam turns the rounding noise of a near-zero gradient into ±lr
  steps). Also the largest |ours − theirs| over all tensors."""
  ratios = {}
  for k in keys:
    moved = np.linalg.norm(np.asarray(theirs[k], np.float64)
                           - np.asarray(start[k], np.float64))
    diff = np.linalg.norm(np.asarray(ours[k], np.float64)
                          - np.asarray(theirs[k], np.float64))
    ratios[k] = float(diff / moved) if moved > 0 else (
        0.0 if diff == 0 else float("inf"))
  name = max(ratios, key=ratios.get)
  largest = max(float(np.abs(np.asarray(ours[k], np.float64)
                             - np.asarray(theirs[k], np.float64)).max())
                for k in keys)
  return {"worst_over_update": ratios[name], "tensor": name,
          "largest_abs_difference": largest}


def worst(a, b) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  scale = max(np.abs(b).max(), 1e-30)
  return float(np.abs(a - b).max() / scale)


def override(config, assignments):
  """``--set key=value`` on ssljax's side only (values parsed as JSON,
  else kept as str)."""
  for item in assignments or ():
    path, _, text = item.partition("=")
    try:
      value = json.loads(text)
    except ValueError:
      value = text
    node = config
    *parents, leaf = path.split(".")
    for part in parents:
      node = node[part]
    node[leaf] = value
  return config


def ssljax_setup(config, steps: int, *, seed: int = 0, float64: bool = False,
                 image_shape=(28, 28, 1)):
  """ssljax's side of a comparison, ready to step: the method, optimiser
  and initial state of ``config`` (in float64 throughout with ``float64``:
  parameters, method state and, through the caller's views, computation),
  the first ``steps`` × BATCH Fashion-MNIST train images, and the jitted
  train step and view maker.

  Returns:
    a namespace: spec, method, lr_fn, tx, state, initial ((params,
    method_state) as host arrays), dtype (np.float32 or np.float64),
    images (uint8 (steps·BATCH, 28, 28, 1)), labels, step (state, batch) ->
    (state, metrics), make_views (batch, key) -> views.
  """
  import types  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from ssljax import data, methods, optimizers, train, train_state  # pylint: disable=import-outside-toplevel
  spec = data.view_spec(config.views)
  method = methods.build(config)
  lr_fn = optimizers.create_learning_rate_fn(
      config.optim, config.batch_size, STEPS_PER_EPOCH, steps)
  tx = optimizers.create_optimizer(config.optim, lr_fn, STEPS_PER_EPOCH,
                                   steps)
  shapes = train.batch_spec(config, tuple(image_shape), spec=spec)
  state = train_state.create_train_state(method, tx, jax.random.key(seed),
                                         shapes)
  if float64:
    wide = lambda tree: jax.tree.map(
        lambda a: a.astype(jnp.float64)
        if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)
    params = wide(state.params)
    state = state.replace(params=params, opt_state=tx.init(params),
                          method_state=wide(state.method_state))
  source = data.open_split("fashion_mnist_local", f"train[:{steps * BATCH}]",
                           download=False)
  step = jax.jit(lambda s, b: train.train_step(
      s, b, spec=spec, seed=seed, total_steps=steps,
      steps_per_epoch=STEPS_PER_EPOCH))
  return types.SimpleNamespace(
      spec=spec, method=method, lr_fn=lr_fn, tx=tx, state=state,
      initial=jax.device_get((state.params, state.method_state)),
      dtype=np.float64 if float64 else np.float32,
      images=np.asarray(source.images), labels=np.asarray(source.labels),
      step=step,
      make_views=jax.jit(lambda b, k: data.device_views(b, k, spec)))
