"""Covariance eigenspectrum of h and of z, and the share of its top part.

Yields, on the features of the labelled split ``split`` (skipped when the
run has no labelled split): "<name>/eigenvalues", the (D,) descending
eigenvalues as a 1-D np.ndarray (a spectrum, kept out of the scalar
summaries), and "<name>/top_fraction", the share Σ_{k<=t} λ_k / Σ_k λ_k of
the variance in the top t eigenvalues; then the same on the V·B projector
outputs of `EvalContext.view_embeddings` as "<name>/eigenvalues_z" and
"<name>/top_fraction_z". A share near 1 with small t flags dimensional
collapse.

Options:
  top_k: t, an int >= 1, or None (default): the top 1 % of the
    eigenvalues, t = ceil(D / 100), at least 1 (clipped to D).
  split: "test" (default) or "train": whose features give h.

References:
  Jing, Vincent, LeCun & Tian 2022, "Understanding Dimensional Collapse in
  Contrastive Self-supervised Learning", arXiv 2110.09348, §3 (the sorted
  log spectrum of the embedding covariance as a collapse diagnostic).
"""

from __future__ import annotations

import math

import numpy as np

from ssljax import metrics
from ssljax.evaluators import base

__all__ = ["Evaluator"]


class Evaluator(base.Evaluator):
  """Eigenvalues and top-t variance share of h and z."""

  def __init__(self, name, ctx, *, every_steps=None, top_k: int | None = None,
               split: str = "test"):
    super().__init__(name, ctx, every_steps=every_steps)
    if top_k is not None and (isinstance(top_k, bool) or
                              not isinstance(top_k, int) or top_k < 1):
      raise ValueError(f"evals.{name}.top_k must be an int >= 1 or None, got "
                       f"{top_k!r}")
    if split not in ("train", "test"):
      raise ValueError(f"evals.{name}.split must be 'train' or 'test', got "
                       f"{split!r}")
    self.top_k, self.split = top_k, split

  def _spectrum(self, x_NxD, suffix):
    lam_D = np.asarray(metrics.eigenspectrum(x_NxD), dtype=np.float64)
    t = self.top_k if self.top_k is not None else math.ceil(lam_D.size / 100)
    total = lam_D.sum()
    share = float(lam_D[:min(t, lam_D.size)].sum() / total) if total > 0 else (
        float("nan"))
    yield f"{self.name}/eigenvalues{suffix}", lam_D
    yield f"{self.name}/top_fraction{suffix}", share

  def run(self, state):
    if self.ctx.features is not None:
      h_NxD, _ = self.ctx.features(state, self.split)
      yield from self._spectrum(np.asarray(h_NxD), "")
    _, z_VxBxK, _ = self.ctx.view_embeddings(state)
    z_NxK = np.asarray(z_VxBxK).reshape(-1, np.shape(z_VxBxK)[-1])
    yield from self._spectrum(z_NxK, "_z")
