"""The graph kinds a run's config can name, and the graph of a training batch.

``config.graph.kind`` is a batch graph (`BATCH_GRAPH_KINDS`: built in the
train step over the V·B rows of the batch's views by `batch_graph`) or a
graph over the whole train set (`DATASET_GRAPH_KINDS`: an edge list of
`ssljax.graphs.edges`, trained on sampled edges).
"""

import jax
import jax.numpy as jnp

from ssljax.graphs.views import views_graph

__all__ = ["BATCH_GRAPH_KINDS", "DATASET_GRAPH_KINDS", "batch_graph"]

# Graphs over the V·B rows of one training batch (`batch_graph`).
BATCH_GRAPH_KINDS = ("views", "supervised", "mixed")
# Graphs over the whole train set, trained on sampled edges
# (ssljax.graphs.edges, ssljax.data.edge_batches): the two views of a batch
# row are cut from the endpoints of one edge, on the devices, by the views
# engine of every path. Form "two_view" uses the method's original loss
# on the edge pairs; form "graph" the unbiased edge estimate of the methods
# that have one (spectral contrastive: VIC², losses.edge_vic2_terms).
DATASET_GRAPH_KINDS = ("dataset_knn", "dataset_supervised", "edge_list")


def batch_graph(kind: str, num_views: int, batch: int, labels=None, *,
                alpha: float = 0.5, normalize: bool = True,
                dtype=jnp.float32) -> jax.Array:
  """The graph G over the V·B view-major rows of a training batch.

  * "views": the V-view SSL graph ``views_graph(B, V)``: the views of
    one sample are positives (degree V − 1).
  * "supervised": rows with the same known label are positives, across views
    and samples; no self loops; a label −1 (unknown) gives an empty row. This
    is (1_V1_Vᵀ ⊗ YYᵀ) − I restricted to known labels (Cabannes et al. 2023
    (arXiv 2303.15256): "SSL is a G away from supervised learning").
  * "mixed": (1 − α)·views + α·supervised (Cabannes et al. 2023 §3).

  With ``normalize`` the label part is rescaled so that its mean degree over
  the known rows is V − 1, the degree of the views graph: the loss weights
  tuned for SSL then keep their balance (a convention of ours, not of the
  papers; the supervised degree otherwise grows with the batch size).

  Args:
    kind: one of BATCH_GRAPH_KINDS.
    num_views, batch: V and B; G is (V·B, V·B).
    labels: int (B,) batch labels, −1 = unknown; required unless kind="views".
      May be a tracer (this runs inside the jitted train step).
    alpha: mixing weight α in [0, 1] for "mixed".
    normalize: rescale the label part as above.
    dtype: dtype of G.

  Returns:
    (V·B, V·B) symmetric array of ``dtype``.

  Raises:
    ValueError: unknown kind, missing labels or a bad label shape, α outside
      [0, 1].
  """
  if kind not in BATCH_GRAPH_KINDS:
    raise ValueError(f"unknown graph kind {kind!r}; expected one of "
                     f"{BATCH_GRAPH_KINDS}")
  g_views = views_graph(batch, num_views, dtype=dtype)
  if kind == "views":
    return g_views
  if labels is None or jnp.shape(labels) != (batch,):
    raise ValueError(f"graph kind {kind!r} needs labels of shape ({batch},), "
                     f"got {None if labels is None else jnp.shape(labels)}")
  if not 0.0 <= alpha <= 1.0:
    raise ValueError(f"alpha must be in [0, 1], got {alpha}")
  y_N = jnp.tile(jnp.asarray(labels), num_views)  # view-major rows
  same_NxN = (y_N[:, None] == y_N[None, :]) & (y_N[:, None] >= 0)
  g_sup = jnp.where(jnp.eye(num_views * batch, dtype=bool), False,
                    same_NxN).astype(dtype)
  if normalize:
    known = jnp.sum(y_N >= 0)
    mean_degree = jnp.sum(g_sup) / jnp.maximum(known, 1)
    g_sup = g_sup * (num_views - 1) / jnp.maximum(mean_degree, 1e-12)
  if kind == "supervised":
    return g_sup
  return (1.0 - alpha) * g_views + alpha * g_sup
