"""BYOL: the prediction loss of an online network against a target network.

Rows are samples. The online network ends in a predictor whose outputs p are
regressed onto the target network's projections z (a momentum copy, see
`ssljax.methods.ema`), with a stop-gradient on z. The loss of one pair is the squared
distance of the unit vectors, ‖p̂ − ẑ‖² = 2 − 2 cos(p, z).

* `byol(p_online, z_target)`: one direction, mean over the rows;
* `byol_two_view(p1, p2, z1_t, z2_t)`: the symmetrised loss of the paper,
  each view's prediction against the other view's target, summed;
* `byol_graph(p, z_target, g)`: a (possibly rectangular) graph G between
  online rows and target rows says which prediction regresses onto which
  target; the loss is the G-weighted mean of ‖p̂_i − sg(ẑ_j)‖².
* `graph_cosine(p, z, g)`: Σ G_ij cos(p_i, sg(z_j)) / Σ G_ij, the piece that
  `byol_graph` and `ssljax.losses.simsiam.simsiam_graph` share.

References:
  Grill et al. 2020, "Bootstrap your own latent: A new approach to
  self-supervised Learning", arXiv 2006.07733, eq. (2) (normalised L2 loss),
  §3.1 (symmetrised loss L + L̃), §3.2 (momentum schedule).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ssljax import checks, graphs

__all__ = ["byol", "byol_two_view", "byol_graph", "graph_cosine"]

# Floor on ‖p_i‖ and ‖z_i‖ (as in `ssljax.losses.simclr`): a zero row has
# cosine 0 with every row instead of NaN.
_NORM_FLOOR = 1e-12


# ---------------------------------------------------------------------------
# Shared pieces.
# ---------------------------------------------------------------------------


@jax.jit
def _mean_row_cosine(p_NxK, z_NxK):
  """mean_i cos(p_i, sg(z_i)), with floored norms."""
  u_NxK = checks.unit_rows(p_NxK, floor=_NORM_FLOOR)
  v_NxK = checks.unit_rows(jax.lax.stop_gradient(z_NxK), floor=_NORM_FLOOR)
  return jnp.mean(jnp.sum(u_NxK * v_NxK, axis=1))


@jax.jit
def _graph_cosine_dense(p_NxK, z_MxK, g_NxM):
  u_NxK = checks.unit_rows(p_NxK, floor=_NORM_FLOOR)
  v_MxK = checks.unit_rows(jax.lax.stop_gradient(z_MxK), floor=_NORM_FLOOR)
  g_NxM = g_NxM.astype(p_NxK.dtype)
  return jnp.sum(u_NxK * (g_NxM @ v_MxK)) / jnp.sum(g_NxM)


@jax.jit
def _graph_cosine_bcoo(p_NxK, z_MxK, g):
  """Σ_e w_e u_{r_e}·v_{c_e} over the stored edges; padding counts 0."""
  n, m = g.shape
  u_NxK = checks.unit_rows(p_NxK, floor=_NORM_FLOOR)
  v_MxK = checks.unit_rows(jax.lax.stop_gradient(z_MxK), floor=_NORM_FLOOR)
  rows_E, cols_E = g.indices[:, 0], g.indices[:, 1]
  stored_E = (rows_E < n) & (cols_E < m)
  w_E = jnp.where(stored_E, g.data, 0).astype(p_NxK.dtype)
  rows_E, cols_E = jnp.where(stored_E, rows_E, 0), jnp.where(stored_E, cols_E, 0)
  cos_E = jnp.sum(u_NxK[rows_E] * v_MxK[cols_E], axis=1)
  return jnp.dot(w_E, cos_E) / jnp.sum(w_E)


@checks.float32_matmuls
def graph_cosine(
    p: jax.typing.ArrayLike,
    z: jax.typing.ArrayLike,
    g,
    *,
    names: tuple[str, str, str] = ("p", "z", "g"),
) -> jax.Array:
  """G-weighted mean cosine of predictions and stopped targets.

      graph_cosine = Σ_ij G_ij cos(p_i, sg(z_j)) / Σ_ij G_ij,

  sg = `jax.lax.stop_gradient`: the gradient w.r.t. z is zero. G is
  rectangular: rows index the predictions p, columns the targets z (with
  multi-crop only the global crops have targets, so M < N).

  Args:
    p: (N, K) predictions, float32 or float64 (ints are promoted).
    z: (M, K) targets, same K.
    g: (N, M) weights, dense (any real dtype, cast to p's dtype) or 2-D
      `jax.experimental.sparse.BCOO` (padding entries with an index out of
      range count 0; duplicates add up), with Σ_ij G_ij > 0. A BCOO costs
      O(nnz·K) memory (the rows of each stored edge are gathered).
    names: the argument names used in error messages (for losses that
      forward their own arguments here).

  Returns:
    0-d array of the dtype common to p and z.

  Raises:
    ValueError: if p or z is not rank 2, their K differ, g is not (N, M)
      (or is a BCOO with batch/dense dimensions), or (concrete inputs only)
      p, z or g has NaN/inf or Σ_ij G_ij <= 0.

  References:
    Grill et al. 2020, arXiv 2006.07733, eq. (2); Chen & He 2021, arXiv
    2011.10566, eq. (1). The graph view: Balestriero & LeCun 2022, arXiv
    2205.11508, §2.

  Example:
    >>> p = jnp.array([[1., 0.], [0., 1.]])
    >>> z = jnp.array([[1., 0.], [1., 1.]])
    >>> round(float(graph_cosine(p, z, jnp.eye(2))), 4)
    0.8536
  """
  name_p, name_z, name_g = names
  p_NxK, z_MxK = checks.as_float(p), checks.as_float(z)
  checks.check_matrix(p_NxK, name_p)
  checks.check_matrix(z_MxK, name_z)
  if p_NxK.shape[1] != z_MxK.shape[1]:
    raise ValueError(
        f"{name_p} and {name_z} must have the same number of columns K, got"
        f" shapes {p_NxK.shape} and {z_MxK.shape}")
  g = graphs.check_cross_graph(g, p_NxK.shape[0], z_MxK.shape[0], name_g,
                               "online rows, target rows")
  dtype = jnp.result_type(p_NxK, z_MxK)
  p_NxK, z_MxK = p_NxK.astype(dtype), z_MxK.astype(dtype)
  if graphs.is_bcoo(g):
    return _graph_cosine_bcoo(p_NxK, z_MxK, g)
  return _graph_cosine_dense(p_NxK, z_MxK, jnp.asarray(g))


# ---------------------------------------------------------------------------
# The losses.
# ---------------------------------------------------------------------------


@checks.float32_matmuls
def byol(p_online: jax.typing.ArrayLike,
         z_target: jax.typing.ArrayLike) -> jax.Array:
  """BYOL's normalised regression loss, one direction (Grill et al. 2020).

      loss = (1/N) Σ_i ‖p̂_i − sg(ẑ_i)‖² = 2 − 2 (1/N) Σ_i cos(p_i, sg(z_i)),

  x̂ = x / max(‖x‖, 1e-12), sg = `jax.lax.stop_gradient`: only p_online gets
  a gradient (the target network moves by `ssljax.methods.ema.ema_update`). A zero
  row has cosine 0. The official code sums over the K features and averages
  over the batch, as here.

  Args:
    p_online: (N, K) outputs of the online predictor q_θ(z_θ), float32 or
      float64 (ints are promoted).
    z_target: (N, K) target projections z'_ξ of the other view; row i is
      paired with row i of p_online.

  Returns:
    0-d array of the inputs' common dtype, in [0, 4].

  Raises:
    ValueError: if an input is not rank 2, the shapes differ (the message
      names both arguments and shapes), or (concrete inputs only) an input
      has NaN/inf.

  References:
    Grill et al. 2020, "Bootstrap your own latent", arXiv 2006.07733,
    eq. (2) and Algorithm 1.

  Example:
    >>> p = jnp.array([[1., 0.], [0., 1.]])
    >>> z = jnp.array([[2., 0.], [1., 1.]])
    >>> round(float(byol(p, z)), 4)
    0.2929
  """
  p_NxK, z_NxK = checks.float_pair(p_online, z_target, "p_online", "z_target")
  return 2.0 - 2.0 * _mean_row_cosine(p_NxK, z_NxK)


@checks.float32_matmuls
def byol_two_view(
    p1: jax.typing.ArrayLike,
    p2: jax.typing.ArrayLike,
    z1_t: jax.typing.ArrayLike,
    z2_t: jax.typing.ArrayLike,
) -> jax.Array:
  """The symmetrised BYOL loss: byol(p1, z2_t) + byol(p2, z1_t).

  View 1's prediction regresses onto view 2's target and the other way
  round; the official code adds the two directions (L + L̃ of §3.1), so the
  value lies in [0, 8].

  Graph form: with rows p = concat([p1, p2]), z = concat([z1_t, z2_t]) and
  G = `views_graph(B, 2)` (row i is paired with row i ± B, the other view),
  `byol_two_view(p1, p2, z1_t, z2_t) = 2 · byol_graph(p, z, G)`: the
  two-view form sums two directions, each a mean over B rows; the graph form
  averages over all 2B directed edges.

  Args:
    p1, p2: (B, K) online predictions of views 1 and 2, float32 or float64.
    z1_t, z2_t: (B, K) target projections of views 1 and 2 (stop-gradient).

  Returns:
    0-d array of the inputs' common dtype.

  Raises:
    ValueError: if an input is not rank 2, any two shapes differ (naming
      both arguments), or (concrete inputs only) an input has NaN/inf.

  References:
    Grill et al. 2020, arXiv 2006.07733, §3.1 (symmetrised loss) and
    Algorithm 1.

  Example:
    >>> p = jnp.array([[1., 0.], [0., 1.]])
    >>> round(float(byol_two_view(p, p, p, -p)), 4)
    4.0
  """
  p1_BxK, z2_BxK = checks.float_pair(p1, z2_t, "p1", "z2_t")
  p2_BxK, z1_BxK = checks.float_pair(p2, z1_t, "p2", "z1_t")
  checks.check_same_shape(p1_BxK, p2_BxK, "p1", "p2")
  return ((2.0 - 2.0 * _mean_row_cosine(p1_BxK, z2_BxK))
          + (2.0 - 2.0 * _mean_row_cosine(p2_BxK, z1_BxK)))


@checks.float32_matmuls
def byol_graph(p: jax.typing.ArrayLike, z_target: jax.typing.ArrayLike,
               g) -> jax.Array:
  """BYOL over a graph between online rows and target rows.

      loss = Σ_ij G_ij ‖p̂_i − sg(ẑ_j)‖² / Σ_ij G_ij
           = 2 − 2 · graph_cosine(p, z_target, g)

  (x̂ = x / max(‖x‖, 1e-12); the two lines agree for non-zero rows, and the
  second is what is computed). G_ij > 0 asks prediction i to regress onto
  target j.

  The original method uses the two-view graph: each view's prediction
  against the other view's target. With rows [view 1; view 2] for both p
  and z_target and G = `views_graph(B, 2)`,

      byol_two_view(p1, p2, z1_t, z2_t) = 2 · byol_graph(p, z_target, G),

  because the two-view form sums two directions, each a mean over B rows,
  while the graph form averages over all 2B directed edges. Multi-crop: p
  has a row per crop and z_target rows only for the global crops, and G
  (N, M) links every crop to the global crops of the other views.

  Args:
    p: (N, K) online predictions, float32 or float64.
    z_target: (M, K) target projections (stop-gradient).
    g: (N, M) weights, dense or 2-D BCOO, Σ_ij G_ij > 0; need not be square
      or symmetric.

  Returns:
    0-d array of the inputs' common dtype.

  Raises:
    ValueError: as `graph_cosine`, naming p, z_target and g.

  References:
    Grill et al. 2020, arXiv 2006.07733, eq. (2) and §3.1. Graph form as
    Balestriero & LeCun 2022, arXiv 2205.11508, §2.

  Example:
    >>> from ssljax.graphs import views_graph
    >>> p = jnp.array([[1., 0.], [0., 1.], [0., 1.], [1., 0.]])
    >>> round(float(byol_graph(p, p, views_graph(2, 2))), 4)
    2.0
  """
  return 2.0 - 2.0 * graph_cosine(p, z_target, g,
                                  names=("p", "z_target", "g"))
