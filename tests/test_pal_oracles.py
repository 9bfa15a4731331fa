"""PAL oracles, kernel variant and run_pal (ssljax.pal)."""

import jax
import numpy as np
import pytest

from ssljax import pal

Y8 = np.array([0, 0, 1, 1, 2, 2, 0, 1])


def _rng(seed=0):
  return np.random.default_rng(seed)


class TestSSLAndNNCLR:

  def test_ssl_minibatch_keeps_whole_groups(self):
    groups = np.tile(np.arange(6), 2)  # 6 samples, 2 views, view-major
    oracle = pal.SSLOracle(groups)
    mb = oracle.minibatch(_rng(), 6)
    assert mb.idx.shape == (6,) and mb.n == 12
    grp = groups[mb.idx]
    np.testing.assert_array_equal(np.bincount(grp, minlength=6)[
        np.unique(grp)], 2)
    np.testing.assert_array_equal(mb.g, grp[:, None] == grp[None, :])
    np.testing.assert_array_equal(mb.degree, 2.0)
    assert oracle.query(_rng()) == 0
    with pytest.raises(ValueError, match="same size"):
      pal.SSLOracle(np.array([0, 0, 1]))

  def test_nnclr_positives_are_nearest_neighbours(self):
    z = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    oracle = pal.NNCLROracle(4)
    mb = oracle.minibatch(_rng(), 4, embed=lambda idx: z[idx])
    order = np.argsort(mb.idx)
    g = mb.g[np.ix_(order, order)]
    np.testing.assert_array_equal(g, [[1, 1, 0, 0], [1, 1, 0, 0],
                                      [0, 0, 1, 1], [0, 0, 1, 1]])
    assert mb.n == 4 and np.all(mb.pair_weights == 1)
    np.testing.assert_array_equal(mb.degree, mb.g.sum(1))
    with pytest.raises(ValueError, match="embed"):
      oracle.minibatch(_rng(), 4)


class TestSupervised:

  def test_random_pairs_and_views(self):
    lab = pal.Labeler(Y8)
    oracle = pal.SupervisedOracle(lab, pairs_per_round=5)
    assert oracle.query(_rng()) == 5 and lab.cost.pairs == 5
    g = oracle.target()
    truth = 2.0 * (Y8[:, None] == Y8[None, :]) - 1.0
    assert np.all((g == 0) | (g == truth))
    assert np.count_nonzero(g - np.eye(8)) <= 10  # only answered entries
    mb = oracle.minibatch(_rng(1), 4)
    np.testing.assert_array_equal(mb.g, g[np.ix_(mb.idx, mb.idx)])
    np.testing.assert_array_equal(mb.degree, g.sum(1)[mb.idx])
    np.testing.assert_allclose(mb.pair_weights,
                               pal.uniform_pair_weights(4, 8))


class TestCaptcha:

  def test_screens_least_known_class_and_completes(self):
    lab = pal.Labeler(Y8)
    oracle = pal.CaptchaOracle(lab, 3, templates=[0, 2, 4], screen_size=3)
    # Templates are mutual negatives at no cost.
    assert lab.cost.answers == 0 and oracle.target()[0, 2] == -1
    assert oracle.query(_rng()) == 3
    assert lab.cost.screens == 1 and lab.cost.screened_items == 3
    g = oracle.target()
    truth = 2.0 * (Y8[:, None] == Y8[None, :]) - 1.0
    assert np.all((g == 0) | (g == truth))
    # All counts were 1: class 0 (the first) was screened against template 0.
    assert np.count_nonzero(g[0]) == 3 + 3
    for _ in range(20):
      oracle.query(_rng())
    np.testing.assert_array_equal(oracle.target(), truth)  # fully known
    assert oracle.query(_rng()) == 0

  def test_class_prior_picks_rare_class(self):
    lab = pal.Labeler(Y8)
    oracle = pal.CaptchaOracle(lab, 3, templates=[0, 2, 4], screen_size=2,
                               class_prior=[0.6, 0.3, 0.1])
    oracle.query(_rng())
    # counts/prior = (1/.6, 1/.3, 1/.1): class 0 has the smallest score.
    assert np.count_nonzero(oracle.target()[0]) > 3
    oracle2 = pal.CaptchaOracle(pal.Labeler(Y8), 3, templates=[0, 2, 4],
                                screen_size=2, class_prior=[0.1, 0.3, 0.6])
    oracle2.query(_rng())
    assert np.count_nonzero(oracle2.target()[4]) > 3

  def test_template_discovery_from_negatives(self):
    lab = pal.Labeler(Y8)
    oracle = pal.CaptchaOracle(lab, 3, screen_size=50)
    oracle.query(_rng(3))
    assert len(oracle.templates) == 3
    assert sorted(Y8[oracle.templates].tolist()) == [0, 1, 2]
    assert lab.cost.pairs > 0 and lab.cost.screens == 0

  def test_guided_screen_picks_predicted_class(self):
    y = np.array([0, 1, 0, 0, 1, 1])
    z = np.array([[1, 0], [0, 1], [1, .1], [1, .2], [.1, 1], [.2, 1]], float)
    oracle = pal.CaptchaOracle(pal.Labeler(y), 2, templates=[0, 1],
                               screen_size=2, guided=True)
    oracle.query(_rng(), embed_all=lambda: z)
    # Class 0 chosen (tie, first); the two items most like class 0 are 2, 3.
    np.testing.assert_array_equal(oracle.target()[0], [1, -1, 1, 1, 0, 0])


