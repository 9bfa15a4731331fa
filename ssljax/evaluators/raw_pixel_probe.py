"""Baseline: the linear probe of raw pixels (no encoder at all).

``ctx.raw_pixels("train"/"test")``: uint8 pixels, flattened (standardised
by the probe, so their scale does not matter), probed with the options of
`ssljax.evaluators.linear_probe` (its subclass). Skipped with one printed
line when a split streams (``raw_pixels`` returns None) or no split is
labelled. Metrics as the linear probe's: ``<name>/test_accuracy``,
``<name>/val_accuracy``, ``<name>/l2``. The pixels do not depend on the
state, so ``every_steps=None`` (after the last step only) is the sensible
choice.
"""

from __future__ import annotations

from ssljax.evaluators import linear_probe

__all__ = ["Evaluator"]


class Evaluator(linear_probe.Evaluator):
  """Linear probe of flattened pixels; options of the linear probe."""

  baseline = True

  def inputs(self, state):
    del state  # pixels do not depend on it
    if self.ctx.features is None:
      return "no labelled split"
    train, test = self.ctx.raw_pixels("train"), self.ctx.raw_pixels("test")
    if train is None or test is None:
      return "raw pixels are read only from in-memory splits"
    return (*train, *test)
