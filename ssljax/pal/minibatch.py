"""Unbiased minibatch form of the VIC² loss ‖ZZᵀ − G‖² for PAL (Algorithm 1).

The degree-corrected pairwise form (FINDINGS (a) "002 / 001 losses")

    ‖ZZᵀ − G‖² − ‖G‖² = Σ_ij ℓ_ij,
    ℓ_ij = G_ij‖z_i − z_j‖² + (z_iᵀz_j)² − (d_i‖z_i‖² + d_j‖z_j‖²)/N,

with d = G1 the degrees of the FULL N-sample graph, needs only the entries
G_ij of the pairs in a minibatch plus the degrees of its rows. A minibatch S
drawn with inclusion probabilities π_ij (pairs, i ≠ j) and π_i (singletons)
gives the Horvitz–Thompson estimate

    L̂(S) = Σ_{i≠j∈S} ℓ_ij / π_ij + Σ_{i∈S} ℓ_ii / π_i,

whose expectation is exactly ‖ZZᵀ − G‖² − ‖G‖². `pair_weights` holds
1/π for each entry of the minibatch block: `uniform_pair_weights` for B of
N samples drawn uniformly without replacement, `group_pair_weights` when
whole groups (e.g. all V views of a sample, the SSL oracle) are drawn.

The paper's form eqs. (9)–(10), `paper_pairwise_terms`, uses
R(a, b) = (aᵀb)² − ‖a‖² − ‖b‖² in place of the degree term. Summed over
[N]² it equals ‖ZZᵀ − G‖² − ‖G‖² + 2Tr(Zᵀ(D − NI)Z), i.e. VIC² + const only
when every degree is N (FINDINGS (b) 002 erratum 4); it is kept to show that
bias.

References:
  002 eqs. (9)–(11), Algorithm 1, App. B.1.1; FINDINGS (a) "002 / 001
  losses" and (b) 002 erratum 4.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssljax.pal.weights import group_pair_weights, uniform_pair_weights

__all__ = [
    "vic2_pair_terms",
    "paper_pairwise_terms",
    "pal_minibatch_loss",
    "paper_minibatch_loss",
    "vic2_offset_loss",
    "uniform_pair_weights",
    "group_pair_weights",
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


def vic2_pair_terms(z, g, degree, n) -> jax.Array:
  """Degree-corrected pair terms ℓ_ij of ‖ZZᵀ − G‖² − ‖G‖².

  Args:
    z: (B, K) float embeddings of the minibatch rows.
    g: (B, B) graph entries G_ij among them (symmetric).
    degree: (B,) degrees d_i = Σ_{j∈[N]} G_ij in the FULL graph.
    n: the full number of samples N (the 1/N of the degree term).

  Returns:
    (B, B) terms ℓ_ij; summed over all of [N]² they give
    ‖ZZᵀ − G‖² − ‖G‖².

  Raises:
    ValueError: if the shapes of z, g, degree disagree.

  References:
    FINDINGS (a) "002 / 001 losses" (second pairwise form).
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


def paper_pairwise_terms(z, g) -> jax.Array:
  """Paper eqs. (9)–(10) terms G_ij‖z_i − z_j‖² + R(z_i, z_j) (biased).

  Args:
    z: (B, K) float embeddings.
    g: (B, B) graph entries.

  Returns:
    (B, B) terms; summed over [N]² they give
    ‖ZZᵀ − G‖² − ‖G‖² + 2Tr(Zᵀ(D − NI)Z).

  Raises:
    ValueError: if the shapes of z and g disagree.

  References:
    002 eqs. (9)–(10); FINDINGS (b) 002 erratum 4.
  """
  z_BxK, g_BxB = _check(z, g)
  gram_BxB = z_BxK @ z_BxK.T
  sq_B = jnp.diagonal(gram_BxB)
  sq_sum_BxB = sq_B[:, None] + sq_B[None, :]
  return g_BxB * (sq_sum_BxB - 2.0 * gram_BxB) + gram_BxB**2 - sq_sum_BxB


def pal_minibatch_loss(z, g, degree, n, pair_weights) -> jax.Array:
  """Unbiased minibatch estimate of ‖ZZᵀ − G‖² − ‖G‖².

  Args:
    z: (B, K) float embeddings of the minibatch rows.
    g: (B, B) graph entries among them.
    degree: (B,) full-graph degrees of the rows.
    n: full number of samples N.
    pair_weights: (B, B) inverse inclusion probabilities 1/π_ij off the
      diagonal and 1/π_i on it (`uniform_pair_weights`,
      `group_pair_weights`).

  Returns:
    Scalar Σ_ij pair_weights_ij · ℓ_ij. Its mean over the minibatch
    distribution equals ‖ZZᵀ − G‖² − ‖G‖² exactly. Divide by N² for an
    O(1) training loss.

  Raises:
    ValueError: if shapes disagree.

  Example:
    >>> z = jnp.eye(3)[:, :2]; g = jnp.eye(3)
    >>> w = uniform_pair_weights(3, 3)  # the full batch: weights 1
    >>> round(float(pal_minibatch_loss(z, g, g.sum(1), 3, w)), 4)
    -2.0
    >>> round(float(vic2_offset_loss(z, g)), 4)
    -2.0

  References:
    002 Algorithm 1, eq. (11); FINDINGS (a) "002 / 001 losses".
  """
  terms_BxB = vic2_pair_terms(z, g, degree, n)
  w_BxB = jnp.asarray(pair_weights, terms_BxB.dtype)
  if w_BxB.shape != terms_BxB.shape:
    raise ValueError(f"pair_weights must be (B, B) = {terms_BxB.shape}, got"
                     f" {w_BxB.shape}")
  return jnp.sum(w_BxB * terms_BxB)


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
    002 eqs. (9)–(10); FINDINGS (b) 002 erratum 4.
  """
  terms_BxB = paper_pairwise_terms(z, g)
  return jnp.sum(jnp.asarray(pair_weights, terms_BxB.dtype) * terms_BxB)


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
