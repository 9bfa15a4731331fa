"""Few-shot accuracy of ridge probes on the frozen representations h.

Fits `ssljax.fewshot.few_shot_accuracy` on the "train" features and scores
on the "test" features of `EvalContext.features`. Yields, for each s in
``shots``, "<name>/{s}shot" (mean test accuracy over the draws) and
"<name>/{s}shot_std" (its standard deviation).

Options:
  shots: ints >= 1, examples per class ((1, 5, 10, 25)).
  draws: random draws per shot count (5).
  l2_grid: positive ridge strengths (`fewshot.DEFAULT_FEWSHOT_L2_GRID`).
  val_per_class: held-out train rows per class that choose the ridge (5).
  seed: seed of the draws (0).

The options are checked when the evaluator is built; the class sizes, known
only once the features exist, at the first `run`.
"""

from __future__ import annotations

from ssljax import fewshot
from ssljax.evaluators import base

__all__ = ["Evaluator"]


def _is_int(v) -> bool:
  return isinstance(v, int) and not isinstance(v, bool)


class Evaluator(base.Evaluator):
  """Mean and std of few-shot test accuracy, per shot count."""

  def __init__(self, name, ctx, *, every_steps=None, shots=(1, 5, 10, 25),
               draws: int = 5, l2_grid=fewshot.DEFAULT_FEWSHOT_L2_GRID,
               val_per_class: int = 5, seed: int = 0):
    super().__init__(name, ctx, every_steps=every_steps)
    if ctx.features is None or ctx.num_classes < 2:
      raise ValueError(f"evals.{name}: few-shot probes need a labelled train "
                       f"and test split with >= 2 classes (num_classes = "
                       f"{ctx.num_classes})")
    shots = (shots,) if _is_int(shots) else tuple(shots or ())
    if not shots or not all(_is_int(s) and s >= 1 for s in shots):
      raise ValueError(f"evals.{name}.shots must be ints >= 1, got {shots!r}")
    if not _is_int(draws) or draws < 1:
      raise ValueError(f"evals.{name}.draws must be an int >= 1, got "
                       f"{draws!r}")
    grid = tuple(l2_grid or ())
    if not grid or not all(isinstance(v, (int, float)) and not isinstance(
        v, bool) and v > 0 for v in grid):
      raise ValueError(f"evals.{name}.l2_grid must be numbers > 0, got "
                       f"{l2_grid!r}")
    if not _is_int(val_per_class) or val_per_class < 1:
      raise ValueError(f"evals.{name}.val_per_class must be an int >= 1, got "
                       f"{val_per_class!r}")
    if not _is_int(seed):
      raise ValueError(f"evals.{name}.seed must be an int, got {seed!r}")
    self.shots, self.draws, self.l2_grid = shots, draws, grid
    self.val_per_class, self.seed = val_per_class, seed

  def run(self, state):
    x_tr, y_tr = self.ctx.features(state, "train")
    x_te, y_te = self.ctx.features(state, "test")
    try:
      acc = fewshot.few_shot_accuracy(
          x_tr, y_tr, x_te, y_te, shots=self.shots, draws=self.draws,
          l2_grid=self.l2_grid, val_per_class=self.val_per_class,
          seed=self.seed)
    except ValueError as e:
      raise ValueError(f"evals.{self.name}: {e}") from e
    for s in self.shots:
      mean, std = acc[s]
      yield f"{self.name}/{s}shot", mean
      yield f"{self.name}/{s}shot_std", std
