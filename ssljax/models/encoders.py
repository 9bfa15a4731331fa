"""Flax encoders f_θ: images (B, H, W, C) -> representations (B, D).

Rows are samples. Every encoder takes ``train`` so that BatchNorm uses batch
statistics during pretraining and running averages at evaluation. Under a
sharded ``jax.jit`` the batch axis is global, so BatchNorm statistics are
computed over the whole global batch, not per device.

The ResNets live in ``ssljax.models.resnet``, the Vision Transformers in
``ssljax.models.vit``.
"""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from ssljax.models import initializers as inits

__all__ = ["MLPEncoder", "SmallCNN"]


class MLPEncoder(nn.Module):
  """Fully connected encoder on flattened pixels.

  Attributes:
    features: widths of the hidden layers; the last is the representation size D.
    use_bn: BatchNorm after every Dense layer.
    weight_init: weight initialisation, one of `ssljax.models.initializers.INITS`
      (default "uniform_fan_in", PyTorch's nn.Linear default).
    bn_momentum: weight of the old running average in BatchNorm (0.9,
      PyTorch's momentum=0.1; flax's default is 0.99).
    bn_epsilon: added to the batch variance in BatchNorm (1e-5).
    dtype: computation dtype (parameters stay float32).
  """
  features: Sequence[int] = (512, 512)
  use_bn: bool = True
  weight_init: str = "uniform_fan_in"
  bn_momentum: float = inits.BN_MOMENTUM
  bn_epsilon: float = inits.BN_EPSILON
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = True):
    """x: (B, H, W, C) float -> (B, features[-1])."""
    inits.check_init(self.weight_init)
    x = x.reshape(x.shape[0], -1).astype(self.dtype)
    for width in self.features:
      x = nn.Dense(width, use_bias=not self.use_bn, dtype=self.dtype,
                   kernel_init=inits.kernel_init(self.weight_init),
                   bias_init=inits.bias_init(self.weight_init, x.shape[-1]))(x)
      if self.use_bn:
        x = nn.BatchNorm(use_running_average=not train, dtype=self.dtype,
                         momentum=self.bn_momentum,
                         epsilon=self.bn_epsilon)(x)
      x = nn.relu(x)
    return x


# Samples per convolution call that SmallCNN uses by default in training on
# the CPU backend, for stages whose output map has at least
# CHUNKED_MIN_POSITIONS positions (7x7). On the 2-core x86-64 development
# machine (jaxlib 0.10.2, `benchmarks/conv_chunks.py`) this ran the default
# VICReg step 1.2x faster, mostly in the kernel gradient; chunking the 3x3
# stage as well, or using 16 or 64, was slower, and so was chunking the
# evaluation forward pass (1,000 images: 0.63x).
CPU_CONV_CHUNK = 32
CHUNKED_MIN_POSITIONS = 49


def _chunked(layer, x, chunk: int):
  """``layer(x)`` computed on consecutive chunks of ``chunk`` rows of x.

  For a per-sample layer (a convolution) this is the same output, and the
  same parameter gradient up to the order of its sum over the samples.

  Args:
    layer: callable on (b, ...) arrays that treats each row on its own.
    x: (B, ...) array, rows are samples.
    chunk: rows per call, >= 0 (SmallCNN checks its conv_chunk); the last
      call takes the remainder; 0, or any chunk >= B: one call on the whole
      batch.

  Returns:
    ``layer(x)``: (B, ...), rows in order.
  """
  if chunk == 0 or x.shape[0] <= chunk:
    return layer(x)
  return jnp.concatenate([layer(x[i:i + chunk])
                          for i in range(0, x.shape[0], chunk)])


