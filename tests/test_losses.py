"""Tests for ssljax.losses: VICReg, graph form and two-view form (official)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from ssljax import graphs
from ssljax import losses

TERMS = ("invariance", "variance", "covariance", "loss")


# ---------------------------------------------------------------------------
# Plain numpy references.
# ---------------------------------------------------------------------------


def _embeddings(rng, n, k, scales=None):
  """Random (n, k) embeddings; column k has std ~ scales[k], mean != 0."""
  scales = np.linspace(0.3, 2.0, k) if scales is None else scales
  return rng.normal(size=(n, k)) * scales + rng.normal(size=k)


def _random_graph(rng, n, signed=False, diagonal=True):
  a = rng.uniform(-1.0 if signed else 0.0, 1.0, size=(n, n))
  g = a + a.T
  if not diagonal:
    np.fill_diagonal(g, 0.0)
  return g


def _naive_invariance(z, g):
  """(1/N) Σ_ij G_ij ‖z_i − z_j‖², double loop.

  Balestriero & LeCun 2022 (arXiv 2205.11508) §2.
  """
  n = z.shape[0]
  total = 0.0
  for i in range(n):
    for j in range(n):
      total += g[i, j] * np.sum((z[i] - z[j])**2)
  return total / n


def _trace_invariance(z, g):
  """(2/N) Tr(Zᵀ(D − G)Z) (Σ G_ij‖z_i − z_j‖² / N)."""
  lap = np.diag(g.sum(axis=1)) - g
  return 2.0 / z.shape[0] * np.trace(z.T @ lap @ z)


def _numpy_graph_terms(z, g, inv_weight=25.0, var_weight=25.0, cov_weight=1.0,
                       eps=1e-4):
  c = np.cov(z, rowvar=False, ddof=1)
  k = c.shape[0]
  terms = {
      "invariance": _naive_invariance(z, g),
      "variance": np.sum(np.maximum(0.0, 1.0 - np.sqrt(np.diag(c) + eps))),
      "covariance": sum(c[a, b]**2 for a in range(k) for b in range(k) if a != b),
  }
  terms["loss"] = (inv_weight * terms["invariance"]
                   + var_weight * terms["variance"]
                   + cov_weight * terms["covariance"])
  return terms


def _official_vicreg_numpy(x, y, sim_coeff=25.0, std_coeff=25.0, cov_coeff=1.0,
                           eps=1e-4):
  """VICReg.forward of facebookresearch/vicreg (main_vicreg.py), in numpy."""
  batch_size, num_features = x.shape

  def off_diagonal(m):
    n, _ = m.shape
    return m.flatten()[:-1].reshape(n - 1, n + 1)[:, 1:].flatten()

  repr_loss = np.mean((x - y)**2)  # F.mse_loss
  x = x - x.mean(axis=0)
  y = y - y.mean(axis=0)
  std_x = np.sqrt(x.var(axis=0, ddof=1) + eps)  # torch .var is unbiased
  std_y = np.sqrt(y.var(axis=0, ddof=1) + eps)
  std_loss = (np.mean(np.maximum(0.0, 1 - std_x)) / 2
              + np.mean(np.maximum(0.0, 1 - std_y)) / 2)
  cov_x = (x.T @ x) / (batch_size - 1)
  cov_y = (y.T @ y) / (batch_size - 1)
  cov_loss = ((off_diagonal(cov_x)**2).sum() / num_features
              + (off_diagonal(cov_y)**2).sum() / num_features)
  loss = sim_coeff * repr_loss + std_coeff * std_loss + cov_coeff * cov_loss
  return {"invariance": repr_loss, "variance": std_loss,
          "covariance": cov_loss, "loss": loss}


def _assert_terms_close(got, want, rtol=1e-10, atol=1e-12):
  for key in TERMS:
    np.testing.assert_allclose(float(got[key]), float(want[key]), rtol=rtol,
                               atol=atol, err_msg=key)


def _graph_cases(rng):
  """(z, g) pairs on N = 8 rows (one compile): SSL graphs, weighted, signed."""
  yield _embeddings(rng, 8, 4), np.asarray(graphs.views_graph(4, 2), float)
  yield _embeddings(rng, 8, 4), np.asarray(graphs.views_graph(2, 4), float)
  yield _embeddings(rng, 8, 4), np.asarray(
      graphs.views_graph(4, 2, order="sample_major", self_loops=True), float)
  yield _embeddings(rng, 8, 4), _random_graph(rng, 8)
  yield _embeddings(rng, 8, 4), _random_graph(rng, 8, signed=True)


# ---------------------------------------------------------------------------
# Graph form.
# ---------------------------------------------------------------------------


class TestVicregGraph:

  def test_hand_computed(self):
    z = jnp.array([[0., 0.], [2., 0.], [0., 2.], [2., 2.]])
    t = losses.vicreg_terms(z, graphs.views_graph(2, 2))
    # pairs (0, 2), (1, 3) at squared distance 4, each counted twice, / N=4.
    assert float(t["invariance"]) == pytest.approx(4.0)
    assert float(t["variance"]) == 0.0  # std = sqrt(4/3) > 1
    assert float(t["covariance"]) == pytest.approx(0.0, abs=1e-7)
    assert float(losses.vicreg(z, graphs.views_graph(2, 2))) == pytest.approx(100.)

  def test_collapse(self):
    z = jnp.ones((4, 2)) * 3.0
    t = losses.vicreg_terms(z, graphs.views_graph(2, 2), eps=1e-4)
    assert abs(float(t["invariance"])) < 1e-12
    assert abs(float(t["covariance"])) < 1e-12
    assert float(t["variance"]) == pytest.approx(2 * (1 - 1e-2), rel=1e-6)

  def test_invariance_naive_and_trace(self, x64):
    rng = np.random.default_rng(0)
    for z, g in _graph_cases(rng):
      inv = float(losses.vicreg_terms(z, g)["invariance"])
      naive = _naive_invariance(z, g)
      np.testing.assert_allclose(inv, naive, rtol=1e-11)
      np.testing.assert_allclose(inv, _trace_invariance(z, g), rtol=1e-11)

  def test_all_terms_against_numpy(self, x64):
    rng = np.random.default_rng(1)
    weights = dict(inv_weight=0.7, var_weight=3.0, cov_weight=0.2, eps=1e-3)
    for z, g in _graph_cases(rng):
      _assert_terms_close(losses.vicreg_terms(z, g), _numpy_graph_terms(z, g))
      _assert_terms_close(losses.vicreg_terms(z, g, **weights),
                          _numpy_graph_terms(z, g, **weights))
      np.testing.assert_allclose(
          float(losses.vicreg(z, g, **weights)),
          float(losses.vicreg_terms(z, g, **weights)["loss"]), rtol=1e-12)

  def test_variance_term_active_and_inactive(self, x64):
    rng = np.random.default_rng(2)
    z = rng.normal(size=(8, 4))
    z = (z - z.mean(0)) / z.std(0, ddof=1)  # every std exactly 1
    big = z * np.array([1.0, 1.5, 3.0, 1.0])
    assert float(losses.vicreg_terms(big, np.zeros((8, 8)))["variance"]) == 0.
    small = z * np.array([0.5, 1.5, 0.25, 1.0])
    want = (1 - np.sqrt(0.25 + 1e-4)) + (1 - np.sqrt(0.0625 + 1e-4))
    np.testing.assert_allclose(
        float(losses.vicreg_terms(small, np.zeros((8, 8)))["variance"]), want,
        rtol=1e-12)

  def test_variance_gradient_zero_when_std_above_one(self, x64):
    rng = np.random.default_rng(3)
    z = rng.normal(size=(8, 4))
    z = (z - z.mean(0)) / z.std(0, ddof=1) * np.array([1.01, 1.5, 3.0, 6.0])
    grad = jax.grad(lambda z: losses.vicreg(z, jnp.zeros((8, 8)),
                                            cov_weight=0.0))(z)
    np.testing.assert_array_equal(np.asarray(grad), 0.0)

  def test_permutation_invariance(self, x64):
    rng = np.random.default_rng(4)
    for z, g in _graph_cases(rng):
      perm = rng.permutation(z.shape[0])
      p = np.eye(z.shape[0])[perm]
      _assert_terms_close(losses.vicreg_terms(p @ z, p @ g @ p.T),
                          losses.vicreg_terms(z, g))

  def test_view_orders_give_same_loss(self, x64):
    # Same embeddings, rows reordered to sample-major with the sample-major G.
    rng = np.random.default_rng(5)
    n, v = 2, 4
    z_vm = _embeddings(rng, n * v, 4)
    perm = np.array([a * n + i for i in range(n) for a in range(v)])
    _assert_terms_close(
        losses.vicreg_terms(z_vm[perm], graphs.views_graph(n, v, order="sample_major")),
        losses.vicreg_terms(z_vm, graphs.views_graph(n, v)))

  def test_translation_invariance(self, x64):
    rng = np.random.default_rng(6)
    for z, g in _graph_cases(rng):
      shift = rng.normal(size=z.shape[1]) * 50.0
      want = _numpy_graph_terms(z, g)
      _assert_terms_close(losses.vicreg_terms(z + shift, g), want, rtol=1e-9)

  def test_float32_large_offset_stays_accurate(self):
    # Trace form without centring would lose ~all digits: Σ d_i‖z_i‖² ~ 1e8.
    rng = np.random.default_rng(7)
    z = _embeddings(rng, 8, 4).astype(np.float32)
    g = graphs.views_graph(4, 2)
    want = _naive_invariance(z.astype(np.float64), np.asarray(g, np.float64))
    got = losses.vicreg_terms(jnp.asarray(z) + 1e3, g)["invariance"]
    np.testing.assert_allclose(float(got), want, rtol=1e-4)

  def test_invariance_gradient_is_laplacian(self, x64):
    # ∂/∂Z (1/N) Σ G_ij‖z_i − z_j‖² = (4/N)(D − G)Z.
    rng = np.random.default_rng(8)
    for z, g in _graph_cases(rng):
      grad = jax.grad(lambda z: losses.vicreg_terms(z, g)["invariance"])(z)
      lap = np.diag(g.sum(1)) - g
      np.testing.assert_allclose(np.asarray(grad), 4.0 / z.shape[0] * lap @ z,
                                 rtol=1e-10, atol=1e-12)

  def test_check_grads(self, x64):
    rng = np.random.default_rng(9)
    for z, g in _graph_cases(rng):
      check_grads(lambda z: losses.vicreg(z, g), (jnp.asarray(z),), order=1,
                  modes=["rev"])

  def test_jit_matches_eager(self):
    rng = np.random.default_rng(10)
    z = jnp.asarray(_embeddings(rng, 8, 4), jnp.float32)
    g = graphs.views_graph(4, 2)
    f = jax.jit(functools.partial(losses.vicreg_terms, var_weight=2.0))
    eager = losses.vicreg_terms(z, g, var_weight=2.0)
    jitted = f(z, g)
    for key in TERMS:
      np.testing.assert_allclose(jitted[key], eager[key], rtol=1e-5, err_msg=key)

  @pytest.mark.parametrize("dtype", ["float32", "float64"])
  def test_dtypes(self, dtype):
    rng = np.random.default_rng(11)
    z64 = _embeddings(rng, 8, 4)
    g = _random_graph(rng, 8)
    with jax.enable_x64(dtype == "float64"):
      t = losses.vicreg_terms(jnp.asarray(z64, dtype), jnp.asarray(g, "float32"))
      for key in TERMS:
        assert t[key].dtype == dtype and t[key].shape == ()
      assert losses.vicreg(z64.astype(dtype), graphs.views_graph(4, 2)).dtype == dtype
    # float32 and float64 agree to float32 precision.
    with jax.enable_x64(True):
      want = losses.vicreg_terms(z64, g)
    got = losses.vicreg_terms(z64.astype(np.float32), g.astype(np.float32))
    for key in TERMS:
      np.testing.assert_allclose(float(got[key]), float(want[key]), rtol=1e-4)

  def test_bool_graph_and_int_embeddings(self):
    g_bool = graphs.views_graph(2, 2, dtype=jnp.bool_)
    z_int = jnp.array([[0, 0], [2, 0], [0, 2], [2, 2]])
    loss = losses.vicreg(z_int, g_bool)
    assert jnp.issubdtype(loss.dtype, jnp.floating)
    assert float(loss) == pytest.approx(100.0)

  def test_under_jit_asymmetric_not_checked_shape_checked(self):
    f = jax.jit(losses.vicreg)
    asym = jnp.triu(jnp.ones((4, 4)))
    assert np.isfinite(float(f(jnp.eye(4, 2), asym)))
    with pytest.raises(ValueError, match=r"g must have shape \(4, 4\)"):
      f(jnp.eye(4, 2), jnp.ones((3, 3)))


class TestVicregGraphErrors:

  @pytest.mark.parametrize("shape", [(5,), (2, 3, 2), ()])
  def test_z_rank(self, shape):
    with pytest.raises(ValueError, match="z must be a rank-2"):
      losses.vicreg(jnp.ones(shape), jnp.eye(5))

  def test_too_few_rows(self):
    with pytest.raises(ValueError, match=r"z must have N >= 2 rows.*\(1, 3\)"):
      losses.vicreg(jnp.ones((1, 3)), jnp.zeros((1, 1)))

  def test_g_wrong_size(self):
    with pytest.raises(ValueError, match=r"g must have shape \(6, 6\).*\(4, 4\)"):
      losses.vicreg(jnp.ones((6, 2)), graphs.views_graph(2, 2))

  def test_g_not_square(self):
    with pytest.raises(ValueError, match="g must be a square"):
      losses.vicreg(jnp.ones((4, 2)), jnp.ones((4, 3)))

  def test_g_asymmetric(self):
    g = np.asarray(graphs.views_graph(2, 2)).copy()
    g[0, 3] = 1.0
    with pytest.raises(ValueError, match="g must be symmetric"):
      losses.vicreg(jnp.ones((4, 2)), g)

  def test_nan_in_z(self):
    z = np.ones((4, 2))
    z[2, 1] = np.nan
    with pytest.raises(ValueError, match="z must be finite"):
      losses.vicreg_terms(z, graphs.views_graph(2, 2))

  def test_inf_in_g(self):
    g = np.eye(4)
    g[1, 1] = np.inf
    with pytest.raises(ValueError, match="g must be finite"):
      losses.vicreg(jnp.ones((4, 2)), g)

  def test_negative_eps(self):
    with pytest.raises(ValueError, match="eps must be >= 0"):
      losses.vicreg(jnp.eye(4, 2), jnp.eye(4), eps=-1.0)


# ---------------------------------------------------------------------------
# Two-view form and its relation to the graph form.
# ---------------------------------------------------------------------------


class TestVicregTwoView:

  def test_hand_computed(self):
    z1 = jnp.array([[0., 0.], [2., 0.], [0., 2.], [2., 2.]])
    t = losses.vicreg_two_view_terms(z1, z1 + 1.0)
    assert float(t["invariance"]) == pytest.approx(1.0)
    assert float(t["variance"]) == 0.0
    assert float(t["covariance"]) == pytest.approx(0.0, abs=1e-7)
    assert float(losses.vicreg_two_view(z1, z1 + 1.0)) == pytest.approx(25.0)

  def test_collapse(self):
    z = jnp.ones((4, 2))
    t = losses.vicreg_two_view_terms(z, 2 * z)
    assert float(t["variance"]) == pytest.approx(1 - 1e-2, rel=1e-6)
    assert float(t["invariance"]) == pytest.approx(1.0, rel=1e-6)
    assert abs(float(t["covariance"])) < 1e-12

  @pytest.mark.parametrize("n,k", [(2, 1), (8, 4), (16, 9)])
  def test_matches_official_code(self, x64, n, k):
    rng = np.random.default_rng(n * 100 + k)
    z1 = _embeddings(rng, n, k)
    z2 = z1 + 0.3 * _embeddings(rng, n, k)
    _assert_terms_close(losses.vicreg_two_view_terms(z1, z2),
                        _official_vicreg_numpy(z1, z2))
    kw = dict(inv_weight=1.5, var_weight=0.5, cov_weight=4.0, eps=1e-2)
    official_kw = dict(sim_coeff=1.5, std_coeff=0.5, cov_coeff=4.0, eps=1e-2)
    _assert_terms_close(losses.vicreg_two_view_terms(z1, z2, **kw),
                        _official_vicreg_numpy(z1, z2, **official_kw))
    np.testing.assert_allclose(
        float(losses.vicreg_two_view(z1, z2, **kw)),
        float(losses.vicreg_two_view_terms(z1, z2, **kw)["loss"]), rtol=1e-12)

  def test_graph_invariance_is_k_times_two_view(self, x64):
    # (1/2n) Σ_ij G_ij‖z_i − z_j‖² on concat([z1, z2]) with views_graph(n, 2)
    #   = (1/n) Σ_i ‖z1_i − z2_i‖² = K · mean((z1 − z2)²).
    rng = np.random.default_rng(12)
    n, k = 8, 4
    for _ in range(3):
      z1, z2 = _embeddings(rng, n, k), _embeddings(rng, n, k)
      graph_inv = float(losses.vicreg_terms(
          np.concatenate([z1, z2]), graphs.views_graph(n, 2))["invariance"])
      two_view_inv = float(losses.vicreg_two_view_terms(z1, z2)["invariance"])
      np.testing.assert_allclose(graph_inv, k * two_view_inv, rtol=1e-12)
      np.testing.assert_allclose(
          graph_inv, np.sum((z1 - z2)**2) / n, rtol=1e-12)

  def test_graph_and_two_view_differ_in_var_cov_normalisation(self, x64):
    # With z2 = z1 + c (c a constant), pooled covariance has an extra rank-1
    # between-view term; with c = 0 the pooled covariance is
    # cov1·(2n − 2)/(2n − 1), and the graph terms are sum-over-k, no /K.
    rng = np.random.default_rng(13)
    n, k = 8, 4
    z1 = _embeddings(rng, n, k, scales=np.full(k, 0.5))
    graph = losses.vicreg_terms(np.concatenate([z1, z1]),
                                graphs.views_graph(n, 2))
    two = losses.vicreg_two_view_terms(z1, z1)
    c1 = np.cov(z1, rowvar=False) * (2 * n - 2) / (2 * n - 1)
    hinge = np.maximum(0, 1 - np.sqrt(np.diag(c1) + 1e-4))
    np.testing.assert_allclose(float(graph["variance"]), hinge.sum(), rtol=1e-12)
    off = np.sum(c1**2) - np.sum(np.diag(c1)**2)
    np.testing.assert_allclose(float(graph["covariance"]), off, rtol=1e-12)
    np.testing.assert_allclose(
        float(two["covariance"]),
        2 * off / k * ((2 * n - 1) / (2 * n - 2))**2, rtol=1e-12)

  def test_translation_invariance(self, x64):
    rng = np.random.default_rng(14)
    z1 = _embeddings(rng, 8, 4)
    z2 = z1 + 0.5 * rng.normal(size=z1.shape)
    base = losses.vicreg_two_view_terms(z1, z2)
    c = rng.normal(size=4) * 30
    _assert_terms_close(losses.vicreg_two_view_terms(z1 + c, z2 + c), base,
                        rtol=1e-9)
    moved = losses.vicreg_two_view_terms(z1 + c, z2 - c)
    for key in ("variance", "covariance"):
      np.testing.assert_allclose(float(moved[key]), float(base[key]), rtol=1e-9)
    assert float(moved["invariance"]) > float(base["invariance"])

  def test_permutation_invariance(self, x64):
    rng = np.random.default_rng(15)
    z1, z2 = _embeddings(rng, 8, 4), _embeddings(rng, 8, 4)
    perm = rng.permutation(8)
    _assert_terms_close(losses.vicreg_two_view_terms(z1[perm], z2[perm]),
                        losses.vicreg_two_view_terms(z1, z2))

  def test_variance_zero_when_std_above_one(self):
    rng = np.random.default_rng(16)
    scales = np.array([3.0, 4.0, 5.0, 6.0])
    z1, z2 = _embeddings(rng, 8, 4, scales), _embeddings(rng, 8, 4, scales)
    assert min(z1.std(0).min(), z2.std(0).min()) > 1.0
    assert float(losses.vicreg_two_view_terms(z1, z2)["variance"]) == 0.0

  def test_check_grads(self, x64):
    rng = np.random.default_rng(17)
    z1, z2 = _embeddings(rng, 8, 4), _embeddings(rng, 8, 4)
    check_grads(losses.vicreg_two_view, (jnp.asarray(z1), jnp.asarray(z2)),
                order=1, modes=["rev"])

  def test_jit_matches_eager(self):
    rng = np.random.default_rng(18)
    z1 = jnp.asarray(_embeddings(rng, 8, 4), jnp.float32)
    z2 = jnp.asarray(_embeddings(rng, 8, 4), jnp.float32)
    jitted = jax.jit(losses.vicreg_two_view_terms)(z1, z2)
    eager = losses.vicreg_two_view_terms(z1, z2)
    for key in TERMS:
      np.testing.assert_allclose(jitted[key], eager[key], rtol=1e-5, err_msg=key)

  @pytest.mark.parametrize("dtype", ["float32", "float64"])
  def test_dtypes(self, dtype):
    rng = np.random.default_rng(19)
    z1, z2 = _embeddings(rng, 8, 4), _embeddings(rng, 8, 4)
    with jax.enable_x64(dtype == "float64"):
      t = losses.vicreg_two_view_terms(z1.astype(dtype), z2.astype(dtype))
      for key in TERMS:
        assert t[key].dtype == dtype and t[key].shape == ()
    with jax.enable_x64(True):
      want = _official_vicreg_numpy(z1, z2)
    got = losses.vicreg_two_view_terms(z1.astype("float32"), z2.astype("float32"))
    for key in TERMS:
      np.testing.assert_allclose(float(got[key]), float(want[key]), rtol=1e-4)


class TestVicregTwoViewErrors:

  def test_shapes_differ(self):
    with pytest.raises(ValueError, match=r"same \(N, K\) shape.*\(4, 3\).*\(4, 2\)"):
      losses.vicreg_two_view(jnp.ones((4, 3)), jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="same"):
      losses.vicreg_two_view(jnp.ones((5, 3)), jnp.ones((4, 3)))

  def test_rank(self):
    with pytest.raises(ValueError, match="z1 must be a rank-2"):
      losses.vicreg_two_view(jnp.ones(4), jnp.ones(4))

  def test_too_few_rows(self):
    with pytest.raises(ValueError, match="N >= 2"):
      losses.vicreg_two_view(jnp.ones((1, 3)), jnp.ones((1, 3)))

  def test_nan(self):
    z2 = np.ones((4, 2))
    z2[0, 0] = np.nan
    with pytest.raises(ValueError, match="z2 must be finite"):
      losses.vicreg_two_view(jnp.ones((4, 2)), z2)

  def test_negative_eps(self):
    with pytest.raises(ValueError, match="eps must be >= 0"):
      losses.vicreg_two_view(jnp.eye(4, 2), jnp.eye(4, 2), eps=-1e-3)

  def test_shape_checked_under_jit(self):
    with pytest.raises(ValueError, match="same"):
      jax.jit(losses.vicreg_two_view)(jnp.ones((4, 3)), jnp.ones((4, 2)))
