"""I-JEPA's whole step against facebookresearch/ijepa's own training loop
(Assran et al. 2023, arXiv 2301.08243), for ``benchmarks/step_parity.py
--method ijepa``: a small ViT (patch 4 on 28 x 28 Fashion-MNIST images, a
7 x 7 grid, width 48, 2 blocks, 4 heads) and predictor (width 32, 2
blocks, 4 heads: the official predictor takes the encoder's heads), batch
16, from ``configs/ijepa.py``'s options.

The official side is ``src.train.main`` itself, run for the K steps
(K / 5 epochs of 5 iterations) with these pieces replaced so that it runs
in one CPU process on our inputs: ``init_distributed`` (one process),
``torch.multiprocessing.set_start_method`` (not changed for the caller),
``make_imagenet1k`` (a loader of our views and masks, in the collator's
form), ``DistributedDataParallel`` (a wrapper holding the module),
``init_model`` (the official ``init_model``, then our initial weights
loaded, every leaf but the fixed position tables), ``init_opt`` (the
official ``init_opt`` itself: its AdamW, parameter groups and schedulers,
whose values are recorded) and ``AllReduce`` (of one process, recording
the loss). The target encoder is the loop's own ``copy.deepcopy`` of the
encoder and moves by the loop's own ``momentum_scheduler`` (its values
read off the EMA's ``mul_``); AMP is off (``use_bfloat16`` False); logs,
CSV and checkpoints go to a temporary folder. Both sides take the same
views (ssljax's, made once) and the same masks (ssljax's sampler, drawn
with the step's key, in the official collator's index form)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import time
import types
import warnings

import numpy as np

from parity_common import (BATCH, STEPS_PER_EPOCH, commit, drift, override,
                           ssljax_setup, worst)

SIZE = 28  # Fashion-MNIST's side: the views are the images' size


def ijepa_config():
  """configs/ijepa.py with a ViT small enough for a CPU and the official
  peak learning rate (1e-3) at batch 16."""
  from configs import ijepa  # pylint: disable=import-outside-toplevel
  c = ijepa.get_config()
  c.model.encoder_kwargs.update(dict(patch_size=4, hidden_dim=48, depth=2,
                                     num_heads=4))
  c.model.jepa_predictor.update(dict(width=32, depth=2, num_heads=4))
  c.views.size = SIZE
  c.batch_size = BATCH
  c.optim.learning_rate = 1e-3 * 256 / BATCH
  c.optim.warmup_epochs = 1.0
  c.evals = {}
  return c


def mask_key(seed: int, step: int):
  """The key ``ssljax.train.train_step`` gives ``method.loss`` at ``step``
  (the views' key folded with 2^20), from which I-JEPA draws its masks."""
  import jax  # pylint: disable=import-outside-toplevel
  key = jax.random.fold_in(jax.random.key(seed), step)
  return jax.random.fold_in(key, 1 << 20)


def collator_form(m) -> tuple:
  """ssljax's padded masks (`ssljax.methods.masks.multiblock_masks`) ->
  the official collator's: (masks_enc, masks_pred), masks_enc a list of one
  int64 (B, K_enc) array (the context, cut to the batch's count),
  masks_pred a list of M int64 (B, K_pred) arrays (the target blocks)."""
  num_context, num_target = int(m["num_context"]), int(m["num_target"])
  context = np.asarray(m["context"])[:, :num_context].astype(np.int64)
  targets = np.asarray(m["targets"])[:, :, :num_target].astype(np.int64)
  return [context], list(targets)


def ssljax_ijepa(config, steps: int, seed: int = 0, float64: bool = False):
  """(initial params and state, views and masks per step, losses,
  schedules, final params and state) of ssljax's train_step (in float64
  throughout with ``float64``: parameters, state, views, computation)."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from ssljax import optimizers  # pylint: disable=import-outside-toplevel
  from ssljax.methods import masks  # pylint: disable=import-outside-toplevel
  run = ssljax_setup(config, steps, seed=seed, float64=float64,
                     image_shape=(SIZE, SIZE, 1))
  method, lr_fn, state = (run.method, run.lr_fn, run.state)
  initial, dtype, step, make_views = (run.initial, run.dtype, run.step,
                                      run.make_views)
  images = run.images
  total = steps
  patch = method.encoder.patch_size
  draw = jax.jit(lambda k: masks.multiblock_masks(
      mask_key(seed, k), BATCH, (SIZE // patch, SIZE // patch),
      **method.mask_kwargs()))
  views, batch_masks, losses, momenta = [], [], [], []
  for k in range(steps):
    batch = {"images": images[k * BATCH:(k + 1) * BATCH]}
    v = make_views(batch, jax.random.fold_in(jax.random.key(seed + 1), k))
    v = tuple(np.asarray(x, dtype) for x in v)
    views.append(v)
    m = jax.device_get(draw(k))
    state, metrics = step(state, {"ready_views": v})
    # The masks drawn here are the step's own: the same counts.
    if (float(metrics["context_patches"]) != int(m["num_context"])
        or float(metrics["target_patches"]) != int(m["num_target"])):
      raise RuntimeError(f"step {k}: the masks drawn here are not the "
                         "step's (train_step's loss key changed?)")
    batch_masks.append(collator_form(m))
    losses.append(float(metrics["loss"]))
    momenta.append(float(metrics["teacher_momentum"]))
  # The values the jitted step used: its count is int32.
  count = lambda k: jnp.asarray(k, jnp.int32)
  wd = optimizers.weight_decay_fn(config.optim, total)
  schedules = {"lr": [float(lr_fn(count(k))) for k in range(steps)],
               "wd": [float(wd(count(k))) for k in range(steps)],
               "momentum": momenta}
  final = jax.device_get((state.params, state.method_state))
  return initial, views, batch_masks, losses, schedules, final


# ------------------------------------------------------------ conversion --

def _linear(layer: dict, name: str) -> dict:
  return {f"{name}.weight": np.ascontiguousarray(
      np.asarray(layer["kernel"]).T),
          f"{name}.bias": np.asarray(layer["bias"])}


def _norm(layer: dict, name: str) -> dict:
  return {f"{name}.weight": np.asarray(layer["scale"]),
          f"{name}.bias": np.asarray(layer["bias"])}


def encoder_tensors(config, params: dict) -> dict:
  """ssljax's I-JEPA encoder (context or target) -> the official
  ``VisionTransformer``'s state_dict, every leaf (the fixed ``pos_embed``,
  a table in ssljax and no parameter to convert, left out): the official
  names are timm's (`ssljax.export.torch_tensors`)."""
  import jax  # pylint: disable=import-outside-toplevel
  from ssljax import export  # pylint: disable=import-outside-toplevel
  from ssljax.methods import networks  # pylint: disable=import-outside-toplevel
  out, _ = export.torch_tensors(networks.encoder_of(config),
                                {"params": params}, image_size=SIZE,
                                channels=1)
  out.pop("pos_embed")
  if len(out) != len(jax.tree.leaves(params)):
    raise RuntimeError(f"{len(jax.tree.leaves(params))} encoder leaves, "
                       f"{len(out)} converted")
  return out


