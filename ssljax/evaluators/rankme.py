"""RankMe of the encoder representations h and of the projector outputs z.

Yields "<name>/rankme" on the features of the labelled split ``split``
(skipped when the run has no labelled split) and "<name>/rankme_z" on the
V·B projector outputs of `EvalContext.view_embeddings` (views stacked as
rows). Labels are never read.

Options:
  eps: positive smoothing of the normalised singular values (1e-7).
  split: "test" (default) or "train": whose features give h.

References:
  Garrido, Balestriero, Najman & LeCun 2023, "RankMe: Assessing the
  Downstream Performance of Pretrained Self-Supervised Representations by
  Their Rank", arXiv 2210.02885, eq. (1).
"""

from __future__ import annotations

import numpy as np

from ssljax import metrics
from ssljax.evaluators import base

__all__ = ["Evaluator"]


class Evaluator(base.Evaluator):
  """RankMe of h (features of one split) and of z (view embeddings)."""

  def __init__(self, name, ctx, *, every_steps=None, eps: float = 1e-7,
               split: str = "test"):
    super().__init__(name, ctx, every_steps=every_steps)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (
        np.isfinite(eps) and eps > 0):
      raise ValueError(f"evals.{name}.eps must be a number > 0, got {eps!r}")
    if split not in ("train", "test"):
      raise ValueError(f"evals.{name}.split must be 'train' or 'test', got "
                       f"{split!r}")
    self.eps, self.split = float(eps), split

  def run(self, state):
    if self.ctx.features is not None:
      h_NxD, _ = self.ctx.features(state, self.split)
      yield f"{self.name}/rankme", float(metrics.rankme(h_NxD, self.eps))
    _, z_VxBxK, _ = self.ctx.view_embeddings(state)
    z_NxK = np.asarray(z_VxBxK).reshape(-1, np.shape(z_VxBxK)[-1])
    yield f"{self.name}/rankme_z", float(metrics.rankme(z_NxK, self.eps))
