"""Tests for the spectral contrastive losses: VIC² ‖ZZᵀ − G‖² and HaoChen's.

Identities of Cabannes et al. 2023 (arXiv 2303.15256, Theorems 1-2, App. B.1.1,
with the corrections stated in `ssljax.losses.spectral_contrastive`), checked in
float64 with rtol 1e-10 unless stated.
"""

import jax
from jax.experimental import sparse
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from conftest import pad_bcoo as _pad
from ssljax import graphs
from ssljax import losses

N, K = 8, 4


def _z(rng, n=N, k=K):
  return rng.normal(size=(n, k)) * np.linspace(0.3, 1.5, k) + 0.2


def _graph_cases(rng):
  """Graphs on N = 8 rows: SSL, supervised, weighted, signed."""
  yield np.asarray(graphs.views_graph(4, 2), float)
  yield np.asarray(graphs.views_graph(2, 4, order="sample_major",
                                      self_loops=True), float)
  yield np.asarray(graphs.supervised_graph(np.array([0, 1, 0, 2, 1, 0, -1, 2])),
                   float)
  a = rng.uniform(size=(N, N))
  yield a + a.T
  yield np.asarray(graphs.signed_graph(N, [[0, 1], [2, 3], [4, 4]],
                                       [[0, 5], [1, 7]]), float)


def _naive(z, g):
  return np.sum((z @ z.T - g) ** 2)


