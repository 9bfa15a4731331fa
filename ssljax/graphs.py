"""Similarity graphs G over the rows of an embedding matrix Z.

Rows are samples: for embeddings Z of shape (N, K), a graph is a symmetric
(N, N) matrix G with G_ij > 0 when rows i and j are known to be related
(positive pairs). Every loss in `ssljax.losses` takes such a G.

A graph is either a dense array or a `jax.experimental.sparse.BCOO` with two
sparse dimensions (no batch or dense dimensions). `degree`, `validate_graph`,
`laplacian` and `mixed_graph` accept both and return the same kind; the
constructors return dense arrays unless called with `sparse=True`;
`to_bcoo` / `to_dense` convert. Duplicate BCOO entries are summed, as in
`BCOO.todense()`.

References (keys of /work/shared/papers; FINDINGS.md overrides the papers):
  000 Balestriero & LeCun 2024, Prop. 1.
  001 Balestriero & LeCun 2022, spectral-embedding notes, §2 (graph code).
  002 Cabannes et al. 2023 (PAL), eq. (8).
"""

from __future__ import annotations

import functools
import operator

import jax
from jax.experimental import sparse as jsparse
import jax.numpy as jnp
import numpy as np

__all__ = [
    "views_graph", "supervised_graph", "normalized_supervised_graph",
    "mixed_graph", "signed_graph", "knn_graph", "laplacian", "degree",
    "validate_graph", "is_bcoo", "to_bcoo", "to_dense",
]

_ORDERS = ("view_major", "sample_major")


def is_bcoo(g) -> bool:
  """True when `g` is a `jax.experimental.sparse.BCOO` matrix."""
  return isinstance(g, jsparse.BCOO)


def _is_concrete(x) -> bool:
  """True when `x` holds actual values (it is not a tracer inside jit/grad).

  For a BCOO, both its `data` and `indices` must be concrete.
  """
  if is_bcoo(x):
    return _is_concrete(x.data) and _is_concrete(x.indices)
  return not isinstance(x, jax.core.Tracer)


def _check_finite(x, name: str) -> None:
  """Raises ValueError if concrete `x` has a NaN or inf; skips tracers.

  For a BCOO only the stored values (`x.data`) are checked.
  """
  if not _is_concrete(x):
    return
  shape = tuple(np.shape(x))
  x_np = np.asarray(jax.device_get(x.data if is_bcoo(x) else x))
  if not np.all(np.isfinite(x_np)):
    bad = int(np.size(x_np) - np.count_nonzero(np.isfinite(x_np)))
    kind = "BCOO matrix" if is_bcoo(x) else "array"
    raise ValueError(
        f"{name} must be finite, got {bad} non-finite value(s) in an {kind}"
        f" of shape {shape}")


def _bcoo_from_numpy(data, rows, cols, n: int, dtype) -> jsparse.BCOO:
  """(N, N) BCOO from numpy COO triplets, indices sorted row-major."""
  order = np.lexsort((cols, rows))
  indices = np.stack([rows[order], cols[order]], axis=1).astype(np.int32)
  return jsparse.BCOO(
      (jnp.asarray(np.asarray(data)[order], dtype=dtype), jnp.asarray(indices)),
      shape=(n, n), indices_sorted=True, unique_indices=True)


def _check_bcoo_layout(g, name: str) -> None:
  """A BCOO graph must have exactly two sparse dimensions."""
  if is_bcoo(g) and (g.n_batch != 0 or g.n_dense != 0):
    raise ValueError(
        f"{name} must be a BCOO with 2 sparse dimensions (n_batch = n_dense"
        f" = 0), got n_batch = {g.n_batch}, n_dense = {g.n_dense}")


def _check_square(g, name: str) -> tuple[int, ...]:
  shape = tuple(np.shape(g))
  if len(shape) != 2 or shape[0] != shape[1]:
    raise ValueError(f"{name} must be a square (N, N) array, got shape {shape}")
  _check_bcoo_layout(g, name)
  return shape


