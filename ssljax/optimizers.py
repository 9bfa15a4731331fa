"""The optimiser of the network and its learning-rate schedule.

Both read ``config.optim`` (configs/common.py): ``name`` ("adamw" |
"lars"), ``learning_rate`` (peak, per batch of 256 samples),
``weight_decay``, ``warmup_epochs``, ``end_lr_factor``, ``clip_grad_norm``
(global-norm clipping, 0: off), optionally ``freeze_last_layer_epochs``
(DINO, SwAV) and ``normalize_last_layer`` (SwAV) and, for LARS only,
``lars.momentum`` and ``lars.trust_coefficient``.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_collections
import optax

__all__ = ["create_learning_rate_fn", "create_optimizer", "freeze_while",
           "unit_columns_after"]

OPTIMIZERS = ("adamw", "lars")


def create_learning_rate_fn(optim: ml_collections.ConfigDict, batch_size: int,
                            steps_per_epoch: int, total_steps: int
                            ) -> Callable[[int], float]:
  """Linear warm-up from 0, then cosine decay to ``end_lr_factor`` × peak.

  Args:
    optim: ``config.optim``: ``learning_rate`` (peak lr per 256 samples),
      ``warmup_epochs`` (epochs, may be fractional), ``end_lr_factor``
      (final lr / peak lr).
    batch_size: global batch of samples; the peak lr is
      ``learning_rate · batch_size / 256`` (linear scaling).
    steps_per_epoch: optimiser steps in one epoch (converts warmup_epochs
      to steps).
    total_steps: optimiser steps of the whole run (the end of the decay).

  Returns:
    an optax schedule: step (int) -> learning rate (float). The warm-up is
    at most ``total_steps − 1`` steps.
  """
  peak = optim.learning_rate * batch_size / 256
  warmup = min(int(optim.warmup_epochs * steps_per_epoch), total_steps - 1)
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=peak, warmup_steps=max(warmup, 0),
      decay_steps=total_steps, end_value=peak * optim.end_lr_factor)


def _decay_mask(params):
  # Weight decay and LARS trust ratios on kernels only, as in VICReg/BYOL.
  return jax.tree.map(lambda p: p.ndim > 1, params)


def _last_layer_mask(params):
  # DINO's weight-normalised last layer: "last_layer_v" (and "last_layer_g").
  return jax.tree_util.tree_map_with_path(
      lambda path, _: any("last_layer" in str(getattr(k, "key", k))
                          for k in path), params)


def freeze_while(num_steps: int, mask) -> optax.GradientTransformation:
  """Zeroes the gradients/updates of the ``mask``-ed parameters during the
  first ``num_steps`` calls (its own step counter), then passes them on.

  Chained before and after an optimiser, a frozen parameter gets a zero
  gradient (its moments stay where they were: zero at the start) and a
  zero update (no weight decay either), so it does not move: DINO's
  ``freeze_last_layer`` (Caron et al. 2021, arXiv 2104.14294, official
  code: the last layer's gradients are cancelled during the first epoch).
  Unlike PyTorch, where a parameter without gradient is skipped, optax's
  Adam step count still advances for it, so its first bias corrections
  after the freeze differ.

  Args:
    num_steps: steps (int >= 0) during which the masked leaves are frozen.
    mask: pytree of bools like the params, or a function params -> such.

  Returns:
    an optax GradientTransformation with state (count,).
  """
  def init(params):
    del params
    return optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

  def update(updates, state, params=None):
    frozen = state.count < num_steps
    flags = mask(updates) if callable(mask) else mask
    updates = jax.tree.map(
        lambda u, m: jnp.where(frozen & m, jnp.zeros_like(u), u),
        updates, flags)
    return updates, optax.ScaleByScheduleState(
        count=optax.safe_increment(state.count))

  return optax.GradientTransformation(init, update)


def unit_columns_after(mask) -> optax.GradientTransformation:
  """Updates after which the masked kernels have unit-norm columns.

  Last in a chain, it turns each masked update u of a 2-D parameter p into
  normalize(p + u) − p, normalize scaling every column (one output unit of
  a (in, out) kernel) to L2 norm 1, so the parameter after the step is the
  normalised one; an all-zero update (a frozen layer) stays zero. SwAV normalises its prototypes at the start of every
  iteration, before the forward pass and the optimiser step (Caron et al.
  2020, arXiv 2006.09882, official main_swav.py); keeping them normalised
  after each step, and at initialisation, gives the same iterates.

  Args:
    mask: pytree of bools like the params, or a function params -> such;
      masked leaves must be 2-D.

  Returns:
    an optax GradientTransformation without state; its update needs params.
  """
  def init(params):
    del params
    return optax.EmptyState()

  def update(updates, state, params=None):
    if params is None:
      raise ValueError("unit_columns_after needs the params in update()")
    flags = mask(params) if callable(mask) else mask

    def project(u, p, m):
      if not m:
        return u
      new = p + u
      norms = jnp.sqrt(jnp.sum(new * new, axis=0, keepdims=True))
      # A zero update (a frozen layer) stays zero: p is already normalised.
      return jnp.where(jnp.any(u != 0), new / jnp.maximum(norms, 1e-12) - p,
                       jnp.zeros_like(u))

    return jax.tree.map(project, updates, params, flags), state

  return optax.GradientTransformation(init, update)


def create_optimizer(optim: ml_collections.ConfigDict,
                     learning_rate_fn, steps_per_epoch: int = 1
                     ) -> optax.GradientTransformation:
  """optax AdamW or LARS from ``config.optim``, with optional clipping and
  freezing.

  Weight decay (and LARS's trust ratio) applies to parameters with ndim > 1
  only (kernels), not to biases or BatchNorm scales and offsets. With
  ``clip_grad_norm`` > 0 the gradient is first rescaled to global L2 norm
  at most that value (``optax.clip_by_global_norm``; the official DINO
  code clips at 3.0, per parameter tensor there, globally here). With
  ``freeze_last_layer_epochs`` > 0 (a field of DINO's and SwAV's configs)
  the parameters named ``last_layer*`` do not move during that many epochs
  (`freeze_while`). With ``normalize_last_layer`` (SwAV's prototypes) the
  2-D ``last_layer*`` kernels end every step with unit-norm columns
  (`unit_columns_after`).

  Args:
    optim: ``config.optim``: ``name`` ("adamw" | "lars"), ``weight_decay``,
      ``clip_grad_norm`` (float >= 0, 0: no clipping); optionally
      ``freeze_last_layer_epochs`` (float >= 0) and
      ``normalize_last_layer`` (bool); for "lars" also
      ``lars.momentum`` (heavy-ball momentum in [0, 1)) and
      ``lars.trust_coefficient`` (η of the layer-wise trust ratio, > 0).
    learning_rate_fn: a schedule step -> lr (`create_learning_rate_fn`) or
      a constant lr.
    steps_per_epoch: converts ``freeze_last_layer_epochs`` to steps.

  Returns:
    the optax GradientTransformation. Its state is the bare optimiser's
    unless clipping or freezing is on (then an ``optax.chain`` state).

  Raises:
    ValueError: ``optim.name`` is neither "adamw" nor "lars".
  """
  if optim.name == "adamw":
    tx = optax.adamw(learning_rate_fn, weight_decay=optim.weight_decay,
                     mask=_decay_mask)
  elif optim.name == "lars":
    tx = optax.lars(learning_rate_fn, weight_decay=optim.weight_decay,
                    weight_decay_mask=_decay_mask, trust_ratio_mask=_decay_mask,
                    trust_coefficient=optim.lars.trust_coefficient,
                    momentum=optim.lars.momentum)
  else:
    raise ValueError(f"unknown optimiser {optim.name!r}; expected one of "
                     f"{OPTIMIZERS}")
  chain = [tx]
  freeze_steps = int(round(optim.get("freeze_last_layer_epochs", 0.0)
                           * steps_per_epoch))
  if freeze_steps > 0:
    chain = [freeze_while(freeze_steps, _last_layer_mask), tx,
             freeze_while(freeze_steps, _last_layer_mask)]
  if optim.get("normalize_last_layer", False):
    chain.append(unit_columns_after(
        lambda params: jax.tree.map(lambda m, p: m and p.ndim == 2,
                                    _last_layer_mask(params), params)))
  clip = optim.get("clip_grad_norm", 0.0)
  if clip:
    chain.insert(0, optax.clip_by_global_norm(clip))
  return chain[0] if len(chain) == 1 else optax.chain(*chain)
