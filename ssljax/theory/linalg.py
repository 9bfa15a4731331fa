"""Dense symmetric eigen-solvers shared by the closed forms of ssljax.theory.

`sorted_eigh` and `sqrt_clipped` give the best rank-k PSD factor
U_k diag(√max(μ, 0)) of a symmetric matrix (Eckart–Young); the
`top_eigenpairs_subspace` family computes the top-k eigenpairs of a large
dense symmetric matrix by shift-and-invert block subspace iteration, with a
Cholesky certificate (Weyl's inequality) for the eigenvalues it clips. Used
by `ssljax.theory.spectral` (optimal embeddings, Balestriero & LeCun 2022,
arXiv 2205.11508; Cabannes et al. 2023, arXiv 2303.15256, Theorem 2) and
`ssljax.theory.kernel` (kernel regime, Cabannes et al. 2023 §5).
NumPy helpers work in float64 on host arrays; the others are jit-safe.
"""

from __future__ import annotations

import operator
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from ssljax import graphs

__all__ = [
    "float_dtype", "dense_graph", "check_k", "sorted_eigh", "sqrt_clipped",
    "potrf_sym", "symmetrize_upper", "no_eigenvalue_above",
    "top_eigenpairs_subspace", "gershgorin_upper",
]


def float_dtype(x):
  """x's dtype if floating, else the default float dtype (float32/float64).

  Args:
    x: array-like of any shape. Raises nothing.
  """
  x = jnp.asarray(x)
  return x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.result_type(
      float)


def dense_graph(g, name: str = "g", n: int | None = None) -> jax.Array:
  """A validated graph as a dense float array (ints become the default float).

  Args:
    g: (N, N) symmetric graph, dense or BCOO.
    name: argument name used in the messages.
    n: expected N, or None.

  Returns:
    (N, N) dense jax.Array of a floating dtype.

  Raises:
    ValueError: as `ssljax.graphs.validate_graph`.
  """
  graphs.validate_graph(g, n, name=name)
  g = graphs.to_dense(g)
  return g.astype(float_dtype(g))


def check_k(k, n: int) -> int:
  """k as an int with 1 <= k <= n (an embedding dimension).

  Raises:
    ValueError: if k is a bool, not index-like, or outside [1, n].
  """
  if isinstance(k, bool):
    raise ValueError(f"k must be an int with 1 <= k <= N = {n}, got {k!r}")
  try:
    k = operator.index(k)
  except TypeError:
    raise ValueError(
        f"k must be an int with 1 <= k <= N = {n}, got {k!r}") from None
  if not 1 <= k <= n:
    raise ValueError(f"k must satisfy 1 <= k <= N = {n}, got k = {k}")
  return k


def sorted_eigh(m_NxN: jax.Array) -> tuple[jax.Array, jax.Array]:
  """All eigenpairs of a symmetric matrix, eigenvalues in descending order.

  Args:
    m_NxN: (N, N) float array, symmetrised as (m + mᵀ)/2 first.

  Returns:
    (μ (N,), U (N, N)) of m's dtype: m = U diag(μ) Uᵀ, μ descending.
  """
  m_NxN = 0.5 * (m_NxN + m_NxN.T)
  mu_N, u_NxN = jnp.linalg.eigh(m_NxN)
  return mu_N[::-1], u_NxN[:, ::-1]


def potrf_sym(a_NxN: np.ndarray):
  """Cholesky factor of the symmetric C-ordered (N, N) float64 a, in place.

  Passes the Fortran-ordered view aᵀ (= a) with lower=True, so LAPACK
  works on a's memory instead of a transposed copy. Reads only the upper
  triangle of a. Returns (c, info) as LAPACK's potrf: (c, True) is a
  `scipy.linalg.cho_solve` factor when info == 0; info > 0 means a is not
  (numerically) positive definite.
  """
  potrf = scipy.linalg.get_lapack_funcs("potrf", (a_NxN,))
  return potrf(a_NxN.T, lower=True, overwrite_a=True, clean=False)