def _bcoo_max_asymmetry(g) -> float:
  """max |G − Gᵀ| of a concrete 2-D BCOO, in numpy (duplicates summed).

  O(nnz log nnz): entries of G enter with +value at key i·N + j, entries of
  Gᵀ with −value at key j·N + i; summing per key gives G − Gᵀ. Padding
  entries (an index >= N, see `BCOO`) are ignored, like `todense()`.
  """
  n = g.shape[0]
  data = np.asarray(jax.device_get(g.data)).astype(np.float64)
  rows, cols = np.asarray(jax.device_get(g.indices)).astype(np.int64).T
  keep = (rows >= 0) & (rows < n) & (cols >= 0) & (cols < n)
  data, rows, cols = data[keep], rows[keep], cols[keep]
  if data.size == 0:
    return 0.0
  keys = np.concatenate([rows * n + cols, cols * n + rows])
  values = np.concatenate([data, -data])
  uniq, inverse = np.unique(keys, return_inverse=True)
  diff = np.zeros(uniq.shape, np.float64)
  np.add.at(diff, inverse, values)
  return float(np.max(np.abs(diff)))


def _positive_int(value, name: str) -> int:
  if isinstance(value, bool):
    raise ValueError(f"{name} must be an int >= 1, got {value!r}")
  try:
    value_int = operator.index(value)
  except TypeError:
    raise ValueError(f"{name} must be an int >= 1, got {value!r}") from None
  if value_int < 1:
    raise ValueError(f"{name} must be an int >= 1, got {value_int}")
  return value_int


def views_graph(
    n: int,
    v: int = 2,
    *,
    order: str = "view_major",
    self_loops: bool = False,
    dtype=jnp.float32,
    sparse: bool = False,
):
  """V-view SSL graph: rows are related iff they are views of one sample.

  With N = n·v rows, the view-major order (row v·n + i is view v of sample i,
  i.e. Z = concat([Z_view1, ..., Z_viewV])) gives

      G = (1_V 1_Vᵀ − I_V) ⊗ I_n,

  zero diagonal and degree V − 1, as in the 001 and 002 code. The
  sample-major order (row i·V + v) gives I_n ⊗ (1_V 1_Vᵀ − I_V). The two
  orders are the same graph up to a permutation of rows and columns.
  `self_loops=True` adds I_N, so sample-major with self loops is
  I_n ⊗ 1_V 1_Vᵀ = YYᵀ of 000 Prop. 1 and 002 eq. (8) (FINDINGS (a) Graphs;
  001 erratum 1: the notes' `1{i = j}` should be `1{i ≠ j}`).

  Args:
    n: number of original samples, int >= 1.
    v: number of views per sample V, int >= 1 (V = 1 gives the empty graph,
      or I_n with self loops).
    order: "view_major" (default) or "sample_major".
    self_loops: if True, add the identity (every row related to itself).
    dtype: dtype of the returned matrix.
    sparse: if True, return a BCOO with nse = N·(V − 1) (N·V with self
      loops), built in O(N·V) without a dense (N, N) intermediate.

  Returns:
    (n·v, n·v) symmetric 0/1 array of `dtype` (BCOO if `sparse`); every row
    sums to V − 1 (V with self loops).

  Raises:
    ValueError: if n or v is not an int >= 1, or `order` is unknown.

  References:
    000 Prop. 1 (with the 000 erratum 8: `1{⌊n/V⌋ = j}`); 001 §2 graph code;
    002 eq. (8); FINDINGS.md (a) "Graphs".

  Example:
    >>> views_graph(2, 2).astype(int).tolist()
    [[0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0]]
    >>> views_graph(2, 2, order="sample_major").astype(int).tolist()
    [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]
  """
  n = _positive_int(n, "n")
  v = _positive_int(v, "v")
  if order not in _ORDERS:
    raise ValueError(f"order must be one of {_ORDERS}, got {order!r}")
  # Built in numpy (n, v are static) and moved once: no per-shape compiles.
  rows_N = np.arange(n * v)
  if order == "view_major":
    view_N, sample_N = rows_N // n, rows_N % n
  else:
    sample_N, view_N = rows_N // v, rows_N % v
  if sparse:
    other_V = np.arange(v)
    rows = np.repeat(rows_N, v)
    views = np.tile(other_V, n * v)
    samples = sample_N[rows]
    cols = views * n + samples if order == "view_major" else samples * v + views
    if not self_loops:
      keep = views != view_N[rows]
      rows, cols = rows[keep], cols[keep]
    return _bcoo_from_numpy(np.ones(rows.shape), rows, cols, n * v, dtype)
  related_NxN = sample_N[:, None] == sample_N[None, :]
  if not self_loops:
    related_NxN &= view_N[:, None] != view_N[None, :]
  return jnp.asarray(related_NxN, dtype=dtype)


