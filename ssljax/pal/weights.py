"""Inverse inclusion probabilities of PAL minibatches (NumPy only).

`pal_minibatch_loss` weights each pair term of a minibatch by 1/π, its
inverse probability of being drawn, which makes the estimate unbiased
(Horvitz–Thompson). Kept free of JAX so that oracles import quickly.

References:
  Cabannes et al. 2023, "Active Self-Supervised Learning: A Few Low-Cost
  Relationships Are All You Need", arXiv 2303.15256, Algorithm 1, eq. (11).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["uniform_pair_weights", "group_pair_weights"]


def _check_sizes(batch_size: int, n: int) -> None:
  if int(n) != n or n < 1:
    raise ValueError(f"n must be a positive integer, got {n!r}")
  if int(batch_size) != batch_size or not 2 <= batch_size <= n:
    raise ValueError(f"batch_size must be an integer in [2, n={n}], got"
                     f" {batch_size!r}")


def uniform_pair_weights(batch_size: int, n: int) -> np.ndarray:
  """1/π for B of N samples drawn uniformly without replacement.

  π_i = B/N and π_ij = B(B−1)/(N(N−1)) for i ≠ j.

  Args:
    batch_size: B, 2 <= B <= N.
    n: N.

  Returns:
    (B, B) float64 numpy array: N/B on the diagonal, N(N−1)/(B(B−1)) off it.

  Raises:
    ValueError: if B is not in [2, N].
  """
  _check_sizes(batch_size, n)
  b = int(batch_size)
  off = n * (n - 1) / (b * (b - 1))
  w = np.full((b, b), off)
  np.fill_diagonal(w, n / b)
  return w


def group_pair_weights(groups, num_groups: int,
                       groups_per_batch: int) -> np.ndarray:
  """1/π when m of M groups are drawn uniformly and all their members kept.

  This is the SSL oracle's minibatch (Cabannes et al. 2023 Algorithm 2): a group
  is the set of V views of one source sample. π = m/M for a sample or a pair in
  one group, and m(m−1)/(M(M−1)) for a pair across two groups.

  Args:
    groups: (B,) int group id of each minibatch row.
    num_groups: M, number of groups in the full data.
    groups_per_batch: m, 1 <= m <= M (m >= 2 if pairs across groups occur).

  Returns:
    (B, B) float64 numpy array of inverse inclusion probabilities.

  Raises:
    ValueError: if m is not in [1, M].
  """
  m_all, m = int(num_groups), int(groups_per_batch)
  if not 1 <= m <= m_all:
    raise ValueError(f"groups_per_batch must be in [1, num_groups={m_all}],"
                     f" got {groups_per_batch!r}")
  g_B = np.asarray(groups)
  same = g_B[:, None] == g_B[None, :]
  across = math.inf if m < 2 else m_all * (m_all - 1) / (m * (m - 1))
  return np.where(same, m_all / m, across)
