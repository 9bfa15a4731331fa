"""Baseline: the linear probe of the encoder at its random initialisation.

Features of ``ctx.initial_state()`` (the run's seed, before any step),
probed with the options of `ssljax.evaluators.linear_probe` (its subclass):
how much of the probe accuracy the architecture gives without training.
Metrics as the linear probe's: ``<name>/test_accuracy``,
``<name>/val_accuracy``, ``<name>/l2``; use ``every_steps=None``.

With the baseline cache on, a single-process run with in-memory splits
reuses an earlier result of the same config, code and data without
extracting the features (`ssljax.evaluators.baseline_cache.setup_key`).
"""

from __future__ import annotations

import jax

from ssljax.evaluators import baseline_cache, linear_probe

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

  def setup_digest(self) -> str | None:
    """`baseline_cache.setup_key` of this run, or None where it does not
    apply (several processes, streamed or unlabelled splits)."""
    if jax.process_count() > 1 or self.ctx.features is None:
      return None
    train, test = self.ctx.raw_pixels("train"), self.ctx.raw_pixels("test")
    if train is None or test is None:
      return None
    return baseline_cache.setup_key(type(self).__module__,
                                    self.cache_options(), self.ctx.config,
                                    (*train, *test))

  def result(self, state):
    directory = self.cache_directory()
    digest = self.setup_digest() if directory is not None else None
    if digest is not None:
      out = self.load_cached(directory, digest)
      if out is not None:
        return out
    out = super().result(state)
    if digest is not None and not isinstance(out, str):
      baseline_cache.store(directory, digest, out)
    return out