def predictor_tensors(params: dict) -> dict:
  """ssljax's `ssljax.models.JEPAPredictor` params -> the official
  ``VisionTransformerPredictor``'s state_dict, every leaf (its fixed
  ``predictor_pos_embed`` left out, as the encoder's)."""
  import jax  # pylint: disable=import-outside-toplevel
  out = {"mask_token": np.asarray(params["mask_token"])}
  out.update(_linear(params["embed"], "predictor_embed"))
  i = 0
  while f"block_{i}" in params:
    block, name = params[f"block_{i}"], f"predictor_blocks.{i}"
    out.update(_norm(block["norm1"], f"{name}.norm1"))
    out.update(_norm(block["norm2"], f"{name}.norm2"))
    out.update(_linear(block["attn"]["qkv"], f"{name}.attn.qkv"))
    out.update(_linear(block["attn"]["proj"], f"{name}.attn.proj"))
    out.update(_linear(block["mlp"]["fc1"], f"{name}.mlp.fc1"))
    out.update(_linear(block["mlp"]["fc2"], f"{name}.mlp.fc2"))
    i += 1
  out.update(_norm(params["norm"], "predictor_norm"))
  out.update(_linear(params["proj"], "predictor_proj"))
  if len(out) != len(jax.tree.leaves(params)):
    raise RuntimeError(f"{len(jax.tree.leaves(params))} predictor leaves, "
                       f"{len(out)} converted")
  return out


