"""Tests for ssljax.theory.supervised (Balestriero & LeCun 2024, "The
Birth of Self Supervised Learning: A Supervised Theory").

Every statement of that paper used by the module is checked in float64: closed
forms against an L-BFGS optimiser (tolerance 1e-7 relative), identities to
1e-10, Theorem 2 against central finite differences of the true minimum (1e-6
relative) and against autodiff (1e-8). Negative statements (uncentred SVD, K > C
for App. B, signed G in Theorem 2) are checked to fail by a clear margin.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import lbfgs_minimize
from ssljax.theory import supervised

pytestmark = pytest.mark.usefixtures("x64")


def _problem(seed, n=40, k=6, c=4, offset=3.0):
  rng = np.random.default_rng(seed)
  f = rng.standard_normal((n, k)) * rng.uniform(0.3, 3.0, k) + offset
  labels = np.arange(n) % c
  rng.shuffle(labels)
  y = np.eye(c)[labels]
  return jnp.asarray(f), jnp.asarray(y)


def _minimize(fun, x0, tol=1e-14, maxiter=5000):
  """L-BFGS (SciPy) on a jax scalar function of a flat float64 vector."""
  return lbfgs_minimize(fun, x0, ftol=tol, gtol=1e-12, maxiter=maxiter)


def _true_min(f, y, ridge):
  w, b = supervised.ridge_head(f, y, ridge)
  return supervised.ridge_head_loss(f, y, w, b, ridge)


class TestRidgeHead:

  @pytest.mark.parametrize("ridge", [0.0, 1e-3, 0.1])
  def test_against_lbfgs(self, ridge):
    f, y = _problem(0)
    k, c = f.shape[1], y.shape[1]

    def loss(theta):
      w = theta[:k * c].reshape(k, c)
      b = theta[k * c:]
      return supervised.ridge_head_loss(f, y, w, b, ridge)

    theta, value = _minimize(loss, np.zeros(k * c + c))
    w, b = supervised.ridge_head(f, y, ridge)
    closed = float(supervised.ridge_head_loss(f, y, w, b, ridge))
    assert closed <= value + 1e-12
    np.testing.assert_allclose(closed, value, rtol=1e-9)
    np.testing.assert_allclose(theta[:k * c], np.ravel(w), atol=1e-5)
    np.testing.assert_allclose(theta[k * c:], b, atol=1e-5)

  def test_matches_paper_columns_formula(self):
    f, y = _problem(1)
    ridge, n = 0.05, f.shape[0]
    big_f, big_y = f.T, y.T  # paper: columns are samples
    h = jnp.eye(n) - jnp.ones((n, n)) / n
    w_paper = big_y @ h @ big_f.T @ jnp.linalg.inv(
        big_f @ h @ big_f.T + n * ridge * jnp.eye(f.shape[1]))
    b_paper = (big_y - w_paper @ big_f) @ jnp.ones(n) / n
    w, b = supervised.ridge_head(f, y, ridge)
    np.testing.assert_allclose(w, w_paper.T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(b, b_paper, rtol=1e-10, atol=1e-12)

  def test_zero_ridge_rank_deficient_is_min_norm(self):
    f, y = _problem(2, n=5, k=8)  # K > N: many minimisers, loss 0
    w, b = supervised.ridge_head(f, y, 0.0)
    assert float(supervised.ridge_head_loss(f, y, w, b, 0.0)) < 1e-20
    fc = f - f.mean(0)
    np.testing.assert_allclose(w, jnp.linalg.pinv(fc) @ (y - y.mean(0)),
                               atol=1e-12)

  def test_jit_and_float32(self):
    f, y = _problem(3)
    w64, _ = supervised.ridge_head(f, y, 0.1)
    w_jit, _ = jax.jit(lambda a, b: supervised.ridge_head(a, b, 0.1))(f, y)
    np.testing.assert_allclose(w_jit, w64, rtol=1e-10)
    w32, b32 = supervised.ridge_head(f.astype(jnp.float32),
                                     y.astype(jnp.float32), 0.1)
    assert w32.dtype == jnp.float32 and b32.dtype == jnp.float32
    np.testing.assert_allclose(w32, w64, rtol=1e-3, atol=1e-4)


class TestLemma1:

  @pytest.mark.parametrize("ridge", [0.0, 1e-3, 1e-1, 10.0])
  @pytest.mark.parametrize("n,k", [(40, 6), (12, 20)])
  def test_equals_true_min(self, ridge, n, k):
    f, y = _problem(4, n=n, k=k)
    np.testing.assert_allclose(
        supervised.lemma1_objective(f, y @ y.T, ridge), _true_min(f, y, ridge),
        rtol=1e-10, atol=1e-12)

  def test_equals_lbfgs_min(self):
    f, y = _problem(5)
    ridge, k, c = 1e-2, f.shape[1], y.shape[1]
    _, value = _minimize(
        lambda t: supervised.ridge_head_loss(
            f, y, t[:k * c].reshape(k, c), t[k * c:], ridge),
        np.zeros(k * c + c))
    np.testing.assert_allclose(supervised.lemma1_objective(f, y @ y.T, ridge),
                               value, rtol=1e-9)

  def test_uncentred_svd_is_wrong(self):
    # The SVD must be of the centred features (the main text says f(X)).
    f, y = _problem(6, offset=5.0)
    ridge, n = 0.1, f.shape[0]
    g = y @ y.T
    v, s, _ = jnp.linalg.svd(f, full_matrices=False)  # uncentred
    d = s**2 / (s**2 + ridge * n)
    h = jnp.eye(n) - jnp.ones((n, n)) / n
    wrong = (jnp.trace(h @ g @ h) - jnp.sum(d * jnp.diag(v.T @ g @ v))) / n
    right = _true_min(f, y, ridge)
    assert abs(float(wrong - right)) > 1e-2 * abs(float(right))

  def test_g_and_hgh_interchangeable_and_constant(self):
    f, y = _problem(7)
    n = f.shape[0]
    g = y @ y.T
    h = jnp.eye(n) - jnp.ones((n, n)) / n
    # Constant: ‖YH‖²/N = Tr(HGH)/N (and HGH gives the same objective).
    np.testing.assert_allclose(jnp.sum((h @ y)**2), jnp.trace(h @ g @ h),
                               rtol=1e-12)
    for ridge in (0.0, 0.3):
      np.testing.assert_allclose(supervised.lemma1_objective(f, g, ridge),
                                 supervised.lemma1_objective(f, h @ g @ h,
                                                             ridge),
                                 rtol=1e-10)
    v, _, _ = jnp.linalg.svd(h @ f, full_matrices=False)
    np.testing.assert_allclose(h @ v, v, atol=1e-12)  # HV = V

  def test_zero_ridge_form(self):
    f, y = _problem(8)
    n = f.shape[0]
    g = y @ y.T
    h = jnp.eye(n) - jnp.ones((n, n)) / n
    v, _, _ = jnp.linalg.svd(h @ f, full_matrices=False)
    want = (jnp.trace(h @ g @ h) - jnp.trace(v.T @ g @ v)) / n
    np.testing.assert_allclose(supervised.lemma1_objective(f, g, 0.0), want,
                               rtol=1e-10)

  def test_shrinkage_in_unit_interval(self):
    # Positivity of D (left "ToDo" in the paper): D_kk ∈ [0, 1), > 0 iff s_k > 0
    # (λ > 0).
    s = jnp.array([5.0, 1.0, 1e-3, 0.0])
    d = supervised._shrinkage(s, 0.1, 10)  # pylint: disable=protected-access
    assert bool(jnp.all((d >= 0) & (d < 1)))
    np.testing.assert_array_equal(np.asarray(d > 0), [True, True, True, False])

  def test_corollary1_identity(self):
    # d-regular G: (1/N)Σ G_ij‖f_i − f_j‖² = −(2/N)Tr(HGH f fᵀ) + (2d/N)‖Hf‖².
    rng = np.random.default_rng(9)
    n, k, v = 12, 3, 3
    f = jnp.asarray(rng.standard_normal((n, k)) + 1.0)
    g = jnp.kron(jnp.eye(n // v), jnp.ones((v, v)))  # degree d = V
    h = jnp.eye(n) - jnp.ones((n, n)) / n
    pair = jnp.sum(g * jnp.sum((f[:, None] - f[None]) ** 2, -1)) / n
    rhs = (-2.0 / n * jnp.trace(h @ g @ h @ f @ f.T)
           + 2.0 * v / n * jnp.sum((h @ f)**2))
    np.testing.assert_allclose(pair, rhs, rtol=1e-12)


class TestTheorem2:

  def _perturbed_min(self, f, y, ridge, k, delta):
    mean = f.mean(0)
    v, s, ut = jnp.linalg.svd(f - mean, full_matrices=False)
    s = s.at[k].add(delta)
    return _true_min(mean + (v * s) @ ut, y, ridge)

  @pytest.mark.parametrize("ridge", [1e-3, 1e-1])
  def test_finite_differences_of_true_min(self, ridge):
    f, y = _problem(10)
    grad = supervised.sigma_gradient(f, y @ y.T, ridge)
    eps = 1e-5
    for k in range(f.shape[1]):
      fd = (self._perturbed_min(f, y, ridge, k, eps)
            - self._perturbed_min(f, y, ridge, k, -eps)) / (2 * eps)
      np.testing.assert_allclose(grad[k], fd, rtol=1e-6, atol=1e-10)

  def test_autodiff_of_true_min(self):
    f, y = _problem(11)
    ridge = 0.05
    mean = f.mean(0)
    v, s, ut = jnp.linalg.svd(f - mean, full_matrices=False)
    auto = jax.grad(lambda sig: _true_min(mean + (v * sig) @ ut, y, ridge))(s)
    np.testing.assert_allclose(supervised.sigma_gradient(f, y @ y.T, ridge),
                               auto, rtol=1e-8, atol=1e-14)

  def test_nonpositive_for_psd_g_and_zero_without_ridge(self):
    f, y = _problem(12)
    grad = supervised.sigma_gradient(f, y @ y.T, 0.1)
    assert bool(jnp.all(grad <= 0)) and bool(jnp.any(grad < 0))
    np.testing.assert_array_equal(supervised.sigma_gradient(f, y @ y.T, 0.0),
                                  0.0)

  def test_signed_graph_can_be_positive(self):
    # Observation 3, (VᵀGV)_kk >= 0, holds only for PSD G; a signed G (Cabannes
    # et al. 2023 (arXiv 2303.15256) eq. 15) breaks it. G = Y A Yᵀ with A
    # indefinite (classes 0 and 1 repel); the feature y_0 + y_1 is a direction
    # with (VᵀGV)_kk < 0, so ∂/∂σ_k > 0 there.
    f, y = _problem(13, offset=0.0)
    a = jnp.eye(4).at[0, 1].set(-3.0).at[1, 0].set(-3.0)
    g = y @ a @ y.T
    f = jnp.concatenate([0.1 * f, 5.0 * (y[:, :1] + y[:, 1:2])], axis=1)
    grad = supervised.sigma_gradient(f, g, 0.1)
    assert float(grad[0]) > 1e-4
    assert float(jnp.min(supervised.sigma_gradient(f, y @ y.T, 0.1))) <= 0


class TestOrthogonalHead:

  def test_formula_and_optimiser(self):
    rng = np.random.default_rng(14)
    p, k, c = 30, 3, 5
    z = jnp.asarray(rng.standard_normal((p, k)))
    y = jnp.asarray(np.eye(c)[rng.integers(0, c, p)])
    value, w = supervised.orthogonal_head_objective(z, y)
    np.testing.assert_allclose(w @ w.T, jnp.eye(k), atol=1e-12)
    np.testing.assert_allclose(jnp.sum((z @ w - y)**2) / p, value, rtol=1e-12)
    # Nuclear norm identity: ‖ZᵀY‖_* = Tr √(ZᵀGZ).
    evals = jnp.linalg.eigvalsh(z.T @ (y @ y.T) @ z)
    np.testing.assert_allclose(jnp.sum(jnp.linalg.svd(z.T @ y)[1]),
                               jnp.sum(jnp.sqrt(jnp.maximum(evals, 0))),
                               rtol=1e-10)
    # Optimiser: L-BFGS over unconstrained A with W = (AAᵀ)^(-1/2) A, which
    # has orthonormal rows, from 3 random starts.
    def loss(a_flat):
      a = a_flat.reshape(k, c)
      evals, evecs = jnp.linalg.eigh(a @ a.T)
      w_ = (evecs / jnp.sqrt(evals)) @ evecs.T @ a
      return jnp.sum((z @ w_ - y)**2) / p

    for seed in range(3):
      a0 = np.random.default_rng(seed).standard_normal(k * c)
      _, best = _minimize(loss, a0)
      np.testing.assert_allclose(best, value, rtol=1e-8)

  def test_k_greater_than_c_formula_false_and_raises(self):
    rng = np.random.default_rng(15)
    p, k, c = 30, 4, 2
    z = jnp.asarray(rng.standard_normal((p, k)))
    y = jnp.asarray(np.eye(c)[rng.integers(0, c, p)])
    with pytest.raises(ValueError, match="K <= C"):
      supervised.orthogonal_head_objective(z, y)
    # Best W with orthonormal columns (WᵀW = I_C): the App. B formula is off.
    u, _, vt = jnp.linalg.svd(z.T @ y, full_matrices=False)
    w = u @ vt
    best = jnp.sum((z @ w - y)**2) / p
    formula = (jnp.sum(z**2) + jnp.sum(y**2)
               - 2 * jnp.sum(jnp.linalg.svd(z.T @ y)[1])) / p
    assert abs(float(best - formula)) > 0.1


class TestBadInputs:

  def test_errors(self):
    f, y = _problem(16)
    with pytest.raises(ValueError, match="same number of rows"):
      supervised.ridge_head(f, y[:-1], 0.1)
    with pytest.raises(ValueError, match="ridge"):
      supervised.ridge_head(f, y, -1.0)
    with pytest.raises(ValueError, match=r"\(N, K\)"):
      supervised.ridge_head(f[0], y, 0.1)
    with pytest.raises(ValueError, match="symmetric"):
      supervised.lemma1_objective(f, jnp.triu(y @ y.T), 0.1)
    with pytest.raises(ValueError, match="shape"):
      supervised.sigma_gradient(f, jnp.eye(3), 0.1)
    with pytest.raises(ValueError, match="finite"):
      supervised.ridge_head(f.at[0, 0].set(jnp.nan), y, 0.1)
