"""The PyTorch side of ``benchmarks/accelerator.py``'s same-work comparison.

Imports torch and torchvision only (never jax or ssljax): it runs in the
child process of whichever Python has torch (``--torch_python``). The
parent hands it a *twin* spec (plain JSON, built from the recipe's config
by ``accelerator.torch_twin``): the model, loss, optimiser and the view
recipe of the ssljax step it is compared with.

Two twins (``make_step``), each one train step. **resnet50_vicreg**:
torchvision's ResNet-50 (``fc`` removed) and the recipe's projector
(Linear-BatchNorm-ReLU blocks and a last Linear), each view through the
network on its own (BatchNorm per view, as ssljax's
`ssljax.methods.single_network.forward_views` and facebookresearch/vicreg),
the VICReg loss (Bardes, Ponce & LeCun 2022, arXiv 2105.04906, Eq. 1-6,
in float32), and LARS (You, Gitman & Ginsburg 2017, arXiv 1708.03888) in
the order of ``optax.lars``, which ssljax's recipe uses: weight decay and
the trust ratio η‖w‖/‖g‖ on parameters of ndim > 1 only, then the
learning rate, then heavy-ball momentum. ``channels_last`` and bfloat16
autocast. **vit_mae**: MAE (He et al. 2022, arXiv 2111.06377) on one
view, `MaskedAutoencoder` (torchvision's ViT blocks for the encoder, the
decoder and loss written from the paper) with ``torch.optim.AdamW``
(weight decay on kernels only), bfloat16 autocast, the loss in float32.
torch.compile optional for both.

The views (``make_views``), for the "views made on the GPU" rows: the
same operations in the same order as `ssljax.data.device_views` with
`ssljax.data.view_ops.apply_view` for the recipe's view spec, each with
per-sample random parameters: RandomResizedCrop boxes drawn as torchvision
draws them (10 candidates, the centred fallback; the distribution of
`ssljax.data.crops.box_fractions`), cut and resized to S × S by
``torchvision.ops.roi_align`` (bilinear, adaptive sampling: several samples
per output pixel when a box is larger than S); then flip, colour jitter
(brightness, contrast, saturation, hue; the order drawn per sample; each
computed for every sample and selected, as ssljax computes them),
grayscale, Gaussian blur (separable, reflect padding, kernel 10 % of the
side, computed for every sample and selected), solarisation. The
transforms of ``torchvision.transforms.v2`` draw one set of parameters per
call, for a whole batch; per-sample parameters on a batch therefore come
from tensors of uniforms here, applied with torchvision's batch kernels
where they take one (``horizontal_flip``, ``rgb_to_grayscale``,
``roi_align``) and torch operations elsewhere. Every op has an explicit
uniforms argument, so that a test can hand it the draws of ssljax's op and
compare the outputs.
"""

import math
import os
import statistics
import time

import torch
import torchvision
from torch import nn
from torchvision.transforms.v2 import functional as TF

CROP_TRIES = 10  # torchvision's RandomResizedCrop candidates
LUMA = (0.299, 0.587, 0.114)  # ITU-R BT.601, as ssljax.data.view_ops


