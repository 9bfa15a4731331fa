"""Barlow Twins' whole step against facebookresearch/barlowtwins' main.py
(Zbontar, Jing, Misra, LeCun & Deny 2021, arXiv 2103.03230), for
``benchmarks/step_parity.py --method barlow_twins``: the main job's small
CNN with a last stage of 2,048 channels (the official ``BarlowTwins``
builds its projector on ResNet-50's 2,048-wide output) and
``configs/barlow_twins.py``'s projector at CPU size (128-64: bias-free
Linear, BatchNorm, ReLU, then a bias-free Linear, the official
projector), λ 0.0051, on 28 x 28 Fashion-MNIST views, batch 16.

The authors' side is main.py's own parts: ``BarlowTwins`` (its forward is
the loss: the projector, the affine-free BatchNorm of each branch, the
cross-correlation over the batch and its all-reduce, the on- and
off-diagonal terms), ``adjust_learning_rate`` (10 warm-up epochs, then a
cosine to 0.001 × the base rate, 0.2 for the weights and 0.0048 for the
biases and BatchNorm parameters) and ``LARS`` with both filters over the
two parameter groups (weight decay 1e-6, η 0.001, momentum 0.9: its
defaults); ``torchvision.models.resnet50`` returns the CNN written in
PyTorch (`parity_predictor.torch_cnn_class`), and the body of
``main_worker``'s loop is written out (``adjust_learning_rate``,
``zero_grad``, the forward, ``backward``, ``step``; AMP and its GradScaler
are off on a CPU). ssljax's side is ``configs/barlow_twins.py`` with those
values (`barlow_twins_config`): LARS with ``optim.lars.momentum_buffer =
"gradients"`` and ``optim.bias_norm_lr_factor = 0.024``. The run needs
more than 10 epochs of 5 steps (``--steps 60``).

Replaced for one CPU process: ``torch.distributed.all_reduce`` (nothing);
SyncBatchNorm and the DistributedDataParallel wrapper are not applied.
The official ``bn`` (BatchNorm1d(affine=False) of the loss) keeps running
statistics that nothing reads; ssljax's loss standardises without any, so
they are not compared. flax's BatchNorm averages the biased batch
variance, PyTorch's the unbiased one: the running variances are also
compared made unbiased (`parity_predictor.unbiased_running_vars`)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
import warnings

import numpy as np

from parity_common import (BATCH, STEPS_PER_EPOCH, commit, loss_rows,
                           override, use_float64, worst)
import parity_predictor as pp

HIDDEN, DIM = 128, 64
CHANNELS = (16, 32, 64, 2048)  # ResNet-50's output width, main.py's sizes[0]
WARMUP_EPOCHS = 10  # adjust_learning_rate's fixed warm-up
LR_WEIGHTS, LR_BIASES = 0.2, 0.0048  # --learning-rate-weights, -biases


def barlow_twins_config():
  """configs/barlow_twins.py at CPU size with main.py's network, schedule
  and LARS."""
  from configs import barlow_twins  # pylint: disable=import-outside-toplevel
  c = barlow_twins.get_config()
  c.model.encoder_kwargs.channels = CHANNELS
  c.model.projector = (HIDDEN, DIM)
  c.model.head_last_bias = False  # nn.Linear(..., bias=False)
  c.batch_size = BATCH
  c.optim.warmup_epochs = float(WARMUP_EPOCHS)
  c.optim.end_lr_factor = 1e-3  # end_lr = base_lr * 0.001
  c.optim.name = "lars"
  c.optim.learning_rate = LR_WEIGHTS  # per 256: base_lr = batch_size / 256
  c.optim.bias_norm_lr_factor = LR_BIASES / LR_WEIGHTS
  c.optim.weight_decay = 1e-6  # --weight-decay
  c.optim.lars.momentum = 0.9  # LARS's defaults
  c.optim.lars.trust_coefficient = 1e-3
  c.optim.lars.trust_ratio = "update"  # eta·‖p‖ / ‖g + λp‖
  c.optim.lars.momentum_buffer = "gradients"  # mu = m·mu + dp; p -= lr·mu
  c.evals = {}
  return c


def torch_state(config, params: dict, method_state: dict) -> dict:
  """ssljax's network (params, BatchNorm statistics) -> the official
  ``BarlowTwins``' state_dict names (``backbone``, ``projector``), all but
  the loss's ``bn``."""
  m = config.model
  return pp.cnn_mlp_tensors(
      params, method_state["batch_stats"], "backbone.features",
      len(m.encoder_kwargs.channels),
      [("projector", "projector", len(m.projector),
        dict(hidden_bias=False, last_bias=m.head_last_bias,
             last_bn=False))])


def _import_official(peer: str):
  """main.py of the checkout (its argument parser is built at import, not
  run)."""
  sys.path.insert(0, peer)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import main  # pylint: disable=import-outside-toplevel,import-error
  return main


