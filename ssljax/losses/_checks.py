"""Boundary checks shared by the losses (run outside jit, on concrete values)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssljax import graphs


def _as_float(x) -> jax.Array:
  """jnp array; integer/bool inputs are promoted to the default float."""
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(jnp.result_type(float))
  return x


def _check_embeddings(z, name: str) -> None:
  """z must be rank 2 with N >= 2 rows (ddof=1 covariance) and finite."""
  if z.ndim != 2:
    raise ValueError(f"{name} must be a rank-2 (N, K) array, got shape {z.shape}")
  if z.shape[0] < 2:
    raise ValueError(
        f"{name} must have N >= 2 rows for the ddof=1 covariance, got shape"
        f" {z.shape}")
  if z.shape[1] < 1:
    raise ValueError(f"{name} must have K >= 1 columns, got shape {z.shape}")
  graphs._check_finite(z, name)  # pylint: disable=protected-access


def _check_eps(eps) -> None:
  if graphs._is_concrete(eps) and not float(eps) >= 0:  # pylint: disable=protected-access
    raise ValueError(f"eps must be >= 0, got {eps!r}")
