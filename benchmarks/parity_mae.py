"""MAE's whole step against facebookresearch/mae's ``train_one_epoch``
(He et al. 2022, arXiv 2111.06377), for ``benchmarks/step_parity.py
--method mae``: a small ViT (patch 4, width 48, 2 blocks, 3 heads) and
decoder (width 32, 1 block, 2 heads) on 28 x 28 Fashion-MNIST images
repeated on 3 channels, batch 16, from ``configs/mae.py``'s options.

The official model was written for timm 0.3.2; with a newer timm and torch
the run shims, in the process only: ``Block``'s ``qk_scale`` argument
(dropped; None, what the official code passes, is timm's default scale),
``torch._six.inf`` (``math.inf``) for util/misc.py, ``np.float``
(``float``) while the official model builds its sine-cosine tables, and
main_pretrain.py's ``optim_factory.add_weight_decay``, which is timm's
``param_groups_weight_decay`` now (the same rule: no decay for 1-D
tensors and biases). On a CPU, ``torch.cuda.amp.autocast`` is a null
context and ``torch.cuda.amp.GradScaler`` a disabled one (its ``scale``
returns the loss, its ``step`` calls ``optimizer.step()``), and
``torch.cuda.synchronize`` does nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import sys
import time
import types

import numpy as np

from parity_common import (BATCH, STEPS_PER_EPOCH, commit, drift, override,
                           ssljax_setup, worst)

CHANNELS = 3  # the official patchify reads 3 channels


def mae_config():
  """configs/mae.py with a ViT small enough for a CPU."""
  from configs import mae  # pylint: disable=import-outside-toplevel
  c = mae.get_config()
  c.model.encoder_kwargs.update(dict(patch_size=4, hidden_dim=48, depth=2,
                                     num_heads=3))
  c.model.mae_decoder.update(dict(width=32, depth=1, num_heads=2))
  c.batch_size = BATCH
  c.evals = {}
  return c


def _masks(config, steps: int, seed: int):
  """The masks of ssljax's steps: train_step's loss key of each step given
  to `ssljax.methods.masks.random_masking`, as MAE's loss does; per step the
  shuffle ids_shuffle (B, L) int (its first K entries are the kept
  patches)."""
  import jax  # pylint: disable=import-outside-toplevel
  from ssljax.methods import masks  # pylint: disable=import-outside-toplevel
  grid = config.views.size // config.model.encoder_kwargs.patch_size
  out = []
  for k in range(steps):
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), k),
                             1 << 20)
    m = masks.random_masking(key, BATCH, grid * grid,
                             config.masks.mask_ratio)
    out.append(np.argsort(np.asarray(m["ids_restore"]), axis=1))
  return out


def ssljax_mae(config, steps: int, seed: int = 0, float64: bool = False):
  """(initial params, views per step, losses, lr per step, final params) of
  ssljax's train_step (in float64 throughout with ``float64``)."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  run = ssljax_setup(config, steps, seed=seed, float64=float64,
                     image_shape=(28, 28, CHANNELS))
  lr_fn, state = (run.lr_fn, run.state)
  initial, dtype, step, make_views = (run.initial[0], run.dtype, run.step,
                                      run.make_views)
  images = run.images
  views, losses = [], []
  for k in range(steps):
    batch = {"images": images[k * BATCH:(k + 1) * BATCH]}
    (v,) = make_views(batch, jax.random.fold_in(jax.random.key(seed + 1), k))
    v = np.repeat(np.asarray(v, dtype), CHANNELS, axis=-1)  # grey -> 3
    views.append(v)
    state, metrics = step(state, {"ready_views": (v,)})
    losses.append(float(metrics["loss"]))
  count = lambda k: jnp.asarray(k, jnp.int32)  # the jitted step's count
  lrs = [float(lr_fn(count(k))) for k in range(steps)]
  return initial, views, losses, lrs, jax.device_get(state.params)


def _block_tensors(block: dict, name: str) -> dict:
  out = {}
  for norm in ("norm1", "norm2"):
    out[f"{name}.{norm}.weight"] = np.asarray(block[norm]["scale"])
    out[f"{name}.{norm}.bias"] = np.asarray(block[norm]["bias"])
  for part, layer in (("attn", "qkv"), ("attn", "proj"), ("mlp", "fc1"),
                      ("mlp", "fc2")):
    out[f"{name}.{part}.{layer}.weight"] = np.ascontiguousarray(
        np.asarray(block[part][layer]["kernel"]).T)
    out[f"{name}.{part}.{layer}.bias"] = np.asarray(
        block[part][layer]["bias"])
  return out


