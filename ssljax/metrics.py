"""Label-free quality metrics of an embedding matrix.

Rows are samples: Z is (N, K). Each metric looks only at the spectrum of Z
(or of scatter matrices built from it), needs no labels, and is pure jnp:
it runs under ``jax.jit`` in float32 or float64. Shape and option checks
happen at the boundary, before any tracing.

* `eigenspectrum(z)`: eigenvalues of the covariance of Z, descending.
* `rankme(z)`: effective rank of Z (Garrido et al. 2023).
* `power_law_alpha(eigenvalues)` and `alpha_req(z)`: exponent α of the
  power law λ_k ∝ k^−α fitted to the covariance spectrum (Agrawal et al.
  2022).
* `lidar(z_views)`: effective rank of the LDA matrix whose classes are the
  augmented views of each source image (Thilak et al. 2023).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

__all__ = ["eigenspectrum", "rankme", "power_law_alpha", "alpha_req",
           "lidar"]


# ---------------------------------------------------------------------------
# Boundary checks.
# ---------------------------------------------------------------------------


def _float_array(x, name: str, ndim: int, what: str) -> jax.Array:
  x = jnp.asarray(x)
  if x.ndim != ndim:
    raise ValueError(f"{name} must be {what}, got shape {x.shape}")
  if not jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(jnp.float32)
  return x


def _check_positive(value, name: str) -> None:
  if not value > 0:
    raise ValueError(f"{name} must be > 0, got {value!r}")


def _embeddings(z, name: str = "z") -> jax.Array:
  z = _float_array(z, name, 2, "an (N, K) array")
  if z.shape[0] < 2 or z.shape[1] < 1:
    raise ValueError(f"{name} needs at least 2 rows and 1 column, got "
                     f"shape {z.shape}")
  return z


def _entropy_rank(values, eps) -> jax.Array:
  """exp(−Σ p log p) with p = values / Σ values + eps (0/0 read as 0)."""
  total = jnp.sum(values)
  p = values / jnp.where(total > 0, total, 1) + eps
  return jnp.exp(-jnp.sum(p * jnp.log(p)))


# ---------------------------------------------------------------------------
# Covariance spectrum, RankMe, α-ReQ.
# ---------------------------------------------------------------------------


def eigenspectrum(z) -> jax.Array:
  """Eigenvalues of the covariance of Z, in descending order.

  The covariance is (Z − 1μᵀ)ᵀ(Z − 1μᵀ)/N (centred columns, divided by N,
  not N − 1); rounding negatives are clipped to 0.

  Args:
    z: (N, K) float array, N >= 2 rows (samples).

  Returns:
    (K,) non-negative eigenvalues, descending, in z's float dtype.

  Raises:
    ValueError: if z is not 2-D or has fewer than 2 rows.

  References:
    Agrawal et al. 2022, "α-ReQ: Assessing Representation Quality in
    Self-Supervised Learning by measuring eigenspectrum decay", NeurIPS 2022
    (the spectrum whose decay α-ReQ measures).

  Example:
    >>> z = jnp.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
    >>> eigenspectrum(z).tolist()
    [2.0, 0.5]
  """
  return _eigenspectrum(_embeddings(z))


@jax.jit
def _eigenspectrum(z_NxK):
  zc_NxK = z_NxK - jnp.mean(z_NxK, axis=0)
  cov_KxK = zc_NxK.T @ zc_NxK / z_NxK.shape[0]
  lam_K = jnp.linalg.eigvalsh((cov_KxK + cov_KxK.T) / 2)
  return jnp.maximum(lam_K[::-1], 0)


def rankme(z, eps: float = 1e-7) -> jax.Array:
  """RankMe: the exponential of the entropy of Z's normalised singular values.

  p_k = σ_k / ‖σ‖₁ + eps and RankMe = exp(−Σ_k p_k log p_k), over the
  min(N, K) singular values σ of Z as given (not centred, as in the paper).
  It lies in [1, min(N, K)] up to eps terms: r equal non-zero singular
  values give r; a collapsed (rank-one) Z gives 1.

  Args:
    z: (N, K) float array, N >= 2.
    eps: positive smoothing added to each p_k (the paper's ε = 1e-7).

  Returns:
    scalar, z's float dtype.

  Raises:
    ValueError: if z is not 2-D, has fewer than 2 rows, or eps <= 0.

  References:
    Garrido, Balestriero, Najman & LeCun 2023, "RankMe: Assessing the
    Downstream Performance of Pretrained Self-Supervised Representations by
    Their Rank", arXiv 2210.02885, eq. (1).

  Example:
    >>> z = jnp.concatenate([3.0 * jnp.eye(4), jnp.zeros((4, 2))], axis=1)
    >>> round(float(rankme(z)), 3)
    4.0
  """
  z_NxK = _embeddings(z)
  _check_positive(eps, "eps")
  return _rankme(z_NxK, eps)


@jax.jit
def _rankme(z_NxK, eps):
  return _entropy_rank(jnp.linalg.svd(z_NxK, compute_uv=False), eps)


def power_law_alpha(eigenvalues, *, fit_range=None) -> jax.Array:
  """Exponent α of a power law λ_k ∝ k^−α fitted to a spectrum.

  Least squares of log λ_k on log k (with an intercept) over the 1-based
  ranks k in ``fit_range`` = (first, last), both included; None fits all
  ranks. Zero eigenvalues (λ_k <= K·ε_dtype·λ_1, numerically zero) are left
  out of the fit (weights 0, so this stays jit-able); with fewer than two
  kept ranks the result is NaN.

  Args:
    eigenvalues: (K,) non-negative spectrum in descending order (as from
      `eigenspectrum`).
    fit_range: None, or (first, last) with 1 <= first < last <= K.

  Returns:
    scalar α (positive for a decaying spectrum).

  Raises:
    ValueError: if eigenvalues is not 1-D or fit_range is malformed.

  References:
    Agrawal, Mondal, Ghosh & Richards 2022, "α-ReQ: Assessing Representation
    Quality in Self-Supervised Learning by measuring eigenspectrum decay",
    NeurIPS 2022 (the least-squares fit of log λ against log k).

  Example:
    >>> lam = 1.0 / jnp.arange(1.0, 9.0) ** 2
    >>> round(float(power_law_alpha(lam)), 4)
    2.0
  """
  lam_K = _float_array(eigenvalues, "eigenvalues", 1, "a 1-D (K,) array")
  k = lam_K.shape[0]
  first, last = 1, k
  if fit_range is not None:
    try:
      first, last = (int(v) for v in fit_range)
    except (TypeError, ValueError):
      raise ValueError(f"fit_range must be None or (first, last), got "
                       f"{fit_range!r}") from None
  if not 1 <= first < last <= k:
    raise ValueError(f"fit_range must satisfy 1 <= first < last <= K = {k},"
                     f" got ({first}, {last})")
  return _power_law_alpha(lam_K, first, last)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _power_law_alpha(lam_K, first, last):
  k = lam_K.shape[0]
  ranks = jnp.arange(1, k + 1, dtype=lam_K.dtype)
  tol = k * jnp.finfo(lam_K.dtype).eps * jnp.max(lam_K)
  w = ((ranks >= first) & (ranks <= last) & (lam_K > tol)).astype(lam_K.dtype)
  x = jnp.log(ranks)
  y = jnp.log(jnp.where(w > 0, lam_K, 1))
  n = jnp.sum(w)
  x_mean, y_mean = jnp.sum(w * x) / n, jnp.sum(w * y) / n
  slope = (jnp.sum(w * (x - x_mean) * (y - y_mean))
           / jnp.sum(w * (x - x_mean) ** 2))
  return -slope


def alpha_req(z, *, fit_range=None) -> jax.Array:
  """α-ReQ: decay exponent of Z's covariance eigenspectrum.

  ``power_law_alpha(eigenspectrum(z), fit_range=fit_range)``: by default the
  fit runs over all K ranks, zero eigenvalues excluded (so a Z of rank r
  < K is fitted on its r non-zero eigenvalues). Small α (slow decay) means
  a spread-out, high-rank representation; large α a few dominant directions.

  Args:
    z: (N, K) float array, N >= 2.
    fit_range: None, or (first, last) 1-based ranks, 1 <= first < last <= K.

  Returns:
    scalar α.

  Raises:
    ValueError: if z is not 2-D with >= 2 rows, or fit_range is malformed.

  References:
    Agrawal, Mondal, Ghosh & Richards 2022, "α-ReQ: Assessing Representation
    Quality in Self-Supervised Learning by measuring eigenspectrum decay",
    NeurIPS 2022.

  Example:
    >>> z = jnp.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
    >>> round(float(alpha_req(z)), 4)  # eigenvalues 2 and 1/2: 4 = 2^α
    2.0
  """
  return power_law_alpha(eigenspectrum(z), fit_range=fit_range)


# ---------------------------------------------------------------------------
# LiDAR.
# ---------------------------------------------------------------------------


def lidar(z_views, *, delta: float = 1e-4, eps: float = 1e-7) -> jax.Array:
  """LiDAR: effective rank of the LDA matrix of the views' surrogate classes.

  z_views holds q augmented views of n source images; each image is one
  surrogate class. With class means μ_i = (1/q) Σ_j z_ij and grand mean
  μ = (1/n) Σ_i μ_i, the sample (Bessel-corrected) scatters are

      Σ_b = 1/(n − 1) Σ_i (μ_i − μ)(μ_i − μ)ᵀ,
      Σ_w = 1/(n (q − 1)) Σ_i Σ_j (z_ij − μ_i)(z_ij − μ_i)ᵀ + δ I_K,

  Σ_lidar = Σ_w^{−1/2} Σ_b Σ_w^{−1/2}, and with its eigenvalues λ,
  p_k = λ_k / ‖λ‖₁ + eps, LiDAR = exp(−Σ_k p_k log p_k). The scale of Σ_b
  cancels in p; that of Σ_w matters only against δ. Σ_b has rank at most
  min(n − 1, K), so LiDAR <= min(n − 1, K) up to eps terms; with no
  within-class noise (Σ_w = δI) it is the effective rank of Σ_b, e.g.
  n − 1 for class means on a regular simplex. A collapsed embedding
  (Σ_b = 0) gives 1.

  Args:
    z_views: (q, n, K) float array: view j of image i is z_views[j, i];
      q >= 2 views, n >= 2 images.
    delta: positive ridge δ added to Σ_w (the paper's default 1e-4).
    eps: positive smoothing added to each p_k.

  Returns:
    scalar, z_views' float dtype.

  Raises:
    ValueError: if z_views is not 3-D, has fewer than 2 views or images, or
      delta or eps is <= 0.

  References:
    Thilak, Huang, Saremi, Dinh, Goh, Susskind & Littwin 2023, "LiDAR:
    Sensing Linear Probing Performance in Joint Embedding SSL
    Architectures", arXiv 2312.04000, eqs. (2)–(5) (scatters, Σ_lidar, and
    the smoothed entropy as in RankMe).

  Example:
    >>> z_views = jnp.stack([jnp.eye(4), jnp.eye(4)])  # 2 identical views
    >>> round(float(lidar(z_views)), 3)  # simplex of 4 means: rank 3
    3.0
  """
  z_QxNxK = _float_array(z_views, "z_views", 3, "a (q, n, K) array")
  q, n, k = z_QxNxK.shape
  if q < 2 or n < 2 or k < 1:
    raise ValueError(f"z_views needs q >= 2 views of n >= 2 images, got "
                     f"shape {z_QxNxK.shape}")
  _check_positive(delta, "delta")
  _check_positive(eps, "eps")
  return _lidar(z_QxNxK, delta, eps)


@jax.jit
def _lidar(z_QxNxK, delta, eps):
  q, n, k = z_QxNxK.shape
  mu_NxK = jnp.mean(z_QxNxK, axis=0)
  mc_NxK = mu_NxK - jnp.mean(mu_NxK, axis=0)
  sb_KxK = mc_NxK.T @ mc_NxK / (n - 1)
  within_MxK = (z_QxNxK - mu_NxK).reshape(q * n, k)
  sw_KxK = (within_MxK.T @ within_MxK / (n * (q - 1))
            + delta * jnp.eye(k, dtype=z_QxNxK.dtype))
  w_K, v_KxK = jnp.linalg.eigh((sw_KxK + sw_KxK.T) / 2)
  inv_sqrt_KxK = (v_KxK / jnp.sqrt(jnp.maximum(w_K, delta))) @ v_KxK.T
  m_KxK = inv_sqrt_KxK @ sb_KxK @ inv_sqrt_KxK
  lam_K = jnp.maximum(jnp.linalg.eigvalsh((m_KxK + m_KxK.T) / 2), 0)
  return _entropy_rank(lam_K, eps)
