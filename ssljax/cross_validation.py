"""k-fold cross-validated linear probe: a model-selection score without the test set.

The linear probe's own validation accuracy (`ssljax.probes.linear_probe`)
is measured on one held-out tenth of the train split by a probe fitted on
part of the rest, so it carries two kinds of noise: the 6,000 rows it
counts (a standard error of about 0.004 at 89 % on Fashion-MNIST) and the
fit itself. Choosing between pretraining settings by it is a coin toss when
they differ by less. The score here counts every train row once: the train
features are split into ``folds`` stratified folds, the whole probe
(standardisation, the L2 search on its own validation rows, the refit) is
fitted on all folds but one and scored on the one left out, and the
accuracies are averaged. It reads only the train split, so a setting chosen
by it has never seen the test set.
"""

from __future__ import annotations

import numbers

import numpy as np

from ssljax import probes, extras

__all__ = ["cross_validated_probe"]


def cross_validated_probe(features, labels, *, folds: int = 5, seed: int = 0,
                          l2_grid=probes.DEFAULT_L2_GRID,
                          val_fraction: float = 0.1, max_iter: int = 100,
                          max_search_rows: int | None = None,
                          progress: bool = False) -> dict:
  """Stratified k-fold cross-validated accuracy of the linear probe.

  Each of the ``folds`` folds is held out once; `ssljax.probes.linear_probe`
  is fitted on the other folds (with its own standardisation and L2 search
  on a ``val_fraction`` of them) and scored on the held-out fold. The folds
  are drawn by scikit-learn's ``StratifiedKFold`` (shuffled, class
  proportions kept), so every row is scored exactly once.

  Args:
    features: (N, D) array of train features (float, or integer pixels),
      rows are samples.
    labels: (N,) integer class labels in [0, C); every class needs at least
      ``folds`` rows.
    folds: k, the number of folds (an integer >= 2, at most N).
    seed: seed of the fold assignment and of each probe's validation split.
    l2_grid, val_fraction, max_iter, max_search_rows: the probe's options
      (`ssljax.probes.linear_probe`).
    progress: one progress bar per fold's probe on stderr.

  Returns:
    dict with ``cv_accuracy`` (the mean of the fold accuracies, in [0, 1]),
    ``cv_std`` (their standard deviation across folds), and the per-fold
    lists ``fold_accuracies``, ``fold_sizes`` (held-out rows; they sum to
    N) and ``fold_l2`` (the L2 each fold's probe chose).

  Raises:
    ValueError: ``folds`` not an integer in [2, N]; a class with fewer rows
      than ``folds``; or any error of `ssljax.probes.linear_probe` (shapes
      that disagree, non-finite features, bad labels or options).
    ssljax.extras.MissingExtraError: scikit-learn (the "train" extra) is
      not installed.

  References:
    Stone 1974, "Cross-validatory choice and assessment of statistical
    predictions", J. R. Stat. Soc. B 36(2) (k-fold choice of a model by
    held-out accuracy); Kohavi 1995, "A study of cross-validation and
    bootstrap for accuracy estimation and model selection", IJCAI
    (stratified folds).
  """
  if isinstance(folds, bool) or not isinstance(folds, numbers.Integral):
    raise ValueError(f"folds must be an integer >= 2, got {folds!r}")
  x, y = np.asarray(features), np.asarray(labels)
  if x.ndim != 2 or y.shape != (x.shape[0],):
    raise ValueError(f"features must be (N, D) and labels (N,), got "
                     f"{x.shape} and {y.shape}")
  if not 2 <= folds <= len(y):
    raise ValueError(f"folds must be in [2, N={len(y)}], got {folds}")
  if not np.issubdtype(y.dtype, np.integer) or (y < 0).any():
    raise ValueError("labels must be integers >= 0")
  counts = np.bincount(y)
  present = counts[counts > 0]
  if present.min() < folds:
    rare = int(np.flatnonzero(counts == present.min())[0])
    raise ValueError(f"class {rare} has {int(present.min())} rows, fewer than "
                     f"folds={folds}: every fold needs each class")
  model_selection = extras.import_module("sklearn.model_selection",
                                         "ssljax.cross_validation")
  splitter = model_selection.StratifiedKFold(n_splits=int(folds), shuffle=True,
                                             random_state=seed)
  accuracies, sizes, l2s = [], [], []
  for fit_rows, held_out in splitter.split(np.zeros(len(y)), y):
    out = probes.linear_probe(
        x[fit_rows], y[fit_rows], x[held_out], y[held_out], l2_grid=l2_grid,
        val_fraction=val_fraction, max_iter=max_iter,
        max_search_rows=max_search_rows, seed=seed, progress=progress)
    accuracies.append(float(out["test_accuracy"]))
    sizes.append(int(len(held_out)))
    l2s.append(float(out["l2"]))
  return {"cv_accuracy": float(np.mean(accuracies)),
          "cv_std": float(np.std(accuracies)),
          "fold_accuracies": accuracies, "fold_sizes": sizes, "fold_l2": l2s}
