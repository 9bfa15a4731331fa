"""Residual networks (He et al. 2016, "Deep Residual Learning for Image
Recognition", arXiv 1512.03385): images (B, H, W, C) -> representations (B, D).

Two stems:

- ``"cifar"``: 3x3 conv, stride 1, no max-pool (the CIFAR recipes of
  solo-learn / lightly; a 32x32 image keeps a 4x4 map at the last stage);
- ``"imagenet"``: 7x7 conv, stride 2 (padding 3), then a 3x3 max-pool,
  stride 2 (padding 1), as in torchvision; a 224x224 image ends at 7x7.

Blocks are the basic block (two 3x3 convs, ResNet-18/34) and the bottleneck
(1x1 -> 3x3 -> 1x1, expansion 4, ResNet-50/101/152; the stride sits on the
3x3 conv, "ResNet v1.5" as in torchvision). There is no fc layer: the
representation is the global average of the last feature map.

BatchNorm uses batch statistics when ``train`` is true and running averages
otherwise. The last BatchNorm scale of each residual block is initialised to
one by default (torchvision's default, ``zero_init_residual=False``);
``zero_init_residual=True`` sets it to zero (Goyal et al. 2017,
arXiv 1706.02677), so each block starts as the identity.

``dtype`` is the computation dtype; parameters stay float32 (flax's
``param_dtype`` default).
"""

from collections.abc import Sequence

import flax.linen as nn
import jax.numpy as jnp

__all__ = ["ResNet", "ResNet18", "ResNet50"]

_STEMS = ("cifar", "imagenet")
_PAD1 = ((1, 1), (1, 1))  # torchvision's padding=1 for a 3x3 conv


class _BasicBlock(nn.Module):
  """ResNet basic block (two 3x3 convs) with a projection shortcut when needed.

  x: (B, H, W, C_in) -> (B, ceil(H / stride), ceil(W / stride), width).
  The 3x3 convs pad 1 on each side, as torchvision's BasicBlock does. (Until
  0.2.0 they padded "SAME", which for a stride-2 conv on an even-sized map
  pads 0 before and 1 after: the same parameters, but features that differ
  from torchvision's on the same weights; a trained encoder could not be
  exported to torchvision. Stride-1 convs are unchanged.)
  """
  width: int
  stride: int = 1
  zero_init_residual: bool = False
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool):
    bn = lambda **kw: nn.BatchNorm(use_running_average=not train,
                                   dtype=self.dtype, **kw)
    last_scale = nn.initializers.zeros if self.zero_init_residual else nn.initializers.ones
    y = nn.Conv(self.width, (3, 3), self.stride, padding=_PAD1,
                use_bias=False, dtype=self.dtype)(x)
    y = nn.relu(bn()(y))
    y = nn.Conv(self.width, (3, 3), padding=_PAD1, use_bias=False,
                dtype=self.dtype)(y)
    y = bn(scale_init=last_scale)(y)
    if x.shape[-1] != self.width or self.stride != 1:
      x = nn.Conv(self.width, (1, 1), self.stride, use_bias=False, dtype=self.dtype)(x)
      x = bn()(x)
    return nn.relu(x + y)


class _Bottleneck(nn.Module):
  """ResNet bottleneck block: 1x1 (width) -> 3x3 (width, stride) -> 1x1
  (4 * width), projection shortcut when the shape changes.

  x: (B, H, W, C_in) -> (B, H / stride, W / stride, 4 * width). The 3x3 conv
  pads 1 on each side, as torchvision does.
  """
  width: int
  stride: int = 1
  zero_init_residual: bool = False
  dtype: jnp.dtype = jnp.float32
  expansion: int = 4

  @nn.compact
  def __call__(self, x, train: bool):
    bn = lambda **kw: nn.BatchNorm(use_running_average=not train,
                                   dtype=self.dtype, **kw)
    last_scale = nn.initializers.zeros if self.zero_init_residual else nn.initializers.ones
    out = self.width * self.expansion
    y = nn.Conv(self.width, (1, 1), use_bias=False, dtype=self.dtype)(x)
    y = nn.relu(bn()(y))
    y = nn.Conv(self.width, (3, 3), self.stride, padding=_PAD1, use_bias=False,
                dtype=self.dtype)(y)
    y = nn.relu(bn()(y))
    y = nn.Conv(out, (1, 1), use_bias=False, dtype=self.dtype)(y)
    y = bn(scale_init=last_scale)(y)
    if x.shape[-1] != out or self.stride != 1:
      x = nn.Conv(out, (1, 1), self.stride, use_bias=False, dtype=self.dtype)(x)
      x = bn()(x)
    return nn.relu(x + y)


