"""Graph maths shared by the losses: G @ Z, Tr(ZᵀGZ), ‖G‖²_F, one code path
for a dense G and a BCOO G.

Rows are samples: Z is (N, K), G is (N, N). Every function is jit-safe,
differentiable in z, and computes in z's dtype (or the dtype given); a BCOO
G's padding entries (an index >= N, see `to_bcoo(nse=...)`) count 0 and its
duplicate entries add up, as in `BCOO.todense()`.
"""

from __future__ import annotations

import jax
from jax.experimental import sparse as jsparse
import jax.numpy as jnp
import numpy as np

from ssljax.graphs._core import is_bcoo

__all__ = ["as_graph", "graph_matmul", "graph_quadratic", "graph_sq_norm",
           "edge_arrays", "total_weight", "check_cross_graph", "EDGE_CHUNK"]

# Edges per chunk of the BCOO quadratic form: the two gathered (chunk, K) row
# blocks stay ~0.5 GB at K = 64 in float32, whatever nnz is.
EDGE_CHUNK = 1 << 20


def as_graph(g):
  """A BCOO is returned as is; anything else becomes a `jnp` array.

  Args:
    g: (N, N) dense array-like or `BCOO`, any dtype.

  Returns:
    `BCOO` or jax.Array, same shape and dtype. Raises nothing itself.
  """
  return g if is_bcoo(g) else jnp.asarray(g)


def graph_matmul(g, z) -> jax.Array:
  """G @ Z for a dense or BCOO G, in z's dtype (O(nnz·K) for a BCOO).

  Args:
    g: (N, N) dense array or `BCOO`, any real dtype (cast to z's dtype).
    z: (N, K) float array.

  Returns:
    (N, K) dense array of z's dtype.

  Raises:
    TypeError: raised by jax if the shapes do not match (there are no checks
      here; the losses check at their public boundary).
  """
  return g.astype(z.dtype) @ z


def graph_quadratic(g, z, *, chunk: int | None = None) -> jax.Array:
  """Tr(ZᵀGZ) = Σ_ij G_ij ⟨z_i, z_j⟩ for a dense or BCOO G, in z's dtype.

  This is the graph term shared by the VIC² / spectral-contrastive loss
  ‖ZZᵀ − G‖² = ‖ZᵀZ‖² − 2 Tr(ZᵀGZ) + ‖G‖² (Cabannes et al. 2023, "Active
  Self-Supervised Learning: A Few Low-Cost Relationships Are All You Need",
  arXiv 2303.15256, eq. (7)) and by the invariance Σ_ij G_ij‖z_i − z_j‖² =
  2 Tr(Zᵀ(D − G)Z) (Balestriero & LeCun 2022, "Contrastive and
  Non-Contrastive Self-Supervised Learning Recover Global and Local Spectral
  Embedding Methods", arXiv 2205.11508, §2).

  Dense: one (N, N) @ (N, K) product. BCOO: Σ_e w_e ⟨z_{r_e}, z_{c_e}⟩ over
  the stored edges in chunks of `chunk` edges, rematerialised in the
  backward pass, so memory is O(N·K + chunk·K) instead of the O(nnz·K)
  gathered rows of `G @ Z` (which needed > 6 GiB at nnz = 10^7, K = 64).

  Args:
    g: (N, N) dense array or `BCOO`, any real dtype (cast to z's dtype).
    z: (N, K) float array.
    chunk: edges per chunk for a BCOO g; None uses `EDGE_CHUNK` (2^20).

  Returns:
    scalar of z's dtype.

  Raises:
    nothing itself: shapes are checked by the calling loss.
  """
  if not is_bcoo(g):
    return jnp.sum(z * graph_matmul(g, z))
  g = g.astype(z.dtype)
  rows, cols = g.indices[:, 0], g.indices[:, 1]
  stored = (rows < g.shape[0]) & (cols < g.shape[1])
  w = jnp.where(stored, g.data, 0)
  rows, cols = jnp.where(stored, rows, 0), jnp.where(stored, cols, 0)
  nse = w.shape[0]
  chunk = min(EDGE_CHUNK if chunk is None else chunk, max(nse, 1))
  pad = -nse % chunk
  shape = (-1, chunk)
  rows = jnp.pad(rows, (0, pad)).reshape(shape)
  cols = jnp.pad(cols, (0, pad)).reshape(shape)
  w = jnp.pad(w, (0, pad)).reshape(shape)

  @jax.checkpoint  # keep only the indices per chunk, not the gathered rows
  def chunk_sum(z_NxK, r, c, w_c):
    dots = jnp.sum(z_NxK[r] * z_NxK[c], axis=1)
    return jnp.sum(w_c * dots)

  def body(total, xs):
    return total + chunk_sum(z, *xs), None

  total, _ = jax.lax.scan(body, jnp.zeros((), z.dtype), (rows, cols, w))
  return total


