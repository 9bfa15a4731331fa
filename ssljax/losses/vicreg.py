"""VICReg: graph form and the official two-view form (Bardes et al. 2022).

Rows are samples. The graph form `vicreg(z, g)` follows the spectral-embedding
notes (Balestriero & LeCun 2022), where G says which rows are positives
(`ssljax.graphs`); the two-view form `vicreg_two_view(z1, z2)` reproduces the
official code. The two are not the same normalisation; `vicreg_terms` states the
exact relation (checked numerically in tests/test_losses.py).

References:
  Balestriero & LeCun 2022, "Contrastive and Non-Contrastive Self-Supervised
  Learning Recover Global and Local Spectral Embedding Methods", arXiv
  2205.11508, §2 (2) VICReg. Bardes, Ponce & LeCun, "VICReg", ICLR 2022,
  arXiv:2105.04906; official code github.com/facebookresearch/vicreg
  (main_vicreg.py, VICReg.forward).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssljax import checks, graphs

__all__ = ["vicreg", "vicreg_terms", "vicreg_two_view", "vicreg_two_view_terms"]


# ---------------------------------------------------------------------------
# Shared pieces.
# ---------------------------------------------------------------------------


def _covariance(z_NxK: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Column-centred z and its ddof=1 covariance (K, K)."""
  zc_NxK = z_NxK - jnp.mean(z_NxK, axis=0, keepdims=True)
  cov_KxK = zc_NxK.T @ zc_NxK / (z_NxK.shape[0] - 1)
  return zc_NxK, cov_KxK


def _std_hinge(cov_KxK: jax.Array, eps) -> jax.Array:
  """(K,) relu(1 − sqrt(C_kk + eps))."""
  eps = jnp.asarray(eps, cov_KxK.dtype)
  return jax.nn.relu(1.0 - jnp.sqrt(jnp.diagonal(cov_KxK) + eps))


def _offdiag_sq_sum(cov_KxK: jax.Array) -> jax.Array:
  """Σ_{k≠l} C_kl² (masked, no cancellation against the diagonal)."""
  k = cov_KxK.shape[0]
  offdiag_KxK = jnp.where(jnp.eye(k, dtype=bool), 0.0, cov_KxK)
  return jnp.sum(offdiag_KxK**2)


def _with_loss(invariance, variance, covariance, dtype, weights) -> dict:
  """The three terms and "loss" = their sum weighted by (inv, var, cov)."""
  w_inv, w_var, w_cov = (jnp.asarray(x, dtype) for x in weights)
  return {"invariance": invariance, "variance": variance,
          "covariance": covariance,
          "loss": w_inv * invariance + w_var * variance + w_cov * covariance}


# ---------------------------------------------------------------------------
# VICReg, graph form (Balestriero & LeCun 2022).
# ---------------------------------------------------------------------------


