"""Accuracy of the online linear classifier trained beside the encoder.

The train step fits a linear classifier ``state.probe["params"]`` =
{"kernel": (D, C), "bias": (C,)} on stop-gradient representations of the
training images (by default the representation evaluated here, in
inference mode, of the clean images; `ssljax.online_probe`: its options,
optimiser, initial state and update), standardised like a BatchNorm without affine
parameters (batch statistics in training, running ``state.probe["stats"]``
{"mean", "var"} here), one optimiser step per train step, so it needs no
extra pass over the data. This evaluator applies the moving average of
its weights, ``state.probe["average"]`` (``params`` for a state without
one), unchanged, to the centre-crop representations ``ctx.features(state, "test")`` (and "train").
It is a cheap running estimate and differs from the offline probe
(`ssljax.evaluators.linear_probe`), which refits to convergence on fixed,
standardised features with a chosen L2 strength.

Metrics: ``<name>/test_accuracy``, ``<name>/train_accuracy``.
"""

from __future__ import annotations

import jax
import numpy as np

from ssljax import deprecation, online_probe
from ssljax.evaluators import base
from ssljax.evaluators.base import check_option

__all__ = ["Evaluator", "accuracy"]

__getattr__ = deprecation.moved_names(
    __name__, {"online_probe_update": "ssljax.online_probe.update",
               "STATS_EPS": "ssljax.online_probe.STATS_EPS"})


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
    x = (x - mean) / np.sqrt(var + online_probe.STATS_EPS)
  logits = x @ kernel + bias
  return float(np.mean(np.argmax(logits, -1) == np.asarray(labels)))


class Evaluator(base.Evaluator):
  """Scores ``state.probe``.

  This entry is also the online probe's one switch: a run whose
  ``config.evals`` has an entry of this type trains the probe in its train
  step (`ssljax.online_probe.update`) with AdamW of the options below
  (`ssljax.online_probe.options`); a run without one trains none.

  Options:
    learning_rate: the probe's AdamW learning rate (> 0; 1e-2).
    weight_decay: its decoupled weight decay (>= 0; 0).
    features: what it trains on, "inference" (the representation the
      evaluators probe; default) or "train_forward" (the training forward
      pass's of the augmented view, free; `ssljax.online_probe`).
    views: with "inference", the images: "clean" (the un-augmented train
      images as the evaluators see them; default) or "augmented" (the
      first global view).
    ema_decay: the decay of the weight average scored here (in [0, 1);
      0.9; 0 scores the last weights).
  """

  uses_labels = True

  def __init__(self, name, ctx, *, every_steps=None,
               learning_rate=online_probe.DEFAULTS["learning_rate"],
               weight_decay=online_probe.DEFAULTS["weight_decay"],
               features=online_probe.DEFAULTS["features"],
               views=online_probe.DEFAULTS["views"],
               ema_decay=online_probe.DEFAULTS["ema_decay"]):
    super().__init__(name, ctx, every_steps=every_steps)
    ok = lambda v, lo: (isinstance(v, (int, float)) and not isinstance(v, bool)
                        and v >= lo)
    check_option(name, "learning_rate", learning_rate,
                 ok(learning_rate, 0) and learning_rate > 0, "a number > 0")
    check_option(name, "weight_decay", weight_decay, ok(weight_decay, 0),
                 "a number >= 0")
    check_option(name, "features", features,
                 features in online_probe.FEATURES,
                 "one of " + ", ".join(map(repr, online_probe.FEATURES)))
    check_option(name, "views", views, views in online_probe.VIEWS,
                 "one of " + ", ".join(map(repr, online_probe.VIEWS)))
    check_option(name, "ema_decay", ema_decay,
                 ok(ema_decay, 0) and ema_decay < 1, "a number in [0, 1)")
    self.learning_rate, self.weight_decay = learning_rate, weight_decay
    self.features, self.views, self.ema_decay = features, views, ema_decay

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
          probe.get("average", probe["params"]), x, y, probe.get("stats"))
