"""W-MSE (Ermolov et al. 2021): Cholesky whitening, then cosine MSE of views.

Each view is whitened over the batch (or over sub-batches of
`whitening_size` rows), the whitened rows are projected to the unit sphere
and the loss is the MSE between positives, 2 − 2·mean cosine. No
stop-gradient: the gradient flows through the whitening matrix, as in the
official code.

References:
  Ermolov, Siarohin, Sangineto & Sebe, "Whitening for Self-Supervised
  Representation Learning", ICML 2021, arXiv:2007.06346, eqs. (2)-(5) and
  §3.1-3.2 (batch slicing); official code github.com/htdt/self-supervised
  (`methods/whitening.py` Whitening2d, `methods/w_mse.py`,
  `methods/norm_mse.py`).
"""

from __future__ import annotations

import functools
import operator

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

from ssljax import checks, graphs

__all__ = ["wmse_two_view", "wmse_two_view_terms", "wmse_whiten"]

_NORM_FLOOR = 1e-12  # F.normalize's eps (official norm_mse_loss).


def _check_shrinkage(eps) -> None:
  if checks.is_concrete(eps):
    e = float(eps)
    if not 0.0 <= e < 1.0:
      raise ValueError(f"eps must be in [0, 1), got {eps!r}")


def _check_rows_for_rank(m: int, k: int, eps, name: str) -> None:
  """Without shrinkage, the (K, K) covariance of m rows needs m >= K + 1."""
  concrete = checks.is_concrete(eps)
  if concrete and float(eps) == 0.0 and m <= k:
    raise ValueError(
        f"{name} = {m} rows cannot be whitened in K = {k} dimensions with"
        f" eps = 0: the ddof=1 covariance of m rows has rank <= m − 1, so it"
        f" needs m >= K + 1 = {k + 1} (or eps > 0)")


def _whiten(z_MxK: jax.Array, eps) -> jax.Array:
  """(z − m)L⁻ᵀ, LLᵀ = (1 − eps)·cov(z, ddof=1) + eps·I, L lower.

  z_MxK is one sub-batch (rank 2): see `_whiten_sub_batches` for why it is
  never vmapped. A non-positive-definite Σ gives NaN, not an error.
  """
  m, k = z_MxK.shape
  zc_MxK = z_MxK - jnp.mean(z_MxK, axis=0, keepdims=True)
  cov_KxK = zc_MxK.T @ zc_MxK / (m - 1)
  eps = jnp.asarray(eps, z_MxK.dtype)
  cov_KxK = (1.0 - eps) * cov_KxK + eps * jnp.eye(k, dtype=z_MxK.dtype)
  l_KxK = jnp.linalg.cholesky(cov_KxK)
  # Rows w_i = L⁻¹(z_i − m), i.e. W = Zc L⁻ᵀ, solved as L Wᵀ = Zcᵀ.
  return jsl.solve_triangular(l_KxK, zc_MxK.T, lower=True).T


_whiten_jit = jax.jit(_whiten)


@checks.float32_matmuls
def wmse_whiten(z: jax.typing.ArrayLike, *, eps: float = 0.0) -> jax.Array:
  """Cholesky whitening of W-MSE over the batch (official `Whitening2d`).

  With m = mean of the rows, Σ = (1 − eps)·cov(z, ddof=1) + eps·I_K and its
  lower Cholesky factor L (Σ = LLᵀ), returns w = (z − m)L⁻ᵀ, so that
  cov(w, ddof=1) = L⁻¹ Σ_0 L⁻ᵀ = I_K when eps = 0.

  Args:
    z: (N, K) embeddings, float32 or float64, N >= K + 1 when eps = 0.
    eps: shrinkage in [0, 1) toward the identity (official `w_eps`, 0).

  Returns:
    (N, K) whitened rows, z's dtype.

  Raises:
    ValueError: if z is not rank 2, N <= K with eps = 0, eps is not in
      [0, 1), or (concrete z only) z has NaN/inf.

  References:
    Ermolov et al. 2021, arXiv:2007.06346, eqs. (3)-(4); official code
    `Whitening2d.forward` (github.com/htdt/self-supervised).

  Example:
    >>> z = jnp.array([[0., 1.], [2., 3.], [4., 4.], [1., 0.]])
    >>> w = wmse_whiten(z)
    >>> jnp.round(jnp.cov(w, rowvar=False), 4).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
  """
  z_NxK = checks.as_float(z)
  checks.check_embeddings(z_NxK, "z")
  _check_shrinkage(eps)
  _check_rows_for_rank(z_NxK.shape[0], z_NxK.shape[1], eps, "N")
  return _whiten_jit(z_NxK, eps)