class TestSpectralContrastiveGraph:

  def test_hand_computed(self):
    # Z = e1 rows 0/2 and e2 row 1: ZZᵀ = [[1,0,1,0],[0,1,0,0],[1,0,1,0],0].
    z = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    g = graphs.views_graph(2, 2)  # pairs (0, 2), (1, 3)
    # ZZᵀ − G: diag (1, 1, 1, 0), (1,3)/(3,1) = −1, (0,2)/(2,0) = 0.
    assert float(losses.spectral_contrastive(z, g)) == pytest.approx(5.0)

  def test_equals_naive_frobenius(self, x64):
    rng = np.random.default_rng(0)
    for g in _graph_cases(rng):
      z = _z(rng)
      np.testing.assert_allclose(float(losses.spectral_contrastive(z, g)),
                                 _naive(z, g), rtol=1e-10)
      t = losses.spectral_contrastive_terms(z, g)
      np.testing.assert_allclose(float(t["gram"]), np.sum((z.T @ z) ** 2),
                                 rtol=1e-12)
      np.testing.assert_allclose(float(t["alignment"]),
                                 np.trace(z.T @ g @ z), rtol=1e-10, atol=1e-12)
      np.testing.assert_allclose(float(t["graph"]), np.sum(g ** 2), rtol=1e-12)

  def test_pairwise_forms(self, x64):
    # Exact: ‖ZZᵀ − G‖² − ‖G‖² = Σ_ij [−2G_ij z_iᵀz_j + (z_iᵀz_j)²] = Σ_ij
    # [G_ij‖z_i − z_j‖² + (z_iᵀz_j)² − (d_i‖z_i‖² + d_j‖z_j‖²)/N].
    rng = np.random.default_rng(1)
    for g in _graph_cases(rng):
      z = _z(rng)
      got = float(losses.spectral_contrastive(z, g)) - np.sum(g ** 2)
      s, d, sq = z @ z.T, g.sum(1), np.sum(z ** 2, 1)
      form1 = sum(-2 * g[i, j] * s[i, j] + s[i, j] ** 2
                  for i in range(N) for j in range(N))
      form2 = sum(g[i, j] * np.sum((z[i] - z[j]) ** 2) + s[i, j] ** 2
                  - (d[i] * sq[i] + d[j] * sq[j]) / N
                  for i in range(N) for j in range(N))
      np.testing.assert_allclose(got, form1, rtol=1e-10)
      np.testing.assert_allclose(got, form2, rtol=1e-10)

  def test_vicreg_squared_variance_identity(self, x64):
    # ‖ZᵀZ − NI_K‖² + 2Tr(Zᵀ(NI_N − G)Z) = ‖ZZᵀ − G‖² + N²K − ‖G‖².
    rng = np.random.default_rng(2)
    for g in _graph_cases(rng):
      z = _z(rng)
      lhs = (np.sum((z.T @ z - N * np.eye(K)) ** 2)
             + 2 * np.trace(z.T @ (N * np.eye(N) - g) @ z))
      rhs = (float(losses.spectral_contrastive(z, g)) + N ** 2 * K
             - np.sum(g ** 2))
      np.testing.assert_allclose(lhs, rhs, rtol=1e-10)

  def test_pal_eq9_10_degree_corrected(self, x64):
    # Σ_ij G_ij‖z_i − z_j‖² + Σ_ij R(z_i, z_j), R(a,b) = (aᵀb)² − ‖a‖² − ‖b‖²,
    #   = ‖ZZᵀ − G‖² − ‖G‖² + 2Tr(Zᵀ(D − NI)Z): VIC² + const only if D = NI.
    rng = np.random.default_rng(3)
    for g in _graph_cases(rng):
      z = _z(rng)
      r = lambda a, b: (a @ b) ** 2 - a @ a - b @ b
      pal = sum(g[i, j] * np.sum((z[i] - z[j]) ** 2) + r(z[i], z[j])
                for i in range(N) for j in range(N))
      lap = np.diag(g.sum(1)) - N * np.eye(N)
      want = (float(losses.spectral_contrastive(z, g)) - np.sum(g ** 2)
              + 2 * np.trace(z.T @ lap @ z))
      np.testing.assert_allclose(pal, want, rtol=1e-10)
      sum_r = sum(r(z[i], z[j]) for i in range(N) for j in range(N))
      np.testing.assert_allclose(
          sum_r, np.sum((z.T @ z - N * np.eye(K)) ** 2) - N ** 2 * K,
          rtol=1e-10)

  def test_rotation_invariance(self, x64):
    rng = np.random.default_rng(4)
    r, _ = np.linalg.qr(rng.normal(size=(K, K)))
    for g in _graph_cases(rng):
      z = _z(rng)
      np.testing.assert_allclose(float(losses.spectral_contrastive(z @ r, g)),
                                 float(losses.spectral_contrastive(z, g)),
                                 rtol=1e-10)

  def test_supervised_optimum_is_y_times_orthonormal_rows(self, x64):
    # Cabannes et al. 2023 Thm 2: G = YYᵀ, K >= C, Z = YR with RRᵀ = I_C gives
    # loss 0, zero gradient, singular values √N_c.
    rng = np.random.default_rng(5)
    labels = np.array([0, 1, 0, 2, 1, 0, 2, 0])
    y = np.eye(3)[labels]
    q, _ = np.linalg.qr(rng.normal(size=(K, 3)))
    z = y @ q.T  # R = qᵀ: (3, K) with orthonormal rows
    g = graphs.supervised_graph(labels, dtype=jnp.float64)
    assert abs(float(losses.spectral_contrastive(z, g))) < 1e-12
    grad = jax.grad(losses.spectral_contrastive)(jnp.asarray(z), g)
    np.testing.assert_allclose(np.asarray(grad), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.linalg.svd(z, compute_uv=False)[:3],
                               np.sqrt([4.0, 2.0, 2.0]), rtol=1e-12)
    # Any other Z (not of that form) has a positive loss.
    assert float(losses.spectral_contrastive(z + 0.01 * _z(rng), g)) > 0

  def test_context_free_optimum(self, x64):
    # Z = 1zᵀ: the loss Σ_ij (‖z‖² − G_ij)² is minimal at ‖z‖² = mean(G)
    # = Σ_c p_c² for G = YYᵀ (Cabannes et al. 2023 App. B.3).
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    g = graphs.supervised_graph(labels, dtype=jnp.float64)
    p = np.bincount(labels) / N
    assert float(jnp.mean(g)) == pytest.approx(np.sum(p ** 2))
    u = np.array([0.6, 0.0, 0.8, 0.0])  # unit vector
    f = lambda s: float(losses.spectral_contrastive(
        np.ones((N, 1)) * (np.sqrt(s) * u), g))
    s_star = np.sum(p ** 2)
    assert f(s_star) < min(f(s_star * 0.99), f(s_star * 1.01))
    np.testing.assert_allclose(f(s_star), np.sum((s_star - np.asarray(g)) ** 2),
                               rtol=1e-12)

  def test_gradient_formula_and_check_grads(self, x64):
    rng = np.random.default_rng(6)
    for g in _graph_cases(rng):
      z = _z(rng)
      grad = jax.grad(losses.spectral_contrastive)(jnp.asarray(z), g)
      np.testing.assert_allclose(np.asarray(grad), 4 * (z @ z.T - g) @ z,
                                 rtol=1e-10, atol=1e-10)
      check_grads(lambda z: losses.spectral_contrastive(z, g),
                  (jnp.asarray(z),), order=2, modes=["rev"])

  def test_bcoo_matches_dense(self, x64):
    rng = np.random.default_rng(7)
    for g in _graph_cases(rng):
      z = jnp.asarray(_z(rng))
      g_sp = _pad(graphs.to_bcoo(g))
      np.testing.assert_allclose(float(losses.spectral_contrastive(z, g_sp)),
                                 float(losses.spectral_contrastive(z, g)),
                                 rtol=1e-12)
      np.testing.assert_allclose(
          np.asarray(jax.grad(losses.spectral_contrastive)(z, g_sp)),
          np.asarray(jax.grad(losses.spectral_contrastive)(z, g)),
          rtol=1e-12, atol=1e-12)

  def test_bcoo_duplicates_and_jit(self, x64):
    # (0, 1) stored as 0.25 + 0.75 and (1, 0) once: ‖G‖² must use 1, not the
    # squares of the pieces.
    g_sp = sparse.BCOO((jnp.array([0.25, 0.75, 1.0, 2.0]),
                        jnp.array([[0, 1], [0, 1], [1, 0], [2, 2]])),
                       shape=(3, 3))
    g = np.array([[0, 1, 0], [1, 0, 0], [0, 0, 2.0]])
    z = jnp.asarray(np.random.default_rng(8).normal(size=(3, 2)))
    want = _naive(np.asarray(z), g)
    np.testing.assert_allclose(float(losses.spectral_contrastive(z, g_sp)),
                               want, rtol=1e-12)
    np.testing.assert_allclose(
        float(jax.jit(losses.spectral_contrastive)(z, g_sp)), want, rtol=1e-12)

  def test_sparse_views_graph_large_n(self):
    # N = 2048 with a BCOO views graph: no (N, N) array is needed.
    rng = np.random.default_rng(9)
    z = jnp.asarray(rng.normal(size=(2048, 8)) / 8, jnp.float32)
    g_sp = graphs.views_graph(1024, 2, sparse=True)
    z1, z2 = np.asarray(z[:1024], np.float64), np.asarray(z[1024:], np.float64)
    zz = np.asarray(z, np.float64)
    # ‖ZᵀZ‖² − 2Tr(ZᵀGZ) + ‖G‖² with Tr(ZᵀGZ) = 2Σ z1_iᵀz2_i, ‖G‖² = N.
    want = np.sum((zz.T @ zz) ** 2) - 4 * np.sum(z1 * z2) + 2048
    np.testing.assert_allclose(float(losses.spectral_contrastive(z, g_sp)),
                               want, rtol=1e-5)

  @pytest.mark.parametrize("dtype", ["float32", "float64"])
  def test_dtype_and_float32_accuracy(self, dtype):
    rng = np.random.default_rng(10)
    g = np.asarray(graphs.supervised_graph(np.repeat(np.arange(2), 4)), float)
    # Near the optimum Z ≈ Y, where the three trace terms cancel.
    z = np.eye(2)[np.repeat(np.arange(2), 4)] + 0.01 * rng.normal(size=(8, 2))
    with jax.enable_x64(dtype == "float64"):
      out = losses.spectral_contrastive(z.astype(dtype), g)
      assert out.dtype == dtype and out.shape == ()
    want = _naive(z, g)
    # float32: absolute error ~ eps_f32 · (‖ZᵀZ‖² + ‖G‖²) = 1e-7 · 64.
    tol = 1e-5 * 2 * np.sum(g ** 2) if dtype == "float32" else 1e-12
    np.testing.assert_allclose(float(out), want, atol=tol)

  def test_jit_matches_eager(self):
    rng = np.random.default_rng(11)
    z = jnp.asarray(_z(rng), jnp.float32)
    g = graphs.views_graph(4, 2)
    np.testing.assert_allclose(
        float(jax.jit(losses.spectral_contrastive)(z, g)),
        float(losses.spectral_contrastive(z, g)), rtol=1e-6)


