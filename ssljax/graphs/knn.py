"""k-nearest-neighbour graphs (NNCLR positives) over embedding rows."""

from __future__ import annotations

import functools

import jax
from jax.experimental import sparse as jsparse
import jax.numpy as jnp

from ssljax.checks import check_finite, check_positive_int


# ---------------------------------------------------------------------------
# k-NN graph and Laplacian.
# ---------------------------------------------------------------------------

_SYMMETRIZE = ("union", "mutual", "average")
_METRICS = ("cosine", "euclidean")


def knn_graph(z, k: int = 1, *, exclude_self: bool = True,
              symmetrize: str = "union", metric: str = "cosine",
              dtype=jnp.float32, sparse: bool = False):
  """Symmetric k-nearest-neighbour graph over the rows of z (NNCLR positives).

  Row i's neighbours are the k rows with the largest cosine similarity
  (`metric="cosine"`, as NNCLR's nearest neighbour on ℓ2-normalised
  embeddings) or the smallest Euclidean distance; ties go to the lower row
  index. With `exclude_self=True` row i is never its own neighbour; with
  False it counts among the k (so k = 1 gives I).

  The directed k-NN relation A (A_ij = 1 iff j is a neighbour of i) is not
  symmetric, but a graph must be. `symmetrize` chooses:
    "union"   (default) G = max(A, Aᵀ): i ~ j if either is a neighbour of
              the other (the usual k-NN graph; every row has degree >= k);
    "mutual"  G = min(A, Aᵀ): both must be neighbours (may isolate rows);
    "average" G = (A + Aᵀ)/2: weight 1 for mutual pairs, ½ otherwise;
              row sums of A are k, so ΣG = N·k.
  Gradients are stopped through z: the graph is data, not a function of the
  parameters (NNCLR takes the neighbour from a support set without
  gradient). jit-able (k static); the cost is one (N, N) similarity matrix.

  Args:
    z: (N, K) embeddings, float; N > k if exclude_self else N >= k.
    k: neighbours per row, int >= 1.
    exclude_self: drop i from its own neighbour candidates.
    symmetrize: "union", "mutual" or "average" (above).
    metric: "cosine" or "euclidean".
    dtype: dtype of the returned matrix.
    sparse: if True return a BCOO with nse = 2·N·k (duplicates summed and
      clipped, unused slots zero), without a dense (N, N) graph.

  Returns:
    (N, N) symmetric matrix of `dtype` with entries in {0, ½, 1} (BCOO if
      `sparse`).

  Raises:
    ValueError: if z is not rank 2, k is not an int >= 1 or too large for
      N, symmetrize/metric is unknown, or (concrete) z has NaN/inf.

  References:
    Dwibedi et al. 2021 (NNCLR), arXiv:2104.14548, §3 (nearest neighbour
    as positive); Balestriero & LeCun 2022 (arXiv 2205.11508) §2 (graph
    formulation of SSL losses).

  Example:
    >>> z = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    >>> knn_graph(z, 1).astype(int).tolist()
    [[0, 1, 0], [1, 0, 1], [0, 1, 0]]
  """
  z = jnp.asarray(z)
  if z.ndim != 2:
    raise ValueError(f"z must be a rank-2 (N, K) array, got shape {z.shape}")
  n = z.shape[0]
  k = check_positive_int(k, "k")
  if k > n - int(bool(exclude_self)):
    raise ValueError(
        f"k must be <= N{' - 1' if exclude_self else ''} = "
        f"{n - int(bool(exclude_self))} for z of shape {z.shape}, got {k}")
  if symmetrize not in _SYMMETRIZE:
    raise ValueError(
        f"symmetrize must be one of {_SYMMETRIZE}, got {symmetrize!r}")
  if metric not in _METRICS:
    raise ValueError(f"metric must be one of {_METRICS}, got {metric!r}")
  check_finite(z, "z")
  return _knn_graph_core(z, k, bool(exclude_self), symmetrize, metric,
                         jnp.dtype(dtype), bool(sparse))


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4, 5, 6))
def _knn_graph_core(z, k, exclude_self, symmetrize, metric, dtype, sparse):
  z_NxK = jax.lax.stop_gradient(z)
  if not jnp.issubdtype(z_NxK.dtype, jnp.floating):
    z_NxK = z_NxK.astype(jnp.result_type(float))
  n = z_NxK.shape[0]
  if metric == "cosine":
    zn_NxK = z_NxK / jnp.maximum(
        jnp.linalg.norm(z_NxK, axis=1, keepdims=True), 1e-12)
    score_NxN = zn_NxK @ zn_NxK.T
  else:  # −‖z_i − z_j‖² up to the row constant −‖z_i‖², which top_k ignores.
    sq_N = jnp.sum(z_NxK**2, axis=1)
    score_NxN = 2 * z_NxK @ z_NxK.T - sq_N[None, :]
  if exclude_self:
    score_NxN = jnp.where(jnp.eye(n, dtype=bool), -jnp.inf, score_NxN)
  _, nbr_Nxk = jax.lax.top_k(score_NxN, k)  # ties: lower index first
  rows_Nxk = jnp.broadcast_to(jnp.arange(n)[:, None], (n, k))
  if sparse:
    # A entries then Aᵀ entries; a pair present in both appears twice.
    rows = jnp.concatenate([rows_Nxk.ravel(), nbr_Nxk.ravel()])
    cols = jnp.concatenate([nbr_Nxk.ravel(), rows_Nxk.ravel()])
    data = jnp.ones(2 * n * k, dtype)
    if symmetrize == "average":
      data = data / 2
    g = jsparse.BCOO((data, jnp.stack([rows, cols], axis=1)), shape=(n, n))
    g = jsparse.bcoo_sum_duplicates(g, nse=2 * n * k)  # values 1 or 2
    if symmetrize == "union":
      g = jsparse.BCOO((jnp.minimum(g.data, 1), g.indices), shape=(n, n))
    elif symmetrize == "mutual":
      g = jsparse.BCOO(((g.data > 1).astype(dtype), g.indices), shape=(n, n))
    return g
  a_NxN = jnp.zeros((n, n), dtype).at[rows_Nxk, nbr_Nxk].set(1)
  if symmetrize == "union":
    return jnp.maximum(a_NxN, a_NxN.T)
  if symmetrize == "mutual":
    return jnp.minimum(a_NxN, a_NxN.T)
  return (a_NxN + a_NxN.T) / 2
