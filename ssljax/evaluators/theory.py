"""Distance of the learned batch embedding to the theory's optimum.

On the projector outputs z (V, B, K) of `EvalContext.view_embeddings`,
stacked view-major as (V·B, K) rows, and the batch graph G =
`ssljax.graphs.batch_graph(graph, V, B, labels)`, compares Z with the
closed-form optimum Z* for G (`ssljax.theory.diagnostics
.embedding_diagnostics`). Yields "<name>/gram_gap" (scale-fitted relative
distance of the Grams, 0 at the optimum), "<name>/principal_angle_max"
(largest principal angle between span Z and span Z*, radians) and
"<name>/top_eigenspace_fraction" (share of ‖Z‖_F² in the positive
eigenspace of G: for the views graph, the view-invariant directions).

Options:
  graph: "views" (needs no labels), "supervised" (needs the context's
    ``view_labels(state) -> (B,) int labels`` of the sampled images), or
    None (default): the run's own batch graph, "supervised" when
    ``config.graph.kind`` is, else "views".
  loss: the closed-form loss whose optimum is compared,
    "spectral_contrastive" (default), "vic2", "vicreg_squared" or
    "barlow_twins" (G is then divided by V − 1, so that the views graph
    has the eigenvalue 1 its closed form needs; read only the subspace
    metrics for this loss).

The embedding needs K <= V·B: with more columns (a wide projector) the
evaluator prints one line and yields nothing.
"""

from __future__ import annotations

import numpy as np

from ssljax import graphs
from ssljax.evaluators import base
from ssljax.theory import diagnostics
from ssljax.theory import spectral

__all__ = ["Evaluator"]


class Evaluator(base.Evaluator):
  """Gram gap, largest principal angle and top-eigenspace share of z."""

  min_global_views = 2

  def __init__(self, name, ctx, *, every_steps=None,
               graph: str | None = None,
               loss: str = "spectral_contrastive"):
    super().__init__(name, ctx, every_steps=every_steps)
    if graph is None:
      kind = getattr(getattr(ctx.config, "graph", None), "kind", "views")
      graph = "supervised" if kind == "supervised" else "views"
    if graph not in ("views", "supervised"):
      raise ValueError(f"evals.{name}.graph must be 'views' or 'supervised', "
                       f"got {graph!r}")
    if graph == "supervised" and not callable(
        getattr(ctx, "view_labels", None)):
      raise ValueError(f"evals.{name}.graph='supervised' needs the labels of "
                       f"the view-embedding images (ctx.view_labels), which "
                       f"this run's context does not provide")
    if loss not in spectral.CLOSED_FORM_LOSSES:
      raise ValueError(f"evals.{name}.loss must be one of "
                       f"{spectral.CLOSED_FORM_LOSSES}, got {loss!r}")
    self.graph, self.loss = graph, loss

  def run(self, state):
    _, z_VxBxK, _ = self.ctx.view_embeddings(state)
    z_VxBxK = np.asarray(z_VxBxK)
    v, b, k = z_VxBxK.shape
    if k > v * b:
      if self.ctx.shown:
        print(f"evals.{self.name}: skipped (the embedding has K = {k} > "
              f"V·B = {v * b} columns; raise eval_inputs.view_samples)",
              flush=True)
      return
    labels = (None if self.graph == "views"
              else np.asarray(self.ctx.view_labels(state)))
    g_NxN = graphs.batch_graph(self.graph, v, b, labels,
                                dtype=z_VxBxK.dtype)
    if self.loss == "barlow_twins":
      g_NxN = g_NxN / max(v - 1, 1)
    d = diagnostics.embedding_diagnostics(z_VxBxK.reshape(v * b, k), g_NxN,
                                          loss=self.loss)
    for metric in ("gram_gap", "principal_angle_max",
                   "top_eigenspace_fraction"):
      yield f"{self.name}/{metric}", float(d[metric])
