"""Graph bookkeeping for PAL: known positives, known negatives, unknown.

`PairGraph` records pair answers 1{x_i ~ x_j} and completes them with the
two deductions that similarity (an equivalence relation) allows (Cabannes et al.
2023 Fig. 6):

* transitivity of positives: i ~ j and j ~ k  =>  i ~ k (union-find over
  the positive components);
* negatives implied by a positive: i ~ j and j !~ k  =>  i !~ k (a negative
  answer links two components, so every pair across them is negative).

Views of the completed graph (rows = samples, diagonal = 1 since i ~ i):
`signed()` is the contrastive graph of Cabannes et al. 2023 (arXiv 2303.15256)
eq. (15) (+1 / -1 / 0 for known-positive / known-negative / unknown);
`non_contrastive()` is its 1/0 version; `raw_signed()` holds only the entries
that were answered (no deduction: the passive baseline of Fig. 6).
`connected_components` counts the components of any graph's positive entries
(Cabannes et al. 2023 Fig. 9).

Noisy answers may contradict the completion (a positive across two
components known to be negative, or a negative inside a component). With
`on_conflict="ignore"` (default) the earlier knowledge wins and the answer
is counted in `conflicts`; "raise" raises ValueError.

References:
  Cabannes et al. 2023 Fig. 6 (reconstructed graphs), eq. (15) (signed graph),
  App. C.2.5 / Fig. 9 (connected components), Algorithm 3 ("deduction to fill
  G").
"""

from __future__ import annotations

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

__all__ = ["PairGraph", "connected_components"]


def connected_components(g) -> int:
  """Number of connected components of the graph of positive entries g > 0.

  Args:
    g: (N, N) array (dense numpy/jax or scipy sparse); entries > 0 are
      edges, anything else (0, negatives) is not.

  Returns:
    The number of connected components (isolated nodes count as one each).

  Raises:
    ValueError: if g is not square rank 2.

  References:
    Cabannes et al. 2023 App. C.2.5, Fig. 9.
  """
  if scipy.sparse.issparse(g):
    adj = (g > 0).astype(np.int8)
  else:
    arr = np.asarray(g)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
      raise ValueError(f"g must be a square (N, N) graph, got shape"
                       f" {arr.shape}")
    adj = scipy.sparse.csr_matrix(arr > 0)
  if adj.shape[0] != adj.shape[1]:
    raise ValueError(f"g must be a square (N, N) graph, got shape {adj.shape}")
  return int(scipy.sparse.csgraph.connected_components(adj, directed=False)[0])


