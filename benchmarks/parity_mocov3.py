"""MoCo v3's whole step against facebookresearch/moco-v3's ``train`` (Chen,
Xie & He 2021, arXiv 2104.02057), for ``benchmarks/step_parity.py --method
mocov3``: the main job's small CNN (channels 16-32-64-512) with the
official ResNet recipe's heads (``MoCo_ResNet``: a 2-layer projector ending
in BatchNorm1d(affine=False), a 2-layer predictor, no biases; hidden 128,
output 64) on 28 x 28 Fashion-MNIST images, batch 16, from
``configs/mocov3.py``'s options (τ = 0.2, momentum 0.99 -> 1 on a cosine,
linear warm-up for 1 epoch then a half cosine to 0). The optimiser is the
config's AdamW (the official ``--optimizer adamw``), or with ``--optimizer
lars`` the official ResNet recipe's LARS (lr 0.6 per 256, weight decay
1e-6, momentum 0.9, trust coefficient 1e-3) on both sides."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
import types
import warnings

import numpy as np

from parity_common import (BATCH, STEPS_PER_EPOCH, commit, drift, override,
                           worst)
import parity_predictor as pp

HIDDEN, DIM = 128, 64


def mocov3_config(optimizer: str | None = None):
  """configs/mocov3.py at CPU size; ``optimizer`` "lars": the official
  ResNet recipe's LARS in place of the config's AdamW."""
  from configs import mocov3  # pylint: disable=import-outside-toplevel
  c = mocov3.get_config()
  c.model.projector = (HIDDEN, DIM)
  c.model.predictor = (HIDDEN, DIM)
  c.batch_size = BATCH
  c.optim.warmup_epochs = 1.0
  c.evals = {}
  if optimizer == "lars":
    c.optim.name = "lars"
    c.optim.learning_rate = 0.6  # main_moco.py's --lr default, per 256
    c.optim.weight_decay = 1e-6  # --wd default
    c.optim.weight_decay_mask = "kernels"  # moco/optimizer.py: ndim > 1 only
    c.optim.lars.momentum = 0.9
    c.optim.lars.trust_coefficient = 1e-3
    c.optim.lars.momentum_buffer = "gradients"
  return c


def torch_state(config, params: dict, method_state: dict) -> dict:
  """ssljax's online network (params, BatchNorm statistics) and momentum
  teacher -> the official ``MoCo_ResNet``'s state_dict (every leaf)."""
  m = config.model
  stages = len(m.encoder_kwargs.channels)
  heads = dict(hidden_bias=False, last_bias=m.head_last_bias)
  state = {}
  online = pp.Leaves(params, method_state["batch_stats"])
  teacher = pp.Leaves(method_state["teacher"]["params"],
                      method_state["teacher"]["batch_stats"])
  for leaves, name in ((online, "base_encoder"), (teacher,
                                                  "momentum_encoder")):
    state.update(pp.cnn_tensors(leaves, f"{name}.features", stages))
    state.update(pp.mlp_tensors(leaves, "projector", f"{name}.fc",
                                len(m.projector),
                                last_bn=m.projector_last_bn, **heads))
  state.update(pp.mlp_tensors(online, "predictor", "predictor",
                              len(m.predictor),
                              last_bn=m.predictor_last_bn, **heads))
  unused = online.unused() + teacher.unused()
  if unused:
    raise ValueError(f"ssljax leaves without a PyTorch name: {unused}")
  return state


def _import_official(peer: str):
  """(main_moco, moco.builder, moco.optimizer) of the checkout, importable
  on this machine: ``vits`` (imported by main_moco, unused here) reads
  ``timm.models.layers.helpers.to_2tuple``, which timm 1.0 keeps in
  ``timm.layers``."""
  sys.path.insert(0, peer)
  try:
    import timm.models.layers.helpers  # pylint: disable=import-outside-toplevel,unused-import
  except ImportError:
    import timm.layers  # pylint: disable=import-outside-toplevel
    shim = types.ModuleType("timm.models.layers.helpers")
    shim.to_2tuple = timm.layers.to_2tuple
    sys.modules["timm.models.layers.helpers"] = shim
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import main_moco  # pylint: disable=import-outside-toplevel,import-error
    import moco.builder  # pylint: disable=import-outside-toplevel,import-error
    import moco.optimizer  # pylint: disable=import-outside-toplevel,import-error
  return main_moco, moco.builder, moco.optimizer


