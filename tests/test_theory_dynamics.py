"""Tests of ssljax.theory.dynamics: the flows of Esser, Mukherjee &
Ghoshdastidar 2023 (arXiv 2309.02011, as reconstructed in the module) and the
corrected FroSSL dynamics of Skean et al. 2023 (arXiv 2310.02903).

All checks run in float64 (`jax.enable_x64`). Tolerances are stated next to
each assertion; "O(lr)" checks compare two learning rates so the error is
shown to shrink linearly, not just to be small.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import import_experiment
from ssljax.theory import dynamics as dyn
from ssljax.theory import frossl_dynamics

pytestmark = pytest.mark.usefixtures("x64")


# ---------------------------------------------------------------------------
# Helpers.
# ---------------------------------------------------------------------------


def _orthonormal_columns(rng, rows, cols):
  q, r = np.linalg.qr(rng.normal(size=(rows, cols)))
  return q * np.sign(np.diag(r))


def _data_matrix(rng, d, shift):
  """Symmetric (d, d) with eigenvalues of both signs (shift moves them up)."""
  m = rng.normal(size=(d, d))
  return -(m @ m.T) / d + shift * np.eye(d)


def _weights(rng, d, h, z):
  return _orthonormal_columns(rng, h, d), _orthonormal_columns(rng, h, z).T


def _loss(a, w):
  return float(np.trace(w @ a @ w.T))


def _pitfall_problem():
  """d=6, h=20, z=2: raw-QR projected GD stalls here (loss −2.14 vs −2.29)."""
  rng = np.random.default_rng(0)
  a = _data_matrix(rng, 6, 0.3)
  w1, w2 = _weights(rng, 6, 20, 2)
  return a, w1, w2


# ---------------------------------------------------------------------------
# Esser et al. 2023 eq. 7: the data matrix.
# ---------------------------------------------------------------------------


class TestContrastiveDataMatrix:

  def test_matches_sum_over_samples_and_loss(self):
    rng = np.random.default_rng(1)
    n, d, z = 7, 4, 2
    x, xp, xn = (rng.normal(size=(n, d)) for _ in range(3))
    a = np.asarray(dyn.contrastive_data_matrix(x, xp, xn))
    naive = np.zeros((d, d))
    for i in range(n):  # column vectors, as written in Esser et al. 2023
      u, dv = x[i][:, None], (xp[i] - xn[i])[:, None]
      naive -= (u @ dv.T + dv @ u.T) / (2 * n)
    np.testing.assert_allclose(a, naive, atol=1e-13)
    np.testing.assert_allclose(a, a.T, atol=0)
    # (1/n) Σ −f(x)ᵀ(f(x⁺) − f(x⁻)) with f(x) = W x equals Tr(W A Wᵀ).
    w = rng.normal(size=(z, d))
    loss = -np.mean(np.sum((x @ w.T) * ((xp - xn) @ w.T), axis=1))
    np.testing.assert_allclose(_loss(a, w), loss, rtol=1e-12)

  def test_non_contrastive_drops_negatives(self):
    rng = np.random.default_rng(2)
    x, xp = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    np.testing.assert_allclose(
        dyn.contrastive_data_matrix(x, xp),
        dyn.contrastive_data_matrix(x, xp, np.zeros_like(x)), atol=0)

  def test_expectation_is_minus_covariance(self):
    # x⁺ = x + noise, x⁻ independent: E[A] = −Cov(x) (negative definite);
    # without x⁻: E[A] = −E[xxᵀ] = −(Cov + μμᵀ). Monte Carlo, n = 400k,
    # tolerance 0.02 (entries are O(1), sampling error ~ 3/√n ≈ 0.005).
    rng = np.random.default_rng(3)
    n, mu = 400_000, np.array([1.0, -0.5, 0.3])
    cov = np.array([[1.0, 0.4, 0.0], [0.4, 0.8, -0.2], [0.0, -0.2, 0.5]])
    chol = np.linalg.cholesky(cov)
    x = mu + rng.normal(size=(n, 3)) @ chol.T
    xp = x + 0.3 * rng.normal(size=(n, 3))
    xn = mu + rng.normal(size=(n, 3)) @ chol.T
    a = np.asarray(dyn.contrastive_data_matrix(x, xp, xn))
    np.testing.assert_allclose(a, -cov, atol=0.02)
    assert np.linalg.eigvalsh(a).max() < 0
    a_nc = np.asarray(dyn.contrastive_data_matrix(x, xp))
    np.testing.assert_allclose(a_nc, -(cov + np.outer(mu, mu)), atol=0.02)


# ---------------------------------------------------------------------------
# Esser et al. 2023 eq. 9–10 and Theorem 2: the flows.
# ---------------------------------------------------------------------------


class TestFlows:

  def test_weight_flow_stays_on_stiefel(self):
    rng = np.random.default_rng(4)
    a = _data_matrix(rng, 6, 0.2)
    w1, w2 = _weights(rng, 6, 10, 2)
    ts = np.linspace(0.0, 3.0, 5)
    w1_t, w2_t = dyn.stiefel_weight_flow(a, w1, w2, ts)
    for k in range(len(ts)):  # invariant of the exact flow; solver tol 1e-8
      np.testing.assert_allclose(w1_t[k].T @ w1_t[k], np.eye(6), atol=1e-7)
      np.testing.assert_allclose(w2_t[k] @ w2_t[k].T, np.eye(2), atol=1e-7)
    assert _loss(a, w2_t[-1] @ w1_t[-1]) < _loss(a, w2 @ w1) - 0.1

  @pytest.mark.parametrize("h", [10, 30])
  def test_weight_flow_reduces_to_output_flow_for_any_width(self, h):
    # The same W(0) = W2 W1 realised at width 10, or padded with zeros to 30:
    # W2(t) W1(t) equals the eq. 9 solution, whatever h (tolerance 1e-7).
    rng = np.random.default_rng(5)
    d, z = 6, 2
    a = _data_matrix(rng, d, 0.2)
    w1, w2 = _weights(rng, d, 10, z)
    w1_h = np.vstack([w1, np.zeros((h - 10, d))])
    w2_h = np.hstack([w2, np.zeros((z, h - 10))])
    ts = np.linspace(0.0, 2.0, 5)
    w1_t, w2_t = dyn.stiefel_weight_flow(a, w1_h, w2_h, ts)
    w_t = dyn.stiefel_flow(a, w2 @ w1, ts)
    np.testing.assert_allclose(jnp.einsum("tzh,thd->tzd", w2_t, w1_t), w_t,
                               atol=1e-7)

  def test_velocity_is_product_rule_of_weight_velocities(self):
    rng = np.random.default_rng(6)
    a = _data_matrix(rng, 5, 0.0)
    w1, w2 = _weights(rng, 5, 9, 3)
    w = w2 @ w1
    v1 = -2 * (np.eye(9) - w1 @ w1.T) @ w2.T @ w @ a
    v2 = -2 * w @ a @ w1.T @ (np.eye(9) - w2.T @ w2)
    np.testing.assert_allclose(dyn.stiefel_flow_velocity(a, w),
                               v2 @ w1 + w2 @ v1, atol=1e-12)

  def test_eq10_for_one_output(self):
    # z = 1 in the eigenbasis: ζ̇ = −2[(2 − ‖ζ‖²)Λζ − (ζᵀΛζ)ζ] and
    # d‖ζ‖²/dt = −8(1 − ‖ζ‖²)ζᵀΛζ (exact identities, tolerance 1e-12).
    rng = np.random.default_rng(7)
    a = _data_matrix(rng, 4, 0.1)
    lam, v = np.linalg.eigh(a)
    zeta = 0.6 * rng.normal(size=4) / np.sqrt(4)
    w = (v @ zeta)[None]
    zeta_dot = np.asarray(dyn.stiefel_flow_velocity(a, w))[0] @ v
    q = zeta @ (lam * zeta)
    np.testing.assert_allclose(
        zeta_dot, -2 * ((2 - zeta @ zeta) * lam * zeta - q * zeta), atol=1e-12)
    np.testing.assert_allclose(2 * zeta @ zeta_dot,
                               -8 * (1 - zeta @ zeta) * q, atol=1e-12)

  def test_output_flow_from_stiefel_point_stays_on_stiefel(self):
    rng = np.random.default_rng(8)
    a = _data_matrix(rng, 6, 0.2)
    w0 = _orthonormal_columns(rng, 6, 2).T
    w_t = dyn.stiefel_flow(a, w0, np.linspace(0.0, 4.0, 5))
    np.testing.assert_allclose(jnp.einsum("tzd,tyd->tzy", w_t, w_t),
                               np.broadcast_to(np.eye(2), (5, 2, 2)), atol=1e-7)


# ---------------------------------------------------------------------------
# Esser et al. 2023 Theorem 3: fixed points.
# ---------------------------------------------------------------------------


class TestTheorem3:

  TS = np.linspace(0.0, 80.0, 5)

  def test_positive_definite_a_collapses_to_zero_when_h_gt_d(self):
    rng = np.random.default_rng(9)
    d = 6
    m = rng.normal(size=(d, d))
    a = m @ m.T / d + 0.5 * np.eye(d)  # Λ ≻ 0
    w1, w2 = _weights(rng, d, 10, 1)  # h = 10 > d: ‖W(0)‖ < 1
    w_t = dyn.stiefel_flow(a, w2 @ w1, self.TS)
    assert np.linalg.norm(w_t[-1]) < 1e-6
    # h = d: W1 is square orthogonal, so ‖W2 W1‖ = 1 and ζ cannot shrink.
    # (In the flow ‖ζ‖ = 1 is invariant but unstable, ε̇ = 8ζᵀΛζ·ε for
    # ε = 1 − ‖ζ‖², so round-off eventually leaves it; projected GD keeps it.)
    w1_sq, w2_sq = _weights(rng, d, d, 1)
    *_, path = dyn.projected_gradient_descent(a, w1_sq, w2_sq, lr=0.01,
                                              steps=2000)
    np.testing.assert_allclose(np.linalg.norm(path[-1]), 1.0, atol=1e-12)
    assert _loss(a, np.asarray(path[-1])) >= np.linalg.eigvalsh(a)[0] - 1e-12

  def test_one_output_converges_to_bottom_eigenvector(self):
    rng = np.random.default_rng(10)
    a = _data_matrix(rng, 6, 0.3)
    lam, v = np.linalg.eigh(a)
    assert lam[0] < 0
    w1, w2 = _weights(rng, 6, 11, 1)
    w_t = dyn.stiefel_flow(a, w2 @ w1, self.TS)
    # f → ±v_minᵀx: |⟨W, v_min⟩| → 1 (tolerance 1e-6).
    np.testing.assert_allclose(abs(float(w_t[-1, 0] @ v[:, 0])), 1.0, atol=1e-6)
    np.testing.assert_allclose(_loss(a, w_t[-1]), lam[0], atol=1e-6)

  def test_general_z_converges_to_bottom_subspace(self):
    rng = np.random.default_rng(11)
    a = _data_matrix(rng, 6, 0.3)
    lam, v = np.linalg.eigh(a)
    assert lam[1] < 0
    w1, w2 = _weights(rng, 6, 15, 2)
    w = np.asarray(dyn.stiefel_flow(a, w2 @ w1, self.TS))[-1]
    bottom = v[:, :2] @ v[:, :2].T
    np.testing.assert_allclose(w.T @ w, bottom, atol=1e-6)
    np.testing.assert_allclose(w @ w.T, np.eye(2), atol=1e-6)
    np.testing.assert_allclose(_loss(a, w), lam[0] + lam[1], atol=1e-6)


# ---------------------------------------------------------------------------
# Esser et al. 2023 eq. 11 (projected GD) and eq. 12 (Euler) against the flow.
# ---------------------------------------------------------------------------


def _max_dev_from_flow(a, w1, w2, lr, t_end, method, **kw):
  steps = int(round(t_end / lr))
  ts = lr * np.arange(0, steps + 1, steps // 4)
  w_ode = np.asarray(dyn.stiefel_flow(a, w2 @ w1, ts))
  if method == "euler":
    path = dyn.stiefel_flow_euler(a, w2 @ w1, lr=lr, steps=steps)
  else:
    path = dyn.projected_gradient_descent(a, w1, w2, lr=lr, steps=steps,
                                          **kw)[2]
  return float(np.max(np.abs(np.asarray(path)[::steps // 4] - w_ode)))


class TestDiscreteVsFlow:

  @pytest.mark.parametrize("method,kw", [
      ("pgd", dict(retraction="polar")),
      ("pgd", dict(retraction="qr")),
      ("euler", {}),
  ])
  def test_tracks_flow_with_first_order_error(self, method, kw):
    # Deviation from the eq. 9 solution on t ∈ [0, 1] is O(lr): below 2e-3
    # at lr = 1e-3, and halving lr halves it (ratio in [1.7, 2.3]).
    a, w1, w2 = _pitfall_problem()
    e1 = _max_dev_from_flow(a, w1, w2, 2e-3, 1.0, method, **kw)
    e2 = _max_dev_from_flow(a, w1, w2, 1e-3, 1.0, method, **kw)
    assert e2 < 2e-3
    assert 1.7 < e1 / e2 < 2.3

  def test_raw_polar_step_converges_but_does_not_track_flow(self):
    # Literal eq. 11 with the polar projection: an O(1) deviation that does
    # not shrink with lr (> 0.03 at both lr), yet the same optimum (1e-8).
    a, w1, w2 = _pitfall_problem()
    for lr in (2e-3, 1e-3):
      dev = _max_dev_from_flow(a, w1, w2, lr, 1.0, "pgd", retraction="polar",
                               tangent=False)
      assert dev > 0.03
    lam = np.linalg.eigvalsh(a)
    w = dyn.projected_gradient_descent(a, w1, w2, lr=0.01, steps=5000,
                                       tangent=False)[2][-1]
    np.testing.assert_allclose(_loss(a, np.asarray(w)), lam[:2].sum(),
                               atol=1e-8)

  def test_raw_qr_step_stalls_above_optimum(self):
    # Pitfall: QR of the raw Euclidean step stalls (here at −2.143 vs the
    # optimum −2.287), at the same loss after 5000 and 10000 steps, while QR or
    # polar of the tangent step reach the optimum (1e-8).
    a, w1, w2 = _pitfall_problem()
    opt = np.linalg.eigvalsh(a)[:2].sum()

    def final_loss(steps, **kw):
      w = dyn.projected_gradient_descent(a, w1, w2, lr=0.01, steps=steps, **kw)
      return _loss(a, np.asarray(w[2][-1]))

    path = dyn.projected_gradient_descent(a, w1, w2, lr=0.01, steps=10000,
                                          retraction="qr", tangent=False)[2]
    stalled = _loss(a, np.asarray(path[5000]))
    assert stalled > opt + 0.1
    np.testing.assert_allclose(_loss(a, np.asarray(path[-1])), stalled,
                               atol=1e-6)
    for retraction in ("qr", "polar"):
      np.testing.assert_allclose(final_loss(5000, retraction=retraction), opt,
                                 atol=1e-8)

  @pytest.mark.parametrize("retraction", ["polar", "qr"])
  @pytest.mark.parametrize("tangent", [True, False])
  def test_weights_stay_orthonormal(self, retraction, tangent):
    a, w1, w2 = _pitfall_problem()
    w1_k, w2_k, path = dyn.projected_gradient_descent(
        a, w1, w2, lr=0.05, steps=50, retraction=retraction, tangent=tangent)
    assert path.shape == (51, 2, 6)
    np.testing.assert_allclose(w1_k.T @ w1_k, np.eye(6), atol=1e-12)
    np.testing.assert_allclose(w2_k @ w2_k.T, np.eye(2), atol=1e-12)
    np.testing.assert_allclose(path[-1], w2_k @ w1_k, atol=1e-12)
    # path[0] is the product of the initial weights, by XLA's matmul here
    # and NumPy's BLAS there: each entry a float64 dot of length h = 20 whose
    # summation order and FMA use differ between libraries and CPUs. With
    # unit rows of w2 and unit columns of w1, Σ|w2_ik·w1_kj| ≤ 1
    # (Cauchy–Schwarz), so each result is within γ_20 ≈ 20·2⁻⁵³ ≈ 2.2e-15 of
    # the exact value and the two within 2·γ_20 = 20·eps ≈ 4.4e-15.
    np.testing.assert_allclose(path[0], w2 @ w1, rtol=0,
                               atol=20 * np.finfo(np.float64).eps)


# ---------------------------------------------------------------------------
# Esser et al. 2023 input validation.
# ---------------------------------------------------------------------------


class TestValidation003:

  def setup_method(self):
    rng = np.random.default_rng(12)
    self.a = _data_matrix(rng, 4, 0.0)
    self.w1, self.w2 = _weights(rng, 4, 6, 2)
    self.ts = np.linspace(0.0, 1.0, 3)

  @pytest.mark.parametrize("call,match", [
      (lambda s: dyn.contrastive_data_matrix(np.ones(3), np.ones(3)), "x must"),
      (lambda s: dyn.contrastive_data_matrix(np.ones((3, 2)), np.ones((2, 2))),
       "x_pos"),
      (lambda s: dyn.contrastive_data_matrix(np.ones((3, 2)), np.ones((3, 2)),
                                             np.ones((3, 3))), "x_neg"),
      (lambda s: dyn.stiefel_flow(s.a[:, :3], s.w2 @ s.w1, s.ts), "square"),
      (lambda s: dyn.stiefel_flow(s.a + np.triu(np.ones((4, 4)), 1),
                                  s.w2 @ s.w1, s.ts), "symmetric"),
      (lambda s: dyn.stiefel_flow(s.a, np.ones((2, 3)), s.ts), "w0 must"),
      (lambda s: dyn.stiefel_flow(s.a, 2.0 * s.w2 @ s.w1, s.ts), "spectral"),
      (lambda s: dyn.stiefel_flow(s.a, s.w2 @ s.w1, [0.0, 1.0, 1.0]),
       "strictly increasing"),
      (lambda s: dyn.stiefel_flow(s.a, s.w2 @ s.w1, [1.0, 0.5]),
       "strictly increasing"),
      (lambda s: dyn.stiefel_flow(s.a, s.w2 @ s.w1, [0.0]), "ts must"),
      (lambda s: dyn.stiefel_flow(s.a, s.w2 @ s.w1, [0.0, np.nan]), "finite"),
      (lambda s: dyn.stiefel_weight_flow(s.a, 1.1 * s.w1, s.w2, s.ts),
       "w1 must have orthonormal columns"),
      (lambda s: dyn.stiefel_weight_flow(s.a, s.w1, s.w2 + 0.1, s.ts),
       "w2 must have orthonormal rows"),
      (lambda s: dyn.projected_gradient_descent(s.a, s.w1, s.w2[:, :5], lr=0.1,
                                                steps=1), "w2 must be"),
      (lambda s: dyn.projected_gradient_descent(s.a, s.w1.T, s.w2, lr=0.1,
                                                steps=1), "w1 must be"),
      (lambda s: dyn.projected_gradient_descent(s.a, s.w1, s.w2, lr=0.1,
                                                steps=1, retraction="cayley"),
       "retraction"),
      (lambda s: dyn.projected_gradient_descent(s.a, s.w1, s.w2, lr=-0.1,
                                                steps=1), "lr"),
      (lambda s: dyn.stiefel_flow_euler(s.a, s.w2 @ s.w1, lr=0.1, steps=-1),
       "steps"),
  ])
  def test_bad_input_raises(self, call, match):
    with pytest.raises(ValueError, match=match):
      call(self)


# ---------------------------------------------------------------------------
# Skean et al. 2023: the linear FroSSL variant.
# ---------------------------------------------------------------------------


def _aligned(rng, n=10, m=6, d=3, spread=(0.6, 1.6)):
  """X_v = P D_v^{1/2} Vᵀ, W_v(0) = U S_v(0) V̂ with shared P, V and U."""
  p = _orthonormal_columns(rng, n, m)
  v = _orthonormal_columns(rng, m, m)
  d1 = np.sort(rng.uniform(*spread, size=m))[::-1]
  d2 = np.sort(rng.uniform(*spread, size=m))[::-1]
  x1, x2 = p * np.sqrt(d1) @ v.T, p * np.sqrt(d2) @ v.T
  u = _orthonormal_columns(rng, d, d)
  s1_0, s2_0 = rng.uniform(0.05, 0.3, size=d), rng.uniform(0.05, 0.3, size=d)
  v_hat = v[:, :d].T
  w1, w2 = u * s1_0 @ v_hat, u * s2_0 @ v_hat
  return dict(x1=x1, x2=x2, w1=w1, w2=w2, u=u, v_hat=v_hat, lam=d1[:d],
              gam=d2[:d], s1_0=s1_0, s2_0=s2_0)


def _gd_scan(x1, x2, w1, w2, lr, steps, every):
  grad = jax.grad(dyn.frossl_linear_loss, argnums=(0, 1))

  @jax.jit
  def run(w1, w2):
    def body(c, _):
      g1, g2 = grad(*c, x1, x2)
      return (c[0] - lr * g1, c[1] - lr * g2), c
    _, path = jax.lax.scan(body, (w1, w2), None, length=steps + 1)
    return path
  p1, p2 = run(jnp.asarray(w1), jnp.asarray(w2))
  return np.asarray(p1)[::every], np.asarray(p2)[::every]


class TestFroSSLLinear:

  def test_gradient_matches_corrected_formula(self):
    rng = np.random.default_rng(13)
    x1, x2 = rng.normal(size=(9, 5)), rng.normal(size=(9, 5))
    w1, w2 = rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    g1, g2 = jax.grad(dyn.frossl_linear_loss, argnums=(0, 1))(w1, w2, x1, x2)
    gm1, gm2 = x1.T @ x1, x2.T @ x2
    np.testing.assert_allclose(
        g1, -2 * (w1 @ gm1 + w2 @ x2.T @ x1 - 2 * w1 @ gm1 @ w1.T @ w1 @ gm1),
        rtol=1e-11)
    np.testing.assert_allclose(
        g2, -2 * (w2 @ gm2 + w1 @ x1.T @ x2 - 2 * w2 @ gm2 @ w2.T @ w2 @ gm2),
        rtol=1e-11)
    # central differences along random directions (relative error 1e-6)
    loss = jax.jit(lambda a, b: frossl_dynamics._frossl_loss(a, b, x1, x2))
    for _ in range(3):
      e1, e2 = rng.normal(size=w1.shape), rng.normal(size=w2.shape)
      h = 1e-6
      fd = (loss(w1 + h * e1, w2 + h * e2) - loss(w1 - h * e1, w2 - h * e2)) / (2 * h)
      np.testing.assert_allclose(fd, np.sum(g1 * e1) + np.sum(g2 * e2),
                                 rtol=1e-6)

  def test_gd_keeps_aligned_form_and_matches_corrected_ode(self):
    # GD at lr = 1e-3 up to t = 1.5: W_v = U S_v V̂ exactly (1e-12) and the
    # singular values follow the coupled ODE; the error is O(lr)
    # (≤ 2e-3 relative here, and it halves with lr).
    rng = np.random.default_rng(14)
    c = _aligned(rng)
    errs = []
    for lr in (2e-3, 1e-3):
      steps = int(round(1.5 / lr))
      p1, p2 = _gd_scan(c["x1"], c["x2"], c["w1"], c["w2"], lr, steps,
                        steps // 4)
      ts = lr * np.arange(0, steps + 1, steps // 4)
      s1, s2 = dyn.frossl_linear_dynamics(ts, c["lam"], c["gam"], c["s1_0"],
                                          c["s2_0"])
      for k in range(len(ts)):
        for w, s in ((p1[k], s1[k]), (p2[k], s2[k])):
          core = c["u"].T @ w @ c["v_hat"].T  # = S_v(t), diagonal
          np.testing.assert_allclose(core - np.diag(np.diag(core)), 0,
                                     atol=1e-12)
          np.testing.assert_allclose(c["u"] @ core @ c["v_hat"], w, atol=1e-12)
      e = max(np.max(np.abs(np.diagonal(c["u"].T @ p1 @ c["v_hat"].T, 0, 1, 2)
                            - s1) / s1),
              np.max(np.abs(np.diagonal(c["u"].T @ p2 @ c["v_hat"].T, 0, 1, 2)
                            - s2) / s2))
      errs.append(e)
    assert errs[1] < 2e-3
    assert 1.7 < errs[0] / errs[1] < 2.3

  def test_ode_fixed_point_is_zero_loss(self):
    rng = np.random.default_rng(15)
    c = _aligned(rng)
    s1, s2 = dyn.frossl_linear_dynamics(np.linspace(0.0, 30.0, 5), c["lam"],
                                        c["gam"], c["s1_0"], c["s2_0"])
    np.testing.assert_allclose(s1[-1] ** 2, 1 / c["lam"], rtol=1e-9)
    np.testing.assert_allclose(s2[-1] ** 2, 1 / c["gam"], rtol=1e-9)
    w1 = c["u"] * np.asarray(s1[-1]) @ c["v_hat"]
    w2 = c["u"] * np.asarray(s2[-1]) @ c["v_hat"]
    assert float(dyn.frossl_linear_loss(w1, w2, c["x1"], c["x2"])) < 1e-15
    z1, z2 = c["x1"] @ w1.T, c["x2"] @ w2.T
    np.testing.assert_allclose(z1, z2, atol=1e-9)
    np.testing.assert_allclose(z1.T @ z1, np.eye(3), atol=1e-9)

  def test_symmetric_closed_form_solves_ode_and_matches_gd(self):
    lam, s0 = np.array([0.5, 1.0, 2.0]), np.array([0.1, 0.8, 1.2])
    ts = np.linspace(0.0, 2.0, 5)
    s1, s2 = dyn.frossl_linear_dynamics(ts, lam, lam, s0, s0)
    closed = dyn.frossl_symmetric_singular_values(ts, lam, s0)
    assert closed.shape == (5, 3)
    np.testing.assert_allclose(s1, closed, rtol=1e-9)  # solver tol 1e-10
    np.testing.assert_allclose(s2, closed, rtol=1e-9)
    # GD with X1 = X2, W1(0) = W2(0): relative error O(lr) < 3e-3 at 1e-3.
    rng = np.random.default_rng(16)
    p = _orthonormal_columns(rng, 8, 5)
    v = _orthonormal_columns(rng, 5, 5)
    x = p * np.sqrt(np.r_[lam[::-1], 0.3, 0.2]) @ v.T
    # eigen-order: columns of v ordered like the diagonal used above
    v_hat = v[:, :3].T
    u = _orthonormal_columns(rng, 3, 3)
    w0 = u * s0[::-1] @ v_hat
    lr, steps = 1e-3, 2000
    p1, _ = _gd_scan(x, x, w0, w0, lr, steps, steps // 4)
    s_gd = np.diagonal(u.T @ p1 @ v_hat.T, 0, 1, 2)
    s_cf = dyn.frossl_symmetric_singular_values(
        lr * np.arange(0, steps + 1, steps // 4), lam[::-1], s0[::-1])
    np.testing.assert_allclose(s_gd, s_cf, rtol=3e-3)


def _paper_eq34(t, lam, gam, s0):
  """The printed eq. 34 (wrong); it lives in experiments/frossl_dynamics.py."""
  return import_experiment("frossl_dynamics").paper_eq34(t, lam, gam, s0)


class TestFroSSLPaperEq34:

  def test_eq34_solves_eq32_exactly(self):
    lam, gam, s0 = np.array([0.7, 1.3]), np.array([0.9, 1.1]), np.array(
        [0.2, 0.5])
    f = lambda t: _paper_eq34(t, lam, gam, s0)
    np.testing.assert_allclose(f(0.0), s0, rtol=1e-14)
    dfdt = jax.jit(jax.jacfwd(f))
    for t in (0.0, 0.3, 1.1):
      s = f(t)
      rhs = 2 * s * (lam - 2 * np.sqrt(lam * gam) - 2 * s**2 * lam**2)
      np.testing.assert_allclose(dfdt(t), rhs, rtol=1e-10)

  def test_eq34_predicts_collapse_but_gd_does_not(self):
    # λ = γ: eq. 34 → 0 while GD / the corrected ODE → 1/√λ. At t = 3 eq. 34
    # is below 2 % of the limit (error ≈ 100 %), the corrected ODE within
    # 1e-3 of it and the closed form at t = 20 within 1e-8.
    lam, s0 = np.array([0.5, 1.0, 2.0]), np.array([0.3, 0.3, 0.3])
    ts = np.linspace(0.0, 3.0, 5)
    paper = np.asarray(_paper_eq34(ts, lam, lam, s0))[-1]
    s1, _ = dyn.frossl_linear_dynamics(ts, lam, lam, s0, s0)
    target = 1 / np.sqrt(lam)
    assert np.all(paper < 0.02 * target)
    np.testing.assert_allclose(s1[-1], target, rtol=1e-3)
    assert np.all(np.abs(dyn.frossl_symmetric_singular_values(
        20.0, lam, s0) - target) < 1e-8 * target)

  def test_eq34_misses_gd_in_aligned_setting(self):
    rng = np.random.default_rng(17)
    c = _aligned(rng)
    lr, steps = 1e-3, 1500
    p1, _ = _gd_scan(c["x1"], c["x2"], c["w1"], c["w2"], lr, steps, steps)
    s_gd = np.diagonal(c["u"].T @ p1[-1] @ c["v_hat"].T)
    paper = np.asarray(_paper_eq34(lr * steps, c["lam"], c["gam"],
                                             c["s1_0"]))
    assert np.max(np.abs(paper - s_gd) / s_gd) > 0.5


class TestFroSSLEq6Normalisation:
  """Skean et al. 2023 eq. (6) itself: unbounded below without the App. A
  normalisation (a local reference; the loss lives elsewhere)."""

  @staticmethod
  def eq6(z1, z2):
    n = z1.shape[0]
    return (jnp.log(jnp.sum((z1.T @ z1) ** 2)) + jnp.log(jnp.sum((z2.T @ z2) ** 2))
            + jnp.sum((z1 - z2) ** 2) / n)

  @staticmethod
  def normalise(z):
    z = z - z.mean(0)
    return jnp.sqrt(z.shape[1]) * z / jnp.linalg.norm(z)

  def test_unbounded_below_without_normalisation(self):
    rng = np.random.default_rng(18)
    z1 = rng.normal(size=(16, 4))
    z2 = z1 + 0.1 * rng.normal(size=(16, 4))
    values = [float(self.eq6(e * z1, e * z2)) for e in (1.0, 1e-2, 1e-4, 1e-8)]
    assert all(b < a - 10 for a, b in zip(values, values[1:]))
    # normalised (App. A), the loss is scale-invariant (1e-12)
    n = [float(self.eq6(self.normalise(e * z1), self.normalise(e * z2)))
         for e in (1.0, 1e-4, 1e3)]
    np.testing.assert_allclose(n, n[0], rtol=1e-12)

  def test_appendix_pseudocode_is_half_logs_plus_invariance_over_d(self):
    rng = np.random.default_rng(19)
    za = self.normalise(rng.normal(size=(16, 4)))
    zb = self.normalise(rng.normal(size=(16, 4)))
    d = za.shape[1]
    pseudo = (jnp.mean((za - zb) ** 2)  # MSELoss: mean over N·d entries
              + jnp.log(jnp.linalg.norm(za.T @ za))
              + jnp.log(jnp.linalg.norm(zb.T @ zb)))
    logs = jnp.log(jnp.sum((za.T @ za) ** 2)) + jnp.log(jnp.sum((zb.T @ zb) ** 2))
    inv = jnp.sum((za - zb) ** 2) / za.shape[0]
    np.testing.assert_allclose(pseudo, 0.5 * logs + inv / d, rtol=1e-13)
    np.testing.assert_allclose(self.eq6(za, zb), logs + inv, rtol=1e-13)


class TestValidation004:

  @pytest.mark.parametrize("call,match", [
      (lambda: dyn.frossl_linear_dynamics([0.0, 1.0], -1.0, 1.0, 0.1, 0.1),
       "lam must be > 0"),
      (lambda: dyn.frossl_linear_dynamics([0.0, 1.0], 1.0, 1.0, 0.0, 0.1),
       "s1_0 must be > 0"),
      (lambda: dyn.frossl_linear_dynamics([0.0, 1.0], np.ones(3), np.ones(2),
                                          0.1, 0.1), "broadcast"),
      (lambda: dyn.frossl_linear_dynamics([1.0, 0.0], 1.0, 1.0, 0.1, 0.1),
       "strictly increasing"),
      (lambda: dyn.frossl_symmetric_singular_values(0.0, 1.0, -0.1),
       "s0 must be > 0"),
      (lambda: dyn.frossl_symmetric_singular_values(np.zeros((2, 2)), 1.0, 0.1),
       "t must be"),
      (lambda: _paper_eq34(0.0, 1.0, 0.0, 0.1), "gam must be > 0"),
      (lambda: dyn.frossl_linear_loss(np.ones((2, 3)), np.ones((2, 4)),
                                      np.ones((5, 3)), np.ones((5, 3))), "w2"),
      (lambda: dyn.frossl_linear_loss(np.ones((2, 3)), np.ones((2, 3)),
                                      np.ones((5, 3)), np.ones((4, 3))), "x1"),
  ])
  def test_bad_input_raises(self, call, match):
    with pytest.raises(ValueError, match=match):
      call()