class PairGraph:
  """Known positives / negatives among N samples, with transitive completion.

  Args:
    n: number of samples N.
    on_conflict: "ignore" (keep earlier knowledge, count the conflict) or
      "raise" (ValueError) when an answer contradicts the completion.

  Raises:
    ValueError: if n < 1 or on_conflict is unknown.

  Example:
    >>> pg = PairGraph(4)
    >>> _ = pg.add(0, 1, True), pg.add(1, 2, False)
    >>> pg.signed().astype(int).tolist()[0]  # 0~1 and 1!~2 give 0!~2
    [1, 1, -1, 0]
  """

  def __init__(self, n: int, *, on_conflict: str = "ignore"):
    if int(n) != n or n < 1:
      raise ValueError(f"n must be a positive integer, got {n!r}")
    if on_conflict not in ("ignore", "raise"):
      raise ValueError(f"on_conflict must be 'ignore' or 'raise', got"
                       f" {on_conflict!r}")
    self.n = int(n)
    self.on_conflict = on_conflict
    self._parent = np.arange(self.n)
    self._size = np.ones(self.n, np.int64)
    self._neg: dict[int, set[int]] = {}  # root -> roots known negative
    self._raw: dict[tuple[int, int], bool] = {}  # (min, max) -> last answer
    # Accepted negative answers (i, j) as samples: their components are the
    # known-negative component pairs, whatever merges happen later.
    self._neg_i: list[int] = []
    self._neg_j: list[int] = []
    self.conflicts = 0
    self._cache = None
    self._raw_cache = None

  # -- union-find -----------------------------------------------------------
  def _find(self, i: int) -> int:
    root = i
    while self._parent[root] != root:
      root = self._parent[root]
    while self._parent[i] != root:  # path compression
      self._parent[i], i = root, self._parent[i]
    return int(root)

  def _check_index(self, i, name: str) -> int:
    if int(i) != i or not 0 <= i < self.n:
      raise ValueError(f"{name} must be an index in [0, {self.n}), got {i!r}")
    return int(i)

  def _conflict(self, msg: str) -> bool:
    if self.on_conflict == "raise":
      raise ValueError(msg)
    self.conflicts += 1
    return False

  def _record_raw(self, i, j, answer: bool) -> tuple[int, int, int, int]:
    """Checks i and j, keeps the answer as the pair's last raw answer (i ≠ j)
    and returns (i, j, root of i, root of j)."""
    i, j = self._check_index(i, "i"), self._check_index(j, "j")
    if i != j:
      self._raw[(min(i, j), max(i, j))] = answer
      self._raw_cache = None
    return i, j, self._find(i), self._find(j)

  def add_positive(self, i: int, j: int) -> bool:
    """Records i ~ j; returns False if it was ignored as a conflict."""
    i, j, a, b = self._record_raw(i, j, True)
    if a == b:
      return True
    if b in self._neg.get(a, ()):
      return self._conflict(f"positive answer ({i}, {j}) contradicts a known"
                            " negative between their components")
    if self._size[a] < self._size[b]:
      a, b = b, a
    self._parent[b] = a
    self._size[a] += self._size[b]
    for r in self._neg.pop(b, set()):  # b's negatives become a's
      self._neg[r].discard(b)
      self._neg[r].add(a)
      self._neg.setdefault(a, set()).add(r)
    self._cache = None
    return True

  def add_negative(self, i: int, j: int) -> bool:
    """Records i !~ j; returns False if it was ignored as a conflict."""
    i, j, a, b = self._record_raw(i, j, False)
    if a == b:
      return self._conflict(f"negative answer ({i}, {j}) contradicts a known"
                            " positive chain between them")
    if b not in self._neg.get(a, ()):
      self._neg_i.append(i)
      self._neg_j.append(j)
      self._neg.setdefault(a, set()).add(b)
      self._neg.setdefault(b, set()).add(a)
      self._cache = None
    return True

  def add(self, i: int, j: int, answer: bool) -> bool:
    """Records the answer 1{x_i ~ x_j} (positive if truthy)."""
    return self.add_positive(i, j) if answer else self.add_negative(i, j)

  def add_many(self, i, j, answers) -> None:
    """Records answers[m] for the pairs (i[m], j[m])."""
    for a, b, ans in zip(np.asarray(i).tolist(), np.asarray(j).tolist(),
                         np.asarray(answers).tolist()):
      self.add(a, b, bool(ans))

  # -- queries --------------------------------------------------------------
  def _state(self):
    """(component id per sample (N,), sizes (C,), sorted negative keys)."""
    if self._cache is None:
      roots = self._parent.copy()
      while True:  # pointer jumping to the roots
        nxt = roots[roots]
        if np.array_equal(nxt, roots):
          break
        roots = nxt
      # Roots are sample indices: an (N,) table maps them to component ids
      # without a Python dict (this runs after every answer batch).
      is_root = np.zeros(self.n, bool)
      is_root[roots] = True
      pos_of_root = np.cumsum(is_root) - 1
      comp = pos_of_root[roots]
      ncomp = int(is_root.sum())
      sizes = np.bincount(comp, minlength=ncomp)
      ca = comp[np.array(self._neg_i, np.int64)]
      cb = comp[np.array(self._neg_j, np.int64)]
      keys = np.unique(np.concatenate([ca * ncomp + cb, cb * ncomp + ca]))
      self._cache = (comp, sizes, keys, ncomp)
    return self._cache

  @staticmethod
  def _in_sorted(query: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Elementwise query ∈ keys for sorted unique keys (binary search)."""
    pos = np.minimum(np.searchsorted(keys, query), keys.size - 1)
    return keys[pos] == query

  def component_ids(self) -> np.ndarray:
    """(N,) int component id of each sample (ids are 0..C-1)."""
    return self._state()[0].copy()

  def num_components(self) -> int:
    """Number of positive components (equivalence classes) C."""
    return int(self._state()[3])

  def same(self, i: int, j: int) -> bool:
    """True if i ~ j is known (directly or by transitivity)."""
    return self._find(self._check_index(i, "i")) == self._find(
        self._check_index(j, "j"))

  def known_negative(self, i: int, j: int) -> bool:
    """True if i !~ j is known (directly or deduced)."""
    a = self._find(self._check_index(i, "i"))
    return self._find(self._check_index(j, "j")) in self._neg.get(a, ())

  def block(self, rows, cols, *, signed: bool = True,
            dtype=np.float64) -> np.ndarray:
    """Completed graph entries G[rows][:, cols].

    Args:
      rows: (R,) int indices.
      cols: (S,) int indices.
      signed: +1 / -1 / 0 if True (Cabannes et al. 2023 eq. 15), else 1 / 0.
      dtype: output dtype.

    Returns:
      (R, S) array; the entry for i == j is 1.
    """
    comp, _, keys, ncomp = self._state()
    cr = comp[np.asarray(rows)]
    cc = comp[np.asarray(cols)]
    out = (cr[:, None] == cc[None, :]).astype(dtype)
    if signed and keys.size:
      neg = self._in_sorted(cr[:, None] * ncomp + cc[None, :], keys)
      out[neg] = -1
    return out

  def signed(self, dtype=np.float64) -> np.ndarray:
    """(N, N) completed contrastive graph: +1 known ~, -1 known !~, 0."""
    idx = np.arange(self.n)
    return self.block(idx, idx, signed=True, dtype=dtype)

  def non_contrastive(self, dtype=np.float64) -> np.ndarray:
    """(N, N) completed non-contrastive graph: 1 known ~, else 0."""
    idx = np.arange(self.n)
    return self.block(idx, idx, signed=False, dtype=dtype)

  def _raw_arrays(self):
    """Sorted keys i·N + j (both orders) of answered pairs, and ±1 values."""
    if self._raw_cache is None:
      if self._raw:
        ij = np.array(list(self._raw.keys()), np.int64)
        val = np.where(np.array(list(self._raw.values())), 1.0, -1.0)
        keys = np.concatenate([ij[:, 0] * self.n + ij[:, 1],
                               ij[:, 1] * self.n + ij[:, 0]])
        vals = np.concatenate([val, val])
        order = np.argsort(keys)
        self._raw_cache = (keys[order], vals[order])
      else:
        self._raw_cache = (np.zeros(0, np.int64), np.zeros(0))
    return self._raw_cache

  def raw_block(self, rows, cols, *, signed: bool = True,
                dtype=np.float64) -> np.ndarray:
    """Answered entries only (no deduction) of G[rows][:, cols].

    Args:
      rows: (R,) int indices.
      cols: (S,) int indices.
      signed: +1 / -1 / 0 if True, else 1 / 0.
      dtype: output dtype.

    Returns:
      (R, S) array with 1 where rows[a] == cols[b] (i ~ i) and, elsewhere, the
        last answer given for that pair (0 if never asked).
    """
    rows, cols = np.asarray(rows), np.asarray(cols)
    out = (rows[:, None] == cols[None, :]).astype(dtype)
    keys, vals = self._raw_arrays()
    if keys.size:
      q = rows[:, None].astype(np.int64) * self.n + cols[None, :]
      pos = np.minimum(np.searchsorted(keys, q), keys.size - 1)
      hit = (keys[pos] == q) & (q // self.n != q % self.n)
      v = vals[pos] if signed else np.maximum(vals[pos], 0.0)
      out[hit] = v[hit]
    return out

  def raw_signed(self, dtype=np.float64) -> np.ndarray:
    """(N, N) answered entries only (no deduction), +1/-1/0, diagonal 1."""
    idx = np.arange(self.n)
    return self.raw_block(idx, idx, signed=True, dtype=dtype)

  def raw_degree(self, *, signed: bool = True) -> np.ndarray:
    """(N,) row sums of the answered-only graph (diagonal included)."""
    keys, vals = self._raw_arrays()
    v = vals if signed else np.maximum(vals, 0.0)
    return 1.0 + np.bincount(keys // self.n, weights=v, minlength=self.n)

  def degree(self, *, signed: bool = True) -> np.ndarray:
    """(N,) row sums of the completed graph (diagonal included)."""
    comp, sizes, keys, ncomp = self._state()
    deg_c = sizes.astype(np.float64)
    if signed and keys.size:
      a, b = np.divmod(keys, ncomp)
      np.subtract.at(deg_c, a, sizes[b])
    return deg_c[comp]

  def counts(self) -> dict:
    """Ordered off-diagonal pairs known positive / negative / unknown."""
    comp, sizes, keys, ncomp = self._state()
    pos = int(np.sum(sizes.astype(np.int64) ** 2) - self.n)
    a, b = np.divmod(keys, ncomp)
    neg = int(np.sum(sizes[a] * sizes[b]))
    return {"positive": pos, "negative": neg,
            "unknown": self.n * (self.n - 1) - pos - neg,
            "answered": len(self._raw)}