def degree(g) -> jax.Array:
  """Degree vector d = G1 (row sums), the diagonal of D in L = D − G.

  Args:
    g: (N, N) graph, dense array or 2-D `BCOO`, any real dtype.

  Returns:
    (N,) dense array of row sums, same dtype as `g` (also for a BCOO g).

  Raises:
    ValueError: if `g` is not a square rank-2 array (or a BCOO with batch or
      dense dimensions).

  References:
    FINDINGS.md notation (D = diag(G1)); 001 §2.

  Example:
    >>> degree(views_graph(3, 4)).tolist()
    [3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]
  """
  if is_bcoo(g):
    _check_square(g, "g")
    return _bcoo_row_sums(g)
  g = jnp.asarray(g)
  _check_square(g, "g")
  return jnp.sum(g, axis=1)


@jax.jit
def _bcoo_row_sums(g):
  """Row sums of a 2-D BCOO: duplicates add up, padding rows (>= N) drop."""
  d_N = jnp.zeros(g.shape[0], g.dtype)
  return d_N.at[g.indices[:, 0]].add(g.data, mode="drop")


def validate_graph(
    g,
    n: int | None = None,
    *,
    name: str = "g",
    atol: float = 1e-6,
) -> None:
  """Checks that `g` is a valid (N, N) graph; raises ValueError otherwise.

  Shape checks (rank 2, square, size `n`) always run, also under jit. The
  value checks (symmetric within `atol`, finite) run only when `g` is
  concrete, i.e. not a tracer, so the helper is free inside jit.

  A BCOO g must have two sparse dimensions (n_batch = n_dense = 0). Its
  value checks never densify: finiteness is checked on the stored values,
  symmetry on the summed duplicates, in O(nnz log nnz) numpy work.

  Args:
    g: candidate (N, N) graph: dense array (or nested list), or 2-D `BCOO`;
      any real dtype.
    n: expected N (e.g. the number of rows of Z), or None to skip.
    name: argument name used in the error messages.
    atol: largest allowed |G_ij − G_ji|.

  Returns:
    None.

  Raises:
    ValueError: if `g` is not rank 2, not square, not of size `n`, not
      symmetric within `atol`, has NaN/inf entries, or is a BCOO with batch
      or dense dimensions.

  References:
    001 §2 and FINDINGS.md (a): G is symmetric (N, N).

  Example:
    >>> validate_graph(views_graph(3), n=6)
    >>> validate_graph(jnp.zeros((2, 3)))
    Traceback (most recent call last):
    ...
    ValueError: g must be a square (N, N) array, got shape (2, 3)
  """
  shape = _check_square(g, name)
  if n is not None and shape[0] != n:
    raise ValueError(
        f"{name} must have shape ({n}, {n}) to match N = {n} rows, got {shape}")
  if not _is_concrete(g):
    return
  _check_finite(g, name)
  if is_bcoo(g):
    asym = _bcoo_max_asymmetry(g)
  else:
    g_NxN = np.asarray(jax.device_get(g)).astype(np.float64)  # bool/int too
    asym = float(np.max(np.abs(g_NxN - g_NxN.T))) if g_NxN.size else 0.0
  if asym > atol:
    raise ValueError(
        f"{name} must be symmetric, got max |{name} - {name}.T| = {asym:.3g}"
        f" > atol = {atol:g}")


