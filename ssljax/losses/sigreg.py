"""SIGReg: the sliced Epps–Pulley distance of an embedding to N(0, I_K).

Rows are samples. Sketched Isotropic Gaussian Regularisation (Balestriero &
LeCun 2025, "LeJEPA: Provable and Scalable Self-Supervised Learning Without
the Heuristics", arXiv 2511.08544, §4 and Algorithm 1) projects the
embedding Z (N, K) on M unit directions a_m and tests each 1-D sample
x_m = Z a_m against N(0, 1) with the Epps–Pulley statistic

    T(x) = N ∫ |φ̂_x(t) − φ(t)|² w(t) dt,
    φ̂_x(t) = (1/N) Σ_n exp(i t x_n),  φ(t) = exp(−t²/2),  w(t) = exp(−t²/2),

then averages T over the M directions. By the Cramér–Wold theorem a
distribution whose every 1-D projection is N(0, 1) is N(0, I_K).

The quadrature is the one of the official library and of its minimal example
(``EppsPulley(t_max=3, n_points=17)`` of rbalestr-lab/lejepa and the
``SIGReg`` class of its MINIMAL.md): 17 knots t_j evenly spaced on [0, 3],
trapezoid weights (Δt at both ends, 2Δt inside: the integrand is even, so
the half line counts twice), multiplied by w(t_j), and the integral times N.
The paper's Algorithm 1 integrates the same integrand on 17 knots over
[−5, 5] instead; the two give slightly different values (well under 1 %
on Gaussian-like samples, tests/test_losses_sigreg.py). We follow the code.

Anchors that differ from it (checked against their code):

* lightly (its LeJEPA loss): until its PR #2023 the global views were left
  out of SIGReg and of the invariance term (issue #2002); and its SIGReg
  gradient was scaled by 1/world_size across GPUs, an all-reduce that was not
  autograd-aware (issue #1920).
* stable-pretraining: computes ``inv + λ·sigreg`` where the paper has
  ``(1 − λ)·inv + λ·sigreg``, and pools the V·N rows of all views into one
  statistic instead of one statistic per view (issue #413).

Here the statistic of one view is `sigreg`; `ssljax.losses.lejepa` averages
it over the views. Under a sharded ``jax.jit`` the means over N are global
reductions (one statistic of the global batch, as the official
``all_reduce`` of the characteristic function then ``× N × world_size``),
and the directions are an argument, identical on every device.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ssljax import checks

__all__ = ["sigreg", "sigreg_directions", "sigreg_quadrature",
           "sigreg_null_mean", "statistic_of_projections", "check_directions"]


def sigreg_quadrature(num_knots: int = 17, t_max: float = 3.0) -> tuple:
  """Knots t_j and weights of the official Epps–Pulley quadrature.

  Args:
    num_knots: J, odd int >= 3 (the official code asserts an odd count).
    t_max: right end of [0, t_max], > 0.

  Returns:
    (t, weights): float64 NumPy arrays (J,): t_j = j·t_max/(J − 1) and
    weights_j = c_j·Δt·exp(−t_j²/2), c_j = 1 at both ends and 2 inside.

  Raises:
    ValueError: an even or too small num_knots, or t_max <= 0.
  """
  if (isinstance(num_knots, bool) or not isinstance(num_knots, (int, np.integer))
      or num_knots < 3 or num_knots % 2 == 0):
    raise ValueError(f"num_knots must be an odd int >= 3, got {num_knots!r}")
  if not np.isfinite(t_max) or t_max <= 0:
    raise ValueError(f"t_max must be > 0, got {t_max!r}")
  t = np.linspace(0.0, float(t_max), int(num_knots))
  dt = float(t_max) / (num_knots - 1)
  coeff = np.full(int(num_knots), 2.0 * dt)
  coeff[[0, -1]] = dt
  return t, coeff * np.exp(-0.5 * t * t)


def sigreg_null_mean(num_knots: int = 17, t_max: float = 3.0) -> float:
  """E[T] when the projected samples are i.i.d. N(0, 1), for any N.

  E|φ̂(t) − φ(t)|² = (1 − φ(t)²)/N exactly for i.i.d. samples, so the
  expected statistic is Σ_j weights_j (1 − exp(−t_j²)): about 1.05 for the
  official quadrature. A non-Gaussian sample gives a statistic that grows
  like N.

  Example:
    >>> round(sigreg_null_mean(), 4)
    1.0525
  """
  t, w = sigreg_quadrature(num_knots, t_max)
  return float(np.sum(w * (1.0 - np.exp(-t * t))))


@checks.float32_matmuls
def sigreg_directions(key: jax.Array, K: int, M: int,
                      dtype=jnp.float32) -> jax.Array:
  """M random unit directions in R^K, as columns.

  The official library draws a (K, M) standard normal matrix from a generator
  seeded with the step and divides each column by its norm; this draws the
  same distribution from a JAX key (not the same numbers). In training the
  key comes from (seed, step): every device draws the same directions.

  Args:
    key: a JAX PRNG key.
    K: embedding dimension, int >= 1.
    M: number of directions (slices), int >= 1.
    dtype: floating dtype of the result.

  Returns:
    (K, M) array of ``dtype`` with unit-norm columns.

  Raises:
    ValueError: K or M not an int >= 1.
  """
  k = checks.check_positive_int(K, "K")
  m = checks.check_positive_int(M, "M")
  a_KxM = jax.random.normal(key, (k, m), dtype=dtype)
  return a_KxM / jnp.linalg.norm(a_KxM, axis=0, keepdims=True)


@checks.float32_matmuls
def statistic_of_projections(x_NxM: jax.Array, num_knots: int = 17,
                             t_max: float = 3.0) -> jax.Array:
  """(M,) Epps–Pulley statistics of the columns of x (already projected,
  already in the compute dtype); no checks. The shared kernel of `sigreg`
  and `ssljax.losses.lejepa`."""
  t_np, w_np = sigreg_quadrature(num_knots, t_max)
  dtype = x_NxM.dtype
  t_J = jnp.asarray(t_np, dtype)
  phi_J = jnp.exp(-0.5 * t_J * t_J)
  xt_NxMxJ = x_NxM[:, :, None] * t_J
  cos_MxJ = jnp.mean(jnp.cos(xt_NxMxJ), axis=0)
  sin_MxJ = jnp.mean(jnp.sin(xt_NxMxJ), axis=0)
  err_MxJ = jnp.square(cos_MxJ - phi_J) + jnp.square(sin_MxJ)
  return (err_MxJ @ jnp.asarray(w_np, dtype)) * x_NxM.shape[0]


def check_directions(directions, K: int) -> jax.Array:
  """directions as an array (K, M) matching the embedding dimension K."""
  a = checks.as_float(directions)
  if a.ndim != 2 or a.shape[0] != K or a.shape[1] < 1:
    raise ValueError(f"directions must be (K, M) with K = {K} (the "
                     f"embedding dimension) and M >= 1, got shape {a.shape}")
  checks.check_finite(a, "directions")
  return a


@checks.float32_matmuls
def sigreg(z: jax.typing.ArrayLike, directions: jax.typing.ArrayLike, *,
           num_knots: int = 17, t_max: float = 3.0) -> jax.Array:
  """SIGReg statistic of Z: the Epps–Pulley statistic of each projection
  Z a_m against N(0, 1), averaged over the M directions.

      SIGReg(Z) = (1/M) Σ_m N Σ_j weights_j |φ̂_m(t_j) − exp(−t_j²/2)|²,
      φ̂_m(t) = (1/N) Σ_n exp(i t (Z a_m)_n),

  with the knots and weights of `sigreg_quadrature` (17 knots on [0, 3],
  the official code's; the paper's Algorithm 1 uses [−5, 5]). Under the null
  (Z a_m i.i.d. N(0, 1)) its expectation is `sigreg_null_mean` (≈ 1.05)
  whatever N; it grows like N otherwise. The projections and the statistic
  are computed in float32 for float32 and bfloat16 inputs (float64 for
  float64).

  Args:
    z: (N, K) embeddings, N >= 1 rows (samples), float (bf16, f32 or f64).
    directions: (K, M) directions a_m as columns (unit norm for SIGReg:
      `sigreg_directions`); not normalised here.
    num_knots: J, odd >= 3.
    t_max: integration range [0, t_max].

  Returns:
    0-d array, float64 for float64 z, else float32; >= 0.

  Raises:
    ValueError: z not (N, K), directions not (K, M), bad quadrature
      arguments, or (concrete inputs only) a NaN/inf.

  References:
    Balestriero & LeCun 2025, arXiv 2511.08544, §4.2 (Epps–Pulley test),
    Algorithm 1 (SIGReg); the quadrature of the official implementation
    (rbalestr-lab/lejepa, ``lejepa.univariate.EppsPulley``,
    ``lejepa.multivariate.SlicingUnivariateTest``); Epps & Pulley 1983.

  Example:
    >>> z = jnp.zeros((4, 2))                   # a collapsed embedding
    >>> a = jnp.eye(2)
    >>> t, w = sigreg_quadrature()
    >>> bool(jnp.isclose(sigreg(z, a), 4 * float(((1 - np.exp(-t * t / 2)) ** 2) @ w)))
    True
  """
  z = checks.as_float(z)
  checks.check_matrix(z, "z")
  sigreg_quadrature(num_knots, t_max)  # argument checks
  a = check_directions(directions, z.shape[1])
  dtype = checks.compute_dtype(jnp.promote_types(z.dtype, a.dtype))
  return _sliced(z.astype(dtype), a.astype(dtype), num_knots=int(num_knots),
                 t_max=float(t_max))


@functools.partial(jax.jit, static_argnames=("num_knots", "t_max"))
def _sliced(z_NxK, a_KxM, *, num_knots, t_max):
  return jnp.mean(statistic_of_projections(z_NxK @ a_KxM, num_knots, t_max))
