"""How far a learned batch embedding is from the theory's optimum.

Rows are samples: Z is (N, K), G is (N, N) (for a training batch, the
view-major graph of `ssljax.graphs.batch_graph`). The SSL losses are
invariant under Z → ZR (R orthogonal), so every distance here compares
subspaces or Gram matrices ZZᵀ, never entries of Z.

* `principal_angles(a, b)`: angles between two column spaces.
* `gram_gap(z, z_star)`: relative Frobenius distance of the Grams,
  optionally after the best positive rescaling of Z.
* `top_eigenspace_fraction(z, g)`: share of ‖Z‖_F² inside the top
  eigenspace of G.
* `embedding_diagnostics(z, g)`: the three against
  Z* = `spectral.optimal_embedding(g, K)`.
* `frossl_eigenvalue_trajectory(t, lam, e0)`: the covariance eigenvalues
  that the linear FroSSL gradient flow predicts from an initial spectrum.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ssljax.theory import frossl_dynamics
from ssljax.theory import linalg
from ssljax.theory import spectral

__all__ = ["principal_angles", "gram_gap", "top_eigenspace_fraction",
           "embedding_diagnostics", "frossl_eigenvalue_trajectory"]


def _matrix(x, name: str) -> jax.Array:
  x = jnp.asarray(x)
  if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
    raise ValueError(f"{name} must be a non-empty (N, K) array, got shape "
                     f"{x.shape}")
  return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)


def _basis(x_NxR):
  """Orthonormal columns spanning range(x); dropped directions are zero."""
  u_NxR, s_R, _ = jnp.linalg.svd(x_NxR, full_matrices=False)
  tol = max(x_NxR.shape) * jnp.finfo(x_NxR.dtype).eps * jnp.max(s_R)
  return u_NxR * (s_R > tol)


def principal_angles(a, b) -> jax.Array:
  """Principal angles between the column spaces of a and b.

  Orthonormal bases come from SVDs; singular directions with σ <=
  max(N, r)·ε_dtype·σ_max are dropped (numerically rank-deficient input),
  and each missing dimension counts as an angle of π/2. Each angle is
  atan2(sin, cos) with the sine read off the residual of the principal
  vector, so angles near 0 are accurate to rounding, not to √ε.

  Args:
    a: (N, r) float array.
    b: (N, s) float array, same N.

  Returns:
    (min(r, s),) angles in radians, ascending, in [0, π/2].

  Raises:
    ValueError: if a or b is not a non-empty 2-D array or the row counts
      differ.

  References:
    Björck & Golub 1973, "Numerical methods for computing angles between
    linear subspaces", Math. Comp. 27(123) (cosines as singular values of
    QaᵀQb).

  Example:
    >>> a = jnp.eye(3)[:, :2]
    >>> b = jnp.array([[1.0], [1.0], [0.0]])
    >>> principal_angles(a, b).tolist()
    [0.0]
  """
  a, b = _matrix(a, "a"), _matrix(b, "b")
  if a.shape[0] != b.shape[0]:
    raise ValueError(f"a and b must have the same number of rows, got "
                     f"{a.shape} and {b.shape}")
  dtype = jnp.result_type(a.dtype, b.dtype)
  return _principal_angles(a.astype(dtype), b.astype(dtype))


@jax.jit
def _principal_angles(a_NxR, b_NxS):
  qa_NxR, qb_NxS = _basis(a_NxR), _basis(b_NxS)
  c_RxS = qa_NxR.T @ qb_NxS
  _, cos_M, vt_MxS = jnp.linalg.svd(c_RxS, full_matrices=False)
  pb_NxM = qb_NxS @ vt_MxS.T  # principal vectors in range(b)
  resid_NxM = pb_NxM - qa_NxR @ (qa_NxR.T @ pb_NxM)
  sin_M = jnp.linalg.norm(resid_NxM, axis=0)
  present = jnp.sum(pb_NxM**2, axis=0) > 0.5  # not a dropped direction
  angles = jnp.where(present, jnp.arctan2(sin_M, cos_M), jnp.pi / 2)
  return jnp.sort(angles)


def gram_gap(z, z_star, *, fit_scale: bool = False) -> jax.Array:
  """Relative distance ‖ZZᵀ − Z*Z*ᵀ‖_F / ‖Z*Z*ᵀ‖_F of two Gram matrices.

  Invariant under Z → ZR and Z* → Z*R' (R, R' orthogonal; the column
  counts may differ). With ``fit_scale``, Z's Gram is first multiplied by
  the best c >= 0, c = ⟨ZZᵀ, Z*Z*ᵀ⟩ / ‖ZZᵀ‖² (least squares), so the value
  lies in [0, 1] and ignores the overall scale of Z, which a network's
  projector need not share with the loss's optimum.

  Args:
    z: (N, K) float array.
    z_star: (N, K') float array, same N, not all zero.
    fit_scale: rescale ZZᵀ optimally before comparing.

  Returns:
    scalar >= 0.

  Raises:
    ValueError: if z or z_star is not 2-D or the row counts differ.

  References:
    Cabannes et al. 2023, "Active Self-Supervised Learning: A Few Low-Cost
    Relationships Are All You Need", arXiv 2303.15256, Theorem 1 (the VIC²
    loss is ‖ZZᵀ − G‖²: its optimum is defined through the Gram).

  Example:
    >>> z_star = jnp.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    >>> round(float(gram_gap(2.0 * z_star, z_star)), 4)
    3.0
    >>> round(float(gram_gap(2.0 * z_star, z_star, fit_scale=True)), 4)
    0.0
  """
  z, z_star = _matrix(z, "z"), _matrix(z_star, "z_star")
  if z.shape[0] != z_star.shape[0]:
    raise ValueError(f"z and z_star must have the same number of rows, got "
                     f"{z.shape} and {z_star.shape}")
  return _gram_gap(z, z_star, bool(fit_scale))


@functools.partial(jax.jit, static_argnums=2)
def _gram_gap(z, z_star, fit_scale):
  a_NxN, b_NxN = z @ z.T, z_star @ z_star.T
  if fit_scale:
    norm2 = jnp.sum(a_NxN**2)
    a_NxN = a_NxN * jnp.where(norm2 > 0, jnp.sum(a_NxN * b_NxN) / norm2, 0)
  return jnp.linalg.norm(a_NxN - b_NxN) / jnp.linalg.norm(b_NxN)


def _positive_count(mu_N) -> int:
  mu = np.asarray(jax.device_get(mu_N), dtype=np.float64)
  tol = mu.shape[0] * np.finfo(np.asarray(mu_N).dtype).eps * np.max(np.abs(mu))
  return int(np.count_nonzero(mu > tol))


def top_eigenspace_fraction(z, g, r: int | None = None) -> jax.Array:
  """Share ‖U_rᵀZ‖_F² / ‖Z‖_F² of Z inside the top-r eigenspace of G.

  U_r holds the eigenvectors of the r largest eigenvalues of G. The
  default r is the number of positive eigenvalues (> N·ε_dtype·max|μ|):
  the space where the VIC² optimum lives, since `optimal_embedding` clips
  the other eigenvalues to 0. For the V-view graph of B images it is the
  B-dimensional space of view-invariant rows (eigenvalue V − 1); for the
  supervised graph, the C class indicators. A Z inside that space gives 1;
  a Z whose column space is uniformly random gives r/N on average.

  Args:
    z: (N, K) float array, not all zero.
    g: (N, N) symmetric graph, dense or BCOO.
    r: None (default above), or an int in [1, N].

  Returns:
    scalar in [0, 1].

  Raises:
    ValueError: if shapes disagree, g is not a finite symmetric graph, r is
      out of range, or (default r) G has no positive eigenvalue.

  References:
    Balestriero & LeCun 2022, "Contrastive and Non-Contrastive
    Self-Supervised Learning Recover Global and Local Spectral Embedding
    Methods", arXiv 2205.11508 (optima span top eigenvectors of G).

  Example:
    >>> from ssljax.graphs import views_graph
    >>> g = views_graph(2, 2)  # 2 images, 2 views, view-major rows
    >>> z = jnp.array([[1.0], [0.0], [1.0], [0.0]])  # the same on both views
    >>> round(float(top_eigenspace_fraction(z, g)), 4)
    1.0
  """
  z = _matrix(z, "z")
  g_NxN = linalg.dense_graph(g, n=z.shape[0])
  mu_N, u_NxN = linalg.sorted_eigh(g_NxN.astype(jnp.result_type(z, g_NxN)))
  return _fraction(z, mu_N, u_NxN, r)


def _fraction(z_NxK, mu_N, u_NxN, r):
  if r is None:
    r = _positive_count(mu_N)
    if r == 0:
      raise ValueError("g has no positive eigenvalue; pass r explicitly")
  r = linalg.check_k(r, z_NxK.shape[0])
  return _share(z_NxK, u_NxN[:, :r])


@jax.jit
def _share(z_NxK, u_Nxr):
  return jnp.sum((u_Nxr.T @ z_NxK) ** 2) / jnp.sum(z_NxK**2)


def _nearest_optimum(z_NxK, z_star_NxK, mu_N, u_NxN, rtol):
  """Re-picks Z*'s columns in a repeated eigenvalue block to face Z."""
  mu = np.asarray(jax.device_get(mu_N), dtype=np.float64)
  k = z_star_NxK.shape[1]
  if k >= mu.shape[0]:
    return z_star_NxK
  tol = rtol * max(np.max(np.abs(mu)), 1e-30)
  block = np.flatnonzero(np.abs(mu - mu[k - 1]) <= tol)
  first, last = int(block[0]), int(block[-1]) + 1
  if last <= k or mu[k - 1] <= tol:  # unique optimum, or clipped columns
    return z_star_NxK
  # Small host arrays: NumPy avoids compiling a program per shape.
  z_star = np.array(z_star_NxK)
  ue_NxM = np.asarray(u_NxN)[:, first:last]  # the whole repeated eigenspace
  left_MxM, _, _ = np.linalg.svd(ue_NxM.T @ np.asarray(z_NxK))
  scale_B = np.linalg.norm(z_star[:, first:k], axis=0)
  z_star[:, first:k] = ue_NxM @ left_MxM[:, :k - first] * scale_B
  return jnp.asarray(z_star)