# ---------------------------------------------------------------------------
# Dense <-> BCOO.
# ---------------------------------------------------------------------------


def to_bcoo(g, *, nse: int | None = None) -> jsparse.BCOO:
  """Converts a graph to a 2-D BCOO (a BCOO input is returned unchanged).

  Args:
    g: (N, N) dense array (any real dtype) or BCOO.
    nse: number of stored entries; None (default) counts the nonzeros of a
      concrete g. Extra slots are padding (index N, value 0), so graphs of
      one size can share one nse and hence one compiled loss. Under jit nse
      must be given (it fixes the output shape) and entries beyond nse are
      silently dropped (`BCOO.fromdense`).

  Returns:
    `BCOO` of shape (N, N), dtype of g, n_batch = n_dense = 0.

  Raises:
    ValueError: if g is not square rank 2, or a concrete g has more than
      `nse` nonzeros.

  Example:
    >>> to_bcoo(views_graph(2)).nse
    4
  """
  if is_bcoo(g):
    _check_square(g, "g")
    return g
  _check_square(g, "g")
  if not _is_concrete(g):
    return jsparse.BCOO.fromdense(jnp.asarray(g), nse=nse)
  # Host-side for concrete g: no per-shape compile.
  g_NxN = np.asarray(jax.device_get(g))
  n = g_NxN.shape[0]
  rows, cols = np.nonzero(g_NxN)
  data = g_NxN[rows, cols]
  dtype = jax.dtypes.canonicalize_dtype(g_NxN.dtype)
  if nse is None:
    return _bcoo_from_numpy(data, rows, cols, n, dtype)
  nse = operator.index(nse)
  if nse < rows.size:
    raise ValueError(
        f"nse must be >= the {rows.size} nonzeros of g, got nse = {nse}")
  g = _bcoo_from_numpy(data, rows, cols, n, dtype)
  pad = nse - rows.size  # padding slots: index N, value 0 (ignored)
  return jsparse.BCOO(
      (jnp.concatenate([g.data, jnp.zeros(pad, dtype)]),
       jnp.concatenate([g.indices, jnp.full((pad, 2), n, g.indices.dtype)])),
      shape=(n, n), indices_sorted=True)


def to_dense(g) -> jax.Array:
  """Converts a graph to a dense array (a dense input is returned as jnp).

  Duplicate BCOO entries are summed and padding entries ignored.

  Args:
    g: (N, N) BCOO or dense array.

  Returns:
    (N, N) dense array of g's dtype.

  Raises:
    ValueError: if g is not square rank 2.

  Example:
    >>> to_dense(to_bcoo(views_graph(2))).astype(int).tolist()
    [[0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0]]
  """
  if is_bcoo(g):
    _check_square(g, "g")
    return g.todense()
  g = jnp.asarray(g)
  _check_square(g, "g")
  return g


# ---------------------------------------------------------------------------
# Label-defined graphs.
# ---------------------------------------------------------------------------


def _check_labels(labels, num_classes) -> jax.Array:
  """labels: rank-1 ints; -1 = unknown; concrete values in [-1, C)."""
  labels = jnp.asarray(labels)
  if labels.ndim != 1:
    raise ValueError(
        f"labels must be a rank-1 (N,) array, got shape {labels.shape}")
  if not jnp.issubdtype(labels.dtype, jnp.integer):
    raise ValueError(
        f"labels must have an integer dtype, got {labels.dtype}")
  if num_classes is not None:
    num_classes = _positive_int(num_classes, "num_classes")
  if _is_concrete(labels) and labels.size:
    lo, hi = int(jnp.min(labels)), int(jnp.max(labels))
    if lo < -1:
      raise ValueError(
          f"labels must be >= -1 (-1 = unknown), got min(labels) = {lo}")
    if num_classes is not None and hi >= num_classes:
      raise ValueError(
          f"labels must be < num_classes = {num_classes}, got max(labels) ="
          f" {hi}")
  return labels