def official_barlow_twins(peer: str, config, initial, views, threads=None,
                          float64: bool = False):
  """main.py's step, step after step, from ssljax's initial weights on the
  same views; (losses per step, the model's state_dict, the weights' and
  the biases' learning rates ``adjust_learning_rate`` set)."""
  import torch  # pylint: disable=import-outside-toplevel
  if threads:
    torch.set_num_threads(threads)
  main = _import_official(peer)
  torch.distributed.all_reduce = lambda tensor, *a, **k: None  # one process
  m = config.model
  cnn = pp.torch_cnn_class()
  resnet50 = main.torchvision.models.resnet50
  main.torchvision.models.resnet50 = lambda zero_init_residual=True: cnn(
      tuple(m.encoder_kwargs.channels), 1, 1)
  epochs = len(views) // STEPS_PER_EPOCH
  o = config.optim
  args = argparse.Namespace(
      projector="-".join(str(w) for w in m.projector), epochs=epochs,
      batch_size=config.batch_size, learning_rate_weights=LR_WEIGHTS,
      learning_rate_biases=LR_BIASES, weight_decay=o.weight_decay,
      lambd=config.loss.lambda_offdiag)
  try:
    model = main.BarlowTwins(args)
  finally:
    main.torchvision.models.resnet50 = resnet50
  if float64:
    model.double()
  params, state = initial
  start = {k: torch.from_numpy(np.array(v)) for k, v in
           torch_state(config, params, state).items()}
  missing, unexpected = model.load_state_dict(start, strict=False)
  assert all(k.startswith("bn.") for k in missing) and not unexpected, (
      missing, unexpected)
  # main_worker's two groups: weights, then biases and BatchNorm (1-D).
  groups = [{"params": [p for p in model.parameters() if p.ndim != 1]},
            {"params": [p for p in model.parameters() if p.ndim == 1]}]
  assert (o.lars.trust_coefficient, o.lars.momentum) == (1e-3, 0.9)
  optimizer = main.LARS(groups, lr=0, weight_decay=args.weight_decay,
                        weight_decay_filter=True, lars_adaptation_filter=True)
  loader = [None] * STEPS_PER_EPOCH  # adjust_learning_rate reads its len
  losses, lrs = [], {"weights": [], "biases": []}
  model.train()
  for step, (y1, y2) in enumerate(views):
    y1, y2 = (torch.from_numpy(np.ascontiguousarray(v.transpose(0, 3, 1, 2)))
              for v in (y1, y2))
    main.adjust_learning_rate(args, optimizer, loader, step)
    lrs["weights"].append(optimizer.param_groups[0]["lr"])
    lrs["biases"].append(optimizer.param_groups[1]["lr"])
    optimizer.zero_grad()
    with contextlib.redirect_stdout(io.StringIO()):
      value = model.forward(y1, y2)
    value.backward()
    optimizer.step()
    losses.append(float(value))
  out = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()
         if not k.startswith("bn.")}
  return losses, out, lrs


def compare(args):
  from ssljax import __version__  # pylint: disable=import-outside-toplevel
  if args.optimizer not in (None, "lars"):
    raise SystemExit("--method barlow_twins compares with the official "
                     "LARS only")
  if args.steps <= WARMUP_EPOCHS * STEPS_PER_EPOCH:
    raise SystemExit(f"--method barlow_twins needs --steps > "
                     f"{WARMUP_EPOCHS * STEPS_PER_EPOCH}: main.py warms up "
                     f"for {WARMUP_EPOCHS} epochs of {STEPS_PER_EPOCH} steps")
  config = barlow_twins_config()
  official_config = barlow_twins_config()
  use_float64(override(config, args.set), args.float64)
  started = time.time()
  initial, views, ours, schedules, final = pp.ssljax_run(
      config, args.steps, float64=args.float64)
  theirs, official, lrs = official_barlow_twins(
      args.peer, official_config, initial, views, float64=args.float64)
  ref_losses, reference, _ = official_barlow_twins(
      args.peer, official_config, initial, views, threads=1,
      float64=args.float64)
  rows = loss_rows(ours, theirs, ref_losses)
  ours_state = torch_state(config, *final)
  start = torch_state(official_config, *initial)
  m = config.model
  counts = pp.cnn_counts("backbone.features", m.encoder_kwargs.channels, 28,
                         BATCH)
  counts.update(pp.mlp_counts("projector", len(m.projector), False, BATCH))
  tensors, rounding = pp.compare_tensors(ours_state, official, reference,
                                         start, list(ours_state), counts,
                                         2 * args.steps)
  # ssljax's rate of step k (the weights'); the biases' is that times
  # optim.bias_norm_lr_factor.
  tensors["lr schedule, weights"] = worst(schedules["lr"], lrs["weights"])
  tensors["lr schedule, biases and norms"] = worst(
      np.asarray(schedules["lr"]) * config.optim.bias_norm_lr_factor,
      lrs["biases"])
  rounding["lr schedule, weights"] = 0.0
  rounding["lr schedule, biases and norms"] = 0.0
  return {"method": "barlow_twins", "peer": os.path.abspath(args.peer),
          "peer_commit": commit(args.peer), "ssljax": __version__,
          "steps": args.steps, "optimizer": "lars",
          "ssljax_overrides": list(args.set or ()),
          "float64": args.float64, "losses": rows,
          "after_K_steps": tensors, "rounding_after_K_steps": rounding,
          "wall_s": round(time.time() - started, 1)}
