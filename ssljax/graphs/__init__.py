"""Similarity graphs G over the rows of an embedding matrix Z.

Rows are samples: for embeddings Z of shape (N, K), a graph is a symmetric
(N, N) matrix G with G_ij > 0 when rows i and j are known to be related
(positive pairs). Every loss in `ssljax.losses` takes such a G.

A graph is either a dense array or a `jax.experimental.sparse.BCOO` with two
sparse dimensions (no batch or dense dimensions). `degree`, `validate_graph`,
`laplacian` and `mixed_graph` accept both and return the same kind; the
constructors return dense arrays unless called with `sparse=True`;
`to_bcoo` / `to_dense` convert. Graphs over a whole dataset (N too large
for (N, N)) are `EdgeGraph` edge lists (`ssljax.graphs.edges`). Duplicate BCOO
entries are summed, as in `BCOO.todense()`.

References:
  Balestriero & LeCun 2024, "The Birth of Self Supervised Learning: A Supervised
  Theory", Prop. 1 (sample-major G = I_n ⊗ 1_V1_Vᵀ, with diagonal). Balestriero
  & LeCun 2022, "Contrastive and Non-Contrastive Self-Supervised Learning
  Recover Global and Local Spectral Embedding Methods", arXiv
  2205.11508, §2 (graph code: view-major G = (1_V1_Vᵀ − I_V) ⊗ I_n, zero
  diagonal). Cabannes et al. 2023, "Active Self-Supervised Learning: A Few
  Low-Cost Relationships Are All You Need", arXiv 2303.15256, eq. (8). The two
  orders are the same graph after a permutation and adding I.
"""

from ssljax.graphs._core import degree
from ssljax.graphs.batch import BATCH_GRAPH_KINDS
from ssljax.graphs.batch import DATASET_GRAPH_KINDS
from ssljax.graphs.batch import batch_graph
from ssljax.graphs._core import is_bcoo
from ssljax.graphs._core import laplacian
from ssljax.graphs._core import to_bcoo
from ssljax.graphs._core import to_dense
from ssljax.graphs._core import validate_graph
from ssljax.graphs.edges import EdgeGraph
from ssljax.graphs.edges import knn_edges
from ssljax.graphs.edges import load_edge_list
from ssljax.graphs.edges import pixel_features
from ssljax.graphs.edges import supervised_edges
from ssljax.graphs.edges import symmetrize_edges
from ssljax.graphs.knn import knn_graph
from ssljax.graphs.labels import mixed_graph
from ssljax.graphs.ops import as_graph
from ssljax.graphs.ops import EDGE_CHUNK
from ssljax.graphs.ops import graph_matmul
from ssljax.graphs.ops import graph_quadratic
from ssljax.graphs.ops import graph_sq_norm
from ssljax.graphs.ops import edge_arrays
from ssljax.graphs.ops import total_weight
from ssljax.graphs.ops import check_cross_graph
from ssljax.graphs.labels import normalized_supervised_graph
from ssljax.graphs.labels import signed_graph
from ssljax.graphs.labels import supervised_graph
from ssljax.graphs.views import views_graph

__all__ = [
    "views_graph", "supervised_graph", "normalized_supervised_graph",
    "mixed_graph", "signed_graph", "knn_graph", "laplacian", "degree",
    "validate_graph", "is_bcoo", "to_bcoo", "to_dense",
    # The graph kinds of a run's config; the graph of a training batch.
    "BATCH_GRAPH_KINDS", "DATASET_GRAPH_KINDS", "batch_graph",
    # Graph maths shared by the losses (dense or BCOO G).
    "as_graph", "graph_matmul", "graph_quadratic", "graph_sq_norm",
    "edge_arrays", "total_weight", "check_cross_graph", "EDGE_CHUNK",
    # Whole-dataset graphs as edge lists (memory O(E)): ssljax.graphs.edges.
    "EdgeGraph", "symmetrize_edges", "knn_edges", "pixel_features",
    "supervised_edges", "load_edge_list",
]
