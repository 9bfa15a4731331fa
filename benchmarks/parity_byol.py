"""BYOL's whole step against google-deepmind/deepmind-research's byol
(Grill et al. 2020, arXiv 2006.07733), for ``benchmarks/step_parity.py
--method byol``: the authors' ``ByolExperiment.update_pmap`` (their
``_update_fn`` under ``jax.pmap``: ``loss_fn``, their LARS, learning-rate
and target-EMA schedules) on the main job's small CNN (channels
16-32-64-512, written in haiku here) with BYOL's heads (their ``MLP``:
Linear with bias, BatchNorm, ReLU, Linear without bias; hidden 128, output
64), on 28 x 28 Fashion-MNIST images, batch 16, from ``configs/byol.py``'s
options with the official optimiser of the 1000-epoch preset: LARS, lr 0.2
per 256, weight decay 1.5e-6, η 1e-3, momentum 0.9, target momentum 0.996
-> 1, a warm-up of 1 epoch (5 steps) then a cosine to 0.

PY needs ssljax and dm-haiku (the official code is JAX and haiku; its
other imports, dm-acme's prefetch and TensorFlow's input pipeline, are not
used by the step and are stubbed where absent).
"""

from __future__ import annotations

import os
import sys
import time
import types

import numpy as np

from parity_common import (BATCH, STEPS_PER_EPOCH, commit, drift, override,
                           worst)
import parity_predictor as pp

HIDDEN, DIM = 128, 64
BN_DECAY = 0.9


def byol_config():
  """configs/byol.py at CPU size with the official LARS recipe."""
  from configs import byol  # pylint: disable=import-outside-toplevel
  c = byol.get_config()
  c.model.projector = (HIDDEN, DIM)
  c.model.predictor = (HIDDEN, DIM)
  c.batch_size = BATCH
  c.evals = {}
  c.optim.name = "lars"
  c.optim.learning_rate = 0.2  # _LR_PRESETS[1000]
  c.optim.weight_decay = 1.5e-6  # _WD_PRESETS[1000]
  c.optim.warmup_epochs = 1.0
  c.optim.lars.momentum = 0.9
  c.optim.lars.trust_coefficient = 1e-3  # eta
  c.optim.lars.momentum_buffer = "gradients"  # scale_by_lars, then -lr
  return c


def _encoder_class(channels):
  """ssljax's SmallCNN as a haiku module of the interface of the official
  encoders (``num_classes``, ``bn_config``; ``__call__(x, is_training)``)."""
  import haiku as hk  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

  class SmallCNN(hk.Module):
    def __init__(self, num_classes=None, bn_config=None, name=None):
      super().__init__(name=name or "small_cnn")
      del num_classes
      self._bn_config = dict(bn_config or {})

    def __call__(self, x, is_training):
      for i, width in enumerate(channels):
        if i:
          x = hk.avg_pool(x, (1, 2, 2, 1), (1, 2, 2, 1), padding="VALID")
        x = hk.Conv2D(width, 3, padding="SAME", with_bias=False)(x)
        x = hk.BatchNorm(**self._bn_config)(x, is_training=is_training)
        x = jax.nn.relu(x)
      return jnp.mean(x, axis=(1, 2))

  return SmallCNN


def _names(stages: int) -> dict:
  """haiku module names of the encoder's and heads' layers."""
  suffix = lambda i: "" if i == 0 else f"_{i}"
  return {"conv": [f"small_cnn/conv2_d{suffix(i)}" for i in range(stages)],
          "bn": [f"small_cnn/batch_norm{suffix(i)}" for i in range(stages)]}