@checks.float32_matmuls
def wmse_two_view_terms(
    z1: jax.typing.ArrayLike,
    z2: jax.typing.ArrayLike,
    *,
    eps: float = 0.0,
    whitening_size: int | None = None,
) -> dict[str, jax.Array]:
  """W-MSE for two views (Ermolov et al. 2021): mean cosine and loss.

  Each view is whitened separately (`wmse_whiten`: centre, ddof=1
  covariance shrunk by eps, lower Cholesky L, w = (z − m)L⁻ᵀ), then

      cosine = mean_i cos(w1_i, w2_i)
      loss   = mean_i ‖w1_i/‖w1_i‖ − w2_i/‖w2_i‖‖² = 2 − 2·cosine

  (official `norm_mse_loss`). No stop-gradient anywhere.

  Invariances: the loss is unchanged by z_v → z_v A + b_v (same A for both
  views) for any invertible upper-triangular A, since the Cholesky factor
  absorbs it (L_A = AᵀL up to column signs shared by the views). It is not
  invariant under a general invertible A, not even a rotation: then
  w(z_v A) = w(z_v) Q_v with an orthogonal Q_v that depends on the view's
  own covariance, so Q_1 ≠ Q_2 and the cosines change.

  `whitening_size` = M splits the batch into N/M contiguous sub-batches of
  M rows, each whitened on its own (paper §3.2, "batch slicing"; official
  `w_size`): rows [jM, (j+1)M) of z1 and of z2 form sub-batch j. The loss
  is the mean over all N rows, i.e. the average of the N/M sub-batch losses.
  The official code draws a random permutation of the rows before slicing
  and repeats this `w_iter` times, averaging; here the caller permutes
  (e.g. `jax.random.permutation`, the same for z1 and z2) and repeats if
  wanted, so the function stays deterministic. The paper uses M = 2K
  (official `w_size` 128 for K = 64); M must exceed K when eps = 0. Each
  sub-batch gets its own unbatched Cholesky: do not `jax.vmap` this
  function on CPU (batched LAPACK calls can deadlock XLA's thread pool, see
  `_whiten_sub_batches`).

  A sub-batch whose covariance is singular (rank < K with eps = 0) has no
  Cholesky factor: the loss and its gradient are then NaN, and the training
  loop stops with FloatingPointError.

  Args:
    z1: (N, K) embeddings of view 1, float32 or float64.
    z2: (N, K) embeddings of view 2, row i paired with row i of z1.
    eps: shrinkage in [0, 1): Σ = (1 − eps)·cov + eps·I (official `w_eps`).
    whitening_size: None (whiten the whole batch, M = N) or an int M that
      divides N.

  Returns:
    dict with 0-d arrays of the inputs' (promoted) dtype: "cosine" and "loss".

  Raises:
    ValueError: if z1 or z2 is not rank 2, the shapes differ, N is not
      divisible by whitening_size, a sub-batch has M <= K rows with eps = 0,
      eps is not in [0, 1), or (concrete inputs only) an input has NaN/inf.

  References:
    Ermolov et al., ICML 2021, arXiv:2007.06346, eqs. (2)-(5), §3.2;
    official code github.com/htdt/self-supervised (`w_mse.py`,
    `whitening.py`, `norm_mse.py`).

  Example:
    >>> z1 = jnp.array([[0., 1.], [2., 3.], [4., 4.], [1., 0.]])
    >>> round(abs(float(wmse_two_view_terms(z1, 2. * z1 + 1.)["loss"])), 6)
    0.0
  """
  z1_NxK = checks.as_float(z1)
  z2_NxK = checks.as_float(z2)
  checks.check_embeddings(z1_NxK, "z1")
  checks.check_same_shape(z1_NxK, z2_NxK, "z1", "z2")
  checks.check_embeddings(z2_NxK, "z2")
  _check_shrinkage(eps)
  n, k = z1_NxK.shape
  if whitening_size is None:
    m = n
  else:
    try:
      if isinstance(whitening_size, bool):
        raise TypeError
      m = operator.index(whitening_size)
    except TypeError:
      raise ValueError(
          f"whitening_size must be None or an int >= 2, got {whitening_size!r}"
      ) from None
    if m < 2 or n % m:
      raise ValueError(
          f"whitening_size must be an int >= 2 that divides N = {n}, got {m}")
  _check_rows_for_rank(m, k, eps, "whitening_size" if whitening_size else "N")
  return _wmse_terms_core(z1_NxK, z2_NxK, eps, m=m)


