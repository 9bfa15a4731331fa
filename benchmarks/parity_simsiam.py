"""SimSiam's whole step against facebookresearch/simsiam's main_simsiam.py
(Chen & He 2021, arXiv 2011.10566), for ``benchmarks/step_parity.py
--method simsiam``: the main job's small CNN (channels 16-32-64-512) with
the official heads at CPU size (``simsiam.builder.SimSiam``: a 3-layer
projector 512-512-64, bias-free hidden Linears, a last Linear whose bias
is frozen, then BatchNorm1d(affine=False); a predictor 32-64, its hidden
Linear bias-free) on 28 x 28 Fashion-MNIST views, batch 16.

The authors' side is main_simsiam.py's ``train`` itself (the symmetrised
negative cosine with ``nn.CosineSimilarity``, ``zero_grad``, ``backward``,
``step``) for each epoch after its ``adjust_learning_rate`` (the cosine
per epoch, init_lr = lr × batch / 256), with ``torch.optim.SGD`` over all
parameters (lr 0.05 per 256, momentum 0.9, weight decay 1e-4: its
defaults; without ``--fix-pred-lr``), the builder's ``SimSiam`` around the
CNN written in PyTorch (`parity_predictor.torch_cnn_class`) as its
``base_encoder``. ssljax's side is ``configs/simsiam.py`` with those values
(`simsiam_config`): ``optim.name = "sgd"``, ``optim.schedule_unit =
"epoch"``, ``optim.weight_decay_mask = "all"``, the projector ending in
BatchNorm (``model.projector_last_bn``).

The frozen bias (``encoder.fc[6].bias.requires_grad = False``) is 0 on
both sides (ssljax's is trainable, but the BatchNorm after it gives it no
gradient, so it stays 0) and is left out of the comparison. flax's
BatchNorm averages the biased batch variance, PyTorch's the unbiased one:
the running variances are also compared made unbiased
(`parity_predictor.unbiased_running_vars`)."""

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
                           override, recording_meters, use_float64, worst)
import parity_predictor as pp

DIM, PRED = 64, 32


def simsiam_config():
  """configs/simsiam.py at CPU size with main_simsiam.py's heads, SGD and
  per-epoch cosine."""
  from configs import simsiam  # pylint: disable=import-outside-toplevel
  c = simsiam.get_config()
  width = c.model.encoder_kwargs.channels[-1]  # the builder's prev_dim
  c.model.projector = (width, width, DIM)
  c.model.predictor = (PRED, DIM)
  c.model.projector_last_bn = True  # nn.BatchNorm1d(dim, affine=False)
  c.batch_size = BATCH
  c.optim.name = "sgd"
  c.optim.learning_rate = 0.05  # --lr (per 256)
  c.optim.weight_decay = 1e-4  # --wd
  c.optim.weight_decay_mask = "all"  # SGD(model.parameters(), ...)
  c.optim.sgd.momentum = 0.9  # --momentum
  c.optim.warmup_epochs = 0.0  # adjust_learning_rate: no warm-up
  c.optim.end_lr_factor = 0.0  # ... a cosine to 0
  c.optim.schedule_unit = "epoch"  # ... set once per epoch
  c.evals = {}
  return c


def torch_state(config, params: dict, method_state: dict) -> dict:
  """ssljax's network -> the official ``SimSiam``'s state_dict names
  (``encoder.features``, ``encoder.fc``, ``predictor``), the frozen bias
  included."""
  m = config.model
  return pp.cnn_mlp_tensors(
      params, method_state["batch_stats"], "encoder.features",
      len(m.encoder_kwargs.channels),
      [("projector", "encoder.fc", len(m.projector),
        dict(hidden_bias=False, last_bias=True, last_bn=True)),
       ("predictor", "predictor", len(m.predictor),
        dict(hidden_bias=False, last_bias=True, last_bn=False))])


def _frozen_bias(config) -> str:
  """The official name of the projector's frozen last bias."""
  return f"encoder.fc.{3 * (len(config.model.projector) - 1)}.bias"