def flat_tensors(config, params: dict, stats: dict | None, *,
                 parts=("encoder", "projector", "predictor"),
                 bn_start: dict | None = None, updates: int = 0) -> dict:
  """ssljax's leaves under the official haiku names, "module/name" ->
  array (haiku 0.0.17's names; haiku's shapes: BatchNorm (1, ..., C)). With ``stats`` the
  BatchNorm running averages too, as haiku keeps them: a zero-debiased
  average of the batch statistics from 0 (hk.ExponentialMovingAverage),
  which after U updates is (r − m^U r₀)/(1 − m^U) of flax's r from r₀
  (``bn_start``: ssljax's statistics at step 0)."""
  leaves = pp.Leaves(params, stats or {})
  names = _names(len(config.model.encoder_kwargs.channels))
  out = {}

  def bn(part, name, module, ndim):
    shape = (1,) * (ndim - 1) + (-1,)
    out[f"{module}/scale"] = leaves.get("params", part, name,
                                        "scale").reshape(shape)
    out[f"{module}/offset"] = leaves.get("params", part, name,
                                         "bias").reshape(shape)
    if stats is None:
      return
    for flax_key, hk_key in (("mean", "mean_ema"), ("var", "var_ema")):
      r = np.asarray(leaves.get("stats", part, name, flax_key), np.float64)
      r0 = np.asarray(bn_start[part][name][flax_key], np.float64)
      decayed = BN_DECAY ** updates
      out[f"{module}/~/{hk_key}/average"] = (
          (r - decayed * r0) / (1 - decayed)).reshape(shape)

  if "encoder" in parts:
    for i, (conv, norm) in enumerate(zip(names["conv"], names["bn"])):
      out[f"{conv}/w"] = leaves.get("params", "encoder", f"Conv_{i}",
                                    "kernel")
      bn("encoder", f"BatchNorm_{i}", norm, 4)
  for part in ("projector", "predictor"):
    if part not in parts:
      continue
    out[f"{part}/linear/w"] = leaves.get("params", part, "Dense_0",
                                         "kernel")
    bn(part, "BatchNorm_0", f"{part}/batch_norm", 2)
    out[f"{part}/linear_1/w"] = leaves.get("params", part, "Dense_1",
                                           "kernel")
  unused = leaves.unused()
  if unused:
    raise ValueError(f"ssljax leaves without a haiku name: {unused}")
  return out


def _official_flat(params: dict, state: dict | None = None) -> dict:
  """haiku params (and BatchNorm averages) of device 0, "module/name"."""
  out = {f"{m}/{k}": np.asarray(v)[0] for m, d in params.items()
         for k, v in d.items()}
  for m, d in (state or {}).items():
    if "average" in d:
      out[f"{m}/average"] = np.asarray(d["average"])[0]
  return out


def _import_official(peer: str):
  """byol.byol_experiment and its modules, with the shims this jax needs:
  ``jax.tree_map`` (removed in jax 0.6) is ``jax.tree.map``; dm-acme (its
  input prefetching) is stubbed where absent."""
  import jax  # pylint: disable=import-outside-toplevel
  if not hasattr(jax, "tree_map"):
    jax.tree_map = jax.tree.map
  try:
    import acme.jax.utils  # pylint: disable=import-outside-toplevel,unused-import
  except ImportError:
    for name in ("acme", "acme.jax", "acme.jax.utils"):
      sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["acme"].jax = sys.modules["acme.jax"]
    sys.modules["acme.jax"].utils = sys.modules["acme.jax.utils"]
  sys.path.insert(0, peer)
  from byol import byol_experiment  # pylint: disable=import-outside-toplevel,import-error
  from byol.utils import augmentations, dataset, networks  # pylint: disable=import-outside-toplevel,import-error
  return byol_experiment, augmentations, dataset, networks


