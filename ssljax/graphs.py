"""Similarity graphs G over the rows of an embedding matrix Z.

Rows are samples: for embeddings Z of shape (N, K), a graph is a symmetric
(N, N) matrix G with G_ij > 0 when rows i and j are known to be related
(positive pairs). Every loss in `ssljax.losses` takes such a G.

This module holds the V-view SSL graph, the degree vector and the validation
helper used by the losses. Supervised, mixed, k-NN and sparse (BCOO) graphs
come later.

References (keys of /work/shared/papers; FINDINGS.md overrides the papers):
  000 Balestriero & LeCun 2024, Prop. 1.
  001 Balestriero & LeCun 2022, spectral-embedding notes, §2 (graph code).
  002 Cabannes et al. 2023 (PAL), eq. (8).
"""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["views_graph", "degree", "validate_graph"]

_ORDERS = ("view_major", "sample_major")


def _is_concrete(x) -> bool:
  """True when `x` holds actual values (it is not a tracer inside jit/grad)."""
  return not isinstance(x, jax.core.Tracer)


def _check_finite(x, name: str) -> None:
  """Raises ValueError if concrete `x` has a NaN or inf; skips tracers."""
  if _is_concrete(x):
    x_np = np.asarray(jax.device_get(x))  # explicit transfer
    if not np.all(np.isfinite(x_np)):
      bad = int(np.size(x_np) - np.count_nonzero(np.isfinite(x_np)))
      raise ValueError(
          f"{name} must be finite, got {bad} non-finite value(s) in an array"
          f" of shape {x_np.shape}")


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


def degree(g: jax.typing.ArrayLike) -> jax.Array:
  """Degree vector d = G1 (row sums), the diagonal of D in L = D − G.

  Args:
    g: (N, N) graph, any real dtype.

  Returns:
    (N,) array of row sums, same dtype as `g`.

  Raises:
    ValueError: if `g` is not a square rank-2 array.

  References:
    FINDINGS.md notation (D = diag(G1)); 001 §2.

  Example:
    >>> degree(views_graph(3, 4)).tolist()
    [3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]
  """
  g = jnp.asarray(g)
  if g.ndim != 2 or g.shape[0] != g.shape[1]:
    raise ValueError(f"g must be a square (N, N) array, got shape {g.shape}")
  return jnp.sum(g, axis=1)


def validate_graph(
    g: jax.typing.ArrayLike,
    n: int | None = None,
    *,
    name: str = "g",
    atol: float = 1e-6,
) -> None:
  """Checks that `g` is a valid (N, N) graph; raises ValueError otherwise.

  Shape checks (rank 2, square, size `n`) always run, also under jit. The
  value checks (symmetric within `atol`, finite) run only when `g` is
  concrete, i.e. not a tracer, so the helper is free inside jit.

  Args:
    g: candidate (N, N) graph, any real dtype.
    n: expected N (e.g. the number of rows of Z), or None to skip.
    name: argument name used in the error messages.
    atol: largest allowed |G_ij − G_ji|.

  Returns:
    None.

  Raises:
    ValueError: if `g` is not rank 2, not square, not of size `n`, not
      symmetric within `atol`, or has NaN/inf entries.

  References:
    001 §2 and FINDINGS.md (a): G is symmetric (N, N).

  Example:
    >>> validate_graph(views_graph(3), n=6)
    >>> validate_graph(jnp.zeros((2, 3)))
    Traceback (most recent call last):
    ...
    ValueError: g must be a square (N, N) array, got shape (2, 3)
  """
  shape = tuple(np.shape(g))
  if len(shape) != 2 or shape[0] != shape[1]:
    raise ValueError(f"{name} must be a square (N, N) array, got shape {shape}")
  if n is not None and shape[0] != n:
    raise ValueError(
        f"{name} must have shape ({n}, {n}) to match N = {n} rows, got {shape}")
  if not _is_concrete(g):
    return
  _check_finite(g, name)
  g_NxN = np.asarray(jax.device_get(g)).astype(np.float64)  # bool/int too
  if g_NxN.size:
    asym = float(np.max(np.abs(g_NxN - g_NxN.T)))
    if asym > atol:
      raise ValueError(
          f"{name} must be symmetric, got max |{name} - {name}.T| = {asym:.3g}"
          f" > atol = {atol:g}")
