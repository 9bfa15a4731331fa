"""Unbiased edge-minibatch estimate of VIC² ‖ZZᵀ − G‖² over a whole dataset.

The full-graph loss, in the degree-corrected pairwise form Σ_ij [G_ij‖z_i −
z_j‖² + (z_iᵀz_j)² − (d_i‖z_i‖² + d_j‖z_j‖²)/N] = ‖ZZᵀ − G‖² − ‖G‖²
(`ssljax.losses.pairwise.vic2_pair_terms`),

    ‖ZZᵀ − G‖² − ‖G‖² = Σ_ij G_ij‖z_i − z_j‖² + Σ_ij f_ij,
    f_ij = (z_iᵀz_j)² − (d_i‖z_i‖² + d_j‖z_j‖²)/N,

splits into an attraction over the edges and a repulsion over all pairs.
A minibatch of B entries e_b = (i_b, j_b) drawn i.i.d. with probabilities
p_e (`ssljax.data.edge_batches`) estimates each part without bias:

* attraction: Σ_b (G_e/p_e)‖z_i − z_j‖² / B;
* repulsion: the 2B endpoints u_r are draws of the endpoint marginal q, and
  two endpoints of different edges are independent, so each of the
  M = 4B(B − 1) ordered pairs (r, s) with e(r) ≠ e(s) gives the
  Horvitz–Thompson term f(u_r, u_s)/(q_r q_s); their mean is unbiased.

f is `vic2_pair_terms` with G = 0 among the batch rows (the G entries are
all in the attraction), weighted by `pal_minibatch_loss`'s pair weights
1/(M q_r q_s). Everything is divided by N² (N = rows with an edge) so the
loss is O(1). Unbiased only if every row with an edge can be drawn (q > 0),
which holds by construction.

References:
  Cabannes et al. 2023, "Active Self-Supervised Learning: A Few Low-Cost
  Relationships Are All You Need", arXiv 2303.15256, Algorithm 1, eqs. (9)–(11)
  and App. B.1.1. Eqs. (9)–(10) equal ‖ZZᵀ − G‖² + const only when every degree
  is N; the degree-corrected form above holds for any G.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssljax import checks, graphs
from ssljax.losses.pairwise import pal_minibatch_loss

__all__ = ["edge_vic2_terms"]


def _check(z, info):
  z_2xBxK = checks.as_float(z)  # ints promoted: info is cast to z's dtype
  info_3x2xB = jnp.asarray(info, z_2xBxK.dtype)
  if z_2xBxK.ndim != 3 or z_2xBxK.shape[0] != 2 or z_2xBxK.shape[1] < 2:
    raise ValueError(f"z must be (2, B, K) with B >= 2 (the two endpoints of "
                     f"B edges), got shape {z_2xBxK.shape}")
  if info_3x2xB.shape != (3, 2, z_2xBxK.shape[1]):
    raise ValueError(f"info must be (3, 2, B) = (3, 2, {z_2xBxK.shape[1]}), "
                     f"got {info_3x2xB.shape}")
  checks.check_finite(z_2xBxK, "z")
  checks.check_finite(info_3x2xB, "info")
  return z_2xBxK, info_3x2xB


@checks.float32_matmuls
def edge_vic2_terms(z, info) -> dict[str, jax.Array]:
  """Unbiased minibatch estimate of (‖ZZᵀ − G‖² − ‖G‖²)/N² from B edges.

  Args:
    z: (2, B, K) float embeddings (ints are promoted); z[0, b], z[1, b] are
      the endpoints i_b, j_b of edge b.
    info: (3, 2, B) float weights from `ssljax.data.edge_batches` (with_info):
      [0] d/N: full-graph degree of each endpoint over N, [1] 1/(N q) of
      each endpoint,
      [2] G_e/(N² p_e) of each edge (repeated over the two endpoints).

  Returns:
    dict with "loss" = "attraction" + "repulsion" (scalars, z's dtype). Its
      expectation over the edge draws is exactly (‖ZZᵀ − G‖² − ‖G‖²)/N² for the
      full graph G (tests/test_edge_graphs.py checks this by enumeration on a
      small graph).

  Raises:
    ValueError: if the shapes of z and info disagree, B < 2, or (concrete
      inputs only) z or info has NaN/inf.

  References:
    Cabannes et al. 2023, arXiv 2303.15256, Algorithm 1 and eqs. (9)–(11), in
    the degree-corrected form of the module docstring.
  """
  z_2xBxK, info_3x2xB = _check(z, info)
  b = z_2xBxK.shape[1]
  dist_B = jnp.sum((z_2xBxK[0] - z_2xBxK[1])**2, axis=1)
  attraction = jnp.sum(info_3x2xB[2, 0] * dist_B) / b
  # Rows r = v·B + b (view-major); pairs of the same edge get weight 0.
  z_RxK = z_2xBxK.reshape(2 * b, -1)
  edge_R = jnp.tile(jnp.arange(b), 2)
  inv_q_R = info_3x2xB[1].reshape(2 * b)
  cross_RxR = edge_R[:, None] != edge_R[None, :]
  w_RxR = jnp.where(cross_RxR, inv_q_R[:, None] * inv_q_R[None, :], 0.0)
  w_RxR = w_RxR / (4 * b * (b - 1))
  # info[0] holds d/N, so N = 1 here: f's degree term is (d/N)‖z‖².
  # The 1/N² of the loss sits in the weights as (1/(N q_r))(1/(N q_s)) ~ 1,
  # which keeps float32 well scaled.
  repulsion = pal_minibatch_loss(z_RxK, jnp.zeros((2 * b, 2 * b), z_RxK.dtype),
                                 info_3x2xB[0].reshape(2 * b), 1.0, w_RxR)
  return {"loss": attraction + repulsion, "attraction": attraction,
          "repulsion": repulsion}
