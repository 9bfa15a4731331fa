"""Graph checks, degree, validation, Laplacian and dense <-> BCOO conversion."""

from __future__ import annotations

import operator

import jax
from jax.experimental import sparse as jsparse
import jax.numpy as jnp
import numpy as np

from ssljax.checks import check_finite, is_concrete

# The two row orders of a multi-view batch (see `views_graph`).
ORDERS = ("view_major", "sample_major")


def is_bcoo(g) -> bool:
  """True when `g` is a `jax.experimental.sparse.BCOO` matrix."""
  return isinstance(g, jsparse.BCOO)


def bcoo_from_coo(data, rows, cols, n: int, dtype) -> jsparse.BCOO:
  """(N, N) BCOO from NumPy COO triplets, indices sorted row-major.

  Args:
    data: (E,) values; rows, cols: (E,) int indices in [0, n), no duplicate
      (row, col) pair (the result is flagged `unique_indices=True`).
    n: N, the side of the matrix.
    dtype: dtype of the stored values.

  Returns:
    `BCOO` of shape (n, n) with E stored entries, int32 indices.
  """
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


def check_square(g, name: str) -> tuple[int, ...]:
  """g must be a square rank-2 array or a 2-D BCOO; returns its shape.

  Raises:
    ValueError: if g is not (N, N), or is a BCOO with batch or dense
      dimensions.
  """
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


def _device_max_asymmetry(g_NxN: jax.Array) -> float:
  """max |G − Gᵀ| of a dense jax array, reduced on its device.

  Only the scalar comes back to the host (no copy of G). bool/int graphs are
  compared in the default float dtype.
  """
  with jax.ensure_compile_time_eval():  # also when called while tracing
    g_NxN = g_NxN.astype(jnp.result_type(g_NxN.dtype, float))
    return float(jnp.max(jnp.abs(g_NxN - g_NxN.T), initial=0.0))


def _dense_max_asymmetry(g_NxN: np.ndarray, block: int = 256) -> float:
  """max |G − Gᵀ| of a dense (N, N) numpy array, in float64 (bool/int too).

  Compares block rows of the upper triangle with block columns of the
  lower one: cache-friendly transposed reads and no N×N temporaries.
  """
  n, asym = g_NxN.shape[0], 0.0
  for i in range(0, n, block):
    j = min(i + block, n)
    diff = np.subtract(g_NxN[i:j, i:], g_NxN[i:, i:j].T, dtype=np.float64)
    asym = max(asym, float(np.max(np.abs(diff))))
  return asym


def degree(g, *, dtype=None) -> jax.Array:
  """Degree vector d = G1 (row sums), the diagonal of D in L = D − G.

  Args:
    g: (N, N) graph, dense array or 2-D `BCOO`, any real dtype.
    dtype: if given, G's values are cast to it before summing.

  Returns:
    (N,) dense array of row sums, of `dtype` or else g's dtype (also for a BCOO
      g).

  Raises:
    ValueError: if `g` is not a square rank-2 array (or a BCOO with batch or
      dense dimensions).

  References:
    Balestriero & LeCun 2022, arXiv 2205.11508, §2 (D = diag(G1)).

  Example:
    >>> degree(views_graph(3, 4)).tolist()
    [3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]
  """
  if is_bcoo(g):
    check_square(g, "g")
    return _bcoo_row_sums(g if dtype is None else g.astype(dtype))
  g = jnp.asarray(g)
  check_square(g, "g")
  return jnp.sum(g if dtype is None else g.astype(dtype), axis=1)


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
    g: candidate (N, N)
    graph: dense array (or nested list), or 2-D `BCOO`;
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
    Balestriero & LeCun 2022, arXiv 2205.11508, §2: G is a symmetric (N, N)
    matrix over the rows (samples).

  Example:
    >>> validate_graph(views_graph(3), n=6)
    >>> validate_graph(jnp.zeros((2, 3)))
    Traceback (most recent call last):
    ...
    ValueError: g must be a square (N, N) array, got shape (2, 3)
  """
  shape = check_square(g, name)
  if n is not None and shape[0] != n:
    raise ValueError(
        f"{name} must have shape ({n}, {n}) to match N = {n} rows, got {shape}")
  if not is_concrete(g):
    return
  check_finite(g, name)
  if is_bcoo(g):
    asym = _bcoo_max_asymmetry(g)
  elif isinstance(g, jax.Array):
    asym = _device_max_asymmetry(g)
  else:  # host data (NumPy, lists) is checked where it is
    asym = _dense_max_asymmetry(np.asarray(g))
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
    check_square(g, "g")
    return g
  check_square(g, "g")
  if not is_concrete(g):
    return jsparse.BCOO.fromdense(jnp.asarray(g), nse=nse)
  # Host-side for concrete g: no per-shape compile.
  g_NxN = np.asarray(jax.device_get(g))
  n = g_NxN.shape[0]
  rows, cols = np.nonzero(g_NxN)
  data = g_NxN[rows, cols]
  dtype = jax.dtypes.canonicalize_dtype(g_NxN.dtype)
  if nse is None:
    return bcoo_from_coo(data, rows, cols, n, dtype)
  nse = operator.index(nse)
  if nse < rows.size:
    raise ValueError(
        f"nse must be >= the {rows.size} nonzeros of g, got nse = {nse}")
  g = bcoo_from_coo(data, rows, cols, n, dtype)
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
    check_square(g, "g")
    return g.todense()
  g = jnp.asarray(g)
  check_square(g, "g")
  return g


def laplacian(g, *, normalized: bool = False):
  """Graph Laplacian L = D − G (or I − D^{-1/2} G D^{-1/2}).

  Σ_ij G_ij‖z_i − z_j‖² = 2 Tr(Zᵀ L Z) (exact identity); L1 = 0. With
  `normalized=True` the symmetric normalised Laplacian is returned; rows with
  degree <= 0 (isolated rows, or signed graphs) get D^{-1/2} = 0, i.e. L_ii = 1
  and no off-diagonal entries. jit-able.

  Args:
    g: (N, N) graph, dense or BCOO.
    normalized: if True return I − D^{-1/2} G D^{-1/2}.

  Returns:
    (N, N) symmetric matrix of g's (float) dtype, BCOO iff g is (its nse is
      g.nse + N: the diagonal entries are appended).

  Raises:
    ValueError: if g is not square rank 2 (or a BCOO with batch/dense dims).

  References:
    Balestriero & LeCun 2022, arXiv 2205.11508, §2 (Laplacian eigenmaps view of
    the invariance term Σ_ij G_ij‖z_i − z_j‖² = 2 Tr(ZᵀLZ)).

  Example:
    >>> laplacian(views_graph(2)).astype(int).tolist()
    [[1, 0, -1, 0], [0, 1, 0, -1], [-1, 0, 1, 0], [0, -1, 0, 1]]
  """
  check_square(g, "g")
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
