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

import operator

import jax
from jax.experimental import sparse as jsparse
import jax.numpy as jnp
import numpy as np

__all__ = ["views_graph", "degree", "validate_graph", "is_bcoo", "to_bcoo",
           "to_dense"]

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
) -> jax.Array:
  """Dense V-view SSL graph: rows are related iff they are views of one sample.

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

  Returns:
    (n·v, n·v) symmetric 0/1 array of `dtype`; every row sums to V − 1
    (V with self loops).

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
    return g.sum(axis=1).todense()
  g = jnp.asarray(g)
  _check_square(g, "g")
  return jnp.sum(g, axis=1)


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
      concrete g. Under jit nse must be given (it fixes the output shape);
      extra slots are padding and entries beyond nse are dropped.

  Returns:
    `BCOO` of shape (N, N), dtype of g, n_batch = n_dense = 0.

  Raises:
    ValueError: if g is not square rank 2.

  Example:
    >>> to_bcoo(views_graph(2)).nse
    4
  """
  if is_bcoo(g):
    _check_square(g, "g")
    return g
  g = jnp.asarray(g)
  _check_square(g, "g")
  return jsparse.BCOO.fromdense(g, nse=nse)


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
