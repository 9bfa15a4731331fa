"""The train state and what builds it: network, optimisers, initial state.

``TrainState`` is flax's TrainState plus BatchNorm statistics, the momentum
teacher, the method's memory (queue, centre) and the online probe: one
pytree, sharded, donated and checkpointed as a whole, so a resume restores
all of it bit-exactly.
"""

from typing import Any

import flax
from flax.training import train_state
import jax
import jax.numpy as jnp
import ml_collections
import optax

from ssljax import methods, models, predictive

__all__ = ["TrainState", "create_learning_rate_fn", "create_optimizer",
           "create_network", "create_train_state", "create_probe_optimizer"]


class TrainState(train_state.TrainState):
  """Flax TrainState plus BatchNorm running statistics and what some methods
  and the online probe carry between steps.

  Attributes:
    batch_stats: BatchNorm running statistics of the online network.
    teacher: {"params", "batch_stats"} of the momentum (EMA) teacher, or {}.
    memory: the method's memory (`ssljax.predictive`: NNCLR's support queue
      {"z", "ptr"}, DINO's centre), or {}.
    probe: the online linear probe {"params": {"kernel" (D, C), "bias"
      (C,)}, "opt_state", "stats": running {"mean" (D,), "var" (D,)} of
      the representation}, or {}.
  """
  batch_stats: Any
  teacher: Any = flax.struct.field(default_factory=dict)
  memory: Any = flax.struct.field(default_factory=dict)
  probe: Any = flax.struct.field(default_factory=dict)


# ---------------------------------------------------------------- optimiser --
def create_learning_rate_fn(optim: ml_collections.ConfigDict, batch_size: int,
                            steps_per_epoch: int, total_steps: int):
  """Linear warm-up then cosine decay; peak lr = learning_rate · batch/256."""
  peak = optim.learning_rate * batch_size / 256
  warmup = min(int(optim.warmup_epochs * steps_per_epoch), total_steps - 1)
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=peak, warmup_steps=max(warmup, 0),
      decay_steps=total_steps, end_value=peak * optim.end_lr_factor)


def _decay_mask(params):
  # Weight decay and LARS trust ratios on kernels only, as in VICReg/BYOL.
  return jax.tree.map(lambda p: p.ndim > 1, params)


def create_optimizer(optim: ml_collections.ConfigDict, learning_rate_fn):
  """optax AdamW or LARS from the config. Raises ValueError on other names."""
  if optim.name == "adamw":
    return optax.adamw(learning_rate_fn, weight_decay=optim.weight_decay,
                       mask=_decay_mask)
  if optim.name == "lars":
    return optax.lars(learning_rate_fn, weight_decay=optim.weight_decay,
                      weight_decay_mask=_decay_mask, trust_ratio_mask=_decay_mask,
                      trust_coefficient=optim.trust_coefficient,
                      momentum=optim.momentum)
  raise ValueError(f"unknown optimiser {optim.name!r}; expected 'adamw' or 'lars'")


# -------------------------------------------------------------------- model --
def create_network(config: ml_collections.ConfigDict) -> models.SSLNetwork:
  dtypes = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
  if config.model.dtype not in dtypes:
    raise ValueError(f"model.dtype must be one of {sorted(dtypes)}, got "
                     f"{config.model.dtype!r}")
  return models.make_network(
      config.model.encoder, config.model.encoder_kwargs.to_dict(),
      config.model.projector, dtypes[config.model.dtype],
      predictor_features=tuple(config.model.predictor),
      head=config.model.head, head_kwargs=config.model.head_kwargs.to_dict())


def create_train_state(network, tx, key, image_shape, *,
                       method: str = "vicreg", loss_kwargs: dict | None = None,
                       num_classes: int = 0, probe_tx=None) -> TrainState:
  """Initialises parameters, optimiser state and the method's extras.

  Args:
    network: the `ssljax.models.SSLNetwork`.
    tx: the optax optimiser of the network.
    key: PRNG key (parameters; NNCLR's initial queue).
    image_shape: (H, W, C) of the global views.
    method: the method (a momentum teacher starts as a copy of the
      parameters; NNCLR's queue and DINO's centre start as
      `ssljax.predictive.init_memory` makes them).
    loss_kwargs: the method's hyper-parameters (``queue_size``).
    num_classes: C > 0 adds the online linear probe on the D-dim
      representation, trained by ``probe_tx``.
  """
  x = jnp.zeros((2, *image_shape), jnp.float32)
  variables = network.init(key, x, train=False)
  out = jax.eval_shape(lambda v: network.apply(v, x, train=False), variables)
  spec = methods.METHODS[method]
  params, batch_stats = variables["params"], variables.get("batch_stats", {})
  # The teacher starts as a copy (own buffers: the step donates the state).
  teacher = (jax.tree.map(jnp.copy, {"params": params,
                                     "batch_stats": batch_stats})
             if spec.teacher else {})
  memory = {}
  if spec.predictive:
    memory = predictive.init_memory(method, jax.random.fold_in(key, 1),
                                    out[1].shape[-1], **(loss_kwargs or {}))
  probe = {}
  if num_classes > 0:
    dim = out[0].shape[-1]
    probe_params = {"kernel": jnp.zeros((dim, num_classes), jnp.float32),
                    "bias": jnp.zeros((num_classes,), jnp.float32)}
    probe = {"params": probe_params, "opt_state": probe_tx.init(probe_params),
             "stats": {"mean": jnp.zeros((dim,), jnp.float32),
                       "var": jnp.ones((dim,), jnp.float32)}}
  return TrainState.create(apply_fn=network.apply, params=params,
                           batch_stats=batch_stats, tx=tx, teacher=teacher,
                           memory=memory, probe=probe)


def create_probe_optimizer(config: ml_collections.ConfigDict):
  """optax AdamW of the online probe (``config.online_probe``)."""
  return optax.adamw(config.online_probe.learning_rate,
                     weight_decay=config.online_probe.weight_decay)