@checks.float32_matmuls
def vicreg_terms(
    z: jax.typing.ArrayLike,
    g: jax.typing.ArrayLike,
    *,
    inv_weight: float = 25.0,
    var_weight: float = 25.0,
    cov_weight: float = 1.0,
    eps: float = 1e-4,
) -> dict[str, jax.Array]:
  """VICReg over a graph: unweighted terms and the weighted loss.

  With C = cov(Z, ddof=1) over all N rows, d = G1 and D = diag(d):

      variance   = Σ_k relu(1 − sqrt(C_kk + eps))
      covariance = Σ_{k≠l} C_kl²
      invariance = (1/N) Σ_ij G_ij ‖z_i − z_j‖² = (2/N) Tr(Zᵀ(D − G)Z)
      loss = inv_weight·invariance + var_weight·variance
             + cov_weight·covariance

  The invariance is computed as (2/N)(Σ_i d_i‖z̄_i‖² − Tr(Z̄ᵀGZ̄)) on the
  column-centred Z̄: O(NK) plus one G @ Z, never the (N, N, K) differences.
  Centring is exact because (D − G)1 = 0 for symmetric G, and it limits
  float32 cancellation.

  Relation to the two-view form (`vicreg_two_view_terms`), for
  z = concat([z1, z2]) (2n rows) and g = views_graph(n, 2) (the graph form of
  Balestriero & LeCun 2022 §2, whose variance is a sum over k, not the original
  mean):

  * invariance: graph = (1/n) Σ_i ‖z1_i − z2_i‖² = K · two-view invariance
    (the two-view term is a mean over n·K entries; the graph term divides
    by the number of rows 2n and counts every pair twice);
  * variance: graph is a SUM over k of the hinge on the std of the pooled
    2n rows; two-view is ½ Σ_views MEAN over k of the per-view hinges;
  * covariance: graph is Σ_{k≠l} C_kl² of the pooled covariance, no /K;
    two-view is Σ_views Σ_{k≠l} (C_v)_kl² / K with per-view centring.

  So the same weights (25, 25, 1) balance the terms differently in the two
  forms. eps sits inside the sqrt as in the official VICReg code; Balestriero &
  LeCun 2022 write sqrt(max(C_kk, ε)); the two agree up to O(eps) and sqrt(C_kk
  + eps) keeps the gradient finite at C_kk = 0.

  Args:
    z: (N, K) embeddings, float32 or float64 (ints are promoted), N >= 2.
    g: (N, N) symmetric graph, dense array or 2-D
      `jax.experimental.sparse.BCOO` (cost O(nnz·K)), any real dtype (cast
      to z's dtype); e.g. `ssljax.graphs.views_graph(n, v)` with N = n·v.
    inv_weight: γ of Balestriero & LeCun 2022, weight of the invariance term
      (official 25).
    var_weight: α of Balestriero & LeCun 2022, weight of the variance term
      (official 25).
    cov_weight: β of Balestriero & LeCun 2022, weight of the covariance term
      (official 1).
    eps: >= 0, added to C_kk inside the square root.

  Returns:
    dict with 0-d arrays of z's dtype: "invariance", "variance", "covariance"
      (unweighted) and "loss" (weighted sum).

  Raises:
    ValueError: if z is not rank 2, has N < 2 or K < 1 rows/columns, g is
      not (N, N), eps < 0, or (concrete inputs only) z or g has NaN/inf or
      g is not symmetric within 1e-6.

  References:
    Balestriero & LeCun 2022, arXiv 2205.11508, §2 (2) VICReg: α Σ_k max(0, 1 −
    √C_kk) + β Σ_{k≠l} C_kl² + (γ/N) Σ G_ij‖z_i − z_j‖² with C = cov(Z, ddof=1)
    (the printed covariance term misses its Σ_k; the code has it). Invariance: Σ
    G_ij‖z_i − z_j‖² = 2Tr(Zᵀ(D − G)Z). Original two-view loss: Bardes et al.
    2022, arXiv:2105.04906, eqs. (1)-(6).

  Example:
    >>> from ssljax.graphs import views_graph
    >>> z = jnp.array([[0., 0.], [2., 0.], [0., 2.], [2., 2.]])
    >>> t = vicreg_terms(z, views_graph(2, 2))
    >>> [round(float(t[k]), 4) for k in ("invariance", "variance", "covariance")]
    [4.0, 0.0, 0.0]
  """
  z_NxK = checks.as_float(z)
  checks.check_embeddings(z_NxK, "z")
  n = z_NxK.shape[0]
  graphs.validate_graph(g, n, name="g")
  checks.check_nonnegative(eps, "eps")
  weights = (inv_weight, var_weight, cov_weight)
  return _vicreg_terms_core(z_NxK, graphs.as_graph(g), weights, eps)


@jax.jit
def _vicreg_terms_core(z_NxK, g_NxN, weights, eps):
  """Graph-form terms on validated inputs (jitted: one compile per shape)."""
  n = z_NxK.shape[0]
  zc_NxK, cov_KxK = _covariance(z_NxK)
  variance = jnp.sum(_std_hinge(cov_KxK, eps))
  covariance = _offdiag_sq_sum(cov_KxK)
  d_N = graphs.degree(g_NxN, dtype=z_NxK.dtype)  # dense or BCOO g
  sq_norms_N = jnp.sum(zc_NxK**2, axis=1)
  tr_zgz = graphs.graph_quadratic(g_NxN, zc_NxK)
  invariance = (2.0 / n) * (jnp.dot(d_N, sq_norms_N) - tr_zgz)

  return _with_loss(invariance, variance, covariance, z_NxK.dtype, weights)


@checks.float32_matmuls
def vicreg(
    z: jax.typing.ArrayLike,
    g: jax.typing.ArrayLike,
    *,
    inv_weight: float = 25.0,
    var_weight: float = 25.0,
    cov_weight: float = 1.0,
    eps: float = 1e-4,
) -> jax.Array:
  """VICReg loss over a graph; `vicreg_terms(...)["loss"]`.

  loss = inv_weight·(1/N)Σ_ij G_ij‖z_i − z_j‖²
         + var_weight·Σ_k relu(1 − sqrt(C_kk + eps))
         + cov_weight·Σ_{k≠l} C_kl²,   C = cov(Z, ddof=1).

  See `vicreg_terms` for the computation and the exact relation to the
  two-view `vicreg_two_view` (different normalisations: graph variance sums
  over k, covariance has no /K, invariance is /N not a mean over N·K).

  Arguments, errors and references: as `vicreg_terms`, which documents them in
  full. Returns the 0-d "loss" entry, in z's dtype.

  Example:
    >>> from ssljax.graphs import views_graph
    >>> z = jnp.array([[0., 0.], [2., 0.], [0., 2.], [2., 2.]])
    >>> round(float(vicreg(z, views_graph(2, 2))), 4)
    100.0
  """
  return vicreg_terms(z, g, inv_weight=inv_weight, var_weight=var_weight,
                      cov_weight=cov_weight, eps=eps)["loss"]


# ---------------------------------------------------------------------------
# VICReg, two-view form (Bardes et al. 2022, official code).
# ---------------------------------------------------------------------------