# ----------------------------------------------------------------- views --
def box_fractions(u, crop_scale, crop_ratio, height: int, width: int):
  """RandomResizedCrop boxes (y0, x0, h, w) as fractions of the sides.

  The torch form of `ssljax.data.crops.box_fractions` (the first of T
  candidates that fits, else the whole image narrowed to the nearest
  allowed aspect, centred; Szegedy et al. 2015, arXiv 1409.4842).

  Args:
    u: float (n, T, 4) uniforms in [0, 1).
    crop_scale, crop_ratio: (min, max) area fraction and aspect (w / h).
    height, width: the images' sides in pixels (ints).

  Returns:
    four float (n,) tensors in [0, 1].
  """
  area = height * width * (crop_scale[0]
                           + (crop_scale[1] - crop_scale[0]) * u[..., 0])
  lo, hi = math.log(crop_ratio[0]), math.log(crop_ratio[1])
  aspect = torch.exp(lo + (hi - lo) * u[..., 1])
  box_w = torch.round(torch.sqrt(area * aspect))  # half to even, as numpy
  box_h = torch.round(torch.sqrt(area / aspect))
  fits = (box_w > 0) & (box_w <= width) & (box_h > 0) & (box_h <= height)
  first = torch.argmax(fits.to(u.dtype), dim=1, keepdim=True)  # the first
  pick = lambda a: torch.gather(a, 1, first)[:, 0]
  found = fits.any(dim=1)
  box_h, box_w = pick(box_h), pick(box_w)
  top = torch.minimum(torch.floor(pick(u[..., 2]) * (height - box_h + 1)),
                      height - box_h)
  left = torch.minimum(torch.floor(pick(u[..., 3]) * (width - box_w + 1)),
                       width - box_w)
  ratio = width / height
  fall_h = float(round(width / crop_ratio[0])) if ratio < crop_ratio[0] \
      else float(height)
  fall_w = float(round(height * crop_ratio[1])) if ratio > crop_ratio[1] \
      else float(width)
  box_h = torch.where(found, box_h, fall_h)
  box_w = torch.where(found, box_w, fall_w)
  top = torch.where(found, top, float((height - fall_h) // 2))
  left = torch.where(found, left, float((width - fall_w) // 2))
  return top / height, left / width, box_h / height, box_w / width


def resized_crop(images, u, size: int, crop_scale, crop_ratio):
  """Each row's RandomResizedCrop box, resized to size × size.

  Args:
    images: float (B, C, H, W).
    u: float (B, T, 4) uniforms (`box_fractions`).
    size: output side S.

  Returns:
    float (B, C, S, S) (``torchvision.ops.roi_align``, aligned, bilinear,
    adaptive sampling ratio).
  """
  b, _, height, width = images.shape
  y0, x0, h, w = box_fractions(u, crop_scale, crop_ratio, height, width)
  rows = torch.arange(b, device=images.device, dtype=images.dtype)
  boxes = torch.stack([rows, x0 * width, y0 * height, (x0 + w) * width,
                       (y0 + h) * height], dim=1)
  return torchvision.ops.roi_align(images, boxes, (size, size),
                                   spatial_scale=1.0, sampling_ratio=-1,
                                   aligned=True)


def _rows(mask):
  return mask[:, None, None, None]


def flip(x, u, prob):
  """Mirrors rows with u < prob. x: float (B, C, H, W); u: (B,)."""
  return torch.where(_rows(u < prob), TF.horizontal_flip(x), x)


def _luma(x):
  w = torch.tensor(LUMA, device=x.device, dtype=x.dtype)
  return torch.einsum("bchw,c->bhw", x, w)[:, None]


def _blend(x, target, factor):  # torchvision's _blend, per row
  f = _rows(factor)
  return torch.clamp(f * x + (1.0 - f) * target, 0.0, 1.0)


def rgb_to_hsv(x):
  """(B, 3, H, W) RGB in [0, 1] -> (hue, saturation, value) planes, the
  formulas of dm-pix's ``rgb_planes_to_hsv_planes`` (ssljax's hue op)."""
  eps = torch.finfo(x.dtype).eps
  x = torch.where(x.abs() < eps, torch.zeros_like(x), x)
  r, g, b = x[:, 0], x[:, 1], x[:, 2]
  value = torch.maximum(torch.maximum(r, g), b)
  rng = value - torch.minimum(torch.minimum(r, g), b)
  safe_value = torch.where(value > 0, value, torch.ones_like(value))
  safe_range = torch.where(rng > 0, rng, torch.ones_like(rng))
  saturation = torch.where(value > 0, rng / safe_value,
                           torch.zeros_like(value))
  norm = 1.0 / (6.0 * safe_range)
  hue = torch.where(value == g, norm * (b - r) + 2.0 / 6.0,
                    norm * (r - g) + 4.0 / 6.0)
  hue = torch.where(value == r, norm * (g - b), hue)
  hue = torch.where(rng > 0, hue, torch.zeros_like(hue)) + (hue < 0).to(
      hue.dtype)
  return hue, saturation, value


def hsv_to_rgb(hue, saturation, value):
  """The inverse planes -> (B, 3, H, W) (dm-pix's formulas)."""
  dh = torch.remainder(hue, 1.0) * 6.0
  dr = torch.clamp(torch.abs(dh - 3.0) - 1.0, 0.0, 1.0)
  dg = torch.clamp(2.0 - torch.abs(dh - 2.0), 0.0, 1.0)
  db = torch.clamp(2.0 - torch.abs(dh - 4.0), 0.0, 1.0)
  one_minus_s = 1.0 - saturation
  return torch.stack([value * (one_minus_s + saturation * d)
                      for d in (dr, dg, db)], dim=1)


def _shift_hue(x, shift):
  hue, sat, val = rgb_to_hsv(x)
  hue = torch.remainder(hue + shift[:, None, None], 1.0)
  return torch.clamp(hsv_to_rgb(hue, sat, val), 0.0, 1.0)


def color_jitter(x, u, *, prob, brightness=0.0, contrast=0.0,
                 saturation=0.0, hue=0.0):
  """ColorJitter per row, in an order drawn per row (ssljax's
  ``view_ops.color_jitter``: the same uniforms u (B, 9), the same use).

  Args:
    x: float (B, 3, H, W) in [0, 1].
    u: float (B, 9): u[:, 0] applies, u[:, 1:4] the three factors, u[:, 4]
      the hue shift, u[:, 5:9] the order.

  Returns:
    float (B, 3, H, W) in [0, 1].
  """
  strengths = (brightness, contrast, saturation, hue)
  enabled = [i for i, s in enumerate(strengths) if s > 0]
  if prob == 0 or not enabled:
    return x
  lows = torch.tensor([max(0.0, 1.0 - s) for s in strengths[:3]],
                      device=x.device, dtype=x.dtype)
  factors = lows + (1.0 + torch.tensor(strengths[:3], device=x.device,
                                       dtype=x.dtype) - lows) * u[:, 1:4]
  shift = hue * (2.0 * u[:, 4] - 1.0)
  ids = torch.tensor(enabled, device=x.device)
  op_ids = ids[torch.argsort(u[:, 5:9][:, enabled], dim=1)]
  out = x
  for step in range(len(enabled)):
    op = op_ids[:, step]
    new = out
    if any(i < 3 for i in enabled):
      luma = _luma(out)
      mean = luma.mean(dim=(1, 2, 3), keepdim=True)
      target = torch.where(_rows(op == 0), torch.zeros_like(luma),
                           torch.where(_rows(op == 1), mean, luma))
      factor = torch.gather(factors, 1, torch.clamp(op, max=2)[:, None])[:, 0]
      new = _blend(out, target, factor)
    if 3 in enabled:
      new = torch.where(_rows(op == 3), _shift_hue(out, shift), new)
    out = new
  return torch.where(_rows(u[:, 0] < prob), out, x)


def grayscale(x, u, prob):
  """Rows with u < prob replaced by their luma (3 channels); u: (B,)."""
  if prob == 0:
    return x
  gray = TF.rgb_to_grayscale(x, num_output_channels=3)
  return torch.where(_rows(u < prob), gray, x)


def blur_kernel_size(height: int, kernel_fraction: float) -> int:
  """The odd integer nearest ``kernel_fraction * height``, at least 3."""
  return max(3, 2 * math.floor((kernel_fraction * height - 1) / 2 + 0.5) + 1)


def gaussian_blur(x, u, *, prob, sigma=(0.1, 2.0), kernel_fraction=0.1):
  """Separable Gaussian blur of rows with u[:, 0] < prob, σ from u[:, 1].

  Computed for every row (one depthwise convolution per axis, reflect
  padding), then selected, as ssljax's ``view_ops.gaussian_blur``.

  Args:
    x: float (B, C, H, W); u: float (B, 2).
  """
  if prob == 0:
    return x
  b, c, height, width = x.shape
  size = blur_kernel_size(height, kernel_fraction)
  sig = sigma[0] + (sigma[1] - sigma[0]) * u[:, 1]
  taps = torch.arange(size, device=x.device, dtype=x.dtype) - size // 2
  w = torch.exp(-0.5 * (taps[None, :] / sig[:, None]) ** 2)
  w = w / w.sum(dim=1, keepdim=True)  # (B, size)
  w = w.repeat_interleave(c, dim=0)  # (B·C, size)
  r = size // 2
  y = x.reshape(1, b * c, height, width)
  y = nn.functional.pad(y, (0, 0, r, r), mode="reflect")
  y = nn.functional.conv2d(y, w[:, None, :, None], groups=b * c)
  y = nn.functional.pad(y, (r, r, 0, 0), mode="reflect")
  y = nn.functional.conv2d(y, w[:, None, None, :], groups=b * c)
  return torch.where(_rows(u[:, 0] < prob), y.reshape(b, c, height, width), x)


def solarize(x, u, prob, threshold=0.5):
  """Pixels >= threshold inverted (1 - x) in rows with u < prob."""
  if prob == 0:
    return x
  inverted = torch.where(x >= threshold, 1.0 - x, x)
  return torch.where(_rows(u < prob), inverted, x)


UNSUPPORTED_OPS = ("erase_prob", "noise_std")


def apply_view(x, uniforms: dict, ops: dict):
  """One view's ops after the crop, in ssljax's order (flip, colour
  jitter, grayscale, blur, solarisation).

  Args:
    x: float (B, C, H, W) in [0, 1].
    uniforms: {"flip": (B,), "jitter": (B, 9), "gray": (B,), "blur": (B, 2),
      "solarize": (B,)}.
    ops: the view's `ssljax.data.view_ops.apply_view` options.

  Raises:
    ValueError: an option this module does not implement is on.
  """
  for name in UNSUPPORTED_OPS:
    if ops.get(name, 0.0):
      raise ValueError(f"view option {name} is not implemented in the "
                       "PyTorch twin")
  if ops.get("flip_prob", 0.5):
    x = flip(x, uniforms["flip"], ops.get("flip_prob", 0.5))
  x = color_jitter(x, uniforms["jitter"], prob=ops.get("jitter_prob", 0.0),
                   brightness=ops.get("brightness", 0.0),
                   contrast=ops.get("contrast", 0.0),
                   saturation=ops.get("saturation", 0.0),
                   hue=ops.get("hue", 0.0))
  x = grayscale(x, uniforms["gray"], ops.get("grayscale_prob", 0.0))
  x = gaussian_blur(x, uniforms["blur"], prob=ops.get("blur_prob", 0.0),
                    sigma=tuple(ops.get("blur_sigma", (0.1, 2.0))),
                    kernel_fraction=ops.get("blur_kernel_fraction", 0.1))
  return solarize(x, uniforms["solarize"], ops.get("solarize_prob", 0.0),
                  ops.get("solarize_threshold", 0.5))


def draw_uniforms(b: int, device) -> dict:
  """The per-sample uniforms of one view (global RNG: torch.compile-able)."""
  return {"crop": torch.rand(b, CROP_TRIES, 4, device=device),
          "flip": torch.rand(b, device=device),
          "jitter": torch.rand(b, 9, device=device),
          "gray": torch.rand(b, device=device),
          "blur": torch.rand(b, 2, device=device),
          "solarize": torch.rand(b, device=device)}


def make_views(images, views: dict):
  """The V views of a uint8 batch, on its device.

  Args:
    images: uint8 (B, C, H, W).
    views: {"sizes": [S_v], "crop_scale": [[lo, hi]] per view,
      "crop_ratio": [lo, hi], "ops": [dict] per view}.

  Returns:
    list of V float32 (B, C, S_v, S_v) in [0, 1], channels_last.
  """
  x = images.float() / 255.0
  out = []
  for v, size in enumerate(views["sizes"]):
    u = draw_uniforms(x.shape[0], x.device)
    y = resized_crop(x, u["crop"], size, views["crop_scale"][v],
                     views["crop_ratio"])
    y = apply_view(y, u, views["ops"][v])
    out.append(y.contiguous(memory_format=torch.channels_last))
  return out


# ----------------------------------------------------------------- model --
def resnet50_projector(projector, layers=(3, 4, 6, 3),
                       width_per_group=64) -> nn.Module:
  """torchvision's ResNet-50 without ``fc`` and the recipe's projector:
  (Linear no bias, BatchNorm1d, ReLU) for each width but the last, then a
  Linear (facebookresearch/vicreg's ``Projector``). ``layers`` and
  ``width_per_group`` shrink it for the CPU smoke run (torchvision's
  ``ResNet(Bottleneck, layers, width_per_group=...)``; the defaults are
  ResNet-50's)."""
  from torchvision.models.resnet import Bottleneck, ResNet
  net = ResNet(Bottleneck, list(layers), width_per_group=width_per_group)
  net.fc = nn.Identity()
  layers, features = [], 2048
  for width in projector[:-1]:
    layers += [nn.Linear(features, width, bias=False), nn.BatchNorm1d(width),
               nn.ReLU(inplace=True)]
    features = width
  return nn.Sequential(net, *layers, nn.Linear(features, projector[-1]))


def vicreg_loss(z1, z2, inv=25.0, var=25.0, cov=1.0, eps=1e-4):
  """VICReg (Bardes et al. 2022, arXiv 2105.04906): float32 scalar."""
  z1, z2 = z1.float(), z2.float()
  n, k = z1.shape
  invariance = nn.functional.mse_loss(z1, z2)
  z1, z2 = z1 - z1.mean(0), z2 - z2.mean(0)
  std = lambda z: torch.sqrt(z.var(0) + eps)
  variance = (torch.relu(1 - std(z1)).mean()
              + torch.relu(1 - std(z2)).mean()) / 2
  off = lambda c: (c.pow(2).sum() - c.diagonal().pow(2).sum()) / k
  covariance = off(z1.T @ z1 / (n - 1)) + off(z2.T @ z2 / (n - 1))
  return inv * invariance + var * variance + cov * covariance


class Lars:
  """LARS in optax.lars's order (module docstring), on ``params``' grads.

  lr: learning rate; momentum: heavy-ball factor; weight_decay and eta (the
  trust coefficient) apply to parameters of ndim > 1. Written with
  ``torch._foreach_*`` ops (as torch.optim's foreach SGD): a few
  multi-tensor kernels per step in eager mode, one fusable graph for
  torch.compile.
  """

  def __init__(self, params, lr=0.1, momentum=0.9, weight_decay=1e-6,
               eta=1e-3):
    params = [p for p in params if p.requires_grad]
    self.params = [p for p in params if p.ndim > 1] + [
        p for p in params if p.ndim <= 1]
    self.num_decayed = sum(p.ndim > 1 for p in params)
    self.bufs = [torch.zeros_like(p) for p in self.params]
    self.lr, self.momentum, self.wd, self.eta = lr, momentum, weight_decay, eta

  def zero_grad(self):
    for p in self.params:
      p.grad = None

  @torch.no_grad()
  def step(self):
    k = self.num_decayed
    grads = [p.grad for p in self.params]
    decayed = torch._foreach_add(grads[:k], self.params[:k], alpha=self.wd)
    pn = torch.stack(torch._foreach_norm(self.params[:k]))
    gn = torch.stack(torch._foreach_norm(decayed))
    q = torch.where((pn > 0) & (gn > 0), self.eta * pn / gn,
                    torch.ones_like(pn))
    torch._foreach_mul_(decayed, list(q.unbind(0)))
    updates = list(decayed) + grads[k:]
    torch._foreach_mul_(self.bufs, self.momentum)
    torch._foreach_add_(self.bufs, updates, alpha=self.lr)
    torch._foreach_sub_(self.params, self.bufs)


def sincos_positions(dim: int, grid: int) -> torch.Tensor:
  """Fixed 2-D sine-cosine position embeddings (grid·grid, dim), float32.

  MAE's table (He et al. 2022, arXiv 2111.06377, §A.1; Vaswani et al. 2017,
  arXiv 1706.03762, §3.5): the first dim/2 channels encode a patch's
  column, the last dim/2 its row, each half [sin(pos·ω), cos(pos·ω)] with
  ω_k = 10000^(−k/(dim/4)); computed in float64, rounded to float32.
  dim must be divisible by 4 (ValueError otherwise).
  """
  if dim % 4:
    raise ValueError(f"sine-cosine embeddings need dim divisible by 4, got "
                     f"{dim}")
  omega = 1.0 / 10000 ** (torch.arange(dim // 4, dtype=torch.float64)
                          / (dim / 4))
  pos = torch.arange(grid, dtype=torch.float64)
  rows, cols = torch.meshgrid(pos, pos, indexing="ij")

  def one_axis(p):
    out = p.reshape(-1)[:, None] * omega[None, :]
    return torch.cat([torch.sin(out), torch.cos(out)], dim=1)

  return torch.cat([one_axis(cols), one_axis(rows)], dim=1).float()


def _no_dropout(module: nn.Module) -> nn.Module:
  """``module`` with every nn.Dropout replaced by nn.Identity (ssljax's
  ViT has none; a p = 0 dropout would still cost a kernel in eager mode)."""
  for name, child in module.named_children():
    if isinstance(child, nn.Dropout):
      setattr(module, name, nn.Identity())
    else:
      _no_dropout(child)
  return module


class MaskedAutoencoder(nn.Module):
  """MAE (He et al. 2022, "Masked Autoencoders Are Scalable Vision
  Learners", arXiv 2111.06377, §3), the work of ssljax's MAE step
  (`ssljax.methods.mae`): a ViT encoder on the visible patches only, a
  light decoder on every patch, the per-patch MSE on the removed patches.

  Encoder: torchvision's ``VisionTransformer`` parts (the patch-embedding
  convolution ``conv_proj``, the class token, the pre-norm
  ``EncoderBlock`` stack with LayerNorm eps 1e-6 and exact GELU, the final
  LayerNorm; Dosovitskiy et al. 2021, arXiv 2010.11929) with fixed
  sine-cosine positions (`sincos_positions`; the class token's is 0) in
  place of its learned ones, and no dropout. Per image, a random
  ⌊L·(1 − mask_ratio)⌋ of the L patches are kept (the argsort of uniform
  noise, §3 "random sampling"); the position is added before the patches
  are gathered, the class token is prepended after.

  Decoder (§3 "MAE decoder"): a Linear from the encoder width D to the
  decoder width W, a shared learned mask token at every removed position,
  the tokens put back in patch order, fixed sine-cosine positions (W wide),
  ``decoder_depth`` blocks of the same kind (``decoder_heads`` heads,
  MLP 4W), a LayerNorm and a Linear to the p²·C pixel values of each patch
  (the class token's prediction is dropped).

  Loss (§3 "Reconstruction target", with per-patch normalised pixels):
  each target patch minus its mean over its p²·C values, divided by
  sqrt(unbiased variance + 1e-6); the squared error averaged over a patch's
  values, then over the removed patches; computed in float32.

  Args (constructor):
    image_size, patch_size: the (square) views' side and the patch side.
    hidden_dim, depth, num_heads, mlp_ratio: the encoder.
    decoder_width, decoder_depth, decoder_heads: the decoder.
    mask_ratio: the share of patches removed, in [0, 1).
    norm_pix_loss: normalise each target patch (else raw pixels).
    channels: C of the images.

  ``forward(images)``: float (B, C, S, S) -> float32 0-d loss.

  Raises:
    ValueError: S not divisible by the patch side, or no patch kept.
  """

  def __init__(self, *, image_size: int, patch_size: int, hidden_dim: int,
               depth: int, num_heads: int, mlp_ratio: float = 4.0,
               decoder_width: int = 512, decoder_depth: int = 8,
               decoder_heads: int = 16, mask_ratio: float = 0.75,
               norm_pix_loss: bool = True, channels: int = 3):
    super().__init__()
    from torchvision.models.vision_transformer import (EncoderBlock,
                                                       VisionTransformer)
    if image_size % patch_size:
      raise ValueError(f"image size {image_size} is not divisible by the "
                       f"patch size {patch_size}")
    grid = image_size // patch_size
    self.patch, self.channels = patch_size, channels
    self.num_patches = grid * grid
    self.num_keep = int(self.num_patches * (1 - mask_ratio))
    if not 0 <= mask_ratio < 1 or self.num_keep < 1:
      raise ValueError(f"mask_ratio {mask_ratio} keeps {self.num_keep} of "
                       f"{self.num_patches} patches")
    self.norm_pix_loss = norm_pix_loss
    mlp = int(hidden_dim * mlp_ratio)
    vit = VisionTransformer(image_size, patch_size, depth, num_heads,
                            hidden_dim, mlp)
    if channels != 3:
      vit.conv_proj = nn.Conv2d(channels, hidden_dim, patch_size, patch_size)
    self.conv_proj, self.class_token = vit.conv_proj, vit.class_token
    self.blocks = _no_dropout(vit.encoder.layers)
    self.norm = vit.encoder.ln
    self.register_buffer("pos", sincos_positions(hidden_dim, grid)[None],
                         persistent=False)
    width = decoder_width
    self.decoder_embed = nn.Linear(hidden_dim, width)
    self.mask_token = nn.Parameter(torch.zeros(1, 1, width))
    nn.init.normal_(self.mask_token, std=0.02)
    self.decoder_blocks = _no_dropout(nn.Sequential(*[
        EncoderBlock(decoder_heads, width, int(width * mlp_ratio), 0.0, 0.0)
        for _ in range(decoder_depth)]))
    self.decoder_norm = nn.LayerNorm(width, eps=1e-6)
    self.decoder_pred = nn.Linear(width, patch_size**2 * channels)
    self.register_buffer("decoder_pos", sincos_positions(width, grid)[None],
                         persistent=False)

  def patchify(self, images):
    """(B, C, S, S) -> (B, L, p²·C), rows in patch order, each (pixel row,
    pixel column, channel) as ssljax's ``patchify``."""
    b, c, s, _ = images.shape
    p, g = self.patch, s // self.patch
    x = images.reshape(b, c, g, p, g, p)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(b, g * g, p * p * c)

  def forward(self, images):
    b = images.shape[0]
    length, keep = self.num_patches, self.num_keep
    tokens = self.conv_proj(images).flatten(2).transpose(1, 2) + self.pos
    dim = tokens.shape[-1]
    ids_shuffle = torch.argsort(torch.rand(b, length, device=images.device),
                                dim=1)
    ids_restore = torch.argsort(ids_shuffle, dim=1)
    visible = torch.gather(tokens, 1,
                           ids_shuffle[:, :keep, None].expand(-1, -1, dim))
    x = torch.cat([self.class_token.expand(b, -1, -1).to(visible.dtype),
                   visible], dim=1)
    latent = self.norm(self.blocks(x))
    y = self.decoder_embed(latent)
    width = y.shape[-1]
    fill = self.mask_token.to(y.dtype).expand(b, length - keep, width)
    seq = torch.cat([y[:, 1:], fill], dim=1)
    seq = torch.gather(seq, 1, ids_restore[..., None].expand(-1, -1, width))
    y = torch.cat([y[:, :1], seq + self.decoder_pos], dim=1)
    pred = self.decoder_pred(self.decoder_norm(self.decoder_blocks(y)))[:, 1:]
    mask = torch.ones(b, length, device=images.device)
    mask[:, :keep] = 0
    mask = torch.gather(mask, 1, ids_restore)
    return mae_loss(pred, self.patchify(images), mask, self.norm_pix_loss)


def mae_loss(pred, target, mask, norm_pix_loss: bool = True):
  """MAE's loss (He et al. 2022, arXiv 2111.06377, §3), float32.

  Args:
    pred, target: (B, L, P) predictions and image patches.
    mask: (B, L), 1 = removed (scored), 0 = visible.
    norm_pix_loss: normalise each target patch by its mean and unbiased
      variance (+ 1e-6) first.

  Returns:
    float32 0-d: Σ mask · mean_P (pred − t)² / Σ mask.
  """
  t = target.float()
  if norm_pix_loss:
    t = (t - t.mean(dim=-1, keepdim=True)) / torch.sqrt(
        t.var(dim=-1, keepdim=True) + 1e-6)
  per_patch = (pred.float() - t).pow(2).mean(dim=-1)
  return (per_patch * mask).sum() / mask.sum()


def _adamw(model: nn.Module, o: dict) -> torch.optim.Optimizer:
  """torch.optim.AdamW with weight decay on kernels only (the weights of
  ndim > 1 of Linear and Conv layers; not biases, LayerNorms or the
  class and mask tokens), as ssljax's ``weight_decay_mask`` "kernels"."""
  decay, rest = [], []
  for name, p in model.named_parameters():
    if not p.requires_grad:
      continue
    (decay if name.endswith("weight") and p.ndim > 1 else rest).append(p)
  return torch.optim.AdamW(
      [{"params": decay, "weight_decay": o["weight_decay"]},
       {"params": rest, "weight_decay": 0.0}],
      lr=o["lr"], betas=(o["b1"], o["b2"]), eps=o["eps"], foreach=True)


def make_step(twin: dict, device):
  """(model, step(*views) -> loss) of the twin's model, loss, optimiser:
  kind "resnet50_vicreg" (two views) or "vit_mae" (one view)."""
  if twin["kind"] == "vit_mae":
    e, d = twin["encoder"], twin["decoder"]
    model = MaskedAutoencoder(
        image_size=twin["views"]["sizes"][0], patch_size=e["patch_size"],
        hidden_dim=e["hidden_dim"], depth=e["depth"],
        num_heads=e["num_heads"], mlp_ratio=e["mlp_ratio"],
        decoder_width=d["width"], decoder_depth=d["depth"],
        decoder_heads=d["num_heads"], mask_ratio=twin["mask_ratio"],
        norm_pix_loss=twin["norm_pix_loss"]).to(device)
    opt = _adamw(model, twin["optim"])

    def mae_step(view):
      with torch.autocast(device.type, dtype=torch.bfloat16):
        loss = model(view)
      opt.zero_grad(set_to_none=True)
      loss.backward()
      opt.step()
      return loss.detach()

    return model, mae_step
  if twin["kind"] != "resnet50_vicreg":
    raise ValueError(f"no PyTorch twin of kind {twin['kind']!r}")
  model = resnet50_projector(
      twin["projector"], twin.get("layers", (3, 4, 6, 3)),
      twin.get("width_per_group", 64)).to(
      device, memory_format=torch.channels_last)
  o = twin["optim"]
  opt = Lars(model.parameters(), lr=o["lr"], momentum=o["momentum"],
             weight_decay=o["weight_decay"], eta=o["eta"])
  loss_kw = twin["loss"]

  def step(*views):
    with torch.autocast(device.type, dtype=torch.bfloat16):
      zs = [model(v) for v in views]  # BatchNorm per view
    loss = vicreg_loss(*zs, **loss_kw)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach()

  return model, step


# ---------------------------------------------------------------- timing --
def count_flops(fn, *inputs) -> float:
  """FLOPs of one call of ``fn`` by ``torch.utils.flop_counter``
  (matrix products, convolutions and attention, forward and backward; 2
  per multiply-add). Attention is run by the math backend while counting
  (its products are counted; the counter has no rule for some fused
  kernels, the CPU's flash attention among them); its count, 4·B·H·N²·d
  forward and twice that backward, is the same for every kernel."""
  from torch.nn.attention import SDPBackend, sdpa_kernel
  from torch.utils.flop_counter import FlopCounterMode
  with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
    fn(*inputs)
  return float(counter.get_total_flops())


def _windows(fn, steps, repeats, sync):
  out = []
  for _ in range(repeats):
    start = time.perf_counter()
    for _ in range(steps):
      loss = fn()
    sync()
    out.append((time.perf_counter() - start) / steps)
  return out, loss


def _profile(fn, steps, sync, path_stem, top, cuda) -> str:
  """torch.profiler over ``steps`` calls: the top-N table (text, written
  to path_stem + "_top.txt") and the Chrome trace (path_stem +
  ".trace.json.gz"); returns the table."""
  from torch.profiler import ProfilerActivity, profile
  acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
  with profile(activities=acts) as prof:
    for _ in range(steps):
      fn()
    sync()
  key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
  table = prof.key_averages().table(sort_by=key, row_limit=top)
  with open(path_stem + "_top.txt", "w") as f:
    f.write(f"torch.profiler, {steps} steps, sorted by {key}\n{table}\n")
  try:
    prof.export_chrome_trace(path_stem + ".trace.json")
    import gzip
    import shutil
    with open(path_stem + ".trace.json", "rb") as src, gzip.open(
        path_stem + ".trace.json.gz", "wb") as dst:
      shutil.copyfileobj(src, dst)
    os.remove(path_stem + ".trace.json")
  except Exception:  # pylint: disable=broad-except  # the table is kept
    pass
  return table


def run(twin: dict, *, device: str, mode: str, warmup: int, steps: int,
        repeats: int, profile_dir=None, profile_steps=3,
        profile_top=25) -> list:
  """Times the twin's step on ready views and on views made on the device.

  Args:
    twin: the spec (module docstring; ``accelerator.torch_twin``).
    device: "cuda" or "cpu".
    mode: "compile" (torch.compile of the step and of the view maker) or
      "eager".
    warmup, steps, repeats: warm-up calls, then the median of ``repeats``
      windows of ``steps`` calls.
    profile_dir: if set, a torch.profiler trace of ``profile_steps`` steps
      of each row and its top-``profile_top`` table there.

  Returns:
    two row dicts ("ready", "gpu" view modes) with step_s, images_per_s,
    flops_per_image (FlopCounterMode of one eager step), peak bytes.
  """
  torch.manual_seed(0)
  dev = torch.device(device)
  cuda = dev.type == "cuda"
  if cuda:
    torch.backends.cudnn.benchmark = True
  sync = torch.cuda.synchronize if cuda else (lambda: None)
  b, views = twin["batch"], twin["views"]
  model, step = make_step(twin, dev)
  del model
  ready = [torch.rand(b, 3, s, s, device=dev).contiguous(
      memory_format=torch.channels_last) for s in views["sizes"]]
  source = twin["source_size"]
  images = torch.randint(0, 256, (b, 3, source, source), dtype=torch.uint8,
                         device=dev)
  view_fn = lambda: make_views(images, views)
  # Counted in eager mode, one step each, before any timing.
  flops_ready = count_flops(step, *ready)
  flops_gpu = count_flops(lambda: step(*view_fn()))
  compiled_step = torch.compile(step) if mode == "compile" else step
  compiled_views = (torch.compile(lambda: make_views(images, views))
                    if mode == "compile" else view_fn)
  calls = {"ready": lambda: compiled_step(*ready),
           "gpu": lambda: compiled_step(*compiled_views())}
  rows = []
  for view_mode, fn in calls.items():
    if cuda:
      torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    fn()
    sync()
    first_s = time.perf_counter() - start
    for _ in range(warmup):
      fn()
    sync()
    windows, loss = _windows(fn, steps, repeats, sync)
    step_s = statistics.median(windows)
    row = {"side": "pytorch", "view_mode": view_mode, "torch_mode": mode,
           "batch": b, "devices": 1,
           "views": twin.get("views_text", str(views["sizes"])),
           "step_s": step_s, "step_windows_s": windows,
           "images_per_s": b / step_s, "first_step_s": first_s,
           "flops_per_image": (flops_ready if view_mode == "ready"
                               else flops_gpu) / b,
           "flops_count": "torch.utils.flop_counter (eager step)",
           "loss_finite": math.isfinite(float(loss)),
           "peak_device_bytes": (int(torch.cuda.max_memory_allocated())
                                 if cuda else None)}
    if profile_dir:
      stem = os.path.join(profile_dir, f"pytorch_{twin['model']}_{mode}_"
                          f"{view_mode}")
      _profile(fn, profile_steps, sync, stem, profile_top, cuda)
      row["profile"] = stem + "_top.txt"
    rows.append(row)
  info = {"torch": torch.__version__, "torchvision": torchvision.__version__,
          "device": (torch.cuda.get_device_name(0) if cuda
                     else f"cpu ({os.cpu_count()} CPUs)")}
  return [dict(r, **info) for r in rows]
