"""Label-free metrics (ssljax.metrics), few-shot probes
(ssljax.evaluators.few_shot) and theory diagnostics
(ssljax.theory.diagnostics)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax import metrics
from ssljax.evaluators import few_shot
from ssljax.graphs import supervised_graph
from ssljax.graphs import views_graph
from ssljax.theory import diagnostics
from ssljax.theory import frossl_dynamics
from ssljax.theory import spectral

pytestmark = pytest.mark.usefixtures("fast_compiles")


def _orthogonal(rng, n, k):
  return np.linalg.qr(rng.normal(size=(n, k)))[0]


def _with_spectrum(rng, lam, n=200):
  """(n, K) rows whose covariance (centred, /n) has eigenvalues lam."""
  k = len(lam)
  q = _orthogonal(rng, n, k + 1)
  q = q - q.mean(0)  # columns orthogonal to 1 after re-orthonormalising
  q = np.linalg.qr(np.concatenate([np.ones((n, 1)), q], 1))[0][:, 1:k + 1]
  return np.sqrt(n) * q * np.sqrt(lam)


# ---------------------------------------------------------------------------
# Spectrum, RankMe, α-ReQ.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_eigenspectrum_matches_numpy(dtype):
  with jax.enable_x64(dtype == "float64"):
    z = np.random.default_rng(0).normal(size=(50, 6)).astype(dtype)
    got = metrics.eigenspectrum(z)
    assert got.dtype == jnp.dtype(dtype)
    want = np.sort(np.linalg.eigvalsh(np.cov(z.T, bias=True)))[::-1]
    np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == "float32"
                               else 1e-10)
    np.testing.assert_allclose(jax.jit(metrics.eigenspectrum)(z), got,
                               rtol=1e-5)


@pytest.mark.parametrize("k", [1, 3, 7])
def test_rankme_of_k_equal_singular_values_is_k(k):
  rng = np.random.default_rng(k)
  z = 2.5 * _orthogonal(rng, 20, k) @ _orthogonal(rng, 10, k).T
  assert float(metrics.rankme(z)) == pytest.approx(k, rel=1e-4)
  assert float(jax.jit(metrics.rankme)(z)) == pytest.approx(k, rel=1e-4)


def test_rankme_reference_and_collapse():
  rng = np.random.default_rng(1)
  z = rng.normal(size=(30, 8))
  s = np.linalg.svd(z, compute_uv=False)
  p = s / s.sum() + 1e-7
  assert float(metrics.rankme(z)) == pytest.approx(np.exp(-np.sum(p * np.log(p))),
                                                   rel=1e-5)
  collapsed = np.outer(rng.normal(size=30), rng.normal(size=8))
  assert float(metrics.rankme(collapsed)) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("alpha", [1.0, 2.0])
def test_power_law_alpha_is_exact_on_exact_spectra(alpha, x64):
  lam = np.arange(1, 65, dtype=np.float64) ** -alpha
  assert float(metrics.power_law_alpha(lam)) == pytest.approx(alpha, abs=1e-6)
  assert float(metrics.power_law_alpha(lam, fit_range=(5, 40))) == (
      pytest.approx(alpha, abs=1e-6))
  with_zeros = np.concatenate([lam, np.zeros(10)])
  assert float(metrics.power_law_alpha(with_zeros)) == pytest.approx(
      alpha, abs=1e-6)


@pytest.mark.parametrize("alpha", [1.0, 2.0])
def test_alpha_req_recovers_the_exponent_of_z(alpha, x64):
  lam = np.arange(1, 17, dtype=np.float64) ** -alpha
  z = _with_spectrum(np.random.default_rng(2), lam)
  np.testing.assert_allclose(metrics.eigenspectrum(z), lam, atol=1e-12)
  assert float(metrics.alpha_req(z)) == pytest.approx(alpha, abs=1e-6)
  assert float(jax.jit(metrics.alpha_req)(z)) == pytest.approx(alpha, abs=1e-6)


# ---------------------------------------------------------------------------
# LiDAR.
# ---------------------------------------------------------------------------


def test_lidar_separated_classes_reach_the_lda_rank():
  n, q = 6, 4
  means = np.eye(n)  # a regular simplex after centring: rank n − 1
  z = np.broadcast_to(means, (q, n, n)) + 1e-6 * np.random.default_rng(
      0).normal(size=(q, n, n))
  assert float(metrics.lidar(z)) == pytest.approx(n - 1, rel=1e-3)
  # K < n − 1: bounded by K (equal eigenvalues: proj ⟂ 1, orthonormal).
  proj = _orthogonal(np.random.default_rng(1), n, 4)
  proj = np.linalg.qr(np.concatenate([np.ones((n, 1)), proj], 1))[0][:, 1:4]
  z3 = np.broadcast_to((means - means.mean(0)) @ proj, (q, n, 3))
  assert float(metrics.lidar(z3)) == pytest.approx(3, rel=1e-3)


def test_lidar_float64(x64):
  z = np.random.default_rng(4).normal(size=(3, 8, 5))
  assert metrics.lidar(z).dtype == jnp.float64
  assert metrics.rankme(z[0]).dtype == jnp.float64


def test_lidar_reference_and_collapse():
  rng = np.random.default_rng(3)
  q, n, k, delta = 3, 10, 4, 1e-4
  z = rng.normal(size=(q, n, k))
  mu = z.mean(0)
  sb = (mu - mu.mean(0)).T @ (mu - mu.mean(0)) / (n - 1)
  w = (z - mu).reshape(-1, k)
  sw = w.T @ w / (n * (q - 1)) + delta * np.eye(k)
  e, v = np.linalg.eigh(sw)
  m = v @ np.diag(e**-0.5) @ v.T @ sb @ v @ np.diag(e**-0.5) @ v.T
  lam = np.clip(np.linalg.eigvalsh(m), 0, None)
  p = lam / lam.sum() + 1e-7
  want = np.exp(-np.sum(p * np.log(p)))
  assert float(metrics.lidar(z)) == pytest.approx(want, rel=1e-4)
  assert float(jax.jit(metrics.lidar)(z)) == pytest.approx(want, rel=1e-4)
  spread = float(metrics.lidar(z))
  collapsed = np.broadcast_to(rng.normal(size=k), (q, n, k))
  assert float(metrics.lidar(collapsed)) == pytest.approx(1.0, abs=1e-3)
  one_dir = z[..., :1] * np.ones(k)  # every image on one line
  assert float(metrics.lidar(one_dir)) < spread


@pytest.mark.parametrize("call, match", [
    (lambda: metrics.rankme(np.ones(3)), "z must be"),
    (lambda: metrics.rankme(np.ones((1, 3))), "z needs"),
    (lambda: metrics.rankme(np.ones((3, 3)), eps=0.0), "eps"),
    (lambda: metrics.eigenspectrum(np.ones((2, 3, 1))), "z must be"),
    (lambda: metrics.alpha_req(np.ones((4, 3)), fit_range=(2, 2)),
     "fit_range"),
    (lambda: metrics.lidar(np.ones((4, 3))), "z_views must be"),
    (lambda: metrics.lidar(np.ones((1, 4, 3))), "z_views needs"),
    (lambda: metrics.lidar(np.ones((2, 1, 3))), "z_views needs"),
    (lambda: metrics.lidar(np.ones((2, 4, 3)), delta=0), "delta"),
    (lambda: metrics.lidar(np.ones((2, 4, 3)), eps=-1.0), "eps"),
])
def test_metric_errors_name_the_argument(call, match):
  with pytest.raises(ValueError, match=match):
    call()


# ---------------------------------------------------------------------------
# Few-shot.
# ---------------------------------------------------------------------------


def test_few_shot_separable_features_give_accuracy_one():
  rng = np.random.default_rng(0)
  c, per = 4, 40
  y = np.repeat(np.arange(c), per)
  x = np.eye(c)[y] + 0.01 * rng.normal(size=(c * per, c))
  acc = few_shot.few_shot_accuracy(x[::2], y[::2], x[1::2], y[1::2],
                                   shots=(1, 5), draws=3)
  assert acc == {1: (1.0, 0.0), 5: (1.0, 0.0)}


def test_few_shot_random_features_are_at_chance():
  rng = np.random.default_rng(1)
  c = 5
  y = rng.integers(0, c, 2000)
  x = rng.normal(size=(2000, 16))
  acc = few_shot.few_shot_accuracy(x[:1000], y[:1000], x[1000:], y[1000:],
                                   shots=(5, 25), draws=5)
  for s in (5, 25):
    assert acc[s][0] == pytest.approx(1 / c, abs=0.05)
    assert acc[s][1] >= 0


def test_few_shot_predictions_ignore_the_test_labels():
  # Each test row's prediction matches exactly one of the three cyclic
  # relabellings, so the accuracies sum to 1 only if the probes (and the
  # choice of L2) never read the test labels.
  rng = np.random.default_rng(2)
  y = np.repeat(np.arange(3), 20)
  x = rng.normal(size=(60, 5)) + 2.0 * np.eye(3, 5)[y]
  total = sum(few_shot.few_shot_accuracy(x, y, x[:30], (y[:30] + i) % 3,
                                         shots=3, draws=2)[3][0]
              for i in range(3))
  assert total == pytest.approx(1.0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(shots=(1, 16)), r"shots=16 exceeds class 2"),
    (dict(shots=(0,)), "shots"),
    (dict(draws=0), "draws"),
    (dict(l2_grid=()), "l2_grid"),
    (dict(val_per_class=0), "val_per_class"),
])
def test_few_shot_errors(kwargs, match):
  y = np.array([0] * 30 + [1] * 30 + [2] * 20)
  x = np.random.default_rng(0).normal(size=(80, 3))
  with pytest.raises(ValueError, match=match):
    few_shot.few_shot_accuracy(x, y, x, y, **kwargs)


# ---------------------------------------------------------------------------
# Theory diagnostics.
# ---------------------------------------------------------------------------


def test_principal_angles_reference_and_rotation():
  rng = np.random.default_rng(0)
  a, b = rng.normal(size=(12, 3)), rng.normal(size=(12, 2))
  qa, qb = np.linalg.qr(a)[0], np.linalg.qr(b)[0]
  want = np.sort(np.arccos(np.clip(np.linalg.svd(qa.T @ qb)[1], 0, 1)))
  np.testing.assert_allclose(diagnostics.principal_angles(a, b), want,
                             atol=1e-5)
  np.testing.assert_allclose(diagnostics.principal_angles(b, a), want,
                             atol=1e-5)
  r = _orthogonal(rng, 3, 3)
  np.testing.assert_allclose(diagnostics.principal_angles(a, a @ r), 0,
                             atol=1e-6)
  np.testing.assert_allclose(jax.jit(diagnostics.principal_angles)(a, b),
                             want, atol=1e-5)
  # A rank-deficient b: the missing dimension counts as π/2.
  angles = diagnostics.principal_angles(a, np.stack([a[:, 0], a[:, 0]], 1))
  np.testing.assert_allclose(angles, [0, np.pi / 2], atol=1e-6)


def test_gram_gap_is_rotation_invariant():
  rng = np.random.default_rng(1)
  z_star = rng.normal(size=(10, 4))
  r = _orthogonal(rng, 4, 4)
  assert float(diagnostics.gram_gap(z_star @ r, z_star)) < 1e-5
  assert float(diagnostics.gram_gap(3 * z_star @ r, z_star,
                                    fit_scale=True)) < 1e-5
  other = rng.normal(size=(10, 4))
  want = (np.linalg.norm(other @ other.T - z_star @ z_star.T)
          / np.linalg.norm(z_star @ z_star.T))
  assert float(diagnostics.gram_gap(other, z_star)) == pytest.approx(
      want, rel=1e-5)
  assert 0 < float(diagnostics.gram_gap(other, z_star, fit_scale=True)) < 1
  assert float(jax.jit(diagnostics.gram_gap)(other, z_star)) == pytest.approx(
      want, rel=1e-5)


@pytest.mark.parametrize("g, k", [
    (views_graph(6, 2), 4),            # K < B: the optimum is a family
    (views_graph(4, 3), 6),            # K > B: zero columns in Z*
    (supervised_graph(jnp.array([0, 0, 1, 1, 1, 2, 2, 2])), 3),
])
def test_embedding_diagnostics_vanish_at_the_optimum(g, k):
  rng = np.random.default_rng(2)
  z_star = np.asarray(spectral.optimal_embedding(g, k))
  for z in (z_star @ _orthogonal(rng, k, k), 0.3 * z_star):
    d = diagnostics.embedding_diagnostics(z, g)
    assert float(d["gram_gap"]) < 1e-5
    assert float(d["principal_angle_max"]) < 1e-3
    assert float(d["top_eigenspace_fraction"]) == pytest.approx(1, abs=1e-6)


def test_embedding_diagnostics_pick_the_nearest_optimum():
  g = views_graph(8, 2)  # top eigenvalue 1 with multiplicity 8 > K = 3
  u = np.asarray(spectral.optimal_embedding(g, 8))
  d = diagnostics.embedding_diagnostics(u[:, 5:8], g)  # another optimum
  assert float(d["gram_gap"]) < 1e-5
  assert float(d["principal_angle_max"]) < 1e-3


def test_top_eigenspace_fraction_of_random_subspaces_is_r_over_n():
  # E[‖U_rᵀZ‖²/‖Z‖²] = r/N for Gaussian Z; averaged over 40 draws the
  # standard error here is below 0.02, the tolerance is 0.05.
  g = views_graph(10, 2)  # N = 20, r = 10 view-invariant directions
  rng = np.random.default_rng(3)
  fracs = [float(diagnostics.top_eigenspace_fraction(rng.normal(size=(20, 3)),
                                                     g)) for _ in range(40)]
  assert np.mean(fracs) == pytest.approx(10 / 20, abs=0.05)
  assert float(diagnostics.top_eigenspace_fraction(
      rng.normal(size=(20, 3)), g, r=20)) == pytest.approx(1.0)
  invariant = np.tile(rng.normal(size=(10, 3)), (2, 1))  # same on both views
  assert float(diagnostics.top_eigenspace_fraction(invariant, g)) == (
      pytest.approx(1.0, abs=1e-6))


def test_diagnostics_errors():
  with pytest.raises(ValueError, match="same number of rows"):
    diagnostics.principal_angles(np.ones((3, 1)), np.ones((4, 1)))
  with pytest.raises(ValueError, match="z_star"):
    diagnostics.gram_gap(np.ones((3, 1)), np.ones(3))
  with pytest.raises(ValueError, match="no positive eigenvalue"):
    diagnostics.top_eigenspace_fraction(np.ones((3, 1)), -np.eye(3))
  with pytest.raises(ValueError, match="at most as many columns"):
    diagnostics.embedding_diagnostics(np.ones((3, 4)), views_graph(3, 1))


def test_frossl_eigenvalue_trajectory_matches_the_ode():
  lam, e0 = np.array([2.0, 0.5]), np.array([0.1, 3.0])
  ts = np.array([0.0, 0.1, 0.5, 2.0])
  e = diagnostics.frossl_eigenvalue_trajectory(ts, lam, e0)
  s = frossl_dynamics.frossl_symmetric_singular_values(ts, lam,
                                                       np.sqrt(e0 / lam))
  np.testing.assert_allclose(e, lam * np.asarray(s) ** 2, rtol=1e-6)
  np.testing.assert_allclose(
      e, 1 / (1 + (1 / e0 - 1) * np.exp(-8 * lam * ts[:, None])), rtol=1e-5)
