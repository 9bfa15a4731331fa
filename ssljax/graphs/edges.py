"""Sparse graphs over a whole dataset, stored as edge lists (memory O(E)).

A dataset graph G (N, N) with N = 60,000 images would take 14 GB dense; these
constructors never form it. An `EdgeGraph` holds the nonzero entries of a
symmetric G as directed pairs: every undirected edge {i, j} (i ≠ j) appears
as both (i, j) and (j, i), with the same weight, so row sums give degrees and
drawing an entry uniformly or ∝ weight gives both endpoint orders.

Sources:
  * `knn_edges`: the symmetrised k-NN graph of feature rows (e.g. pixels or
    `pixel_features(..., pca_dim=50)`), computed by scikit-learn's
    NearestNeighbors in row chunks (memory O(N·k) plus one chunk of
    distances);
  * `supervised_edges`: a random sparsification of the supervised graph
    YYᵀ − I (same-label pairs), `per_node` partners drawn per row, without
    the Σ_c N_c² dense entries;
  * `load_edge_list`: a user file (.npy (E, 2) ints, or .npz with "edges" and
    optional "weights").

NumPy only (host data); `EdgeGraph.to_bcoo` converts for the dense/BCOO
losses of `ssljax.losses` on small graphs.

References:
  Balestriero & LeCun 2022 (arXiv 2205.11508) §2 (graph formulation of SSL);
  Cabannes et al. 2023, arXiv 2303.15256, §3.1, eq. (7) (supervised graph);
  Dwibedi et al. 2021 (NNCLR) for neighbours as positives.
"""

from __future__ import annotations

import dataclasses
import zipfile

import numpy as np

from ssljax import checks, extras

__all__ = ["EdgeGraph", "symmetrize_edges", "knn_edges", "pixel_features",
           "supervised_edges", "load_edge_list"]

_SYMMETRIZE = ("union", "sum")


@dataclasses.dataclass(frozen=True)
class EdgeGraph:
  """A symmetric (N, N) graph as a list of directed entries.

  Attributes:
    n: number of nodes N (rows of the dataset), int >= 1.
    rows, cols: (E,) int32 endpoints; (i, j) is present iff (j, i) is, with
      equal weight; no duplicates; sorted by (row, col).
    weights: (E,) float32 entries G_ij > 0.
  """
  n: int
  rows: np.ndarray
  cols: np.ndarray
  weights: np.ndarray

  @property
  def num_entries(self) -> int:
    """E, the stored directed entries (= nnz(G))."""
    return int(self.rows.size)

  @property
  def num_edges(self) -> int:
    """Undirected edges: pairs i < j plus self loops."""
    return int(np.sum(self.rows <= self.cols))

  def degree(self) -> np.ndarray:
    """(N,) float64 d = G1 (weighted degree)."""
    return np.bincount(self.rows, weights=self.weights, minlength=self.n)

  def to_bcoo(self, dtype=np.float32):
    """The same graph as an (N, N) `jax.experimental.sparse.BCOO`."""
    from jax.experimental import sparse as jsparse  # pylint: disable=import-outside-toplevel
    import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
    indices = np.stack([self.rows, self.cols], axis=1).astype(np.int32)
    return jsparse.BCOO((jnp.asarray(self.weights, dtype), jnp.asarray(indices)),
                        shape=(self.n, self.n), indices_sorted=True,
                        unique_indices=True)


def symmetrize_edges(n: int, rows, cols, weights=None, *,
                     mode: str = "union") -> EdgeGraph:
  """The symmetric graph of a directed pair list, in O(E log E) time.

  Args:
    n: number of nodes N.
    rows, cols: (E,) integer endpoints in [0, N).
    weights: (E,) positive finite weights, or None for 1.
    mode: "union": G_ij = max of the weights given for (i, j) or (j, i)
      (the usual k-NN graph: i ~ j if either lists the other);
      "sum": G = A + Aᵀ (duplicates add up).

  Returns:
    EdgeGraph with both orders of every pair, sorted, duplicates merged.

  Raises:
    ValueError: bad n or mode, rows/cols/weights of different shapes, an
      index outside [0, N), a weight that is not finite and > 0.
  """
  n = checks.as_positive_int(n, "n")
  if mode not in _SYMMETRIZE:
    raise ValueError(f"mode must be one of {_SYMMETRIZE}, got {mode!r}")
  rows_E = np.asarray(rows).ravel().astype(np.int64)
  cols_E = np.asarray(cols).ravel().astype(np.int64)
  w_E = (np.ones(rows_E.shape, np.float64) if weights is None
         else np.asarray(weights, np.float64).ravel())
  if not rows_E.shape == cols_E.shape == w_E.shape:
    raise ValueError(f"rows, cols and weights must have one shape, got "
                     f"{rows_E.shape}, {cols_E.shape}, {w_E.shape}")
  if rows_E.size and (min(rows_E.min(), cols_E.min()) < 0
                      or max(rows_E.max(), cols_E.max()) >= n):
    raise ValueError(f"edge endpoints must be in [0, {n}), got values in "
                     f"[{min(rows_E.min(), cols_E.min())}, "
                     f"{max(rows_E.max(), cols_E.max())}]")
  if not np.all(np.isfinite(w_E) & (w_E > 0)):
    raise ValueError("weights must be finite and > 0")
  # Keys i·N + j fit int64 for N < 3·10⁹; both orders of every pair.
  keys = np.concatenate([rows_E * n + cols_E, cols_E * n + rows_E])
  w2 = np.concatenate([w_E, w_E])
  order = np.argsort(keys, kind="stable")
  keys, w2 = keys[order], w2[order]
  starts = np.flatnonzero(np.r_[keys.size > 0, keys[1:] != keys[:-1]])
  reduce = np.maximum if mode == "union" else np.add
  merged = reduce.reduceat(w2, starts) if keys.size else w2
  out_rows, out_cols = np.divmod(keys[starts], n)
  return EdgeGraph(n, out_rows.astype(np.int32), out_cols.astype(np.int32),
                   merged.astype(np.float32))