def symmetrize_upper(a_NxN: np.ndarray, block: int = 256) -> np.ndarray:
  """Copies the upper triangle of square a into its lower one, in place.

  Block by block, so the transposed reads stay in cache and no N×N
  temporary is allocated. Returns a.
  """
  n = a_NxN.shape[0]
  for i in range(0, n, block):
    j = min(i + block, n)
    a_NxN[j:, i:j] = a_NxN[i:j, j:].T
    diag_bxb = a_NxN[i:j, i:j]
    diag_bxb[...] = np.triu(diag_bxb) + np.triu(diag_bxb, 1).T
  return a_NxN


def no_eigenvalue_above(m_NxN: np.ndarray, u_Nxr: np.ndarray,
                         mu_r: np.ndarray, bound: float, scale: float) -> bool:
  """True only if λ_{r+1}(m) < bound (certified by one Cholesky).

  With c_i = μ_i − bound + scale > 0 and m' = m − U diag(c) Uᵀ, Weyl's
  inequality for the PSD rank-r term gives λ_{r+1}(m) <= λ_1(m'), and a
  successful Cholesky factorisation of bound·I − m' proves λ_1(m') < bound.
  This holds for any U (N, r) and μ > bound − scale; with converged Ritz
  pairs (U, μ) of the top r eigenvalues, m' has the other eigenvalues of m
  (up to O(residual²)) and those r moved to bound − scale, so the test
  succeeds whenever λ_{r+1}(m) < bound by more than the rounding error.
  """
  a_NxN = (u_Nxr * (mu_r - bound + scale)[None, :]) @ u_Nxr.T
  a_NxN -= m_NxN
  a_NxN[np.diag_indices_from(a_NxN)] += bound
  _, info = potrf_sym(a_NxN)
  return info == 0