def _same_class_pairs(labels_N: np.ndarray):
  """(rows, cols, class size) of all pairs with equal known labels (numpy)."""
  known = np.flatnonzero(labels_N >= 0)
  if known.size == 0:
    empty = np.zeros(0, np.int64)
    return empty, empty, empty
  _, inverse, counts = np.unique(labels_N[known], return_inverse=True,
                                 return_counts=True)
  by_class = np.argsort(inverse, kind="stable")
  members = known[by_class]  # rows grouped by class
  starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
  rows, cols, sizes = [], [], []
  for start, count in zip(starts, counts):
    block = members[start:start + count]
    rows.append(np.repeat(block, count))
    cols.append(np.tile(block, count))
    sizes.append(np.full(count * count, count))
  return np.concatenate(rows), np.concatenate(cols), np.concatenate(sizes)


def _labels_graph(labels, num_classes, dtype, sparse, normalized):
  labels_N = _check_labels(labels, num_classes)
  n = labels_N.shape[0]
  if sparse:
    if not _is_concrete(labels_N):
      raise ValueError(
          "sparse=True needs concrete labels (the number of stored entries"
          " depends on their values); got a tracer, use sparse=False under"
          " jit")
    rows, cols, sizes = _same_class_pairs(np.asarray(jax.device_get(labels_N)))
    data = 1.0 / sizes if normalized else np.ones(rows.shape)
    return _bcoo_from_numpy(data, rows, cols, n, dtype)
  known_N = labels_N >= 0
  same_NxN = ((labels_N[:, None] == labels_N[None, :])
              & known_N[:, None] & known_N[None, :])
  g_NxN = same_NxN.astype(dtype)
  if normalized:
    count_N = jnp.sum(same_NxN, axis=1)  # N_c of row i's class; 0 if unknown
    g_NxN = g_NxN / jnp.maximum(count_N, 1)[:, None].astype(dtype)
  return g_NxN


def supervised_graph(labels, *, num_classes: int | None = None,
                     dtype=jnp.float32, sparse: bool = False):
  """Supervised graph G = YYᵀ: G_ij = 1 iff rows i and j share a class.

  Y is the (N, C) one-hot label matrix (rows = samples); a row with label
  −1 (unknown) is a zero row of Y, so its row and column of G are zero.
  G includes the diagonal (G_ii = 1 for every labelled row), as YYᵀ in
  000 §2.2 and 002 eq. (7) (with the 002 erratum: Y_sup Y_supᵀ, and
  `1{y_i = y_j}`, not `≠`). With A augmentations per sample in sample-major
  order, pass `np.repeat(labels, A)` to get Y_sup = Y ⊗ 1_A.

  The dense form is jit-able (labels may be traced); `sparse=True` needs
  concrete labels and stores nse = Σ_c N_c² entries.

  Args:
    labels: (N,) integer class ids in [0, C), or −1 for unknown.
    num_classes: C, only used to check the labels (concrete inputs); the
      graph does not depend on it.
    dtype: dtype of the returned matrix.
    sparse: if True return a BCOO.

  Returns:
    (N, N) symmetric 0/1 matrix of `dtype` (BCOO if `sparse`).

  Raises:
    ValueError: if labels is not a rank-1 integer array, (concrete) has a
      value < −1 or >= num_classes, or sparse=True with traced labels.

  References:
    000 §2.2 and Prop. 1 (rows convention, 000 erratum 3); 002 §3.1 and
    eq. (7) (002 erratum 1); FINDINGS (a) "Graphs".

  Example:
    >>> supervised_graph(jnp.array([0, 1, 0, -1])).astype(int).tolist()
    [[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
  """
  return _labels_graph(labels, num_classes, dtype, sparse, normalized=False)