def official_mocov3(peer: str, config, initial, views, threads: int | None,
                    float64: bool = False):
  """The official ``train`` of main_moco.py, epoch after epoch, from
  ssljax's initial weights on the same views, with the official schedules
  (``adjust_learning_rate``, ``adjust_moco_momentum``) computed from the
  config's values; (losses per step, the model's state_dict, the learning
  rates and momenta it used)."""
  import torch  # pylint: disable=import-outside-toplevel
  import torch.distributed as dist  # pylint: disable=import-outside-toplevel
  if threads:
    torch.set_num_threads(threads)
  main_moco, builder, lars = _import_official(peer)
  # One CPU process: no CUDA, no process group (concat_all_gather of one
  # process is the tensor itself; rank 0).
  torch.Tensor.cuda = lambda self, *a, **k: self
  dist.get_world_size = lambda *a, **k: 1
  dist.get_rank = lambda *a, **k: 0

  def all_gather(tensors, tensor, async_op=False):
    del async_op
    tensors[0].copy_(tensor)

  dist.all_gather = all_gather

  m = config.model
  cnn = pp.torch_cnn_class()
  model = builder.MoCo_ResNet(
      lambda num_classes: cnn(tuple(m.encoder_kwargs.channels), 1,
                              num_classes),
      m.projector[-1], m.projector[0], config.loss.temperature)
  if float64:
    model.double()
  params, state = initial
  model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in
                         torch_state(config, params, state).items()},
                        strict=True)
  epochs = len(views) // STEPS_PER_EPOCH
  o = config.optim
  args = argparse.Namespace(
      lr=o.learning_rate * config.batch_size / 256,  # as main_worker
      warmup_epochs=o.warmup_epochs, epochs=epochs,
      moco_m=config.teacher.momentum, moco_m_cos=True,
      weight_decay=o.weight_decay, momentum=o.lars.momentum,
      gpu=None, rank=0, print_freq=STEPS_PER_EPOCH)
  if o.name == "lars":
    assert o.lars.trust_coefficient == 1e-3  # moco/optimizer.py's default
    optimizer = lars.LARS(model.parameters(), args.lr,
                          weight_decay=args.weight_decay,
                          momentum=args.momentum)
  else:
    optimizer = torch.optim.AdamW(model.parameters(), args.lr,
                                  weight_decay=args.weight_decay)
  # AMP off: the official autocast is torch.cuda.amp.autocast, which turns
  # itself off without CUDA, and a disabled GradScaler passes the loss and
  # the step through.
  scaler = torch.cuda.amp.GradScaler(enabled=False)
  losses, used = [], {"lr": [], "momentum": []}

  class Writer:  # the summary writer of rank 0: the loss of every step
    def add_scalar(self, name, value, step):
      del name, step
      losses.append(float(value))

  adjust_lr, adjust_m = (main_moco.adjust_learning_rate,
                         main_moco.adjust_moco_momentum)

  def record_lr(*a):
    used["lr"].append(adjust_lr(*a))
    return used["lr"][-1]

  def record_m(*a):
    used["momentum"].append(adjust_m(*a))
    return used["momentum"][-1]

  main_moco.adjust_learning_rate = record_lr
  main_moco.adjust_moco_momentum = record_m
  try:
    for epoch in range(epochs):
      loader = [([torch.from_numpy(np.ascontiguousarray(
          v.transpose(0, 3, 1, 2))) for v in views[k]], None)
                for k in range(epoch * STEPS_PER_EPOCH,
                               (epoch + 1) * STEPS_PER_EPOCH)]
      with contextlib.redirect_stdout(io.StringIO()), \
          warnings.catch_warnings():
        warnings.simplefilter("ignore")
        main_moco.train(loader, model, optimizer, scaler, Writer(), epoch,
                        args)
  finally:
    main_moco.adjust_learning_rate, main_moco.adjust_moco_momentum = (
        adjust_lr, adjust_m)
  out = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
  return losses, out, used


