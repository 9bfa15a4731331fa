"""LiDAR of the view embeddings, the source images as surrogate classes.

`EvalContext.view_embeddings` gives V augmented views of B fixed train
images; each image is one class of an LDA problem, and LiDAR is the
effective rank of its Σ_w^{−1/2} Σ_b Σ_w^{−1/2} (see `ssljax.metrics.lidar`).
Yields "<name>/lidar" on the projector outputs z (V, B, K), or on the
representations h (V, B, D) with ``representation="h"``. Labels are never
read. Needs V >= 2 and B >= 2.

Options:
  representation: "z" (default) or "h".
  delta: positive ridge added to the within-class scatter (1e-4).
  eps: positive smoothing of the normalised eigenvalues (1e-7).

References:
  Thilak et al. 2023, "LiDAR: Sensing Linear Probing Performance in Joint
  Embedding SSL Architectures", arXiv 2312.04000, eqs. (2)–(5).
"""

from __future__ import annotations

import numpy as np

from ssljax import metrics
from ssljax.evaluators import base

__all__ = ["Evaluator"]


class Evaluator(base.Evaluator):
  """LiDAR of z (or h) with one surrogate class per source image."""

  min_global_views = 2

  def __init__(self, name, ctx, *, every_steps=None,
               representation: str = "z", delta: float = 1e-4,
               eps: float = 1e-7):
    super().__init__(name, ctx, every_steps=every_steps)
    if representation not in ("z", "h"):
      raise ValueError(f"evals.{name}.representation must be 'z' or 'h', got "
                       f"{representation!r}")
    for option, value in (("delta", delta), ("eps", eps)):
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
          np.isfinite(value) and value > 0):
        raise ValueError(f"evals.{name}.{option} must be a number > 0, got "
                         f"{value!r}")
    self.representation = representation
    self.delta, self.eps = float(delta), float(eps)

  def run(self, state):
    h_VxBxD, z_VxBxK, _ = self.ctx.view_embeddings(state)
    x = np.asarray(z_VxBxK if self.representation == "z" else h_VxBxD)
    if x.ndim != 3 or x.shape[0] < 2 or x.shape[1] < 2:
      raise ValueError(f"evals.{self.name}: LiDAR needs >= 2 views of >= 2 "
                       f"images, got view embeddings of shape {x.shape}")
    yield f"{self.name}/lidar", float(
        metrics.lidar(x, delta=self.delta, eps=self.eps))