def pixel_features(images, *, pca_dim: int = 0, seed: int = 0) -> np.ndarray:
  """Flattened pixels in [0, 1], optionally projected on their top PCs.

  Args:
    images: (N, ...) uint8 or float images.
    pca_dim: 0 keeps all pixels; > 0 projects on that many principal
      components (randomised PCA, O(N·D·pca_dim)).
    seed: seed of the randomised PCA.

  Returns:
    (N, D) float32 features (D = pixels, or pca_dim).

  Raises:
    ValueError: pca_dim < 0 or larger than min(N, pixels).
  """
  x_NxD = np.asarray(images).reshape(len(images), -1).astype(np.float32)
  if np.asarray(images).dtype == np.uint8:
    x_NxD /= 255.0
  if not 0 <= pca_dim <= min(x_NxD.shape):
    raise ValueError(f"pca_dim must be in [0, {min(x_NxD.shape)}], got {pca_dim}")
  if pca_dim == 0:
    return x_NxD
  decomposition = extras.import_module("sklearn.decomposition",
                                       "ssljax.graphs.pixel_features")
  pca = decomposition.PCA(pca_dim, svd_solver="randomized", random_state=seed)
  return pca.fit_transform(x_NxD).astype(np.float32)


def knn_edges(features, k: int, *, mode: str = "union") -> EdgeGraph:
  """Symmetrised Euclidean k-NN graph over the rows of ``features``.

  Row i's neighbours are its k nearest other rows (i is never its own
  neighbour; among equal distances the order is scikit-learn's). The
  directed relation A (A_ij = 1 iff j is a neighbour of i) becomes
  G = max(A, Aᵀ) ("union": every degree >= k, N·k <= E <= 2·N·k) or A + Aᵀ
  ("sum": weight 2 for mutual neighbours). scikit-learn computes the
  distances in row chunks (`sklearn.get_config()["working_memory"]`,
  1 GB by default), so memory is O(N·k) plus one chunk, never (N, N).

  Args:
    features: (N, D) float features, N > k.
    k: neighbours per row, int >= 1.
    mode: "union" or "sum", as in `symmetrize_edges`.

  Returns:
    EdgeGraph with weights 1 ("union") or in {1, 2} ("sum").

  Raises:
    ValueError: features not (N, D) and finite, k not in [1, N).

  References:
    ssljax.graphs.knn_graph (the dense / jit form of the same graph, cosine
    or Euclidean); Dwibedi et al. 2021 (NNCLR), §3.
  """
  x_NxD = np.asarray(features, np.float32)
  if x_NxD.ndim != 2 or not np.all(np.isfinite(x_NxD)):
    raise ValueError(f"features must be a finite (N, D) array, got shape "
                     f"{x_NxD.shape}")
  n = x_NxD.shape[0]
  k_int = checks.as_int(k, "k", f"an integer in [1, N - 1 = {n - 1}]")
  if not 1 <= k_int < n:
    raise ValueError(f"k must be an integer in [1, N - 1 = {n - 1}], got {k!r}")
  neighbors = extras.import_module("sklearn.neighbors",
                                   "ssljax.graphs.knn_edges")
  nn = neighbors.NearestNeighbors(n_neighbors=k_int, algorithm="brute").fit(x_NxD)
  nbr_Nxk = nn.kneighbors(return_distance=False)  # X=None: self excluded
  rows_Nxk = np.broadcast_to(np.arange(n)[:, None], nbr_Nxk.shape)
  return symmetrize_edges(n, rows_Nxk, nbr_Nxk, mode=mode)