class TestPruningAndHierarchy:

  def test_pruning_selects_near_then_far(self):
    z = np.array([[1, 0], [.99, .14], [.9, .44], [0, 1], [.14, .99],
                  [.44, .9]], float)
    y = np.array([0, 0, 0, 1, 1, 1])
    oracle = pal.PruningOracle(pal.Labeler(y), 2, points_per_round=2,
                               near_until=100)
    near = oracle.select(_rng(), z)
    oracle.near_until = 0
    far = oracle.select(_rng(), z)
    assert set(near.tolist()) <= {0, 1, 3, 4}
    assert set(far.tolist()) == {2, 5}
    oracle.near_until = 100
    spent = oracle.query(_rng(), embed_all=lambda: z)
    assert spent >= 1 and len(oracle.templates) >= 1
    with pytest.raises(ValueError, match="embed_all"):
      oracle.query(_rng())

  def test_hierarchical_coarse_then_fine(self):
    fine = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    lab = pal.Labeler(fine, coarse_labels=fine // 2)
    oracle = pal.HierarchicalOracle(lab, 2, 4, coarse_rounds=3,
                                    screen_size=8)
    for _ in range(3):
      oracle.query(_rng())
    assert oracle.phase == "fine" and lab.cost.coarse == lab.cost.answers
    coarse_truth = 2.0 * (fine[:, None] // 2 == fine[None, :] // 2) - 1.0
    np.testing.assert_array_equal(oracle.coarse.target(), coarse_truth)
    before = lab.cost.answers
    for _ in range(10):
      oracle.query(_rng())
    truth = 2.0 * (fine[:, None] == fine[None, :]) - 1.0
    np.testing.assert_array_equal(oracle.target(), truth)
    # Fine questions were only asked inside coarse classes.
    assert lab.cost.answers - before <= 8
    np.testing.assert_array_equal(oracle.degree(), truth.sum(1))


class TestKernel:

  def test_full_graph_separates_mixture(self):
    rng = _rng()
    y = np.repeat(np.arange(4), 20)
    x = np.eye(4)[y] + 0.1 * rng.standard_normal((80, 4))
    kp = pal.KernelPAL(x, x, sigma=1.0, ridge=1e-3, k=5)
    err = kp.errors(2.0 * (y[:, None] == y[None, :]) - 1.0, y, y, 4)
    assert err == {"oracle": 0.0, "train": 0.0}
    mu, v = kp.embed(np.eye(80))
    assert mu.shape == (5,) and np.all(np.diff(mu) <= 0)
    np.testing.assert_allclose(v.T @ v, np.eye(5), atol=1e-10)

  def test_matches_theory_kernel_embedding(self):
    """T − K⁺ (λ) is the theory solver's M (ridge 2λ); sqrt path = its optimum."""
    from ssljax.theory import spectral
    rng = _rng()
    y = np.repeat(np.arange(4), 15)
    x = np.eye(4)[y] + 0.3 * rng.standard_normal((60, 4))
    xt = np.eye(4)[y] + 0.3 * rng.standard_normal((60, 4))
    g = 2.0 * (y[:, None] == y[None, :]) - 1.0  # rank 4, 3 positive
    kp = pal.KernelPAL(x, xt, sigma=0.5, ridge=1e-3, k=5)
    kps = pal.KernelPAL(x, xt, sigma=0.5, ridge=1e-3, k=5, scale="sqrt")
    assert kps._kmat is not None  # pylint: disable=protected-access
    kmat = pal.laplacian_kernel(x, x, 0.5)
    with jax.enable_x64(True):
      emb = spectral.kernel_embedding(kmat, g, 5, 2e-3, method="eigh")
      f_test = np.asarray(spectral.kernel_embedding_features(
          emb, pal.laplacian_kernel(xt, x, 0.5)))
    mu, v = kp.embed(g)
    assert mu[2] > 0 > mu[3] >= mu[4]
    np.testing.assert_allclose(mu, np.asarray(emb.eigenvalues), atol=1e-10)
    z = v * np.sqrt(np.maximum(mu, 0.0))  # the optimum from the local path
    mu_s, z_s = kps.embed(g)
    np.testing.assert_allclose(mu_s, mu, atol=1e-10)
    np.testing.assert_allclose(z_s @ z_s.T, z @ z.T, atol=1e-8)
    np.testing.assert_array_equal(z_s[:, 3:], 0.0)  # clipped columns
    f_train, f_t = kps.features(g)
    np.testing.assert_allclose(f_train, z_s, atol=1e-8)
    np.testing.assert_allclose(f_t, f_test, atol=1e-8)
    # Readouts are invariant to positive column scalings, so the optimum's
    # error is that of the 3 unscaled positive directions; the authors'
    # 5 columns (2 with eigenvalue < 0) may give another error.
    f3_train, f3_test = (f[:, :3] for f in kp.features(g))
    assert kps.errors(g, y, y, 4)["train"] == pal.readout_error(
        f3_train, y, f3_test, y, 4)

  def test_readout_error_and_kernels(self):
    f = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert pal.readout_error(f, [0, 1], f, [1, 0], 2) == 1.0
    np.testing.assert_allclose(pal.laplacian_kernel(np.zeros((1, 2)),
                                                    np.ones((1, 2)), 1.0),
                               [[np.exp(-np.sqrt(2))]])
    with pytest.raises(ValueError, match="sigma"):
      pal.gaussian_kernel(f, f, 0.0)
    with pytest.raises(ValueError, match="target"):
      pal.KernelPAL(f, f, sigma=1.0, ridge=0.0, k=1).embed(np.eye(3))


class TestRunPal:

  def _run(self, seed):
    rng = _rng(0)
    y = rng.integers(0, 3, 40)
    x = np.eye(3)[y] + 0.2 * rng.standard_normal((40, 3))
    oracle = pal.CaptchaOracle(pal.Labeler(y, noise_rate=0.1, seed=seed), 3,
                               screen_size=5)
    return pal.run_pal(x, oracle, pal.PALNet(hidden=(8,), out=4),
                       key=jax.random.key(seed), steps=6, batch_size=8,
                       query_every=2, log_every=3)

  def test_same_seed_same_numbers(self):
    a, b = self._run(0), self._run(0)
    assert a.history == b.history
    jax.tree.map(np.testing.assert_array_equal, a.variables, b.variables)
    assert [h["step"] for h in a.history] == [3, 6]
    assert a.history[-1]["answers"] > 0

  def test_eval_at_start_sees_the_initial_network(self):
    x = np.eye(4)
    oracle = pal.SSLOracle(np.array([0, 1, 0, 1]))
    seen = []

    def eval_fn(variables, step):
      seen.append(step)
      return {"norm": float(np.abs(pal.embed(pal.PALNet(out=2), variables,
                                             x)).sum())}

    res = pal.run_pal(x, oracle, pal.PALNet(out=2), key=jax.random.key(0),
                      steps=2, batch_size=4, eval_fn=eval_fn, eval_every=1,
                      eval_at_start=True)
    assert seen == [0, 1, 2]
    assert res.history[0]["step"] == 0 and np.isnan(res.history[0]["loss"])

  def test_errors(self):
    with pytest.raises(ValueError, match="steps"):
      pal.run_pal(np.zeros((4, 2)), pal.NNCLROracle(4), pal.PALNet(),
                  key=jax.random.key(0), steps=0, batch_size=2)
