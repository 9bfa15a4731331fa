"""The train state and what builds it: the method, optimisers, initial state.

``TrainState`` holds the step, the method's trainable parameters and their
optimiser state, the method's own state (BatchNorm statistics, EMA teacher,
queue, centre) and the online probe: one pytree, sharded, donated and
checkpointed as a whole, so a resume restores all of it bit-exactly. The
method object itself and the optimiser are static fields.
"""

import functools
from typing import Any

import flax
import jax
import jax.numpy as jnp
import optax

from ssljax import deprecation, methods, online_probe

__all__ = ["TrainState", "create_train_state", "CHECKPOINT_FIELDS"]

__getattr__ = deprecation.moved_names(__name__, {
    "create_probe_optimizer": "ssljax.online_probe.create_optimizer",
    "online_probe_options": "ssljax.online_probe.options",
    # Re-exported from their home until then.
    "create_learning_rate_fn": "ssljax.optimizers.create_learning_rate_fn",
    "create_optimizer": "ssljax.optimizers.create_optimizer"})

# The top-level entries of a checkpointed state (its layout): a checkpoint
# with other entries (e.g. "batch_stats", "teacher", "memory" of ssljax
# before the method interface) is refused by the restore with one line.
CHECKPOINT_FIELDS = ("step", "params", "opt_state", "method_state", "probe")


class TrainState(flax.struct.PyTreeNode):
  """Step, parameters, optimiser state, method state and online probe.

  Attributes:
    step: int32 0-d, optimiser steps taken.
    params: the method's trainable parameters (e.g. {"encoder",
      "projector", "predictor"}).
    opt_state: the optimiser's state of ``params``.
    method_state: the method's non-trainable state: {"batch_stats"} and,
      by method, "teacher" {"params", "batch_stats"}, "queue" {"z", "ptr"},
      "center" (K,).
    probe: the online linear probe {"params": {"kernel" (D, C), "bias"
      (C,)}, "opt_state", "stats": running {"mean" (D,), "var" (D,)} of the
      representation}, or {}.
    method: the `ssljax.methods.Method` (static).
    tx: the optax optimiser of ``params`` (static).
  """
  step: Any
  params: Any
  opt_state: Any
  method_state: Any
  probe: Any
  method: Any = flax.struct.field(pytree_node=False)
  tx: Any = flax.struct.field(pytree_node=False)

  def apply_gradients(self, *, grads, **changes):
    """One optimiser step on ``params``; other fields replaced by
    ``changes``."""
    updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
    return self.replace(step=self.step + 1,
                        params=optax.apply_updates(self.params, updates),
                        opt_state=opt_state, **changes)

  def representation(self, images):
    """h (B, D) of float32 images (B, S, S, C) in [0, 1], inference mode."""
    return self.method.representation(self.params, self.method_state, images)


@functools.lru_cache(maxsize=8)
def _init_program(method, tx, batch_spec, num_classes, probe_tx):
  """The jitted key -> (step, params, opt_state, method_state, probe) of
  `create_train_state`, kept per arguments: a second state of the same run
  (the random-init baseline, a resume's template) reuses the trace."""

  def arrays(key):
    params, method_state = method.init(key, batch_spec)
    probe = {}
    if num_classes > 0:
      x = jnp.zeros((2, *batch_spec.view_shape), jnp.float32)
      dim = jax.eval_shape(method.representation, params, method_state,
                           x).shape[-1]
      probe = online_probe.initial_state(dim, num_classes, probe_tx)
    return (jnp.zeros((), jnp.int32), params, tx.init(params), method_state,
            probe)

  return jax.jit(arrays)


def create_train_state(method, tx, key, batch_spec: methods.BatchSpec, *,
                       num_classes: int = 0, probe_tx=None) -> TrainState:
  """Initialises parameters, optimiser state, method state and probe.

  The arrays are made by one jitted (compiled) function rather than op by
  op: an eager initialisation dispatches, and on a first run compiles, every
  initialiser's primitives one at a time (15 s for the ResNet-50 ImageNet
  recipe on 2 CPU cores, against 8 s jitted), and the persistent
  compilation cache, when on, keeps the one program.

  Args:
    method: the run's `ssljax.methods.Method`.
    tx: the optax optimiser of the method's parameters.
    key: PRNG key (``method.init``).
    batch_spec: the shapes of the views (`ssljax.methods.BatchSpec`).
    num_classes: C > 0 adds the online linear probe on the D-dim
      representation (`ssljax.online_probe.initial_state`), trained by
      ``probe_tx``.
    probe_tx: optax optimiser of the online probe (needed when C > 0;
      `ssljax.online_probe.create_optimizer`).

  Returns:
    The `TrainState` at step 0, on JAX's default device.

  Raises:
    ValueError: num_classes > 0 without probe_tx.
    jax.errors.TracerArrayConversionError: ``method.init`` or ``tx.init``
      converts a parameter to NumPy (both run under `jax.jit`: write them
      with jax.numpy, as optax's and flax's own are).
  """
  if num_classes > 0 and probe_tx is None:
    raise ValueError("num_classes > 0 adds the online probe: give probe_tx")
  args = (method, tx, batch_spec, num_classes, probe_tx)
  try:  # one traced and compiled program per (method, optimisers, shapes)
    program = _init_program(*args)
  except TypeError:  # an unhashable optimiser: traced at every call
    program = _init_program.__wrapped__(*args)
  step, params, opt_state, method_state, probe = program(key)
  return TrainState(step=step, params=params, opt_state=opt_state,
                    method_state=method_state, probe=probe, method=method,
                    tx=tx)