def _whiten_sub_batches(z_NxK: jax.Array, eps, m: int) -> jax.Array:
  """Whitens rows [jm, (j+1)m) apart, one unbatched Cholesky per sub-batch.

  A Python loop on purpose, not jax.vmap (which this code used until the
  full runs stalled). On CPU, jaxlib 0.10's LAPACK kernels with a batch
  dimension (potrf, trsm) hand slices of the batch to XLA's intra-op thread
  pool and block until they are done (`jax::ParallelBatchMap`). When as many
  batched calls as the pool has threads run at once, as the two views'
  independent whitenings did on a 2-core machine, every pool thread waits
  for work queued behind itself and the step never returns (gdb on a
  stalled run: both `tf_XLAEigen` threads in `BlockingCounter::Wait` under
  `lapack_strsm_ffi`). Unbatched calls run inline on the calling thread.
  The official code also loops over sub-batches. Do not `jax.vmap` the
  W-MSE loss on CPU for the same reason.
  """
  n = z_NxK.shape[0]
  return jnp.concatenate([_whiten(z_NxK[s:s + m], eps) for s in range(0, n, m)])


@functools.partial(jax.jit, static_argnames=("m",))
def _wmse_terms_core(z1_NxK, z2_NxK, eps, *, m: int):
  """Terms on validated inputs; sub-batches of m rows are whitened apart."""
  dtype = jnp.result_type(z1_NxK, z2_NxK)
  w1_NxK = _whiten_sub_batches(z1_NxK.astype(dtype), eps, m)
  w2_NxK = _whiten_sub_batches(z2_NxK.astype(dtype), eps, m)
  u1_NxK = checks.unit_rows(w1_NxK, floor=_NORM_FLOOR)
  u2_NxK = checks.unit_rows(w2_NxK, floor=_NORM_FLOOR)
  cosine = jnp.mean(jnp.sum(u1_NxK * u2_NxK, axis=1))
  return {"cosine": cosine, "loss": 2.0 - 2.0 * cosine}


@checks.float32_matmuls
def wmse_two_view(
    z1: jax.typing.ArrayLike,
    z2: jax.typing.ArrayLike,
    *,
    eps: float = 0.0,
    whitening_size: int | None = None,
) -> jax.Array:
  """W-MSE loss for two views; `wmse_two_view_terms(...)["loss"]`.

  loss = 2 − 2·mean_i cos(w1_i, w2_i), w_v = (z_v − m_v)L_v⁻ᵀ the Cholesky
  whitening of view v over the batch (or over sub-batches of
  `whitening_size` rows, averaged). See `wmse_two_view_terms`.

  Arguments, errors and references: as `wmse_two_view_terms`, which documents
  them in full. Returns the 0-d "loss" entry, in z1's dtype.

  Example:
    >>> z1 = jnp.array([[0., 1.], [2., 3.], [4., 4.], [1., 0.]])
    >>> z2 = z1[::-1]
    >>> round(float(wmse_two_view(z1, z2)), 3)
    2.114
  """
  return wmse_two_view_terms(z1, z2, eps=eps,
                             whitening_size=whitening_size)["loss"]