def compare(args):
  from ssljax import __version__  # pylint: disable=import-outside-toplevel
  config = mocov3_config(args.optimizer)
  official_config = mocov3_config(args.optimizer)
  override(config, args.set)
  if args.float64:
    import jax  # pylint: disable=import-outside-toplevel
    jax.config.update("jax_enable_x64", True)
    config.model.dtype = "float64"
  started = time.time()
  initial, views, ours, schedules, final = pp.ssljax_run(
      config, args.steps, float64=args.float64)
  theirs, official, used = official_mocov3(
      args.peer, official_config, initial, views, threads=None,
      float64=args.float64)
  ref_losses, reference, _ = official_mocov3(
      args.peer, official_config, initial, views, threads=1,
      float64=args.float64)
  rows = []
  for k in range(args.steps):
    rows.append({"step": k, "ssljax": ours[k], "official": theirs[k],
                 "official_1_thread": ref_losses[k],
                 "relative": abs(ours[k] - theirs[k]) / abs(theirs[k]),
                 "rounding": abs(ref_losses[k] - theirs[k]) / abs(theirs[k])})
  ours_state = torch_state(config, *final)
  start = torch_state(official_config, *initial)
  online = pp.split(official, [k for k in official
                               if not k.startswith("momentum_encoder.")])
  target = pp.split(official, [k for k in official
                               if k.startswith("momentum_encoder.")])
  parts = {f"{net} {group}": keys for net, groups in
           (("online", online), ("target", target))
           for group, keys in groups.items()}
  tensors = {p: drift(ours_state, official, start, keys)
             for p, keys in parts.items()}
  rounding = {p: drift(reference, official, start, keys)
              for p, keys in parts.items()}
  # The running variances again, ssljax's turned into PyTorch's unbiased
  # ones: what is left is the step's, not the convention's.
  m = config.model
  counts = {}
  for name in ("base_encoder", "momentum_encoder"):
    counts.update(pp.cnn_counts(f"{name}.features", m.encoder_kwargs.channels,
                                28, BATCH))
    counts.update(pp.mlp_counts(f"{name}.fc", len(m.projector),
                                m.projector_last_bn, BATCH))
  counts.update(pp.mlp_counts("predictor", len(m.predictor),
                              m.predictor_last_bn, BATCH))
  unbiased = pp.unbiased_running_vars(ours_state, start, counts,
                                      2 * args.steps)
  for net in ("online", "target"):
    keys = parts[f"{net} bn_vars"]
    tensors[f"{net} bn_vars, ssljax's made unbiased"] = drift(
        unbiased, official, start, keys)
    rounding[f"{net} bn_vars, ssljax's made unbiased"] = rounding[
        f"{net} bn_vars"]
  # The schedules: ssljax's lr of step k against main_moco's; ssljax's
  # momentum after step k against the official one at the start of k + 1.
  tensors["lr schedule"] = worst(schedules["lr"], used["lr"])
  rounding["lr schedule"] = 0.0
  tensors["momentum schedule"] = worst(
      1 - np.asarray(schedules["momentum"][:-1]),
      1 - np.asarray(used["momentum"][1:]))  # of 1 − τ
  rounding["momentum schedule"] = 0.0
  return {"method": "mocov3", "peer": os.path.abspath(args.peer),
          "peer_commit": commit(args.peer), "ssljax": __version__,
          "steps": args.steps, "optimizer": config.optim.name,
          "ssljax_overrides": list(args.set or ()),
          "float64": args.float64, "losses": rows,
          "after_K_steps": tensors, "rounding_after_K_steps": rounding,
          "wall_s": round(time.time() - started, 1)}