FIXED = ("pos_embed", "predictor_pos_embed")  # tables, not parameters


# -------------------------------------------------------- official side --

@contextlib.contextmanager
def _patched(*triples):
  """Sets (object, attribute, value) for the duration, then restores."""
  missing = object()
  saved = [(obj, name, getattr(obj, name, missing))
           for obj, name, _ in triples]
  try:
    for obj, name, value in triples:
      setattr(obj, name, value)
    yield
  finally:
    for obj, name, value in reversed(saved):
      if value is missing:
        delattr(obj, name)
      else:
        setattr(obj, name, value)


def _official_modules(peer: str):
  """The official ``src.train``, ``src.helper`` and
  ``src.models.vision_transformer`` of the checkout at ``peer``."""
  loaded = sys.modules.get("src")
  if loaded is not None and not os.path.abspath(
      getattr(loaded, "__file__", "") or next(iter(loaded.__path__), "")
  ).startswith(os.path.abspath(peer)):
    raise RuntimeError(f"another package named 'src' is imported "
                       f"({loaded}); run in a fresh interpreter")
  if peer not in sys.path:
    sys.path.insert(0, peer)
  import src.helper as helper  # pylint: disable=import-outside-toplevel,import-error
  import src.models.vision_transformer as vit  # pylint: disable=import-outside-toplevel,import-error
  with contextlib.redirect_stdout(io.StringIO()):
    import src.train as train  # pylint: disable=import-outside-toplevel,import-error
  return train, helper, vit


def _main_args(config, steps: int, folder: str) -> dict:
  """The official config (the yaml's fields) of this run."""
  kw, head, m, o = (config.model.encoder_kwargs, config.model.jepa_predictor,
                    config.masks, config.optim)
  peak = o.learning_rate * config.batch_size / 256
  return {
      "meta": {"use_bfloat16": False, "model_name": "vit_parity",
               "load_checkpoint": False, "read_checkpoint": None,
               "copy_data": False, "pred_depth": head.depth,
               "pred_emb_dim": head.width},
      "data": {"use_gaussian_blur": False, "use_horizontal_flip": False,
               "use_color_distortion": False, "color_jitter_strength": 0.0,
               "batch_size": config.batch_size, "pin_mem": False,
               "num_workers": 0, "root_path": None, "image_folder": None,
               "crop_size": SIZE,
               "crop_scale": list(config.views.crop_scale)},
      "mask": {"allow_overlap": False, "patch_size": kw.patch_size,
               "num_enc_masks": 1, "min_keep": m.min_keep,
               "enc_mask_scale": list(m.context_scale),
               "num_pred_masks": m.num_targets,
               "pred_mask_scale": list(m.target_scale),
               "aspect_ratio": list(m.target_aspect)},
      "optimization": {
          "ema": [config.teacher.momentum, config.teacher.final_momentum],
          "ipe_scale": o.schedule_scale, "weight_decay": o.weight_decay,
          "final_weight_decay": o.final_weight_decay,
          "epochs": steps // STEPS_PER_EPOCH, "warmup": o.warmup_epochs,
          "start_lr": peak * o.warmup_start_factor, "lr": peak,
          "final_lr": peak * o.end_lr_factor},
      "logging": {"folder": folder, "write_tag": "jepa"},
  }


