"""Supervised theory of SSL (Balestriero & LeCun 2024): closed-form heads.

Paper Balestriero & LeCun 2024 writes features and targets as columns, F = f(X):
K×N and Y: C×N, and the head as W F + b1ᵀ with W: C×K. This library uses rows:

    f: (N, K) features,  y: (N, C) targets,  predictions f @ W + b,

with W: (K, C) and b: (C,). So f = Fᵀ, y = Yᵀ, W_rows = W_paperᵀ and the
graph G = YᵀY (cols) = y yᵀ (rows) is (N, N) in both conventions. Every
function converts at this boundary and returns rows-convention arrays.

All functions are pure jnp (jit-able, differentiable in `f`/`z`) except
that `ridge` must be a concrete Python/NumPy scalar (it selects a solve or a
pseudo-inverse).

References:
  Balestriero & LeCun 2024, "The Birth of Self Supervised Learning: A Supervised
  Theory", eq. (1), Lemma 1, Theorem 2, App. A, App. B (the paper uses columns,
  F = f(X): K×N; this module uses rows). Corrections used here: the SVD in Lemma
  1 is that of the centred f(X)H, not of f(X); the 1/N appears once, outside
  D_kk = s_k²/(s_k² + λN) ∈ [0, 1); App. B needs W with orthonormal rows (WWᵀ =
  I_K, K <= C) and its 1/P throughout.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssljax import checks, graphs

__all__ = [
    "ridge_head",
    "ridge_head_loss",
    "lemma1_objective",
    "sigma_gradient",
    "orthogonal_head_objective",
]


# ---------------------------------------------------------------------------
# Boundary checks.
# ---------------------------------------------------------------------------


def _check_rows(a, b, name_a: str, name_b: str) -> None:
  if a.shape[0] != b.shape[0]:
    raise ValueError(f"{name_a} and {name_b} must have the same number of rows"
                     f" N, got shapes {a.shape} and {b.shape}")


def _check_ridge(ridge) -> float:
  try:
    value = float(ridge)
  except (TypeError, jax.errors.ConcretizationTypeError):
    raise ValueError(
        f"ridge must be a concrete float >= 0, got {ridge!r}") from None
  if not value >= 0 or value == float("inf"):
    raise ValueError(f"ridge must be a finite float >= 0, got {value}")
  return value


def _graph(g, n: int) -> jax.Array:
  graphs.validate_graph(g, n, name="g")
  return graphs.to_dense(g)


def _centred_svd(f_NxK: jax.Array):
  """Thin SVD of the column-centred features Hf = V S Uᵀ (rows convention).

  V (N, r) are the right singular vectors of the paper's centred F H
  (centred, not f(X) itself as the main text says), r = min(N, K).
  """
  fc_NxK = f_NxK - jnp.mean(f_NxK, axis=0, keepdims=True)
  v_Nxr, s_r, _ = jnp.linalg.svd(fc_NxK, full_matrices=False)
  return v_Nxr, s_r


def _shrinkage(s_r: jax.Array, ridge: float, n: int) -> jax.Array:
  """D_kk = s_k² / (s_k² + λN); for λ = 0 the limit 1{s_k > 0} (rank tol)."""
  if ridge > 0:
    return s_r**2 / (s_r**2 + ridge * n)
  tol = jnp.max(s_r, initial=0.0) * max(s_r.shape[0], n) * jnp.finfo(
      s_r.dtype).eps
  return (s_r > tol).astype(s_r.dtype)


# ---------------------------------------------------------------------------
# Ridge head, eq. (1).
# ---------------------------------------------------------------------------


def ridge_head(f, y, ridge: float) -> tuple[jax.Array, jax.Array]:
  """Closed-form minimiser (W, b) of the ridge-regression head of eq. (1).

  Minimises, over W (K, C) and b (C,),

      L(W, b) = (1/N) ‖f W + 1bᵀ − y‖² + λ ‖W‖²,

  which is eq. (1) transposed (rows convention, see the module docstring).
  With fc = Hf and yc = Hy the column-centred arrays (H = I − 11ᵀ/N):

      W* = (fcᵀ fc + NλI)⁻¹ fcᵀ yc,   b* = mean(y) − mean(f) W*,

  i.e. the paper's W* = Y H Fᵀ(F H Fᵀ + NλI)⁻¹ and b* = (Y − W*F)1/N
  (its App. A.1). For λ = 0 the minimiser is not unique when fc has rank < K;
  the minimum-norm one (pseudo-inverse) is returned.

  Args:
    f: (N, K) features (rows = samples), float32 or float64.
    y: (N, C) targets, e.g. one-hot labels.
    ridge: λ >= 0, a concrete scalar.

  Returns:
    (W, b): W of shape (K, C) (the paper's Wᵀ) and b of shape (C,), in the
      promoted dtype of f and y.

  Raises:
    ValueError: if f or y is not a non-empty rank-2 array, their numbers of
      rows differ, ridge is not a finite scalar >= 0, or (concrete inputs)
      f or y has NaN/inf.

  References:
    Balestriero & LeCun 2024, "The Birth of Self Supervised Learning: A
    Supervised Theory", eq. (1) and App. A.1 ("Solving for b", "Solving for W");
    H = I − 11ᵀ/N (the printed 11⁻¹ is a typo).

  Example:
    >>> f = jnp.array([[0.], [1.], [2.]]); y = jnp.array([[1.], [3.], [5.]])
    >>> w, b = ridge_head(f, y, 0.0)
    >>> [round(float(w[0, 0]), 4), round(float(b[0]), 4)]
    [2.0, 1.0]
  """
  f_NxK, y_NxC = checks.as_float(f), checks.as_float(y)
  checks.check_nonempty_matrix(f_NxK, "f", "(N, K)")
  checks.check_nonempty_matrix(y_NxC, "y", "(N, C)")
  _check_rows(f_NxK, y_NxC, "f", "y")
  ridge = _check_ridge(ridge)
  dtype = jnp.result_type(f_NxK, y_NxC)
  f_NxK, y_NxC = f_NxK.astype(dtype), y_NxC.astype(dtype)
  n, k = f_NxK.shape
  f_mean_K = jnp.mean(f_NxK, axis=0)
  y_mean_C = jnp.mean(y_NxC, axis=0)
  fc_NxK, yc_NxC = f_NxK - f_mean_K, y_NxC - y_mean_C
  if ridge > 0:
    gram_KxK = fc_NxK.T @ fc_NxK + (n * ridge) * jnp.eye(k, dtype=dtype)
    w_KxC = jnp.linalg.solve(gram_KxK, fc_NxK.T @ yc_NxC)
  else:
    w_KxC = jnp.linalg.pinv(fc_NxK) @ yc_NxC
  b_C = y_mean_C - f_mean_K @ w_KxC
  return w_KxC, b_C


def ridge_head_loss(f, y, w, b, ridge: float) -> jax.Array:
  """Value of eq. (1) in rows: (1/N)‖f W + 1bᵀ − y‖² + λ‖W‖².

  Args:
    f: (N, K) features.
    y: (N, C) targets.
    w: (K, C) head weights (the paper's Wᵀ).
    b: (C,) bias.
    ridge: λ >= 0.

  Returns:
    0-d array.

  Raises:
    ValueError: on mismatched shapes or a bad ridge.

  References:
    Balestriero & LeCun 2024 eq. (1).
  """
  f_NxK, y_NxC = checks.as_float(f), checks.as_float(y)
  w_KxC, b_C = checks.as_float(w), checks.as_float(b)
  checks.check_nonempty_matrix(f_NxK, "f", "(N, K)")
  checks.check_nonempty_matrix(y_NxC, "y", "(N, C)")
  _check_rows(f_NxK, y_NxC, "f", "y")
  if w_KxC.shape != (f_NxK.shape[1], y_NxC.shape[1]):
    raise ValueError(f"w must have shape (K, C) = "
                     f"{(f_NxK.shape[1], y_NxC.shape[1])}, got {w_KxC.shape}")
  if b_C.shape != (y_NxC.shape[1],):
    raise ValueError(f"b must have shape (C,) = ({y_NxC.shape[1]},), got"
                     f" {b_C.shape}")
  ridge = _check_ridge(ridge)
  n = f_NxK.shape[0]
  resid_NxC = f_NxK @ w_KxC + b_C - y_NxC
  return jnp.sum(resid_NxC**2) / n + ridge * jnp.sum(w_KxC**2)


# ---------------------------------------------------------------------------
# Lemma 1 and Theorem 2.
# ---------------------------------------------------------------------------


def _svd_and_vgv(f, g, ridge):
  """The checked inputs of Lemma 1 / Theorem 2 and their spectral pieces.

  For Hf = V S Uᵀ (`_centred_svd`): (G as a dense (N, N) array of f's
  dtype, λ as a float, the singular values s (r,), diag(VᵀGV) (r,)). The
  errors are those `lemma1_objective` documents.
  """
  f_NxK = checks.as_float(f)
  checks.check_nonempty_matrix(f_NxK, "f", "(N, K)")
  n = f_NxK.shape[0]
  g_NxN = _graph(g, n).astype(f_NxK.dtype)
  ridge = _check_ridge(ridge)
  v_Nxr, s_r = _centred_svd(f_NxK)
  vgv_r = jnp.sum(v_Nxr * (g_NxN @ v_Nxr), axis=0)  # diag(VᵀGV)
  return g_NxN, ridge, s_r, vgv_r


def lemma1_objective(f, g, ridge: float) -> jax.Array:
  """Trace objective of Lemma 1: min over (W, b) of eq. (1) from (f, G).

      min_{W,b} L = −(1/N) Tr(VᵀGVD) + Tr(HGH)/N,

  with Hf = V S Uᵀ the thin SVD of the column-centred features (the
  paper's SVD of the centred F H; the uncentred SVD of the main text gives a
  wrong value), D_kk = s_k²/(s_k² + λN) and the 1/N counted once, outside D (the
  proof of Theorem 2 redefines D with an extra 1/N). For λ = 0, D_kk = 1{s_k >
  0} and the value is Tr(HGH)/N − Tr(VᵀGV)/N. Because HV = V, G and HGH give the
  same trace term. When G = y yᵀ this equals `ridge_head_loss` at `ridge_head`
  (checked in tests); for any other symmetric G it is the same expression
  evaluated with that G.

  Args:
    f: (N, K) features (rows = samples; the paper's Fᵀ).
    g: (N, N) symmetric graph (y yᵀ for targets y), dense or BCOO.
    ridge: λ >= 0, a concrete scalar.

  Returns:
    0-d array in f's floating dtype.

  Raises:
    ValueError: if f is not a non-empty rank-2 array, g is not a symmetric
      (N, N) graph, ridge < 0, or (concrete) an input has NaN/inf.

  References:
    Balestriero & LeCun 2024, "The Birth of Self Supervised Learning: A
    Supervised Theory", Lemma 1, eq. (2), App. A.1, with the SVD of the centred
    f(X)H, the 1/N counted once, and D_kk ∈ [0, 1) (> 0 iff s_k > 0).
  """
  g_NxN, ridge, s_r, vgv_r = _svd_and_vgv(f, g, ridge)
  n = g_NxN.shape[0]
  d_r = _shrinkage(s_r, ridge, n)
  tr_hgh = jnp.trace(g_NxN) - jnp.sum(g_NxN) / n
  return (tr_hgh - jnp.dot(d_r, vgv_r)) / n


def sigma_gradient(f, g, ridge: float) -> jax.Array:
  """Theorem 2: ∂(min_{W,b} L)/∂σ_k with the singular vectors held fixed.

      ∂/∂σ_k = −(VᵀGV)_kk · 2σ_kλ / (σ_k² + λN)²,

  for Hf = V diag(σ) Uᵀ (thin SVD of the centred features, singular values
  in descending order as `jnp.linalg.svd`). It is <= 0 for PSD G and
  vanishes as σ_k → ∞ or λ → 0. This is the derivative of the true minimum
  over (W, b) when f moves as mean(f) + V diag(σ) Uᵀ (checked against
  finite differences and autodiff of `ridge_head_loss` at `ridge_head`).

  Args:
    f: (N, K) features (rows = samples).
    g: (N, N) symmetric graph.
    ridge: λ >= 0, a concrete scalar.

  Returns:
    (min(N, K),) array of derivatives, ordered as the descending singular values
      of Hf (`jnp.linalg.svd(f - f.mean(0), full_matrices=False)[1]`).

  Raises:
    ValueError: as `lemma1_objective`.

  References:
    Balestriero & LeCun 2024 Theorem 2 and App. A.2 (the proof drops the minus
    sign and 1/N and has a spurious minus; the final statement is right).
  """
  g_NxN, ridge, s_r, vgv_r = _svd_and_vgv(f, g, ridge)
  n = g_NxN.shape[0]
  return -vgv_r * 2.0 * s_r * ridge / (s_r**2 + ridge * n)**2


# ---------------------------------------------------------------------------
# Orthogonal head, App. B.
# ---------------------------------------------------------------------------


def orthogonal_head_objective(z, y) -> tuple[jax.Array, jax.Array]:
  """Minimum of the squared loss over heads with orthonormal rows (App. B).

  App. B already uses rows: z (P, K), y (P, C), and W (K, C) with
  W Wᵀ = I_K (this needs K <= C; the formula is false for K > C). Then ‖zW‖ =
  ‖z‖ and

      min_W (1/P)‖z W − y‖² = (1/P)(‖z‖² + Tr G − 2‖zᵀy‖_*),  G = y yᵀ,

  attained at W* = U Vᵀ for the thin SVD zᵀy = U Σ Vᵀ. Also
  ‖zᵀy‖_* = Tr √(zᵀGz). For K > C no W has orthonormal rows and the
  formula is false (checked numerically), hence the ValueError.

  Args:
    z: (P, K) features (rows = samples).
    y: (P, C) targets, C >= K.

  Returns:
    (value, w): the 0-d minimum and W* of shape (K, C) with W*W*ᵀ = I_K.

  Raises:
    ValueError: if z or y is not a non-empty rank-2 array, the numbers of
      rows differ, K > C, or (concrete) an input has NaN/inf.

  References:
    Balestriero & LeCun 2024, "The Birth of Self Supervised Learning: A
    Supervised Theory", App. B, with the 1/P restored and W ∈ {W : WWᵀ = I_K}, K
    <= C (the formula is false for K > C): min = (1/P)(‖Z‖² + Tr G − 2‖ZᵀY‖_*),
    attained at W* = UVᵀ where ZᵀY = UΣVᵀ.
  """
  z_PxK, y_PxC = checks.as_float(z), checks.as_float(y)
  checks.check_nonempty_matrix(z_PxK, "z", "(P, K)")
  checks.check_nonempty_matrix(y_PxC, "y", "(P, C)")
  _check_rows(z_PxK, y_PxC, "z", "y")
  k, c = z_PxK.shape[1], y_PxC.shape[1]
  if k > c:
    raise ValueError(
        f"the orthogonal head needs K <= C (W of shape (K, C) with WWᵀ = I_K),"
        f" got z of shape {z_PxK.shape} (K = {k}) and y of shape"
        f" {y_PxC.shape} (C = {c})")
  dtype = jnp.result_type(z_PxK, y_PxC)
  z_PxK, y_PxC = z_PxK.astype(dtype), y_PxC.astype(dtype)
  p = z_PxK.shape[0]
  u_KxK, s_K, vt_KxC = jnp.linalg.svd(z_PxK.T @ y_PxC, full_matrices=False)
  w_KxC = u_KxK @ vt_KxC
  value = (jnp.sum(z_PxK**2) + jnp.sum(y_PxC**2) - 2.0 * jnp.sum(s_K)) / p
  return value, w_KxC
