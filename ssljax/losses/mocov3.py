"""MoCo v3: InfoNCE of online queries against momentum keys.

Rows are samples. The online encoder ends in a predictor whose outputs are
the queries q; the momentum encoder (`ssljax.methods.ema`) gives the keys k of the
other view, under a stop-gradient. Query i's positive is key i; the other
keys of the batch are its negatives (no queue).

* `mocov3(q, k)`: cross-entropy of the logits q̂ k̂ᵀ/τ with the diagonal
  as labels, times 2τ (as the official code does);
* `mocov3_two_view(q1, q2, k1, k2)`: mocov3(q1, k2) + mocov3(q2, k1);
* `mocov3_graph(q, k, g)`: the same cross-entropy with the positives of
  query i given by row i of a rectangular graph G between queries and keys.

Keys across devices: the official code gathers the keys of all GPUs, so each
query's softmax runs over the keys of the global batch. In ssljax the train
step is one jit over the global batch, so the global keys are simply the
whole k: nothing is gathered by hand.

References:
  Chen, Xie & He 2021, "An Empirical Study of Training Self-Supervised
  Vision Transformers", arXiv 2104.02057, Algorithm 1 (`ctr(q, k)`, loss
  ctr(q1, k2) + ctr(q2, k1)) and §4 (τ = 0.2 for ViT).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ssljax import checks, graphs

__all__ = ["mocov3", "mocov3_two_view", "mocov3_graph"]

# Floor on ‖q_i‖ and ‖k_i‖ (as in `ssljax.losses.simclr`).
_NORM_FLOOR = 1e-12


def _log_softmax_logits(q_NxK, k_MxK, temperature):
  """(N, M) log softmax over the keys of q̂ sg(k̂)ᵀ/τ."""
  inv_tau = 1.0 / jnp.asarray(temperature, q_NxK.dtype)
  u_NxK = checks.unit_rows(q_NxK, floor=_NORM_FLOOR)
  v_MxK = checks.unit_rows(jax.lax.stop_gradient(k_MxK), floor=_NORM_FLOOR)
  return jax.nn.log_softmax((u_NxK @ v_MxK.T) * inv_tau, axis=1)


@jax.jit
def _ctr(q_BxK, k_BxK, temperature):
  """2τ · mean_i −log softmax(q̂_i k̂ᵀ/τ)_i (Algorithm 1's ctr)."""
  logp_BxB = _log_softmax_logits(q_BxK, k_BxK, temperature)
  tau = jnp.asarray(temperature, q_BxK.dtype)
  return -2.0 * tau * jnp.mean(jnp.diagonal(logp_BxB))


@checks.float32_matmuls
def mocov3(q: jax.typing.ArrayLike, k: jax.typing.ArrayLike, *,
           temperature: float = 0.2) -> jax.Array:
  """MoCo v3's contrastive loss of queries against keys, one direction.

      loss = 2τ · (1/B) Σ_i −log[exp(q̂_i·k̂_i/τ) / Σ_j exp(q̂_i·k̂_j/τ)],

  x̂ = x / max(‖x‖, 1e-12); k is under `jax.lax.stop_gradient` (it comes
  from the momentum encoder). The factor 2τ is the official code's (the τ
  cancels the 1/τ of the logits in the gradient w.r.t. the cosines). The softmax of query i
  runs over all B keys: the keys of the global batch, since the ssljax
  train step is one jit over the global batch (the official code gathers
  them across GPUs).

  Args:
    q: (B, K) queries: online predictor outputs of one view, float32 or
      float64 (ints are promoted).
    k: (B, K) keys: momentum-encoder outputs of the other view; row i is
      query i's positive.
    temperature: τ > 0 (0.2 in the paper's ViT recipes; the official
      script's default is 1.0, its ResNet-50 recipe).

  Returns:
    0-d array of the inputs' common dtype.

  Raises:
    ValueError: if q or k is not rank 2, the shapes differ (naming both
      arguments and shapes), temperature is not finite and > 0, or
      (concrete inputs only) an input has NaN/inf.

  References:
    Chen, Xie & He 2021, arXiv 2104.02057, Algorithm 1 (`ctr`).

  Example:
    >>> q = jnp.array([[1., 0.], [0., 1.]])
    >>> round(float(mocov3(q, q, temperature=1.0)), 4)
    0.6265
  """
  q_BxK, k_BxK = checks.float_pair(q, k, "q", "k")
  checks.check_positive(temperature, "temperature")
  return _ctr(q_BxK, k_BxK, temperature)


@checks.float32_matmuls
def mocov3_two_view(
    q1: jax.typing.ArrayLike,
    q2: jax.typing.ArrayLike,
    k1: jax.typing.ArrayLike,
    k2: jax.typing.ArrayLike,
    *,
    temperature: float = 0.2,
) -> jax.Array:
  """The symmetrised MoCo v3 loss: mocov3(q1, k2) + mocov3(q2, k1).

  Each view's queries are contrasted with the other view's keys; the two
  directions are added, as in Algorithm 1.

  Args:
    q1, q2: (B, K) queries of views 1 and 2, float32 or float64.
    k1, k2: (B, K) momentum keys of views 1 and 2 (stop-gradient).
    temperature: τ > 0.

  Returns:
    0-d array of the inputs' common dtype.

  Raises:
    ValueError: if an input is not rank 2, two shapes differ (naming both
      arguments), temperature is not finite and > 0, or (concrete inputs
      only) an input has NaN/inf.

  References:
    Chen, Xie & He 2021, arXiv 2104.02057, Algorithm 1.

  Example:
    >>> q = jnp.array([[1., 0.], [0., 1.]])
    >>> round(float(mocov3_two_view(q, q, q, q, temperature=1.0)), 4)
    1.253
  """
  q1_BxK, k2_BxK = checks.float_pair(q1, k2, "q1", "k2")
  q2_BxK, k1_BxK = checks.float_pair(q2, k1, "q2", "k1")
  checks.check_same_shape(q1_BxK, q2_BxK, "q1", "q2")
  checks.check_positive(temperature, "temperature")
  return (_ctr(q1_BxK, k2_BxK, temperature)
          + _ctr(q2_BxK, k1_BxK, temperature))


@jax.jit
def _graph_dense(q_NxK, k_MxK, g_NxM, temperature):
  logp_NxM = _log_softmax_logits(q_NxK, k_MxK, temperature)
  g_NxM = g_NxM.astype(q_NxK.dtype)
  tau = jnp.asarray(temperature, q_NxK.dtype)
  return -2.0 * tau * jnp.sum(g_NxM * logp_NxM) / jnp.sum(g_NxM)


@jax.jit
def _graph_bcoo(q_NxK, k_MxK, g, temperature):
  """Sums over the stored edges; padding entries count 0."""
  n, m = g.shape
  logp_NxM = _log_softmax_logits(q_NxK, k_MxK, temperature)
  rows_E, cols_E = g.indices[:, 0], g.indices[:, 1]
  stored_E = (rows_E < n) & (cols_E < m)
  w_E = jnp.where(stored_E, g.data, 0).astype(q_NxK.dtype)
  logp_E = logp_NxM[jnp.where(stored_E, rows_E, 0), jnp.where(stored_E, cols_E, 0)]
  tau = jnp.asarray(temperature, q_NxK.dtype)
  return -2.0 * tau * jnp.dot(w_E, logp_E) / jnp.sum(w_E)


@checks.float32_matmuls
def mocov3_graph(q: jax.typing.ArrayLike, k: jax.typing.ArrayLike, g, *,
                 temperature: float = 0.2) -> jax.Array:
  """MoCo v3's loss with the positives of each query given by a graph.

      loss = 2τ · Σ_ij G_ij (−log softmax_j(q̂_i · sg(k̂)ᵀ/τ)) / Σ_ij G_ij,

  the softmax of query i running over all M keys. G (N, M) is rectangular:
  rows are queries, columns keys. The original method pairs query i of one
  view with key i of the other view, G = I_B:
  `mocov3(q, k) = mocov3_graph(q, k, eye(B))`, and
  `mocov3_two_view(q1, q2, k1, k2) = mocov3_graph(q1, k2, I) +
  mocov3_graph(q2, k1, I)`. (With all views stacked in one q and one k, each
  softmax would run over the keys of both views, which is another loss.)

  Args:
    q: (N, K) queries, float32 or float64.
    k: (M, K) keys (stop-gradient).
    g: (N, M) weights, dense or 2-D BCOO, Σ_ij G_ij > 0.
    temperature: τ > 0.

  Returns:
    0-d array of the inputs' common dtype. Memory O(N·M) (the logits).

  Raises:
    ValueError: if q or k is not rank 2, their K differ, g is not (N, M),
      temperature is not finite and > 0, or (concrete inputs only) an input
      has NaN/inf or Σ_ij G_ij <= 0.

  References:
    Chen, Xie & He 2021, arXiv 2104.02057, Algorithm 1. Graph form as the
    InfoNCE graph form of Balestriero & LeCun 2022, arXiv 2205.11508, §2.

  Example:
    >>> q = jnp.array([[1., 0.], [0., 1.]])
    >>> round(float(mocov3_graph(q, q, jnp.eye(2), temperature=1.0)), 4)
    0.6265
  """
  q_NxK, k_MxK = checks.as_float(q), checks.as_float(k)
  checks.check_matrix(q_NxK, "q")
  checks.check_matrix(k_MxK, "k")
  if q_NxK.shape[1] != k_MxK.shape[1]:
    raise ValueError(
        "q and k must have the same number of columns K, got shapes"
        f" {q_NxK.shape} and {k_MxK.shape}")
  checks.check_positive(temperature, "temperature")
  g = graphs.check_cross_graph(g, q_NxK.shape[0], k_MxK.shape[0],
                               what="queries, keys")
  dtype = jnp.result_type(q_NxK, k_MxK)
  q_NxK, k_MxK = q_NxK.astype(dtype), k_MxK.astype(dtype)
  if graphs.is_bcoo(g):
    return _graph_bcoo(q_NxK, k_MxK, g, temperature)
  return _graph_dense(q_NxK, k_MxK, jnp.asarray(g), temperature)