class TestSpectralContrastiveErrors:

  def test_g_wrong_size(self):
    with pytest.raises(ValueError, match=r"g must have shape \(6, 6\).*\(4, 4\)"):
      losses.spectral_contrastive(jnp.ones((6, 2)), graphs.views_graph(2, 2))

  def test_g_wrong_size_bcoo(self):
    with pytest.raises(ValueError, match=r"g must have shape \(6, 6\).*\(4, 4\)"):
      losses.spectral_contrastive(jnp.ones((6, 2)),
                                  graphs.views_graph(2, 2, sparse=True))

  def test_g_not_square(self):
    with pytest.raises(ValueError, match=r"g must be a square.*\(4, 3\)"):
      losses.spectral_contrastive(jnp.ones((4, 2)), jnp.ones((4, 3)))

  def test_g_asymmetric(self):
    g = np.triu(np.ones((4, 4)))
    with pytest.raises(ValueError, match="g must be symmetric"):
      losses.spectral_contrastive(jnp.ones((4, 2)), g)
    with pytest.raises(ValueError, match="g must be symmetric"):
      losses.spectral_contrastive(jnp.ones((4, 2)), graphs.to_bcoo(g))

  def test_non_finite(self):
    z = np.ones((4, 2))
    z[0, 1] = np.nan
    with pytest.raises(ValueError, match="z must be finite"):
      losses.spectral_contrastive(z, jnp.eye(4))
    g = np.eye(4)
    g[2, 2] = np.inf
    with pytest.raises(ValueError, match="g must be finite"):
      losses.spectral_contrastive_terms(jnp.ones((4, 2)), g)

  def test_z_rank(self):
    with pytest.raises(ValueError, match=r"z must be a rank-2.*\(4,\)"):
      losses.spectral_contrastive(jnp.ones(4), jnp.eye(4))

  def test_under_jit_shape_checked(self):
    with pytest.raises(ValueError, match="g must have shape"):
      jax.jit(losses.spectral_contrastive)(jnp.ones((4, 2)), jnp.eye(3))


