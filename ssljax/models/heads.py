"""The projector (and predictor) MLP head."""

from collections.abc import Sequence

import flax.linen as nn
import jax.numpy as jnp

from ssljax.models import initializers as inits

__all__ = ["Projector"]


class Projector(nn.Module):
  """Expander/projector MLP of VICReg (Bardes et al. 2022, Sec. 4.2).

  Hidden layers are Dense -> BatchNorm -> ReLU; the last layer is a plain
  Dense. The loss is applied to its output Z.

  Attributes:
    features: widths of all layers; the last is the embedding size K.
    weight_init: weight initialisation, one of `ssljax.models.initializers.INITS`
      (default "uniform_fan_in": kernels and the last layer's bias
      U(±1/√fan_in), PyTorch's nn.Linear default, as in the official VICReg
      code's projector).
    bn_momentum: weight of the old running average in BatchNorm (0.9,
      PyTorch's BatchNorm1d momentum=0.1; flax's default is 0.99).
    bn_epsilon: added to the batch variance in BatchNorm (1e-5).
    dtype: computation dtype.
    last_bias: the last Dense has a bias (True; MoCo v3's heads have none:
      Chen, Xie & He 2021, arXiv 2104.02057, official moco/builder.py).
    last_bn: a BatchNorm without scale and offset after the last Dense
      (False; MoCo v3's projectors and its ViT predictor end with one,
      after SimCLR, Chen et al. 2020, arXiv 2002.05709).
  """
  features: Sequence[int] = (1024, 1024)
  weight_init: str = "uniform_fan_in"
  bn_momentum: float = inits.BN_MOMENTUM
  bn_epsilon: float = inits.BN_EPSILON
  dtype: jnp.dtype = jnp.float32
  last_bias: bool = True
  last_bn: bool = False

  @nn.compact
  def __call__(self, h, train: bool = True):
    """h: (B, D) -> z: (B, features[-1]), float32 (float64 if dtype is)."""
    inits.check_init(self.weight_init)
    x = h.astype(self.dtype)
    for width in self.features[:-1]:
      # No bias before BatchNorm: it would be removed by the centring, and
      # Adam turns its round-off gradient into ±lr steps.
      x = nn.Dense(width, use_bias=False, dtype=self.dtype,
                   kernel_init=inits.kernel_init(self.weight_init))(x)
      x = nn.BatchNorm(use_running_average=not train, dtype=self.dtype,
                       momentum=self.bn_momentum, epsilon=self.bn_epsilon)(x)
      x = nn.relu(x)
    # Losses read covariances of Z: keep them in float32 even in bf16 runs,
    # and in float64 when the model computes in float64 (x64 checks).
    out_dtype = jnp.promote_types(self.dtype, jnp.float32)
    x = nn.Dense(self.features[-1], use_bias=self.last_bias, dtype=self.dtype,
                 kernel_init=inits.kernel_init(self.weight_init),
                 bias_init=inits.bias_init(self.weight_init, x.shape[-1]))(x)
    if self.last_bn:
      x = nn.BatchNorm(use_running_average=not train, dtype=self.dtype,
                       momentum=self.bn_momentum, epsilon=self.bn_epsilon,
                       use_scale=False, use_bias=False)(x)
    return x.astype(out_dtype)
