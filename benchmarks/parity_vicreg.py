"""VICReg's whole step against facebookresearch/vicreg's main_vicreg.py
(Bardes, Ponce & LeCun 2022, arXiv 2105.04906), for
``benchmarks/step_parity.py --method vicreg``: the main job's small CNN
(channels 16-32-64-512) with ``configs/vicreg.py``'s projector at CPU size
(128-64: Linear, BatchNorm, ReLU, then a Linear without bias, the official
``Projector``) on 28 x 28 Fashion-MNIST views, batch 16, with the config's
loss (λ 25, μ 25, ν 1, the variance's eps 1e-4).

The authors' side is main_vicreg.py's own parts: ``VICReg`` (its forward
is the loss: the invariance MSE, ``FullGatherLayer``, the variance hinge
and the covariance term), built with ``resnet.__dict__[arch]`` returning
the CNN written in PyTorch (`parity_predictor.torch_cnn_class`) in place
of the ResNet, ``Projector``, ``adjust_learning_rate`` (10 warm-up epochs,
then a cosine to 0.001 × the base rate) and, by default, its ``LARS`` with
the ``exclude_bias_and_norm`` filters (lr 0.2 per 256, weight decay 1e-6,
η 0.001, momentum 0.9: the README's values); the body of ``main``'s loop
is written out (``adjust_learning_rate``, ``zero_grad``, the forward,
``backward``, ``step``; AMP and its GradScaler are off on a CPU). With
``--optimizer adamw`` both sides take the main job's AdamW instead
(``torch.optim.AdamW`` with the kernels decayed, biases and BatchNorm not,
as ssljax's mask), still with the official schedule. ssljax's side is
``configs/vicreg.py`` with the same values (`vicreg_config`). The run needs
more than 10 epochs of 5 steps (``--steps 60``: the warm-up and 2 epochs
of the cosine).

Replaced for one CPU process: ``dist.get_world_size`` (1),
``dist.get_rank`` (0), ``dist.all_gather`` (a copy) and ``dist.all_reduce``
(nothing), which ``FullGatherLayer`` calls; SyncBatchNorm and the
DistributedDataParallel wrapper are not applied (one process). The
official hidden Linear has a bias that the BatchNorm after it cancels;
ssljax's has none: it starts at 0 and is left out of the comparison.
flax's BatchNorm averages the biased batch variance, PyTorch's the
unbiased one: the running variances are also compared made unbiased
(`parity_predictor.unbiased_running_vars`). Each BatchNorm moves twice a
step (the two views go through the network one after the other, on both
sides)."""

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
WARMUP_EPOCHS = 10  # adjust_learning_rate's fixed warm-up
END_LR_FACTOR = 1e-3  # its end_lr = base_lr * 0.001


def vicreg_config(optimizer: str | None = None):
  """configs/vicreg.py at CPU size with the official projector's bias-free
  last layer and main_vicreg.py's schedule; ``optimizer`` "lars" (the
  default) the official LARS, "adamw" the config's AdamW."""
  from configs import vicreg  # pylint: disable=import-outside-toplevel
  c = vicreg.get_config()
  c.model.projector = (HIDDEN, DIM)
  c.model.head_last_bias = False  # Projector's last nn.Linear(bias=False)
  c.batch_size = BATCH
  c.optim.warmup_epochs = float(WARMUP_EPOCHS)
  c.optim.end_lr_factor = END_LR_FACTOR
  c.evals = {}
  if (optimizer or "lars") == "lars":
    c.optim.name = "lars"
    c.optim.learning_rate = 0.2  # --base-lr 0.2 (per 256)
    c.optim.weight_decay = 1e-6  # --wd 1e-6
    c.optim.lars.momentum = 0.9  # LARS's defaults
    c.optim.lars.trust_coefficient = 1e-3
    c.optim.lars.trust_ratio = "update"  # eta·‖p‖ / ‖g + λp‖
    c.optim.lars.momentum_buffer = "gradients"  # mu = m·mu + dp; p -= lr·mu
  return c


def torch_state(config, params: dict, method_state: dict) -> dict:
  """ssljax's network (params, BatchNorm statistics) -> the official
  ``VICReg``'s state_dict names (``backbone``, ``projector``), the hidden
  Linear biases at 0."""
  m = config.model
  return pp.cnn_mlp_tensors(
      params, method_state["batch_stats"], "backbone.features",
      len(m.encoder_kwargs.channels),
      [("projector", "projector", len(m.projector),
        dict(hidden_bias=True, last_bias=m.head_last_bias, last_bn=False))])


def _import_official(peer: str):
  """main_vicreg and resnet of the checkout."""
  sys.path.insert(0, peer)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import main_vicreg  # pylint: disable=import-outside-toplevel,import-error
    import resnet  # pylint: disable=import-outside-toplevel,import-error
  return main_vicreg, resnet


