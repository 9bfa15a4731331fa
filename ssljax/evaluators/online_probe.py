"""Accuracy of the online linear classifier trained beside the encoder.

The train step fits a linear classifier ``state.probe["params"]`` =
{"kernel": (D, C), "bias": (C,)} on stop-gradient representations of the
*augmented* training views, standardised like a BatchNorm without affine
parameters (batch statistics in training, running ``state.probe["stats"]``
{"mean", "var"} here), one optimiser step per train step, so it costs no
extra pass over the data. This evaluator applies it, unchanged, to the
centre-crop representations ``ctx.features(state, "test")`` (and "train").
It is a cheap running estimate and differs from the offline probe
(`ssljax.evaluators.linear_probe`), which refits to convergence on fixed,
standardised, non-augmented features with a chosen L2 strength.

Metrics: ``<name>/test_accuracy``, ``<name>/train_accuracy``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ssljax.evaluators import base
from ssljax.evaluators.base import check_option

__all__ = ["Evaluator", "accuracy", "online_probe_update"]

# Added to the variance before the square root, in the train step's
# standardisation (`online_probe_update`) and in this evaluator's.
STATS_EPS = 1e-5


def online_probe_update(probe: dict, h_BxD, labels, probe_tx):
  """One step of the online linear probe on stop-gradient features h.

  h is standardised by the batch's statistics (a BatchNorm without affine
  parameters, whose running statistics, momentum 0.9, the evaluator
  `ssljax.evaluators.online_probe` uses); rows with label −1 are left out.

  Args:
    probe: {"params": {"kernel" (D, C), "bias" (C,)}, "opt_state",
      "stats": {"mean" (D,), "var" (D,)}} (`ssljax.train.TrainState.probe`).
    h_BxD: (B, D) representations (any float dtype; no gradient flows back).
    labels: int32 (B,) class labels, −1 unknown.
    probe_tx: the probe's optax optimiser.

  Returns:
    (new probe, {"online_probe_loss", "online_probe_train_accuracy"}:
    float32 0-d cross-entropy and accuracy over the known rows).
  """
  h_BxD = jax.lax.stop_gradient(h_BxD).astype(jnp.float32)
  mean, var = jnp.mean(h_BxD, 0), jnp.var(h_BxD, 0)
  h_BxD = (h_BxD - mean) * jax.lax.rsqrt(var + STATS_EPS)
  stats = jax.tree.map(lambda old, new: 0.9 * old + 0.1 * new,
                       probe["stats"], {"mean": mean, "var": var})
  known = labels >= 0

  def loss_fn(params):
    logits = h_BxD @ params["kernel"] + params["bias"]
    ce = optax.softmax_cross_entropy_with_integer_labels(
        logits, jnp.maximum(labels, 0))
    count = jnp.maximum(jnp.sum(known), 1)
    hits = (jnp.argmax(logits, -1) == labels) & known
    return jnp.sum(ce * known) / count, jnp.sum(hits) / count

  params = probe["params"]
  (loss, accuracy), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
  updates, opt_state = probe_tx.update(grads, probe["opt_state"], params)
  return ({"params": optax.apply_updates(params, updates),
           "opt_state": opt_state, "stats": stats},
          {"online_probe_loss": loss, "online_probe_train_accuracy": accuracy})



def accuracy(params: dict, features: np.ndarray, labels: np.ndarray,
             stats: dict | None = None) -> float:
  """Fraction of rows whose argmax of ``x @ kernel + bias`` is the label,
  x = (features − mean) / √(var + 1e-5) with the probe's running ``stats``
  (x = features when None).

  Args:
    params: {"kernel": (D, C), "bias": (C,)}.
    features: float (N, D); labels: int (N,).
    stats: {"mean": (D,), "var": (D,)} or None.

  Raises:
    ValueError: the kernel does not match D.
  """
  kernel = np.asarray(jax.device_get(params["kernel"]), np.float32)
  bias = np.asarray(jax.device_get(params["bias"]), np.float32)
  if kernel.ndim != 2 or kernel.shape[0] != features.shape[1]:
    raise ValueError(f"online probe kernel {kernel.shape} does not match "
                     f"features {features.shape}")
  x = np.asarray(features, np.float32)
  if stats:
    mean = np.asarray(jax.device_get(stats["mean"]), np.float32)
    var = np.asarray(jax.device_get(stats["var"]), np.float32)
    x = (x - mean) / np.sqrt(var + STATS_EPS)
  logits = x @ kernel + bias
  return float(np.mean(np.argmax(logits, -1) == np.asarray(labels)))


class Evaluator(base.Evaluator):
  """Scores ``state.probe``.

  This entry is also the online probe's one switch: a run whose
  ``config.evals`` has an entry of this type trains the probe in its train
  step (`online_probe_update`) with AdamW of the options
  below; a run without one trains none.

  Options:
    learning_rate: the probe's AdamW learning rate (> 0; 1e-2).
    weight_decay: its decoupled weight decay (>= 0; 0).
  """

  uses_labels = True

  def __init__(self, name, ctx, *, every_steps=None, learning_rate=1e-2,
               weight_decay=0.0):
    super().__init__(name, ctx, every_steps=every_steps)
    ok = lambda v, lo: (isinstance(v, (int, float)) and not isinstance(v, bool)
                        and v >= lo)
    check_option(name, "learning_rate", learning_rate,
                 ok(learning_rate, 0) and learning_rate > 0, "a number > 0")
    check_option(name, "weight_decay", weight_decay, ok(weight_decay, 0),
                 "a number >= 0")
    self.learning_rate, self.weight_decay = learning_rate, weight_decay

  def run(self, state):
    probe = getattr(state, "probe", None)
    why = ("no labelled split" if self.ctx.features is None else
           "the train state has no online probe" if not probe else None)
    if why:
      if self.ctx.shown:
        print(f"{self.name}: skipped ({why})", flush=True)
      return
    for split in ("test", "train"):
      x, y = self.ctx.features(state, split)
      yield f"{self.name}/{split}_accuracy", accuracy(
          probe["params"], x, y, probe.get("stats"))