def graph_sq_norm(g, dtype) -> jax.Array:
  """‖G‖²_F in `dtype`; BCOO duplicates are summed first (jit-safe).

  The constant of ‖ZZᵀ − G‖² (Cabannes et al. 2023, arXiv 2303.15256,
  eq. (7)). Summing duplicates sorts all nnz entries, which dominates the
  loss at 10^7 edges; a BCOO flagged ``unique_indices=True`` (as
  `BCOO.fromdense`, `bcoo_sum_duplicates` and the constructors in
  `ssljax.graphs` return it) skips that sort.

  Args:
    g: (N, N) dense array or `BCOO`, any real dtype.
    dtype: float dtype of the result.

  Returns:
    scalar of `dtype`. Raises nothing itself.
  """
  g = g.astype(dtype)
  if is_bcoo(g):
    if not g.unique_indices:
      g = jsparse.bcoo_sum_duplicates(g, nse=g.nse)
    stored = jnp.all(g.indices < jnp.array(g.shape), axis=1)  # not padding
    return jnp.sum(jnp.where(stored, g.data, 0)**2)
  return jnp.sum(g**2)


def edge_arrays(g):
  """(rows (E,), cols (E,), weights (E,)) of a BCOO graph of any shape
  (N, M); padding entries (an index equal to the size) get weight 0 and
  in-range indices, so gathers and scatters stay in bounds."""
  (n, m), rows_E, cols_E = g.shape, g.indices[:, 0], g.indices[:, 1]
  keep_E = (rows_E < n) & (cols_E < m)
  return (jnp.clip(rows_E, 0, n - 1), jnp.clip(cols_E, 0, m - 1),
          jnp.where(keep_E, g.data, 0))


@jax.jit
def total_weight(g) -> jax.Array:
  """Σ_ij G_ij of a dense or BCOO graph of any shape (padding excluded)."""
  return jnp.sum(edge_arrays(g)[2] if is_bcoo(g) else g)


def check_cross_graph(g, n: int, m: int, name: str = "g",
                      what: str = "rows, columns"):
  """A finite (n, m) graph between two sets of rows, dense or 2-D BCOO,
  with a positive total weight (the losses divide by it).

  Shape checks always run; the value checks only on concrete arrays.

  Args:
    g: the graph; n, m: the expected shape; name: its name in messages;
    what: what its rows and columns are (e.g. "online rows, target rows").

  Returns:
    g as a jax array, or the BCOO unchanged.

  Raises:
    ValueError: another shape, a BCOO with batch or dense dimensions,
      non-finite entries, or Σ_ij G_ij <= 0.
  """
  from ssljax import checks  # pylint: disable=import-outside-toplevel
  shape = tuple(np.shape(g))
  if shape != (n, m):
    raise ValueError(f"{name} must have shape ({n}, {m}) ({what}), got "
                     f"{shape}")
  if is_bcoo(g) and (g.n_batch != 0 or g.n_dense != 0):
    raise ValueError(
        f"{name} must be a BCOO with 2 sparse dimensions (n_batch = n_dense"
        f" = 0), got n_batch = {g.n_batch}, n_dense = {g.n_dense}")
  g = g if is_bcoo(g) else jnp.asarray(g)
  if checks.is_concrete(g):
    checks.check_finite(g, name)
    with jax.ensure_compile_time_eval():  # also when called while tracing
      total = float(total_weight(g))
    if not total > 0:
      raise ValueError(f"{name} must have a positive total weight Σ_ij G_ij"
                       f" (the loss divides by it), got {total:.6g}")
  return g
