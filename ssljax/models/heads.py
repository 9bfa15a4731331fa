"""The projector (and predictor) MLP head."""

from collections.abc import Sequence

import flax.linen as nn
import jax.numpy as jnp

__all__ = ["Projector"]


class Projector(nn.Module):
  """Expander/projector MLP of VICReg (Bardes et al. 2022, Sec. 4.2).

  Hidden layers are Dense -> BatchNorm -> ReLU; the last layer is a plain
  Dense. The loss is applied to its output Z.

  Attributes:
    features: widths of all layers; the last is the embedding size K.
    dtype: computation dtype.
  """
  features: Sequence[int] = (1024, 1024)
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, h, train: bool = True):
    """h: (B, D) -> z: (B, features[-1]), float32 (float64 if dtype is)."""
    x = h.astype(self.dtype)
    for width in self.features[:-1]:
      # No bias before BatchNorm: it would be removed by the centring, and
      # Adam turns its round-off gradient into ±lr steps.
      x = nn.Dense(width, use_bias=False, dtype=self.dtype)(x)
      x = nn.BatchNorm(use_running_average=not train, dtype=self.dtype)(x)
      x = nn.relu(x)
    # Losses read covariances of Z: keep them in float32 even in bf16 runs,
    # and in float64 when the model computes in float64 (x64 checks).
    out_dtype = jnp.promote_types(self.dtype, jnp.float32)
    return nn.Dense(self.features[-1], dtype=self.dtype)(x).astype(out_dtype)