def embedding_diagnostics(z, g, *, loss: str = "spectral_contrastive",
                          r: int | None = None, rtol: float = 1e-6) -> dict:
  """Distances of a learned embedding Z to the closed-form optimum for G.

  Z* = `spectral.optimal_embedding(g, K, loss=loss)` with K = Z's columns.
  When the K-th eigenvalue of G repeats beyond rank K (the V-view graph
  with K < B images, whose top eigenvalue V − 1 has multiplicity B), the
  optimum is a family; Z*'s columns in that block are then replaced by
  the orthonormal directions of the block nearest Z (top left singular
  vectors of Z projected onto it), keeping their norms: the gap is to the
  nearest member, not to an arbitrary one.

  Scale: a network's projector need not match the scale the loss fixes
  (VIC²: singular values √μ_k of G; BarlowTwins: any column scale), so the
  Gram gap fits one positive factor (`gram_gap` with ``fit_scale``). For
  BarlowTwins, whose optimum allows a different scale per column, read the
  subspace quantities (angles, fraction). The angles are taken against the
  non-zero columns of Z* only (for K above the number of positive
  eigenvalues of G, Z* has zero columns), so there are min(K, rank Z*) of
  them; a direction of Z* that Z lacks (collapse) counts as π/2.

  Args:
    z: (N, K) float array, rows in the order of g's rows.
    g: (N, N) symmetric graph, dense or BCOO.
    loss: one of `spectral.CLOSED_FORM_LOSSES`.
    r: rank of the top eigenspace for `top_eigenspace_fraction`.
    rtol: relative tolerance (on max|μ|) that decides repeated eigenvalues.

  Returns:
    dict with "gram_gap" (scalar in [0, 1]), "principal_angles" (ascending,
    radians, between span Z and span Z*; (min(K, rank Z*),)),
    "principal_angle_max" (scalar)
    and "top_eigenspace_fraction" (scalar in [0, 1]).

  Raises:
    ValueError: as `spectral.optimal_embedding`, `top_eigenspace_fraction`,
      or if z has more columns than rows.

  References:
    Cabannes et al. 2023, arXiv 2303.15256, Theorems 1–2; Balestriero &
    LeCun 2022, arXiv 2205.11508 (closed-form optima).

  Example:
    >>> from ssljax.graphs import views_graph
    >>> g = views_graph(3, 2)
    >>> z_star = spectral.optimal_embedding(g, 3)
    >>> d = embedding_diagnostics(0.5 * z_star, g)
    >>> [round(float(d[m]), 4) for m in ("gram_gap", "principal_angle_max",
    ...                                   "top_eigenspace_fraction")]
    [0.0, 0.0, 1.0]
  """
  z = _matrix(z, "z")
  n, k = z.shape
  if k > n:
    raise ValueError(f"z must have at most as many columns as rows, got "
                     f"shape {z.shape}")
  g_NxN = linalg.dense_graph(g, n=n).astype(z.dtype)
  z_star = spectral.optimal_embedding(g_NxN, k, loss=loss)
  mu_N, u_NxN = linalg.sorted_eigh(g_NxN)
  z_star = _nearest_optimum(z, z_star, mu_N, u_NxN, rtol)
  norms = np.linalg.norm(np.asarray(z_star), axis=0)
  kept = np.flatnonzero(norms > rtol * max(norms.max(), 1e-30))
  angles = principal_angles(z, z_star[:, kept] if kept.size else z_star)
  return {
      "gram_gap": gram_gap(z, z_star, fit_scale=True),
      "principal_angles": angles,
      "principal_angle_max": jnp.max(angles),
      "top_eigenspace_fraction": _fraction(z, mu_N, u_NxN, r),
  }


