"""Tests for ssljax.losses.frossl: FroSSL as in the authors' released code.

Identities are checked in float64 with rtol 1e-12 (1e-10 for gradients);
finite differences use jax.test_util.check_grads (float64 defaults).
"""

import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from ssljax import losses

pytestmark = pytest.mark.usefixtures("fast_compiles")

frossl_module = importlib.import_module("ssljax.losses.frossl")

TERMS = ("regularization", "invariance", "loss")


_core = frossl_module._frossl_terms_core  # pylint: disable=protected-access


@functools.partial(jax.jit, static_argnames=("use_gram",))
def _core_loss(z, w, use_gram):
  """The loss with the C = u uᵀ (use_gram) or uᵀu branch forced."""
  return _core(z, w, use_gram=use_gram)["loss"]


@functools.partial(jax.jit, static_argnames=("use_gram",))
def _core_vg(z, w, use_gram):
  return jax.value_and_grad(lambda z: _core(z, w, use_gram=use_gram)["loss"])(z)


# ---------------------------------------------------------------------------
# Plain numpy references, written from the definitions.
# ---------------------------------------------------------------------------


def _numpy_frossl(views, invariance_weight=1.0):
  """Loop over views, as the released (list-of-views) code does."""
  v = len(views)
  n, k = views[0].shape
  us = [z / np.linalg.norm(z, axis=0, keepdims=True) for z in views]
  mean = sum(us) / v
  reg = inv = 0.0
  for u in us:
    c = u.T @ u if n > k else u @ u.T
    reg += 2 * np.log(np.linalg.norm(c / np.trace(c), "fro"))
    inv += v * k * np.mean((u - mean)**2)
  return {"regularization": reg, "invariance": inv,
          "loss": reg + invariance_weight * inv}


def _numpy_eq6(z1, z2):
  """Skean et al. 2023 (arXiv 2310.02903) eq. (6):

  log‖Z1ᵀZ1‖_F² + log‖Z2ᵀZ2‖_F² + (1/N)Σ_i‖z1_i − z2_i‖².
  """
  n = z1.shape[0]
  return (np.log(np.linalg.norm(z1.T @ z1)**2)
          + np.log(np.linalg.norm(z2.T @ z2)**2)
          + np.sum((z1 - z2)**2) / n)


def _views(rng, v, n, k):
  base = rng.normal(size=(n, k))
  return [base + 0.5 * rng.normal(size=(n, k)) + rng.normal(size=k)
          for _ in range(v)]


def _close(a, b, rtol=1e-12, atol=1e-13):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------
# Values.
# ---------------------------------------------------------------------------