def _torch_state(config, params: dict) -> dict:
  """ssljax's MAENetwork params -> MaskedAutoencoderViT's state_dict: the
  encoder by `ssljax.export.torch_tensors` (timm's names, its sine-cosine
  table as ``pos_embed``), the decoder mapped here (``decoder_embed``,
  ``mask_token``, ``decoder_pos_embed``, ``decoder_blocks``,
  ``decoder_norm``, ``decoder_pred``)."""
  from ssljax import export  # pylint: disable=import-outside-toplevel
  from ssljax.models import vit  # pylint: disable=import-outside-toplevel
  from ssljax.methods import networks  # pylint: disable=import-outside-toplevel
  encoder = networks.encoder_of(config)
  state, _ = export.torch_tensors(encoder, {"params": params["encoder"]},
                                  image_size=config.views.size,
                                  channels=CHANNELS)
  dec = params["decoder"]
  width = config.model.mae_decoder.width
  grid = config.views.size // config.model.encoder_kwargs.patch_size
  table = np.asarray(vit.sincos_pos_embed_2d(width, (grid, grid)))
  state["decoder_pos_embed"] = np.concatenate(
      [np.zeros((1, width), table.dtype), table])[None]
  state["mask_token"] = np.asarray(dec["mask_token"])
  for ours, theirs in (("embed", "decoder_embed"), ("pred", "decoder_pred")):
    state[f"{theirs}.weight"] = np.ascontiguousarray(
        np.asarray(dec[ours]["kernel"]).T)
    state[f"{theirs}.bias"] = np.asarray(dec[ours]["bias"])
  for i in range(config.model.mae_decoder.depth):
    state.update(_block_tensors(dec[f"block_{i}"], f"decoder_blocks.{i}"))
  state["decoder_norm.weight"] = np.asarray(dec["norm"]["scale"])
  state["decoder_norm.bias"] = np.asarray(dec["norm"]["bias"])
  return state


def _shim(peer: str):
  """Imports the official modules with the shims of the module docstring;
  (models_mae, engine_pretrain, util.misc, timm's param-group function)."""
  import torch  # pylint: disable=import-outside-toplevel
  if "torch._six" not in sys.modules:
    six = types.ModuleType("torch._six")
    six.inf = math.inf
    sys.modules["torch._six"] = six
  torch.cuda.amp.autocast = lambda *a, **k: contextlib.nullcontext()
  torch.cuda.amp.GradScaler = lambda *a, **k: torch.amp.GradScaler(
      "cuda", enabled=False)
  torch.cuda.synchronize = lambda *a, **k: None
  if peer not in sys.path:
    sys.path.insert(0, peer)
  import engine_pretrain  # pylint: disable=import-outside-toplevel,import-error
  import models_mae  # pylint: disable=import-outside-toplevel,import-error
  import util.misc as misc  # pylint: disable=import-outside-toplevel,import-error
  from timm.models.vision_transformer import Block  # pylint: disable=import-outside-toplevel
  from timm.optim import param_groups_weight_decay  # pylint: disable=import-outside-toplevel

  def block(*args, qk_scale=None, **kwargs):
    if qk_scale is not None:
      raise ValueError("only qk_scale=None (timm's scale) is shimmed")
    return Block(*args, **kwargs)

  models_mae.Block = block
  return models_mae, engine_pretrain, misc, param_groups_weight_decay


def official_mae(peer: str, config, initial, views, shuffles,
                 threads: int | None, float64: bool = False):
  """The official train_one_epoch, epoch after epoch, from ssljax's
  initial weights on the same views and masks, with main_pretrain.py's
  learning rate (blr × batch / 256, min_lr 0), parameter groups,
  AdamW(betas=(0.9, 0.95)) and loss scaler; (losses per step, lr per step,
  final state_dict, the official model's own position tables)."""
  from functools import partial  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  from torch import nn  # pylint: disable=import-outside-toplevel
  before = torch.get_num_threads()
  if threads:
    torch.set_num_threads(threads)
  models_mae, engine_pretrain, misc, weight_decay_groups = _shim(peer)
  kw = config.model.encoder_kwargs
  dec = config.model.mae_decoder
  noises = []

  class GivenMasks(models_mae.MaskedAutoencoderViT):
    """The official random_masking, its torch.rand noise replaced by one
    whose argsort is ssljax's shuffle of the step."""

    def random_masking(self, x, mask_ratio):
      noise = noises.pop(0)
      draw = torch.rand
      torch.rand = lambda *a, **k: noise
      try:
        return super().random_masking(x, mask_ratio)
      finally:
        torch.rand = draw

  had_float = "float" in np.__dict__
  np.float = float  # util/pos_embed.py's dtype=np.float (removed in numpy)
  try:
    # mae_vit_*'s arguments: mlp_ratio 4, LayerNorm eps 1e-6.
    model = GivenMasks(
        img_size=config.views.size, patch_size=kw.patch_size,
        in_chans=CHANNELS, embed_dim=kw.hidden_dim, depth=kw.depth,
        num_heads=kw.num_heads, decoder_embed_dim=dec.width,
        decoder_depth=dec.depth, decoder_num_heads=dec.num_heads,
        mlp_ratio=4, norm_layer=partial(nn.LayerNorm, eps=1e-6),
        norm_pix_loss=config.loss.norm_pix_loss)
  finally:
    if not had_float:
      del np.float
  tables = {k: model.state_dict()[k].numpy().copy()
            for k in ("pos_embed", "decoder_pos_embed")}
  if float64:
    model.double()
  model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in
                         _torch_state(config, initial).items()}, strict=True)
  epochs = len(views) // STEPS_PER_EPOCH
  args = argparse.Namespace(
      accum_iter=1, mask_ratio=config.masks.mask_ratio,
      blr=config.optim.learning_rate, min_lr=0.0,
      warmup_epochs=config.optim.warmup_epochs, epochs=epochs,
      weight_decay=config.optim.weight_decay)
  args.lr = args.blr * BATCH / 256  # main_pretrain.py: eff. batch / 256
  optimizer = torch.optim.AdamW(
      weight_decay_groups(model, args.weight_decay), lr=args.lr,
      betas=(0.9, 0.95))
  scaler = misc.NativeScalerWithGradNormCount()
  losses, lrs = [], []

  class Recorded(nn.Module):
    """The model, recording each step's loss and the lr it is taken at."""

    def __init__(self, inner):
      super().__init__()
      self.inner = inner

    def forward(self, imgs, mask_ratio):
      out = self.inner(imgs, mask_ratio=mask_ratio)
      losses.append(float(out[0].item()))
      lrs.append(float(optimizer.param_groups[0]["lr"]))
      return out

  recorded = Recorded(model)
  for k in range(len(views)):
    rank = np.empty_like(shuffles[k], dtype=np.float64)
    np.put_along_axis(rank, shuffles[k],
                      np.arange(shuffles[k].shape[1], dtype=np.float64)
                      [None].repeat(shuffles[k].shape[0], 0), axis=1)
    noises.append(torch.from_numpy(rank / shuffles[k].shape[1]))
  try:
    for epoch in range(epochs):
      loader = [(torch.from_numpy(np.ascontiguousarray(
          views[k].transpose(0, 3, 1, 2))), None)
                for k in range(epoch * STEPS_PER_EPOCH,
                               (epoch + 1) * STEPS_PER_EPOCH)]
      with contextlib.redirect_stdout(io.StringIO()):
        engine_pretrain.train_one_epoch(recorded, loader, optimizer,
                                        torch.device("cpu"), epoch, scaler,
                                        log_writer=None, args=args)
  finally:
    torch.set_num_threads(before)
  final = {k: v.detach().numpy().copy()
           for k, v in model.state_dict().items()}
  return losses, lrs, final, tables


