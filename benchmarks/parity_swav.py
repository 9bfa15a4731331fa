"""SwAV's whole step against facebookresearch/swav's ``train`` (Caron et al.
2020, arXiv 2006.09882), for ``benchmarks/step_parity.py --method swav``:
the main job's small CNN (channels 16-32-64-512) with SwAV's head (a
projector 128-64 with BatchNorm, L2 normalisation, 100 prototypes) on 28 x 28
Fashion-MNIST images, batch 16, from ``configs/swav.py``'s options (τ 0.1,
ε 0.05, 3 Sinkhorn-Knopp iterations, codes of crops 0 and 1, prototypes
renormalised every step and frozen for the first epoch of 5 steps, the
official multi-crop BatchNorm: the encoder over the crops of one resolution,
the projector over all crops), ``--local L`` local crops of 14 px.

The authors' side is main_swav.py's ``train`` itself, with its
``distributed_sinkhorn``, the prototype normalisation, the swapped loss and
the prototypes' cancelled gradients; its model is src/resnet50.py's
``ResNet.forward`` and ``forward_head`` (the crops of one resolution
through the backbone together, the head over all of them) on the CNN
written in PyTorch (`parity_predictor.torch_cnn_class`) in place of the
ResNet-50 backbone. The optimiser on both sides is, by default, the
config's AdamW, every parameter decayed
(``torch.optim.AdamW(model.parameters())``; ``weight_decay_mask="all"`` on
ssljax's side), or, with ``--optimizer larc``, the official one: main_swav.py's
``LARC(SGD(model.parameters(), momentum=0.9, weight_decay=wd),
trust_coefficient=0.001, clip=False)``, apex's LARC class loaded from the
``--apex`` checkout, against ssljax's LARS with ``lars.trust_ratio="larc"``
on every parameter (learning rate 0.6 per 256 and weight decay 1e-6, the
official swav_200ep_bs256_pretrain.sh values). Either way ssljax's
learning rate of each step is the official ``lr_schedule``. With
``--queue`` both sides keep a queue of 2 batches from the second epoch
(main_swav.py's ``main`` makes it and hands it to ``train`` and back).

Replaced for one CPU process: ``dist.all_reduce`` (of one process: the
tensor itself), ``Tensor.cuda`` (the tensor), the ``DistributedDataParallel``
wrapper (a module holding the model as ``.module``), the loader (ssljax's
views), apex (not installable here; only imported) and src/logger.py
(pandas, only imported). The official hidden Linear of the projector has a
bias that the BatchNorm after it cancels; ssljax's has none, and the
official one is left out of the comparison (its gradient is rounding
noise). The official prototypes are compared after the normalisation its
next step would start with (ssljax normalises after each step).

flax's BatchNorm averages the biased batch variance, PyTorch's the unbiased
one: without local crops ssljax's running variances are turned into
PyTorch's before comparing (`parity_predictor.unbiased_running_vars`); with
local crops the encoder's statistics move twice a step with two batch
sizes, and its running variances are compared as they are (the parameters
and running means are exact either way)."""

from __future__ import annotations

import argparse
import os
import sys
import time
import types

import numpy as np

from parity_common import (BATCH, STEPS_PER_EPOCH, commit, loss_rows,
                           override, recording_meters, use_float64)
import parity_predictor as pp

HIDDEN, DIM, PROTOTYPES = 128, 64, 100


def swav_config(num_local: int, optimizer: str = "adamw",
                queue: bool = False):
  """configs/swav.py at CPU size, AdamW decaying every parameter (the
  official optimiser's weight decay reaches all of them) or, ``optimizer``
  "larc", the official SGD in LARC (η 0.001, momentum 0.9, no clipping,
  on every parameter; lr 0.6 per 256, weight decay 1e-6). With ``queue``:
  a queue of 2 batches from epoch 1 (full, so used, from the third step
  of that epoch)."""
  from configs import swav  # pylint: disable=import-outside-toplevel
  c = swav.get_config()
  c.model.projector = (HIDDEN, DIM)
  c.model.num_prototypes = PROTOTYPES
  c.views.num_local = num_local
  c.views.local_size = 14
  c.batch_size = BATCH
  c.optim.warmup_epochs = 1.0
  c.optim.weight_decay_mask = "all"
  c.loss.queue_length = 2 * BATCH if queue else 0
  c.loss.epoch_queue_starts = 1.0
  if optimizer == "larc":
    c.optim.name = "lars"
    c.optim.learning_rate = 0.6  # swav_200ep_bs256_pretrain.sh --base_lr
    c.optim.weight_decay = 1e-6  # --wd
    c.optim.lars.update(trust_ratio="larc", clip=False, momentum=0.9,
                        trust_coefficient=0.001,
                        momentum_buffer="gradients")
    # SGD skips a parameter without gradient: a zero gradient leaves its
    # momentum at zero, so nothing is held.
    c.optim.frozen_adam_count = "advance"
  c.evals = {}
  return c