def official_ijepa(peer: str, config, initial, views, batch_masks,
                   threads: int | None = None, float64: bool = False):
  """The official ``src.train.main``, K / 5 epochs of 5 iterations, from
  ssljax's initial weights on the same views and masks (in float64
  throughout with ``float64``, float32 inputs widened); (losses per step,
  the official schedules' values (lr, wd, momentum per step), encoder,
  predictor and target-encoder state_dicts)."""
  import torch  # pylint: disable=import-outside-toplevel
  from functools import partial  # pylint: disable=import-outside-toplevel
  from torch import nn  # pylint: disable=import-outside-toplevel
  train, helper, vit = _official_modules(peer)
  kw, head = config.model.encoder_kwargs, config.model.jepa_predictor
  if head.num_heads != kw.num_heads:
    raise ValueError("the official predictor has the encoder's heads: set "
                     "model.jepa_predictor.num_heads = encoder num_heads")
  dtype = torch.float64 if float64 else torch.float32
  params, state = initial
  steps = len(views)

  def constructor(**kwargs):  # vit_tiny's form, at this run's size
    return vit.VisionTransformer(
        in_chans=1, embed_dim=kw.hidden_dim, depth=kw.depth,
        num_heads=kw.num_heads, mlp_ratio=4, qkv_bias=True,
        norm_layer=partial(nn.LayerNorm, eps=1e-6), **kwargs)

  def load(module, tensors):
    full = module.state_dict()
    if set(full) - set(FIXED) != set(tensors):
      raise RuntimeError(f"names differ: {sorted(set(full) ^ set(tensors))}")
    full.update({k: torch.from_numpy(np.array(v)).to(dtype)
                 for k, v in tensors.items()})
    module.load_state_dict(full, strict=True)

  def init_model(**kwargs):
    encoder, predictor = helper.init_model(**kwargs)
    encoder.to(dtype)
    predictor.to(dtype)
    load(encoder, encoder_tensors(config, params["encoder"]))
    load(predictor, predictor_tensors(params["predictor"]))
    return encoder, predictor

  official = {"lr": [], "wd": [], "momentum": []}
  armed = [False]

  class Recorded:
    """An official scheduler, stepped as the loop steps it, its values
    recorded."""

    def __init__(self, inner, name):
      self.inner, self.name = inner, name

    def step(self):
      official[self.name].append(self.inner.step())
      return official[self.name][-1]

  def init_opt(**kwargs):
    optimizer, scaler, scheduler, wd_scheduler = helper.init_opt(**kwargs)
    zero_grad = optimizer.zero_grad

    def armed_zero_grad(*a, **k):  # the loop's last call before its EMA
      armed[0] = True
      return zero_grad(*a, **k)

    optimizer.zero_grad = armed_zero_grad
    return (optimizer, scaler, Recorded(scheduler, "lr"),
            Recorded(wd_scheduler, "wd"))

  tensor_mul_ = torch.Tensor.mul_

  def mul_(self, other, *a, **k):
    # The EMA's first ``param_k.data.mul_(m)``: the official momentum.
    if armed[0] and isinstance(other, float):
      official["momentum"].append(other)
      armed[0] = False
    return tensor_mul_(self, other, *a, **k)

  wrapped = []

  class DDP(nn.Module):  # one process: the module itself
    def __init__(self, module, **_):
      super().__init__()
      self.module = module
      wrapped.append(module)

    def forward(self, *a, **k):
      return self.module(*a, **k)

  losses = []

  class AllReduce:  # of one process: the identity, recording the loss
    @staticmethod
    def apply(x):
      losses.append(float(x.item()))
      return x

  to_t = lambda a: torch.from_numpy(np.array(a))  # a writable copy
  batches = [([to_t(views[k][0].transpose(0, 3, 1, 2)).to(dtype),
               torch.zeros(BATCH, dtype=torch.int64)],
              [to_t(c) for c in batch_masks[k][0]],
              [to_t(t) for t in batch_masks[k][1]]) for k in range(steps)]

  class Loader:  # the epoch's 5 batches, as the loop's DataLoader
    epoch = 0

    def __len__(self):
      return STEPS_PER_EPOCH

    def __iter__(self):
      start = self.epoch * STEPS_PER_EPOCH
      return iter(batches[start:start + STEPS_PER_EPOCH])

  loader = Loader()
  sampler = types.SimpleNamespace(
      set_epoch=lambda epoch: setattr(loader, "epoch", epoch))

  previous_threads = torch.get_num_threads()
  if threads:
    torch.set_num_threads(threads)
  root = logging.getLogger()
  level = root.level
  try:
    with tempfile.TemporaryDirectory() as folder, _patched(
        (vit, "vit_parity", constructor),
        (train, "init_distributed", lambda *a, **k: (1, 0)),
        (train, "mp", types.SimpleNamespace(
            set_start_method=lambda *a, **k: None)),
        (train, "make_imagenet1k", lambda **k: (None, loader, sampler)),
        (train, "init_model", init_model),
        (train, "init_opt", init_opt),
        (train, "DistributedDataParallel", DDP),
        (train, "AllReduce", AllReduce),
        (torch.Tensor, "mul_", mul_)), warnings.catch_warnings(), \
        contextlib.redirect_stdout(io.StringIO()):
      warnings.simplefilter("ignore")
      root.setLevel(logging.ERROR)
      train.main(_main_args(config, steps, folder))
  finally:
    root.setLevel(level)
    torch.set_num_threads(previous_threads)
  encoder, predictor, target = wrapped
  to_np = lambda net: {k: v.detach().numpy().copy()
                       for k, v in net.state_dict().items()}
  if len(losses) != steps or len(official["momentum"]) != steps:
    raise RuntimeError(f"the official loop ran {len(losses)} steps "
                       f"({len(official['momentum'])} EMA updates), not "
                       f"{steps}")
  return losses, official, to_np(encoder), to_np(predictor), to_np(target)


