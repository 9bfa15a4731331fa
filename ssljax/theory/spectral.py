"""Closed-form optimal embeddings given a graph G (papers 001 and 002).

Rows are samples: G is (N, N) symmetric, embeddings Z are (N, k). Each
solver returns one minimiser; the losses are invariant under Z → ZR for
orthogonal R (and BarlowTwins also under positive column scalings), so
compare solutions through ZZᵀ, spans or principal angles, not entrywise.

* `optimal_embedding(g, k, loss=...)`: free Z ("interpolation regime").
* `linear_optimal_weights(x, g, k)`: Z = X W for a linear map W.
* `kernel_embedding(kernel_matrix, g, k, ridge)`: Z in an RKHS with the
  Tikhonov penalty ridge·Tr(ZᵀK⁻¹Z), plus `kernel_embedding_features` for
  the out-of-sample map; `gaussian_kernel` and `laplacian_kernel` build K.

Dense eigendecompositions use `jnp.linalg.eigh`. For large N,
`kernel_embedding` switches to a shift-inverted block subspace iteration
that finds only the top k eigenpairs and needs only Cholesky
factorisations (of K, then K⁻¹ from it; of a shifted M; and of a deflated
shifted M that certifies how many eigenvalues are kept): N = 4000 in a
few seconds on 2 CPU cores (`benchmarks/theory.py`), where a full eigh
takes tens of seconds.

References (keys of /work/shared/papers; FINDINGS.md overrides the papers):
  001 Balestriero & LeCun 2022, spectral-embedding notes (closed forms).
  002 Cabannes et al. 2023 (PAL), Theorem 1, Theorem 2, App. B, §5;
  FINDINGS.md (a) "002 / 001 losses", "002 optima", "Kernel regime" and
  (b) 002 errata 4, 5, 9.
"""

from __future__ import annotations

import operator
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from ssljax import graphs

__all__ = [
    "CLOSED_FORM_LOSSES",
    "KernelEmbedding",
    "optimal_embedding",
    "linear_optimal_weights",
    "kernel_embedding",
    "kernel_embedding_features",
    "gaussian_kernel",
    "laplacian_kernel",
]

# All three have the minimisers of ‖ZZᵀ − G‖² (FINDINGS (a) "002 / 001").
_VIC2_LOSSES = ("spectral_contrastive", "vic2", "vicreg_squared")
CLOSED_FORM_LOSSES = _VIC2_LOSSES + ("barlow_twins",)
_NO_CLOSED_FORM = {
    "vicreg": (
        "the hinge variance term relu(1 − std) with finite weights has no"
        " closed-form minimiser (the optimum trades the hinge against the"
        " invariance); use loss='vicreg_squared', whose squared-variance form"
        " equals ‖ZZᵀ − G‖² up to a constant"),
    "simclr": (
        "the InfoNCE softmax has no closed-form minimiser for a general G;"
        " only special cases are known (supervised balanced G: a regular"
        " simplex of class directions)"),
}
_METHODS = ("auto", "eigh", "subspace")
_AUTO_EIGH_MAX_N = 2000


# ---------------------------------------------------------------------------
# Boundary checks.
# ---------------------------------------------------------------------------


def _float_dtype(x):
  x = jnp.asarray(x)
  return x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.result_type(
      float)


def _dense_graph(g, name: str = "g", n: int | None = None) -> jax.Array:
  graphs.validate_graph(g, n, name=name)
  g = graphs.to_dense(g)
  return g.astype(_float_dtype(g))


def _check_k(k, n: int) -> int:
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


def _check_loss(loss: str, allowed: tuple[str, ...]) -> str:
  if loss in _NO_CLOSED_FORM:
    raise ValueError(
        f"loss={loss!r} has no closed-form optimum: {_NO_CLOSED_FORM[loss]}")
  if loss not in allowed:
    raise ValueError(f"loss must be one of {allowed}, got {loss!r}")
  return loss


def _check_nonneg_scalar(value, name: str) -> float:
  try:
    value = float(value)
  except (TypeError, jax.errors.ConcretizationTypeError):
    raise ValueError(f"{name} must be a concrete float >= 0, got"
                     f" {value!r}") from None
  if not 0 <= value < float("inf"):
    raise ValueError(f"{name} must be a finite float >= 0, got {value}")
  return value


# ---------------------------------------------------------------------------
# Top eigenpairs.
# ---------------------------------------------------------------------------


