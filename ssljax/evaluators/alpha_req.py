"""α-ReQ: power-law decay of the covariance spectrum of h and of z.

Yields "<name>/alpha_req" on the features of the labelled split ``split``
(skipped when the run has no labelled split) and "<name>/alpha_req_z" on
the V·B projector outputs of `EvalContext.view_embeddings`. Labels are
never read.

Options:
  fit_range: None (all ranks, zero eigenvalues left out) or [first, last],
    1-based ranks of the eigenvalues fitted, first < last.
  split: "test" (default) or "train": whose features give h.

References:
  Agrawal, Mondal, Ghosh & Richards 2022, "α-ReQ: Assessing Representation
  Quality in Self-Supervised Learning by measuring eigenspectrum decay",
  NeurIPS 2022.
"""

from __future__ import annotations

import numpy as np

from ssljax import metrics
from ssljax.evaluators import base

__all__ = ["Evaluator"]


class Evaluator(base.Evaluator):
  """α of λ_k ∝ k^−α for h (features of one split) and z (view embeddings)."""

  def __init__(self, name, ctx, *, every_steps=None, fit_range=None,
               split: str = "test"):
    super().__init__(name, ctx, every_steps=every_steps)
    if fit_range is not None:
      ok = (isinstance(fit_range, (tuple, list)) and len(fit_range) == 2
            and all(isinstance(v, int) and not isinstance(v, bool)
                    for v in fit_range) and 1 <= fit_range[0] < fit_range[1])
      if not ok:
        raise ValueError(f"evals.{name}.fit_range must be None or [first, "
                         f"last] ints with 1 <= first < last, got "
                         f"{fit_range!r}")
      fit_range = tuple(fit_range)
    if split not in ("train", "test"):
      raise ValueError(f"evals.{name}.split must be 'train' or 'test', got "
                       f"{split!r}")
    self.fit_range, self.split = fit_range, split

  def _alpha(self, x_NxD, suffix):
    if self.fit_range is not None and self.fit_range[1] > x_NxD.shape[1]:
      raise ValueError(f"evals.{self.name}.fit_range={list(self.fit_range)} "
                       f"exceeds the {x_NxD.shape[1]} eigenvalues of "
                       f"{suffix or 'h'}")
    return float(metrics.alpha_req(x_NxD, fit_range=self.fit_range))

  def run(self, state):
    if self.ctx.features is not None:
      h_NxD, _ = self.ctx.features(state, self.split)
      yield f"{self.name}/alpha_req", self._alpha(np.asarray(h_NxD), "")
    _, z_VxBxK, _ = self.ctx.view_embeddings(state)
    z_NxK = np.asarray(z_VxBxK).reshape(-1, np.shape(z_VxBxK)[-1])
    yield f"{self.name}/alpha_req_z", self._alpha(z_NxK, "z")
