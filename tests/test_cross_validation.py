"""k-fold cross-validated linear probe (ssljax.cross_validation) and the
linear_probe evaluator's ``cv_folds`` option."""

import os
import sys

import numpy as np
import pytest

from ssljax import cross_validation, probes, evaluators

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_evaluators import fake_context  # noqa: E402  pylint: disable=wrong-import-position

PROBE = dict(l2_grid=(1e-3,), max_iter=30)


def blobs(n=240, d=6, classes=3, spread=0.5, seed=0, draw=0):
  """Gaussian classes of equal size around distinct means, rows shuffled.

  Equal classes and n divisible by 4 x classes give folds of one shape, so
  the probe's solver compiles once for all the tests here. ``seed`` draws
  the means, ``draw`` the rows around them (a second split of one task).
  """
  means = 3.0 * np.random.default_rng(seed).normal(size=(classes, d))
  rng = np.random.default_rng((seed, draw))
  y = rng.permutation(np.arange(n) % classes).astype(np.int32)
  return (means[y] + spread * rng.normal(size=(n, d))).astype(np.float32), y


def test_every_row_is_held_out_once_with_the_class_proportions():
  x, y = blobs()
  out = cross_validation.cross_validated_probe(x, y, folds=4, **PROBE)
  assert sum(out["fold_sizes"]) == len(y)
  assert out["fold_sizes"] == [60] * 4  # stratified: 20 rows of each class
  assert len(out["fold_accuracies"]) == len(out["fold_l2"]) == 4


def test_the_score_is_the_mean_of_probes_fitted_without_their_fold():
  # Held-out accuracy, not fit accuracy: an identity with the probe fitted
  # by hand on each fold's complement.
  from sklearn.model_selection import StratifiedKFold  # pylint: disable=import-outside-toplevel
  x, y = blobs(spread=2.5, seed=1)  # overlapping classes: accuracy < 1
  out = cross_validation.cross_validated_probe(x, y, folds=4, seed=7, **PROBE)
  by_hand = []
  for fit, held in StratifiedKFold(4, shuffle=True, random_state=7).split(x, y):
    by_hand.append(probes.linear_probe(x[fit], y[fit], x[held], y[held],
                                         seed=7, **PROBE)["test_accuracy"])
  np.testing.assert_allclose(out["fold_accuracies"], by_hand, atol=1e-6)
  assert out["cv_accuracy"] == pytest.approx(np.mean(by_hand))
  assert out["cv_std"] == pytest.approx(np.std(by_hand))


def test_separable_classes_score_one_and_unrelated_labels_score_chance():
  x, y = blobs(spread=0.1)
  assert cross_validation.cross_validated_probe(
      x, y, folds=4, **PROBE)["cv_accuracy"] == 1.0
  x, y = blobs(seed=3)
  noise = np.random.default_rng(3).normal(size=x.shape).astype(np.float32)
  chance = cross_validation.cross_validated_probe(noise, y, folds=4,
                                                  **PROBE)["cv_accuracy"]
  # 240 rows, 3 classes: the standard error of a 1/3 accuracy is 0.03.
  assert abs(chance - 1 / 3) < 0.13


@pytest.mark.parametrize("folds, words", [
    (1, "folds must be in [2, N=240]"), (241, "folds must be in [2, N=240]"),
    (True, "folds must be an integer"), (2.0, "folds must be an integer")])
def test_bad_fold_counts_name_the_problem(folds, words):
  x, y = blobs()
  with pytest.raises(ValueError) as e:
    cross_validation.cross_validated_probe(x, y, folds=folds, **PROBE)
  assert words in str(e.value)


def test_a_class_smaller_than_the_fold_count_is_named():
  x, y = blobs()
  y = y.copy()
  y[:2] = 5  # class 5 has two rows
  with pytest.raises(ValueError, match="class 5 has 2 rows, fewer than folds=4"):
    cross_validation.cross_validated_probe(x, y, folds=4, **PROBE)


def test_the_evaluator_adds_the_score_and_never_reads_the_test_split():
  train, test = blobs(spread=0.1), blobs(spread=0.1, draw=1)
  flipped = (test[0], (test[1] + 1) % 3)  # every test label wrong
  scores = []
  for test_split in (test, flipped):
    (probe,) = evaluators.build(
        {"p": {"type": "linear_probe", "max_iter": 30, "cv_folds": 4}},
        fake_context(features=(train, test_split)))
    out = dict(probe.run(None))
    assert set(out) == {"p/test_accuracy", "p/val_accuracy", "p/l2",
                        "p/cv_accuracy", "p/cv_std"}
    scores.append((out["p/cv_accuracy"], out["p/test_accuracy"]))
  assert scores[0][0] == scores[1][0] == 1.0  # same train rows, same score
  assert scores[0][1] == 1.0 and scores[1][1] == 0.0  # the test labels differ


@pytest.mark.parametrize("bad", [1, -1, True, 2.5])
def test_the_evaluator_rejects_a_bad_cv_folds(bad):
  with pytest.raises(ValueError, match=r"evals.p.cv_folds=.*0 \(off\) or an "
                     r"integer >= 2"):
    evaluators.build({"p": {"type": "linear_probe", "cv_folds": bad}},
                     fake_context())
