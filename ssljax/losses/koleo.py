"""KoLeo: the Kozachenko-Leonenko differential-entropy regulariser.

Sablayrolles et al. (2019) spread a batch of unit vectors over the sphere by
maximising the Kozachenko-Leonenko estimate of their differential entropy,
which up to constants is the mean log distance of each point to its nearest
neighbour in the batch:

    L_KoLeo = −(1/N) Σ_i log(ρ_i + ε),   ρ_i = ‖u_i − u_nn(i) + ε‖,

with u_i = x_i / max(‖x_i‖, ε). DINOv2 (Oquab et al. 2023) adds it, with
weight 0.1, on the student backbone's class token of each global crop.

Details of the official ``KoLeoLoss`` this module follows (checked against
its code): the nearest neighbour is the row of largest inner product (the
diagonal set to −1), found without gradient; the distance is
``nn.PairwiseDistance(2, eps=1e-8)``, which adds ε to the difference before
the norm; ε is added again inside the log. The official loss runs on each
GPU's own rows (DINOv2) or on groups of `loss_group_size` rows of the
gathered batch (DINOv3's ``KoLeoLossDistributed``): `group_size` chooses
the rows a neighbour is searched among, default all N rows.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ssljax import checks

__all__ = ["koleo"]


@checks.float32_matmuls
def koleo(
    x: jax.typing.ArrayLike,
    *,
    eps: float = 1e-8,
    group_size: int | None = None,
) -> jax.Array:
  """KoLeo regulariser of N embeddings (official DINOv2 ``KoLeoLoss``).

  u_i = x_i / max(‖x_i‖, ε); nn(i) = argmax_{j≠i} ⟨u_i, u_j⟩ within
  the group of row i (first index on ties, no gradient through the
  choice);

      loss = −(1/N) Σ_i log(‖u_i − u_nn(i) + ε‖ + ε),

  ε added to the difference vector as ``nn.PairwiseDistance`` does. The
  gradient flows through u_i and u_nn(i), as in the official code.

  Args:
    x: (N, D) embeddings (DINOv2: the student backbone's class token of one
      global crop), float32 or float64, N >= 2 per group, any units.
    eps: ε > 0 (official 1e-8), used three times as described.
    group_size: rows per group, a divisor of N, >= 2; None is N (one group,
      the global batch under sharding). Rows g·S ... g·S + S − 1 form group
      g; S = per-device batch reproduces DINOv2's per-GPU loss (the official
      gradient average over GPUs is the mean over groups).

  Returns:
    0-d array in x's float dtype.

  Raises:
    ValueError: if x is not a (N, D) array with N >= 2 and D >= 1,
      group_size does not divide N or is < 2, eps is not a finite number
      > 0, or (concrete only) x has NaN/inf.

  References:
    Sablayrolles, Douze, Schmid & Jégou 2019, "Spreading vectors for
    similarity search", arXiv 1806.03198, §3.2 eq. (5)-(6); Oquab et al.
    2023, "DINOv2: Learning Robust Visual Features without Supervision",
    arXiv 2304.07193, §4 (KoLeo regulariser, weight 0.1).

  Example:
    >>> x = jnp.array([[1., 0.], [0., 1.], [-1., 0.]])
    >>> round(float(koleo(x)), 4)
    -0.3466
  """
  x_NxD = checks.as_float(x)
  checks.check_matrix(x_NxD, "x", min_rows=2,
                      why="(each row needs a neighbour)")
  n = x_NxD.shape[0]
  size = n if group_size is None else group_size
  if (isinstance(size, bool) or not isinstance(size, (int, np.integer))
      or size < 2 or n % size):
    raise ValueError(f"group_size must be an int >= 2 that divides N = {n},"
                     f" got {group_size!r}")
  checks.check_positive(eps, "eps")
  return _koleo_core(x_NxD, eps, int(size))


@functools.partial(jax.jit, static_argnums=2)
def _koleo_core(x_NxD, eps, size: int):
  n, d = x_NxD.shape
  eps = jnp.asarray(eps, x_NxD.dtype)
  u_GxSxD = checks.unit_rows(x_NxD, floor=eps).reshape(n // size, size, d)
  dots_GxSxS = jnp.einsum("gid,gjd->gij", u_GxSxD, u_GxSxD)
  diagonal_SxS = jnp.eye(size, dtype=bool)
  dots_GxSxS = jnp.where(diagonal_SxS, -1.0, dots_GxSxS)
  nn_GxS = jnp.argmax(jax.lax.stop_gradient(dots_GxSxS), axis=-1)
  neighbour_GxSxD = jnp.take_along_axis(u_GxSxD, nn_GxS[..., None], axis=1)
  diff_GxSxD = u_GxSxD - neighbour_GxSxD + eps
  distance_GxS = jnp.sqrt(jnp.sum(diff_GxSxD**2, axis=-1))
  return -jnp.mean(jnp.log(distance_GxS + eps))