def supervised_edges(labels, per_node: int, *, seed: int = 0) -> EdgeGraph:
  """A random sparse subgraph of the supervised graph, without N² entries.

  Each labelled row i draws ``per_node`` partners uniformly (with
  replacement) among the other rows of its class; the pairs are symmetrised
  with "union" (weight 1). Every labelled row of a class with >= 2 members
  has degree >= 1; P(i ~ j) ≈ 2·per_node/(N_c − 1) for i, j of class c, so G
  is (2·per_node/(N_c − 1))·(YYᵀ − I) in expectation, up to collisions.
  Rows with label −1 (unknown) or alone in their class get no edge.

  Args:
    labels: (N,) integer class ids, −1 for unknown.
    per_node: partners drawn per labelled row, int >= 1.
    seed: the draw is a pure function of (labels, per_node, seed).

  Returns:
    EdgeGraph with about 2·N·per_node entries.

  Raises:
    ValueError: labels not rank-1 integers >= −1, per_node < 1.

  References:
    Cabannes et al. 2023 §3.1, eq. (7) (G = YYᵀ, G_ij = 1{y_i = y_j}; the paper
    prints "≠").
  """
  y_N = np.asarray(labels)
  if y_N.ndim != 1 or not np.issubdtype(y_N.dtype, np.integer) or (
      y_N.size and y_N.min() < -1):
    raise ValueError(f"labels must be rank-1 integers >= -1, got "
                     f"{y_N.dtype} {y_N.shape}")
  if checks.as_int(per_node, "per_node", "an integer >= 1") < 1:
    raise ValueError(f"per_node must be an integer >= 1, got {per_node!r}")
  n = y_N.size
  rng = np.random.default_rng([seed, 0x50B])
  known = np.flatnonzero(y_N >= 0)
  members = known[np.argsort(y_N[known], kind="stable")]  # grouped by class
  _, starts, counts = np.unique(y_N[members], return_index=True,
                                return_counts=True)
  size_M = np.repeat(counts, counts)  # class size of each member
  start_M = np.repeat(starts, counts)
  pos_M = np.arange(members.size) - start_M  # position inside its class
  ok = size_M >= 2
  members, size_M, start_M, pos_M = (a[ok] for a in (members, size_M, start_M,
                                                       pos_M))
  # Uniform over the N_c − 1 others: draw in [0, N_c − 1), skip own slot.
  r_MxP = (rng.random((members.size, int(per_node)))
           * (size_M - 1)[:, None]).astype(np.int64)
  r_MxP += r_MxP >= pos_M[:, None]
  all_members = known[np.argsort(y_N[known], kind="stable")]
  partners = all_members[start_M[:, None] + r_MxP]
  rows = np.broadcast_to(members[:, None], partners.shape)
  return symmetrize_edges(n, rows, partners, mode="union")


def load_edge_list(path: str, n: int, *, mode: str = "union") -> EdgeGraph:
  """A user graph from a NumPy file, symmetrised.

  Args:
    path: ".npy" holding an (E, 2) integer array of pairs (i, j), or ".npz"
      with "edges" (E, 2) ints and optional "weights" (E,) positive floats.
      Each pair may be given in one order or both; see ``mode``.
    n: number of nodes N (the train split's size); indices must be < N.
    mode: "union" or "sum", as in `symmetrize_edges`.

  Returns:
    EdgeGraph.

  Raises:
    FileNotFoundError: no such file.
    ValueError: unknown suffix, a file that is not a valid .npy/.npz of
      that suffix (empty, truncated, corrupt, pickled objects), missing
      "edges", wrong shape or dtype, an index outside [0, N), non-positive
      or non-finite weights.
  """
  if not path.endswith((".npy", ".npz")):
    raise ValueError(f"edge list must be a .npy or .npz file, got {path!r}")
  try:
    loaded = np.load(path, allow_pickle=False)
  except FileNotFoundError:
    raise
  except (EOFError, OSError, ValueError, zipfile.BadZipFile) as e:
    raise ValueError(f"{path}: not a readable .npy/.npz file ({e})") from e
  if path.endswith(".npy"):
    if not isinstance(loaded, np.ndarray):  # e.g. an .npz renamed to .npy
      loaded.close()
      raise ValueError(f"{path}: a .npy edge list must hold one array, got "
                       f"an .npz archive")
    edges, weights = loaded, None
  else:
    if not isinstance(loaded, np.lib.npyio.NpzFile):
      raise ValueError(f"{path}: an .npz edge list must be an .npz archive, "
                       f"got a single .npy array")
    with loaded as f:
      if "edges" not in f:
        raise ValueError(f"{path}: an .npz edge list needs an 'edges' array, "
                         f"found {sorted(f.files)}")
      try:
        edges = f["edges"]
        weights = f["weights"] if "weights" in f else None
      except (EOFError, OSError, ValueError, zipfile.BadZipFile) as e:
        raise ValueError(f"{path}: unreadable array in the archive ({e})"
                         ) from e
  if edges.ndim != 2 or edges.shape[1] != 2 or not np.issubdtype(
      edges.dtype, np.integer):
    raise ValueError(f"{path}: edges must be an integer (E, 2) array, got "
                     f"{edges.dtype} {edges.shape}")
  if weights is not None and weights.shape != edges.shape[:1]:
    raise ValueError(f"{path}: weights must be ({edges.shape[0]},), got "
                     f"{weights.shape}")
  return symmetrize_edges(n, edges[:, 0], edges[:, 1], weights, mode=mode)
