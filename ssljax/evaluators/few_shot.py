"""Few-shot accuracy of ridge probes on the frozen representations h.

The probe (`few_shot_accuracy`) is the big_vision few-shot evaluator's
recipe, in our words: from the labelled training rows draw ``shots``
examples per class, regress ±1 targets (+1 for the true class, −1
elsewhere) on the features with an L2 penalty, predict the class of largest
score. The penalty is chosen on other, held-out training rows (never the
test rows), and the whole draw is repeated to report a mean and a standard
deviation.

The evaluator (`Evaluator`) fits `few_shot_accuracy` on the "train" features
and scores on the "test" features of `EvalContext.features`. It yields, for
each s in ``shots``, "<name>/{s}shot" (mean test accuracy over the draws)
and "<name>/{s}shot_std" (its standard deviation).

Options:
  shots: ints >= 1, examples per class ((1, 5, 10, 25)).
  draws: random draws per shot count (5).
  l2_grid: positive ridge strengths (`DEFAULT_FEWSHOT_L2_GRID`).
  val_per_class: held-out train rows per class that choose the ridge (5).
  seed: seed of the draws (0).

The options are checked when the evaluator is built; the class sizes, known
only once the features exist, at the first `run`.
"""

from __future__ import annotations

import numpy as np

from ssljax import probes
from ssljax.evaluators import base

__all__ = ["DEFAULT_FEWSHOT_L2_GRID", "Evaluator", "few_shot_accuracy"]

# Ridge strengths on ½‖W‖² relative to ½‖XW − T‖² (standardised features).
DEFAULT_FEWSHOT_L2_GRID = (1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3)


def _check_split(name: str, x, y):
  x, y = np.asarray(x), np.asarray(y)
  if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
    raise ValueError(f"{name}_features must be a non-empty (N, D) array, got "
                     f"shape {x.shape}")
  if y.shape != (x.shape[0],) or not np.issubdtype(y.dtype, np.integer):
    raise ValueError(f"{name}_labels must be integer ({x.shape[0]},), got "
                     f"{y.dtype} {y.shape}")
  if not np.all(np.isfinite(x)):
    raise ValueError(f"{name}_features must be finite")
  # The caller's dtype: only the rows a draw uses are made float64.
  if not np.issubdtype(x.dtype, np.floating):
    x = x.astype(np.float64)
  return x, y.astype(np.int64)


def _check_options(shots, draws, l2_grid, val_per_class):
  shots = (shots,) if np.ndim(shots) == 0 else tuple(shots)
  if not shots or any(isinstance(s, bool) or not isinstance(s, (int, np.integer))
                      or s < 1 for s in shots):
    raise ValueError(f"shots must be positive ints, got {shots!r}")
  if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or (
      draws < 1):
    raise ValueError(f"draws must be an int >= 1, got {draws!r}")
  grid = tuple(l2_grid) if np.ndim(l2_grid) else (l2_grid,)
  if not grid or not all(np.isfinite(v) and v > 0 for v in grid):
    raise ValueError(f"l2_grid must be non-empty and > 0, got {l2_grid!r}")
  if isinstance(val_per_class, bool) or not isinstance(
      val_per_class, (int, np.integer)) or val_per_class < 1:
    raise ValueError(f"val_per_class must be an int >= 1, got "
                     f"{val_per_class!r}")
  return tuple(int(s) for s in shots), int(draws), grid, int(val_per_class)


def _ridge_fits(x_nxd, t_nxc, l2_grid):
  """(W, b) per L2 value: min ½‖XW + 1bᵀ − T‖² + ½ l2 ‖W‖² (b unpenalised)."""
  x_mean, t_mean = x_nxd.mean(0), t_nxc.mean(0)
  xc_nxd, tc_nxc = x_nxd - x_mean, t_nxc - t_mean
  # Dual form through one eigendecomposition of the n×n kernel: n = C·shots
  # is small next to D, and every l2 reuses it.
  evals_n, evecs_nxn = np.linalg.eigh(xc_nxd @ xc_nxd.T)
  proj_nxc = evecs_nxn.T @ tc_nxc
  fits = []
  for l2 in l2_grid:
    alpha_nxc = evecs_nxn @ (proj_nxc / (np.maximum(evals_n, 0) + l2)[:, None])
    w_dxc = xc_nxd.T @ alpha_nxc
    fits.append((w_dxc, t_mean - x_mean @ w_dxc))
  return fits


def _accuracy(x, y, fit):
  w, b = fit
  return float(np.mean(np.argmax(x @ w + b, axis=1) == y))


