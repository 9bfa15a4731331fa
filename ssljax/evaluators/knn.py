"""Weighted k-nearest-neighbour accuracy of the encoder representations.

`ssljax.probes.knn_accuracy` (Wu et al. 2018, "Unsupervised Feature
Learning via Non-Parametric Instance Discrimination": cosine similarity,
votes weighted by exp(s/τ)) on ``ctx.features(state, "train"/"test")``.
Cheap enough to run every few thousand steps.

Metric: ``<name>/test_accuracy``.
"""

from __future__ import annotations

import numbers

from ssljax import probes
from ssljax.evaluators import base
from ssljax.evaluators.base import check_option

__all__ = ["Evaluator"]


class Evaluator(base.Evaluator):
  """k-NN monitor.

  Args:
    name, ctx, every_steps: see `ssljax.evaluators.base.Evaluator`.
    k: neighbours (>= 1; lowered to the number of train rows when larger).
    temperature: τ > 0 of the vote weights.
  """

  uses_labels = True

  def __init__(self, name, ctx, *, every_steps=None, k=20, temperature=0.07):
    super().__init__(name, ctx, every_steps=every_steps)
    check_option(name, "k", k, isinstance(k, numbers.Integral)
                 and not isinstance(k, bool) and k >= 1, "an integer >= 1")
    check_option(name, "temperature", temperature,
                 isinstance(temperature, numbers.Real)
                 and not isinstance(temperature, bool) and temperature > 0,
                 "a number > 0")
    self.k, self.temperature = int(k), float(temperature)

  def run(self, state):
    if self.ctx.features is None:
      if self.ctx.shown:
        print(f"{self.name}: skipped (no labelled split)", flush=True)
      return
    xtr, ytr = self.ctx.features(state, "train")
    xte, yte = self.ctx.features(state, "test")
    yield f"{self.name}/test_accuracy", probes.knn_accuracy(
        xtr, ytr, xte, yte, k=min(self.k, len(xtr)),
        temperature=self.temperature, progress=self.ctx.shown)
