"""The online linear probe: a classifier trained beside the encoder.

A run whose ``config.evals`` has an entry of type "online_probe" trains a
linear classifier on stop-gradient representations of each training batch,
one AdamW step per train step. The representations are standardised like a
BatchNorm without affine parameters: by the batch's statistics in the train
step, by running statistics (momentum 0.9) when the evaluator
`ssljax.evaluators.online_probe` applies the probe to centre crops. The
evaluator scores an exponential moving average of the probe's weights
(option ``ema_decay``, default 0.9: about the last 10 steps).

Which images (option ``views``, for ``features="inference"``): "clean"
(default) the un-augmented train images as the evaluators see them (the
evaluation centre crop, `ssljax.data.eval_batches`), i.e. what the probe is
scored on; "augmented" the first global view of the train step. A batch
without whole images (images of several sizes, cropped on the host; ready
views) has no clean image: the probe then trains on the augmented view.

Which representation (option ``features``): "inference" (default) is the
one the evaluators probe, ``state.representation`` (the evaluated network,
BatchNorm in inference mode, the whole image) of the view, one extra
forward pass of one batch per step without gradient; "train_forward" is the
h of the training forward pass (free, but BatchNorm on batch statistics,
MAE's and I-JEPA's masked inputs, a student where a teacher is evaluated),
which can differ from what is evaluated: LeJEPA-CNN's BatchNorm running
statistics are mostly those of its six 14-px local crops, so its probe,
trained on batch-normalised 28-px views, scored 0.47 on the inference
features against the offline probe's 0.88 (docs/methods_benchmark.md).
"train_forward" always trains on the augmented views (option ``views`` is
not used).

Why these defaults (docs/methods_benchmark.md, "The online probe against
the offline one"): replayed on the feature trajectory of a 1-epoch VICReg
run (`experiments/online_probe_recipes.py`), training on clean images
instead of augmented views and scoring the weights' EMA (0.9) brought the
online probe from 0.137 to 0.071 below the offline one; larger learning
rates, SGD, a longer average or slower running statistics did worse, as
the encoder still moves fast at the end of a short run.

This module holds the probe itself: its options (`options`), its optimiser
(`create_optimizer`, built once per run), its initial state
(`initial_state`, part of `ssljax.train_state.TrainState`) and its train
step (`update`, called by `ssljax.train.train_step`).

The probe's state is a dict::

  {"params": {"kernel": float32 (D, C), "bias": float32 (C,)},
   "opt_state": the optimiser's state of "params",
   "stats": {"mean": float32 (D,), "var": float32 (D,)},
   "average": the EMA of "params" (same structure), what is scored}
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import optax

__all__ = ["DEFAULTS", "FEATURES", "VIEWS", "STATS_EPS", "options",
           "create_optimizer", "initial_state", "update"]

# The options of an "online_probe" evals entry that leaves them out.
DEFAULTS = {"learning_rate": 1e-2, "weight_decay": 0.0,
            "features": "inference", "views": "clean", "ema_decay": 0.9}

# The values of option "features" (module docstring).
FEATURES = ("inference", "train_forward")

# The values of option "views" (module docstring).
VIEWS = ("clean", "augmented")

# Added to the variance before the square root, in the train step's
# standardisation (`update`) and in the evaluator's.
STATS_EPS = 1e-5


def options(config: ml_collections.ConfigDict) -> dict | None:
  """The online probe's options, or None when the run has none.

  The ``config.evals`` entry of type "online_probe" is the probe's one
  switch; the first such entry (in ``evals.items()`` order) gives the
  options, `DEFAULTS` those it leaves out.

  Args:
    config: the run's ConfigDict (``evals`` optional; None entries are
      switched off).

  Returns:
    {"learning_rate": float, "weight_decay": float, "features": one of
    `FEATURES`, "views": one of `VIEWS`, "ema_decay": float in [0, 1)} as
    the entry gives them, or None without an entry of type "online_probe".
  """
  evals = config.get("evals") or {}
  for entry in evals.values():
    if entry is not None and entry.get("type") == "online_probe":
      return {name: entry.get(name, default)
              for name, default in DEFAULTS.items()}
  return None


def create_optimizer(config: ml_collections.ConfigDict
                     ) -> optax.GradientTransformation | None:
  """The online probe's optax AdamW (its `options`), or None when the run
  has no online probe. Build it once per run: the train step
  (`ssljax.train.sharded_train_step`) and the initial state
  (`ssljax.train_state.create_train_state`) take the same object.

  Args:
    config: the run's ConfigDict.

  Returns:
    ``optax.adamw(learning_rate, weight_decay=weight_decay)`` or None.
  """
  found = options(config)
  if found is None:
    return None
  return optax.adamw(found["learning_rate"],
                     weight_decay=found["weight_decay"])


def initial_state(dim: int, num_classes: int,
                  tx: optax.GradientTransformation) -> dict:
  """The probe at step 0: zero kernel and bias (and their average), the
  optimiser's initial state, running statistics mean 0 and variance 1.

  Traceable (`ssljax.train_state.create_train_state` calls it under
  `jax.jit`).

  Args:
    dim: D, the width of the representation (> 0).
    num_classes: C, the classes of the labels (> 0).
    tx: the probe's optimiser (`create_optimizer`).

  Returns:
    The probe's state (module docstring), float32.
  """
  params = {"kernel": jnp.zeros((dim, num_classes), jnp.float32),
            "bias": jnp.zeros((num_classes,), jnp.float32)}
  return {"params": params, "opt_state": tx.init(params),
          "stats": {"mean": jnp.zeros((dim,), jnp.float32),
                    "var": jnp.ones((dim,), jnp.float32)},
          "average": jax.tree.map(jnp.copy, params)}


def update(probe: dict, h_BxD, labels, tx: optax.GradientTransformation,
           ema_decay: float = DEFAULTS["ema_decay"]) -> tuple[dict, dict]:
  """One step of the online linear probe on stop-gradient features h.

  h is standardised by the batch's statistics (a BatchNorm without affine
  parameters, whose running statistics, momentum 0.9, the evaluator
  `ssljax.evaluators.online_probe` uses); rows with label −1 are left out.
  After the optimiser step, ``average`` ← ema_decay · average +
  (1 − ema_decay) · params (ema_decay 0: the params themselves). A probe
  state without "average" (a checkpoint from before it) starts it at the
  params.

  Args:
    probe: the probe's state (module docstring;
      `ssljax.train_state.TrainState.probe`).
    h_BxD: (B, D) representations (any float dtype; no gradient flows back).
    labels: int32 (B,) class labels, −1 unknown.
    tx: the probe's optax optimiser (`create_optimizer`).
    ema_decay: the average's decay, in [0, 1).

  Returns:
    (new probe, {"online_probe_loss", "online_probe_train_accuracy"}:
    float32 0-d cross-entropy and accuracy over the known rows; 0 when no
    row is known).
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
  updates, opt_state = tx.update(grads, probe["opt_state"], params)
  new_params = optax.apply_updates(params, updates)
  average = jax.tree.map(
      lambda a, p: ema_decay * a + (1.0 - ema_decay) * p,
      probe.get("average", params), new_params)
  return ({"params": new_params, "opt_state": opt_state, "stats": stats,
           "average": average},
          {"online_probe_loss": loss, "online_probe_train_accuracy": accuracy})
