"""NNCLR: support-set nearest neighbours as positives (Dwibedi et al. 2021).

For embeddings z_i (B, K) of one view, NN(z_i, Q) is the row of the support
set Q (a FIFO queue of past embeddings, `ssljax.methods.queue`) with the highest
cosine similarity to z_i, taken under stop-gradient. The predictor outputs
p_j of the OTHER view are contrasted against it:

    L = (1/B) Σ_i −log softmax_j(NN(ẑ_i)·p̂_j / τ)_i,

x̂ = x/‖x‖, the softmax over the B predictions of the batch (the paper's
L_i^NNCLR and Algorithm 1: logits = nn @ p.T, cross-entropy against
arange(B) along the rows; solo-learn's `nnclr_loss_func` computes the
same). The two-view loss is ½ L(NN(z1), p2) + ½ L(NN(z2), p1)
(Algorithm 1). Only the predictor outputs p receive gradients from this
loss; z reaches it only through the arg-max. The paper's implementation
details also describe a transposed term, whose softmax runs over the
neighbours NN(z_k) instead of the predictions; Algorithm 1 and solo-learn
leave it out, and so do we.

Graph form: the positives are a bipartite graph between the batch and the
support set, G_iq = 1 when support row q is a nearest neighbour of z_i
(`support_knn_graph`; the original uses k = 1). Each edge (i, q) contributes
−G_iq log softmax_j(q̂·p̂_j/τ)_i; dividing by Σ G gives `nnclr` exactly
for k = 1 (`nnclr_graph`).

References:
  Dwibedi, Aytar, Tompson, Sermanet & Zisserman 2021, "With a Little Help
  from My Friends: Nearest-Neighbor Contrastive Learning of Visual
  Representations", arXiv 2104.14548, §3 (L_i^InfoNCE, L_i^NNCLR) and
  Algorithm 1.
"""

from __future__ import annotations

import functools

import jax
from jax.experimental import sparse as jsparse
import jax.numpy as jnp
import numpy as np

from ssljax import checks, graphs

__all__ = ["nearest_neighbour", "nnclr", "nnclr_two_view",
           "support_knn_graph", "nnclr_graph"]

_NORM_FLOOR = 1e-12  # F.normalize's eps: a zero row gets cosine 0


def _check_support(support, z_BxK, name_z: str):
  q_QxK = checks.as_float(support)
  checks.check_matrix(q_QxK, "support")
  if q_QxK.shape[1] != z_BxK.shape[1]:
    raise ValueError(f"support and {name_z} must have the same width K, got"
                     f" support {q_QxK.shape} and {name_z} {z_BxK.shape}")
  return q_QxK


def _nn_index(z_BxK, q_QxK):
  """Index of the support row most cosine-similar to each z_i (first on ties)."""
  zn = checks.unit_rows(jax.lax.stop_gradient(z_BxK), floor=_NORM_FLOOR)
  qn = checks.unit_rows(jax.lax.stop_gradient(q_QxK), floor=_NORM_FLOOR)
  return jnp.argmax(zn @ qn.T.astype(zn.dtype), axis=1).astype(jnp.int32)


# ---------------------------------------------------------------------------
# Original form.
# ---------------------------------------------------------------------------


@checks.float32_matmuls
def nearest_neighbour(
    z: jax.typing.ArrayLike,
    support: jax.typing.ArrayLike,
) -> tuple[jax.Array, jax.Array]:
  """NN(z_i, Q): the support row most cosine-similar to each z_i.

  Args:
    z: (B, K) embeddings, float32 or float64.
    support: (Q, K) support set (e.g. `queue["z"]`), Q >= 1.

  Returns:
    (nn, idx): nn (B, K) the chosen support rows as stored (not
      re-normalised), under stop-gradient, in support's dtype; idx (B,)
      int32 their indices (the lowest index on ties).

  Raises:
    ValueError: if z or support is not rank 2, their widths differ, or
      (concrete only) one has NaN/inf.

  References:
    Dwibedi et al. 2021, arXiv 2104.14548, §3 (NN(z, Q) = argmin_q
    ‖z − q‖ on unit vectors, i.e. the highest cosine) and Algorithm 1.

  Example:
    >>> q = jnp.array([[1., 0.], [0., 1.], [-1., 0.]])
    >>> nn, idx = nearest_neighbour(jnp.array([[0.1, 2.], [-3., 1.]]), q)
    >>> idx.tolist(), nn.tolist()
    ([1, 2], [[0.0, 1.0], [-1.0, 0.0]])
  """
  z_BxK = checks.as_float(z)
  checks.check_matrix(z_BxK, "z")
  q_QxK = _check_support(support, z_BxK, "z")
  return _nearest_core(z_BxK, q_QxK)


