"""ssljax's CNN methods against the same recipes written with lightly.

    PY benchmarks/vs_lightly.py twin --method simclr --epochs 1 --seed 0 \\
        [--out-json FILE] [--steps K] [--rows N] [--num-workers W]
    python benchmarks/vs_lightly.py compare --torch-python PY \\
        --methods vicreg simclr barlow_twins byol --seeds 0 1 2 --epochs 1 \\
        --out DIR [--reuse-ssljax DIR] [--doc docs/methods_benchmark.md]

For each method that lightly ships losses and heads for and that ssljax
ships a Fashion-MNIST CNN config of (``METHODS``: VICReg, SimCLR, Barlow
Twins, BYOL, SimSiam), ``compare`` trains, per seed, ssljax's own config and its
*twin*, the same recipe written with lightly, one after the other, each as a
child process, and scores both with the main job's protocol (linear probe
and 20-NN on the frozen 512-d encoder features of train -> test).

The ssljax side is the methods benchmark's command (`benchmarks/methods.py`)::

    python -m ssljax.main --config benchmarks/methods_config.py:<method> \\
        --config.epochs=<E> --config.seed=<S> --workdir <run dir>

``--reuse-ssljax DIR`` reads a run of that command from ``DIR/<method>/
seed<S>`` (the layout of ``methods.py --out DIR``) instead of training it
again, when its ``config.json`` equals the config this runner would run.
``--ssljax-arg`` and ``--twin-arg`` pass more arguments to either side
(smoke runs: ``--ssljax-arg=--config.num_steps=3 --twin-arg=--steps=3``).

The twin (``twin``, in the interpreter with torch, torchvision and lightly:
the ``bench`` extra) is `benchmarks/vs_pytorch.py`'s PyTorch job with the
method swapped in: the same CNN 16-32-64-512 (``vs_pytorch.torch_model``),
the same torchvision v2 views (``vs_pytorch.torch_loader``), AdamW with the
same mask and schedule (``vs_pytorch.torch_optimizer``), the same probe and
20-NN (``vs_pytorch.torch_evaluate``), 2 DataLoader workers, batch 256, full
batches. Every value of the recipe is read from ``configs/<method>.py`` at
run time (``recipe``), and ``mirror_problems`` refuses a config that sets
something the twin does not build. The method's parts are lightly's:

* heads: ``lightly.models.modules.heads.ProjectionHead`` blocks of the
  config's widths, Linear (no bias) - BatchNorm1d - ReLU per hidden layer
  and a last Linear with a bias unless ``model.head_last_bias`` is False
  (the class lightly's SimCLR, Barlow Twins, VICReg and BYOL heads are
  built from; those classes' own layer counts, widths and last-layer
  BatchNorm or bias differ from the configs', see ``NOTES``);
* losses: ``VICRegLoss(lambda_param, mu_param, nu_param, eps)``,
  ``NTXentLoss(temperature)``, ``BarlowTwinsLoss(lambda_param)`` and, for
  BYOL, ``NegativeCosineSimilarity`` as ``4 + 2 (ncs(p0, t1) + ncs(p1, t0))``,
  which is ssljax's symmetrised ``Σ mean(2 − 2 cos)`` in value and gradient,
  and, for SimSiam, ``½ (ncs(p0, sg(z1)) + ncs(p1, sg(z0)))``;
* BYOL's target: ``deactivate_requires_grad`` copies of the encoder and
  projector, moved after every optimiser step by ``update_momentum`` with
  ``cosine_schedule(k, K + 1, momentum, final_momentum)`` (for k < K equal to
  ssljax's τ_k = 1 − (1 − τ_0)(cos(πk/K) + 1)/2, Grill et al. 2020, arXiv
  2006.07733, §3.2).

Each run goes under ``<out>/runs/<method>/seed<S>/{ssljax,lightly}``; a run
whose ``results.json`` and ``record.json`` exist is read, not repeated, so
``compare`` resumes and more seeds can be added later. Seeds are the outer
loop: all methods at the first seed, then the next. After every run
``<out>/results.json`` and ``<out>/results.md`` are rewritten (and, with
``--doc``, the section between ``BEGIN`` and ``END`` of that page): per
method and side the mean ± sample standard deviation over seeds of the
probe's and 20-NN's test accuracy, and the verdict: ssljax's mean >=
lightly's mean − lightly's standard deviation, per metric.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import importlib
import json
import math
import os
import platform
import shlex
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)
from benchmarks import vs_pytorch  # noqa: E402  pylint: disable=wrong-import-position

METHODS = ("vicreg", "simclr", "barlow_twins", "byol", "simsiam")
SIDES = ("ssljax", "lightly")
BEGIN = "<!-- vs_lightly.py: begin -->"
END = "<!-- vs_lightly.py: end -->"

# What the twin builds, as config values: field -> the value the config
# must hold (the CNN of vs_pytorch.torch_model, its views and optimiser).
MIRRORED = {
    "model.encoder": "cnn",
    "model.encoder_kwargs.channels": (16, 32, 64, 512),
    "model.encoder_kwargs.downsample": "avg",
    "model.encoder_kwargs.weight_init": "uniform_fan_in",
    "model.encoder_kwargs.bn_momentum": 0.9,
    "model.dtype": "float32",
    "views.num_global": 2, "views.num_local": 0, "views.size": 0,
    "views.crop": "random_resized", "views.saturation": 0.0,
    "views.hue": 0.0, "views.grayscale_prob": 0.0, "views.blur_prob": 0.0,
    "views.solarize_prob": 0.0, "views.noise_std": 0.0,
    "optim.name": "adamw", "optim.clip_grad_norm": 0.0,
    "optim.weight_decay_schedule": "constant", "optim.schedule_scale": 1.0,
    "optim.warmup_start_factor": 0.0, "optim.schedule_offset": 0,
    "num_steps": -1, "loss.form": "two_view",
}
# Fields that may be absent; when present they must hold this value
# (PyTorch's nn.Linear init and BatchNorm1d defaults in the heads,
# AdamW's β2 and mask as vs_pytorch.torch_optimizer builds them).
MIRRORED_IF_SET = {
    "model.projector_kwargs.weight_init": "uniform_fan_in",
    "model.projector_kwargs.bn_momentum": 0.9,
    "model.projector_kwargs.bn_epsilon": 1e-5,
    "model.projector_last_bn": False, "model.predictor_last_bn": False,
    "optim.b2": 0.999, "optim.weight_decay_mask": "kernels",
    "optim.freeze_last_layer_epochs": 0.0,
    "teacher.schedule": "cosine", "teacher.momentum_step": "done",
}
# The loss fields each twin reads (lightly's argument names in LOSSES).
LOSS_FIELDS = {"vicreg": ("inv_weight", "var_weight", "cov_weight", "eps"),
               "simclr": ("temperature", "block_size"),
               "barlow_twins": ("lambda_offdiag",),
               "byol": (), "simsiam": ()}
_ABSENT = object()

# Where the twin cannot be, or is not, the lightly class as shipped; shown
# under the table.
NOTES = {
    "all": (
        "Views: the same ops and values, drawn by torchvision v2 in 2 "
        "DataLoader workers on the lightly side and by ssljax's on-device "
        "ops on ours (other random streams; `benchmarks/first_epoch.py "
        "crossed` measures what that does to the main job). AdamW: PyTorch "
        "computes Adam's bias corrections in float64, optax in float32 "
        "(`optim.adam_bias_correction = \"optax\"`: 1.3e-5 relative at step "
        "1). Initial weights: the same distributions (PyTorch's defaults), "
        "other draws. Evaluation: the same protocol, ssljax's in JAX "
        "(`ssljax.probes`), the twin's in torch (`vs_pytorch.linear_probe`, "
        "`knn_accuracy`); `tests/test_vs_pytorch.py` holds the two probes "
        "within 0.02 of each other and the two 20-NN votes equal on the "
        "same features."),
    "vicreg": (
        "lightly's `VICRegProjectionHead` defaults to 3 layers; the twin "
        "builds the config's 2 (512-512) from `ProjectionHead` blocks "
        "(`VICRegProjectionHead(num_layers=2)` is the same)."),
    "simclr": (
        "lightly's `SimCLRProjectionHead(batch_norm=True)` ends with a "
        "BatchNorm1d, without bias, after its last Linear (SimCLR v2's "
        "head); with `batch_norm=False` it loses the hidden BatchNorm too. "
        "The twin builds the config's Linear-BN-ReLU, "
        "Linear (512-512) from `ProjectionHead` blocks. `loss.block_size` "
        "(ours: None, the dense matrix) changes memory, not the value."),
    "barlow_twins": (
        "lightly's `BarlowTwinsProjectionHead` has 3 layers (8192 wide by "
        "default); the twin builds the config's 2 (512-512) from "
        "`ProjectionHead` blocks. `BarlowTwinsLoss` standardises with "
        "`F.batch_norm` (eps 1e-5), as ours (`eps` 1e-5)."),
    "byol": (
        "lightly's `BYOLProjectionHead` and `BYOLPredictionHead` end with a "
        "Linear with bias; the config has none (`model.head_last_bias = "
        "False`, the official MLP), so the twin builds the same two blocks "
        "(2048-256 each) from `ProjectionHead` with `use_bias=False` last. "
        "`NegativeCosineSimilarity` is −cos; lightly's example takes "
        "0.5 (ncs(p0, t1) + ncs(p1, t0)), a quarter of our gradient, which "
        "only AdamW's ε would feel; the twin takes 4 + 2 (ncs + ncs), our "
        "loss's value. lightly's examples move the target once per epoch "
        "with `cosine_schedule(epoch, epochs, 0.996, 1)`; the twin moves it "
        "after every step, as ours."),
    "simsiam": (
        "lightly's `SimSiamProjectionHead` has 3 layers and ends with a "
        "BatchNorm1d (the official ImageNet head); the config's projector "
        "is 2 layers (2048-2048) without a last BatchNorm, built from "
        "`ProjectionHead` blocks; the predictor (512-2048) is "
        "`SimSiamPredictionHead`'s form. AdamW for both (the official "
        "SGD with a fixed-lr predictor is not the config's)."),
}


# --------------------------------------------------------------------------
# The recipe (standard library and ml_collections: no torch).


def method_config(method, **overrides):
  """``configs/<method>.py``'s default config, with ``overrides`` (field ->
  value, e.g. ``epochs=1``) set.

  Raises:
    ValueError: a method outside METHODS.
  """
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
  config = importlib.import_module(f"configs.{method}").get_config()
  for field, value in overrides.items():
    config[field] = value
  return config


def _value_at(config, field):
  node = config
  for part in field.split("."):
    if part not in node:
      return _ABSENT
    node = node[part]
  return node


def _same(value, expected):
  if isinstance(expected, tuple):
    return isinstance(value, (tuple, list)) and tuple(value) == expected
  if isinstance(expected, float):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isclose(value, expected, rel_tol=1e-12, abs_tol=0.0))
  return value == expected and type(value) is type(expected)


def mirror_problems(config):
  """The fields of ``config`` whose values the twin does not build, one
  line each ([] when the twin mirrors the config).

  Checks ``MIRRORED`` (required values), ``MIRRORED_IF_SET`` (values of
  optional fields) and that ``config.method`` is one of METHODS with a loss
  of only ``LOSS_FIELDS`` (besides ``form``), one value per view op for
  both views, and heads as the twin builds them: BYOL a predictor and a
  teacher, SimSiam a predictor, the others neither.
  """
  problems = []
  if config.get("method") not in METHODS:
    return [f"method {config.get('method')!r} has no twin ({METHODS})"]
  for field, expected in MIRRORED.items():
    value = _value_at(config, field)
    if value is _ABSENT or not _same(value, expected):
      problems.append(f"{field} = {value!r}; the twin builds {expected!r}"
                      if value is not _ABSENT else f"{field} is missing")
  for field, expected in MIRRORED_IF_SET.items():
    value = _value_at(config, field)
    if value is not _ABSENT and not _same(value, expected):
      problems.append(f"{field} = {value!r}; the twin builds {expected!r}")
  for field, mirrored in vs_pytorch.VIEWS.items():
    value = config.views[field]  # one value (or range) for both views
    if isinstance(mirrored, tuple):
      one = (isinstance(value, (tuple, list)) and len(value) == 2
             and all(isinstance(v, (int, float)) for v in value))
    else:
      one = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not one:
      problems.append(f"views.{field} = {value!r}: the twin takes one "
                      "value for both views")
  extra = set(config.loss.keys()) - {"form"} - set(
      LOSS_FIELDS[config.method])
  if extra:
    problems.append(f"loss fields the twin does not read: {sorted(extra)}")
  if (config.method == "byol") != ("teacher" in config):
    problems.append("teacher: the twin has one for byol only")
  if (config.method in ("byol", "simsiam")) != ("predictor" in config.model):
    problems.append("model.predictor: the twin has one for byol and simsiam "
                    "only")
  return problems


def recipe(method, config=None):
  """The values the twin trains with, read from ``configs/<method>.py``
  (or ``config``), as plain Python: ``method``, ``projector`` and
  ``predictor`` (widths or None), ``head_last_bias``, ``loss`` (the fields
  of LOSS_FIELDS), ``optim`` (the keys of ``vs_pytorch.OPTIM``), ``views``
  (the keys of ``vs_pytorch.VIEWS``), ``teacher`` ({momentum,
  final_momentum} or None), ``batch_size`` and ``representation_dim``.

  Raises:
    ValueError: an unknown method, a config of another method, or a config
      with ``mirror_problems``.
  """
  config = method_config(method) if config is None else config
  if config.get("method") != method:
    raise ValueError(f"a config of {config.get('method')!r}, not {method!r}")
  problems = mirror_problems(config)
  if problems:
    raise ValueError(f"the twin of {method} cannot mirror its config: "
                     + "; ".join(problems))

  def plain(value):
    return tuple(value) if isinstance(value, (tuple, list)) else value

  model = config.model
  return {
      "method": method,
      "projector": tuple(model.projector),
      "predictor": (tuple(model.predictor) if "predictor" in model
                    else None),
      "head_last_bias": bool(model.get("head_last_bias", True)),
      "loss": {k: config.loss.get(k) for k in LOSS_FIELDS[method]},
      "optim": {k: config.optim[k] for k in vs_pytorch.OPTIM},
      "views": {k: plain(config.views[k]) for k in vs_pytorch.VIEWS},
      "teacher": ({"momentum": config.teacher.momentum,
                   "final_momentum": config.teacher.final_momentum}
                  if "teacher" in config else None),
      "batch_size": config.batch_size,
      "representation_dim": model.encoder_kwargs.channels[-1],
  }


# --------------------------------------------------------------------------
# The twin (torch, torchvision and lightly imported inside).


def lightly_head(widths, in_dim, last_bias=True):
  """lightly's ``ProjectionHead`` of ``widths``: Linear (no bias) -
  BatchNorm1d - ReLU per hidden width, then a plain Linear (with a bias iff
  ``last_bias``): (B, in_dim) -> (B, widths[-1]) float32."""
  # pylint: disable=import-outside-toplevel
  from lightly.models.modules.heads import ProjectionHead
  from torch import nn
  # pylint: enable=import-outside-toplevel
  blocks = []
  for width in widths[:-1]:
    blocks.append((in_dim, width, nn.BatchNorm1d(width), nn.ReLU(), False))
    in_dim = width
  blocks.append((in_dim, widths[-1], None, None, bool(last_bias)))
  return ProjectionHead(blocks)


def lightly_criterion(rec):
  """The lightly loss module of recipe ``rec``, called on two (B, K)
  float32 embeddings: VICReg (Bardes, Ponce & LeCun 2022, arXiv
  2105.04906), NT-Xent (Chen et al. 2020, arXiv 2002.05709), Barlow Twins
  (Zbontar et al. 2021, arXiv 2103.03230) or, for BYOL (Grill et al. 2020,
  arXiv 2006.07733) and SimSiam (Chen & He 2021, arXiv 2011.10566),
  ``NegativeCosineSimilarity``, combined by ``byol_loss`` or
  ``simsiam_loss``."""
  from lightly import loss  # pylint: disable=import-outside-toplevel
  p = rec["loss"]
  if rec["method"] == "vicreg":
    return loss.VICRegLoss(lambda_param=p["inv_weight"],
                           mu_param=p["var_weight"],
                           nu_param=p["cov_weight"], eps=p["eps"])
  if rec["method"] == "simclr":
    return loss.NTXentLoss(temperature=p["temperature"])
  if rec["method"] == "barlow_twins":
    return loss.BarlowTwinsLoss(lambda_param=p["lambda_offdiag"])
  return loss.NegativeCosineSimilarity()


def simsiam_loss(ncs, p0, p1, z0, z1):
  """SimSiam's symmetrised loss (Chen & He 2021, arXiv 2011.10566, eq. (2)),
  ½ D(p0, sg(z1)) + ½ D(p1, sg(z0)) with D = lightly's
  NegativeCosineSimilarity ``ncs`` (−mean cos), as lightly's SimSiam
  example writes it. p, z: (B, K); a 0-d tensor."""
  return 0.5 * (ncs(p0, z1.detach()) + ncs(p1, z0.detach()))


def byol_loss(ncs, p0, p1, t0, t1):
  """BYOL's symmetrised normalised-MSE loss (Grill et al. 2020, arXiv
  2006.07733, eq. (2) and §3.1), Σ over the two directions of mean_i(2 −
  2 cos(p_i, t_i)), written with lightly's NegativeCosineSimilarity ``ncs``
  (−mean cos): 4 + 2 (ncs(p0, t1) + ncs(p1, t0)). p: (B, K) predictions,
  t: (B, K) targets (no gradient); a 0-d tensor."""
  return 4.0 + 2.0 * (ncs(p0, t1) + ncs(p1, t0))


def build_twin(rec):
  """(student, teacher) of recipe ``rec``: ``nn.ModuleDict`` of "encoder"
  (vs_pytorch's CNN), "projector" and, for BYOL and SimSiam, "predictor"
  (lightly heads); the teacher (BYOL) a gradient-free copy of the
  student's encoder and projector, else None. Drawn from torch's global
  generator."""
  # pylint: disable=import-outside-toplevel
  from lightly.models.utils import deactivate_requires_grad
  from torch import nn
  # pylint: enable=import-outside-toplevel
  encoder, _, _ = vs_pytorch.torch_model()
  student = nn.ModuleDict({
      "encoder": encoder,
      "projector": lightly_head(rec["projector"], rec["representation_dim"],
                                rec["head_last_bias"])})
  teacher = None
  if rec["predictor"] is not None:
    student["predictor"] = lightly_head(rec["predictor"],
                                        rec["projector"][-1],
                                        rec["head_last_bias"])
  if rec["teacher"] is not None:
    teacher = nn.ModuleDict({"encoder": copy.deepcopy(student["encoder"]),
                             "projector": copy.deepcopy(student["projector"])})
    deactivate_requires_grad(teacher)
  return student, teacher


def twin_loss(rec, criterion, student, teacher, x0, x1):
  """The twin's loss of the views x0, x1 (float (B, 1, 28, 28)): the
  criterion of the two embeddings, each view through the networks on its
  own (its own BatchNorm statistics), as ssljax's two-view form."""
  import torch  # pylint: disable=import-outside-toplevel

  def embed(net, x):
    return net["projector"](net["encoder"](x))

  if rec["predictor"] is None:
    return criterion(embed(student, x0), embed(student, x1))
  if teacher is None:  # SimSiam: the student's own projections, stopped
    z0, z1 = embed(student, x0), embed(student, x1)
    p0, p1 = student["predictor"](z0), student["predictor"](z1)
    return simsiam_loss(criterion, p0, p1, z0, z1)
  with torch.no_grad():
    t0, t1 = embed(teacher, x0), embed(teacher, x1)
  p0, p1 = (student["predictor"](embed(student, x)) for x in (x0, x1))
  return byol_loss(criterion, p0, p1, t0, t1)


def target_momentum(rec, step, total):
  """τ (a float) of the target update after step ``step`` (0-based) of
  ``total``: lightly's ``cosine_schedule(step, total + 1, τ_0, τ_final)``,
  BYOL's cosine schedule (Grill et al. 2020, arXiv 2006.07733, §3.2)."""
  from lightly.utils.scheduler import cosine_schedule  # pylint: disable=import-outside-toplevel
  t = rec["teacher"]
  return cosine_schedule(step, total + 1, t["momentum"], t["final_momentum"])


def move_target(rec, student, teacher, step, total):
  """lightly's ``update_momentum`` of the target's encoder and projector
  towards the student's after step ``step``; returns τ."""
  from lightly.models.utils import update_momentum  # pylint: disable=import-outside-toplevel
  m = target_momentum(rec, step, total)
  for part in ("encoder", "projector"):
    update_momentum(student[part], teacher[part], m)
  return m


def twin_step(rec, criterion, student, teacher, optimizer, scheduler, x0, x1,
              step, total):
  """One train step of the twin on views (x0, x1): the loss, AdamW's
  update, the schedule's step and, with a target, its momentum update
  after step ``step`` of ``total``; returns the loss (a float)."""
  loss = twin_loss(rec, criterion, student, teacher, x0, x1)
  optimizer.zero_grad()
  loss.backward()
  optimizer.step()
  scheduler.step()
  if teacher is not None:
    move_target(rec, student, teacher, step, total)
  return loss.item()


def twin_job(method, epochs, *, seed=0, num_workers=2,
             idx_dir=vs_pytorch.IDX_DIR, steps=None, rows=None):
  """Trains and evaluates the lightly twin of ``method``; its summary.

  ``steps`` stops after that many steps (the schedules then span them);
  ``rows`` keeps the first ``rows`` train and ``rows // 5`` test images
  (smoke runs). The summary has the keys of vs_pytorch.torch_job's, with
  "framework": "lightly", the method and its recipe.
  """
  start = time.time()
  rec = recipe(method)
  # pylint: disable=import-outside-toplevel
  import torch
  # pylint: enable=import-outside-toplevel

  torch.manual_seed(seed)
  seconds = {}
  train_x, train_y = vs_pytorch.fashion_mnist("train", idx_dir)
  test_x, test_y = vs_pytorch.fashion_mnist("test", idx_dir)
  if rows:
    train_x, train_y = train_x[:rows], train_y[:rows]
    test_x, test_y = test_x[:max(rows // 5, 1)], test_y[:max(rows // 5, 1)]
  student, teacher = build_twin(rec)
  criterion = lightly_criterion(rec)
  batch_size = rec["batch_size"]
  loader = vs_pytorch.torch_loader(train_x, batch_size, num_workers,
                                   views=rec["views"])
  steps_per_epoch = len(loader)
  total = epochs * steps_per_epoch
  if steps:
    total = min(total, steps)
  optimizer, scheduler = vs_pytorch.torch_optimizer(
      student, rec["optim"], steps_per_epoch, total, batch_size)
  seconds["setup"] = time.time() - start

  t0 = time.time()
  student.train()
  if teacher is not None:
    teacher.train()
  losses, step = [], 0
  while step < total:
    for x0, x1 in loader:
      losses.append(twin_step(rec, criterion, student, teacher, optimizer,
                              scheduler, x0, x1, step, total))
      step += 1
      if step % 50 == 0 or step == total:
        print(f"step {step}/{total}: loss {losses[-1]:.4f} "
              f"({time.time() - t0:.1f} s)", file=sys.stderr, flush=True)
      if step == total:
        break
  seconds["train_steps"] = time.time() - t0

  evals, eval_seconds = vs_pytorch.torch_evaluate(
      student["encoder"], (train_x, train_y), (test_x, test_y), seed=seed)
  seconds.update(eval_seconds)
  return vs_pytorch.torch_record(
      "lightly", num_workers=num_workers, epochs=epochs, steps=total,
      losses=losses, seconds=seconds, start=start, evals=evals,
      method=method, recipe=rec, seed=seed)


# --------------------------------------------------------------------------
# Step parity (torch, lightly and ssljax's JAX in one interpreter).


def flax_variables(state_dict, rec, prefix=""):
  """(params, batch_stats) in ssljax's layout of a twin's ``state_dict``
  (``student.state_dict()``, or the teacher's with only encoder and
  projector): conv kernels OIHW -> HWIO, Linear weights transposed, the
  encoder's ``Conv_i`` / ``BatchNorm_i`` and the heads' ``Dense_j`` /
  ``BatchNorm_j`` in order. Arrays are float32 NumPy."""
  get = lambda name: state_dict[prefix + name].detach().numpy().copy()
  params, stats = {"encoder": {}}, {"encoder": {}}
  # vs_pytorch.torch_model's encoder: (conv, bn, relu, pool) x 3, then
  # (conv, bn, relu), global average.
  for i, (conv, bn) in enumerate(((0, 1), (4, 5), (8, 9), (12, 13))):
    params["encoder"][f"Conv_{i}"] = {
        "kernel": get(f"encoder.{conv}.weight").transpose(2, 3, 1, 0)}
    params["encoder"][f"BatchNorm_{i}"] = {
        "scale": get(f"encoder.{bn}.weight"), "bias": get(f"encoder.{bn}.bias")}
    stats["encoder"][f"BatchNorm_{i}"] = {
        "mean": get(f"encoder.{bn}.running_mean"),
        "var": get(f"encoder.{bn}.running_var")}
  heads = [("projector", rec["projector"])]
  if rec["predictor"] is not None and f"{prefix}predictor.layers.0.weight" in (
      state_dict):
    heads.append(("predictor", rec["predictor"]))
  for part, widths in heads:
    params[part], stats[part] = {}, {}
    for j in range(len(widths)):
      linear = f"{part}.layers.{3 * j}"
      dense = {"kernel": get(f"{linear}.weight").T}
      if f"{prefix}{linear}.bias" in state_dict:
        dense["bias"] = get(f"{linear}.bias")
      params[part][f"Dense_{j}"] = dense
      if j < len(widths) - 1:
        bn = f"{part}.layers.{3 * j + 1}"
        params[part][f"BatchNorm_{j}"] = {"scale": get(f"{bn}.weight"),
                                          "bias": get(f"{bn}.bias")}
        stats[part][f"BatchNorm_{j}"] = {"mean": get(f"{bn}.running_mean"),
                                         "var": get(f"{bn}.running_var")}
  return params, stats


def parity(method, *, steps=5, seed=0, batch_size=None, threads=None,
           idx_dir=vs_pytorch.IDX_DIR):
  """The twin's and ssljax's train steps from the same weights on the same
  views: ``steps`` steps of each, the twin's losses against ssljax's.

  The twin is built as ``twin_job`` builds it (``torch.manual_seed(seed)``)
  and draws its views with ``vs_pytorch.torch_loader`` (no workers); its
  initial weights (and BYOL's target, a copy of them) go into a train state
  of ``configs/<method>.py`` (``flax_variables``), and ssljax's
  ``train.train_step`` runs on the twin's views (``ready_views``), both
  with schedules over ``steps`` steps of an epoch of the loader's length.
  ``batch_size`` (default: the config's) sets both sides' batch.

  Returns:
    {"method", "steps", "lightly_loss", "ssljax_loss" (lists of floats),
    "relative_difference" (per step), "final_weights_relative_difference"
    ({parameter path: ‖ours − theirs‖ / ‖theirs‖})}.
  """
  # pylint: disable=import-outside-toplevel
  import functools
  import jax
  import numpy as np
  import torch
  from benchmarks import first_epoch
  from ssljax import data, methods, optimizers, train, train_state
  # pylint: enable=import-outside-toplevel
  if threads:
    torch.set_num_threads(threads)
  config = method_config(method, seed=seed)
  if batch_size:
    config.batch_size = batch_size
  rec = recipe(method, config)
  torch.manual_seed(seed)
  train_x, _ = vs_pytorch.fashion_mnist("train", idx_dir)
  student, teacher = build_twin(rec)
  criterion = lightly_criterion(rec)
  loader = vs_pytorch.torch_loader(train_x, rec["batch_size"], 0,
                                   views=rec["views"])
  steps_per_epoch = len(loader)
  optimizer, scheduler = vs_pytorch.torch_optimizer(
      student, rec["optim"], steps_per_epoch, steps, rec["batch_size"])

  ssl = methods.build(config)
  lr_fn = optimizers.create_learning_rate_fn(
      config.optim, config.batch_size, steps_per_epoch, steps)
  tx = optimizers.create_optimizer(config.optim, lr_fn, steps_per_epoch)
  state = train_state.create_train_state(
      ssl, tx, jax.random.key(seed), train.batch_spec(config, (28, 28, 1)))
  params, stats = flax_variables(student.state_dict(), rec)
  method_state = {**state.method_state, "batch_stats": stats}
  if teacher is not None:
    t_params, t_stats = flax_variables(teacher.state_dict(), rec)
    method_state["teacher"] = {"params": t_params, "batch_stats": t_stats}
  params = jax.tree.map(jax.numpy.asarray, params)
  method_state = jax.tree.map(jax.numpy.asarray, method_state)
  state = state.replace(params=params, opt_state=state.tx.init(params),
                        method_state=method_state)
  step_fn = jax.jit(functools.partial(
      train.train_step, spec=data.view_spec(config.views), seed=seed,
      total_steps=steps, steps_per_epoch=steps_per_epoch))

  student.train()
  if teacher is not None:
    teacher.train()
  theirs, ours = [], []
  for k, (x0, x1) in enumerate(loader):
    if k == steps:
      break
    views = np.stack([x0.numpy(), x1.numpy()])[:, :, 0, :, :, None]
    state, metrics = step_fn(state, {"ready_views": jax.numpy.asarray(views)})
    ours.append(float(metrics["loss"]))
    theirs.append(twin_step(rec, criterion, student, teacher, optimizer,
                            scheduler, x0, x1, k, steps))
  final, _ = flax_variables(student.state_dict(), rec)
  return {"method": method, "steps": steps, "batch_size": rec["batch_size"],
          "lightly_loss": theirs, "ssljax_loss": ours,
          "relative_difference": [abs(a - b) / abs(b)
                                  for a, b in zip(ours, theirs)],
          "final_weights_relative_difference": first_epoch.relative_drift(
              state.params, final)}


# --------------------------------------------------------------------------
# The runner (standard library; ml_collections for --reuse-ssljax).


def ssljax_command(python, method, epochs, seed, run_dir, extra=()):
  """argv of the ssljax run: the methods benchmark's command (``extra``:
  more arguments, e.g. ``--config.num_steps=3`` for a smoke run)."""
  return [python, "-m", "ssljax.main", "--config",
          f"benchmarks/methods_config.py:{method}", f"--config.epochs={epochs}",
          f"--config.seed={seed}", "--workdir", run_dir] + list(extra)


def twin_command(torch_python, method, epochs, seed, run_dir, extra=()):
  """argv of the twin run, writing ``run_dir``/results.json."""
  return [torch_python, os.path.abspath(__file__), "twin", "--method", method,
          "--epochs", str(epochs), "--seed", str(seed), "--out-json",
          os.path.join(run_dir, "results.json")] + list(extra)


def _json_normal(value):
  return json.loads(json.dumps(value))


def reusable(run_dir, method, epochs, seed):
  """(True, "") when ``run_dir`` holds a finished ssljax run (results.json)
  whose config.json equals ``benchmarks/methods_config.py:<method>`` at
  ``epochs`` and ``seed``; else (False, why)."""
  results = os.path.join(run_dir, "results.json")
  saved = os.path.join(run_dir, "config.json")
  if not (os.path.exists(results) and os.path.exists(saved)):
    return False, f"no results.json and config.json in {run_dir}"
  from benchmarks import methods_config  # pylint: disable=import-outside-toplevel
  config = methods_config.get_config(method)
  config.epochs, config.seed = epochs, seed
  with open(saved) as f:
    theirs = _json_normal(json.load(f))
  ours = _json_normal(json.loads(config.to_json()))
  if theirs != ours:
    diff = sorted(k for k in set(ours) | set(theirs)
                  if ours.get(k) != theirs.get(k))
    return False, f"config.json differs from this config in {diff}"
  return True, ""


def _mean_std(values):
  values = [v for v in values if v is not None]
  if not values:
    return None, None, 0
  std = statistics.stdev(values) if len(values) > 1 else None
  return statistics.fmean(values), std, len(values)


def aggregate(records):
  """Per method: each side's mean, sample std and count of the probe's and
  20-NN's test accuracy over its successful runs, the paired differences
  (ssljax − lightly, seeds where both succeeded) and the verdicts.

  The verdict of a metric is True when ssljax's mean >= lightly's mean −
  lightly's std (with one lightly seed the std is taken as 0 and the
  verdict is marked ``one_seed``); None when a side has no run.

  Returns:
    {method: {"ssljax": {"probe": [mean, std, n], "knn": [...],
    "train_seconds": median}, "lightly": {...}, "diff": {"probe": [mean,
    std, n], "knn": [...]}, "verdict": {"probe": bool | None, "knn": ...},
    "one_seed": bool, "failed": n}}, methods in METHODS order.
  """
  out = {}
  present = [m for m in METHODS if any(r["method"] == m for r in records)]
  for method in present:
    rows = [r for r in records if r["method"] == method]
    ok = [r for r in rows if r.get("returncode") == 0]
    entry = {"failed": len(rows) - len(ok)}
    for side in SIDES:
      mine = [r for r in ok if r["framework"] == side]
      entry[side] = {
          metric: list(_mean_std([r.get(metric) for r in mine]))
          for metric in ("probe", "knn")}
      times = [r["train_seconds"] for r in mine
               if r.get("train_seconds") is not None]
      entry[side]["train_seconds"] = (statistics.median(times) if times
                                      else None)
      entry[side]["seeds"] = sorted(r["seed"] for r in mine)
    by_seed = {}
    for r in ok:
      by_seed.setdefault(r["seed"], {})[r["framework"]] = r
    entry["diff"] = {}
    for metric in ("probe", "knn"):
      pairs = [p["ssljax"][metric] - p["lightly"][metric]
               for p in by_seed.values() if len(p) == 2
               and p["ssljax"].get(metric) is not None
               and p["lightly"].get(metric) is not None]
      entry["diff"][metric] = list(_mean_std(pairs))
    entry["verdict"] = {}
    for metric in ("probe", "knn"):
      ours, theirs = entry["ssljax"][metric], entry["lightly"][metric]
      if ours[0] is None or theirs[0] is None:
        entry["verdict"][metric] = None
      else:
        entry["verdict"][metric] = bool(ours[0] >= theirs[0]
                                        - (theirs[1] or 0.0))
    entry["one_seed"] = entry["lightly"]["probe"][2] == 1
    out[method] = entry
  return out


def _fmt(mean_std_n, digits=4, signed=False):
  mean, std, n = mean_std_n
  if mean is None:
    return "—"
  text = f"{mean:+.{digits}f}" if signed else f"{mean:.{digits}f}"
  return text + (f" ± {std:.{digits}f}" if n > 1 and std is not None else "")


def markdown_table(summary):
  """The table of `aggregate`, one row per method, and its notes."""
  lines = ["| method | seeds (ssljax / lightly) | linear probe: ssljax | "
           "linear probe: lightly | 20-NN: ssljax | 20-NN: lightly | "
           "ssljax − lightly (probe / 20-NN, paired) | ssljax ≥ lightly − "
           "its std (probe / 20-NN) | train time (s, median): ssljax / "
           "lightly |",
           "|---|---|---:|---:|---:|---:|---:|---|---:|"]
  for method, e in summary.items():
    s, t = e["ssljax"], e["lightly"]
    verdicts = []
    for metric in ("probe", "knn"):
      v = e["verdict"][metric]
      verdicts.append("—" if v is None else ("yes" if v else "**no**"))
    verdict = " / ".join(verdicts) + (" (1 seed: no spread)"
                                      if e["one_seed"] else "")
    seconds = " / ".join("—" if x["train_seconds"] is None
                         else f"{x['train_seconds']:.0f}" for x in (s, t))
    seeds = " / ".join(",".join(map(str, x["seeds"])) or "—" for x in (s, t))
    lines.append(
        f"| `{method}` | {seeds} | {_fmt(s['probe'])} | {_fmt(t['probe'])} | "
        f"{_fmt(s['knn'])} | {_fmt(t['knn'])} | "
        f"{_fmt(e['diff']['probe'], signed=True)} / "
        f"{_fmt(e['diff']['knn'], signed=True)} | {verdict} | {seconds} |")
  failed = {m: e["failed"] for m, e in summary.items() if e["failed"]}
  lines.append("")
  if failed:
    lines += [f"Failed runs (left out): {failed}.", ""]
  lines += ["Where the twin differs from the lightly class as shipped, or "
            "from ours:", ""]
  lines.append(f"- all methods: {NOTES['all']}")
  for method in summary:
    lines.append(f"- `{method}`: {NOTES[method]}")
  return "\n".join(lines)


def _now():
  return datetime.datetime.now(datetime.timezone.utc).strftime(
      "%Y-%m-%d %H:%M UTC")


def page(summary, *, command, machine_line, date, loads, reused=()):
  """The Markdown section (between BEGIN and END) of the docs page;
  ``reused``: "<method> seed <S>" of the ssljax runs read, not trained."""
  load = (f"{min(loads):.1f} to {max(loads):.1f}" if loads else "not "
          "recorded")
  reuse_line = ([f"ssljax runs read from an earlier run of the same command "
                 f"and config (`--reuse-ssljax`, the methods table's runs): "
                 f"{', '.join(reused)}.", ""] if reused else [])
  return "\n".join([
      "## Side by side with lightly", "",
      "Each method's own config (`configs/<method>.py`, run as the table "
      "above runs it) against its *twin*: the same recipe written with "
      "lightly 1.6 on PyTorch (`benchmarks/vs_lightly.py`), i.e. the same "
      "CNN, Fashion-MNIST views, optimiser, schedule, projector and "
      "predictor widths, loss hyper-parameters and target momentum, all "
      "read from the config, with lightly's heads (`ProjectionHead` "
      "blocks), losses and momentum utilities, scored by the same linear "
      "probe and 20-NN protocol on the frozen encoder (test accuracy). "
      "Cells: mean ± sample standard deviation over the seeds listed; "
      "*paired* differences are per seed, then mean ± std. Verdict: "
      "ssljax's mean is at least lightly's mean minus lightly's standard "
      "deviation.", "",
      f"Command: `{command}`  ",
      f"Machine: {machine_line}; 1-minute load average at the runs' starts "
      f"{load} (times are upper bounds)  ",
      f"Date: {date}", "", *reuse_line,
      markdown_table(summary)])


def write_doc(path, document):
  """Writes ``document`` into the Markdown page ``path`` between its lines
  BEGIN and END, or appends the block when the page has none."""
  block = f"{BEGIN}\n{document.rstrip()}\n{END}\n"
  with open(path) as f:
    old = f.read()
  start, end = old.find(BEGIN), old.find(END)
  if 0 <= start < end:
    rest = old[end + len(END):].lstrip("\n")
    text = old[:start] + block + ("\n" + rest if rest else "")
  else:
    text = old.rstrip("\n") + "\n\n" + block
  with open(path, "w") as f:
    f.write(text)


def read_run(run_dir):
  """(probe, k-NN, train seconds) of a run's results.json, or Nones."""
  out = vs_pytorch.read_summary(os.path.join(run_dir, "results.json"))
  return {k: out[k] for k in ("probe", "knn", "train_seconds")}


def shown_command(argv, torch_python):
  """The compare command as the page shows it: the torch interpreter's
  path as ``<bench interpreter>``, without ``--read-only`` (which fills
  the same table from the runs that exist)."""
  shown = [a.replace(torch_python, "<bench interpreter>") for a in argv
           if a != "--read-only"]
  return "python benchmarks/vs_lightly.py " + " ".join(
      a if a == "<bench interpreter>" else shlex.quote(a) for a in shown)


def compare(args):
  """Runs (or reads) every (seed, method, side); writes the tables."""
  os.makedirs(args.out, exist_ok=True)
  env = dict(os.environ)
  env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"]
                              if env.get("PYTHONPATH") else "")
  from benchmarks import methods  # pylint: disable=import-outside-toplevel
  machine_line = methods.machine()
  command = shown_command(args.argv, args.torch_python)
  records = []
  for seed in args.seeds:
    for method in args.methods:
      for side in SIDES:
        run_dir = os.path.join(args.out, "runs", method, f"seed{seed}", side)
        record_path = os.path.join(run_dir, "record.json")
        if os.path.exists(record_path) and not args.rerun:
          with open(record_path) as f:
            record = json.load(f)
          records.append(record)
          print(f"{method} seed {seed} {side}: read {record_path}")
          continue
        if args.read_only:
          print(f"{method} seed {seed} {side}: no run (--read-only)")
          continue
        os.makedirs(run_dir, exist_ok=True)
        record = {"method": method, "seed": seed, "framework": side,
                  "epochs": args.epochs}
        reused = None
        if side == "ssljax" and args.reuse_ssljax and not args.ssljax_arg:
          candidate = os.path.join(args.reuse_ssljax, method, f"seed{seed}")
          ok, why = reusable(candidate, method, args.epochs, seed)
          if ok:
            reused = candidate
          else:
            print(f"{method} seed {seed}: not reused: {why}", flush=True)
        if reused:
          summary = read_run(reused)
          record.update(returncode=0, reused_from=reused, command=None,
                        wall_seconds=None, load_before=None, **summary)
          print(f"{method} seed {seed} ssljax: reused {reused}", flush=True)
        else:
          if side == "ssljax":
            cmd = ssljax_command(args.python, method, args.epochs, seed,
                                 run_dir, args.ssljax_arg)
          else:
            cmd = twin_command(args.torch_python, method, args.epochs, seed,
                               run_dir, args.twin_arg)
          print(f"[{time.strftime('%H:%M:%S')}] {method} seed {seed} "
                f"{side}: {' '.join(cmd)}", flush=True)
          record["started_utc"] = _now()
          try:
            run = vs_pytorch.run_child(
                cmd, log_path=os.path.join(run_dir, "log.txt"),
                timeout=args.timeout, sample_seconds=args.sample_seconds,
                env=env)
          except OSError as e:
            run = {"returncode": None, "error": str(e)}
          record.update(run, command=cmd, **read_run(run_dir))
          print(f"  rc={record['returncode']} wall={record.get('wall_seconds')}"
                f" probe={record['probe']} knn={record['knn']}", flush=True)
        with open(record_path, "w") as f:
          json.dump(record, f, indent=1)
        records.append(record)
        write_results(args, records, command, machine_line)
  summary = write_results(args, records, command, machine_line)
  print(markdown_table(summary))
  return summary


def write_results(args, records, command, machine_line):
  """Writes results.json, results.md (and the docs section); the
  summary."""
  summary = aggregate(records)
  starts = sorted(r["started_utc"] for r in records if r.get("started_utc"))
  date = (f"runs started {starts[0]} to {starts[-1]}; table written {_now()}"
          if starts else _now())
  loads = [r["load_before"] for r in records
           if r.get("load_before") is not None]
  reused = [f"{r['method']} seed {r['seed']}" for r in records
            if r.get("reused_from")]
  text = page(summary, command=command, machine_line=machine_line, date=date,
              loads=loads, reused=reused)
  recipes = {}
  for method in summary:
    try:
      recipes[method] = recipe(method)
    except (ImportError, ValueError) as e:
      recipes[method] = f"unreadable: {e}"
  with open(os.path.join(args.out, "results.json"), "w") as f:
    json.dump({"command": command, "machine": machine_line,
               "platform": platform.platform(), "date": date,
               "records": records, "summary": summary, "recipes": recipes,
               "notes": NOTES}, f, indent=1)
  with open(os.path.join(args.out, "results.md"), "w") as f:
    f.write(text + "\n")
  if args.doc:
    write_doc(args.doc, text)
  return summary


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  job = sub.add_parser("twin", help="the lightly twin of one method")
  job.add_argument("--method", choices=METHODS, required=True)
  job.add_argument("--epochs", type=int, default=1)
  job.add_argument("--seed", type=int, default=0,
                   help="torch.manual_seed and the probe's validation split")
  job.add_argument("--num-workers", type=int, default=2)
  job.add_argument("--idx-dir", default=vs_pytorch.IDX_DIR)
  job.add_argument("--steps", type=int, default=None,
                   help="stop after this many steps (smoke runs)")
  job.add_argument("--rows", type=int, default=None,
                   help="first ROWS train and ROWS // 5 test images (smoke)")
  job.add_argument("--out-json", help="also write the summary here")
  par = sub.add_parser("parity", help="the twin's steps against ssljax's "
                       "from the same weights on the same views")
  par.add_argument("--method", choices=METHODS, required=True)
  par.add_argument("--steps", type=int, default=5)
  par.add_argument("--seed", type=int, default=0)
  par.add_argument("--batch-size", type=int, default=None)
  par.add_argument("--threads", type=int, default=None,
                   help="torch's intra-op threads (default: torch's)")
  cmp_ = sub.add_parser("compare", help="ssljax and the twins, over seeds")
  cmp_.add_argument("--torch-python", required=True,
                    help="interpreter with torch, torchvision, lightly")
  cmp_.add_argument("--python", default=sys.executable,
                    help="interpreter of the ssljax runs")
  cmp_.add_argument("--methods", nargs="+", choices=METHODS,
                    default=list(METHODS))
  cmp_.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
  cmp_.add_argument("--epochs", type=int, default=1)
  cmp_.add_argument("--out", required=True)
  cmp_.add_argument("--reuse-ssljax", default=None, metavar="DIR",
                    help="a methods.py --out DIR whose <method>/seed<S> runs "
                    "of the same config are read instead of rerun")
  cmp_.add_argument("--ssljax-arg", action="append", default=[],
                    help="extra argument of the ssljax runs (repeatable; "
                    "no reuse then), e.g. --ssljax-arg=--config.num_steps=3")
  cmp_.add_argument("--twin-arg", action="append", default=[],
                    help="extra argument of the twin (repeatable), e.g. "
                    "--twin-arg=--steps=5")
  cmp_.add_argument("--read-only", action="store_true",
                    help="only read the runs that exist; train none")
  cmp_.add_argument("--rerun", action="store_true",
                    help="train again runs that have a record.json")
  cmp_.add_argument("--doc", default=None,
                    help="also write the section into this Markdown page")
  cmp_.add_argument("--timeout", type=float, default=3600.0)
  cmp_.add_argument("--sample-seconds", type=float, default=0.5)
  args = parser.parse_args(argv)
  if args.command == "twin":
    summary = twin_job(args.method, args.epochs, seed=args.seed,
                       num_workers=args.num_workers, idx_dir=args.idx_dir,
                       steps=args.steps, rows=args.rows)
    if args.out_json:
      with open(args.out_json, "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))
  elif args.command == "parity":
    result = parity(args.method, steps=args.steps, seed=args.seed,
                    batch_size=args.batch_size, threads=args.threads)
    print("| step | lightly loss | ssljax loss | relative difference |")
    print("|---:|---:|---:|---:|")
    for k, (a, b, r) in enumerate(zip(result["lightly_loss"],
                                      result["ssljax_loss"],
                                      result["relative_difference"])):
      print(f"| {k} | {a:.6f} | {b:.6f} | {r:.1e} |")
    drift = result["final_weights_relative_difference"]
    worst = max(drift, key=drift.get)
    kernels = max(v for k, v in drift.items() if "kernel" in k)
    print(f"final weights: largest relative difference {drift[worst]:.1e} "
          f"({worst}), of a kernel {kernels:.1e}")
  else:
    args.argv = argv
    compare(args)


if __name__ == "__main__":
  main()