def normalized_supervised_graph(labels, *, num_classes: int | None = None,
                                dtype=jnp.float32, sparse: bool = False):
  """Class-size normalised supervised graph G_n = Y diag(1/N_c) Yᵀ.

  G_ij = 1/N_c if rows i and j both have class c, else 0; N_c counts the
  rows of class c in this batch (unknown labels −1 give zero rows and
  columns and are not counted). This is the graph under which the
  BarlowTwins graph loss is minimised (loss 0) by Z = Y D for any positive
  diagonal D, while the un-normalised YYᵀ leaves the loss Σ_c (N_c − 1)² at
  Z = Y (FINDINGS (a) "BarlowTwins", 002 erratum 5). Rows of G_n sum to 1
  (for labelled rows), and G_n is the orthogonal projector onto span(Y).

  Args:
    labels: (N,) integer class ids in [0, C), or −1 for unknown.
    num_classes: C, only used to check the labels (concrete inputs).
    dtype: dtype of the returned matrix.
    sparse: if True return a BCOO (needs concrete labels).

  Returns:
    (N, N) symmetric matrix of `dtype` (BCOO if `sparse`).

  Raises:
    ValueError: as `supervised_graph`.

  References:
    002 Theorem 2 / App. B.2.4 corrected in FINDINGS (b) 002 erratum 5;
    FINDINGS (a) "002 optima", BarlowTwins.

  Example:
    >>> normalized_supervised_graph(jnp.array([0, 0, 1])).tolist()
    [[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]
  """
  return _labels_graph(labels, num_classes, dtype, sparse, normalized=True)


def mixed_graph(g_ssl, g_sup, alpha):
  """Convex mix (1 − α)·G_ssl + α·G_sup of an SSL and a supervised graph.

  α = 0 is pure SSL, α = 1 pure supervised (002 §3.1, eq. (7)). If both
  graphs are BCOO the result is a BCOO whose entries are the two entry lists
  concatenated (duplicates are summed by every consumer, nse adds up);
  otherwise the result is dense. jit-able; α may be traced.

  Args:
    g_ssl: (N, N) SSL graph (e.g. `views_graph`), dense or BCOO.
    g_sup: (N, N) supervised graph (e.g. `supervised_graph`), dense or BCOO.
    alpha: mixing weight in [0, 1] (checked when concrete).

  Returns:
    (N, N) graph, BCOO iff both inputs are BCOO; dtype is the promotion of
    the two inputs' dtypes.

  Raises:
    ValueError: if a graph is not square, the shapes differ, or a concrete
      alpha is outside [0, 1].

  References:
    002 §3.1, eq. (7): G = (1 − α)G_ssl + αG_sup (rows convention).

  Example:
    >>> g = mixed_graph(jnp.eye(2), jnp.ones((2, 2)), 0.25)
    >>> g.tolist()
    [[1.0, 0.25], [0.25, 1.0]]
  """
  shape_ssl = _check_square(g_ssl, "g_ssl")
  shape_sup = _check_square(g_sup, "g_sup")
  if shape_ssl != shape_sup:
    raise ValueError(
        f"g_ssl and g_sup must have the same (N, N) shape, got {shape_ssl}"
        f" and {shape_sup}")
  if _is_concrete(alpha) and not 0.0 <= float(alpha) <= 1.0:
    raise ValueError(f"alpha must be in [0, 1], got {float(alpha)!r}")
  if is_bcoo(g_ssl) and is_bcoo(g_sup):
    dtype = jnp.result_type(g_ssl.dtype, g_sup.dtype, float)
    alpha = jnp.asarray(alpha, dtype)
    data = jnp.concatenate([(1 - alpha) * g_ssl.data.astype(dtype),
                            alpha * g_sup.data.astype(dtype)])
    indices = jnp.concatenate([g_ssl.indices, g_sup.indices.astype(
        g_ssl.indices.dtype)])
    return jsparse.BCOO((data, indices), shape=shape_ssl)
  a_NxN, b_NxN = to_dense(g_ssl), to_dense(g_sup)
  dtype = jnp.result_type(a_NxN.dtype, b_NxN.dtype, float)
  alpha = jnp.asarray(alpha, dtype)
  return (1 - alpha) * a_NxN.astype(dtype) + alpha * b_NxN.astype(dtype)