@jax.jit
def _nearest_core(z_BxK, q_QxK):
  idx_B = _nn_index(z_BxK, q_QxK)
  return jax.lax.stop_gradient(q_QxK[idx_B]), idx_B


def _check_pair(p, z, name_p: str, name_z: str):
  p_BxK, z_BxK = checks.as_float(p), checks.as_float(z)
  checks.check_matrix(p_BxK, name_p)
  checks.check_same_shape(p_BxK, z_BxK, name_p, name_z)
  checks.check_matrix(z_BxK, name_z)
  return p_BxK, z_BxK


@checks.float32_matmuls
def nnclr(
    p: jax.typing.ArrayLike,
    z: jax.typing.ArrayLike,
    support: jax.typing.ArrayLike,
    *,
    temperature: float = 0.1,
) -> jax.Array:
  """NNCLR InfoNCE of one direction: NN(z_i) is the anchor, p_i its positive.

      loss = (1/B) Σ_i −log softmax_j(NN(ẑ_i)·p̂_j / τ)_i,

  with NN(z_i) = `nearest_neighbour(z, support)` (stop-gradient) and the
  softmax over the B predictions p_j (rows of the logits matrix
  NN(ẑ)·p̂ᵀ/τ, labels on the diagonal). z and p come from different views
  of the same images: z from one view's projector, p from the other view's
  predictor.

  Args:
    p: (B, K) predictor outputs of the other view, float32 or float64.
    z: (B, K) projector outputs whose neighbours are looked up.
    support: (Q, K) support set, Q >= 1.
    temperature: τ > 0 (paper 0.1).

  Returns:
    0-d array of the promoted dtype of p and support.

  Raises:
    ValueError: if p, z or support is not rank 2, p and z differ in shape,
      support's width differs, temperature is not a finite number > 0, or
      (concrete only) an input has NaN/inf.

  References:
    Dwibedi et al. 2021, arXiv 2104.14548, §3 (L_i^NNCLR), Algorithm 1 (loss
    L(nn, p) = cross_entropy(nn @ p.T / τ, arange(B))).

  Example:
    >>> q = jnp.array([[1., 0.], [0., 1.]])
    >>> z = jnp.array([[2., 0.1], [0.1, 2.]])
    >>> round(float(nnclr(z, z, q, temperature=1.0)), 4)
    0.3273
  """
  p_BxK, z_BxK = _check_pair(p, z, "p", "z")
  q_QxK = _check_support(support, z_BxK, "z")
  checks.check_positive(temperature, "temperature")
  return _nnclr_core(p_BxK, z_BxK, q_QxK, temperature)


def _infonce_rows(anchor_AxK, p_BxK, labels_A, inv_tau):
  """−log softmax_j(â_a·p̂_j/τ)_{labels_a} for each anchor row a: (A,)."""
  logits_AxB = (checks.unit_rows(anchor_AxK, floor=_NORM_FLOOR)
                @ checks.unit_rows(p_BxK, floor=_NORM_FLOOR).T) * inv_tau
  positive_A = jnp.take_along_axis(logits_AxB, labels_A[:, None], axis=1)[:, 0]
  return jax.nn.logsumexp(logits_AxB, axis=1) - positive_A


@jax.jit
def _nnclr_core(p_BxK, z_BxK, q_QxK, temperature):
  dtype = jnp.result_type(p_BxK, q_QxK)
  inv_tau = 1.0 / jnp.asarray(temperature, dtype)
  nn_BxK = jax.lax.stop_gradient(q_QxK[_nn_index(z_BxK, q_QxK)]).astype(dtype)
  b = p_BxK.shape[0]
  return jnp.mean(_infonce_rows(nn_BxK, p_BxK.astype(dtype), jnp.arange(b),
                                inv_tau))


