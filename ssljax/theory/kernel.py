"""Kernel regime: argmin_Z ‖ZZᵀ − G‖² + ridge·Tr(ZᵀK⁻¹Z), and kernels.

Two algorithms for the same optimum: `kernel_embedding_eigh` (dense
eigendecompositions, exact, O(N³)) and `kernel_embedding_subspace` (block
subspace iteration, for large N and small k); `kernel_embedding` picks one.
`kernel_embedding_features` maps new points; `gaussian_kernel` and
`laplacian_kernel` build kernel matrices. Rows are samples.

References:
  Cabannes et al. 2023, "Active Self-Supervised Learning: A Few Low-Cost
  Relationships Are All You Need", arXiv 2303.15256, §5 ("top spectral
  decomposition of G − λK⁻¹", which for the regulariser λTr(ZᵀK⁻¹Z) must
  read G − (λ/2)K⁻¹, negative eigenvalues clipped; checked against L-BFGS
  and with zero gradient at Z*); Kiani et al. 2022 (their ref. [32]).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from ssljax import checks
from ssljax.theory import linalg

__all__ = [
    "KernelEmbedding",
    "kernel_embedding",
    "kernel_embedding_eigh",
    "kernel_embedding_subspace",
    "kernel_embedding_features",
    "gaussian_kernel",
    "laplacian_kernel",
]

_METHODS = ("auto", "eigh", "subspace")
_AUTO_EIGH_MAX_N = 2000


def _check_nonneg_scalar(value, name: str) -> float:
  try:
    value = float(value)
  except (TypeError, jax.errors.ConcretizationTypeError):
    raise ValueError(f"{name} must be a concrete float >= 0, got"
                     f" {value!r}") from None
  if not 0 <= value < float("inf"):
    raise ValueError(f"{name} must be a finite float >= 0, got {value}")
  return value



class KernelEmbedding(NamedTuple):
  """Kernel-regime optimum returned by `kernel_embedding`.

  Attributes:
    z: (N, k) optimal embeddings of the training points, Z* = U diag(√μ₊).
    coef: (N, k) coefficients K⁻¹Z*, so f(x)ᵀ = k(x, X) @ coef (rows).
    eigenvalues: (k,) top eigenvalues μ of G − (ridge/2)K⁻¹, descending and
      not clipped (columns with μ <= 0 are zero in z). With
      method="subspace", values below the clip threshold 1e-8·scale
      (scale: Gershgorin bound of λ_max(G)) are unconverged Ritz estimates,
      lower bounds of eigenvalues below the threshold (their columns are
      zero).
  """
  z: jax.Array
  coef: jax.Array
  eigenvalues: jax.Array


def _kernel_not_pd_error(kmat_np: np.ndarray) -> ValueError:
  evals = scipy.linalg.eigvalsh(kmat_np)
  eig_min, eig_max = float(evals[0]), float(evals[-1])
  tol = kmat_np.shape[0] * np.finfo(np.float64).eps * max(abs(eig_max), 1e-300)
  what = ("is not PSD" if eig_min < -tol
          else "is singular (PSD but not invertible)")
  return ValueError(
      f"kernel_matrix must be positive definite (K⁻¹ is needed), but it"
      f" {what}: smallest eigenvalue {eig_min:.3g}. Add a small jitter, e.g."
      f" kernel_matrix + 1e-8·I, or use a larger bandwidth")


def _checked_inputs(kernel_matrix, g, k, ridge):
  """(K, G, k, ridge) validated, K and G dense in their promoted float dtype."""
  kmat_NxN = linalg.dense_graph(kernel_matrix, name="kernel_matrix")
  n = kmat_NxN.shape[0]
  g_NxN = linalg.dense_graph(g, n=n)
  k = linalg.check_k(k, n)
  ridge = _check_nonneg_scalar(ridge, "ridge")
  dtype = jnp.result_type(kmat_NxN, g_NxN)
  return kmat_NxN.astype(dtype), g_NxN.astype(dtype), k, ridge


def kernel_embedding(kernel_matrix, g, k: int, ridge: float, *,
                     method: str = "auto") -> KernelEmbedding:
  """Kernel-regime optimum: argmin_Z ‖ZZᵀ − G‖² + ridge·Tr(ZᵀK⁻¹Z).

  For a kernel model f_θ(x) = θᵀφ(x) with Tikhonov penalty ridge·‖θ‖²,
  the embeddings Z = f(X) pay ridge·Tr(ZᵀK⁻¹Z) (Cabannes et al. 2023 §5).
  Writing the objective as ‖ZZᵀ‖² − 2Tr(ZᵀMZ) + const with

      M = G − (ridge/2) K⁻¹                (note ridge/2; §5 prints ridge),

  the minimiser over rank-k Z is Z* = U_k diag(√max(μ_k, 0)) for the top-k
  eigenpairs (μ_k, U_k) of M, up to Z → ZR (verified against L-BFGS, same
  objective and same ZZᵀ, and with zero gradient at Z*). The out-of-sample map
  is f(x) = Z*ᵀK⁻¹k(X, x), i.e. rows `kernel_embedding_features`: k(x_new, X) @
  coef with coef = K⁻¹Z*; at the training points it returns Z* exactly.

  Methods: "eigh" (`kernel_embedding_eigh`: dense eigendecompositions of K
  and M; exact, handles repeated eigenvalues, O(N³) with a large constant),
  "subspace" (`kernel_embedding_subspace`: for large N and small k) and
  "auto" (eigh for N <= 2000, else subspace).

  Args:
    kernel_matrix: (N, N) symmetric positive definite kernel matrix K,
      e.g. `gaussian_kernel(x, x, sigma)` (add jitter if it is singular).
    g: (N, N) symmetric graph, dense or BCOO.
    k: embedding dimension, 1 <= k <= N.
    ridge: regularisation λ >= 0 of ridge·Tr(ZᵀK⁻¹Z).
    method: "auto", "eigh" or "subspace".

  Returns:
    `KernelEmbedding(z, coef, eigenvalues)` with (N, k), (N, k), (k,) arrays in
      the promoted floating dtype of kernel_matrix and g.

  Raises:
    ValueError: if kernel_matrix or g is not a finite symmetric (N, N)
      array, their shapes differ, kernel_matrix is not positive definite
      (non-PSD or singular; the message gives its smallest eigenvalue), k is
      not in [1, N], ridge < 0, or method is unknown.

  References:
    Cabannes et al. 2023, arXiv 2303.15256, §5 ("top spectral decomposition of G
    − λK⁻¹", which for the regulariser λTr(ZᵀK⁻¹Z) must read G − (λ/2)K⁻¹,
    negative eigenvalues clipped); Kiani et al. 2022 (their ref. [32]).
  """
  kmat_NxN, g_NxN, k, ridge = _checked_inputs(kernel_matrix, g, k, ridge)
  if method not in _METHODS:
    raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
  if method == "auto":
    method = "eigh" if kmat_NxN.shape[0] <= _AUTO_EIGH_MAX_N else "subspace"
  core = _eigh_core if method == "eigh" else _subspace_core
  return core(kmat_NxN, g_NxN, k, ridge)


def kernel_embedding_eigh(kernel_matrix, g, k: int,
                          ridge: float) -> KernelEmbedding:
  """`kernel_embedding` by dense eigendecompositions of K and of M.

  K = EΛEᵀ gives K⁻¹ = EΛ⁻¹Eᵀ, then M = G − (ridge/2)K⁻¹ = UμUᵀ and
  Z* = U_k diag(√max(μ_k, 0)). Exact, handles repeated eigenvalues; O(N³)
  with a large constant (two `jnp.linalg.eigh`), in the input dtype.

  Args:
    kernel_matrix, g, k, ridge: as in `kernel_embedding`: the (N, N)
      symmetric positive definite K, the (N, N) symmetric graph (dense or
      BCOO), 1 <= k <= N and ridge >= 0.

  Returns:
    `KernelEmbedding` (z (N, k), coef (N, k), eigenvalues (k,)) in the
    promoted floating dtype of kernel_matrix and g.

  Raises:
    ValueError: as `kernel_embedding` (all but the `method` check).

  References:
    Cabannes et al. 2023, arXiv 2303.15256, §5 (with G − (λ/2)K⁻¹).
  """
  return _eigh_core(*_checked_inputs(kernel_matrix, g, k, ridge))


def kernel_embedding_subspace(kernel_matrix, g, k: int,
                              ridge: float) -> KernelEmbedding:
  """`kernel_embedding` by shift-and-invert subspace iteration (large N).

  Runs in NumPy float64 and casts back. With b the
  Gershgorin bound of G (b >= λ_max(G) >= λ_max(M), as K⁻¹ is positive
  definite) and scale = max(|b|, 1), it
    1. factors K = LLᵀ (Cholesky; also used for coef) and forms K⁻¹ from
       L (LAPACK potri), hence M explicitly;
    2. factors σI − M, σ = b + 0.01·scale (positive definite), and runs
       block subspace iteration on (σI − M)⁻¹ with p = k + max(8, k // 2)
       columns and Rayleigh–Ritz on M, O(N²p) per step, until the
       residuals ‖Mu − μu‖ of the kept pairs are <= 1e-10·scale;
    3. keeps the pairs whose Ritz value exceeds τ = 1e-8·scale (Ritz
       values are lower bounds of the eigenvalues, so these are certainly
       above τ). If fewer than k, one Cholesky factorisation of
       (τ + 1e-10·scale)I − M + U diag(c) Uᵀ (U the kept Ritz vectors,
       c > 0) certifies by Weyl's inequality that no other eigenvalue
       exceeds τ + 1e-10·scale; if it fails, iteration continues. The other
       columns are clipped to 0 (objective change <= k·(1.01τ)²), which
       also stops a cluster of eigenvalues near 0 from stalling the
       iteration.
  That is two or three O(N³/3) Cholesky factorisations, one O(2N³/3)
  inverse and O(N²p) per step (no indefinite LDLᵀ, which parallelises
  poorly); it warns if it does not converge in 1000 steps (the k-th
  eigenvalue nearly repeated, or one within rounding of τ).

  Arguments, result, errors and references: as `kernel_embedding_eigh`.
  """
  return _subspace_core(*_checked_inputs(kernel_matrix, g, k, ridge))


def _eigh_core(kmat_NxN, g_NxN, k, ridge):
  n, dtype = kmat_NxN.shape[0], kmat_NxN.dtype
  lam_N, e_NxN = jnp.linalg.eigh(0.5 * (kmat_NxN + kmat_NxN.T))
  lam_max = float(lam_N[-1])
  if not float(lam_N[0]) > n * float(jnp.finfo(dtype).eps) * max(lam_max, 0):
    raise _kernel_not_pd_error(np.asarray(kmat_NxN, np.float64))
  kinv_NxN = (e_NxN / lam_N[None, :]) @ e_NxN.T
  mu_N, u_NxN = linalg.sorted_eigh(g_NxN - (0.5 * ridge) * kinv_NxN)
  mu_k, u_Nxk = mu_N[:k], u_NxN[:, :k]
  z_Nxk = linalg.sqrt_clipped(u_Nxk, mu_k, jnp.max(jnp.abs(g_NxN)) * n)
  coef_Nxk = kinv_NxN @ z_Nxk
  return KernelEmbedding(z_Nxk, coef_Nxk, mu_k)


def _subspace_core(kmat_NxN, g_NxN, k, ridge):
  dtype = kmat_NxN.dtype
  # float64 C-ordered host copies; the LAPACK calls below get Fortran-
  # ordered transposed views of these symmetric matrices (no copies).
  kmat_np = np.array(jax.device_get(kmat_NxN), dtype=np.float64, order="C")
  g_np = np.asarray(jax.device_get(g_NxN), dtype=np.float64)
  chol_k, info = linalg.potrf_sym(kmat_np)  # overwrites kmat_np
  if info == 0:
    potri = scipy.linalg.get_lapack_funcs("potri", (chol_k,))
    kinv_lower, info = potri(chol_k, lower=True)  # lower triangle of K⁻¹
  if info != 0:
    raise _kernel_not_pd_error(
        np.asarray(jax.device_get(kmat_NxN), dtype=np.float64))
  m_np = linalg.symmetrize_upper(kinv_lower.T)  # C-ordered K⁻¹, in place
  m_np *= -0.5 * ridge
  m_np += g_np  # M = G − (ridge/2)K⁻¹
  mu_k, u_Nxk, k_pos = linalg.top_eigenpairs_subspace(
      m_np, k, linalg.gershgorin_upper(g_np))
  z_np = u_Nxk * np.sqrt(np.maximum(mu_k, 0.0))[None, :]
  z_np[:, k_pos:] = 0.0  # eigenvalues <= clip_tol·scale: clipped
  coef_np = scipy.linalg.cho_solve((chol_k, True), z_np, check_finite=False)
  return KernelEmbedding(jnp.asarray(z_np, dtype), jnp.asarray(coef_np, dtype),
                         jnp.asarray(mu_k, dtype))


def kernel_embedding_features(embedding: KernelEmbedding,
                              cross_kernel) -> jax.Array:
  """Out-of-sample embeddings f(x) = Z*ᵀK⁻¹k(X, x), as rows.

  Args:
    embedding: the `KernelEmbedding` of the N training points.
    cross_kernel: (M, N) kernel values k(x_new_m, x_n) between M new points
      and the N training points (same kernel as the training matrix), e.g.
      `gaussian_kernel(x_new, x_train, sigma)`.

  Returns:
    (M, k) embeddings; with cross_kernel = K it returns `embedding.z`.

  Raises:
    ValueError: if cross_kernel is not (M, N) for the N training points.

  References:
    Cabannes et al. 2023, arXiv 2303.15256, §5: f(x) = Z*ᵀK⁻¹k(X, x).
  """
  cross_MxN = jnp.asarray(cross_kernel)
  n = embedding.coef.shape[0]
  if cross_MxN.ndim != 2 or cross_MxN.shape[1] != n:
    raise ValueError(f"cross_kernel must have shape (M, N) with N = {n}"
                     f" training points, got {cross_MxN.shape}")
  return cross_MxN @ embedding.coef


def _sq_dists(x, y) -> jax.Array:
  x_NxD, y_MxD = jnp.asarray(x), jnp.asarray(y)
  for name, a in (("x", x_NxD), ("y", y_MxD)):
    if a.ndim != 2:
      raise ValueError(f"{name} must be a rank-2 (rows, D) array, got shape"
                       f" {a.shape}")
  if x_NxD.shape[1] != y_MxD.shape[1]:
    raise ValueError(f"x and y must have the same number of columns D, got"
                     f" shapes {x_NxD.shape} and {y_MxD.shape}")
  d2_NxM = (jnp.sum(x_NxD**2, axis=1)[:, None] + jnp.sum(y_MxD**2, axis=1)[None]
            - 2.0 * x_NxD @ y_MxD.T)
  return jnp.maximum(d2_NxM, 0.0)


def _check_sigma(sigma) -> None:
  if checks.is_concrete(sigma) and not float(sigma) > 0:
    raise ValueError(f"sigma must be > 0, got {sigma!r}")


def gaussian_kernel(x, y, sigma: float) -> jax.Array:
  """Gaussian (RBF) kernel matrix exp(−‖x_i − y_j‖² / (2σ²)).

  Args:
    x: (N, D) points.
    y: (M, D) points.
    sigma: bandwidth σ > 0.

  Returns:
    (N, M) kernel matrix.

  Raises:
    ValueError: if x or y is not rank 2, their D differ, or sigma <= 0.

  Example:
    >>> round(float(gaussian_kernel(jnp.zeros((1, 2)), jnp.ones((1, 2)), 1.)[0, 0]), 4)
    0.3679
  """
  _check_sigma(sigma)
  return jnp.exp(-_sq_dists(x, y) / (2.0 * sigma**2))


def laplacian_kernel(x, y, sigma: float) -> jax.Array:
  """Laplacian kernel matrix exp(−‖x_i − y_j‖ / σ) (norm, not squared).

  Args:
    x: (N, D) points.
    y: (M, D) points.
    sigma: bandwidth σ > 0.

  Returns:
    (N, M) kernel matrix (positive definite for distinct points).

  Raises:
    ValueError: if x or y is not rank 2, their D differ, or sigma <= 0.

  Example:
    >>> round(float(laplacian_kernel(jnp.zeros((1, 2)), jnp.ones((1, 2)), 1.)[0, 0]), 4)
    0.2431
  """
  _check_sigma(sigma)
  return jnp.exp(-jnp.sqrt(_sq_dists(x, y)) / sigma)
