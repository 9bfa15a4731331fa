"""Baseline: the linear probe of the encoder at its random initialisation.

Features of ``ctx.initial_state()`` (the run's seed, before any step),
probed with the options of `ssljax.evaluators.linear_probe` (its subclass):
how much of the probe accuracy the architecture gives without training.
Metrics as the linear probe's: ``<name>/test_accuracy``,
``<name>/val_accuracy``, ``<name>/l2``; use ``every_steps=None``.
"""

from __future__ import annotations

from ssljax.evaluators import linear_probe

__all__ = ["Evaluator"]


class Evaluator(linear_probe.Evaluator):
  """Linear probe of the randomly initialised encoder; linear-probe options."""

  baseline = True

  def inputs(self, state):
    del state  # the initial state replaces it
    if self.ctx.features is None:
      return "no labelled split"
    init = self.ctx.initial_state()
    return (*self.ctx.features(init, "train"),
            *self.ctx.features(init, "test"))