class SmallCNN(nn.Module):
  """Small convolutional encoder with global average pooling.

  Each stage is a 3x3 conv -> BatchNorm -> ReLU; stages after the first
  downsample by 2 (average pooling, max pooling or a stride-2 conv). The
  representation is the global average of the last feature map, (B, channels[-1]).

  Attributes:
    channels: output channels of each stage.
    downsample: "avg" | "max" | "stride", how stages after the first halve H, W.
    use_bn: BatchNorm after each conv.
    weight_init: weight initialisation, one of `ssljax.models.initializers.INITS`
      (default "uniform_fan_in", PyTorch's nn.Conv2d default: kernel and
      bias U(±1/√fan_in), fan_in = 9·in_channels).
    bn_momentum: weight of the old running average in BatchNorm (0.9,
      PyTorch's momentum=0.1; flax's default is 0.99).
    bn_epsilon: added to the batch variance in BatchNorm (1e-5).
    dtype: computation dtype (parameters stay float32).
    conv_chunk: samples per convolution call in training (train=True): a
      stage's convolution runs on consecutive chunks of this many samples,
      with the same kernel; the result is the same up to float rounding of
      the kernel gradient's sum. An int for every stage or one per stage;
      0: the whole batch. None (default): on the CPU backend with one
      device, CPU_CONV_CHUNK (32) for the stages whose output map has at
      least 7x7 positions, where XLA:CPU computes the kernel gradient
      faster on a few dozen samples than on a few hundred; the whole batch
      on accelerators, on several devices (the batch is sharded there) and
      for smaller maps. Evaluation (train=False) always runs the whole
      batch: there the chunks made XLA:CPU's forward pass slower.
  """
  channels: Sequence[int] = (32, 64, 128)
  downsample: str = "avg"
  use_bn: bool = True
  weight_init: str = "uniform_fan_in"
  bn_momentum: float = inits.BN_MOMENTUM
  bn_epsilon: float = inits.BN_EPSILON
  dtype: jnp.dtype = jnp.float32
  conv_chunk: int | Sequence[int] | None = None

  @nn.compact
  def __call__(self, x, train: bool = True):
    """x: (B, H, W, C) float -> (B, channels[-1])."""
    if self.downsample not in ("avg", "max", "stride"):
      raise ValueError(
          f"downsample must be 'avg', 'max' or 'stride', got {self.downsample!r}")
    inits.check_init(self.weight_init)
    if (isinstance(self.conv_chunk, Sequence)
        and len(self.conv_chunk) != len(self.channels)):
      raise ValueError(
          f"conv_chunk has {len(self.conv_chunk)} values for "
          f"{len(self.channels)} stages (channels {tuple(self.channels)})")
    chunks = (self.conv_chunk if isinstance(self.conv_chunk, Sequence)
              else [self.conv_chunk or 0])
    if any(c < 0 for c in chunks):
      raise ValueError(f"conv_chunk must be None or >= 0, got {self.conv_chunk}")
    x = x.astype(self.dtype)
    for i, width in enumerate(self.channels):
      stride = 2 if (i > 0 and self.downsample == "stride") else 1
      if i > 0 and self.downsample == "avg":
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
      elif i > 0 and self.downsample == "max":
        x = nn.max_pool(x, (2, 2), strides=(2, 2))
      conv = nn.Conv(width, (3, 3), strides=stride, use_bias=not self.use_bn,
                     dtype=self.dtype,
                     kernel_init=inits.kernel_init(self.weight_init),
                     bias_init=inits.bias_init(self.weight_init,
                                               9 * x.shape[-1]))
      out_hw = -(-x.shape[1] // stride) * -(-x.shape[2] // stride)  # SAME padding
      x = _chunked(conv, x, self._chunk(i, out_hw) if train else 0)
      if self.use_bn:
        x = nn.BatchNorm(use_running_average=not train, dtype=self.dtype,
                         momentum=self.bn_momentum,
                         epsilon=self.bn_epsilon)(x)
      x = nn.relu(x)
    return jnp.mean(x, axis=(1, 2))

  def _chunk(self, stage: int, out_positions: int) -> int:
    """Samples per call of stage's convolution (``out_positions`` outputs)."""
    if isinstance(self.conv_chunk, Sequence):
      return self.conv_chunk[stage]
    if self.conv_chunk is not None:
      return self.conv_chunk
    if jax.default_backend() != "cpu" or jax.device_count() > 1:
      return 0
    return CPU_CONV_CHUNK if out_positions >= CHUNKED_MIN_POSITIONS else 0
