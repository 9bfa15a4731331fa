"""The V-view SSL graph.

References: Balestriero & LeCun 2024, "The Birth of Self Supervised Learning: A
Supervised Theory", Prop. 1; Balestriero & LeCun 2022, arXiv
2205.11508, §2; Cabannes et al. 2023, arXiv 2303.15256, eq. (8).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ssljax.checks import check_positive_int
from ssljax.graphs._core import ORDERS, bcoo_from_coo


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

  zero diagonal and degree V − 1, as in the Balestriero & LeCun 2022 and
  Cabannes et al. 2023 code. The sample-major order (row i·V + v) gives I_n ⊗
  (1_V 1_Vᵀ − I_V). The two orders are the same graph up to a permutation of
  rows and columns. `self_loops=True` adds I_N, so sample-major with self loops
  is I_n ⊗ 1_V 1_Vᵀ = YYᵀ of Balestriero & LeCun 2024 Prop. 1 and Cabannes et
  al. 2023 eq. (8) (the same graph after a permutation and adding I; Balestriero
  & LeCun 2022 §2 print `1{i = j}` where the code has `1{i ≠ j}`).

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
    (n·v, n·v) symmetric 0/1 array of `dtype` (BCOO if `sparse`); every row sums
      to V − 1 (V with self loops).

  Raises:
    ValueError: if n or v is not an int >= 1, or `order` is unknown.

  References:
    Balestriero & LeCun 2024, "The Birth of Self Supervised Learning: A
    Supervised Theory", Prop. 1 (Y_{n,j} = 1{⌊n/V⌋ = j}; the printed `= 1` is a
    typo; G = YYᵀ includes the diagonal). Balestriero & LeCun 2022, arXiv
    2205.11508, §2 graph code (view-major, zero diagonal). Cabannes et al. 2023,
    arXiv 2303.15256, eq. (8) (sample-major).

  Example:
    >>> views_graph(2, 2).astype(int).tolist()
    [[0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0]]
    >>> views_graph(2, 2, order="sample_major").astype(int).tolist()
    [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]
  """
  n = check_positive_int(n, "n")
  v = check_positive_int(v, "v")
  if order not in ORDERS:
    raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
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
    return bcoo_from_coo(np.ones(rows.shape), rows, cols, n * v, dtype)
  related_NxN = sample_N[:, None] == sample_N[None, :]
  if not self_loops:
    related_NxN &= view_N[:, None] != view_N[None, :]
  return jnp.asarray(related_NxN, dtype=dtype)
