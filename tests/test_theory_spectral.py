"""Tests for ssljax.theory.spectral (Balestriero & LeCun 2022, arXiv
2205.11508; Cabannes et al. 2023, arXiv 2303.15256, Theorem 2, App. B, §5).

float64 throughout. Closed forms are compared with L-BFGS (SciPy, jax
gradients) from several random starts: objective values to 1e-7 relative,
ZZᵀ to 1e-5 relative, gradients at the closed form to 1e-9 relative.
Negative statements (un-normalised BarlowTwins graph, λ instead of λ/2) are
checked to fail by a clear margin.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import lbfgs_minimize
from ssljax import graphs
from ssljax import losses
from ssljax.theory import linalg
from ssljax.theory import spectral

pytestmark = pytest.mark.usefixtures("x64")


def _labels(sizes, seed=0):
  labels = np.repeat(np.arange(len(sizes)), sizes)
  np.random.default_rng(seed).shuffle(labels)
  return labels


def _y(labels):
  return jnp.asarray(np.eye(labels.max() + 1)[labels])


def _minimize(fun, x0, maxiter=10000):
  return lbfgs_minimize(fun, x0, ftol=1e-15, gtol=1e-11, maxiter=maxiter)


def _vic2(z, g):
  return jnp.sum((z @ z.T - g)**2)


def _vicreg_squared(z, g):
  n, k = z.shape
  return (jnp.sum((z.T @ z / n - jnp.eye(k))**2)
          + 2.0 / n**2 * jnp.trace(z.T @ (n * jnp.eye(n) - g) @ z))


def _bt(z, g, lambda_offdiag=1.0):
  zt = z / jnp.linalg.norm(z, axis=0)
  c = zt.T @ g @ zt
  off = c - jnp.diag(jnp.diag(c))
  return jnp.sum((jnp.diag(c) - 1.0)**2) + lambda_offdiag * jnp.sum(off**2)


def _min_over_z(loss, g, k, seeds=(0, 1, 2)):
  n = g.shape[0]
  best = None
  for seed in seeds:
    z0 = np.random.default_rng(seed).standard_normal(n * k)
    z, value = _minimize(lambda t: loss(t.reshape(n, k), g), z0)
    if best is None or value < best[1]:
      best = (jnp.asarray(z.reshape(n, k)), value)
  return best


def _rel(a, b):
  return float(jnp.linalg.norm(a - b) / jnp.maximum(jnp.linalg.norm(b), 1e-300))


def _principal_cosines(a, b):
  qa, _ = jnp.linalg.qr(a)
  qb, _ = jnp.linalg.qr(b)
  return jnp.linalg.svd(qa.T @ qb, compute_uv=False)


# ---------------------------------------------------------------------------
# VIC² / spectral contrastive / squared-variance VICReg.
# ---------------------------------------------------------------------------


class TestVic2:

  def test_supervised_k_ge_c_is_yr(self):
    labels = _labels([3, 5, 4])
    y = _y(labels)
    g = y @ y.T
    z = spectral.optimal_embedding(g, 5)
    assert _vic2(z, g) < 1e-20
    r = jnp.linalg.pinv(y) @ z  # Z = YR
    np.testing.assert_allclose(y @ r, z, atol=1e-12)
    np.testing.assert_allclose(r @ r.T, jnp.eye(3), atol=1e-12)
    s = jnp.linalg.svd(z, compute_uv=False)
    np.testing.assert_allclose(s[:3], np.sqrt([5, 4, 3]), rtol=1e-12)
    np.testing.assert_allclose(s[3:], 0.0, atol=1e-12)
    # L-BFGS from 3 inits also reaches 0 with RRᵀ = I.
    for seed in range(3):
      z_opt, value = _min_over_z(_vic2, g, 5, seeds=(seed,))
      assert value < 1e-12
      r = jnp.linalg.pinv(y) @ z_opt
      np.testing.assert_allclose(r @ r.T, jnp.eye(3), atol=1e-6)

  def test_supervised_k_lt_c_is_eckart_young_tail(self):
    labels = _labels([2, 3, 4, 6])
    y = _y(labels)
    g = y @ y.T
    z = spectral.optimal_embedding(g, 2)
    np.testing.assert_allclose(_vic2(z, g), 2**2 + 3**2, rtol=1e-12)
    _, value = _min_over_z(_vic2, g, 2)
    np.testing.assert_allclose(value, 13.0, rtol=1e-7)

  @pytest.mark.parametrize("k", [2, 5])
  def test_indefinite_graph_against_lbfgs(self, k):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((14, 14))
    g = jnp.asarray(a + a.T)  # indefinite: some eigenvalues clipped
    z = spectral.optimal_embedding(g, k, loss="spectral_contrastive")
    z_opt, value = _min_over_z(_vic2, g, k)
    np.testing.assert_allclose(_vic2(z, g), value, rtol=1e-7)
    assert float(_vic2(z, g)) <= value * (1 + 1e-10)
    assert _rel(z_opt @ z_opt.T, z @ z.T) < 1e-5
    grad = jax.grad(_vic2)(z, g)
    assert float(jnp.linalg.norm(grad)) < 1e-9 * float(jnp.linalg.norm(g))**1.5

  def test_clips_negative_eigenvalues(self):
    g = -jnp.eye(4)
    np.testing.assert_array_equal(spectral.optimal_embedding(g, 2), 0.0)

  def test_squared_variance_vicreg_identity_and_minimiser(self):
    labels = _labels([4, 4, 4])
    y = _y(labels)
    n, k = 12, 4
    g = y @ y.T
    z = jnp.asarray(np.random.default_rng(4).standard_normal((n, k)))
    np.testing.assert_allclose(
        n**2 * _vicreg_squared(z, g),
        _vic2(z, g) + n**2 * k - jnp.sum(g**2), rtol=1e-12)
    z_star = spectral.optimal_embedding(g, k, loss="vicreg_squared")
    z_opt, _ = _min_over_z(_vicreg_squared, g, k)
    assert _rel(z_opt @ z_opt.T, z_star @ z_star.T) < 1e-5

  def test_library_losses_stationary_at_optimum(self):
    labels = _labels([3, 4, 5])
    y = _y(labels)
    g = y @ y.T
    z = spectral.optimal_embedding(g, 4)
    # ssljax.losses.spectral_contrastive is ‖ZZᵀ − G‖² (plain sum).
    fn = losses.spectral_contrastive
    np.testing.assert_allclose(fn(z, g), 0.0, atol=1e-10)
    np.testing.assert_allclose(jax.grad(fn)(z, g), 0.0, atol=1e-9)
    np.testing.assert_allclose(fn(z, g), _vic2(z, g), atol=1e-10)


class TestContextFree:

  def test_vic2_norm_is_mean_of_g(self):
    labels = _labels([2, 3, 5])
    y = _y(labels)
    g = y @ y.T
    n = g.shape[0]
    z, _ = _minimize(lambda t: _vic2(jnp.ones((n, 1)) * t[None, :], g),
                     np.array([0.3, -0.2, 0.5]))
    p = np.array([2, 3, 5]) / 10
    np.testing.assert_allclose(np.sum(z**2), np.sum(p**2), rtol=1e-7)
    np.testing.assert_allclose(np.sum(z**2), float(jnp.mean(g)), rtol=1e-7)

  def test_variance_covariance_plus_invariance_norm_is_one(self):
    # ‖ZᵀZ/N − I‖² + Σ G_ij‖z_i − z_j‖²/N² (invariance is 0 for Z = 1zᵀ).
    labels = _labels([2, 3, 5])
    y = _y(labels)
    g = y @ y.T
    n = g.shape[0]

    def loss(z):
      inv = 2.0 * jnp.trace(z.T @ (jnp.diag(g.sum(1)) - g) @ z) / n**2
      return jnp.sum((z.T @ z / n - jnp.eye(z.shape[1]))**2) + inv

    z, _ = _minimize(lambda t: loss(jnp.ones((n, 1)) * t[None, :]),
                     np.array([0.3, -0.2, 0.5]))
    np.testing.assert_allclose(np.linalg.norm(z), 1.0, rtol=1e-7)


class TestSimclrSimplex:

  def test_supervised_balanced_is_simplex(self):
    c, per, k = 3, 4, 3
    labels = np.repeat(np.arange(c), per)
    y = _y(labels)
    g = y @ y.T - jnp.eye(c * per)  # zero diagonal
    n = c * per
    mask = jnp.eye(n, dtype=bool)

    def simclr(t, tau=0.5):
      z = t.reshape(n, k)
      zt = z / jnp.linalg.norm(z, axis=1, keepdims=True)
      s = jnp.where(mask, -jnp.inf, zt @ zt.T / tau)
      logp = s - jax.scipy.special.logsumexp(s, axis=1, keepdims=True)
      return -jnp.sum(jnp.where(mask, 0.0, g * logp))

    t, _ = _minimize(simclr, np.random.default_rng(5).standard_normal(n * k))
    z = t.reshape(n, k)
    zt = z / np.linalg.norm(z, axis=1, keepdims=True)
    cos = zt @ zt.T
    same = np.asarray(labels[:, None] == labels[None, :])
    np.testing.assert_allclose(cos[same], 1.0, atol=1e-4)
    np.testing.assert_allclose(cos[~same], -1.0 / (c - 1), atol=1e-4)

  def test_no_closed_form_raises(self):
    with pytest.raises(ValueError, match="no closed-form"):
      spectral.optimal_embedding(jnp.eye(4), 2, loss="simclr")
    with pytest.raises(ValueError, match="hinge"):
      spectral.optimal_embedding(jnp.eye(4), 2, loss="vicreg")


# ---------------------------------------------------------------------------
# BarlowTwins.
# ---------------------------------------------------------------------------


class TestBarlowTwins:

  def test_unnormalised_graph_is_not_yr(self):
    sizes = [3, 4, 5]
    labels = _labels(sizes)
    y = _y(labels)
    g = y @ y.T
    np.testing.assert_allclose(_bt(y, g), sum((s - 1)**2 for s in sizes),
                               rtol=1e-12)
    z_opt, value = _min_over_z(_bt, g, 3, seeds=(7,))
    assert value < 1e-10  # zero loss is reachable ...
    cos = _principal_cosines(z_opt, y)
    assert float(jnp.min(cos)) < 0.99  # ... outside span(Y)
    with pytest.raises(ValueError, match="normalised|Normalise"):
      spectral.optimal_embedding(g, 3, loss="barlow_twins")

  def test_normalised_graph_zero_loss_at_yd(self):
    labels = _labels([3, 4, 5])
    y = _y(labels)
    g_n = y @ jnp.diag(1.0 / jnp.sum(y, 0)) @ y.T
    d = jnp.diag(jnp.array([0.5, 2.0, 3.0]))
    assert float(_bt(y @ d, g_n)) < 1e-20
    z = spectral.optimal_embedding(g_n, 3, loss="barlow_twins")
    assert float(_bt(z, g_n)) < 1e-20
    np.testing.assert_allclose(_principal_cosines(z, y), 1.0, atol=1e-12)
    # Unequal class sizes: Y R D with a generic rotation R is NOT a minimiser
    # (Cabannes et al. 2023 Thm 2 lists {YRD}; the minimisers are Y
    # diag(N_c)^(-1/2) Q D).
    q, _ = jnp.linalg.qr(jnp.asarray(
        np.random.default_rng(8).standard_normal((3, 3))))
    assert float(_bt(y @ q, g_n)) > 1e-3
    assert float(_bt(y @ jnp.diag(jnp.sum(y, 0)**-0.5) @ q @ d, g_n)) < 1e-20

  def test_k_greater_than_c_loss_is_k_minus_c(self):
    labels = _labels([3, 4, 5])
    y = _y(labels)
    g_n = y @ jnp.diag(1.0 / jnp.sum(y, 0)) @ y.T
    z = spectral.optimal_embedding(g_n, 5, loss="barlow_twins")
    np.testing.assert_allclose(_bt(z, g_n), 2.0, rtol=1e-10)
    _, value = _min_over_z(_bt, g_n, 5, seeds=(0, 1))
    assert value >= 2.0 - 1e-8
    np.testing.assert_allclose(value, 2.0, rtol=1e-6)

  def test_views_graph_over_v_minus_one(self):
    n, v = 6, 3
    g = graphs.views_graph(n, v, dtype=jnp.float64) / (v - 1)
    z = spectral.optimal_embedding(g, n, loss="barlow_twins")
    assert float(_bt(z, g, lambda_offdiag=0.3)) < 1e-20
    with pytest.raises(ValueError, match="barlow_twins"):
      spectral.optimal_embedding(g, n + 1, loss="barlow_twins")

  def test_library_loss_zero_at_optimum(self):
    fn = losses.barlow_twins
    labels = _labels([3, 4, 5])
    y = _y(labels)
    g_n = y @ jnp.diag(1.0 / jnp.sum(y, 0)) @ y.T
    z = spectral.optimal_embedding(g_n, 3, loss="barlow_twins")
    np.testing.assert_allclose(fn(z, g_n, lambda_offdiag=1.0), 0.0, atol=1e-12)


# ---------------------------------------------------------------------------
# Linear regime.
# ---------------------------------------------------------------------------


class TestLinear:

  @pytest.mark.parametrize("n,d,k", [(20, 5, 3), (10, 16, 4)])
  def test_against_lbfgs(self, n, d, k):
    rng = np.random.default_rng(9)
    x = jnp.asarray(rng.standard_normal((n, d)))
    a = rng.standard_normal((n, n))
    g = jnp.asarray(a + a.T)  # distinct eigenvalues: ZZᵀ is unique
    w = spectral.linear_optimal_weights(x, g, k)
    assert w.shape == (d, k)
    obj = lambda w_: _vic2(x @ w_, g)
    best = np.inf
    for seed in range(3):
      t, value = _minimize(lambda t: obj(t.reshape(d, k)),
                           np.random.default_rng(seed).standard_normal(d * k))
      best = min(best, value)
      if value <= best:
        z_opt = x @ t.reshape(d, k)
    np.testing.assert_allclose(obj(w), best, rtol=1e-7)
    assert float(obj(w)) <= best * (1 + 1e-10)
    assert _rel(z_opt @ z_opt.T, (x @ w) @ (x @ w).T) < 1e-5
    # Minimum norm: W lies in the row space of X.
    np.testing.assert_allclose(jnp.linalg.pinv(x) @ (x @ w), w, atol=1e-10)

  def test_full_rank_x_recovers_free_optimum(self):
    labels = _labels([3, 3, 4])
    y = _y(labels)
    g = y @ y.T
    x = jnp.asarray(np.random.default_rng(10).standard_normal((10, 10)))
    z = x @ spectral.linear_optimal_weights(x, g, 3)
    z_free = spectral.optimal_embedding(g, 3)
    np.testing.assert_allclose(z @ z.T, z_free @ z_free.T, atol=1e-10)

  def test_bad_inputs(self):
    x = jnp.ones((5, 2))
    with pytest.raises(ValueError, match="shape"):
      spectral.linear_optimal_weights(x, jnp.eye(4), 2)
    with pytest.raises(ValueError, match="k"):
      spectral.linear_optimal_weights(x, jnp.eye(5), 6)
    with pytest.raises(ValueError, match="loss"):
      spectral.linear_optimal_weights(x, jnp.eye(5), 2, loss="barlow_twins")


# ---------------------------------------------------------------------------
# Kernel regime.
# ---------------------------------------------------------------------------


def _kernel_problem(n=24, seed=11):
  rng = np.random.default_rng(seed)
  labels = np.arange(n) % 3
  x = jnp.asarray(rng.standard_normal((3, 2))[labels]
                  + 0.4 * rng.standard_normal((n, 2)))
  y = _y(labels)
  return x, y @ y.T


def _kernel_objective(z, kmat, g, ridge):
  return _vic2(z, g) + ridge * jnp.trace(z.T @ jnp.linalg.solve(kmat, z))


def _clustered_kernel_problem(seed, n, num_classes):
  """(Gaussian kernel matrix + 1e-6 jitter, G = YYᵀ) on n points around
  num_classes random centres in R³."""
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, num_classes, n)
  x = jnp.asarray(rng.standard_normal((num_classes, 3))[labels]
                  + 0.5 * rng.standard_normal((n, 3)))
  y = _y(labels)
  return spectral.gaussian_kernel(x, x, 1.5) + 1e-6 * jnp.eye(n), y @ y.T


class TestKernel:

  @pytest.mark.parametrize("ridge", [0.1, 3.0])
  def test_against_lbfgs(self, ridge):
    x, g = _kernel_problem()
    kmat = spectral.laplacian_kernel(x, x, 1.0)
    n, k = g.shape[0], 4
    emb = spectral.kernel_embedding(kmat, g, k, ridge)
    obj = lambda t: _kernel_objective(t.reshape(n, k), kmat, g, ridge)
    best, z_opt = np.inf, None
    for seed in range(3):
      t, value = _minimize(obj, np.random.default_rng(seed).standard_normal(
          n * k))
      if value < best:
        best, z_opt = value, t.reshape(n, k)
    closed = float(_kernel_objective(emb.z, kmat, g, ridge))
    np.testing.assert_allclose(closed, best, rtol=1e-7)
    assert closed <= best * (1 + 1e-10)
    assert _rel(z_opt @ z_opt.T, emb.z @ emb.z.T) < 1e-5
    grad = jax.grad(_kernel_objective)(emb.z, kmat, g, ridge)
    assert float(jnp.linalg.norm(grad)) < 1e-9 * float(jnp.linalg.norm(g))**1.5

  def test_full_lambda_is_wrong(self):
    # Cabannes et al. 2023 §5 prints G − λK⁻¹: it is not stationary; G −
    # (λ/2)K⁻¹ is.
    x, g = _kernel_problem()
    kmat = spectral.gaussian_kernel(x, x, 1.0) + 1e-3 * jnp.eye(g.shape[0])
    ridge = 0.5
    mu, u = jnp.linalg.eigh(g - ridge * jnp.linalg.inv(kmat))
    z_wrong = u[:, ::-1][:, :3] * jnp.sqrt(jnp.maximum(mu[::-1][:3], 0))
    z = spectral.kernel_embedding(kmat, g, 3, ridge).z
    grad = jax.grad(_kernel_objective)(z_wrong, kmat, g, ridge)
    assert float(jnp.linalg.norm(grad)) > 1e-3
    assert (float(_kernel_objective(z_wrong, kmat, g, ridge))
            > float(_kernel_objective(z, kmat, g, ridge)) + 1e-3)

  def test_clipping_and_out_of_sample(self):
    x, g = _kernel_problem()
    kmat = spectral.laplacian_kernel(x, x, 1.0)
    emb = spectral.kernel_embedding(kmat, g, 6, 5.0)
    # Only 3 positive eigenvalues at most (rank G = 3): columns 3.. are 0.
    assert float(emb.eigenvalues[3]) < 0
    np.testing.assert_array_equal(emb.z[:, 3:], 0.0)
    np.testing.assert_allclose(
        spectral.kernel_embedding_features(emb, kmat), emb.z, atol=1e-10)
    x_new = x[:5] + 0.01
    feats = spectral.kernel_embedding_features(
        emb, spectral.laplacian_kernel(x_new, x, 1.0))
    assert feats.shape == (5, 6)
    np.testing.assert_allclose(feats, emb.z[:5], atol=0.2 * float(
        jnp.max(jnp.abs(emb.z))))

  @pytest.mark.parametrize("k", [2, 5])
  def test_subspace_method_matches_eigh(self, k):
    kmat, g = _clustered_kernel_problem(12, 120, 4)
    a = spectral.kernel_embedding(kmat, g, k, 0.1, method="eigh")
    b = spectral.kernel_embedding(kmat, g, k, 0.1, method="subspace")
    np.testing.assert_allclose(b.z @ b.z.T, a.z @ a.z.T,
                               atol=1e-6 * float(jnp.max(a.z @ a.z.T)))
    np.testing.assert_allclose(b.coef @ b.z.T, a.coef @ a.z.T, rtol=1e-5,
                               atol=1e-6)

  @pytest.mark.parametrize("k", [3, 8])
  def test_subspace_count_matches_eigh(self, k):
    # G = YYᵀ with 5 classes: M = G − (ridge/2)K⁻¹ has k₊ = 5 eigenvalues
    # above the clip threshold τ = 1e-8·λ_max(G). k = 3 < k₊ stops on the
    # Ritz count alone; k = 8 > k₊ needs the Cholesky certificate that no
    # sixth eigenvalue is above τ. Float64 tolerances: ZZᵀ to 1e-8 of its
    # largest entry, the k₊ kept eigenvalues to 1e-8·λ_max(G).
    kmat, g = _clustered_kernel_problem(15, 150, 5)
    a = spectral.kernel_embedding(kmat, g, k, 0.1, method="eigh")
    b = spectral.kernel_embedding(kmat, g, k, 0.1, method="subspace")
    scale = float(jnp.max(jnp.sum(g, axis=1)))  # Gershgorin bound, = λ_max
    tau = 1e-8 * scale
    k_pos = min(k, 5)
    assert float(a.eigenvalues[k_pos - 1]) > 1.0
    assert np.all(np.asarray(a.eigenvalues[k_pos:]) <= tau)
    np.testing.assert_allclose(b.eigenvalues[:k_pos], a.eigenvalues[:k_pos],
                               rtol=0, atol=1e-8 * scale)
    # Beyond k₊: Ritz values, lower bounds of eigenvalues <= τ; zero columns.
    assert np.all(np.asarray(b.eigenvalues[k_pos:]) <= tau)
    np.testing.assert_array_equal(b.z[:, k_pos:], 0.0)
    zz = a.z @ a.z.T
    np.testing.assert_allclose(b.z @ b.z.T, zz, rtol=0,
                               atol=1e-8 * float(jnp.max(jnp.abs(zz))))

  def test_cholesky_certificate(self):
    # λ_{r+1}(m) < bound iff the deflated shifted Cholesky succeeds, when U
    # holds the top-r eigenvectors; it never succeeds wrongly (any U).
    rng = np.random.default_rng(16)
    n = 40
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    lam = np.concatenate([[5.0, 3.0, 1e-3], -rng.uniform(0.1, 50.0, n - 3)])
    m = (q * lam) @ q.T
    m = 0.5 * (m + m.T)
    holds = lambda r, bound, u=q: linalg.no_eigenvalue_above(
        m, u[:, :r], lam[:r], bound, 5.0)
    assert holds(2, 1e-2)  # λ_3 = 1e-3 < 1e-2
    assert not holds(2, 1e-4)  # λ_3 = 1e-3 > 1e-4
    assert not holds(1, 1e-2)  # λ_2 = 3 is not deflated
    assert holds(0, 6.0) and not holds(0, 4.0)
    # A wrong U cannot fake the certificate: 2 random directions.
    u_bad, _ = np.linalg.qr(rng.standard_normal((n, 2)))
    assert not holds(2, 1e-2, u_bad)

  def test_kernels(self):
    rng = np.random.default_rng(13)
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    dist = np.linalg.norm(x[:, None] - y[None], axis=-1)
    np.testing.assert_allclose(spectral.gaussian_kernel(x, y, 0.7),
                               np.exp(-dist**2 / (2 * 0.7**2)), rtol=1e-12)
    np.testing.assert_allclose(spectral.laplacian_kernel(x, y, 0.7),
                               np.exp(-dist / 0.7), rtol=1e-12)
    k = spectral.laplacian_kernel(x, x, 0.7)
    assert float(jnp.min(jnp.linalg.eigvalsh(k))) > 0
    with pytest.raises(ValueError, match="sigma"):
      spectral.gaussian_kernel(x, y, 0.0)
    with pytest.raises(ValueError, match="columns"):
      spectral.laplacian_kernel(x, y[:, :2], 1.0)

  @pytest.mark.parametrize("method", ["eigh", "subspace"])
  def test_bad_kernel_matrices(self, method):
    x, g = _kernel_problem(n=8)
    n = g.shape[0]
    a = np.random.default_rng(14).standard_normal((n, n))
    with pytest.raises(ValueError, match="not PSD"):
      spectral.kernel_embedding(jnp.asarray(a + a.T), g, 2, 0.1, method=method)
    ones = jnp.ones((n, n))
    with pytest.raises(ValueError, match="singular"):
      spectral.kernel_embedding(ones, g, 2, 0.1, method=method)
    with pytest.raises(ValueError, match="symmetric"):
      spectral.kernel_embedding(jnp.asarray(a) + 10 * jnp.eye(n), g, 2, 0.1,
                                method=method)


# ---------------------------------------------------------------------------
# Bad inputs.
# ---------------------------------------------------------------------------


class TestBadInputs:

  def test_optimal_embedding(self):
    with pytest.raises(ValueError, match="symmetric"):
      spectral.optimal_embedding(jnp.triu(jnp.ones((4, 4))), 2)
    with pytest.raises(ValueError, match="k"):
      spectral.optimal_embedding(jnp.eye(4), 5)
    with pytest.raises(ValueError, match="k"):
      spectral.optimal_embedding(jnp.eye(4), 0)
    with pytest.raises(ValueError, match="square"):
      spectral.optimal_embedding(jnp.ones((3, 4)), 2)
    with pytest.raises(ValueError, match="loss must be one of"):
      spectral.optimal_embedding(jnp.eye(4), 2, loss="nope")

  def test_kernel_embedding(self):
    x, g = _kernel_problem(n=8)
    kmat = spectral.laplacian_kernel(x, x, 1.0)
    with pytest.raises(ValueError, match="shape"):
      spectral.kernel_embedding(kmat[:6, :6], g, 2, 0.1)
    with pytest.raises(ValueError, match="k"):
      spectral.kernel_embedding(kmat, g, 9, 0.1)
    with pytest.raises(ValueError, match="ridge"):
      spectral.kernel_embedding(kmat, g, 2, -1.0)
    with pytest.raises(ValueError, match="method"):
      spectral.kernel_embedding(kmat, g, 2, 0.1, method="qr")
    emb = spectral.kernel_embedding(kmat, g, 2, 0.1)
    with pytest.raises(ValueError, match="cross_kernel"):
      spectral.kernel_embedding_features(emb, jnp.ones((3, 7)))