class ResNet(nn.Module):
  """General ResNet encoder (He et al. 2016, arXiv 1512.03385), no fc layer.

  x: (B, H, W, C) float -> (B, stage_widths[-1] * e), dtype ``dtype``, where
  e = 1 for basic blocks and 4 for bottlenecks. Stage i > 0 starts with a
  stride-2 block. Any H, W work (the stride-2 convs round up).

  Attributes:
    stage_sizes: blocks per stage, e.g. (2, 2, 2, 2) for ResNet-18,
      (3, 4, 6, 3) for ResNet-50.
    stage_widths: width of each stage (the bottleneck's inner width).
    block: "basic" or "bottleneck".
    stem: "cifar" (3x3 conv, stride 1, no max-pool) or "imagenet" (7x7 conv,
      stride 2, then 3x3 max-pool, stride 2).
    zero_init_residual: zero-initialise the last BatchNorm scale of each block.
    dtype: computation dtype (parameters stay float32).
  """
  stage_sizes: Sequence[int] = (2, 2, 2, 2)
  stage_widths: Sequence[int] = (64, 128, 256, 512)
  block: str = "basic"
  stem: str = "cifar"
  zero_init_residual: bool = False
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = True):
    """x: (B, H, W, C) float -> (B, D); see the class docstring for D."""
    if self.stem not in _STEMS:
      raise ValueError(f"stem must be one of {_STEMS}, got {self.stem!r}")
    if self.block not in ("basic", "bottleneck"):
      raise ValueError(f"block must be 'basic' or 'bottleneck', got {self.block!r}")
    if len(self.stage_sizes) != len(self.stage_widths):
      raise ValueError(f"stage_sizes {tuple(self.stage_sizes)} and stage_widths "
                       f"{tuple(self.stage_widths)} differ in length")
    x = x.astype(self.dtype)
    if self.stem == "cifar":
      x = nn.Conv(self.stage_widths[0], (3, 3), use_bias=False, dtype=self.dtype)(x)
    else:
      x = nn.Conv(self.stage_widths[0], (7, 7), 2, padding=((3, 3), (3, 3)),
                  use_bias=False, dtype=self.dtype)(x)
    x = nn.relu(nn.BatchNorm(use_running_average=not train, dtype=self.dtype)(x))
    if self.stem == "imagenet":
      x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=_PAD1)
    block = _BasicBlock if self.block == "basic" else _Bottleneck
    for i, (size, width) in enumerate(zip(self.stage_sizes, self.stage_widths)):
      for j in range(size):
        stride = 2 if (i > 0 and j == 0) else 1
        x = block(width, stride, self.zero_init_residual, dtype=self.dtype)(x, train)
    return jnp.mean(x, axis=(1, 2))


class ResNet18(ResNet):
  """ResNet-18: 4 stages of 2 basic blocks, widths 64-128-256-512 -> (B, 512).

  The default stem is "cifar" (3x3, no max-pool: the encoder of the
  solo-learn / lightly CIFAR recipes; 11,168,832 parameters without fc);
  ``stem="imagenet"`` gives torchvision's resnet18 without fc (11,176,512).
  On this project's CPU machines it is only shape-tested (a forward+backward
  takes ~36 s).
  """
  stage_sizes: Sequence[int] = (2, 2, 2, 2)
  block: str = "basic"
  stem: str = "cifar"


class ResNet50(ResNet):
  """ResNet-50: bottleneck stages of 3-4-6-3 blocks, widths 64-128-256-512
  (outputs 256-512-1024-2048) -> (B, 2048).

  The default stem is "imagenet"; without fc it has 23,508,032 parameters
  (torchvision's resnet50, 25,557,032, minus its 2,049,000-parameter fc).
  """
  stage_sizes: Sequence[int] = (3, 4, 6, 3)
  block: str = "bottleneck"
  stem: str = "imagenet"