@checks.float32_matmuls
def nnclr_two_view(
    p1: jax.typing.ArrayLike,
    p2: jax.typing.ArrayLike,
    z1: jax.typing.ArrayLike,
    z2: jax.typing.ArrayLike,
    support: jax.typing.ArrayLike,
    *,
    temperature: float = 0.1,
) -> jax.Array:
  """Symmetrised NNCLR: ½ nnclr(p2, z1, support) + ½ nnclr(p1, z2, support).

  The neighbour of view 1 is the anchor for view 2's prediction and vice
  versa (Algorithm 1: loss = L(NN1, p2)/2 + L(NN2, p1)/2). The support set
  is then updated with z1 by the training loop (`ssljax.methods.queue.queue_push`).

  Args:
    p1, p2: (B, K) predictor outputs of views 1 and 2.
    z1, z2: (B, K) projector outputs of views 1 and 2.
    support: (Q, K) support set.
    temperature: τ > 0 (paper 0.1).

  Returns:
    0-d array of the promoted dtype of the predictions and support.

  Raises:
    ValueError: as `nnclr`, naming the mismatched pair (e.g. "p1 and z2").

  References:
    Dwibedi et al. 2021, arXiv 2104.14548, Algorithm 1.

  Example:
    >>> q = jnp.array([[1., 0.], [0., 1.]])
    >>> z = jnp.array([[2., 0.1], [0.1, 2.]])
    >>> round(float(nnclr_two_view(z, z, z, z, q, temperature=1.0)), 4)
    0.3273
  """
  p2_BxK, z1_BxK = _check_pair(p2, z1, "p2", "z1")
  p1_BxK, z2_BxK = _check_pair(p1, z2, "p1", "z2")
  checks.check_same_shape(p1_BxK, p2_BxK, "p1", "p2")
  q_QxK = _check_support(support, z1_BxK, "z1")
  checks.check_positive(temperature, "temperature")
  return (0.5 * _nnclr_core(p2_BxK, z1_BxK, q_QxK, temperature)
          + 0.5 * _nnclr_core(p1_BxK, z2_BxK, q_QxK, temperature))


# ---------------------------------------------------------------------------
# Graph form.
# ---------------------------------------------------------------------------


@checks.float32_matmuls
def support_knn_graph(
    z: jax.typing.ArrayLike,
    support: jax.typing.ArrayLike,
    k: int = 1,
    *,
    dtype=jnp.float32,
    sparse: bool = False,
):
  """Batch → support k-nearest-neighbour graph (NNCLR's positives).

  G_iq = 1 when support row q is among the k rows of highest cosine
  similarity to z_i (ties: lower index first; for k = 1 the same row as
  `nearest_neighbour`). Not symmetric and not square: rows are the batch,
  columns the support set. Computed under stop-gradient.

  Args:
    z: (B, K) embeddings.
    support: (Q, K) support set, Q >= k.
    k: neighbours per row, int >= 1 (static).
    dtype: dtype of the entries.
    sparse: if True, a BCOO with B·k stored entries.

  Returns:
    (B, Q) 0/1 matrix of `dtype` with k ones per row (BCOO if `sparse`).

  Raises:
    ValueError: if z or support is not rank 2, the widths differ, k is not
      an int in [1, Q], or (concrete only) an input has NaN/inf.

  References:
    Dwibedi et al. 2021, arXiv 2104.14548, §3 (k = 1) and the ablations
    (top-k neighbours as positives).

  Example:
    >>> q = jnp.array([[1., 0.], [0., 1.], [-1., 0.]])
    >>> support_knn_graph(jnp.array([[0.1, 2.]]), q, 2).astype(int).tolist()
    [[1, 1, 0]]
  """
  z_BxK = checks.as_float(z)
  checks.check_matrix(z_BxK, "z")
  q_QxK = _check_support(support, z_BxK, "z")
  k = checks.check_positive_int(k, "k")
  if k > q_QxK.shape[0]:
    raise ValueError(f"k must be <= Q = {q_QxK.shape[0]} (the support rows),"
                     f" got {k}")
  return _support_knn_core(z_BxK, q_QxK, k, jnp.dtype(dtype), bool(sparse))


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _support_knn_core(z_BxK, q_QxK, k, dtype, sparse):
  zn = checks.unit_rows(jax.lax.stop_gradient(z_BxK), floor=_NORM_FLOOR)
  qn = checks.unit_rows(jax.lax.stop_gradient(q_QxK), floor=_NORM_FLOOR)
  _, nbr_Bxk = jax.lax.top_k(zn @ qn.T.astype(zn.dtype), k)
  b, q = z_BxK.shape[0], q_QxK.shape[0]
  rows_Bxk = jnp.broadcast_to(jnp.arange(b)[:, None], (b, k))
  if sparse:
    indices = jnp.stack([rows_Bxk.ravel(), nbr_Bxk.ravel()], axis=1)
    return jsparse.BCOO((jnp.ones(b * k, dtype), indices.astype(jnp.int32)),
                        shape=(b, q))
  return jnp.zeros((b, q), dtype).at[rows_Bxk, nbr_Bxk].set(1)


