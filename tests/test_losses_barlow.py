"""Tests for Barlow Twins: graph form (Balestriero & LeCun 2022,
arXiv 2205.11508, §2; Cabannes et al. 2023, arXiv 2303.15256, eq. (4)) and
official two-view.

float64 checks use rtol 1e-10 unless stated; float32 checks rtol 1e-4.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from conftest import pad_bcoo as _pad
from ssljax import graphs
from ssljax import losses

N, K = 8, 4


def _z(rng, n=N, k=K):
  return rng.normal(size=(n, k)) * np.linspace(0.5, 2.0, k) + 0.3


# ---------------------------------------------------------------------------
# numpy references.
# ---------------------------------------------------------------------------


def _official_barlow_numpy(z1, z2, lambd=0.0051, eps=1e-5):
  """BarlowTwins.forward of facebookresearch/barlowtwins, in numpy.

  bn = nn.BatchNorm1d(affine=False) in training mode: (x − mean)/sqrt(var +
  eps) with the biased variance; c = bn(z1).T @ bn(z2) / batch_size;
  on_diag = (diag(c) − 1)².sum(); off_diag = off_diagonal(c)².sum().
  """
  def bn(x):
    return (x - x.mean(0)) / np.sqrt(x.var(0) + eps)  # np.var is biased

  def off_diagonal(x):
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].reshape(n - 1, n + 1)[:, 1:].flatten()

  c = bn(z1).T @ bn(z2) / z1.shape[0]
  on_diag = np.sum((np.diagonal(c) - 1) ** 2)
  off_diag = np.sum(off_diagonal(c) ** 2)
  return {"on_diagonal": on_diag, "off_diagonal": off_diag,
          "loss": on_diag + lambd * off_diag}


def _pair_list_c(z, g):
  """Pair-list code (Balestriero & LeCun 2022 §2): r, c = nonzero(G); cosine
  cross-correlation of Z[r], Z[c]."""
  r, c = np.nonzero(g)
  left, right = z[r], z[c]
  left = left / np.linalg.norm(left, axis=0)
  right = right / np.linalg.norm(right, axis=0)
  return left.T @ right


def _terms_from_c(c, lambd):
  off = c - np.diag(np.diag(c))
  on_diag, off_diag = np.sum((1 - np.diag(c)) ** 2), np.sum(off ** 2)
  return {"on_diagonal": on_diag, "off_diagonal": off_diag,
          "loss": on_diag + lambd * off_diag}


def _graph_c(z, g, column_norm="degree"):
  if column_norm == "degree":
    s = np.sqrt(np.diag(z.T @ np.diag(g.sum(1)) @ z))
  else:
    s = np.linalg.norm(z, axis=0)
  zn = z / s
  return zn.T @ g @ zn


def _assert_terms(got, want, rtol=1e-10, atol=1e-12):
  for key in ("on_diagonal", "off_diagonal", "loss"):
    np.testing.assert_allclose(float(got[key]), float(want[key]), rtol=rtol,
                               atol=atol, err_msg=key)


def _zero_one_graphs():
  yield np.asarray(graphs.views_graph(4, 2), float)
  yield np.asarray(graphs.views_graph(2, 4), float)
  yield np.asarray(graphs.supervised_graph(np.array([0, 1, 0, 2, 1, 0, 2, 0])),
                   float)
  yield np.asarray(graphs.knn_graph(np.random.default_rng(0).normal(
      size=(N, 3)), 2), float)


# ---------------------------------------------------------------------------
# Graph form.
# ---------------------------------------------------------------------------


class TestBarlowTwinsGraph:

  def test_degree_norm_equals_001_pair_lists(self, x64):
    # Pair lists r, c = nonzero(G): Z_lᵀZ_r = ZᵀGZ and each column is normalised
    # by sqrt(diag(ZᵀDZ)); for V views C = Z̃ᵀ(G/(V−1))Z̃, not the Z̃ᵀGZ̃
    # printed by Balestriero & LeCun 2022 §2.
    rng = np.random.default_rng(1)
    for g in _zero_one_graphs():
      z = _z(rng)
      want = _terms_from_c(_pair_list_c(z, g), 5e-3)
      _assert_terms(losses.barlow_twins_terms(z, g), want)

  def test_weighted_graph_against_numpy(self, x64):
    rng = np.random.default_rng(2)
    a = rng.uniform(size=(N, N))
    g = a + a.T
    z = _z(rng)
    for norm in ("degree", "unit"):
      _assert_terms(
          losses.barlow_twins_terms(z, g, lambda_offdiag=0.3, column_norm=norm),
          _terms_from_c(_graph_c(z, g, norm), 0.3))

  def test_v_views_factor(self, x64):
    # d-regular G: "degree" C = Z̃ᵀ(G/d)Z̃ = "unit" C / d.
    rng = np.random.default_rng(3)
    g = np.asarray(graphs.views_graph(2, 4), float)  # d = 3
    z = _z(rng)
    zt = z / np.linalg.norm(z, axis=0)
    np.testing.assert_allclose(_graph_c(z, g), zt.T @ (g / 3) @ zt, rtol=1e-12)
    _assert_terms(losses.barlow_twins_terms(z, g),
                  _terms_from_c(zt.T @ (g / 3) @ zt, 5e-3))

  def test_two_view_graph_joint_norm_formula(self, x64):
    # views_graph(n, 2): C = (Z1ᵀZ2 + Z2ᵀZ1)/(‖Z_:k‖‖Z_:l‖), joint norms;
    # "degree" == "unit" (1-regular).
    rng = np.random.default_rng(4)
    z1, z2 = _z(rng, 6), _z(rng, 6)
    z = np.concatenate([z1, z2])
    g = graphs.views_graph(6, 2, dtype=jnp.float64)
    norms = np.linalg.norm(z, axis=0)
    c = (z1.T @ z2 + z2.T @ z1) / np.outer(norms, norms)
    _assert_terms(losses.barlow_twins_terms(z, g), _terms_from_c(c, 5e-3))
    _assert_terms(losses.barlow_twins_terms(z, g, column_norm="unit"),
                  _terms_from_c(c, 5e-3))

  def test_equals_symmetrised_cosine_only_for_equal_view_norms(self, x64):
    rng = np.random.default_rng(5)
    n = 6
    g = graphs.views_graph(n, 2, dtype=jnp.float64)

    def sym_cosine(z1, z2):
      c = (z1 / np.linalg.norm(z1, axis=0)).T @ (z2 / np.linalg.norm(z2, axis=0))
      return (c + c.T) / 2

    z1 = _z(rng, n)
    z2 = _z(rng, n)
    z2_eq = z2 / np.linalg.norm(z2, axis=0) * np.linalg.norm(z1, axis=0)
    _assert_terms(losses.barlow_twins_terms(np.concatenate([z1, z2_eq]), g),
                  _terms_from_c(sym_cosine(z1, z2_eq), 5e-3))
    unequal = float(losses.barlow_twins(np.concatenate([z1, 3 * z2]), g))
    assert abs(unequal - _terms_from_c(sym_cosine(z1, z2), 5e-3)["loss"]) > 1e-3

  def test_supervised_optima(self, x64):
    # Cabannes et al. 2023 Theorem 2 / App. B.2.4 hold only for G_n; Z = Y·Λ:
    # unit norm, G = YYᵀ:  loss Σ_c (N_c − 1)²; unit norm, G_n = Y diag(1/N_c)
    # Yᵀ: loss 0 (rows of G_n sum to 1, so "degree" is the same here); degree
    # norm, G = YYᵀ: also 0 (C = I): the normalisation absorbs N_c.
    labels = np.array([0, 1, 0, 2, 1, 0, 2, 0])
    counts = np.bincount(labels)
    z = np.eye(3)[labels] * np.array([2.0, 0.5, 3.0])
    g = graphs.supervised_graph(labels, dtype=jnp.float64)
    g_n = graphs.normalized_supervised_graph(labels, dtype=jnp.float64)
    on_unit = losses.barlow_twins_terms(z, g, column_norm="unit")
    np.testing.assert_allclose(float(on_unit["on_diagonal"]),
                               np.sum((counts - 1.0) ** 2), rtol=1e-12)
    assert abs(float(on_unit["off_diagonal"])) < 1e-12
    for norm in ("unit", "degree"):
      assert abs(float(losses.barlow_twins(z, g_n, column_norm=norm))) < 1e-12
    assert abs(float(losses.barlow_twins(z, g))) < 1e-12

  def test_normalised_graph_bound_k_greater_than_c(self, x64):
    # G_n has rank C, so with λ = 1 (loss = ‖C − I‖²) the loss is >= K − C.
    rng = np.random.default_rng(6)
    labels = np.array([0, 1, 0, 1, 1, 0, 0, 1])
    g_n = graphs.normalized_supervised_graph(labels, dtype=jnp.float64)
    for _ in range(5):
      z = _z(rng, N, 5)
      assert float(losses.barlow_twins(z, g_n, lambda_offdiag=1.0)) >= 3 - 1e-12
    z_opt = np.concatenate([np.eye(2)[labels], np.zeros((N, 3))], axis=1)
    np.testing.assert_allclose(
        float(losses.barlow_twins(z_opt, g_n, lambda_offdiag=1.0)), 3.0,
        rtol=1e-12)

  def test_per_column_scale_and_sign_invariance(self, x64):
    rng = np.random.default_rng(7)
    for g in _zero_one_graphs():
      z = _z(rng)
      scale = np.array([0.01, 3.0, -2.0, 100.0])
      np.testing.assert_allclose(float(losses.barlow_twins(z * scale, g)),
                                 float(losses.barlow_twins(z, g)), rtol=1e-10)

  def test_row_permutation_invariance(self, x64):
    rng = np.random.default_rng(8)
    g = np.asarray(graphs.views_graph(4, 2), float)
    z = _z(rng)
    p = np.eye(N)[rng.permutation(N)]
    np.testing.assert_allclose(float(losses.barlow_twins(p @ z, p @ g @ p.T)),
                               float(losses.barlow_twins(z, g)), rtol=1e-10)

  def test_collapsed_column_is_finite(self):
    z = jnp.asarray(np.random.default_rng(9).normal(size=(N, K)), jnp.float32)
    z = z.at[:, 1].set(0.0)
    g = graphs.views_graph(4, 2)
    t = losses.barlow_twins_terms(z, g)
    assert np.isfinite(float(t["loss"])) and float(t["on_diagonal"]) >= 1.0
    assert np.all(np.isfinite(np.asarray(jax.grad(losses.barlow_twins)(z, g))))

  def test_check_grads(self, x64):
    rng = np.random.default_rng(10)
    for g in list(_zero_one_graphs())[:3]:
      for norm in ("degree", "unit"):
        check_grads(lambda z: losses.barlow_twins(z, g, lambda_offdiag=0.1,
                                                  column_norm=norm),
                    (jnp.asarray(_z(rng)),), order=1, modes=["rev"])

  def test_bcoo_matches_dense(self, x64):
    rng = np.random.default_rng(11)
    for g in _zero_one_graphs():
      z = jnp.asarray(_z(rng))
      g_sp = _pad(graphs.to_bcoo(g))
      _assert_terms(losses.barlow_twins_terms(z, g_sp),
                    losses.barlow_twins_terms(z, g), rtol=1e-12)
      np.testing.assert_allclose(
          np.asarray(jax.grad(losses.barlow_twins)(z, g_sp)),
          np.asarray(jax.grad(losses.barlow_twins)(z, g)), rtol=1e-10,
          atol=1e-14)

  def test_jit_and_dtypes(self):
    rng = np.random.default_rng(12)
    z64 = _z(rng)
    g = graphs.views_graph(4, 2)
    z32 = jnp.asarray(z64, jnp.float32)
    np.testing.assert_allclose(float(jax.jit(losses.barlow_twins)(z32, g)),
                               float(losses.barlow_twins(z32, g)), rtol=1e-6)
    with jax.enable_x64(True):
      want = float(losses.barlow_twins(z64, g))
      assert losses.barlow_twins(z64, g).dtype == jnp.float64
    got = losses.barlow_twins(z32, g)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(float(got), want, rtol=1e-4)


class TestBarlowTwinsGraphErrors:

  def test_shape_mismatch(self):
    with pytest.raises(ValueError, match=r"g must have shape \(6, 6\).*\(4, 4\)"):
      losses.barlow_twins(jnp.ones((6, 2)), graphs.views_graph(2, 2))

  def test_asymmetric_dense_and_bcoo(self):
    g = np.triu(np.ones((4, 4)))
    for gg in (g, graphs.to_bcoo(g)):
      with pytest.raises(ValueError, match="g must be symmetric"):
        losses.barlow_twins(jnp.ones((4, 2)), gg)

  def test_non_square(self):
    with pytest.raises(ValueError, match=r"g must be a square.*\(4, 2\)"):
      losses.barlow_twins_terms(jnp.ones((4, 2)), jnp.ones((4, 2)))

  def test_non_finite(self):
    z = np.ones((4, 2))
    z[1, 1] = np.nan
    with pytest.raises(ValueError, match="z must be finite"):
      losses.barlow_twins(z, jnp.eye(4))
    g = np.eye(4)
    g[0, 0] = -np.inf
    with pytest.raises(ValueError, match="g must be finite"):
      losses.barlow_twins(jnp.ones((4, 2)), g)

  def test_bad_options(self):
    with pytest.raises(ValueError, match="column_norm must be one of.*'l2'"):
      losses.barlow_twins(jnp.ones((4, 2)), jnp.eye(4), column_norm="l2")
    with pytest.raises(ValueError, match="eps must be >= 0"):
      losses.barlow_twins(jnp.ones((4, 2)), jnp.eye(4), eps=-1.0)


# ---------------------------------------------------------------------------
# Two-view form.
# ---------------------------------------------------------------------------


class TestBarlowTwinsTwoView:

  @pytest.mark.parametrize("n,k", [(2, 1), (8, 4), (16, 9)])
  def test_matches_official_code(self, x64, n, k):
    rng = np.random.default_rng(n * 10 + k)
    z1 = _z(rng, n, k)
    z2 = z1 + 0.5 * _z(rng, n, k)
    _assert_terms(losses.barlow_twins_two_view_terms(z1, z2),
                  _official_barlow_numpy(z1, z2))
    _assert_terms(
        losses.barlow_twins_two_view_terms(z1, z2, lambda_offdiag=0.2, eps=1e-3),
        _official_barlow_numpy(z1, z2, lambd=0.2, eps=1e-3))
    np.testing.assert_allclose(
        float(losses.barlow_twins_two_view(z1, z2)),
        float(losses.barlow_twins_two_view_terms(z1, z2)["loss"]), rtol=1e-12)

  def test_identical_views_near_zero_on_diagonal(self):
    rng = np.random.default_rng(13)
    z = _z(rng)
    t = losses.barlow_twins_two_view_terms(z, z, eps=0.0)
    assert float(t["on_diagonal"]) == pytest.approx(0.0, abs=1e-6)  # float32

  def test_graph_form_on_standardised_views(self, x64):
    # eps = 0: C = cosine of centred views (standard BT); the graph form on
    # concat([bn(z1), bn(z2)]) with views_graph(n, 2) gives (C + Cᵀ)/2: equal
    # on-diagonal term, off-diagonal of the symmetrised C.
    rng = np.random.default_rng(14)
    n = 10
    z1, z2 = _z(rng, n), _z(rng, n)
    bn = lambda x: (x - x.mean(0)) / x.std(0)
    zc1, zc2 = z1 - z1.mean(0), z2 - z2.mean(0)
    cos = (zc1 / np.linalg.norm(zc1, axis=0)).T @ (zc2 / np.linalg.norm(zc2, axis=0))
    two = losses.barlow_twins_two_view_terms(z1, z2, lambda_offdiag=0.3, eps=0.0)
    _assert_terms(two, _terms_from_c(cos, 0.3))
    graph = losses.barlow_twins_terms(np.concatenate([bn(z1), bn(z2)]),
                                      graphs.views_graph(n, 2), lambda_offdiag=0.3)
    _assert_terms(graph, _terms_from_c((cos + cos.T) / 2, 0.3))
    np.testing.assert_allclose(float(graph["on_diagonal"]),
                               float(two["on_diagonal"]), rtol=1e-10)
    assert float(graph["off_diagonal"]) <= float(two["off_diagonal"])
    # λ = 0: the two forms coincide.
    np.testing.assert_allclose(
        float(losses.barlow_twins(np.concatenate([bn(z1), bn(z2)]),
                                  graphs.views_graph(n, 2), lambda_offdiag=0.0)),
        float(losses.barlow_twins_two_view(z1, z2, lambda_offdiag=0.0, eps=0.0)),
        rtol=1e-10)

  def test_invariant_to_per_view_affine(self, x64):
    rng = np.random.default_rng(15)
    z1, z2 = _z(rng), _z(rng)
    base = float(losses.barlow_twins_two_view(z1, z2, eps=0.0))
    np.testing.assert_allclose(
        float(losses.barlow_twins_two_view(3 * z1 + 5, 0.5 * z2 - 1, eps=0.0)),
        base, rtol=1e-10)

  def test_check_grads(self, x64):
    rng = np.random.default_rng(16)
    check_grads(losses.barlow_twins_two_view,
                (jnp.asarray(_z(rng)), jnp.asarray(_z(rng))), order=1,
                modes=["rev"])

  @pytest.mark.parametrize("dtype", ["float32", "float64"])
  def test_dtypes(self, dtype):
    rng = np.random.default_rng(17)
    z1, z2 = _z(rng), _z(rng)
    with jax.enable_x64(dtype == "float64"):
      t = losses.barlow_twins_two_view_terms(z1.astype(dtype), z2.astype(dtype))
      for v in t.values():
        assert v.dtype == dtype and v.shape == ()
    _assert_terms(t, _official_barlow_numpy(z1, z2),
                  rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-6)

  def test_jit_matches_eager(self):
    rng = np.random.default_rng(18)
    z1 = jnp.asarray(_z(rng), jnp.float32)
    z2 = jnp.asarray(_z(rng), jnp.float32)
    np.testing.assert_allclose(float(jax.jit(losses.barlow_twins_two_view)(z1, z2)),
                               float(losses.barlow_twins_two_view(z1, z2)),
                               rtol=1e-6)

  def test_errors(self):
    with pytest.raises(ValueError, match=r"same \(N, K\) shape.*\(4, 3\).*\(4, 2\)"):
      losses.barlow_twins_two_view(jnp.ones((4, 3)), jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="z1 must be a rank-2"):
      losses.barlow_twins_two_view(jnp.ones(4), jnp.ones(4))
    with pytest.raises(ValueError, match=r"N >= 2.*\(1, 2\)"):
      losses.barlow_twins_two_view(jnp.ones((1, 2)), jnp.ones((1, 2)))
    z2 = np.ones((4, 2))
    z2[0, 0] = np.nan
    with pytest.raises(ValueError, match="z2 must be finite"):
      losses.barlow_twins_two_view(jnp.ones((4, 2)), z2)
    with pytest.raises(ValueError, match="eps must be >= 0"):
      losses.barlow_twins_two_view(jnp.ones((4, 2)), jnp.ones((4, 2)), eps=-1e-5)
    with pytest.raises(ValueError, match="same"):
      jax.jit(losses.barlow_twins_two_view)(jnp.ones((4, 3)), jnp.ones((4, 2)))
