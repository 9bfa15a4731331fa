"""SwAV: swapped prediction of cluster assignments (Caron et al. 2020).

Each crop's embedding is scored against K unit-norm prototypes. For each
crop c of `crops_for_assign` the scores are turned into codes q_c by
Sinkhorn-Knopp (`ssljax.losses.sinkhorn_knopp`, ε = 0.05, 3 iterations;
equal use of the prototypes across the batch), under stop-gradient; every
other crop v then predicts q_c through softmax(scores_v/τ):

    loss = (1/|A|) Σ_{c∈A} (1/(V − 1)) Σ_{v≠c} (1/B) Σ_b
           H(q_c,b, softmax(s_v,b/τ)).

This is the loss loop of the official ``main_swav.py`` (checked against its
code), including its counts: the sum over v ≠ c is divided by V − 1 with V
all crops, then by |A|. With a queue the codes of crop c are computed over
[queue rows; batch rows] and only the batch rows are kept.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ssljax import checks
from ssljax.losses.sinkhorn import check_iterations
from ssljax.losses.sinkhorn import sinkhorn_knopp

__all__ = ["swav"]


@checks.float32_matmuls
def swav(
    scores: jax.typing.ArrayLike,
    *,
    temperature: float = 0.1,
    epsilon: float = 0.05,
    num_iterations: int = 3,
    crops_for_assign: tuple[int, ...] = (0, 1),
    queue: jax.typing.ArrayLike | None = None,
) -> jax.Array:
  """SwAV swapped-prediction loss over V crops (official main_swav.py).

  For c in crops_for_assign (index i): q_c = stop_gradient(sinkhorn_knopp(
  [queue[i]; scores[c]], temperature=ε))[−B:], and

      loss = mean_i (1/(V − 1)) Σ_{v≠c_i} −(1/B) Σ_b Σ_k
             q_c,bk log softmax(scores[v, b]/τ)_k.

  Under a sharded ``jax.jit`` the Sinkhorn sums run over the global batch
  (and the global queue), as the official all-reduces do.

  Args:
    scores: (V, B, K) prototype scores ⟨z, c_k⟩ of the V crops (crop-major,
      the high-resolution crops first), float32 or float64; V >= 2.
    temperature: τ > 0 of the prediction softmax (official 0.1).
    epsilon: ε > 0, the Sinkhorn temperature (official 0.05).
    num_iterations: Sinkhorn iterations, int >= 1 (official 3).
    crops_for_assign: distinct crop indices in [0, V) whose codes are
      predicted (official (0, 1)).
    queue: optional (|A|, Q, K) scores of the queued embeddings of each
      assigned crop against the current prototypes (official
      ``queue[i] @ prototypes.T``); they only enlarge the Sinkhorn batch.

  Returns:
    0-d array in the input's float dtype.

  Raises:
    ValueError: if scores is not a non-empty (V, B, K) array with V >= 2,
      crops_for_assign is empty, repeats an index or has one outside
      [0, V), queue is not (|A|, Q, K), a temperature is not finite > 0,
      num_iterations is not an int >= 1, or (concrete only) an input has
      NaN/inf.

  References:
    Caron, Misra, Mairal, Goyal, Bojanowski & Joulin 2020, "Unsupervised
    Learning of Visual Features by Contrasting Cluster Assignments", arXiv
    2006.09882, §3.1 eq. (1)-(3), Algorithm 1, and multi-crop (§3.2).

  Example:
    >>> s = jnp.array([[[1., 0.], [0., 1.]], [[1., 0.], [0., 1.]]])
    >>> round(float(swav(s, temperature=1.0, epsilon=1.0)), 4)
    0.5822
  """
  s_VxBxK = checks.as_float(scores)
  if s_VxBxK.ndim != 3 or 0 in s_VxBxK.shape or s_VxBxK.shape[0] < 2:
    raise ValueError(f"scores must be a non-empty (V, B, K) array with V >= 2"
                     f" crops, got shape {s_VxBxK.shape}")
  checks.check_finite(s_VxBxK, "scores")
  v, _, k = s_VxBxK.shape
  assign = tuple(crops_for_assign)
  if (not assign or len(set(assign)) != len(assign)
      or not all(isinstance(c, (int, np.integer)) and not isinstance(c, bool)
                 and 0 <= c < v for c in assign)):
    raise ValueError(f"crops_for_assign must be distinct ints in [0, V) ="
                     f" [0, {v}), at least one, got {crops_for_assign!r}")
  assign = tuple(int(c) for c in assign)
  q = None
  if queue is not None:
    q = checks.as_float(queue)
    if q.ndim != 3 or q.shape[0] != len(assign) or q.shape[2] != k:
      raise ValueError(f"queue must be (|A|, Q, K) = ({len(assign)}, Q, {k}),"
                       f" got shape {q.shape}")
    checks.check_finite(q, "queue")
  checks.check_positive(temperature, "temperature")
  checks.check_positive(epsilon, "epsilon")
  n_iter = check_iterations(num_iterations)
  return _swav_core(s_VxBxK, q, temperature, epsilon, n_iter=n_iter,
                    assign=assign)


@functools.partial(jax.jit, static_argnames=("n_iter", "assign"))
def _swav_core(s_VxBxK, q_AxQxK, tau, eps, *, n_iter, assign):
  dtype = s_VxBxK.dtype if q_AxQxK is None else jnp.result_type(s_VxBxK,
                                                                 q_AxQxK)
  s_VxBxK = s_VxBxK.astype(dtype)
  v, b, _ = s_VxBxK.shape
  log_p_VxBxK = jax.nn.log_softmax(s_VxBxK / jnp.asarray(tau, dtype), axis=-1)
  total = jnp.zeros((), dtype)
  for i, c in enumerate(assign):
    rows = jax.lax.stop_gradient(s_VxBxK[c])
    if q_AxQxK is not None:
      rows = jnp.concatenate([jax.lax.stop_gradient(q_AxQxK[i]).astype(dtype),
                              rows])
    codes_BxK = jax.lax.stop_gradient(
        sinkhorn_knopp(rows, temperature=eps, num_iterations=n_iter)[-b:])
    # ce_V[v] = −(1/B) Σ_b Σ_k q_bk log p_vbk.
    ce_V = -jnp.einsum("bk,vbk->v", codes_BxK, log_p_VxBxK) / b
    others = jnp.arange(v) != c
    total = total + jnp.sum(jnp.where(others, ce_V, 0)) / (v - 1)
  return total / len(assign)
