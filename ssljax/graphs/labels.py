"""Graphs from labels and pairs: supervised, normalised, mixed, signed.

References: Cabannes et al. 2023, "Active Self-Supervised Learning: A Few
Low-Cost Relationships Are All You Need", arXiv 2303.15256.
"""

from __future__ import annotations

import jax
from jax.experimental import sparse as jsparse
import jax.numpy as jnp
import numpy as np

from ssljax.checks import check_positive_int, is_concrete
from ssljax.graphs._core import bcoo_from_coo, check_square, is_bcoo, to_dense


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
    num_classes = check_positive_int(num_classes, "num_classes")
  if is_concrete(labels) and labels.size:
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
    if not is_concrete(labels_N):
      raise ValueError(
          "sparse=True needs concrete labels (the number of stored entries"
          " depends on their values); got a tracer, use sparse=False under"
          " jit")
    rows, cols, sizes = _same_class_pairs(np.asarray(jax.device_get(labels_N)))
    data = 1.0 / sizes if normalized else np.ones(rows.shape)
    return bcoo_from_coo(data, rows, cols, n, dtype)
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
  Balestriero & LeCun 2024 §2.2 and Cabannes et al. 2023 eq. (7) (which prints
  Y_supᵀY_sup, a C×C matrix, for Y_sup Y_supᵀ, and `≠` for `1{y_i = y_j}`). With
  A augmentations per sample in sample-major order, pass `np.repeat(labels, A)`
  to get Y_sup = Y ⊗ 1_A.

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
    Balestriero & LeCun 2024, "The Birth of Self Supervised Learning: A
    Supervised Theory", §2.2 and Prop. 1 (G = YYᵀ in rows; its Theorem 1 writes
    G = YᵀY in columns). Cabannes et al. 2023, arXiv 2303.15256, §3.1 and eq.
    (7), where G_ij = 1{y_i = y_j} (the printed "≠" is a typo) and G = Y_sup
    Y_supᵀ (the printed Y_supᵀY_sup is C×C).

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
  Z = Y (Cabannes et al. 2023, arXiv 2303.15256, Theorem 2 and App. B.2.4 claim
  zero loss at Z = Y for the un-normalised graph). Rows of G_n sum to 1 (for
  labelled rows), and G_n is the orthogonal projector onto span(Y).

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
    Cabannes et al. 2023, arXiv 2303.15256, Theorem 2 / App. B.2.4, which hold
    for G_n and not for YYᵀ: with YYᵀ, Z = Y has loss Σ_c (N_c − 1)² and
    zero-loss Z exist outside span(Y); with G_n the loss at Z = YΛ is
    0.

  Example:
    >>> normalized_supervised_graph(jnp.array([0, 0, 1])).tolist()
    [[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]
  """
  return _labels_graph(labels, num_classes, dtype, sparse, normalized=True)


def mixed_graph(g_ssl, g_sup, alpha):
  """Convex mix (1 − α)·G_ssl + α·G_sup of an SSL and a supervised graph.

  α = 0 is pure SSL, α = 1 pure supervised (Cabannes et al. 2023 §3.1, eq. (7)).
  If both graphs are BCOO the result is a BCOO whose entries are the two entry
  lists concatenated (duplicates are summed by every consumer, nse adds up);
  otherwise the result is dense. jit-able; α may be traced.

  Args:
    g_ssl: (N, N) SSL graph (e.g. `views_graph`), dense or BCOO.
    g_sup: (N, N) supervised graph (e.g. `supervised_graph`), dense or BCOO.
    alpha: mixing weight in [0, 1] (checked when concrete).

  Returns:
    (N, N) graph, BCOO iff both inputs are BCOO; dtype is the promotion of the
      two inputs' dtypes.

  Raises:
    ValueError: if a graph is not square, the shapes differ, or a concrete
      alpha is outside [0, 1].

  References:
    Cabannes et al. 2023 §3.1, eq. (7): G = (1 − α)G_ssl + αG_sup (rows
    convention).

  Example:
    >>> g = mixed_graph(jnp.eye(2), jnp.ones((2, 2)), 0.25)
    >>> g.tolist()
    [[1.0, 0.25], [0.25, 1.0]]
  """
  shape_ssl = check_square(g_ssl, "g_ssl")
  shape_sup = check_square(g_sup, "g_sup")
  if shape_ssl != shape_sup:
    raise ValueError(
        f"g_ssl and g_sup must have the same (N, N) shape, got {shape_ssl}"
        f" and {shape_sup}")
  if is_concrete(alpha) and not 0.0 <= float(alpha) <= 1.0:
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
  PAL oracles, Cabannes et al. 2023 eq. (15)). A pair listed twice is set once
  (not summed); (i, i) sets the diagonal. Pairs are host data (numpy), so this
  is not jit-able. Note: G is not PSD in general, so Balestriero & LeCun 2024
  Observation 3 ((VᵀGV)_kk ≥ 0) does not hold (it needs a PSD G).

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
    Cabannes et al. 2023, arXiv 2303.15256, §4 eq. (15) (signed graph of the PAL
    oracles). For such a signed G, (VᵀGV)_kk >= 0 (Observation 3 of Balestriero
    & LeCun 2024) no longer holds: it needs a PSD G.

  Example:
    >>> signed_graph(3, [[0, 1]], [[1, 2]]).astype(int).tolist()
    [[0, 1, 0], [1, 0, -1], [0, -1, 0]]
  """
  n = check_positive_int(n, "n")
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
    return bcoo_from_coo(data, rows, cols, n, dtype)
  g_NxN = np.zeros((n, n))
  g_NxN[rows, cols] = data
  return jnp.asarray(g_NxN, dtype=dtype)