def _sorted_eigh(m_NxN: jax.Array) -> tuple[jax.Array, jax.Array]:
  """All eigenpairs of symmetric m, eigenvalues in descending order."""
  m_NxN = 0.5 * (m_NxN + m_NxN.T)
  mu_N, u_NxN = jnp.linalg.eigh(m_NxN)
  return mu_N[::-1], u_NxN[:, ::-1]


def _potrf_sym(a_NxN: np.ndarray):
  """Cholesky factor of the symmetric C-ordered a, in place (no copy).

  Passes the Fortran-ordered view aᵀ (= a) with lower=True, so LAPACK
  works on a's memory instead of a transposed copy. Reads only the upper
  triangle of a. Returns (c, info) as LAPACK's potrf: (c, True) is a
  `scipy.linalg.cho_solve` factor when info == 0; info > 0 means a is not
  (numerically) positive definite.
  """
  potrf = scipy.linalg.get_lapack_funcs("potrf", (a_NxN,))
  return potrf(a_NxN.T, lower=True, overwrite_a=True, clean=False)


def _symmetrize_upper(a_NxN: np.ndarray, block: int = 256) -> np.ndarray:
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


def _no_eigenvalue_above(m_NxN: np.ndarray, u_Nxr: np.ndarray,
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
  _, info = _potrf_sym(a_NxN)
  return info == 0


def _top_eigenpairs_subspace(m_NxN: np.ndarray, k: int, upper: float, *,
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
     pairs are <= tol·scale: if r = k, done; else `_no_eigenvalue_above`
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
  chol, info = _potrf_sym(shifted_NxN)
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
      if _no_eigenvalue_above(m_NxN, x_Nxp[:, :r], mu_p[:r], tau + res_tol,
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


def _gershgorin_upper(m_NxN) -> float:
  """max_i (m_ii + Σ_{j≠i} |m_ij|) >= λ_max(m)."""
  m_NxN = np.asarray(m_NxN)
  diag_N = np.diagonal(m_NxN)
  return float(np.max(diag_N + np.sum(np.abs(m_NxN), axis=1) - np.abs(diag_N)))


def _sqrt_clipped(u_Nxk: jax.Array, mu_k: jax.Array,
                  scale=None) -> jax.Array:
  """U diag(√max(μ, 0)): the best rank-k PSD square root.

  Eigenvalues within rounding of 0 (|μ| <= N·eps·scale, scale = max|μ| by
  default) count as 0, so exact zero eigenvalues give exactly zero columns.
  """
  if scale is None:
    scale = jnp.max(jnp.abs(mu_k))
  tol = u_Nxk.shape[0] * jnp.finfo(mu_k.dtype).eps * scale
  mu_k = jnp.where(mu_k > tol, mu_k, 0.0)
  return u_Nxk * jnp.sqrt(mu_k)[None, :]


# ---------------------------------------------------------------------------
# Free embedding.
# ---------------------------------------------------------------------------


def optimal_embedding(g, k: int, *, loss: str = "spectral_contrastive",
                      atol: float = 1e-6) -> jax.Array:
  """A minimiser Z* (N, k) of an SSL loss over free embeddings, given G.

  * "spectral_contrastive", "vic2", "vicreg_squared": the graph forms
    ‖ZZᵀ − G‖² (VIC², 002 Thm 1 and eq. (5) via App. B.1.1) and the
    squared-variance VICReg ‖ZᵀZ/N − I_K‖² + (2/N²)Tr(Zᵀ(NI − G)Z), which
    is (‖ZZᵀ − G‖² + N²K − ‖G‖²)/N² (FINDINGS (a)). By Eckart–Young on the
    PSD part of G, Z* = U_k diag(√max(μ_k, 0)) for the top-k eigenpairs
    (μ_k, U_k) of G, negative eigenvalues clipped to 0 (their columns are
    0). Unique up to Z → ZR (R orthogonal) iff μ_k > μ_{k+1} or μ_k <= 0.
    For G = YYᵀ (supervised, rows) and k >= C this is Y R with RRᵀ = I_C
    (002 Thm 2, FINDINGS "002 optima"); for k < C the minimum is the
    Eckart–Young tail Σ_{i>k} N_{c_i}².
  * "barlow_twins": the graph form ‖Z̃ᵀGZ̃ − I‖² with unit-norm columns
    Z̃ (002 Thm 1; FINDINGS (a)). Z* is k orthonormal eigenvectors of G
    (column scale is free: any Z*D, D positive diagonal, is also optimal).
    It is a minimiser in two cases, else ValueError:
      (a) G has the eigenvalue 1 with multiplicity >= k: Z̃ᵀGZ̃ = I_k and the
          loss is 0 for every off-diagonal weight. This covers
          `graphs.normalized_supervised_graph` (G_n = Y diag(1/N_c) Yᵀ, a
          projector of rank C) with k <= C, and views_graph(n, V)/(V − 1)
          with k <= n.
      (b) G is an orthogonal projector of rank r < k (eigenvalues in
          {0, 1}): Z* = [r eigenvectors of eigenvalue 1, k − r of eigenvalue
          0], loss k − r, the minimum for off-diagonal weight 1 (FINDINGS:
          for K > C the loss is >= K − C).
    Under the un-normalised G = YYᵀ neither holds: the loss at Z = Y is
    Σ_c (N_c − 1)² and zero-loss Z exist outside span(Y) (002 erratum 5),
    so there is no span(Y) closed form and a ValueError is raised.
  * "vicreg" (hinge) and "simclr": ValueError; no closed form exists (the
    hinge VICReg optimum depends on the finite weights; SimCLR's only on
    special graphs, e.g. a simplex for balanced supervised G).

  Args:
    g: (N, N) symmetric graph, dense or BCOO (densified).
    k: embedding dimension, 1 <= k <= N.
    loss: one of `CLOSED_FORM_LOSSES`.
    atol: tolerance on eigenvalues for the BarlowTwins conditions.

  Returns:
    (N, k) array in g's floating dtype (float32 for integer/bool g).

  Raises:
    ValueError: if g is not a finite symmetric (N, N) graph, k is not in
      [1, N], loss is unknown or has no closed form, or (barlow_twins) G
      satisfies neither (a) nor (b).

  References:
    002 Theorem 1, Theorem 2 and App. B.2 (errata 4, 5, 6 in FINDINGS (b));
    001 closed-form optimal representations; FINDINGS (a) "002 optima".

  Example:
    >>> from ssljax.graphs import supervised_graph
    >>> z = optimal_embedding(supervised_graph(jnp.array([0, 0, 1])), 2)
    >>> jnp.round(z @ z.T, 4).tolist()
    [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
  """
  g_NxN = _dense_graph(g)
  n = g_NxN.shape[0]
  k = _check_k(k, n)
  loss = _check_loss(loss, CLOSED_FORM_LOSSES)
  mu_N, u_NxN = _sorted_eigh(g_NxN)
  if loss in _VIC2_LOSSES:
    return _sqrt_clipped(u_NxN[:, :k], mu_N[:k], jnp.max(jnp.abs(mu_N)))
  # BarlowTwins.
  mu_np = np.asarray(jax.device_get(mu_N), dtype=np.float64)
  is_one = np.abs(mu_np - 1.0) <= atol
  is_zero = np.abs(mu_np) <= atol
  if np.count_nonzero(is_one) >= k:
    return u_NxN[:, np.flatnonzero(is_one)[:k]]
  if np.all(is_one | is_zero):
    r = int(np.count_nonzero(is_one))
    cols = np.concatenate([np.flatnonzero(is_one),
                           np.flatnonzero(is_zero)[:k - r]])
    return u_NxN[:, cols]
  raise ValueError(
      "loss='barlow_twins' has a closed-form minimiser only if g has the"
      f" eigenvalue 1 with multiplicity >= k = {k} or g is an orthogonal"
      f" projector; got {np.count_nonzero(is_one)} eigenvalue(s) equal to 1"
      f" and eigenvalues in [{mu_np[-1]:.4g}, {mu_np[0]:.4g}]. Normalise the"
      " graph (e.g. graphs.normalized_supervised_graph, or views_graph/(V−1));"
      " with the un-normalised YYᵀ the minimisers are not in span(Y)")


# ---------------------------------------------------------------------------
# Linear regime.
# ---------------------------------------------------------------------------


def linear_optimal_weights(x, g, k: int, *,
                           loss: str = "spectral_contrastive") -> jax.Array:
  """Closed-form W (D, k) minimising ‖(XW)(XW)ᵀ − G‖² for Z = XW.

  Derivation. Let X = P S Qᵀ be the thin SVD restricted to the r non-zero
  singular values (P: N×r, Q: D×r). Any W gives XW = P A with A = S QᵀW
  (r×k), and every A is reached (W = Q S⁻¹ A); the part of W orthogonal to
  span(Q) does not change Z. With P⊥ the complement of P,

      ‖P A AᵀPᵀ − G‖² = ‖A Aᵀ − PᵀGP‖² + ‖G‖² − ‖PᵀGP‖²,

  so A Aᵀ must be the best rank-k PSD approximation of M = PᵀGP (r×r):
  A = E_k diag(√max(μ_k, 0)) for its top-k eigenpairs (Eckart–Young), and

      W* = Q S⁻¹ E_k diag(√max(μ_k, 0)),   Z* = X W* = P E_k √μ₊,

  the minimum-norm minimiser. Columns beyond r (or with μ <= 0) are 0. The
  same W minimises the squared-variance VICReg (equal up to a constant and
  a factor 1/N²). Verified against gradient descent in
  tests/test_theory_spectral.py.

  Args:
    x: (N, D) inputs (rows = samples), float32 or float64. No bias is
      added: append a column of ones to x for an affine map.
    g: (N, N) symmetric graph, dense or BCOO.
    k: output dimension, 1 <= k <= N.
    loss: "spectral_contrastive", "vic2" or "vicreg_squared" (other losses
      raise: no linear closed form is verified for them).

  Returns:
    (D, k) array W* in the promoted floating dtype of x and g.

  Raises:
    ValueError: if x is not a finite non-empty (N, D) array, g is not a
      symmetric (N, N) graph, k is not in [1, N], or loss is not supported.

  References:
    001 closed-form optimal network parameters in the linear regime;
    FINDINGS (a) "002 / 001 losses" (VIC² and squared-variance VICReg).
  """
  x_NxD = jnp.asarray(x)
  if not jnp.issubdtype(x_NxD.dtype, jnp.floating):
    x_NxD = x_NxD.astype(jnp.result_type(float))
  if x_NxD.ndim != 2 or 0 in x_NxD.shape:
    raise ValueError(f"x must be a non-empty rank-2 (N, D) array, got shape"
                     f" {x_NxD.shape}")
  graphs._check_finite(x_NxD, "x")  # pylint: disable=protected-access
  n = x_NxD.shape[0]
  g_NxN = _dense_graph(g, n=n)
  k = _check_k(k, n)
  _check_loss(loss, _VIC2_LOSSES)
  dtype = jnp.result_type(x_NxD, g_NxN)
  x_NxD, g_NxN = x_NxD.astype(dtype), g_NxN.astype(dtype)
  p_Nxm, s_m, qt_mxD = jnp.linalg.svd(x_NxD, full_matrices=False)
  tol = float(jnp.max(s_m)) * max(x_NxD.shape) * float(jnp.finfo(dtype).eps)
  r = int(np.count_nonzero(np.asarray(jax.device_get(s_m)) > tol))
  w_DxK = jnp.zeros((x_NxD.shape[1], k), dtype)
  if r == 0:
    return w_DxK
  p_Nxr, s_r, q_Dxr = p_Nxm[:, :r], s_m[:r], qt_mxD[:r].T
  mu_r, e_rxr = _sorted_eigh(p_Nxr.T @ g_NxN @ p_Nxr)
  kk = min(k, r)
  a_rxkk = _sqrt_clipped(e_rxr[:, :kk], mu_r[:kk], jnp.max(jnp.abs(mu_r)))
  return w_DxK.at[:, :kk].set(q_Dxr @ (a_rxkk / s_r[:, None]))


# ---------------------------------------------------------------------------
# Kernel regime.
# ---------------------------------------------------------------------------


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


def kernel_embedding(kernel_matrix, g, k: int, ridge: float, *,
                     method: str = "auto") -> KernelEmbedding:
  """Kernel-regime optimum: argmin_Z ‖ZZᵀ − G‖² + ridge·Tr(ZᵀK⁻¹Z).

  For a kernel model f_θ(x) = θᵀφ(x) with Tikhonov penalty ridge·‖θ‖²,
  the embeddings Z = f(X) pay ridge·Tr(ZᵀK⁻¹Z) (002 §5). Writing the
  objective as ‖ZZᵀ‖² − 2Tr(ZᵀMZ) + const with

      M = G − (ridge/2) K⁻¹                (note ridge/2; 002 erratum 9),

  the minimiser over rank-k Z is Z* = U_k diag(√max(μ_k, 0)) for the top-k
  eigenpairs (μ_k, U_k) of M, up to Z → ZR (FINDINGS (a) "Kernel regime";
  verified against L-BFGS and with zero gradient at Z*). The out-of-sample
  map is f(x) = Z*ᵀK⁻¹k(X, x), i.e. rows `kernel_embedding_features`:
  k(x_new, X) @ coef with coef = K⁻¹Z*; at the training points it returns
  Z* exactly.

  Methods: "eigh" (dense eigendecompositions of K and M; exact, handles
  repeated eigenvalues, O(N³) with a large constant), "subspace" (for
  large N and small k) and "auto" (eigh for N <= 2000, else subspace).
  The subspace path runs in NumPy float64 and casts back. With b the
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

  Args:
    kernel_matrix: (N, N) symmetric positive definite kernel matrix K,
      e.g. `gaussian_kernel(x, x, sigma)` (add jitter if it is singular).
    g: (N, N) symmetric graph, dense or BCOO.
    k: embedding dimension, 1 <= k <= N.
    ridge: regularisation λ >= 0 of ridge·Tr(ZᵀK⁻¹Z).
    method: "auto", "eigh" or "subspace".

  Returns:
    `KernelEmbedding(z, coef, eigenvalues)` with (N, k), (N, k), (k,)
    arrays in the promoted floating dtype of kernel_matrix and g.

  Raises:
    ValueError: if kernel_matrix or g is not a finite symmetric (N, N)
      array, their shapes differ, kernel_matrix is not positive definite
      (non-PSD or singular; the message gives its smallest eigenvalue), k is
      not in [1, N], ridge < 0, or method is unknown.

  References:
    002 §5 ("top spectral decomposition of G − λK⁻¹", corrected to λ/2 and
    clipped: 002 erratum 9); FINDINGS (a) "Kernel regime"; Kiani et al.
    2022 (002 ref. [32]).
  """
  kmat_NxN = _dense_graph(kernel_matrix, name="kernel_matrix")
  n = kmat_NxN.shape[0]
  g_NxN = _dense_graph(g, n=n)
  k = _check_k(k, n)
  ridge = _check_nonneg_scalar(ridge, "ridge")
  if method not in _METHODS:
    raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
  if method == "auto":
    method = "eigh" if n <= _AUTO_EIGH_MAX_N else "subspace"
  dtype = jnp.result_type(kmat_NxN, g_NxN)
  kmat_NxN, g_NxN = kmat_NxN.astype(dtype), g_NxN.astype(dtype)

  if method == "eigh":
    lam_N, e_NxN = jnp.linalg.eigh(0.5 * (kmat_NxN + kmat_NxN.T))
    lam_max = float(lam_N[-1])
    if not float(lam_N[0]) > n * float(jnp.finfo(dtype).eps) * max(lam_max, 0):
      raise _kernel_not_pd_error(np.asarray(kmat_NxN, np.float64))
    kinv_NxN = (e_NxN / lam_N[None, :]) @ e_NxN.T
    mu_N, u_NxN = _sorted_eigh(g_NxN - (0.5 * ridge) * kinv_NxN)
    mu_k, u_Nxk = mu_N[:k], u_NxN[:, :k]
    z_Nxk = _sqrt_clipped(u_Nxk, mu_k, jnp.max(jnp.abs(g_NxN)) * n)
    coef_Nxk = kinv_NxN @ z_Nxk
    return KernelEmbedding(z_Nxk, coef_Nxk, mu_k)

  # float64 C-ordered host copies; the LAPACK calls below get Fortran-
  # ordered transposed views of these symmetric matrices (no copies).
  kmat_np = np.array(jax.device_get(kmat_NxN), dtype=np.float64, order="C")
  g_np = np.asarray(jax.device_get(g_NxN), dtype=np.float64)
  chol_k, info = _potrf_sym(kmat_np)  # overwrites kmat_np
  if info == 0:
    potri = scipy.linalg.get_lapack_funcs("potri", (chol_k,))
    kinv_lower, info = potri(chol_k, lower=True)  # lower triangle of K⁻¹
  if info != 0:
    raise _kernel_not_pd_error(
        np.asarray(jax.device_get(kmat_NxN), dtype=np.float64))
  m_np = _symmetrize_upper(kinv_lower.T)  # C-ordered K⁻¹, in place
  m_np *= -0.5 * ridge
  m_np += g_np  # M = G − (ridge/2)K⁻¹
  mu_k, u_Nxk, k_pos = _top_eigenpairs_subspace(m_np, k,
                                                 _gershgorin_upper(g_np))
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
    FINDINGS (a) "Kernel regime" (out of sample); 002 §5.
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
  if graphs._is_concrete(sigma) and not float(sigma) > 0:  # pylint: disable=protected-access
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