def official_byol(peer: str, config, initial, views, float64: bool = False,
                  reverse: bool = False):
  """The official ``update_pmap`` step after step from ssljax's initial
  weights on the same views (the views are ssljax's: the official
  ``augmentations.postprocess`` and ``dataset.normalize_images`` are the
  identity here); ``reverse``: each batch's samples in reverse order (the
  same maths in another summation order: the rounding reference). Returns
  (losses, learning rates, target momenta, final state of device 0)."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  byol_experiment, augmentations, dataset, networks = _import_official(peer)
  augmentations.postprocess = lambda inputs, rng: inputs
  dataset.normalize_images = lambda images: images
  channels = tuple(config.model.encoder_kwargs.channels)
  networks.SsljaxSmallCNN = _encoder_class(channels)
  m, o = config.model, config.optim
  steps = len(views)
  experiment = byol_experiment.ByolExperiment(
      random_seed=0, num_classes=10, batch_size=config.batch_size,
      max_steps=steps, enable_double_transpose=False,
      base_target_ema=config.teacher.momentum,
      network_config=dict(
          projector_hidden_size=m.projector[0],
          projector_output_size=m.projector[-1],
          predictor_hidden_size=m.predictor[0],
          encoder_class="SsljaxSmallCNN", encoder_config={},
          bn_config={"decay_rate": BN_DECAY, "eps": 1e-5,
                     "cross_replica_axis": "i", "create_scale": True,
                     "create_offset": True}),
      optimizer_config=dict(weight_decay=o.weight_decay,
                            eta=o.lars.trust_coefficient,
                            momentum=o.lars.momentum),
      lr_schedule_config=dict(
          base_learning_rate=o.learning_rate,
          warmup_steps=int(o.warmup_epochs * STEPS_PER_EPOCH)),
      evaluation_config=dict(subset="test", batch_size=100),
      checkpointing_config=dict(use_checkpointing=False, checkpoint_dir=None,
                                save_checkpoint_interval=0, filename=""))
  dtype = np.float64 if float64 else np.float32
  as_batch = lambda v: {"view1": jnp.asarray(v[0][None], dtype),
                        "view2": jnp.asarray(v[1][None], dtype),
                        "labels": jnp.zeros((1, config.batch_size),
                                            jnp.int32)}
  rng = jnp.zeros((1, 2), jnp.uint32)
  state = jax.pmap(experiment._make_initial_state, axis_name="i")(  # pylint: disable=protected-access
      rng, as_batch(views[0]))
  params, method_state = initial
  ours = flat_tensors(config, params, None)
  teacher = method_state["teacher"]["params"]
  ours_target = flat_tensors(config, {**teacher,
                                      "predictor": params["predictor"]},
                             None)

  def load(tree, values):
    out = {}
    for module, d in tree.items():
      out[module] = {}
      for k, v in d.items():
        name = f"{module}/{k}"
        if name in values:
          new = np.asarray(values[name], dtype).reshape(v.shape[1:])[None]
        elif k == "b" and module.endswith("/linear"):
          new = np.zeros(v.shape, dtype)  # hidden bias: none in ssljax
        elif module == "classifier":  # the online classifier: not compared
          new = np.asarray(v, dtype)
        else:
          raise ValueError(f"no ssljax leaf for the official {name}")
        out[module][k] = jnp.asarray(new)
    return out

  cast = lambda tree: jax.tree.map(
      lambda a: jnp.asarray(a, dtype) if jnp.issubdtype(a.dtype, jnp.floating)
      else a, tree)
  state = state._replace(
      online_params=load(state.online_params, ours),
      target_params=load(state.target_params, ours_target),
      online_state=cast(state.online_state),
      target_state=cast(state.target_state))
  state = state._replace(opt_state=cast(jax.tree.map(jnp.zeros_like,
                                                     state.opt_state)))
  losses, lrs, taus = [], [], []
  for k, v in enumerate(views):
    if reverse:
      v = tuple(x[::-1] for x in v)
    state, logs = experiment.update_pmap(
        state, global_step=np.full((1,), k), rng=rng, inputs=as_batch(v))
    losses.append(float(np.asarray(logs["repr_loss"])[0]))
    lrs.append(float(np.asarray(logs["learning_rate"])[0]))
    taus.append(float(np.asarray(logs["tau"])[0]))
  return losses, lrs, taus, state


def compare(args):
  from ssljax import __version__  # pylint: disable=import-outside-toplevel
  if args.optimizer == "adamw":
    raise ValueError("the official BYOL step has LARS only")
  config = byol_config()
  official_config = byol_config()
  override(config, args.set)
  import jax  # pylint: disable=import-outside-toplevel
  if args.float64:
    jax.config.update("jax_enable_x64", True)
    config.model.dtype = "float64"
  started = time.time()
  initial, views, ours, schedules, final = pp.ssljax_run(
      config, args.steps, float64=args.float64)
  theirs, lrs, taus, official = official_byol(
      args.peer, official_config, initial, views, float64=args.float64)
  ref_losses, _, _, reference = official_byol(
      args.peer, official_config, initial, views, float64=args.float64,
      reverse=True)
  rows = []
  for k in range(args.steps):
    rows.append({"step": k, "ssljax": ours[k], "official": theirs[k],
                 "official_reversed_batch": ref_losses[k],
                 "relative": abs(ours[k] - theirs[k]) / abs(theirs[k]),
                 "rounding": abs(ref_losses[k] - theirs[k]) / abs(theirs[k])})
  params, state = final
  start_params, start_state = initial
  updates = 2 * args.steps  # two views per step through each network
  ours_online = flat_tensors(config, params, state["batch_stats"],
                             bn_start=start_state["batch_stats"],
                             updates=updates)
  ours_target = flat_tensors(
      config, state["teacher"]["params"], state["teacher"]["batch_stats"],
      parts=("encoder", "projector"),
      bn_start=start_state["teacher"]["batch_stats"], updates=updates)
  start_online = flat_tensors(official_config, start_params, None)
  start_target = flat_tensors(
      official_config, start_state["teacher"]["params"], None,
      parts=("encoder", "projector"))
  # haiku's statistics start at 0 (no average before the first update).
  for k in list(ours_online):
    if k.endswith("average"):
      start_online[k] = np.zeros_like(ours_online[k])
  for k in list(ours_target):
    if k.endswith("average"):
      start_target[k] = np.zeros_like(ours_target[k])
  sides = {"official": official, "reference": reference}
  got = {s: (_official_flat(st.online_params, st.online_state),
             _official_flat(st.target_params, st.target_state))
         for s, st in sides.items()}
  tensors, rounding = {}, {}
  for net, ours_t, start_t, index in (("online", ours_online, start_online, 0),
                                      ("target", ours_target, start_target,
                                       1)):
    groups = {
        "parameters": [k for k in ours_t if not k.endswith("average")],
        "bn_means": [k for k in ours_t if "mean_ema" in k],
        "bn_vars": [k for k in ours_t if "var_ema" in k]}
    for group, keys in groups.items():
      theirs_t = got["official"][index]
      tensors[f"{net} {group}"] = drift(ours_t, theirs_t, start_t, keys)
      rounding[f"{net} {group}"] = drift(got["reference"][index], theirs_t,
                                         start_t, keys)
  # The official MLPs' hidden biases (before BatchNorm; ssljax has none):
  # their gradient is 0 up to rounding, so they stay near their 0.
  hidden = [k for k in got["official"][0]
            if k.endswith("/linear/b")]
  zeros = {k: np.zeros_like(got["official"][0][k]) for k in hidden}
  tensors["online hidden biases (none in ssljax)"] = drift(
      zeros, got["official"][0], zeros, hidden)
  rounding["online hidden biases (none in ssljax)"] = drift(
      got["reference"][0], got["official"][0], zeros, hidden)
  tensors["lr schedule"] = worst(schedules["lr"], lrs)
  rounding["lr schedule"] = 0.0
  tensors["momentum schedule"] = worst(1 - np.asarray(schedules["momentum"]),
                                       1 - np.asarray(taus))  # of 1 − τ
  rounding["momentum schedule"] = 0.0
  return {"method": "byol", "peer": os.path.abspath(args.peer),
          "peer_commit": commit(args.peer), "ssljax": __version__,
          "steps": args.steps, "optimizer": config.optim.name,
          "ssljax_overrides": list(args.set or ()),
          "float64": args.float64, "losses": rows,
          "rounding_reference": "official, batch reversed",
          "after_K_steps": tensors, "rounding_after_K_steps": rounding,
          "wall_s": round(time.time() - started, 1)}