class TestFrossl:

  @pytest.mark.parametrize("v", [2, 3])
  def test_hand_computed_minimum(self, v):
    # Identical views with orthogonal columns: C = I_K, loss = −V·log K.
    z = jnp.eye(4, 2) * jnp.array([3., 5.])
    t = losses.frossl_terms([z] * v)
    assert float(t["regularization"]) == pytest.approx(-v * np.log(2), rel=1e-6)
    assert float(t["invariance"]) == pytest.approx(0.0, abs=1e-6)
    assert float(losses.frossl(jnp.stack([z] * v))) == pytest.approx(
        -v * np.log(2), rel=1e-6)

  @pytest.mark.parametrize("n,k", [(8, 3), (3, 8)])  # both C branches
  def test_against_numpy(self, x64, n, k):
    rng = np.random.default_rng(n)
    views = _views(rng, 3, n, k)
    for w in (1.0, 0.7):
      got = losses.frossl_terms(views, invariance_weight=w)
      want = _numpy_frossl(views, invariance_weight=w)
      for key in TERMS:
        _close(got[key], want[key])

  @pytest.mark.parametrize("n,k", [(8, 3), (3, 8)])
  def test_both_branches_same_value_and_grad(self, x64, n, k):
    rng = np.random.default_rng(10 + n)
    z = jnp.stack(_views(rng, 3, n, k))
    u = z / jnp.linalg.norm(z, axis=1, keepdims=True)
    for u_v in u:
      # ‖uuᵀ‖_F = ‖uᵀu‖_F and tr(uuᵀ) = tr(uᵀu) = K.
      _close(jnp.linalg.norm(u_v @ u_v.T), jnp.linalg.norm(u_v.T @ u_v))
      _close(jnp.trace(u_v @ u_v.T), k)
      _close(jnp.trace(u_v.T @ u_v), k)
    gram_value, gram_grad = _core_vg(z, 1.0, use_gram=True)
    cov_value, cov_grad = _core_vg(z, 1.0, use_gram=False)
    _close(gram_value, cov_value)
    _close(gram_grad, cov_grad, rtol=1e-10)

  def test_two_views_is_eq6_on_normalised_views(self, x64):
    # loss = eq. (6)(u1, u2) − 4·log K for V = 2, invariance_weight = 1.
    rng = np.random.default_rng(1)
    z1, z2 = _views(rng, 2, 8, 3)
    u1 = z1 / np.linalg.norm(z1, axis=0)
    u2 = z2 / np.linalg.norm(z2, axis=0)
    _close(losses.frossl([z1, z2]), _numpy_eq6(u1, u2) - 4 * np.log(3))

  def test_eq6_alone_unbounded_normalised_loss_not(self, x64):
    rng = np.random.default_rng(2)
    z1, z2 = _views(rng, 2, 8, 3)
    eq6 = [_numpy_eq6(s * z1, s * z2) for s in (1.0, 1e-3, 1e-6)]
    assert eq6[0] > eq6[1] > eq6[2] and eq6[2] < eq6[0] - 50  # → −∞ as Z → 0
    base = float(losses.frossl([z1, z2]))
    _close(losses.frossl([1e-6 * z1, 1e-6 * z2]), base, rtol=1e-10)

  def test_invariant_to_positive_column_scaling(self, x64):
    rng = np.random.default_rng(3)
    views = _views(rng, 3, 8, 3)
    scaled = [z * rng.uniform(0.01, 100.0, size=3) for z in views]  # per view
    got = losses.frossl_terms(scaled)
    want = losses.frossl_terms(views)
    for key in TERMS:
      _close(got[key], want[key], rtol=1e-10)

  def test_lower_bound(self, x64):
    # ‖C‖_F² >= tr(C)²/rank(C): loss >= −V·log min(N, K) for any views.
    rng = np.random.default_rng(4)
    for n, k in ((8, 3), (3, 8)):
      for _ in range(3):
        views = _views(rng, 3, n, k)
        assert float(losses.frossl(views)) >= -3 * np.log(min(n, k)) - 1e-12

  def test_list_and_array_inputs_agree(self, x64):
    rng = np.random.default_rng(5)
    views = _views(rng, 3, 8, 3)
    _close(losses.frossl(tuple(views)), losses.frossl(np.stack(views)))

  def test_check_grads(self, x64):
    # Also shows the stop_gradient on tr(C_v) is exact: tr(C_v) = K always.
    rng = np.random.default_rng(6)
    for n, k in ((8, 3), (3, 8)):
      z = jnp.asarray(np.stack(_views(rng, 3, n, k)))
      check_grads(lambda z: _core_loss(z, 0.7, use_gram=n <= k), (z,), order=1,
                  modes=["rev"])

  def test_zero_column_is_finite(self):
    z = jnp.array([[1., 0.], [2., 0.], [0., 0.]])
    value, grad = jax.value_and_grad(losses.frossl)(jnp.stack([z, z + 1.0]))
    assert np.isfinite(float(value)) and np.all(np.isfinite(grad))

  def test_jit_matches_eager(self):
    rng = np.random.default_rng(7)
    z = jnp.asarray(np.stack(_views(rng, 2, 8, 3)), jnp.float32)
    eager = losses.frossl_terms(z, invariance_weight=2.0)
    jitted = jax.jit(functools.partial(losses.frossl_terms,
                                       invariance_weight=2.0))(z)
    for key in TERMS:
      np.testing.assert_allclose(jitted[key], eager[key], rtol=1e-5, atol=1e-6)

  @pytest.mark.parametrize("dtype", ["float32", "float64"])
  def test_dtypes(self, dtype):
    rng = np.random.default_rng(8)
    views = _views(rng, 2, 8, 3)
    with jax.enable_x64(dtype == "float64"):
      t = losses.frossl_terms([z.astype(dtype) for z in views])
      for key in TERMS:
        assert t[key].dtype == dtype and t[key].shape == ()
    got = losses.frossl([z.astype("float32") for z in views])
    np.testing.assert_allclose(float(got), _numpy_frossl(views)["loss"],
                               rtol=1e-5)


class TestFrosslErrors:

  def test_fewer_than_two_views(self):
    with pytest.raises(ValueError, match=r"views must hold V >= 2 views, got 1"):
      losses.frossl([jnp.ones((4, 2))])
    with pytest.raises(ValueError, match=r"V >= 2 views, got shape \(1, 4, 2\)"):
      losses.frossl(jnp.ones((1, 4, 2)))
    with pytest.raises(ValueError, match="got 0"):
      losses.frossl([])

  def test_shape_mismatch(self):
    with pytest.raises(ValueError, match=r"views\[0\] and views\[2\] must have the"
                       r" same \(N, K\) shape, got \(4, 2\) and \(4, 3\)"):
      losses.frossl([jnp.ones((4, 2)), jnp.ones((4, 2)), jnp.ones((4, 3))])

  def test_rank(self):
    with pytest.raises(ValueError, match=r"views\[1\] must be a rank-2"):
      losses.frossl([jnp.ones((4, 2)), jnp.ones(4)])
    with pytest.raises(ValueError, match=r"\(V, N, K\) array.*\(4, 2\)"):
      losses.frossl(jnp.ones((4, 2)))

  def test_nan(self):
    z = np.ones((2, 4, 2))
    z[1, 0, 0] = np.nan
    with pytest.raises(ValueError, match="views must be finite"):
      losses.frossl(z)
    with pytest.raises(ValueError, match=r"views\[1\] must be finite"):
      losses.frossl(list(z))