def torch_state(config, params: dict, method_state: dict) -> dict:
  """ssljax's network (params, BatchNorm statistics) -> the official
  model's state_dict names (``projection_head``, ``prototypes``) around
  the CNN (``backbone``), the prototypes (F, K) -> (K, F)."""
  m = config.model
  leaves = pp.Leaves(params, method_state["batch_stats"])
  state = pp.cnn_tensors(leaves, "backbone.features",
                         len(m.encoder_kwargs.channels))
  state.update(pp.mlp_tensors(leaves, "projector", "projection_head",
                              len(m.projector), hidden_bias=False,
                              last_bias=True, last_bn=False))
  state["prototypes.weight"] = leaves.get("params", "last_layer",
                                          "kernel").T
  unused = leaves.unused()
  if unused:
    raise ValueError(f"ssljax leaves without a PyTorch name: {unused}")
  return state


def _import_official(peer: str, apex: str | None = None):
  """main_swav and src.resnet50 of the checkout, with pandas (only
  imported) stubbed, and apex's LARC module loaded from the ``apex``
  checkout (stubbed without one: then only imported)."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  for name in ("apex", "apex.parallel"):
    sys.modules.setdefault(name, types.ModuleType(name))
  stub = types.ModuleType("apex.parallel.LARC")
  stub.LARC = None
  sys.modules.setdefault("apex.parallel.LARC", stub)
  larc = None
  if apex:
    path = os.path.join(apex, "apex", "parallel", "LARC.py")
    spec = importlib.util.spec_from_file_location("apex.parallel.LARC", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    larc = module.LARC
  logger = types.ModuleType("src.logger")
  logger.create_logger = logger.PD_Stats = None
  sys.modules.setdefault("src.logger", logger)
  sys.path.insert(0, peer)
  import main_swav  # pylint: disable=import-outside-toplevel,import-error
  import src.resnet50  # pylint: disable=import-outside-toplevel,import-error
  # main_swav.py's name for it (a module imported earlier in the process
  # keeps the stub's None).
  main_swav.LARC = larc
  return main_swav, src.resnet50


def official_swav(peer: str, config, initial, views, lrs, threads=None,
                  float64: bool = False, apex: str | None = None):
  """The official ``train`` of main_swav.py, epoch after epoch, from
  ssljax's initial weights on the same views with ssljax's learning rates;
  (losses per step, the model's state_dict)."""
  import torch  # pylint: disable=import-outside-toplevel
  import torch.distributed as dist  # pylint: disable=import-outside-toplevel
  from torch import nn  # pylint: disable=import-outside-toplevel
  if threads:
    torch.set_num_threads(threads)
  main_swav, resnet = _import_official(peer, apex)
  torch.Tensor.cuda = lambda self, *a, **k: self
  dist.all_reduce = lambda tensor, *a, **k: None  # one process

  m = config.model
  cnn = pp.torch_cnn_class()

  class Model(nn.Module):
    """The official ResNet's multi-crop forward and head on the CNN."""
    forward = resnet.ResNet.forward
    forward_head = resnet.ResNet.forward_head

    def __init__(self):
      super().__init__()
      self.backbone = cnn(tuple(m.encoder_kwargs.channels), 1, 1)
      del self.backbone.fc
      self.l2norm = True
      self.projection_head = nn.Sequential(
          nn.Linear(self.backbone_width(), m.projector[0]),
          nn.BatchNorm1d(m.projector[0]), nn.ReLU(inplace=True),
          nn.Linear(m.projector[0], m.projector[1]))
      self.prototypes = nn.Linear(m.projector[1], m.num_prototypes,
                                  bias=False)

    def backbone_width(self):
      return m.encoder_kwargs.channels[-1]

    def forward_backbone(self, x):
      return self.backbone.features(x).mean(dim=(2, 3))

  class Wrapper(nn.Module):  # DistributedDataParallel's .module
    def __init__(self, module):
      super().__init__()
      self.module = module

    def forward(self, inputs):
      return self.module(inputs)

  model = Model()
  if float64:
    model.double()
  params, state = initial
  start = {k: torch.from_numpy(np.array(v)) for k, v in
           torch_state(config, params, state).items()}
  missing, unexpected = model.load_state_dict(start, strict=False)
  # Only the hidden Linear's bias is missing: ssljax has none (BatchNorm
  # cancels it); it starts at zero.
  assert list(missing) == ["projection_head.0.bias"] and not unexpected, (
      missing, unexpected)
  with torch.no_grad():
    model.projection_head[0].bias.zero_()
  wrapped = Wrapper(model)
  loss_config = config.loss
  main_swav.args = argparse.Namespace(
      crops_for_assign=list(loss_config.crops_for_assign),
      nmb_crops=[config.views.num_global] + ([config.views.num_local]
                                             if config.views.num_local
                                             else []),
      temperature=loss_config.temperature, epsilon=loss_config.epsilon,
      sinkhorn_iterations=loss_config.num_iterations, world_size=1,
      freeze_prototypes_niters=int(round(
          config.optim.freeze_last_layer_epochs * STEPS_PER_EPOCH)),
      use_fp16=False, rank=1)  # rank 1: no logging
  if config.optim.name == "lars":  # main_swav.py's
    optimizer = main_swav.LARC(
        optimizer=torch.optim.SGD(model.parameters(), lr=lrs[0],
                                  momentum=config.optim.lars.momentum,
                                  weight_decay=config.optim.weight_decay),
        trust_coefficient=config.optim.lars.trust_coefficient, clip=False)
  else:
    optimizer = torch.optim.AdamW(model.parameters(), lrs[0],
                                  weight_decay=config.optim.weight_decay)
  losses, meter = [], main_swav.AverageMeter
  queue = None
  try:
    for epoch in range(len(views) // STEPS_PER_EPOCH):
      # main_swav.py's main: the queue made at the start of the first epoch
      # >= epoch_queue_starts, handed to train and back.
      if (loss_config.queue_length > 0 and queue is None
          and epoch >= loss_config.epoch_queue_starts):
        queue = torch.zeros(len(loss_config.crops_for_assign),
                            loss_config.queue_length, m.projector[-1],
                            dtype=torch.float64 if float64 else torch.float32)
      loader = [[torch.from_numpy(np.ascontiguousarray(
          v.transpose(0, 3, 1, 2))) for v in views[k]]
                for k in range(epoch * STEPS_PER_EPOCH,
                               (epoch + 1) * STEPS_PER_EPOCH)]
      made, _ = recording_meters(main_swav)
      _, queue = main_swav.train(loader, wrapped, optimizer, epoch,
                                 np.asarray(lrs), queue)
      losses += made[2].values  # batch_time, data_time, losses
      main_swav.AverageMeter = meter
  finally:
    main_swav.AverageMeter = meter
  out = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
  # The normalisation the next official step starts with.
  w = out["prototypes.weight"]
  out["prototypes.weight"] = w / np.maximum(
      np.linalg.norm(w, axis=1, keepdims=True), 1e-12)
  return losses, out


def ssljax_swav(config, steps: int, seed: int = 0, float64: bool = False):
  """(initial params and state, views per step, losses, learning rates,
  final params and state) of ssljax's train_step."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

  def unit_prototypes(state):
    # The prototypes' columns were made unit in float32 (init), then
    # widened: made unit again in the run's dtype, as the official step's
    # first normalisation does.
    kernel = state.params["last_layer"]["kernel"]
    kernel = kernel / jnp.linalg.norm(kernel, axis=0, keepdims=True)
    return state.replace(params={**state.params,
                                 "last_layer": {"kernel": kernel}})

  initial, views, losses, schedules, final = pp.ssljax_run(
      config, steps, seed=seed, float64=float64, prepare=unit_prototypes)
  return initial, views, losses, schedules["lr"], final


def compare(args):
  from ssljax import __version__  # pylint: disable=import-outside-toplevel
  optimizer = args.optimizer or "adamw"
  if optimizer not in ("adamw", "larc"):
    raise SystemExit("--method swav compares with the config's AdamW or "
                     "the official LARC (--optimizer larc --apex PATH)")
  apex = getattr(args, "apex", None)
  if optimizer == "larc" and not apex:
    raise SystemExit("--optimizer larc needs --apex PATH (an NVIDIA/apex "
                     "checkout with apex/parallel/LARC.py)")
  queue = bool(getattr(args, "queue", False))
  config = swav_config(args.local, optimizer, queue)
  official_config = swav_config(args.local, optimizer, queue)
  use_float64(override(config, args.set), args.float64)
  started = time.time()
  initial, views, ours, lrs, final = ssljax_swav(config, args.steps,
                                                 float64=args.float64)
  theirs, official = official_swav(args.peer, official_config, initial,
                                   views, lrs, float64=args.float64,
                                   apex=apex)
  ref_losses, reference = official_swav(args.peer, official_config, initial,
                                        views, lrs, threads=1,
                                        float64=args.float64, apex=apex)
  rows = loss_rows(ours, theirs, ref_losses)
  ours_state = torch_state(config, *final)
  start = torch_state(official_config, *initial)
  counts = None
  if not args.local:
    # Every BatchNorm moves once a step with one batch size: ssljax's
    # running variances made unbiased, as PyTorch keeps them.
    m = config.model
    views_per_step = config.views.num_global
    counts = pp.cnn_counts("backbone.features", m.encoder_kwargs.channels,
                           28, views_per_step * BATCH)
    counts.update(pp.mlp_counts("projection_head", len(m.projector), False,
                                views_per_step * BATCH))
  tensors, rounding = pp.compare_tensors(ours_state, official, reference,
                                         start, list(ours_state), counts,
                                         args.steps)
  return {"method": "swav", "peer": os.path.abspath(args.peer),
          "peer_commit": commit(args.peer), "ssljax": __version__,
          "steps": args.steps, "local_crops": args.local,
          "optimizer": optimizer, "queue": queue,
          "apex_commit": commit(apex) if apex else None,
          "ssljax_overrides": list(args.set or ()),
          "float64": args.float64, "losses": rows,
          "after_K_steps": tensors, "rounding_after_K_steps": rounding,
          "wall_s": round(time.time() - started, 1)}
