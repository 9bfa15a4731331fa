"""Pairwise forms of the VIC² loss ‖ZZᵀ − G‖², summed with pair weights.

The degree-corrected pairwise form (an exact identity for any symmetric G)

    ‖ZZᵀ − G‖² − ‖G‖² = Σ_ij ℓ_ij,
    ℓ_ij = G_ij‖z_i − z_j‖² + (z_iᵀz_j)² − (d_i‖z_i‖² + d_j‖z_j‖²)/N,

with d = G1 the degrees of the FULL N-sample graph, needs only the entries
G_ij of a minibatch's pairs plus the degrees of its rows; weighting each
pair by its inverse inclusion probability gives an unbiased estimate
(`pal_minibatch_loss`, used by `ssljax.losses.edge_sampled` and by PAL in
`ssljax.pal.minibatch`). The paper's form, `paper_pairwise_terms`, replaces
the degree term by R(a, b) = (aᵀb)² − ‖a‖² − ‖b‖²; summed over [N]² it gives
‖ZZᵀ − G‖² − ‖G‖² + 2Tr(Zᵀ(D − NI)Z), i.e. VIC² + const only when every
degree is N.

Rows are samples: z is (B, K), g is (B, B). All functions are jit-able.

References:
  Cabannes et al. 2023, "Active Self-Supervised Learning: A Few Low-Cost
  Relationships Are All You Need", arXiv 2303.15256, eqs. (9)–(11),
  Algorithm 1, App. B.1.1 (with R(a, b) = (aᵀb)² − ‖a‖² − ‖b‖², not the
  printed (aᵀb)ᵀ; Σ_ij R(z_i, z_j) = ‖ZᵀZ − NI_K‖² − N²K).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssljax import checks

__all__ = [
    "vic2_pair_terms",
    "paper_pairwise_terms",
    "pal_minibatch_loss",
    "paper_minibatch_loss",
    "vic2_offset_loss",
]


def _check(z, g, name_g: str = "g"):
  z_BxK = jnp.asarray(z)
  g_BxB = jnp.asarray(g)
  if z_BxK.ndim != 2:
    raise ValueError(f"z must be (B, K), got shape {z_BxK.shape}")
  b = z_BxK.shape[0]
  if g_BxB.shape != (b, b):
    raise ValueError(f"{name_g} must be (B, B) = ({b}, {b}) for z of shape"
                     f" {z_BxK.shape}, got {g_BxB.shape}")
  return z_BxK, g_BxB.astype(z_BxK.dtype)


@checks.float32_matmuls
def vic2_pair_terms(z, g, degree, n) -> jax.Array:
  """Degree-corrected pair terms ℓ_ij of ‖ZZᵀ − G‖² − ‖G‖².

  Args:
    z: (B, K) float embeddings of the minibatch rows.
    g: (B, B) graph entries G_ij among them (symmetric).
    degree: (B,) degrees d_i = Σ_{j∈[N]} G_ij in the FULL graph.
    n: the full number of samples N (the 1/N of the degree term).

  Returns:
    (B, B) terms ℓ_ij; summed over all of [N]² they give ‖ZZᵀ − G‖² − ‖G‖².

  Raises:
    ValueError: if the shapes of z, g, degree disagree.

  References:
    Σ_ij [G_ij‖z_i − z_j‖² + (z_iᵀz_j)² − (d_i‖z_i‖² + d_j‖z_j‖²)/N] = ‖ZZᵀ −
    G‖² − ‖G‖² (exact for any symmetric G); Cabannes et al. 2023, arXiv
    2303.15256, App. B.1.1.
  """
  z_BxK, g_BxB = _check(z, g)
  d_B = jnp.asarray(degree, z_BxK.dtype)
  if d_B.shape != (z_BxK.shape[0],):
    raise ValueError(f"degree must be (B,) = ({z_BxK.shape[0]},), got"
                     f" {d_B.shape}")
  gram_BxB = z_BxK @ z_BxK.T
  sq_B = jnp.diagonal(gram_BxB)
  dist_BxB = sq_B[:, None] + sq_B[None, :] - 2.0 * gram_BxB
  deg_term_B = d_B * sq_B / n
  return g_BxB * dist_BxB + gram_BxB**2 - (deg_term_B[:, None]
                                           + deg_term_B[None, :])


@checks.float32_matmuls
def paper_pairwise_terms(z, g) -> jax.Array:
  """Paper eqs. (9)–(10) terms G_ij‖z_i − z_j‖² + R(z_i, z_j) (biased).

  Args:
    z: (B, K) float embeddings.
    g: (B, B) graph entries.

  Returns:
    (B, B) terms; summed over [N]² they give ‖ZZᵀ − G‖² − ‖G‖² + 2Tr(Zᵀ(D −
      NI)Z).

  Raises:
    ValueError: if the shapes of z and g disagree.

  References:
    Cabannes et al. 2023, arXiv 2303.15256, eqs. (9)–(10): equal to ‖ZZᵀ − G‖² −
    ‖G‖² + 2Tr(Zᵀ(D − NI)Z), i.e. VIC² + const only if D = NI.
  """
  z_BxK, g_BxB = _check(z, g)
  gram_BxB = z_BxK @ z_BxK.T
  sq_B = jnp.diagonal(gram_BxB)
  sq_sum_BxB = sq_B[:, None] + sq_B[None, :]
  return g_BxB * (sq_sum_BxB - 2.0 * gram_BxB) + gram_BxB**2 - sq_sum_BxB


@checks.float32_matmuls
def pal_minibatch_loss(z, g, degree, n, pair_weights) -> jax.Array:
  """Unbiased minibatch estimate of ‖ZZᵀ − G‖² − ‖G‖².

  Args:
    z: (B, K) float embeddings of the minibatch rows.
    g: (B, B) graph entries among them.
    degree: (B,) full-graph degrees of the rows.
    n: full number of samples N.
    pair_weights: (B, B) inverse inclusion probabilities 1/π_ij off the
      diagonal and 1/π_i on it (e.g. `ssljax.pal.uniform_pair_weights`).

  Returns:
    Scalar Σ_ij pair_weights_ij · ℓ_ij. Its mean over the minibatch distribution
      equals ‖ZZᵀ − G‖² − ‖G‖² exactly. Divide by N² for an O(1) training loss.

  Raises:
    ValueError: if shapes disagree.

  Example:
    >>> z = jnp.eye(3)[:, :2]; g = jnp.eye(3)
    >>> w = jnp.ones((3, 3))  # the full batch: inclusion probability 1
    >>> round(float(pal_minibatch_loss(z, g, g.sum(1), 3, w)), 4)
    -2.0
    >>> round(float(vic2_offset_loss(z, g)), 4)
    -2.0

  References:
    Cabannes et al. 2023, arXiv 2303.15256, Algorithm 1, eq. (11).
  """
  terms_BxB = vic2_pair_terms(z, g, degree, n)
  w_BxB = jnp.asarray(pair_weights, terms_BxB.dtype)
  if w_BxB.shape != terms_BxB.shape:
    raise ValueError(f"pair_weights must be (B, B) = {terms_BxB.shape}, got"
                     f" {w_BxB.shape}")
  return jnp.sum(w_BxB * terms_BxB)


@checks.float32_matmuls
def paper_minibatch_loss(z, g, pair_weights) -> jax.Array:
  """The paper's eqs. (9)–(10) with the same weights (biased unless D = NI).

  Args:
    z: (B, K) float embeddings.
    g: (B, B) graph entries.
    pair_weights: (B, B) inverse inclusion probabilities.

  Returns:
    Scalar Σ_ij pair_weights_ij (G_ij‖z_i − z_j‖² + R(z_i, z_j)).

  Raises:
    ValueError: if shapes disagree.

  References:
    Cabannes et al. 2023, arXiv 2303.15256, eqs. (9)–(10): equal to ‖ZZᵀ − G‖² −
    ‖G‖² + 2Tr(Zᵀ(D − NI)Z), i.e. VIC² + const only if D = NI.
  """
  terms_BxB = paper_pairwise_terms(z, g)
  return jnp.sum(jnp.asarray(pair_weights, terms_BxB.dtype) * terms_BxB)


@checks.float32_matmuls
def vic2_offset_loss(z, g) -> jax.Array:
  """Full-batch reference ‖ZZᵀ − G‖² − ‖G‖² = ‖ZZᵀ‖² − 2Tr(ZᵀGZ).

  Args:
    z: (N, K) float embeddings.
    g: (N, N) symmetric graph.

  Returns:
    Scalar.

  Raises:
    ValueError: if shapes disagree.
  """
  z_NxK, g_NxN = _check(z, g)
  zz_KxK = z_NxK.T @ z_NxK
  return jnp.sum(zz_KxK**2) - 2.0 * jnp.sum(z_NxK * (g_NxN @ z_NxK))