@checks.float32_matmuls
def vicreg_two_view_terms(
    z1: jax.typing.ArrayLike,
    z2: jax.typing.ArrayLike,
    *,
    inv_weight: float = 25.0,
    var_weight: float = 25.0,
    cov_weight: float = 1.0,
    eps: float = 1e-4,
) -> dict[str, jax.Array]:
  """Official two-view VICReg (Bardes et al. 2022): terms and weighted loss.

  Exactly `VICReg.forward` of facebookresearch/vicreg, with each view
  centred, std_k = sqrt(var_k(ddof=1) + eps), cov = z̄ᵀz̄/(N − 1):

      invariance = mean over N·K of (z1 − z2)²          (F.mse_loss)
      variance   = ½ mean_k relu(1 − std1_k) + ½ mean_k relu(1 − std2_k)
      covariance = Σ_{k≠l} (cov1_kl)²/K + Σ_{k≠l} (cov2_kl)²/K
      loss = inv_weight·invariance + var_weight·variance
             + cov_weight·covariance

  This is not the graph form `vicreg_terms` on concat([z1, z2]) with a
  rescaling of the weights only: the graph invariance is K times this one,
  and the graph variance/covariance use the pooled 2N rows, a sum over k and
  no /K (see `vicreg_terms`; Balestriero & LeCun 2022 §2 code).

  Args:
    z1: (N, K) embeddings of view 1, float32 or float64, N >= 2.
    z2: (N, K) embeddings of view 2, row i paired with row i of z1.
    inv_weight: λ of the paper (`sim_coeff`), default 25.
    var_weight: μ of the paper (`std_coeff`), default 25.
    cov_weight: ν of the paper (`cov_coeff`), default 1.
    eps: >= 0, ε inside the std (official 1e-4).

  Returns:
    dict with 0-d arrays of the inputs' (promoted) dtype: "invariance",
      "variance", "covariance" (unweighted) and "loss".

  Raises:
    ValueError: if z1 or z2 is not rank 2, the shapes differ, N < 2,
      eps < 0, or (concrete inputs only) an input has NaN/inf.

  References:
    Bardes, Ponce & LeCun, ICLR 2022, arXiv:2105.04906, eqs. (1)-(6) and
    Algorithm 1; code: github.com/facebookresearch/vicreg main_vicreg.py.
    Graph form: Balestriero & LeCun 2022 §2 (2).

  Example:
    >>> z1 = jnp.array([[0., 0.], [2., 0.], [0., 2.], [2., 2.]])
    >>> t = vicreg_two_view_terms(z1, z1 + 1.0)
    >>> [round(float(t[k]), 4) for k in ("invariance", "variance", "covariance")]
    [1.0, 0.0, 0.0]
  """
  z1_NxK, z2_NxK = checks.check_two_views(z1, z2)
  checks.check_nonnegative(eps, "eps")
  weights = (inv_weight, var_weight, cov_weight)
  return _vicreg_two_view_terms_core(z1_NxK, z2_NxK, weights, eps)


@jax.jit
def _vicreg_two_view_terms_core(z1_NxK, z2_NxK, weights, eps):
  """Two-view terms on validated inputs (jitted: one compile per shape)."""
  dtype = jnp.result_type(z1_NxK, z2_NxK)
  z1_NxK, z2_NxK = z1_NxK.astype(dtype), z2_NxK.astype(dtype)
  k = z1_NxK.shape[1]
  invariance = jnp.mean((z1_NxK - z2_NxK)**2)
  _, cov1_KxK = _covariance(z1_NxK)
  _, cov2_KxK = _covariance(z2_NxK)
  variance = 0.5 * (jnp.mean(_std_hinge(cov1_KxK, eps))
                    + jnp.mean(_std_hinge(cov2_KxK, eps)))
  covariance = (_offdiag_sq_sum(cov1_KxK) + _offdiag_sq_sum(cov2_KxK)) / k

  return _with_loss(invariance, variance, covariance, z1_NxK.dtype, weights)


@checks.float32_matmuls
def vicreg_two_view(
    z1: jax.typing.ArrayLike,
    z2: jax.typing.ArrayLike,
    *,
    inv_weight: float = 25.0,
    var_weight: float = 25.0,
    cov_weight: float = 1.0,
    eps: float = 1e-4,
) -> jax.Array:
  """Official two-view VICReg loss; `vicreg_two_view_terms(...)["loss"]`.

  loss = inv_weight·mean((z1 − z2)²)
         + var_weight·½Σ_v mean_k relu(1 − sqrt(var_k(z_v) + eps))
         + cov_weight·Σ_v Σ_{k≠l} cov(z_v)_kl² / K.

  For the graph form on concat([z1, z2]) see `vicreg` (different
  normalisations; the exact relation is in `vicreg_terms`).

  Arguments, errors and references: as `vicreg_two_view_terms`, which
  documents them in full. Returns the 0-d "loss" entry, in z1's dtype.

  Example:
    >>> z1 = jnp.array([[0., 0.], [2., 0.], [0., 2.], [2., 2.]])
    >>> round(float(vicreg_two_view(z1, z1 + 1.0)), 4)
    25.0
  """
  return vicreg_two_view_terms(z1, z2, inv_weight=inv_weight,
                               var_weight=var_weight, cov_weight=cov_weight,
                               eps=eps)["loss"]
