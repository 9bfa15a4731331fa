"""FroSSL (Skean et al.): log-Frobenius variance term + invariance, V views.

The loss is the one of the authors' released code (solo-learn `frossl`), not
eq. (6) of Skean et al. 2023 applied to raw embeddings: eq. (6) alone is
unbounded below (Z → 0 gives −∞), the released code is bounded because it
normalises first. `frossl_terms` states the exact relation.

References:
  Skean, Dhakal, Jacobs & Sanchez Giraldo 2023, "FroSSL: Frobenius Norm
  Minimization for Self-Supervised Learning", arXiv:2310.02903, eqs. (4)-(6),
  App. A. Eq. (6) must be applied to normalised embeddings (App. A: centre, then
  one global rescale to ‖Z‖_F² = d); the App. A pseudocode computes ½·(log terms
  of eq. (6)) + (1/d)·(invariance of eq. (6)). Official code:
  github.com/OFSkean/FroSSL, ported to solo-learn (`solo/losses/frossl.py`,
  `frossl_loss_func`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ssljax import checks, graphs

__all__ = ["frossl", "frossl_terms"]

# F.normalize's eps: a zero column stays zero instead of becoming NaN.
_NORM_FLOOR = 1e-12


def _stack_views(views) -> jax.Array:
  """Checks `views` and returns them stacked as a (V, N, K) float array."""
  if isinstance(views, (list, tuple)):
    arrays = [checks.as_float(v) for v in views]
    if len(arrays) < 2:
      raise ValueError(
          f"views must hold V >= 2 views, got {len(arrays)} (a {type(views).__name__}"
          " of (N, K) arrays)")
    for i, z in enumerate(arrays):
      checks.check_matrix(z, f"views[{i}]")
      checks.check_same_shape(arrays[0], z, "views[0]", f"views[{i}]")
    dtype = jnp.result_type(*arrays)
    return jnp.stack([z.astype(dtype) for z in arrays])
  z_VxNxK = checks.as_float(views)
  if z_VxNxK.ndim != 3:
    raise ValueError(
        "views must be a (V, N, K) array or a list/tuple of (N, K) arrays, got"
        f" an array of shape {z_VxNxK.shape}")
  if z_VxNxK.shape[0] < 2:
    raise ValueError(
        f"views must hold V >= 2 views, got shape {z_VxNxK.shape} (V ="
        f" {z_VxNxK.shape[0]})")
  if z_VxNxK.shape[1] < 1 or z_VxNxK.shape[2] < 1:
    raise ValueError(
        f"views must have N >= 1 rows and K >= 1 columns, got shape"
        f" {z_VxNxK.shape}")
  checks.check_finite(z_VxNxK, "views")
  return z_VxNxK


@checks.float32_matmuls
def frossl_terms(
    views,
    *,
    invariance_weight: float = 1.0,
) -> dict[str, jax.Array]:
  """FroSSL over V >= 2 views, as in the authors' released code: terms and loss.

  Each view Z_v (N, K) is normalised column by column over the batch,
  u_v = Z_v / ‖Z_v[:, k]‖ (no centring), and with ū = mean_v u_v,
  C_v = u_vᵀu_v (K, K) if N > K else u_v u_vᵀ (N, N):

      regularization = Σ_v 2·log‖C_v / tr(C_v)‖_F
      invariance     = Σ_v V·K·mean((u_v − ū)²)        (mean over N·K)
      loss = regularization + invariance_weight·invariance

  The two choices of C_v have the same nonzero eigenvalues, hence the same
  Frobenius norm and trace: the branch only picks the cheaper product
  (O(NK²) or O(N²K)). tr(C_v) is under `stop_gradient`, as the released code
  divides by `trace.item()`; since every column of u_v has unit norm,
  tr(C_v) = K identically, so this changes neither the value nor the exact
  gradient.

  Relation to Skean et al. 2023 eq. (6), log‖Z1ᵀZ1‖_F² + log‖Z2ᵀZ2‖_F² +
  (1/N)Σ_i‖z1_i − z2_i‖²: for V = 2 and invariance_weight = 1, with ū − u_v =
  ±(u1 − u2)/2,

      loss = eq. (6) evaluated at (u1, u2) − 4·log K,

  i.e. eq. (6) on the column-normalised views, up to a constant (for V
  views the constant is −2V·log K). eq. (6) on the raw Z is unbounded below:
  Z → 0 sends log‖ZᵀZ‖_F² → −∞ while the MSE → 0 (Skean et al. 2023 eq. (6) also
  writes 1/N for a sum over n). After normalisation ‖C‖_F² >= tr(C)²/rank(C), so
  each log term is >= −log min(N, K) and the loss is >= −V·log min(N, K), with
  equality for identical views with orthogonal columns (N >= K) or orthogonal
  rows of equal norm (N <= K). Note the released code's normalisation (per
  column, no centring) differs from the Skean et al. 2023 App. A pseudocode
  (centre, one global rescale to ‖Z‖_F² = K), used for the closed forms of the
  tests; both make the loss invariant to scaling Z, and the released one also to
  scaling each column. Here each view is first divided by its largest |entry|
  (exact, by that invariance), so the 1e-12 norm floor of F.normalize only acts
  on columns that are zero relative to the view, and tiny views do not
  underflow. The App. A pseudocode also halves the log terms and divides the
  invariance by K (½ and 1/K of eq. (6)); this function follows the released
  code.

  Args:
    views: V >= 2 views, each (N, K) with row i of every view from the same
      sample: a list/tuple of (N, K) arrays or one (V, N, K) array;
      float32 or float64 (ints are promoted).
    invariance_weight: weight of the invariance term (official default 1).

  Returns:
    dict with 0-d arrays of the views' dtype: "regularization", "invariance"
      (unweighted) and "loss".

  Raises:
    ValueError: if fewer than 2 views are given, a view is not rank 2 or the
      views' shapes differ, an array is not (V, N, K), or (concrete inputs
      only) a view has NaN/inf or is all zero (then C_v = 0 and the loss is
      0/0; under jit such a view gives NaN).

  References:
    Skean et al. 2023, arXiv:2310.02903, eqs. (4)-(6), §3.1, App. A (the
    pseudocode's log‖·‖ is ½ of eq. (6)'s log‖·‖², its MSELoss 1/d of eq. (6)'s
    invariance). Official code: github.com/OFSkean/FroSSL; solo-learn
    `solo/losses/frossl.py` (`frossl_loss_func`).

  Example:
    >>> z = jnp.eye(4, 2) * jnp.array([3., 5.])   # orthogonal columns
    >>> t = frossl_terms([z, z])
    >>> [round(float(t[k]), 4) for k in ("regularization", "invariance")]
    [-1.3863, 0.0]
  """
  z_VxNxK = _stack_views(views)
  _check_no_zero_view(z_VxNxK)
  n, k = z_VxNxK.shape[1:]
  return _frossl_terms_core(z_VxNxK, invariance_weight, use_gram=n <= k)


def _check_no_zero_view(z_VxNxK) -> None:
  """A concrete all-zero view has C_v = 0: ‖C_v / tr C_v‖ is 0/0."""
  if checks.is_concrete(z_VxNxK):
    zero_V = ~np.asarray(jnp.any(z_VxNxK != 0, axis=(1, 2)))
    if zero_V.any():
      raise ValueError(
          f"views[{int(np.flatnonzero(zero_V)[0])}] is all zero: C_v = 0 and"
          " the regularization log‖C_v / tr(C_v)‖ is undefined (0/0)")


@functools.partial(jax.jit, static_argnames=("use_gram",))
def _frossl_terms_core(z_VxNxK, invariance_weight, *, use_gram: bool):
  """Terms on validated (V, N, K) input; use_gram picks u uᵀ over uᵀu."""
  v, _, k = z_VxNxK.shape
  # Each view divided by its largest |entry| (the loss is invariant to a
  # positive scale per view, so stop_gradient loses nothing): the squares
  # below then cannot underflow, e.g. a float32 view of entries ~1e-30 gave
  # ‖C‖ = 0 and loss −inf. An all-zero view stays zero.
  max_Vx1x1 = jnp.max(jnp.abs(z_VxNxK), axis=(1, 2), keepdims=True)
  z_VxNxK = z_VxNxK / jax.lax.stop_gradient(
      jnp.where(max_Vx1x1 > 0, max_Vx1x1, 1.0))
  # max inside the sqrt: the gradient stays finite at a zero column.
  sq_norms_Vx1xK = jnp.sum(z_VxNxK**2, axis=1, keepdims=True)
  u_VxNxK = z_VxNxK / jnp.sqrt(jnp.maximum(sq_norms_Vx1xK, _NORM_FLOOR**2))

  if use_gram:
    c_VxMxM = jnp.einsum("vnk,vmk->vnm", u_VxNxK, u_VxNxK)  # (V, N, N)
  else:
    c_VxMxM = jnp.einsum("vnk,vnl->vkl", u_VxNxK, u_VxNxK)  # (V, K, K)
  trace_V = jax.lax.stop_gradient(jnp.trace(c_VxMxM, axis1=1, axis2=2))
  # 2·log‖C/t‖_F = log Σ C² − 2·log t.
  log_fro_sq_V = jnp.log(jnp.sum(c_VxMxM**2, axis=(1, 2))) - 2.0 * jnp.log(trace_V)
  regularization = jnp.sum(log_fro_sq_V)

  mean_NxK = jnp.mean(u_VxNxK, axis=0)
  mse_V = jnp.mean((u_VxNxK - mean_NxK)**2, axis=(1, 2))
  invariance = v * k * jnp.sum(mse_V)

  loss = regularization + jnp.asarray(invariance_weight, z_VxNxK.dtype) * invariance
  return {"regularization": regularization, "invariance": invariance,
          "loss": loss}


@checks.float32_matmuls
def frossl(views, *, invariance_weight: float = 1.0) -> jax.Array:
  """FroSSL loss over V >= 2 views; `frossl_terms(...)["loss"]`.

  With u_v the view Z_v with unit-norm columns, ū = mean_v u_v and
  C_v = u_vᵀu_v (or u_v u_vᵀ when N <= K),

      loss = Σ_v [2·log‖C_v / tr(C_v)‖_F
                  + invariance_weight·V·K·mean((u_v − ū)²)].

  For V = 2 this is Skean et al. 2023 eq. (6) on the column-normalised views
  minus 4·log K; eq. (6) on raw embeddings is unbounded below. See
  `frossl_terms`.

  Arguments, errors and references: as `frossl_terms`, which documents them in
  full. Returns the 0-d "loss" entry, in the views' dtype.

  Example:
    >>> z = jnp.eye(4, 2) * jnp.array([3., 5.])
    >>> round(float(frossl(jnp.stack([z, z]))), 4)   # = −V·log K
    -1.3863
  """
  return frossl_terms(views, invariance_weight=invariance_weight)["loss"]

