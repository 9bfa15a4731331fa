"""The momentum teacher: an exponential moving average of the online weights.

BYOL's target network, MoCo v3's momentum encoder (and DINO's teacher) are
not trained by gradients: after each step their weights ξ move towards the
online weights θ,

    ξ ← τ_k ξ + (1 − τ_k) θ,

with τ_k raised from a base value to 1 along a cosine schedule over the K
training steps. `cosine_momentum` gives τ_k and `ema_update` applies the
update to a pytree of arrays. Both are pure and jit-able.

References:
  Grill et al. 2020, "Bootstrap your own latent", arXiv 2006.07733, §3.2
  (τ = 1 − (1 − τ_base)(cos(πk/K) + 1)/2, τ_base = 0.996). Chen, Xie & He
  2021, arXiv 2104.02057, Algorithm 1 (momentum update of the key encoder).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from ssljax import checks

__all__ = ["cosine_momentum", "linear_momentum", "SCHEDULES", "momentum",
           "ema_update"]

# The shapes of τ_k: BYOL's (and DINO's, MoCo v3's) cosine, I-JEPA's line.
SCHEDULES = ("cosine", "linear")


def _check_unit_interval(value, name: str) -> None:
  """A concrete scalar must lie in [0, 1] (tracers skipped; NaN fails)."""
  if not checks.is_concrete(value):
    return
  if jnp.ndim(value) != 0:
    raise ValueError(f"{name} must be a scalar in [0, 1], got shape"
                     f" {jnp.shape(value)}")
  v = float(value)
  if not 0.0 <= v <= 1.0:
    raise ValueError(f"{name} must be in [0, 1], got {value!r}")


def _schedule_arrays(step, total_steps, base, final) -> tuple:
  """(k clipped to [0, K], K, base, final) as arrays of the default float
  dtype, after checking base, final in [0, 1] and K >= 1 (concrete values
  only)."""
  _check_unit_interval(base, "base")
  _check_unit_interval(final, "final")
  if checks.is_concrete(total_steps):
    if jnp.ndim(total_steps) != 0 or not float(total_steps) >= 1:
      raise ValueError(f"total_steps must be an int >= 1, got {total_steps!r}")
  total = jnp.asarray(total_steps, float)
  k = jnp.clip(jnp.asarray(step, float), 0.0, total)
  return k, total, jnp.asarray(base, float), jnp.asarray(final, float)


def cosine_momentum(step, total_steps, *, base: float = 0.996,
                    final: float = 1.0) -> jax.Array:
  """BYOL's cosine schedule of the target momentum τ_k.

      τ_k = final − (final − base) · (cos(π k / K) + 1) / 2,

  so τ_0 = base, τ_{K/2} = (base + final)/2, τ_K = final, increasing in k
  when base <= final. k is clipped to [0, K] (after K steps τ stays at
  final).

  Args:
    step: k, the current step: a Python int or an int array (0-d; may be
      traced inside jit, e.g. `state.step`).
    total_steps: K, the number of training steps: an int >= 1 (a static
      Python/NumPy int; a traced value is used as is, unchecked).
    base: τ at k = 0, in [0, 1] (0.996 in BYOL; 0.99 in MoCo v3).
    final: τ at k = K, in [0, 1] (1.0 in BYOL).

  Returns:
    0-d array of the default float dtype (float32; float64 with x64 on,
    so that float64 runs take the schedule in float64).

  Raises:
    ValueError: if (concrete values only) base or final is outside [0, 1],
      or total_steps < 1.

  References:
    Grill et al. 2020, arXiv 2006.07733, §3.2.

  Example:
    >>> [round(float(cosine_momentum(k, 10)), 4) for k in (0, 5, 10)]
    [0.996, 0.998, 1.0]
  """
  k, total, base, final = _schedule_arrays(step, total_steps, base, final)
  frac = (jnp.cos(math.pi * k / total) + 1) / 2
  return final - (final - base) * frac


def linear_momentum(step, total_steps, *, base: float = 0.996,
                    final: float = 1.0) -> jax.Array:
  """I-JEPA's linear schedule of the target momentum τ_k.

      τ_k = base + k · (final − base) / K,

  k clipped to [0, K]. The official code (Assran et al. 2023, arXiv
  2301.08243, src/train.py ``momentum_scheduler``) takes τ_0 at the first
  update and K = ``ipe · num_epochs · ipe_scale``, a float (the run's
  steps × ``config.optim.schedule_scale``).

  Args:
    step, base, final: as `cosine_momentum`.
    total_steps: K >= 1, int or float (not truncated, as the official
      denominator).

  Returns:
    0-d array of the default float dtype (float32; float64 with x64 on,
    so that float64 runs take the schedule in float64).

  Raises:
    ValueError: as `cosine_momentum`.

  Example:
    >>> [round(float(linear_momentum(k, 10)), 4) for k in (0, 5, 10)]
    [0.996, 0.998, 1.0]
  """
  k, total, base, final = _schedule_arrays(step, total_steps, base, final)
  return base + k * (final - base) / total


def momentum(schedule: str, step, total_steps, *, base: float = 0.996,
             final: float = 1.0) -> jax.Array:
  """τ_k of the named schedule: "cosine" (`cosine_momentum`) or "linear"
  (`linear_momentum`).

  Raises:
    ValueError: another schedule name, or as `cosine_momentum`.
  """
  if schedule not in SCHEDULES:
    raise ValueError(f"unknown momentum schedule {schedule!r}; expected one "
                     f"of {SCHEDULES}")
  fn = cosine_momentum if schedule == "cosine" else linear_momentum
  return fn(step, total_steps, base=base, final=final)


def ema_update(teacher, online, momentum):
  """One step of the momentum teacher, leaf by leaf.

      teacher' = momentum · teacher + (1 − momentum) · online.

  momentum = 1 keeps the teacher, 0 copies the online weights. Each leaf of
  the result has the teacher leaf's dtype and shape. No gradient flows
  through the result into `online` by intention: call it outside the loss
  (the teacher is a separate part of the train state).

  Args:
    teacher: pytree of float arrays (the target / momentum weights ξ).
    online: pytree of the same structure and leaf shapes (the online
      weights θ).
    momentum: τ, a scalar in [0, 1] (Python float or 0-d array; may be
      traced, e.g. the output of `cosine_momentum` inside jit).

  Returns:
    pytree of teacher's structure.

  Raises:
    ValueError: if the tree structures differ (naming teacher and online),
      two leaves' shapes differ, or (concrete values only) momentum is not
      a scalar in [0, 1].

  References:
    Grill et al. 2020, arXiv 2006.07733, §3.2 (ξ ← τξ + (1 − τ)θ). Chen,
    Xie & He 2021, arXiv 2104.02057, Algorithm 1.

  Example:
    >>> t = {"w": jnp.array([1., 1.])}
    >>> o = {"w": jnp.array([0., 2.])}
    >>> ema_update(t, o, 0.75)["w"].tolist()
    [0.75, 1.25]
  """
  t_struct = jax.tree_util.tree_structure(teacher)
  o_struct = jax.tree_util.tree_structure(online)
  if t_struct != o_struct:
    raise ValueError("teacher and online must have the same tree structure,"
                     f" got {t_struct} and {o_struct}")
  _check_unit_interval(momentum, "momentum")
  if jnp.ndim(momentum) != 0:
    raise ValueError(f"momentum must be a scalar, got shape"
                     f" {jnp.shape(momentum)}")
  t_leaves = jax.tree_util.tree_leaves(teacher)
  o_leaves = jax.tree_util.tree_leaves(online)
  for i, (t, o) in enumerate(zip(t_leaves, o_leaves)):
    if jnp.shape(t) != jnp.shape(o):
      raise ValueError(
          f"teacher and online leaves must have the same shapes, got"
          f" {jnp.shape(t)} and {jnp.shape(o)} at leaf {i}")

  def update(t, o):
    t = jnp.asarray(t)
    m = jnp.asarray(momentum, t.dtype)
    return (m * t + (1 - m) * jnp.asarray(o, t.dtype)).astype(t.dtype)

  return jax.tree_util.tree_map(update, teacher, online)
