"""Boundary checks shared by the losses (run outside jit, on concrete values)."""

from __future__ import annotations

import math
import operator

import jax
from jax.experimental import sparse as jsparse
import jax.numpy as jnp

from ssljax import graphs


def _as_float(x) -> jax.Array:
  """jnp array; integer/bool inputs are promoted to the default float."""
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(jnp.result_type(float))
  return x


def _check_embeddings(z, name: str) -> None:
  """z must be rank 2 with N >= 2 rows (ddof=1 covariance) and finite."""
  if z.ndim != 2:
    raise ValueError(f"{name} must be a rank-2 (N, K) array, got shape {z.shape}")
  if z.shape[0] < 2:
    raise ValueError(
        f"{name} must have N >= 2 rows for the ddof=1 covariance, got shape"
        f" {z.shape}")
  if z.shape[1] < 1:
    raise ValueError(f"{name} must have K >= 1 columns, got shape {z.shape}")
  graphs._check_finite(z, name)  # pylint: disable=protected-access


def _check_eps(eps) -> None:
  if graphs._is_concrete(eps) and not float(eps) >= 0:  # pylint: disable=protected-access
    raise ValueError(f"eps must be >= 0, got {eps!r}")


def _check_matrix(z, name: str, *, min_rows: int = 1, why: str = "") -> None:
  """z must be rank 2 with N >= min_rows rows, K >= 1 columns, and finite.

  `why` completes the message for too few rows (e.g. "for a softmax over the
  other rows").
  """
  if z.ndim != 2:
    raise ValueError(f"{name} must be a rank-2 (N, K) array, got shape {z.shape}")
  if z.shape[0] < min_rows:
    reason = f" {why}" if why else ""
    raise ValueError(
        f"{name} must have N >= {min_rows} rows{reason}, got shape {z.shape}")
  if z.shape[1] < 1:
    raise ValueError(f"{name} must have K >= 1 columns, got shape {z.shape}")
  graphs._check_finite(z, name)  # pylint: disable=protected-access


def _check_same_shape(a, b, name_a: str, name_b: str) -> None:
  if a.shape != b.shape:
    raise ValueError(
        f"{name_a} and {name_b} must have the same (N, K) shape, got {a.shape}"
        f" and {b.shape}")


def _two_views(z1, z2) -> tuple[jax.Array, jax.Array]:
  """z1, z2 as float arrays, checked as two (N, K) views of one batch."""
  z1_NxK, z2_NxK = _as_float(z1), _as_float(z2)
  if z1_NxK.ndim != 2:
    raise ValueError(f"z1 must be a rank-2 (N, K) array, got shape {z1_NxK.shape}")
  _check_same_shape(z1_NxK, z2_NxK, "z1", "z2")
  _check_embeddings(z1_NxK, "z1")
  _check_embeddings(z2_NxK, "z2")
  return z1_NxK, z2_NxK


def _check_positive(value, name: str) -> None:
  """A concrete hyper-parameter must be finite and > 0 (tracers skipped)."""
  if graphs._is_concrete(value):  # pylint: disable=protected-access
    v = float(value)
    if not (math.isfinite(v) and v > 0):
      raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _check_block_size(block_size) -> int | None:
  """None or an int >= 1 (static: it fixes the shapes of the blocks)."""
  if block_size is None:
    return None
  if isinstance(block_size, bool):
    raise ValueError(f"block_size must be None or an int >= 1, got {block_size!r}")
  try:
    b = operator.index(block_size)
  except TypeError:
    raise ValueError(
        f"block_size must be None or an int >= 1, got {block_size!r}") from None
  if b < 1:
    raise ValueError(f"block_size must be None or an int >= 1, got {b}")
  return b


# ---------------------------------------------------------------------------
# Graph helpers: the same code path for a dense G and a BCOO G.
# ---------------------------------------------------------------------------


def _as_graph(g):
  """A BCOO is passed through; anything else becomes a jnp array."""
  return g if graphs.is_bcoo(g) else jnp.asarray(g)


def _graph_astype(g, dtype):
  """g (dense or BCOO) with its values cast to `dtype` (indices untouched)."""
  return g.astype(dtype)


def _graph_matmul(g, z):
  """G @ Z for a dense or BCOO G (O(nnz·K) for a BCOO), in z's dtype."""
  return _graph_astype(g, z.dtype) @ z


# Edges per chunk of the BCOO quadratic form: the two gathered (chunk, K) row
# blocks stay ~0.5 GB at K = 64 in float32, whatever nnz is.
_EDGE_CHUNK = 1 << 20


def _graph_quadratic(g, z):
  """Tr(ZᵀGZ) = Σ_ij G_ij ⟨z_i, z_j⟩ for a dense or BCOO G, in z's dtype.

  Dense: one (N, N) @ (N, K) product. BCOO: Σ_e w_e ⟨z_{r_e}, z_{c_e}⟩ over
  the stored edges in chunks of `_EDGE_CHUNK`, rematerialised in the
  backward pass, so memory is O(N·K + chunk·K) instead of the O(nnz·K)
  gathered rows of `G @ Z` (which needed > 6 GiB at nnz = 10^7, K = 64).
  Padding entries (indices out of range) and duplicates are handled: the
  former count 0, the latter add up as in G @ Z.
  """
  if not graphs.is_bcoo(g):
    return jnp.sum(z * _graph_matmul(g, z))
  g = _graph_astype(g, z.dtype)
  rows, cols = g.indices[:, 0], g.indices[:, 1]
  stored = (rows < g.shape[0]) & (cols < g.shape[1])
  w = jnp.where(stored, g.data, 0)
  rows, cols = jnp.where(stored, rows, 0), jnp.where(stored, cols, 0)
  nse = w.shape[0]
  chunk = min(_EDGE_CHUNK, max(nse, 1))
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


def _graph_sq_norm(g, dtype):
  """‖G‖²_F in `dtype`; BCOO duplicates are summed first (jit-safe).

  Summing duplicates sorts all nnz entries, which dominates the loss at
  10^7 edges; a BCOO flagged ``unique_indices=True`` (as `BCOO.fromdense`,
  `bcoo_sum_duplicates` and the constructors in `ssljax.graphs` return it)
  skips that sort.
  """
  g = _graph_astype(g, dtype)
  if graphs.is_bcoo(g):
    if not g.unique_indices:
      g = jsparse.bcoo_sum_duplicates(g, nse=g.nse)
    stored = jnp.all(g.indices < jnp.array(g.shape), axis=1)  # not padding
    return jnp.sum(jnp.where(stored, g.data, 0)**2)
  return jnp.sum(g**2)


def _graph_degree(g, dtype):
  """d = G1 as a dense (N,) array of `dtype`."""
  return graphs.degree(_graph_astype(g, dtype))