def official_simsiam(peer: str, config, initial, views, threads=None,
                     float64: bool = False):
  """main_simsiam.py's ``train``, epoch after epoch after its
  ``adjust_learning_rate``, from ssljax's initial weights on the same
  views; (losses per step, the model's state_dict, the rate per step)."""
  import torch  # pylint: disable=import-outside-toplevel
  from torch import nn  # pylint: disable=import-outside-toplevel
  if threads:
    torch.set_num_threads(threads)
  sys.path.insert(0, peer)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import main_simsiam  # pylint: disable=import-outside-toplevel,import-error
    import simsiam.builder  # pylint: disable=import-outside-toplevel,import-error
  m = config.model
  cnn = pp.torch_cnn_class()
  model = simsiam.builder.SimSiam(
      lambda num_classes, zero_init_residual=True: cnn(
          tuple(m.encoder_kwargs.channels), 1, num_classes),
      dim=m.projector[-1], pred_dim=m.predictor[0])
  if float64:
    model.double()
  params, state = initial
  start = {k: torch.from_numpy(np.array(v)) for k, v in
           torch_state(config, params, state).items()}
  # ssljax's frozen bias is 0 (`ssljax_simsiam`), so the official one is.
  model.load_state_dict(start, strict=True)
  frozen = _frozen_bias(config)
  o = config.optim
  epochs = len(views) // STEPS_PER_EPOCH
  args = argparse.Namespace(epochs=epochs, gpu=None, print_freq=10 ** 9,
                            fix_pred_lr=False)
  init_lr = o.learning_rate * config.batch_size / 256  # as main_worker
  criterion = nn.CosineSimilarity(dim=1)
  optimizer = torch.optim.SGD(model.parameters(), init_lr,
                              momentum=o.sgd.momentum,
                              weight_decay=o.weight_decay)
  losses, lrs = [], []
  made, meter = recording_meters(main_simsiam)
  try:
    for epoch in range(epochs):
      main_simsiam.adjust_learning_rate(optimizer, init_lr, epoch, args)
      lrs += [optimizer.param_groups[0]["lr"]] * STEPS_PER_EPOCH
      loader = [([torch.from_numpy(np.ascontiguousarray(
          v.transpose(0, 3, 1, 2))) for v in views[k]], None)
                for k in range(epoch * STEPS_PER_EPOCH,
                               (epoch + 1) * STEPS_PER_EPOCH)]
      first = len(made)
      with contextlib.redirect_stdout(io.StringIO()):
        main_simsiam.train(loader, model, criterion, optimizer, epoch, args)
      losses += made[first + 2].values  # batch_time, data_time, losses
  finally:
    main_simsiam.AverageMeter = meter
  out = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()
         if k != frozen}
  return losses, out, lrs


def ssljax_simsiam(config, steps: int, seed: int = 0, float64: bool = False):
  """(initial params and state, views per step, losses, learning rates,
  final params and state) of ssljax's train_step, the projector's last
  bias started at 0 (the official one is frozen; at 0 on both sides)."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  last = f"Dense_{len(config.model.projector) - 1}"

  def zero_frozen_bias(state):
    projector = dict(state.params["projector"])
    projector[last] = {**projector[last],
                       "bias": jnp.zeros_like(projector[last]["bias"])}
    return state.replace(params={**state.params, "projector": projector})

  initial, views, losses, schedules, final = pp.ssljax_run(
      config, steps, seed=seed, float64=float64, prepare=zero_frozen_bias)
  return initial, views, losses, schedules["lr"], final


def compare(args):
  from ssljax import __version__  # pylint: disable=import-outside-toplevel
  if args.optimizer not in (None, "sgd"):
    raise SystemExit("--method simsiam compares with the official SGD only")
  config = simsiam_config()
  official_config = simsiam_config()
  use_float64(override(config, args.set), args.float64)
  started = time.time()
  initial, views, ours, our_lrs, final = ssljax_simsiam(
      config, args.steps, float64=args.float64)
  theirs, official, lrs = official_simsiam(
      args.peer, official_config, initial, views, float64=args.float64)
  ref_losses, reference, _ = official_simsiam(
      args.peer, official_config, initial, views, threads=1,
      float64=args.float64)
  rows = loss_rows(ours, theirs, ref_losses)
  ours_state = torch_state(config, *final)
  start = torch_state(official_config, *initial)
  m = config.model
  counts = pp.cnn_counts("encoder.features", m.encoder_kwargs.channels, 28,
                         BATCH)
  counts.update(pp.mlp_counts("encoder.fc", len(m.projector), True, BATCH))
  counts.update(pp.mlp_counts("predictor", len(m.predictor), False, BATCH))
  tensors, rounding = pp.compare_tensors(ours_state, official, reference,
                                         start,
                                         [k for k in ours_state
                                          if k != _frozen_bias(config)],
                                         counts,
                                         2 * args.steps)
  tensors["lr schedule"] = worst(our_lrs, lrs)
  rounding["lr schedule"] = 0.0
  return {"method": "simsiam", "peer": os.path.abspath(args.peer),
          "peer_commit": commit(args.peer), "ssljax": __version__,
          "steps": args.steps, "optimizer": "sgd",
          "ssljax_overrides": list(args.set or ()),
          "float64": args.float64, "losses": rows,
          "after_K_steps": tensors, "rounding_after_K_steps": rounding,
          "wall_s": round(time.time() - started, 1)}
