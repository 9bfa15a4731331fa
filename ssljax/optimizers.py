"""The optimiser of the network and its learning-rate schedule.

Both read ``config.optim`` (configs/common.py): ``name`` ("adamw" |
"lars"), ``learning_rate`` (peak, per batch of 256 samples),
``weight_decay``, ``warmup_epochs``, ``end_lr_factor`` and, for LARS only,
``lars.momentum`` and ``lars.trust_coefficient``.
"""

from collections.abc import Callable

import jax
import ml_collections
import optax

__all__ = ["create_learning_rate_fn", "create_optimizer"]

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


def create_optimizer(optim: ml_collections.ConfigDict,
                     learning_rate_fn) -> optax.GradientTransformation:
  """optax AdamW or LARS from ``config.optim``.

  Weight decay (and LARS's trust ratio) applies to parameters with ndim > 1
  only (kernels), not to biases or BatchNorm scales and offsets.

  Args:
    optim: ``config.optim``: ``name`` ("adamw" | "lars"), ``weight_decay``;
      for "lars" also ``lars.momentum`` (heavy-ball momentum in [0, 1)) and
      ``lars.trust_coefficient`` (η of the layer-wise trust ratio, > 0).
    learning_rate_fn: a schedule step -> lr (`create_learning_rate_fn`) or
      a constant lr.

  Returns:
    the optax GradientTransformation.

  Raises:
    ValueError: ``optim.name`` is neither "adamw" nor "lars".
  """
  if optim.name == "adamw":
    return optax.adamw(learning_rate_fn, weight_decay=optim.weight_decay,
                       mask=_decay_mask)
  if optim.name == "lars":
    return optax.lars(learning_rate_fn, weight_decay=optim.weight_decay,
                      weight_decay_mask=_decay_mask, trust_ratio_mask=_decay_mask,
                      trust_coefficient=optim.lars.trust_coefficient,
                      momentum=optim.lars.momentum)
  raise ValueError(f"unknown optimiser {optim.name!r}; expected one of "
                   f"{OPTIMIZERS}")