def official_vicreg(peer: str, config, initial, views, threads=None,
                    float64: bool = False):
  """main_vicreg.py's step, step after step, from ssljax's initial weights
  on the same views; (losses per step, the model's state_dict, the
  learning rates ``adjust_learning_rate`` set)."""
  import torch  # pylint: disable=import-outside-toplevel
  import torch.distributed as dist  # pylint: disable=import-outside-toplevel
  if threads:
    torch.set_num_threads(threads)
  main_vicreg, resnet = _import_official(peer)
  dist.get_world_size = lambda *a, **k: 1
  dist.get_rank = lambda *a, **k: 0

  def all_gather(tensors, tensor, *a, **k):
    del a, k
    tensors[0].copy_(tensor)

  dist.all_gather = all_gather
  dist.all_reduce = lambda tensor, *a, **k: None  # one process

  m = config.model
  cnn = pp.torch_cnn_class()

  def backbone(zero_init_residual=True):
    del zero_init_residual  # the CNN has no residual blocks
    net = cnn(tuple(m.encoder_kwargs.channels), 1, 1)
    net.fc = torch.nn.Identity()
    return net, m.encoder_kwargs.channels[-1]

  resnet.__dict__["cnn"] = backbone
  epochs = len(views) // STEPS_PER_EPOCH
  o, loss = config.optim, config.loss
  args = argparse.Namespace(
      arch="cnn", mlp="-".join(str(w) for w in m.projector),
      epochs=epochs, batch_size=config.batch_size,
      base_lr=o.learning_rate, wd=o.weight_decay,
      sim_coeff=loss.inv_weight, std_coeff=loss.var_weight,
      cov_coeff=loss.cov_weight)
  assert loss.eps == 1e-4  # VICReg.forward's sqrt(var + 0.0001)
  model = main_vicreg.VICReg(args)
  if float64:
    model.double()
  params, state = initial
  start = {k: torch.from_numpy(np.array(v)) for k, v in
           torch_state(config, params, state).items()}
  model.load_state_dict(start, strict=True)
  if o.name == "lars":
    assert (o.lars.trust_coefficient, o.lars.momentum) == (1e-3, 0.9)
    optimizer = main_vicreg.LARS(
        model.parameters(), lr=0, weight_decay=args.wd,
        weight_decay_filter=main_vicreg.exclude_bias_and_norm,
        lars_adaptation_filter=main_vicreg.exclude_bias_and_norm)
  else:  # the config's AdamW: kernels decayed, biases and BatchNorm not
    decayed = [p for p in model.parameters() if p.ndim > 1]
    rest = [p for p in model.parameters() if p.ndim <= 1]
    optimizer = torch.optim.AdamW(
        [{"params": decayed, "weight_decay": args.wd},
         {"params": rest, "weight_decay": 0.0}], lr=0)
  loader = [None] * STEPS_PER_EPOCH  # adjust_learning_rate reads its len
  losses, lrs = [], []
  model.train()
  for step, (x, y) in enumerate(views):
    x, y = (torch.from_numpy(np.ascontiguousarray(v.transpose(0, 3, 1, 2)))
            for v in (x, y))
    lrs.append(main_vicreg.adjust_learning_rate(args, optimizer, loader,
                                                step))
    optimizer.zero_grad()
    with contextlib.redirect_stdout(io.StringIO()):
      value = model.forward(x, y)
    value.backward()
    optimizer.step()
    losses.append(float(value))
  out = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
  return losses, out, lrs


def compare(args):
  from ssljax import __version__  # pylint: disable=import-outside-toplevel
  optimizer = args.optimizer or "lars"
  if optimizer not in ("lars", "adamw"):
    raise SystemExit("--method vicreg compares with the official LARS "
                     "(default) or the config's AdamW")
  if args.steps <= WARMUP_EPOCHS * STEPS_PER_EPOCH:
    # ssljax's warm-up ends within the run; the official one may not.
    raise SystemExit(f"--method vicreg needs --steps > "
                     f"{WARMUP_EPOCHS * STEPS_PER_EPOCH}: main_vicreg.py "
                     f"warms up for {WARMUP_EPOCHS} epochs of "
                     f"{STEPS_PER_EPOCH} steps")
  config = vicreg_config(optimizer)
  official_config = vicreg_config(optimizer)
  use_float64(override(config, args.set), args.float64)
  started = time.time()
  initial, views, ours, schedules, final = pp.ssljax_run(
      config, args.steps, float64=args.float64)
  theirs, official, lrs = official_vicreg(
      args.peer, official_config, initial, views, float64=args.float64)
  ref_losses, reference, _ = official_vicreg(
      args.peer, official_config, initial, views, threads=1,
      float64=args.float64)
  rows = loss_rows(ours, theirs, ref_losses)
  ours_state = torch_state(config, *final)
  start = torch_state(official_config, *initial)
  # The hidden Linear biases: ssljax has none; their official gradient is
  # rounding (the BatchNorm after them removes them).
  hidden_biases = {f"projector.{3 * j}.bias"
                   for j in range(len(config.model.projector) - 1)}
  m = config.model
  counts = pp.cnn_counts("backbone.features", m.encoder_kwargs.channels, 28,
                         BATCH)
  counts.update(pp.mlp_counts("projector", len(m.projector), False, BATCH))
  tensors, rounding = pp.compare_tensors(
      ours_state, official, reference, start,
      [k for k in ours_state if k not in hidden_biases], counts,
      2 * args.steps)
  tensors["lr schedule"] = worst(schedules["lr"], lrs)
  rounding["lr schedule"] = 0.0
  return {"method": "vicreg", "peer": os.path.abspath(args.peer),
          "peer_commit": commit(args.peer), "ssljax": __version__,
          "steps": args.steps, "optimizer": optimizer,
          "ssljax_overrides": list(args.set or ()),
          "float64": args.float64, "losses": rows,
          "after_K_steps": tensors, "rounding_after_K_steps": rounding,
          "wall_s": round(time.time() - started, 1)}