@checks.float32_matmuls
def nnclr_graph(
    p: jax.typing.ArrayLike,
    support: jax.typing.ArrayLike,
    g,
    *,
    temperature: float = 0.1,
) -> jax.Array:
  """NNCLR as InfoNCE over a batch × support graph.

      loss = Σ_iq G_iq · (−log softmax_j(q̂·p̂_j/τ)_i) / Σ_iq G_iq:

  each edge (i, q) makes support row q an anchor whose positive among the
  B predictions is p_i. With the 1-nearest-neighbour graph of z,
  `support_knn_graph(z, support, 1)`, this is `nnclr(p, z, support)`
  exactly (the original method's graph); k > 1 averages over k anchors per
  sample.

  A dense g costs a (Q, B) logits matrix; a BCOO g only the rows of its
  stored edges, (nnz, B) (padding entries, index >= the shape, ignored).

  Args:
    p: (B, K) predictor outputs, float32 or float64.
    support: (Q, K) support set (no gradient flows into it).
    g: (B, Q) weights, dense or 2-D BCOO, Σ G > 0.
    temperature: τ > 0.

  Returns:
    0-d array of the promoted dtype of p and support.

  Raises:
    ValueError: if p or support is not rank 2 or their widths differ, g is
      not (B, Q), temperature is not finite > 0, or (concrete only) an input
      has NaN/inf or Σ G <= 0.

  References:
    Dwibedi et al. 2021, arXiv 2104.14548, §3 (L_i^NNCLR); graph view of SSL
    losses: Balestriero & LeCun 2022, arXiv 2205.11508, §2.

  Example:
    >>> q = jnp.array([[1., 0.], [0., 1.]])
    >>> z = jnp.array([[2., 0.1], [0.1, 2.]])
    >>> round(float(nnclr_graph(z, q, support_knn_graph(z, q),
    ...                         temperature=1.0)), 4)
    0.3273
  """
  p_BxK = checks.as_float(p)
  checks.check_matrix(p_BxK, "p")
  q_QxK = _check_support(support, p_BxK, "p")
  checks.check_positive(temperature, "temperature")
  g = graphs.check_cross_graph(g, p_BxK.shape[0], q_QxK.shape[0],
                               what="batch rows, support rows")
  if graphs.is_bcoo(g):
    return _nnclr_bcoo_core(p_BxK, q_QxK, g, temperature)
  return _nnclr_dense_core(p_BxK, q_QxK, g, temperature)


@jax.jit
def _nnclr_dense_core(p_BxK, q_QxK, g_BxQ, temperature):
  dtype = jnp.result_type(p_BxK, q_QxK)
  inv_tau = 1.0 / jnp.asarray(temperature, dtype)
  g_BxQ = g_BxQ.astype(dtype)
  qn_QxK = checks.unit_rows(jax.lax.stop_gradient(q_QxK).astype(dtype),
                            floor=_NORM_FLOOR)
  pn_BxK = checks.unit_rows(p_BxK.astype(dtype), floor=_NORM_FLOOR)
  logits_QxB = (qn_QxK @ pn_BxK.T) * inv_tau
  # Σ_iq G_iq (lse_q − logit_qi) = Σ_q d_q lse_q − Σ_iq G_iq logit_qi.
  lse_Q = jax.nn.logsumexp(logits_QxB, axis=1)
  total = jnp.dot(jnp.sum(g_BxQ, axis=0), lse_Q) - jnp.sum(g_BxQ * logits_QxB.T)
  return total / jnp.sum(g_BxQ)


@jax.jit
def _nnclr_bcoo_core(p_BxK, q_QxK, g, temperature):
  """Sums over the stored edges: an (nnz, B) logits block."""
  dtype = jnp.result_type(p_BxK, q_QxK)
  inv_tau = 1.0 / jnp.asarray(temperature, dtype)
  rows_E, cols_E, w_E = graphs.edge_arrays(g)
  w_E = w_E.astype(dtype)
  anchors_ExK = jax.lax.stop_gradient(q_QxK[cols_E]).astype(dtype)
  h_E = _infonce_rows(anchors_ExK, p_BxK.astype(dtype), rows_E, inv_tau)
  return jnp.dot(w_E, h_E) / jnp.sum(w_E)