def compare(args):
  """The comparison of ``args`` (step_parity.py's options) as a dict: the
  losses, learning rates, tensors after K steps and position tables of
  both sides and of the rounding reference. With ``args.float64`` ssljax's
  side runs with x64 on, restored afterwards."""
  import jax  # pylint: disable=import-outside-toplevel
  from ssljax import __version__  # pylint: disable=import-outside-toplevel
  config = mae_config()
  official_config = mae_config()
  override(config, args.set)
  if args.float64:
    config.model.dtype = "float64"
  started = time.time()
  with (jax.enable_x64(True) if args.float64 else contextlib.nullcontext()):
    initial, views, ours, our_lrs, final = ssljax_mae(
        config, args.steps, float64=args.float64)
    shuffles = _masks(config, args.steps, seed=0)
  theirs, lrs, tensors, tables = official_mae(
      args.peer, official_config, initial, views, shuffles, threads=None,
      float64=args.float64)
  ref_losses, ref_lrs, ref_tensors, _ = official_mae(
      args.peer, official_config, initial, views, shuffles, threads=1,
      float64=args.float64)
  start = _torch_state(config, initial)
  ours_final = _torch_state(config, final)
  rows = []
  for k in range(args.steps):
    rows.append({"step": k, "ssljax": ours[k], "official": theirs[k],
                 "official_1_thread": ref_losses[k],
                 "relative": abs(ours[k] - theirs[k]) / abs(theirs[k]),
                 "rounding": abs(ref_losses[k] - theirs[k]) / abs(theirs[k])})
  fixed = ("pos_embed", "decoder_pos_embed")  # not trained
  encoder = [k for k in tensors if k not in fixed
             and not k.startswith(("decoder", "mask_token"))]
  decoder = [k for k in tensors if k not in fixed and k not in encoder]
  after = {"encoder": drift(ours_final, tensors, start, encoder),
           "decoder": drift(ours_final, tensors, start, decoder),
           "lr": worst(our_lrs, lrs)}
  rounding = {"encoder": drift(ref_tensors, tensors, start, encoder),
              "decoder": drift(ref_tensors, tensors, start, decoder),
              "lr": worst(ref_lrs, lrs)}
  checks = {
      f"{name} (ssljax's sine-cosine table against the official model's "
      "own, largest |difference|)": float(np.abs(
          np.asarray(start[name], np.float64)
          - np.asarray(tables[name], np.float64)).max())
      for name in fixed}
  return {"method": "mae", "peer": os.path.abspath(args.peer),
          "peer_commit": commit(args.peer), "ssljax": __version__,
          "steps": args.steps, "ssljax_overrides": list(args.set or ()),
          "float64": args.float64, "losses": rows,
          "lr": {"ssljax": our_lrs, "official": lrs},
          "after_K_steps": after, "rounding_after_K_steps": rounding,
          "checks": checks, "wall_s": round(time.time() - started, 1)}
