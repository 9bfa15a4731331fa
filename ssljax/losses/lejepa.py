"""LeJEPA: view invariance plus SIGReg, with no teacher and no stop-gradient.

Rows are samples. The V views of B images (G global crops first, then L
local crops) give embeddings z (V, B, K). LeJEPA's loss (Balestriero &
LeCun 2025, arXiv 2511.08544, eq. (LeJEPA) of §5 and Algorithm 2) is

    L = (1 − λ)·invariance + λ·(1/V) Σ_v SIGReg(z_v),
    invariance = (1/(V·B·K)) Σ_v Σ_b ‖μ_b − z_{v,b}‖²,
    μ_b = (1/G) Σ_{g < G} z_{g,b}      (the centre of image b's global views),

every view (global and local) pulled to the centre of the global views, no
stop-gradient on μ, and one SIGReg statistic per view (`ssljax.losses.sigreg`,
the official quadrature) averaged over the views; the same M directions for
every view. This is the form of the official code (the global/local split of
the paper; its MINIMAL.md example centres on all views, i.e. G = V).

* `lejepa(views, ...)` / `lejepa_terms`: that loss on (V, B, K).
* `lejepa_graph(z, g, ...)` / `lejepa_graph_terms`: the same loss over
  (Z, G), Z the views stacked view-major (V·B, K) and G a directed graph:
  row i's target is the mean of its neighbours, μ_i = Σ_j G_ij z_j / Σ_j G_ij.
  On the crop graph `lejepa_crops_graph` (every crop → the global crops of
  its image, itself included when global) it equals `lejepa`.

Known divergences of other implementations (see `ssljax.losses.sigreg`):
lightly before its PR #2023 left the global views out of both terms (issue
#2002) and scaled the SIGReg gradient by 1/world_size (#1920);
stable-pretraining computes ``inv + λ·sigreg`` without (1 − λ) and one
statistic over the V·B pooled rows (#413).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ssljax import checks
from ssljax.losses.sigreg import (check_directions, sigreg_quadrature,
                                  statistic_of_projections)

__all__ = ["lejepa", "lejepa_terms", "lejepa_graph", "lejepa_graph_terms",
           "lejepa_crops_graph"]


def _check_lam(lam) -> None:
  if checks.is_concrete(lam) and not 0.0 <= float(lam) <= 1.0:
    raise ValueError(f"lam must be in [0, 1], got {lam!r}")


def _sigreg_per_view(z_VxBxK, a_KxM, num_knots, t_max):
  """(1/V) Σ_v SIGReg(z_v) with one set of directions."""
  x_VxBxM = jnp.einsum("vbk,km->vbm", z_VxBxK, a_KxM)
  stats_VxM = jax.vmap(lambda x: statistic_of_projections(
      x, num_knots, t_max))(x_VxBxM)
  return jnp.mean(stats_VxM)


@functools.partial(jax.jit, static_argnames=("num_global", "num_knots",
                                             "t_max"))
def _multi_view_terms(z, a, lam, *, num_global, num_knots, t_max):
  mu_BxK = jnp.mean(z[:num_global], axis=0)
  invariance = jnp.mean(jnp.square(mu_BxK - z))
  return _combine(invariance, _sigreg_per_view(z, a, num_knots, t_max), lam)


@functools.partial(jax.jit, static_argnames=("num_views", "num_knots",
                                             "t_max"))
def _graph_terms(z, w, a, lam, *, num_views, num_knots, t_max):
  n, k = z.shape
  deg_N = jnp.sum(w, axis=1)
  has = deg_N > 0
  mu_NxK = (w @ z) / jnp.where(has, deg_N, 1.0)[:, None]
  sq_N = jnp.where(has, jnp.sum(jnp.square(mu_NxK - z), axis=1), 0.0)
  invariance = jnp.sum(sq_N) / (jnp.maximum(jnp.sum(has), 1) * k)
  sig = _sigreg_per_view(z.reshape(num_views, n // num_views, k), a,
                         num_knots, t_max)
  return _combine(invariance, sig, lam)


def _combine(invariance, sig, lam):
  return {"loss": (1.0 - lam) * invariance + lam * sig,
          "invariance": invariance, "sigreg": sig}


@checks.float32_matmuls
def lejepa_terms(views: jax.typing.ArrayLike, *, num_global: int, lam: float,
                 directions: jax.typing.ArrayLike, num_knots: int = 17,
                 t_max: float = 3.0) -> dict[str, jax.Array]:
  """LeJEPA's loss and its two terms on V views.

      invariance = mean over v, b, k of (μ_{b,k} − z_{v,b,k})²,
      μ_b = mean of the G global views z_{0..G−1, b} (no stop-gradient),
      sigreg = (1/V) Σ_v SIGReg(z_v; directions),
      loss = (1 − λ)·invariance + λ·sigreg.

  Args:
    views: (V, B, K) embeddings z; [v, b] is view v of image b, the G global
      views first. bf16, f32 or f64 (computed in f32 for bf16).
    num_global: G, 1 <= G <= V.
    lam: λ in [0, 1] (the paper's default 0.05).
    directions: (K, M) unit directions (`ssljax.losses.sigreg_directions`).
    num_knots, t_max: the Epps–Pulley quadrature (official: 17, 3.0).

  Returns:
    {"loss", "invariance", "sigreg"}: 0-d arrays, float64 for float64
    views, else float32.

  Raises:
    ValueError: views not (V, B, K), G outside [1, V], λ outside [0, 1],
      directions not (K, M), or (concrete inputs) a NaN/inf.

  References:
    Balestriero & LeCun 2025, arXiv 2511.08544, §5 (LeJEPA loss) and
    Algorithm 2; the official rbalestr-lab/lejepa code.

  Example:
    >>> z = jnp.zeros((3, 4, 2))                # three identical views
    >>> out = lejepa_terms(z, num_global=2, lam=0.0, directions=jnp.eye(2))
    >>> float(out["invariance"]), float(out["loss"])
    (0.0, 0.0)
  """
  z = checks.as_float(views)
  if z.ndim != 3 or 0 in z.shape:
    raise ValueError(f"views must be a non-empty (V, B, K) array, got shape "
                     f"{z.shape}")
  checks.check_finite(z, "views")
  num_views = z.shape[0]
  g = checks.check_positive_int(num_global, "num_global")
  if g > num_views:
    raise ValueError(f"num_global must be <= V = {num_views} views, got {g}")
  _check_lam(lam)
  sigreg_quadrature(num_knots, t_max)
  a = check_directions(directions, z.shape[2])
  dtype = checks.compute_dtype(jnp.promote_types(z.dtype, a.dtype))
  return _multi_view_terms(z.astype(dtype), a.astype(dtype),
                           jnp.asarray(lam, dtype), num_global=g,
                           num_knots=int(num_knots), t_max=float(t_max))


@checks.float32_matmuls
def lejepa(views: jax.typing.ArrayLike, *, num_global: int, lam: float,
           directions: jax.typing.ArrayLike, num_knots: int = 17,
           t_max: float = 3.0) -> jax.Array:
  """LeJEPA loss (1 − λ)·invariance + λ·mean_v SIGReg(z_v);
  `lejepa_terms(...)["loss"]`, which documents arguments, errors and
  references.

  Example:
    >>> z = jnp.zeros((2, 4, 2))
    >>> float(lejepa(z, num_global=2, lam=0.0, directions=jnp.eye(2)))
    0.0
  """
  return lejepa_terms(views, num_global=num_global, lam=lam,
                      directions=directions, num_knots=num_knots,
                      t_max=t_max)["loss"]


@checks.float32_matmuls
def lejepa_crops_graph(batch: int, num_global: int, num_local: int, *,
                       dtype=jnp.float32) -> jax.Array:
  """The LeJEPA crop graph over V·B view-major rows: G_ij = 1 iff row j is
  a global crop of row i's image (j = i included when i is global).

  Row i = v·B + b is crop v of image b. Each row has degree G, so the mean
  of its neighbours is μ_b, the centre of image b's global crops.

  Args:
    batch: B >= 1; num_global: G >= 1; num_local: L >= 0.
    dtype: dtype of the entries.

  Returns:
    (V·B, V·B) 0/1 array (not symmetric: the local crops' columns are 0).

  Raises:
    ValueError: batch or num_global not an int >= 1, num_local not an
      int >= 0.

  Example:
    >>> lejepa_crops_graph(1, 2, 1).astype(int).tolist()
    [[1, 1, 0], [1, 1, 0], [1, 1, 0]]
  """
  b = checks.check_positive_int(batch, "batch")
  g = checks.check_positive_int(num_global, "num_global")
  if (isinstance(num_local, bool) or not isinstance(num_local, (int, np.integer))
      or num_local < 0):
    raise ValueError(f"num_local must be an int >= 0, got {num_local!r}")
  rows = np.arange((g + int(num_local)) * b)
  cols = np.arange(g * b)
  same_NxGB = rows[:, None] % b == cols[None, :] % b
  out = np.zeros((rows.size, rows.size), bool)
  out[:, :g * b] = same_NxGB
  return jnp.asarray(out, dtype)


@checks.float32_matmuls
def lejepa_graph_terms(z: jax.typing.ArrayLike, g: jax.typing.ArrayLike, *,
                       num_views: int, lam: float,
                       directions: jax.typing.ArrayLike, num_knots: int = 17,
                       t_max: float = 3.0) -> dict[str, jax.Array]:
  """LeJEPA over (Z, G): invariance to the graph's neighbour means, SIGReg
  per view.

      μ_i = Σ_j G_ij z_j / Σ_j G_ij,
      invariance = (1/(n·K)) Σ_{i: deg_i > 0} ‖μ_i − z_i‖²,  n = #{deg_i > 0},
      sigreg = (1/V) Σ_v SIGReg(rows v·B … v·B + B − 1 of Z),
      loss = (1 − λ)·invariance + λ·sigreg.

  With G = `lejepa_crops_graph(B, G, L)` this is `lejepa_terms` on
  Z.reshape(V, B, K) (the identity is tested); other graphs move the
  targets (e.g. a label graph pulls every crop to the mean of same-class
  crops). No stop-gradient on μ.

  Args:
    z: (V·B, K) embeddings, view-major rows.
    g: (V·B, V·B) non-negative weights, row i's targets (need not be
      symmetric).
    num_views: V (divides the rows; SIGReg is per view).
    lam, directions, num_knots, t_max: as `lejepa_terms`.

  Returns:
    {"loss", "invariance", "sigreg"}, dtypes as `lejepa_terms`.

  Raises:
    ValueError: z not (N, K), N not divisible by num_views, g not (N, N), λ
      outside [0, 1], directions not (K, M), or (concrete) a NaN/inf.

  References:
    Balestriero & LeCun 2025, arXiv 2511.08544, §5; the graph view of SSL
    losses of Balestriero & LeCun 2022, arXiv 2205.11508.

  Example:
    >>> z = jnp.zeros((4, 2))
    >>> g = lejepa_crops_graph(2, 2, 0)
    >>> float(lejepa_graph(z, g, num_views=2, lam=0.0, directions=jnp.eye(2)))
    0.0
  """
  z = checks.as_float(z)
  checks.check_matrix(z, "z")
  n, k = z.shape
  v = checks.check_positive_int(num_views, "num_views")
  if n % v:
    raise ValueError(f"z has {n} rows, not divisible by num_views = {v}")
  w = checks.as_float(g)
  if w.shape != (n, n):
    raise ValueError(f"g must be (N, N) = ({n}, {n}) for z of shape "
                     f"{z.shape}, got {w.shape}")
  checks.check_finite(w, "g")
  _check_lam(lam)
  sigreg_quadrature(num_knots, t_max)
  a = check_directions(directions, k)
  dtype = checks.compute_dtype(jnp.promote_types(z.dtype, a.dtype))
  return _graph_terms(z.astype(dtype), w.astype(dtype), a.astype(dtype),
                      jnp.asarray(lam, dtype), num_views=v,
                      num_knots=int(num_knots), t_max=float(t_max))


@checks.float32_matmuls
def lejepa_graph(z: jax.typing.ArrayLike, g: jax.typing.ArrayLike, *,
                 num_views: int, lam: float, directions: jax.typing.ArrayLike,
                 num_knots: int = 17, t_max: float = 3.0) -> jax.Array:
  """`lejepa_graph_terms(...)["loss"]`, which documents arguments, errors
  and references."""
  return lejepa_graph_terms(z, g, num_views=num_views, lam=lam,
                            directions=directions, num_knots=num_knots,
                            t_max=t_max)["loss"]
