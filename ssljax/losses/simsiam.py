"""SimSiam: negative cosine of predictions and stopped projections.

Rows are samples. One network (no momentum copy) gives projections z and
predictions p = h(z); the loss pulls p of one view towards z of the other
view, with a stop-gradient on z, which is what keeps SimSiam from collapsing.

* `simsiam(p, z)`: one direction, D = −mean_i cos(p_i, sg(z_i));
* `simsiam_two_view(p1, p2, z1, z2)`: the symmetrised loss of the paper,
  ½ D(p1, z2) + ½ D(p2, z1);
* `simsiam_graph(p, z, g)`: −Σ G_ij cos(p_i, sg(z_j)) / Σ G_ij over a
  (possibly rectangular) graph between prediction rows and projection rows.

References:
  Chen & He 2021, "Exploring Simple Siamese Representation Learning", arXiv
  2011.10566, eq. (1) (D), eq. (2) (symmetrised L) and Algorithm 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssljax import checks
from ssljax.losses.byol import graph_cosine

__all__ = ["simsiam", "simsiam_two_view", "simsiam_graph"]

# Floor on ‖p_i‖ and ‖z_i‖ (as in `ssljax.losses.simclr`).
_NORM_FLOOR = 1e-12


@jax.jit
def _negative_cosine(p_NxK, z_NxK):
  """D(p, z) = −mean_i cos(p_i, sg(z_i)), with floored norms."""
  u_NxK = checks.unit_rows(p_NxK, floor=_NORM_FLOOR)
  v_NxK = checks.unit_rows(jax.lax.stop_gradient(z_NxK), floor=_NORM_FLOOR)
  return -jnp.mean(jnp.sum(u_NxK * v_NxK, axis=1))


@checks.float32_matmuls
def simsiam(p: jax.typing.ArrayLike, z: jax.typing.ArrayLike) -> jax.Array:
  """SimSiam's D(p, z): negative mean cosine, stop-gradient on z.

      D(p, z) = −(1/N) Σ_i p̂_i · sg(ẑ_i),   x̂ = x / max(‖x‖, 1e-12).

  Only p gets a gradient. A zero row has cosine 0.

  Args:
    p: (N, K) predictor outputs h(f(x)), float32 or float64 (ints are
      promoted).
    z: (N, K) projections f(x') of the other view; row i is paired with row
      i of p.

  Returns:
    0-d array of the inputs' common dtype, in [−1, 1].

  Raises:
    ValueError: if an input is not rank 2, the shapes differ (naming both
      arguments and shapes), or (concrete inputs only) an input has NaN/inf.

  References:
    Chen & He 2021, arXiv 2011.10566, eq. (1) and Algorithm 1 (`D(p, z)`
    with `z.detach()`).

  Example:
    >>> p = jnp.array([[1., 0.], [0., 1.]])
    >>> z = jnp.array([[2., 0.], [1., 1.]])
    >>> round(float(simsiam(p, z)), 4)
    -0.8536
  """
  p_NxK, z_NxK = checks.float_pair(p, z, "p", "z")
  return _negative_cosine(p_NxK, z_NxK)


@checks.float32_matmuls
def simsiam_two_view(
    p1: jax.typing.ArrayLike,
    p2: jax.typing.ArrayLike,
    z1: jax.typing.ArrayLike,
    z2: jax.typing.ArrayLike,
) -> jax.Array:
  """The symmetrised SimSiam loss: ½ D(p1, z2) + ½ D(p2, z1).

  Equal to `simsiam_graph(concat([p1, p2]), concat([z1, z2]),
  views_graph(B, 2))`: the ½ makes it the mean over the 2B directed edges.
  Its minimum is −1 (every prediction aligned with the other view's
  projection).

  Args:
    p1, p2: (B, K) predictions of views 1 and 2, float32 or float64.
    z1, z2: (B, K) projections of views 1 and 2 (stop-gradient).

  Returns:
    0-d array of the inputs' common dtype.

  Raises:
    ValueError: if an input is not rank 2, two shapes differ (naming both
      arguments), or (concrete inputs only) an input has NaN/inf.

  References:
    Chen & He 2021, arXiv 2011.10566, eq. (2) and Algorithm 1.

  Example:
    >>> p = jnp.array([[1., 0.], [0., 1.]])
    >>> round(float(simsiam_two_view(p, p, p, -p)), 4)
    0.0
  """
  p1_BxK, z2_BxK = checks.float_pair(p1, z2, "p1", "z2")
  p2_BxK, z1_BxK = checks.float_pair(p2, z1, "p2", "z1")
  checks.check_same_shape(p1_BxK, p2_BxK, "p1", "p2")
  return 0.5 * (_negative_cosine(p1_BxK, z2_BxK)
                + _negative_cosine(p2_BxK, z1_BxK))


@checks.float32_matmuls
def simsiam_graph(p: jax.typing.ArrayLike, z: jax.typing.ArrayLike,
                  g) -> jax.Array:
  """SimSiam over a graph between prediction rows and projection rows.

      loss = −Σ_ij G_ij p̂_i · sg(ẑ_j) / Σ_ij G_ij
           = −`ssljax.losses.byol.graph_cosine(p, z, g)`.

  The original method uses the two-view graph (each view's prediction
  against the other view's projection): with rows [view 1; view 2] and
  G = `views_graph(B, 2)` this equals `simsiam_two_view(p1, p2, z1, z2)`
  exactly (no factor: the ½ of eq. (2) already averages the directions).

  Args:
    p: (N, K) predictions, float32 or float64.
    z: (M, K) projections (stop-gradient).
    g: (N, M) weights, dense or 2-D BCOO, Σ_ij G_ij > 0; need not be square
      or symmetric.

  Returns:
    0-d array of the inputs' common dtype.

  Raises:
    ValueError: as `ssljax.losses.byol.graph_cosine`, naming p, z and g.

  References:
    Chen & He 2021, arXiv 2011.10566, eqs. (1)–(2). Graph form as
    Balestriero & LeCun 2022, arXiv 2205.11508, §2.

  Example:
    >>> from ssljax.graphs import views_graph
    >>> p = jnp.array([[1., 0.], [0., 1.], [1., 0.], [0., 1.]])
    >>> round(float(simsiam_graph(p, p, views_graph(2, 2))), 4)
    -1.0
  """
  return -graph_cosine(p, z, g, names=("p", "z", "g"))