# -------------------------------------------------------------- masks --

def mask_distribution(peer: str, config, batches: int, seed: int = 0
                      ) -> dict:
  """ssljax's multi-block sampler against the official ``MaskCollator``
  over ``batches`` batches of 16 each: the distributions of the target
  block's patch count, of the context's count after the cut to the batch
  minimum, of each patch's chance to be in a target block and in the
  context, and the fraction of images whose context overlaps one of its
  targets (the official relaxation after 20 rejected candidates). Distance:
  total variation (histograms) and the largest difference of a patch's
  chance; reference: the official sampler against itself on other seeds
  (sampling noise)."""
  import jax  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  from ssljax.methods import masks  # pylint: disable=import-outside-toplevel
  _official_modules(peer)
  from src.masks.multiblock import MaskCollator  # pylint: disable=import-outside-toplevel,import-error
  kw, m = config.model.encoder_kwargs, config.masks
  side = SIZE // kw.patch_size
  cells = side * side

  def summary(samples):
    """samples: per batch (masks_enc, masks_pred) of the collator."""
    targets_hist, context_hist = np.zeros(cells + 1), np.zeros(cells + 1)
    in_target, in_context = np.zeros(cells), np.zeros(cells)
    overlap, images = 0, 0
    for (context,), targets in samples:
      context_hist[context.shape[1]] += 1
      targets_hist[targets[0].shape[1]] += 1
      for b in range(context.shape[0]):
        covered = np.zeros(cells, bool)
        for t in targets:
          covered[t[b]] = True
          in_target[t[b]] += 1
        in_context[context[b]] += 1
        overlap += bool(covered[context[b]].any())
        images += 1
    return {"target": targets_hist / len(samples),
            "context": context_hist / len(samples),
            "context_counts": np.asarray([enc[0].shape[1]
                                          for enc, _ in samples]),
            "target_counts": np.asarray([t[0].shape[1]
                                         for _, t in samples]),
            "in_target": in_target / images / m.num_targets,
            "in_context": in_context / images,
            "overlap": overlap / images}

  def official(first_seed, torch_seed):
    collator = MaskCollator(
        input_size=SIZE, patch_size=kw.patch_size,
        enc_mask_scale=tuple(m.context_scale),
        pred_mask_scale=tuple(m.target_scale),
        aspect_ratio=tuple(m.target_aspect), nenc=1,
        npred=m.num_targets, min_keep=m.min_keep, allow_overlap=False)
    collator._itr_counter.value = first_seed - 1  # pylint: disable=protected-access
    state = torch.random.get_rng_state()
    torch.manual_seed(torch_seed)
    logger = logging.getLogger()
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
      out = []
      for _ in range(batches):
        _, enc, pred = collator([torch.zeros(1)] * BATCH)
        out.append(([enc[0].numpy()], [p.numpy() for p in pred]))
    finally:
      logger.setLevel(level)
      torch.random.set_rng_state(state)
    return summary(out)

  kwargs = dict(num_targets=m.num_targets, target_scale=tuple(m.target_scale),
                target_aspect=tuple(m.target_aspect),
                context_scale=tuple(m.context_scale), min_keep=m.min_keep)
  draw = jax.jit(jax.vmap(lambda k: masks.multiblock_masks(
      k, BATCH, (side, side), **kwargs)))
  drawn = jax.device_get(draw(jax.random.split(jax.random.key(seed),
                                               batches)))
  ours = summary([collator_form(jax.tree.map(lambda a, i=i: a[i], drawn))
                  for i in range(batches)])
  theirs = official(0, seed)
  again = official(batches, seed + 1)

  def distances(a, b):
    tv = lambda p, q: float(0.5 * np.abs(p - q).sum())
    return {"target_count_tv": tv(a["target"], b["target"]),
            "context_count_tv": tv(a["context"], b["context"]),
            "in_target_max": float(np.abs(a["in_target"]
                                          - b["in_target"]).max()),
            "in_context_max": float(np.abs(a["in_context"]
                                           - b["in_context"]).max()),
            "overlap": abs(a["overlap"] - b["overlap"])}

  # The block sizes of a batch, one uniform u each: the official
  # ``_sample_block_size`` (u from its generator) against ssljax's
  # `block_size` (under jit, float32 u) at the same u.
  sized = jax.jit(lambda u, scale, aspect: masks.block_size(
      u, (side, side), scale, aspect), static_argnums=(1, 2))
  collator = MaskCollator(input_size=SIZE, patch_size=kw.patch_size)
  size_mismatches = 0
  for s in range(batches):
    for scale, aspect in ((tuple(m.target_scale), tuple(m.target_aspect)),
                          (tuple(m.context_scale), (1.0, 1.0))):
      u = torch.rand(1, generator=torch.Generator().manual_seed(s)).item()
      theirs_hw = collator._sample_block_size(  # pylint: disable=protected-access
          torch.Generator().manual_seed(s), scale, aspect)
      ours_hw = tuple(int(x) for x in sized(np.float32(u), scale, aspect))
      size_mismatches += ours_hw != tuple(theirs_hw)
  def means(name):
    """The batches' mean count in both, and their difference over its
    standard error (a z-score: |z| < 2 in 95 % of samples of one law)."""
    a, b = ours[name].astype(float), theirs[name].astype(float)
    error = np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    return {"ssljax": float(a.mean()), "official": float(b.mean()),
            "z": float((a.mean() - b.mean()) / error) if error else 0.0}

  return {"batches": batches, "block_size_mismatches": size_mismatches,
          "ssljax_vs_official": distances(ours, theirs),
          "official_vs_official": distances(again, theirs),
          "mean_context": means("context_counts"),
          "mean_target": means("target_counts"),
          "overlap": {"ssljax": ours["overlap"],
                      "official": theirs["overlap"]}}


