"""Linear probe and k-NN: agreement with scikit-learn / naive references."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from ssljax import probes


def _blobs(n, d=5, c=3, seed=0, spread=1.5):
  centres = np.random.default_rng(1234).normal(size=(c, d)) * spread  # shared
  rng = np.random.default_rng(seed)
  y = rng.integers(0, c, n)
  return (centres[y] + rng.normal(size=(n, d))).astype(np.float32), y


def test_probe_matches_sklearn_logistic_regression():
  # Same objective: mean CE + ½·l2‖W‖² ⇔ sklearn's ½‖W‖² + C·ΣCE with C = 1/(l2·N).
  x, y = _blobs(400, spread=0.7)
  xt, yt = _blobs(200, seed=1, spread=0.7)
  l2 = 1e-2
  ours = probes.linear_probe(x, y, xt, yt, l2_grid=(l2,), max_iter=500, tol=1e-7)
  mean, std = x.mean(0), x.std(0) + 1e-6
  ref = LogisticRegression(C=1.0 / (l2 * len(x)), max_iter=5000, tol=1e-10)
  ref.fit((x - mean) / std, y)
  ref_acc = ref.score((xt - mean) / std, yt)
  assert ours["test_accuracy"] == pytest.approx(ref_acc, abs=1.0 / len(xt))
  assert ours["l2"] == l2 and ours["iterations"] > 0


def test_logistic_regression_matches_sklearn_coefficients():
  # The probe's solver against scikit-learn's multinomial LogisticRegression
  # on the same objective (C = 1/(l2·N)): weights, bias and the gradient
  # optimality both imply. sklearn's softmax is invariant to a shift of all
  # classes, its penalty fixes W's; the unpenalised bias is compared centred.
  x, y = _blobs(300, d=4, c=3, spread=0.8)
  x = (x - x.mean(0)) / x.std(0)
  l2 = 1e-2
  ours = probes.fit_logistic_regression(x, y, l2=l2, max_iter=500, tol=1e-7)
  ref = LogisticRegression(C=1.0 / (l2 * len(x)), max_iter=10000, tol=1e-12)
  ref.fit(x, y)
  np.testing.assert_allclose(np.asarray(ours["w"]), ref.coef_.T, atol=2e-4)
  b = np.asarray(ours["b"])
  np.testing.assert_allclose(b - b.mean(), ref.intercept_ - ref.intercept_.mean(),
                             atol=2e-4)
  assert 0 < ours["iterations"] <= 500


def test_logistic_regression_warm_start_at_the_optimum_stays():
  x, y = _blobs(200, d=3, c=3)
  first = probes.fit_logistic_regression(x, y, l2=1e-1, max_iter=500, tol=1e-6)
  again = probes.fit_logistic_regression(
      x, y, l2=1e-1, max_iter=500, tol=1e-6,
      init={"w": first["w"], "b": first["b"]})
  assert again["iterations"] <= 2
  np.testing.assert_allclose(np.asarray(again["w"]), np.asarray(first["w"]),
                             atol=1e-5)


@pytest.mark.parametrize("bad, match", [
    (dict(l2=-1.0), "l2"),
    (dict(max_iter=0), "max_iter"),
    (dict(num_classes=2), "num_classes"),
    (dict(init={"w": np.zeros((2, 3)), "b": np.zeros(3)}), "init"),
])
def test_logistic_regression_rejects_bad_input(bad, match):
  x, y = _blobs(30, d=4, c=3)
  kwargs = dict(l2=1e-2) | bad
  with pytest.raises(ValueError, match=match):
    probes.fit_logistic_regression(x, y, **kwargs)


def test_probe_choice_never_sees_test_labels():
  x, y = _blobs(300)
  xt, yt = _blobs(100, seed=2)
  a = probes.linear_probe(x, y, xt, yt, max_iter=100)
  b = probes.linear_probe(x, y, xt, np.random.default_rng(0).permutation(yt),
                            max_iter=100)
  assert a["l2"] == b["l2"] and a["val_accuracies"] == b["val_accuracies"]
  assert a["test_accuracy"] > 0.9 > b["test_accuracy"]


def test_probe_is_invariant_to_feature_scale_and_shift():
  # Features are standardised with train statistics before the fit.
  x, y = _blobs(300)
  xt, yt = _blobs(100, seed=3)
  a = probes.linear_probe(x, y, xt, yt, max_iter=100)
  b = probes.linear_probe(3 * x + 7, y, 3 * xt + 7, yt, max_iter=100)
  assert a["test_accuracy"] == pytest.approx(b["test_accuracy"], abs=0.011)
  assert a["l2"] == b["l2"]


def test_probe_of_uint8_pixels_is_the_probe_of_their_float_values():
  """Integer features (raw pixels) are standardised without a float copy:
  the same probe as of the same values in float32 / 255."""
  rng = np.random.default_rng(4)
  y, yt = rng.integers(0, 3, 600), rng.integers(0, 3, 200)
  x = np.clip(rng.normal(60 * y[:, None] + 40, 40, (600, 16)), 0, 255)
  xt = np.clip(rng.normal(60 * yt[:, None] + 40, 40, (200, 16)), 0, 255)
  x, xt = x.astype(np.uint8), xt.astype(np.uint8)
  a = probes.linear_probe(x, y, xt, yt, max_iter=100)
  b = probes.linear_probe(x / np.float32(255), y, xt / np.float32(255), yt,
                            max_iter=100)
  assert a["test_accuracy"] > 0.8
  assert a["test_accuracy"] == pytest.approx(b["test_accuracy"], abs=0.011)
  np.testing.assert_allclose(a["val_accuracies"], b["val_accuracies"],
                             atol=0.02)


def test_probe_sees_every_row_of_a_split_longer_than_one_chunk():
  """9,000 rows are standardised onto the device in chunks of 8,192 (the
  last one overlapping): a label that is the sign of feature 0 is learnt
  on every row, so no chunk was lost or misplaced."""
  rng = np.random.default_rng(0)
  x = rng.standard_normal((9000, 3)).astype(np.float32)
  xt = rng.standard_normal((9000, 3)).astype(np.float32)
  y, yt = (x[:, 0] > 0).astype(np.int32), (xt[:, 0] > 0).astype(np.int32)
  r = probes.linear_probe(x, y, xt, yt, l2_grid=(1e-6,), max_iter=200)
  assert r["train_accuracy"] >= 0.998 and r["test_accuracy"] >= 0.995, r


@pytest.mark.parametrize("bad", [
    dict(train_features=np.zeros(5)),
    dict(train_labels=np.zeros(4, np.int32)),
    dict(train_labels=np.zeros(10, np.float32)),
    dict(train_features=np.full((10, 2), np.nan)),
    dict(test_features=np.zeros((4, 3))),
    dict(val_fraction=1.0),
    dict(l2_grid=()),
])
def test_probe_rejects_bad_input(bad):
  args = dict(train_features=np.zeros((10, 2)), train_labels=np.zeros(10, np.int32),
              test_features=np.zeros((4, 2)), test_labels=np.zeros(4, np.int32))
  args.update(bad)
  with pytest.raises(ValueError):
    probes.linear_probe(**args)


def _naive_knn(xtr, ytr, xte, k, temperature, num_classes):
  n = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)
  sims = n(xte) @ n(xtr).T
  preds = []
  for row in sims:
    idx = np.argsort(-row)[:k]
    votes = np.zeros(num_classes)
    np.add.at(votes, ytr[idx], np.exp(row[idx] / temperature))
    preds.append(np.argmax(votes))
  return np.array(preds)


@pytest.mark.parametrize("k,block", [(1, 7), (5, 1024), (12, 16)])
def test_knn_matches_naive_reference(k, block):
  x, y = _blobs(200, spread=0.5)
  xt, yt = _blobs(50, seed=4, spread=0.5)
  expected = np.mean(_naive_knn(x, y, xt, k, 0.1, 3) == yt)
  got = probes.knn_accuracy(x, y, xt, yt, k=k, temperature=0.1, block_size=block)
  assert got == pytest.approx(expected)


def test_knn_on_its_own_training_set_with_k1_is_perfect():
  x, y = _blobs(100)
  assert probes.knn_accuracy(x, y, x, y, k=1) == 1.0


@pytest.mark.parametrize("bad", [dict(k=0), dict(k=11), dict(temperature=0.0)])
def test_knn_rejects_bad_arguments(bad):
  x, y = _blobs(10)
  with pytest.raises(ValueError):
    probes.knn_accuracy(x, y, x, y, **bad)


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_column_moments_equal_float64_moments_in_chunks(dtype):
  rng = np.random.default_rng(0)
  x = (rng.random((1003, 7)) * 200 + 3).astype(dtype)  # 1003 = 3 chunks + 43
  mean, std = probes.column_moments(x, chunk=320)
  ref = x.astype(np.float64)
  assert mean.dtype == std.dtype == np.float64
  np.testing.assert_allclose(mean, ref.mean(0), rtol=1e-12)
  np.testing.assert_allclose(std, ref.std(0), rtol=1e-12)
  with pytest.raises(ValueError, match="N >= 1"):
    probes.column_moments(x[:0])
