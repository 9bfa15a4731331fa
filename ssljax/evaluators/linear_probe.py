"""Offline linear probe of the frozen encoder (the standard linear evaluation).

Multinomial logistic regression on ``ctx.features(state, "train")``, scored
on ``ctx.features(state, "test")``, through `ssljax.probes.linear_probe`
(standardised features, L2 chosen on a held-out part of the train rows).
The baselines `ssljax.evaluators.raw_pixel_probe` and
`ssljax.evaluators.random_init_probe` subclass this evaluator and change only
its inputs (`Evaluator.inputs`).

Metrics: ``<name>/test_accuracy``, ``<name>/val_accuracy`` (of the chosen
strength on the held-out rows) and ``<name>/l2`` (the chosen strength); with
``cv_folds`` = k >= 2 also ``<name>/cv_accuracy`` and ``<name>/cv_std``, the
k-fold cross-validated accuracy on the train split and its spread across
folds (`ssljax.cross_validation`: the score to choose pretraining settings
by, since it never reads the test split).
"""

from __future__ import annotations

import numbers

from ssljax import cross_validation, probes
from ssljax.evaluators import base, baseline_cache
from ssljax.evaluators.base import check_option

__all__ = ["Evaluator"]


class Evaluator(base.Evaluator):
  """Linear probe of the encoder representations h.

  Args:
    name, ctx, every_steps: see `ssljax.evaluators.base.Evaluator`.
    l2_grid: L2 strengths on ½‖W‖² to choose from (all > 0).
    val_fraction: fraction of the train rows held out to choose L2, in (0, 1).
    max_iter: L-BFGS iterations per fit (>= 1).
    search_rows: train rows used while choosing L2 (>= 1; None: all).
    seed: seed of the train/validation split and of the folds (None:
      ``ctx.config.seed``).
    cv_folds: 0 (off) or k >= 2: also score the probe by stratified k-fold
      cross-validation on the train features (k more probe fits).
  """

  uses_labels = True

  def __init__(self, name, ctx, *, every_steps=None,
               l2_grid=(1e-6, 1e-5, 1e-4, 1e-3, 1e-2), val_fraction=0.1,
               max_iter=100, search_rows=20000, seed=None, cv_folds=0):
    super().__init__(name, ctx, every_steps=every_steps)
    real = lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool)
    count = lambda v: isinstance(v, numbers.Integral) and not isinstance(
        v, bool) and v >= 1
    check_option(name, "l2_grid", l2_grid,
                 isinstance(l2_grid, (tuple, list)) and len(l2_grid) > 0
                 and all(real(v) and v > 0 for v in l2_grid),
                 "a non-empty tuple of numbers > 0")
    check_option(name, "val_fraction", val_fraction,
                 real(val_fraction) and 0 < val_fraction < 1,
                 "a number in (0, 1)")
    check_option(name, "max_iter", max_iter, count(max_iter),
                 "an integer >= 1")
    check_option(name, "search_rows", search_rows,
                 search_rows is None or count(search_rows),
                 "an integer >= 1 or None")
    check_option(name, "seed", seed, seed is None or (
        isinstance(seed, numbers.Integral) and not isinstance(seed, bool)
        and seed >= 0), "an integer >= 0 or None")
    check_option(name, "cv_folds", cv_folds, isinstance(
        cv_folds, numbers.Integral) and not isinstance(cv_folds, bool) and (
            cv_folds == 0 or cv_folds >= 2), "0 (off) or an integer >= 2")
    self.l2_grid, self.val_fraction = tuple(l2_grid), val_fraction
    self.max_iter, self.search_rows, self.seed = max_iter, search_rows, seed
    self.cv_folds = cv_folds

  def probe(self, xtr, ytr, xte, yte) -> dict:
    """`ssljax.probes.linear_probe` with this evaluator's options, and
    with ``cv_folds`` its cross-validated accuracy on the train rows."""
    seed = self.ctx.config.seed if self.seed is None else self.seed
    options = dict(l2_grid=self.l2_grid, val_fraction=self.val_fraction,
                   max_iter=self.max_iter, max_search_rows=self.search_rows,
                   seed=seed, progress=self.ctx.shown)
    out = probes.linear_probe(xtr, ytr, xte, yte, **options)
    if self.cv_folds:
      cv = cross_validation.cross_validated_probe(
          xtr, ytr, folds=self.cv_folds, **options)
      out = {**out, "cv_accuracy": cv["cv_accuracy"], "cv_std": cv["cv_std"]}
    return out

  def cache_directory(self) -> str | None:
    """The baseline cache's directory (``config.eval_inputs.baseline_cache``),
    or None when it is off."""
    setting = self.ctx.config.get("eval_inputs", {}).get("baseline_cache", "")
    return baseline_cache.cache_dir(setting)

  def cache_options(self) -> dict:
    """The probe options a cached result is keyed by."""
    seed = self.ctx.config.seed if self.seed is None else self.seed
    options = dict(l2_grid=list(self.l2_grid), val_fraction=self.val_fraction,
                   max_iter=self.max_iter, search_rows=self.search_rows,
                   seed=seed)
    if self.cv_folds:  # keys stored before the option existed stay valid
      options["cv_folds"] = self.cv_folds
    return options

  def load_cached(self, directory: str, digest: str) -> dict | None:
    """The stored result of ``digest`` (announced in one line), or None."""
    out = baseline_cache.load(directory, digest)
    if out is not None and self.ctx.shown:
      print(f"{self.name}: reused from the baseline cache ({directory})",
            flush=True)
    return out

  def cached_probe(self, inputs) -> dict:
    """`probe`, reused from ``config.eval_inputs.baseline_cache`` when the
    same inputs and options were probed before (baselines only:
    `ssljax.evaluators.baseline_cache`)."""
    directory = self.cache_directory()
    if directory is None:
      return self.probe(*inputs)
    digest = baseline_cache.key(type(self).__module__, self.cache_options(),
                                inputs)
    out = self.load_cached(directory, digest)
    if out is not None:
      return out
    out = self.probe(*inputs)
    baseline_cache.store(directory, digest, out)
    return out

  def inputs(self, state):
    """(train X, train y, test X, test y) to probe, or a str: why not."""
    if self.ctx.features is None:
      return "no labelled split"
    xtr, ytr = self.ctx.features(state, "train")
    xte, yte = self.ctx.features(state, "test")
    return xtr, ytr, xte, yte

  def result(self, state):
    """The probe's metrics ({"test_accuracy", "val_accuracy", "l2"}), or a
    str: why it is skipped."""
    inputs = self.inputs(state)
    if isinstance(inputs, str):
      return inputs
    return self.cached_probe(inputs) if self.baseline else self.probe(*inputs)

  def run(self, state):
    out = self.result(state)
    if isinstance(out, str):
      if self.ctx.shown:
        print(f"{self.name}: skipped ({out})", flush=True)
      return
    yield f"{self.name}/test_accuracy", out["test_accuracy"]
    yield f"{self.name}/val_accuracy", out["val_accuracy"]
    yield f"{self.name}/l2", out["l2"]
    if "cv_accuracy" in out:
      yield f"{self.name}/cv_accuracy", out["cv_accuracy"]
      yield f"{self.name}/cv_std", out["cv_std"]