def top_eigenpairs_subspace(m_NxN: np.ndarray, k: int, upper: float, *,
                             tol: float = 1e-10, clip_tol: float = 1e-8,
                             max_iter: int = 1000):
  """Top-k eigenpairs of symmetric m (numpy float64, C order), clipped at ~0.

  `upper` must bound λ_max(m) from above; scale = max(|upper|, 1), clip
  threshold τ = clip_tol·scale, residual tolerance tol·scale.
  1. With σ = upper + 0.01·scale, σI − m is positive definite, so one
     Cholesky factorisation gives T = (σI − m)⁻¹, whose largest eigenvalues
     1/(σ − μ) belong to the largest μ of m. Block subspace iteration on T
     (p = k + max(8, k // 2) columns) with Rayleigh–Ritz on m costs O(N²p)
     per step.
  2. k₊: Ritz values are lower bounds (Cauchy interlacing: the i-th Ritz
     value is <= λ_i(m)), so r = min(k, #{Ritz values > τ}) eigenvalues
     are certainly above τ. Once the residuals ‖m u − μ u‖ of these r
     pairs are <= tol·scale: if r = k, done; else `no_eigenvalue_above`
     certifies λ_{r+1}(m) < τ + tol·scale with one more Cholesky of the
     deflated, shifted m. If it fails (an eigenvalue above τ + tol·scale is
     not yet resolved), iteration goes on and the test is repeated once r
     has changed. So k₊ = r: eigenvalues <= τ (and any in (τ, τ + tol·scale]
     whose Ritz value is still <= τ) are clipped (zero columns), which
     changes the objective by at most k·(τ + tol·scale)². Without the
     clipping, a cluster of eigenvalues near 0 (directions where G ≈ 0)
     would never separate.
  Returns (μ (k,), U (N, k), k₊) with μ descending; columns k₊.. of U and
  μ are unconverged Ritz estimates. Warns if max_iter is reached; raises
  ValueError if σI − m is not positive definite (`upper` too small).
  """
  n = m_NxN.shape[0]
  scale = max(abs(upper), 1.0)
  tau, res_tol = clip_tol * scale, tol * scale
  p = min(n, k + max(8, k // 2))
  sigma = upper + 1e-2 * scale
  shifted_NxN = -m_NxN
  shifted_NxN[np.diag_indices(n)] += sigma
  chol, info = potrf_sym(shifted_NxN)
  if info != 0:
    raise ValueError(f"upper = {upper} does not bound λ_max(m) from above")
  # Householder QR (scipy's is several times faster than np.linalg.qr on
  # these tall N×p blocks).
  qr = lambda a: scipy.linalg.qr(a, mode="economic", check_finite=False)[0]
  x_Nxp = qr(np.random.default_rng(0).standard_normal((n, p)))
  r, failed_r = 0, -1  # failed_r: r at the last failed certificate
  for _ in range(max_iter):
    x_Nxp = qr(scipy.linalg.cho_solve((chol, True), x_Nxp, check_finite=False))
    mx_Nxp = m_NxN @ x_Nxp
    mu_p, e_pxp = np.linalg.eigh(0.5 * (x_Nxp.T @ mx_Nxp + mx_Nxp.T @ x_Nxp))
    order = np.argsort(-mu_p)
    mu_p, e_pxp = mu_p[order], e_pxp[:, order]
    x_Nxp, mx_Nxp = x_Nxp @ e_pxp, mx_Nxp @ e_pxp
    r = min(k, int(np.count_nonzero(mu_p > tau)))
    res = np.linalg.norm(mx_Nxp[:, :r] - x_Nxp[:, :r] * mu_p[:r], axis=0)
    if np.any(res > res_tol):
      continue
    if r == k:
      break
    if r != failed_r:
      if no_eigenvalue_above(m_NxN, x_Nxp[:, :r], mu_p[:r], tau + res_tol,
                              scale):
        break
      failed_r = r
  else:
    warnings.warn(
        f"kernel_embedding(method='subspace'): no convergence in {max_iter}"
        f" iterations ({r} Ritz values above the clip threshold {tau:.3g},"
        f" max residual {np.max(res, initial=0.0):.3g} vs {res_tol:.3g}"
        + (", no certificate that no other eigenvalue is above it" if r < k
           else "") + "); an eigenvalue is nearly repeated or close to the"
        " threshold, method='eigh' is exact")
  return mu_p[:k], x_Nxp[:, :k], r


def gershgorin_upper(m_NxN) -> float:
  """Gershgorin bound max_i (m_ii + Σ_{j≠i} |m_ij|) >= λ_max(m).

  Args:
    m_NxN: (N, N) symmetric array (NumPy or jax), any real dtype.

  Returns:
    Python float (the bound). Raises nothing.
  """
  m_NxN = np.asarray(m_NxN)
  diag_N = np.diagonal(m_NxN)
  return float(np.max(diag_N + np.sum(np.abs(m_NxN), axis=1) - np.abs(diag_N)))


def sqrt_clipped(u_Nxk: jax.Array, mu_k: jax.Array,
                 scale=None) -> jax.Array:
  """U diag(√max(μ, 0)): the best rank-k PSD square root (Eckart–Young).

  Eigenvalues within rounding of 0 (|μ| <= N·eps·scale, scale = max|μ| by
  default) count as 0, so exact zero eigenvalues give exactly zero columns.

  Args:
    u_Nxk: (N, k) eigenvectors; mu_k: (k,) eigenvalues, same float dtype.
    scale: magnitude for the rounding threshold, or None for max|μ|.

  Returns:
    (N, k) array of u's dtype. jit-safe; raises nothing.
  """
  if scale is None:
    scale = jnp.max(jnp.abs(mu_k))
  tol = u_Nxk.shape[0] * jnp.finfo(mu_k.dtype).eps * scale
  mu_k = jnp.where(mu_k > tol, mu_k, 0.0)
  return u_Nxk * jnp.sqrt(mu_k)[None, :]
