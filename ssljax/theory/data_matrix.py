"""Data matrix A of the contrastive trace loss Tr(W A Wᵀ) (eq. 7).

The input of the flows in `ssljax.theory.stiefel`. Rows are samples: x, x⁺,
x⁻ are (n, d).

References:
  Esser, Mukherjee & Ghoshdastidar 2023, "Representation Learning Dynamics
  of Self-Supervised Models", arXiv 2309.02011, eqs. (1), (2), (7).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssljax import checks

__all__ = ["contrastive_data_matrix"]


def contrastive_data_matrix(x, x_pos, x_neg=None) -> jax.Array:
  """Symmetric data matrix A of the trace loss Tr(W A Wᵀ) (eq. 7).

  With Δ_i = x⁺_i − x⁻_i (rows are samples),

      A = −(1/2n) Σ_i [x_i Δ_iᵀ + Δ_i x_iᵀ] = −(xᵀΔ + Δᵀx) / (2n),

  so that the linear contrastive loss (1/n) Σ_i −f(x_i)ᵀ(f(x⁺_i) − f(x⁻_i))
  equals Tr(W A Wᵀ) for f(x) = W x. Without `x_neg` (non-contrastive loss
  (2)) Δ = x⁺. For x⁺ = x + noise and an independent x⁻, E[A] = −Cov(x),
  negative definite.

  Args:
    x: (n, d) anchors, float.
    x_pos: (n, d) positives (e.g. augmented anchors).
    x_neg: optional (n, d) negatives (independent samples).

  Returns:
    (d, d) symmetric A in the dtype of x.

  Raises:
    ValueError: if an argument is not a finite rank-2 array or the shapes
      differ.

  References:
    Esser, Mukherjee & Ghoshdastidar 2023 (arXiv 2309.02011), eqs. (1), (2),
    (7): A = −(1/2n)Σ[x(x⁺ − x⁻)ᵀ + (x⁺ − x⁻)xᵀ].
  """
  x = checks.as_float(x)
  x_pos = jnp.asarray(x_pos, x.dtype)
  checks.check_nonempty_matrix(x, "x", "(n, d)")
  checks.check_nonempty_matrix(x_pos, "x_pos", "(n, d)")
  if x_pos.shape != x.shape:
    raise ValueError(f"x_pos must have the shape of x {x.shape}, got"
                     f" {x_pos.shape}")
  delta_nxd = x_pos
  if x_neg is not None:
    x_neg = jnp.asarray(x_neg, x.dtype)
    checks.check_nonempty_matrix(x_neg, "x_neg", "(n, d)")
    if x_neg.shape != x.shape:
      raise ValueError(f"x_neg must have the shape of x {x.shape}, got"
                       f" {x_neg.shape}")
    delta_nxd = x_pos - x_neg
  cross_dxd = x.T @ delta_nxd
  return -(cross_dxd + cross_dxd.T) / (2 * x.shape[0])