def _check_pairs(pairs, n: int, name: str) -> np.ndarray:
  pairs_np = np.asarray(jax.device_get(pairs))
  if pairs_np.size == 0:
    return np.zeros((0, 2), np.int64)
  if (pairs_np.ndim != 2 or pairs_np.shape[1] != 2
      or not np.issubdtype(pairs_np.dtype, np.integer)):
    raise ValueError(
        f"{name} must be an integer (P, 2) array of row indices, got shape"
        f" {pairs_np.shape} and dtype {pairs_np.dtype}")
  if pairs_np.min() < 0 or pairs_np.max() >= n:
    raise ValueError(
        f"{name} must index rows in [0, {n}), got values in"
        f" [{pairs_np.min()}, {pairs_np.max()}]")
  return pairs_np.astype(np.int64)


def signed_graph(n: int, positive_pairs, negative_pairs=(), *,
                 dtype=jnp.float32, sparse: bool = False):
  """Signed graph from pair lists: +1 positive, −1 negative, 0 unknown.

  G_ij = G_ji = +1 for every (i, j) in `positive_pairs`, −1 for every pair
  in `negative_pairs`, and 0 for pairs never queried (the "unknown" of the
  PAL oracles, 002 eq. (15)). A pair listed twice is set once (not summed);
  (i, i) sets the diagonal. Pairs are host data (numpy), so this is not
  jit-able. Note: G is not PSD in general, so 000 Observation 3
  ((VᵀGV)_kk ≥ 0) does not hold (000 erratum 5).

  Args:
    n: number of rows N, int >= 1.
    positive_pairs: (P, 2) integer row indices of related pairs, or empty.
    negative_pairs: (M, 2) integer row indices of unrelated pairs, or empty.
    dtype: dtype of the returned matrix.
    sparse: if True return a BCOO with one entry per distinct (i, j).

  Returns:
    (N, N) symmetric matrix with values in {−1, 0, +1} (BCOO if `sparse`).

  Raises:
    ValueError: if n is not an int >= 1, a pair list is not an integer
      (P, 2) array with indices in [0, n), or a pair is both positive and
      negative.

  References:
    002 §4 eq. (15) (signed graph of the PAL oracles); FINDINGS (b) 000
    erratum 5.

  Example:
    >>> signed_graph(3, [[0, 1]], [[1, 2]]).astype(int).tolist()
    [[0, 1, 0], [1, 0, -1], [0, -1, 0]]
  """
  n = _positive_int(n, "n")
  pos = _check_pairs(positive_pairs, n, "positive_pairs")
  neg = _check_pairs(negative_pairs, n, "negative_pairs")
  sym = lambda p: np.concatenate([p, p[:, ::-1]])
  pos_keys = np.unique(sym(pos) @ np.array([n, 1]))
  neg_keys = np.unique(sym(neg) @ np.array([n, 1]))
  both = np.intersect1d(pos_keys, neg_keys)
  if both.size:
    i, j = divmod(int(both[0]), n)
    raise ValueError(
        f"positive_pairs and negative_pairs must be disjoint, got pair"
        f" ({i}, {j}) in both ({both.size} entries in conflict)")
  keys = np.concatenate([pos_keys, neg_keys])
  data = np.concatenate([np.ones(pos_keys.size), -np.ones(neg_keys.size)])
  rows, cols = np.divmod(keys, n)
  if sparse:
    return _bcoo_from_numpy(data, rows, cols, n, dtype)
  g_NxN = np.zeros((n, n))
  g_NxN[rows, cols] = data
  return jnp.asarray(g_NxN, dtype=dtype)


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
    as positive); 001 §2 (graph formulation of SSL losses).

  Example:
    >>> z = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    >>> knn_graph(z, 1).astype(int).tolist()
    [[0, 1, 0], [1, 0, 1], [0, 1, 0]]
  """
  z = jnp.asarray(z)
  if z.ndim != 2:
    raise ValueError(f"z must be a rank-2 (N, K) array, got shape {z.shape}")
  n = z.shape[0]
  k = _positive_int(k, "k")
  if k > n - int(bool(exclude_self)):
    raise ValueError(
        f"k must be <= N{' - 1' if exclude_self else ''} = "
        f"{n - int(bool(exclude_self))} for z of shape {z.shape}, got {k}")
  if symmetrize not in _SYMMETRIZE:
    raise ValueError(
        f"symmetrize must be one of {_SYMMETRIZE}, got {symmetrize!r}")
  if metric not in _METRICS:
    raise ValueError(f"metric must be one of {_METRICS}, got {metric!r}")
  _check_finite(z, "z")
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


def laplacian(g, *, normalized: bool = False):
  """Graph Laplacian L = D − G (or I − D^{-1/2} G D^{-1/2}).

  Σ_ij G_ij‖z_i − z_j‖² = 2 Tr(Zᵀ L Z) (FINDINGS (a) "Invariance"); L1 = 0.
  With `normalized=True` the symmetric normalised Laplacian is returned;
  rows with degree <= 0 (isolated rows, or signed graphs) get D^{-1/2} = 0,
  i.e. L_ii = 1 and no off-diagonal entries. jit-able.

  Args:
    g: (N, N) graph, dense or BCOO.
    normalized: if True return I − D^{-1/2} G D^{-1/2}.

  Returns:
    (N, N) symmetric matrix of g's (float) dtype, BCOO iff g is (its nse is
    g.nse + N: the diagonal entries are appended).

  Raises:
    ValueError: if g is not square rank 2 (or a BCOO with batch/dense dims).

  References:
    FINDINGS (a) "Invariance"; 001 §2 (Laplacian eigenmaps view).

  Example:
    >>> laplacian(views_graph(2)).astype(int).tolist()
    [[1, 0, -1, 0], [0, 1, 0, -1], [-1, 0, 1, 0], [0, -1, 0, 1]]
  """
  _check_square(g, "g")
  if not is_bcoo(g):
    g = jnp.asarray(g)
  n = g.shape[0]
  dtype = jnp.result_type(g.dtype, float)
  d_N = degree(g).astype(dtype)
  if normalized:
    scale_N = jnp.where(d_N > 0, 1 / jnp.sqrt(jnp.where(d_N > 0, d_N, 1)), 0)
    diag_N = jnp.ones(n, dtype)
  else:
    scale_N = None
    diag_N = d_N
  if is_bcoo(g):
    data = g.data.astype(dtype)
    if scale_N is not None:
      rows, cols = g.indices[:, 0], g.indices[:, 1]
      # Padding indices (== N) read a clipped scale; their data stays ignored.
      data = data * scale_N[jnp.minimum(rows, n - 1)] * scale_N[
          jnp.minimum(cols, n - 1)]
    diag_idx = jnp.broadcast_to(jnp.arange(n, dtype=g.indices.dtype)[:, None],
                                (n, 2))
    return jsparse.BCOO((jnp.concatenate([diag_N, -data]),
                         jnp.concatenate([diag_idx, g.indices])),
                        shape=(n, n))
  g_NxN = g.astype(dtype)
  if scale_N is not None:
    g_NxN = scale_N[:, None] * g_NxN * scale_N[None, :]
  return jnp.diag(diag_N) - g_NxN
