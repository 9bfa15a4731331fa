"""Sinkhorn-Knopp: soft, equipartitioned assignments of samples to prototypes.

SwAV (Caron et al. 2020) and DINOv2/DINOv3 (Oquab et al. 2023; Siméoni et
al. 2025) turn the teacher's prototype scores T (N, K) into targets Q (N, K)
by a few steps of Sinkhorn-Knopp on exp(T/ε): alternately every prototype
(column) gets total mass N/K and every sample (row) mass 1. After the last
step each row is a probability vector over the K prototypes, and the columns
are close to equal in mass, which keeps all prototypes in use.

The official codes (SwAV's ``distributed_sinkhorn``, DINOv2's and DINOv3's
``sinkhorn_knopp_teacher``) exponentiate the raw scores, exp(T/ε), with no
max subtracted first; in float32 this overflows to inf, and the assignment
becomes NaN, as soon as one T/ε exceeds log(float32 max) ≈ 88.72 (scores
above 4.4 at ε = 0.05). Here the same iterations run in the log domain: every
normalisation is a log-sum-exp, which subtracts its maximum. The global scale
1/ΣQ and the 1/K and 1/N factors of the official steps are constants along
the axis the following step normalises, so they cancel; the result equals the
official one wherever that one is finite (tests/test_losses_swav.py).

Under a sharded ``jax.jit`` the rows of T may be split across devices: the
column sums (over samples) are then global reductions, as the official
``all_reduce`` of the per-prototype sums, and N is the global row count.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ssljax import checks

__all__ = ["sinkhorn_knopp"]


def check_iterations(num_iterations) -> int:
  """num_iterations must be an int >= 1 (static); returns it as int."""
  if (isinstance(num_iterations, bool)
      or not isinstance(num_iterations, (int, np.integer))
      or num_iterations < 1):
    raise ValueError(f"num_iterations must be an int >= 1, got"
                     f" {num_iterations!r}")
  return int(num_iterations)


@checks.float32_matmuls
def sinkhorn_knopp(
    logits: jax.typing.ArrayLike,
    *,
    temperature: float,
    num_iterations: int = 3,
) -> jax.Array:
  """Equipartitioned soft assignments of N samples to K prototypes.

  With L = logits/τ, each iteration does, in the log domain,

      L ← L − logsumexp over samples (axis 0)   (each prototype: equal mass)
      L ← L − logsumexp over prototypes (axis 1) (each sample: mass 1)

  and the result is exp(L): rows sum to 1. This is the official algorithm
  (SwAV's ``distributed_sinkhorn``, DINOv2's ``sinkhorn_knopp_teacher``)
  ending, as it does, with the per-sample normalisation; its constant
  factors 1/ΣQ, 1/K, 1/N and ×N cancel. Unlike the official code, which
  computes exp(logits/τ) directly and overflows in float32 once a
  logits/τ > 88.72, this stays finite for any finite input.

  The function is differentiable; the official code runs it under
  ``torch.no_grad``, and so do `swav` and `dinov2_terms` (they wrap it in
  ``jax.lax.stop_gradient``).

  Args:
    logits: (N, K) scores (SwAV: prototype scores; DINOv2: teacher head
      logits), float32 or float64 (bfloat16/float16 are computed in
      float32), unitless; N >= 1 is the global row count under sharding.
    temperature: τ > 0 (SwAV's ε, official 0.05; DINOv2's teacher
      temperature, 0.04 to 0.07); may be traced.
    num_iterations: int >= 1 (official 3), static.

  Returns:
    (N, K) array in the input's float dtype, entries in [0, 1], rows
    summing to 1.

  Raises:
    ValueError: if logits is not a non-empty (N, K) array, temperature is
      not a finite number > 0, num_iterations is not an int >= 1, or
      (concrete only) logits has NaN/inf.

  References:
    Caron, Misra, Mairal, Goyal, Bojanowski & Joulin 2020, "Unsupervised
    Learning of Visual Features by Contrasting Cluster Assignments", arXiv
    2006.09882, §3.1 eq. (3) and Algorithm 1 (``distributed_sinkhorn``);
    Cuturi 2013, arXiv 1306.0895; Oquab et al. 2023, "DINOv2", arXiv
    2304.07193, §4 (Sinkhorn-Knopp centring of the teacher).

  Example:
    >>> q = sinkhorn_knopp(jnp.array([[1., 0.], [1., 0.]]), temperature=1.0)
    >>> [[round(float(v), 4) for v in row] for row in q]
    [[0.5, 0.5], [0.5, 0.5]]
  """
  t_NxK = checks.as_float(logits)
  checks.check_nonempty_matrix(t_NxK, "logits", "(N, K)")
  checks.check_positive(temperature, "temperature")
  n_iter = check_iterations(num_iterations)
  return _sinkhorn_core(t_NxK, temperature, n_iter)


@functools.partial(jax.jit, static_argnums=2)
def _sinkhorn_core(t_NxK, temperature, num_iterations: int):
  """Log-domain iterations on validated inputs (traceable, no checks)."""
  log_q = t_NxK / jnp.asarray(temperature, t_NxK.dtype)
  for _ in range(num_iterations):
    log_q = log_q - jax.nn.logsumexp(log_q, axis=0, keepdims=True)
    log_q = log_q - jax.nn.logsumexp(log_q, axis=1, keepdims=True)
  return jnp.exp(log_q)