# ---------------------------------------------------------------------------
# Two-view estimator (HaoChen et al. 2021, arXiv 2106.04156): −(2/N)Σ z₁ᵢᵀz₂ᵢ +
# (1/(N(N−1)))Σ_{i≠j}(z₁ᵢᵀz₂ⱼ)².
# ---------------------------------------------------------------------------


def _naive_haochen(z1, z2):
  n = len(z1)
  pos = sum(z1[i] @ z2[i] for i in range(n))
  neg = sum((z1[i] @ z2[j]) ** 2 for i in range(n) for j in range(n) if i != j)
  return -2.0 / n * pos + neg / (n * (n - 1))


class TestSpectralContrastiveTwoView:

  def test_hand_computed(self):
    z = jnp.array([[1.0, 0.0], [0.0, 1.0]])
    assert float(losses.spectral_contrastive_two_view(z, z)) == -2.0
    # Cross pair (0, 1): (1·1)² = 1 → −(2/2)(1 + 1) + 2/(2·1) = −1.
    z1 = jnp.array([[1.0, 0.0], [1.0, 0.0]])
    assert float(losses.spectral_contrastive_two_view(z1, z1)) == -1.0

  @pytest.mark.parametrize("n,k", [(2, 1), (8, 4), (13, 3)])
  def test_matches_naive(self, x64, n, k):
    rng = np.random.default_rng(n + k)
    z1, z2 = _z(rng, n, k), _z(rng, n, k)
    np.testing.assert_allclose(float(losses.spectral_contrastive_two_view(z1, z2)),
                               _naive_haochen(z1, z2), rtol=1e-10)

  def test_relation_to_graph_form(self, x64):
    # On concat([z1, z2]) with views_graph(n, 2):
    #   ‖ZZᵀ − G‖² = ‖Z1Z1ᵀ‖² + ‖Z2Z2ᵀ‖² + 2‖Z1Z2ᵀ − I‖², and
    #   ‖Z1Z2ᵀ − I‖² = n(n−1)·L_HaoChen + 2(n−1)Σ_i p_i + Σ_i (p_i − 1)²,
    # with p_i = z1_iᵀz2_i: not an affine function of L_HaoChen.
    rng = np.random.default_rng(12)
    z1, z2 = _z(rng), _z(rng)
    hc = float(losses.spectral_contrastive_two_view(z1, z2))
    p = np.sum(z1 * z2, 1)
    cross = np.sum((z1 @ z2.T - np.eye(N)) ** 2)
    np.testing.assert_allclose(
        cross, N * (N - 1) * hc + 2 * (N - 1) * p.sum() + np.sum((p - 1) ** 2),
        rtol=1e-10)
    graph = float(losses.spectral_contrastive(np.concatenate([z1, z2]),
                                              graphs.views_graph(N, 2)))
    np.testing.assert_allclose(
        graph, np.sum((z1 @ z1.T) ** 2) + np.sum((z2 @ z2.T) ** 2) + 2 * cross,
        rtol=1e-10)

  def test_symmetric_in_views_and_rotation_invariant(self, x64):
    rng = np.random.default_rng(13)
    z1, z2 = _z(rng), _z(rng)
    r, _ = np.linalg.qr(rng.normal(size=(K, K)))
    base = float(losses.spectral_contrastive_two_view(z1, z2))
    np.testing.assert_allclose(float(losses.spectral_contrastive_two_view(z2, z1)),
                               base, rtol=1e-12)
    np.testing.assert_allclose(
        float(losses.spectral_contrastive_two_view(z1 @ r, z2 @ r)), base,
        rtol=1e-10)

  def test_check_grads(self, x64):
    rng = np.random.default_rng(14)
    check_grads(losses.spectral_contrastive_two_view,
                (jnp.asarray(_z(rng)), jnp.asarray(_z(rng))), order=2,
                modes=["rev"])

  @pytest.mark.parametrize("dtype", ["float32", "float64"])
  def test_dtype(self, dtype):
    rng = np.random.default_rng(15)
    z1, z2 = _z(rng), _z(rng)
    with jax.enable_x64(dtype == "float64"):
      out = losses.spectral_contrastive_two_view(z1.astype(dtype),
                                                 z2.astype(dtype))
      assert out.dtype == dtype
    np.testing.assert_allclose(float(out), _naive_haochen(z1, z2),
                               rtol=1e-5 if dtype == "float32" else 1e-12)

  def test_errors(self):
    with pytest.raises(ValueError, match=r"same \(N, K\) shape.*\(4, 3\).*\(4, 2\)"):
      losses.spectral_contrastive_two_view(jnp.ones((4, 3)), jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="z1 must be a rank-2"):
      losses.spectral_contrastive_two_view(jnp.ones(4), jnp.ones(4))
    with pytest.raises(ValueError, match=r"N >= 2.*\(1, 3\)"):
      losses.spectral_contrastive_two_view(jnp.ones((1, 3)), jnp.ones((1, 3)))
    z2 = np.ones((4, 2))
    z2[3, 0] = np.inf
    with pytest.raises(ValueError, match="z2 must be finite"):
      losses.spectral_contrastive_two_view(jnp.ones((4, 2)), z2)
