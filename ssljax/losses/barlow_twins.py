"""Barlow Twins: graph form and the official two-view form.

Rows are samples. The graph form `barlow_twins(z, g)` builds the
cross-correlation C = ẐᵀGẐ of column-normalised embeddings over a graph G
(`ssljax.graphs`); the two-view form `barlow_twins_two_view(z1, z2)`
reproduces the official code (facebookresearch/barlowtwins,
BarlowTwins.forward).

References:
  Balestriero & LeCun 2022, "Contrastive and Non-Contrastive Self-Supervised
  Learning Recover Global and Local Spectral Embedding Methods", arXiv
  2205.11508, §2 BarlowTwins (graph form and code; its off-diagonal term sums
  C_{k,k'}², not the printed C_{k,k}²). Cabannes et al. 2023, "Active
  Self-Supervised Learning: A Few Low-Cost Relationships Are All You Need",
  arXiv 2303.15256, eq. (4), Theorem 2 / App. B.2.4 (which hold only for the
  class-size normalised graph, see `barlow_twins_terms`). Zbontar et al.,
  "Barlow Twins", ICML 2021, arXiv:2103.03230, eq. (1)-(2) and Algorithm 1.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ssljax import checks, graphs

__all__ = ["barlow_twins", "barlow_twins_terms", "barlow_twins_two_view",
           "barlow_twins_two_view_terms"]

_COLUMN_NORMS = ("degree", "unit")


def _redundancy_terms(c_KxK, lambda_offdiag):
  """Σ_k (1 − C_kk)², Σ_{k≠l} C_kl² (masked) and the weighted loss."""
  k = c_KxK.shape[0]
  on_diag = jnp.sum((1.0 - jnp.diagonal(c_KxK))**2)
  off_KxK = jnp.where(jnp.eye(k, dtype=bool), 0.0, c_KxK)
  off_diag = jnp.sum(off_KxK**2)
  lam = jnp.asarray(lambda_offdiag, c_KxK.dtype)
  return {"on_diagonal": on_diag, "off_diagonal": off_diag,
          "loss": on_diag + lam * off_diag}


# ---------------------------------------------------------------------------
# Graph form.
# ---------------------------------------------------------------------------


@checks.float32_matmuls
def barlow_twins_terms(z, g, *, lambda_offdiag: float = 5e-3,
                       column_norm: str = "degree",
                       eps: float = 1e-12) -> dict[str, jax.Array]:
  """Barlow Twins over a graph: C = ẐᵀGẐ and its redundancy-reduction terms.

      C = ẐᵀGẐ,  Ẑ_:k = Z_:k / s_k   (no centring)
      loss = Σ_k (1 − C_kk)² + lambda_offdiag · Σ_{k≠l} C_kl²

  with the column scale s_k chosen by `column_norm`:

  * "degree" (default): s_k = sqrt((ZᵀDZ)_kk) = sqrt(Σ_i d_i z_ik²), D =
    diag(G1). This is what the Balestriero & LeCun 2022 code computes from the
    pair lists r, c = nonzero(G): X_left = Z[r] repeats row i d_i times, so its
    column norms are sqrt(ZᵀDZ)_kk. For a d-regular G it gives C = Z̃ᵀ(G/d)Z̃
    with unit-norm columns Z̃ (for V views d = V − 1: the pair-list code of
    Balestriero & LeCun 2022 §2 computes Z̃ᵀ(G/(V−1))Z̃, not the printed
    Z̃ᵀGZ̃), so C_kk <= 1 for a 0/1 G and the target I is reachable.
  * "unit": s_k = ‖Z_:k‖, i.e. C = Z̃ᵀGZ̃ literally, with Z̃ of
    unit-norm columns over all N rows and no centring (Balestriero & LeCun 2022
    §2). Same as "degree" when G is 1-regular (the 2-view graph) or rows of G
    sum to 1 (`normalized_supervised_graph`).

  Under "unit", the un-normalised G = YYᵀ leaves loss Σ_c (N_c − 1)² at
  Z = Y, and the class-size normalised G_n = Y diag(1/N_c) Yᵀ
  (`graphs.normalized_supervised_graph`) gives loss 0 at Z = YΛ (Cabannes et al.
  2023 Theorem 2 and App. B.2.4 claim the minimum for the un-normalised G, where
  Z = Y has loss Σ_c (N_c − 1)² instead). Under "degree" both graphs give 0 at Z
  = Y. The loss is invariant to a positive rescaling of each column of Z.

  The squared scale is floored, s_k = sqrt(max(s_k², eps)), so a collapsed
  (all-zero) column gives C = 0 there, not NaN (the code of Balestriero & LeCun
  2022 divides by max(‖·‖, ε) per factor; its printed formula puts ε as /(‖·‖‖·‖
  + ε)); with eps = 0 a zero scale is replaced by 1, with the same result and a
  finite gradient. "degree" needs non-negative degrees (not for signed graphs;
  use "unit" there).

  Args:
    z: (N, K) embeddings, float32 or float64 (ints promoted), N >= 2.
    g: (N, N) symmetric graph, dense or 2-D BCOO, any real dtype (cast to
      z's dtype); e.g. `graphs.views_graph(n, v)`.
    lambda_offdiag: λ, weight of the off-diagonal term (Cabannes et al. 2023;
      Balestriero & LeCun 2022: 5e-3).
    column_norm: "degree" (default) or "unit", see above.
    eps: >= 0, floor on the squared column scale s_k².

  Returns:
    dict of 0-d arrays of z's dtype: "on_diagonal" Σ_k(1 − C_kk)²,
      "off_diagonal" Σ_{k≠l} C_kl² (unweighted) and "loss".

  Raises:
    ValueError: if z is not rank 2 with N >= 2, K >= 1; g is not (N, N);
      column_norm is unknown; eps < 0; or (concrete inputs only) z or g has
      NaN/inf or g is not symmetric within 1e-6.

  References:
    Balestriero & LeCun 2022 (arXiv 2205.11508) §2 BarlowTwins code: the
    X_left/X_right pair lists r, c = nonzero(G) give Z_lᵀZ_r = ZᵀGZ, and for a
    non-regular G each column is normalised by sqrt(diag(ZᵀDZ)). Cabannes et al.
    2023 (arXiv 2303.15256) eq. (4), Theorem 2.

  Example:
    >>> from ssljax.graphs import views_graph
    >>> z = jnp.array([[1., 0.], [0., 1.], [1., 0.], [0., 1.]])
    >>> t = barlow_twins_terms(z, views_graph(2, 2))
    >>> [round(float(t[k]), 6) for k in ("on_diagonal", "off_diagonal", "loss")]
    [0.0, 0.0, 0.0]
  """
  z_NxK = checks.as_float(z)
  checks.check_embeddings(z_NxK, "z")
  graphs.validate_graph(g, z_NxK.shape[0], name="g")
  if column_norm not in _COLUMN_NORMS:
    raise ValueError(
        f"column_norm must be one of {_COLUMN_NORMS}, got {column_norm!r}")
  checks.check_nonnegative(eps, "eps")
  return _barlow_graph_core(z_NxK, graphs.as_graph(g), lambda_offdiag, eps,
                            column_norm == "degree")


@functools.partial(jax.jit, static_argnums=4)
def _barlow_graph_core(z_NxK, g_NxN, lambda_offdiag, eps, use_degree):
  dtype = z_NxK.dtype
  if use_degree:
    d_N = graphs.degree(g_NxN, dtype=dtype)
    sq_scale_K = d_N @ (z_NxK**2)  # diag(ZᵀDZ)
  else:
    sq_scale_K = jnp.sum(z_NxK**2, axis=0)
  sq_scale_K = jnp.maximum(sq_scale_K, jnp.asarray(eps, dtype))
  # A zero scale (collapsed column with eps = 0) divides by 1 instead: the
  # column is zero wherever G has weight, so C = 0 there, not 0/0 = NaN;
  # the inner where keeps the gradient of the sqrt finite too.
  scale_K = jnp.sqrt(jnp.where(sq_scale_K > 0, sq_scale_K, 1.0))
  zn_NxK = z_NxK / scale_K
  c_KxK = zn_NxK.T @ graphs.graph_matmul(g_NxN, zn_NxK)
  return _redundancy_terms(c_KxK, lambda_offdiag)


@checks.float32_matmuls
def barlow_twins(z, g, *, lambda_offdiag: float = 5e-3,
                 column_norm: str = "degree", eps: float = 1e-12) -> jax.Array:
  """Barlow Twins loss over a graph; `barlow_twins_terms(...)["loss"]`.

  loss = Σ_k (1 − C_kk)² + lambda_offdiag·Σ_{k≠l} C_kl², C = ẐᵀGẐ with
  degree-aware column normalisation Ẑ_:k = Z_:k / sqrt((ZᵀDZ)_kk).

  On concat([z1, z2]) with `views_graph(n, 2)` and λ = 0, this equals
  `barlow_twins_two_view(z1, z2, eps=0)` when both views are first
  standardised per column (batch norm without affine); for λ > 0 the
  graph form penalises the symmetrised ((C + Cᵀ)/2)_kl² instead of C_kl²
  (see `barlow_twins_two_view_terms`).

  Arguments, errors and references: as `barlow_twins_terms`, which documents
  them in full. Returns the 0-d "loss" entry, in z's dtype.

  Example:
    >>> from ssljax.graphs import normalized_supervised_graph
    >>> y = jnp.array([[2., 0.], [0., 1.], [2., 0.]])  # Z = YΛ
    >>> g_n = normalized_supervised_graph(jnp.array([0, 1, 0]))
    >>> round(float(barlow_twins(y, g_n)), 6)
    0.0
  """
  return barlow_twins_terms(z, g, lambda_offdiag=lambda_offdiag,
                            column_norm=column_norm, eps=eps)["loss"]


# ---------------------------------------------------------------------------
# Two-view form (official code).
# ---------------------------------------------------------------------------


@checks.float32_matmuls
def barlow_twins_two_view_terms(z1, z2, *, lambda_offdiag: float = 0.0051,
                                eps: float = 1e-5) -> dict[str, jax.Array]:
  """Official two-view Barlow Twins (Zbontar et al. 2021): terms and loss.

  Each view is standardised per feature over the batch, as
  `nn.BatchNorm1d(affine=False)` in training mode (biased variance):
  ẑ = (z − mean) / sqrt(var + eps). Then

      C = ẑ1ᵀ ẑ2 / N
      loss = Σ_k (1 − C_kk)² + lambda_offdiag · Σ_{k≠l} C_kl².

  A column that is constant over the batch is zero after centring; with
  eps = 0 it is divided by 1 instead of 0, so its entries of C are 0, not
  NaN. C is not symmetric. With eps = 0 it is the cosine cross-correlation of
  the column-centred views (standard BT, which standardises each view and
  divides by N, equals cosine BT on column-centred views), and the graph form
  `barlow_twins` on concat([ẑ1, ẑ2]) with `views_graph(n, 2)` gives C_graph = (C
  + Cᵀ)/2: the same on-diagonal term, off-diagonal Σ_{k≠l} ((C_kl + C_lk)/2)²
  (equal iff C is symmetric; never larger).

  Args:
    z1: (N, K) embeddings of view 1 (after the projector), N >= 2.
    z2: (N, K) embeddings of view 2, row i paired with row i of z1.
    lambda_offdiag: λ (`--lambd`, official 0.0051).
    eps: >= 0, BatchNorm1d eps (official 1e-5).

  Returns:
    dict of 0-d arrays of the inputs' (promoted) dtype: "on_diagonal",
      "off_diagonal" (unweighted) and "loss".

  Raises:
    ValueError: if z1 or z2 is not rank 2, the shapes differ, N < 2,
      eps < 0, or (concrete inputs only) an input has NaN/inf.

  References:
    Zbontar et al. 2021, arXiv:2103.03230, eqs. (1)-(2), Algorithm 1;
    code github.com/facebookresearch/barlowtwins main.py BarlowTwins.forward
    (single device: the all_reduce of C is the identity).

  Example:
    >>> z1 = jnp.array([[1., 0.], [0., 1.], [-1., 0.], [0., -1.]])
    >>> t = barlow_twins_two_view_terms(z1, z1, eps=0.0)
    >>> [round(float(t[k]), 4) for k in ("on_diagonal", "off_diagonal")]
    [0.0, 0.0]
  """
  z1_NxK, z2_NxK = checks.check_two_views(z1, z2)
  checks.check_nonnegative(eps, "eps")
  return _barlow_two_view_core(z1_NxK, z2_NxK, lambda_offdiag, eps)


def _batch_norm(z_NxK, eps):
  """BatchNorm1d(affine=False), training mode: biased batch variance."""
  zc_NxK = z_NxK - jnp.mean(z_NxK, axis=0, keepdims=True)
  var_K = jnp.mean(zc_NxK**2, axis=0) + eps
  # A constant column with eps = 0 is all zero after centring: divide by 1,
  # not 0 (its C entries are 0, not NaN; finite gradient).
  return zc_NxK / jnp.sqrt(jnp.where(var_K > 0, var_K, 1.0))


@jax.jit
def _barlow_two_view_core(z1_NxK, z2_NxK, lambda_offdiag, eps):
  dtype = jnp.result_type(z1_NxK, z2_NxK)
  eps = jnp.asarray(eps, dtype)
  n = z1_NxK.shape[0]
  c_KxK = (_batch_norm(z1_NxK.astype(dtype), eps).T
           @ _batch_norm(z2_NxK.astype(dtype), eps)) / n
  return _redundancy_terms(c_KxK, lambda_offdiag)


@checks.float32_matmuls
def barlow_twins_two_view(z1, z2, *, lambda_offdiag: float = 0.0051,
                          eps: float = 1e-5) -> jax.Array:
  """Official two-view Barlow Twins loss; `barlow_twins_two_view_terms` "loss".

  loss = Σ_k (1 − C_kk)² + λ Σ_{k≠l} C_kl², C = bn(z1)ᵀ bn(z2) / N, with
  bn the per-feature batch standardisation (biased variance, eps 1e-5).

  Arguments, errors and references: as `barlow_twins_two_view_terms`, which
  documents them in full. Returns the 0-d "loss" entry, in z1's dtype.

  Example:
    >>> z1 = jnp.array([[1., 0.], [0., 1.], [-1., 0.], [0., -1.]])
    >>> round(float(barlow_twins_two_view(z1, -z1, eps=0.0)), 4)
    8.0
  """
  return barlow_twins_two_view_terms(z1, z2, lambda_offdiag=lambda_offdiag,
                                     eps=eps)["loss"]