def few_shot_accuracy(train_features, train_labels, test_features,
                      test_labels, *, shots=(1, 5, 10, 25), draws: int = 5,
                      l2_grid=DEFAULT_FEWSHOT_L2_GRID, val_per_class: int = 5,
                      seed: int = 0) -> dict:
  """Test accuracy of ridge probes fitted on ``shots`` examples per class.

  Features are standardised with the mean and standard deviation of all
  training rows (a constant column is left at 0). For each draw and each
  class, ``val_per_class`` training rows are held out and ``s`` others are
  drawn (each s in ``shots`` gets its own draws, all from one generator
  seeded by ``seed``). A ridge regression onto ±1 targets (big_vision style)
  is solved in closed form for each L2 value; the value with the best
  accuracy on the held-out rows wins (ties: the first in ``l2_grid``), and
  its probe is scored on the test rows. Classes are those in
  ``train_labels``.

  Args:
    train_features: (N, D) float array.
    train_labels: (N,) int labels; every class needs at least
      max(shots) + val_per_class rows.
    test_features: (M, D) float array.
    test_labels: (M,) int labels.
    shots: an int or a sequence of ints >= 1: examples per class.
    draws: number of random draws (>= 1) averaged per shot count.
    l2_grid: positive L2 strengths on ½‖W‖² (with the loss ½‖XW − T‖²).
    val_per_class: held-out training rows per class for the choice of L2.
    seed: seed of the draws (NumPy's default_rng).

  Returns:
    {s: (mean, std)} of the test accuracy over the draws, for each s in
    shots (std with ddof=0; 0 for one draw).

  Raises:
    ValueError: on malformed arrays or options, or if a shot count exceeds
      a class's size minus ``val_per_class`` (naming shots and the class).

  References:
    Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words", arXiv
    2010.11929, §4 (few-shot accuracy: regularised least squares onto
    {−1, 1} targets from frozen features).

  Example:
    >>> x = np.repeat(np.eye(3), 10, axis=0)  # 3 separable classes
    >>> y = np.repeat(np.arange(3), 10)
    >>> few_shot_accuracy(x, y, x, y, shots=(1, 2), draws=2)
    {1: (1.0, 0.0), 2: (1.0, 0.0)}
  """
  xtr, ytr = _check_split("train", train_features, train_labels)
  xte, yte = _check_split("test", test_features, test_labels)
  if xte.shape[1] != xtr.shape[1]:
    raise ValueError(f"train_features and test_features must have the same "
                     f"number of columns, got {xtr.shape[1]} and "
                     f"{xte.shape[1]}")
  shots, draws, l2_grid, val_per_class = _check_options(
      shots, draws, l2_grid, val_per_class)
  classes, counts = np.unique(ytr, return_counts=True)
  smallest = int(np.argmin(counts))
  if max(shots) > counts[smallest] - val_per_class:
    raise ValueError(
        f"shots={max(shots)} exceeds class {classes[smallest]}'s "
        f"{counts[smallest]} training rows minus val_per_class="
        f"{val_per_class} held out")
  # float64 moments without a float64 copy of the whole (N, D) split.
  mean, std = probes.column_moments(xtr)
  std = np.where(std > 0, std, 1.0)
  # float64 standardised rows on demand: the (N, D) train split is never
  # copied whole (a draw reads C·(shots + val_per_class) rows of it).
  rows_of = lambda rows: (xtr[rows].astype(np.float64) - mean) / std
  xte = (xte.astype(np.float64) - mean) / std
  rows_by_class = [np.flatnonzero(ytr == c) for c in classes]
  rng = np.random.default_rng(seed)
  results = {}
  for s in shots:
    accs = []
    for _ in range(draws):
      val, fit_rows = [], []
      for rows in rows_by_class:
        perm = rng.permutation(rows)
        val.append(perm[:val_per_class])
        fit_rows.append(perm[val_per_class:val_per_class + s])
      val, fit_rows = np.concatenate(val), np.concatenate(fit_rows)
      # ±1 targets over the classes' positions in `classes`.
      t_nxc = 2.0 * (ytr[fit_rows][:, None] == classes[None, :]) - 1.0
      fits = _ridge_fits(rows_of(fit_rows), t_nxc, l2_grid)
      yval = np.searchsorted(classes, ytr[val])
      xval = rows_of(val)
      best = max(range(len(fits)), key=lambda i: (_accuracy(
          xval, yval, fits[i]), -i))
      w, b = fits[best]
      pred = classes[np.argmax(xte @ w + b, axis=1)]
      accs.append(float(np.mean(pred == yte)))
    results[s] = (float(np.mean(accs)), float(np.std(accs)))
  return results


def _is_int(v) -> bool:
  return isinstance(v, int) and not isinstance(v, bool)


class Evaluator(base.Evaluator):
  """Mean and std of few-shot test accuracy, per shot count."""

  uses_labels = True

  def __init__(self, name, ctx, *, every_steps=None, shots=(1, 5, 10, 25),
               draws: int = 5, l2_grid=DEFAULT_FEWSHOT_L2_GRID,
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
      acc = few_shot_accuracy(
          x_tr, y_tr, x_te, y_te, shots=self.shots, draws=self.draws,
          l2_grid=self.l2_grid, val_per_class=self.val_per_class,
          seed=self.seed)
    except ValueError as e:
      raise ValueError(f"evals.{self.name}: {e}") from e
    for s in self.shots:
      mean, std = acc[s]
      yield f"{self.name}/{s}shot", mean
      yield f"{self.name}/{s}shot_std", std
