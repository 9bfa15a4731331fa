"""A first-in-first-out queue of embeddings (NNCLR's support set).

The queue is a plain dict of arrays, so it lives in the training state and
crosses `jax.jit` as a pytree:

    {"z": (Q, K) stored rows, "ptr": int32 scalar, the next row to write}.

`queue_push` writes a batch of B rows at ptr, ptr + 1, ..., wrapping around
the end, and advances ptr by B (mod Q): after enough pushes the queue holds
the most recent Q rows. Pure functions: the caller keeps the returned dict.

References:
  Dwibedi, Aytar, Tompson, Sermanet & Zisserman 2021, "With a Little Help
  from My Friends: Nearest-Neighbor Contrastive Learning of Visual
  Representations", arXiv 2104.14548, §3 and Algorithm 1 (support set Q,
  `update_queue(Q, z1)`); He, Fan, Wu, Xie & Girshick 2020, "Momentum
  Contrast for Unsupervised Visual Representation Learning", arXiv
  1911.05722, Algorithm 1 (enqueue/dequeue).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssljax import checks

__all__ = ["queue_init", "queue_push"]


def queue_init(key: jax.Array, size: int, dim: int,
               dtype=jnp.float32) -> dict[str, jax.Array]:
  """A queue of `size` random unit rows and ptr = 0.

  The rows are Gaussian directions scaled to unit norm, as the reference
  NNCLR implementations fill their queue before the first push: until the
  queue has been filled once, some nearest neighbours are these random
  rows.

  Args:
    key: a `jax.random` key.
    size: Q, rows in the queue, int >= 1 (paper: 98,304 on ImageNet).
    dim: K, width of a row, int >= 1.
    dtype: float dtype of the rows.

  Returns:
    {"z": (Q, K) array of `dtype` with unit rows, "ptr": int32 0-d 0}.

  Raises:
    ValueError: if size or dim is not an int >= 1.

  References:
    Dwibedi et al. 2021, arXiv 2104.14548, implementation details
    (support-set size).

  Example:
    >>> q = queue_init(jax.random.key(0), 4, 3)
    >>> q["z"].shape, int(q["ptr"])
    ((4, 3), 0)
    >>> [round(float(x), 4) for x in jnp.linalg.norm(q["z"], axis=1)]
    [1.0, 1.0, 1.0, 1.0]
  """
  size = checks.check_positive_int(size, "size")
  dim = checks.check_positive_int(dim, "dim")
  z_QxK = jax.random.normal(key, (size, dim), dtype)
  return {"z": checks.unit_rows(z_QxK), "ptr": jnp.zeros((), jnp.int32)}


def queue_push(queue: dict[str, jax.Array],
               z: jax.typing.ArrayLike) -> dict[str, jax.Array]:
  """Writes the B rows of z at ptr, ptr + 1, ... (mod Q); ptr ← (ptr + B) mod Q.

  The rows are stored under stop-gradient, cast to the queue's dtype.
  jit-able: ptr may be traced (the rows written are `(ptr + arange(B)) % Q`).

  Args:
    queue: {"z": (Q, K) array, "ptr": int scalar in [0, Q)}, e.g. from
      `queue_init` or a previous push.
    z: (B, K) rows to add, 1 <= B <= Q.

  Returns:
    A new dict with the same keys, shapes and dtypes.

  Raises:
    ValueError: if queue lacks "z" or "ptr", queue["z"] or z is not rank 2,
      their widths differ, B > Q (a queue smaller than the batch would
      overwrite its own rows), or (concrete only) z has NaN/inf.

  References:
    Dwibedi et al. 2021, arXiv 2104.14548, Algorithm 1 (`update_queue`).

  Example:
    >>> q = {"z": jnp.zeros((3, 1)), "ptr": jnp.array(2, jnp.int32)}
    >>> q = queue_push(q, jnp.array([[1.], [2.]]))
    >>> q["z"][:, 0].tolist(), int(q["ptr"])
    ([2.0, 0.0, 1.0], 1)
  """
  if not isinstance(queue, dict) or "z" not in queue or "ptr" not in queue:
    raise ValueError("queue must be a dict with keys 'z' and 'ptr' (see"
                     " queue_init)")
  q_QxK = jnp.asarray(queue["z"])
  z_BxK = checks.as_float(z)
  if q_QxK.ndim != 2:
    raise ValueError(f"queue['z'] must be a rank-2 (Q, K) array, got shape"
                     f" {q_QxK.shape}")
  checks.check_matrix(z_BxK, "z")
  if z_BxK.shape[1] != q_QxK.shape[1]:
    raise ValueError(f"z and queue['z'] must have the same width K, got z"
                     f" {z_BxK.shape} and queue['z'] {q_QxK.shape}")
  if z_BxK.shape[0] > q_QxK.shape[0]:
    raise ValueError(f"z has B = {z_BxK.shape[0]} rows but the queue holds"
                     f" only Q = {q_QxK.shape[0]}: a queue smaller than the"
                     f" batch")
  if jnp.shape(queue["ptr"]) != ():
    raise ValueError(f"queue['ptr'] must be a scalar, got shape"
                     f" {jnp.shape(queue['ptr'])}")
  return _push_core(q_QxK, queue["ptr"], z_BxK)


@jax.jit
def _push_core(q_QxK, ptr, z_BxK):
  q, b = q_QxK.shape[0], z_BxK.shape[0]
  ptr = jnp.asarray(ptr, jnp.int32)
  rows_B = (ptr + jnp.arange(b, dtype=jnp.int32)) % q
  new_QxK = q_QxK.at[rows_B].set(
      jax.lax.stop_gradient(z_BxK).astype(q_QxK.dtype))
  return {"z": new_QxK, "ptr": (ptr + b) % q}
