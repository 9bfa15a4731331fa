"""Projector head and the encoder+projector network used in pretraining."""

from collections.abc import Sequence

import flax.linen as nn
import jax.numpy as jnp

__all__ = ["Projector", "SSLNetwork"]


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


class SSLNetwork(nn.Module):
  """Encoder f_θ, projector g_φ and, for the predictive methods, predictor q_ψ.

  Returns (h, z) without a predictor and (h, z, p) with one: h (B, D) is
  the representation that is linearly probed, z (B, K) the projector output
  (the embedding the SSL loss sees, or the target of BYOL / SimSiam / MoCo v3
  / NNCLR), p = q_ψ(z) (B, K') the prediction (Grill et al. 2020, arXiv
  2006.07733, §3.1). The head of DINO (`ssljax.models.DINOHead`) plays the
  projector's part.
  """
  encoder: nn.Module
  projector: nn.Module
  predictor: nn.Module | None = None

  def __call__(self, x, train: bool = True):
    h = self.encoder(x, train=train)
    z = self.projector(h, train=train)
    if self.predictor is None:
      return h, z
    return h, z, self.predictor(z, train=train)