# -------------------------------------------------------------- compare --

def _relative(ours, theirs) -> float:
  ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
  return float(np.max(np.abs(ours - theirs) / np.maximum(np.abs(theirs),
                                                         1e-300)))


def compare(args):
  """The I-JEPA comparison of ``args`` (step_parity.py's options): ssljax's
  K steps, the official loop's on the same weights, views and masks, and
  its rounding reference (float64: on one thread; float32: in float64);
  the result dict written as JSON (losses per step, the parts' drift
  after K steps, the schedules, with ``args.mask_batches`` the masks)."""
  import jax  # pylint: disable=import-outside-toplevel
  from ssljax import __version__  # pylint: disable=import-outside-toplevel
  from ssljax.models import vit  # pylint: disable=import-outside-toplevel
  config = ijepa_config()
  official_config = ijepa_config()
  override(config, args.set)
  if args.float64:
    if not jax.config.jax_enable_x64:  # (not inside jax.enable_x64)
      jax.config.update("jax_enable_x64", True)
    config.model.dtype = "float64"
  started = time.time()
  initial, views, batch_masks, ours, schedules, final = ssljax_ijepa(
      config, args.steps, float64=args.float64)
  run = lambda **kw: official_ijepa(
      args.peer, official_config, initial, views, batch_masks, **kw)
  theirs, official_schedules, encoder, predictor, target = run(
      float64=args.float64)
  # The rounding reference: in float64 the official run on 1 thread; in
  # float32 the official run in float64 (the small products here run on
  # one thread anyway, so the thread count alone moves nothing).
  ref_losses, _, ref_encoder, ref_predictor, ref_target = (
      run(threads=1, float64=True) if args.float64 else run(float64=True))
  params, state = final
  start_params, start_state = initial
  # The official target encoder starts as a deep copy of the encoder.
  if not all(np.array_equal(a, b) for a, b in zip(
      jax.tree.leaves(start_params["encoder"]),
      jax.tree.leaves(start_state["teacher"]["params"]["encoder"]))):
    raise RuntimeError("ssljax's target encoder does not start as a copy "
                       "of its encoder")
  ours_t = {"encoder": encoder_tensors(config, params["encoder"]),
            "predictor": predictor_tensors(params["predictor"]),
            "target encoder": encoder_tensors(
                config, state["teacher"]["params"]["encoder"])}
  start = {"encoder": encoder_tensors(config, start_params["encoder"]),
           "predictor": predictor_tensors(start_params["predictor"]),
           "target encoder": encoder_tensors(
               config, start_state["teacher"]["params"]["encoder"])}
  theirs_t = {"encoder": encoder, "predictor": predictor,
              "target encoder": target}
  ref_t = {"encoder": ref_encoder, "predictor": ref_predictor,
           "target encoder": ref_target}
  rows = []
  for k in range(args.steps):
    rows.append({"step": k, "ssljax": ours[k], "official": theirs[k],
                 "official_1_thread": ref_losses[k],
                 "relative": abs(ours[k] - theirs[k]) / abs(theirs[k]),
                 "rounding": abs(ref_losses[k] - theirs[k]) / abs(theirs[k]),
                 "context_patches": int(batch_masks[k][0][0].shape[1]),
                 "target_patches": int(batch_masks[k][1][0].shape[1])})
  tensors = {part: drift(ours_t[part], theirs_t[part], start[part],
                         sorted(start[part])) for part in ours_t}
  rounding = {part: drift(ref_t[part], theirs_t[part], start[part],
                          sorted(start[part])) for part in ours_t}
  # The fixed position tables: ssljax's (float32) against the official
  # (float64 NumPy, stored as float32), and the official target encoder's
  # after K EMA updates of a table that does not change.
  kw, head = config.model.encoder_kwargs, config.model.jepa_predictor
  grid = (SIZE // kw.patch_size,) * 2
  ours_pos = np.asarray(vit.sincos_pos_embed_2d(kw.hidden_dim, grid))
  ours_pred_pos = np.asarray(vit.sincos_pos_embed_2d(head.width, grid))
  tensors["encoder position table"] = worst(ours_pos, encoder["pos_embed"][0])
  rounding["encoder position table"] = worst(ref_encoder["pos_embed"][0],
                                             encoder["pos_embed"][0])
  tensors["predictor position table"] = worst(
      ours_pred_pos, predictor["predictor_pos_embed"][0])
  rounding["predictor position table"] = worst(
      ref_predictor["predictor_pos_embed"][0],
      predictor["predictor_pos_embed"][0])
  tensors["target encoder position table after K"] = worst(
      ours_pos, target["pos_embed"][0])
  rounding["target encoder position table after K"] = worst(
      ref_target["pos_embed"][0], target["pos_embed"][0])
  schedule_differences = {
      name: _relative(schedules[name], official_schedules[name])
      for name in ("lr", "wd", "momentum")}
  result = {"method": "ijepa", "peer": os.path.abspath(args.peer),
            "rounding_reference": (
                "official 1 thread vs default" if args.float64 else
                "official float64 vs float32"),
            "peer_commit": commit(args.peer), "ssljax": __version__,
            "steps": args.steps, "local_crops": 0,
            "ssljax_overrides": list(args.set or ()),
            "float64": args.float64,
            "losses": rows, "after_K_steps": tensors,
            "rounding_after_K_steps": rounding,
            "schedules": {"ssljax": schedules, "official": official_schedules,
                          "worst_relative_difference": schedule_differences},
            "wall_s": round(time.time() - started, 1)}
  if getattr(args, "mask_batches", 0):
    result["mask_distribution"] = mask_distribution(
        args.peer, official_config, args.mask_batches)
  result["wall_s"] = round(time.time() - started, 1)
  return result