def frossl_eigenvalue_trajectory(t, lam, e0) -> jax.Array:
  """Covariance eigenvalues of linear FroSSL over time, identical views.

  In the aligned, symmetric setting of
  `frossl_dynamics.frossl_symmetric_singular_values` (X1 = X2 with Γ = XᵀX
  of eigenvalues λ_j, W1(0) = W2(0)), the eigenvalues of ZᵀZ are e_j =
  λ_j s_j², and the flow gives e(t) = 1 / (1 + (1/e0 − 1) e^{−8λt}): each
  direction rises (or falls) to 1 (ZᵀZ = I), direction j at rate 8λ_j, so
  the top directions of the data settle first. Time is t = learning rate ×
  steps of full-batch gradient descent on the paper's eq. (11) loss.

  Args:
    t: scalar or (T,) times >= 0 (learning rate × step).
    lam: scalar or (d,) eigenvalues λ > 0 of Γ = XᵀX.
    e0: scalar or (d,) initial eigenvalues of ZᵀZ, > 0.

  Returns:
    e(t): shape (T,) + the broadcast shape of lam and e0 for 1-D t (e.g.
      (T, d)), else the broadcast shape of t, lam and e0.

  Raises:
    ValueError: as `frossl_dynamics.frossl_symmetric_singular_values`.

  References:
    Skean et al. 2023, "FroSSL: Frobenius Norm Minimization for
    Self-Supervised Learning", arXiv 2310.02903, App. D.1/E.4 (eqs. (30)–(34),
    corrected as in `frossl_dynamics`).

  Example:
    >>> e = frossl_eigenvalue_trajectory(jnp.array([0.0, 10.0]), 1.0, 0.25)
    >>> [round(float(v), 4) for v in e]
    [0.25, 1.0]
  """
  lam, e0 = frossl_dynamics.broadcast_positive([("lam", lam), ("e0", e0)])
  s = frossl_dynamics.frossl_symmetric_singular_values(t, lam,
                                                        jnp.sqrt(e0 / lam))
  return lam * s**2
