"""Tests for ssljax.losses.wmse: Cholesky whitening and the two-view W-MSE.

Identities are checked in float64 with rtol 1e-12 (1e-10 after a change of
basis, atol 1e-12 for whitened covariances); finite differences use
jax.test_util.check_grads (float64 defaults).
"""

import functools
import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import jax.extend.core as jax_core
from jax.test_util import check_grads

from ssljax import losses

pytestmark = pytest.mark.usefixtures("fast_compiles")



# ---------------------------------------------------------------------------
# Plain numpy references, written from the definitions.
# ---------------------------------------------------------------------------


def _numpy_whiten(z, eps=0.0):
  zc = z - z.mean(axis=0)
  cov = (1 - eps) * np.cov(z, rowvar=False, ddof=1) + eps * np.eye(z.shape[1])
  l = np.linalg.cholesky(cov)
  return zc @ np.linalg.inv(l).T


def _numpy_wmse(z1, z2, eps=0.0, m=None):
  """Whiten each sub-batch of m rows of each view; 2 − 2·mean cosine."""
  n = z1.shape[0]
  m = n if m is None else m
  total = 0.0
  for start in range(0, n, m):
    w1 = _numpy_whiten(z1[start:start + m], eps)
    w2 = _numpy_whiten(z2[start:start + m], eps)
    cos = np.sum(w1 * w2, axis=1) / (np.linalg.norm(w1, axis=1)
                                     * np.linalg.norm(w2, axis=1))
    total += np.sum(2 - 2 * cos)
  return total / n


def _pair(rng, n, k, noise=0.5):
  z1 = rng.normal(size=(n, k)) * np.linspace(0.5, 3.0, k) + rng.normal(size=k)
  return z1, z1 + noise * rng.normal(size=(n, k))


def _close(a, b, rtol=1e-12, atol=1e-13):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


@functools.partial(jax.jit, static_argnames=("whitening_size",))
def _loss(z1, z2, eps, whitening_size=None):
  return losses.wmse_two_view(z1, z2, eps=eps, whitening_size=whitening_size)


# ---------------------------------------------------------------------------
# Whitening.
# ---------------------------------------------------------------------------


class TestWhiten:

  @pytest.mark.parametrize("n,k", [(12, 3), (4, 3)])
  def test_identity_covariance_and_zero_mean(self, x64, n, k):
    rng = np.random.default_rng(n)
    z, _ = _pair(rng, n, k)
    w = np.asarray(losses.wmse_whiten(z))
    _close(np.cov(w, rowvar=False, ddof=1), np.eye(k), atol=1e-12)
    _close(w.mean(axis=0), np.zeros(k), atol=1e-12)

  def test_against_numpy_and_lower_triangular_map(self, x64):
    rng = np.random.default_rng(1)
    z, _ = _pair(rng, 12, 3)
    for eps in (0.0, 0.3):
      _close(losses.wmse_whiten(z, eps=eps), _numpy_whiten(z, eps), rtol=1e-11)
    # w = (z − m)L⁻ᵀ with L lower: w_:0 is the centred z_:0 over its std.
    w = np.asarray(losses.wmse_whiten(z))
    zc0 = z[:, 0] - z[:, 0].mean()
    _close(w[:, 0], zc0 / zc0.std(ddof=1))

  def test_shrinkage_covariance(self, x64):
    # With eps, cov(w) = L⁻¹ cov(z) L⁻ᵀ where LLᵀ = (1 − eps)cov + eps·I.
    rng = np.random.default_rng(2)
    z, _ = _pair(rng, 12, 3)
    eps = 0.2
    c = np.cov(z, rowvar=False)
    l = np.linalg.cholesky((1 - eps) * c + eps * np.eye(3))
    li = np.linalg.inv(l)
    _close(np.cov(np.asarray(losses.wmse_whiten(z, eps=eps)), rowvar=False),
           li @ c @ li.T, atol=1e-12)


# ---------------------------------------------------------------------------
# The two-view loss.
# ---------------------------------------------------------------------------


class TestWmseTwoView:

  def test_identical_views_give_zero(self, x64):
    rng = np.random.default_rng(3)
    z, _ = _pair(rng, 12, 3)
    t = losses.wmse_two_view_terms(z, z)
    _close(t["loss"], 0.0, atol=1e-12)
    _close(t["cosine"], 1.0)

  @pytest.mark.parametrize("eps,m", [(0.0, None), (0.1, None), (0.0, 6)])
  def test_against_numpy(self, x64, eps, m):
    rng = np.random.default_rng(4)
    z1, z2 = _pair(rng, 12, 3)
    _close(losses.wmse_two_view(z1, z2, eps=eps, whitening_size=m),
           _numpy_wmse(z1, z2, eps, m), rtol=1e-11)

  def test_invariant_under_upper_triangular_map(self, x64):
    rng = np.random.default_rng(5)
    z1, z2 = _pair(rng, 12, 3)
    a = np.triu(rng.normal(size=(3, 3)))
    a[np.diag_indices(3)] = np.array([2.0, -0.5, 3.0])  # signs may differ
    shift = rng.normal(size=3) * 10
    base = float(_loss(z1, z2, 0.0))
    _close(_loss(z1 @ a + shift, z2 @ a - shift, 0.0), base, rtol=1e-10)
    # Whitened rows change only by the shared column signs of diag(A).
    _close(losses.wmse_whiten(z1 @ a),
           np.asarray(losses.wmse_whiten(z1)) * np.sign(np.diag(a)), rtol=1e-10,
           atol=1e-12)

  def test_general_map_acts_by_a_view_dependent_rotation(self, x64):
    # Documented non-invariance: w(zA) = w(z)Q_v with Q_v orthogonal but
    # different for the two views, so the loss changes.
    rng = np.random.default_rng(6)
    z1, z2 = _pair(rng, 12, 3, noise=1.0)
    rot, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    w1 = np.asarray(losses.wmse_whiten(z1))
    w1_rot = np.asarray(losses.wmse_whiten(z1 @ rot))
    q1 = np.linalg.lstsq(w1, w1_rot, rcond=None)[0]
    _close(w1 @ q1, w1_rot, atol=1e-11)
    _close(q1.T @ q1, np.eye(3), atol=1e-11)
    assert abs(float(_loss(z1 @ rot, z2 @ rot, 0.0)) - float(_loss(z1, z2, 0.0))) > 1e-3

  def test_whitening_size_splits_the_batch(self, x64):
    rng = np.random.default_rng(7)
    z1, z2 = _pair(rng, 12, 3)
    split = float(_loss(z1, z2, 0.0, whitening_size=6))
    halves = [float(_loss(z1[s], z2[s], 0.0)) for s in (slice(0, 6), slice(6, 12))]
    _close(split, np.mean(halves))
    assert abs(split - float(_loss(z1, z2, 0.0))) > 1e-6  # not the full batch
    assert float(_loss(z1, z2, 0.0, whitening_size=12)) == pytest.approx(
        float(_loss(z1, z2, 0.0)), rel=1e-12)

  def test_shrinkage_allows_small_sub_batches(self, x64):
    rng = np.random.default_rng(8)
    z1, z2 = _pair(rng, 12, 3)
    loss = losses.wmse_two_view(z1, z2, eps=0.1, whitening_size=3)  # M = K
    assert np.isfinite(float(loss))

  def test_check_grads(self, x64):
    rng = np.random.default_rng(9)
    z1, z2 = (jnp.asarray(z) for z in _pair(rng, 12, 3))
    # Shrinkage and batch slicing on; the whitening code is the same without.
    check_grads(lambda a, b: _loss(a, b, 0.1, whitening_size=6), (z1, z2),
                order=1, modes=["rev"])

  def test_jit_matches_eager(self):
    rng = np.random.default_rng(10)
    z1, z2 = (jnp.asarray(z, jnp.float32) for z in _pair(rng, 12, 3))
    eager = losses.wmse_two_view_terms(z1, z2, whitening_size=6)
    jitted = jax.jit(functools.partial(losses.wmse_two_view_terms,
                                       whitening_size=6))(z1, z2)
    for key in ("cosine", "loss"):
      np.testing.assert_allclose(jitted[key], eager[key], rtol=1e-5)

  @pytest.mark.parametrize("dtype", ["float32", "float64"])
  def test_dtypes(self, dtype):
    rng = np.random.default_rng(11)
    z1, z2 = _pair(rng, 12, 3)
    with jax.enable_x64(dtype == "float64"):
      t = losses.wmse_two_view_terms(z1.astype(dtype), z2.astype(dtype))
      for key in ("cosine", "loss"):
        assert t[key].dtype == dtype and t[key].shape == ()
    got = losses.wmse_two_view(z1.astype("float32"), z2.astype("float32"))
    np.testing.assert_allclose(float(got), _numpy_wmse(z1, z2), rtol=1e-4)


class TestWmseErrors:

  def test_shape_mismatch(self):
    with pytest.raises(ValueError, match=r"z1 and z2 must have the same \(N, K\)"
                       r" shape, got \(8, 3\) and \(8, 2\)"):
      losses.wmse_two_view(jnp.ones((8, 3)), jnp.ones((8, 2)))

  def test_nan(self):
    z = np.random.default_rng(0).normal(size=(8, 2))
    bad = z.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="z2 must be finite"):
      losses.wmse_two_view(z, bad)
    with pytest.raises(ValueError, match="z must be finite"):
      losses.wmse_whiten(bad)

  def test_too_few_rows_for_whitening(self):
    with pytest.raises(ValueError, match=r"N = 3 rows cannot be whitened in K = 3"):
      losses.wmse_two_view(jnp.ones((3, 3)), jnp.ones((3, 3)))
    with pytest.raises(ValueError, match=r"whitening_size = 3 rows cannot be"):
      losses.wmse_two_view(jnp.ones((12, 3)), jnp.ones((12, 3)), whitening_size=3)
    with pytest.raises(ValueError, match=r"z must have N >= 2 rows"):
      losses.wmse_whiten(jnp.ones((1, 3)))

  @pytest.mark.parametrize("m", [5, 1, 0, 2.0, True])
  def test_whitening_size(self, m):
    with pytest.raises(ValueError, match="whitening_size must be"):
      losses.wmse_two_view(jnp.ones((12, 3)), jnp.ones((12, 3)), whitening_size=m)

  @pytest.mark.parametrize("eps", [-0.1, 1.0, float("nan")])
  def test_eps(self, eps):
    with pytest.raises(ValueError, match=r"eps must be in \[0, 1\)"):
      losses.wmse_two_view(jnp.ones((8, 2)), jnp.ones((8, 2)), eps=eps)


# ---------------------------------------------------------------------------
# No hang: batched LAPACK calls deadlocked XLA:CPU (full runs stalled).
# ---------------------------------------------------------------------------

# Runs in a subprocess pinned to 2 CPUs, so XLA's intra-op pool has the 2
# threads of the machine where full runs stalled: before the fix, the jitted
# loss+grad below deadlocked within 2-56 calls (both pool threads waiting in
# jaxlib's ParallelBatchMap under lapack_strsm_ffi). It also feeds NaN and
# rank-deficient batches, which must come back (as NaN), not hang.
_NO_HANG_SCRIPT = textwrap.dedent("""
    import json, os
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 2:
      os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
    import jax, jax.numpy as jnp, numpy as np
    from ssljax import losses

    n, k, m = 1024, 64, 128  # 8 sub-batches per view
    rng = np.random.default_rng(0)
    z1 = rng.normal(size=(n, k)).astype(np.float32)
    z2 = z1 + 0.3 * rng.normal(size=(n, k)).astype(np.float32)
    loss_grad = jax.jit(jax.value_and_grad(
        lambda a, b: losses.wmse_two_view(a, b, whitening_size=m), (0, 1)))
    for _ in range(100):
      loss, grads = jax.block_until_ready(loss_grad(z1, z2))
    nan = z1.copy(); nan[3, 5] = np.nan
    low_rank = z1.copy(); low_rank[:, 32:] = low_rank[:, :32]  # rank 32 < K
    out = {"clean": float(loss),
           "clean_grad_finite": bool(np.isfinite(np.asarray(grads[0])).all())}
    for name, bad in (("nan", nan), ("low_rank", low_rank)):
      loss, grads = jax.block_until_ready(loss_grad(bad, z2))
      out[name] = float(loss)
    print(json.dumps(out))
""")


class TestNoHang:

  def test_jitted_loss_and_grad_return(self):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", JAX_PLATFORMS="cpu")
    try:
      run = subprocess.run([sys.executable, "-c", _NO_HANG_SCRIPT], env=env,
                           capture_output=True, text=True, timeout=180,
                           check=False)
    except subprocess.TimeoutExpired:
      pytest.fail("jitted W-MSE loss+grad did not return within 180 s "
                  "(XLA:CPU deadlock in batched LAPACK calls?)")
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert np.isfinite(out["clean"]) and out["clean_grad_finite"]
    # Garbage in, NaN out (train.py then stops with FloatingPointError).
    assert np.isnan(out["nan"]) and np.isnan(out["low_rank"])

  def test_no_batched_lapack_calls(self):
    # The structural cause of the deadlock: every Cholesky and triangular
    # solve in the loss and its gradient must act on one (K, K) matrix.
    z1, z2 = _pair(np.random.default_rng(12), 24, 3)
    fn = jax.value_and_grad(
        lambda a, b: losses.wmse_two_view(a, b, whitening_size=6), (0, 1))
    ranks = _lapack_operand_ranks(jax.make_jaxpr(fn)(z1, z2).jaxpr)
    assert ranks and set(ranks) == {2}, ranks


def _lapack_operand_ranks(jaxpr) -> list[int]:
  """Ranks of the matrix operand of every cholesky/triangular_solve."""
  ranks = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name in ("cholesky", "triangular_solve"):
      ranks.append(eqn.invars[0].aval.ndim)
    for sub in jax_core.jaxprs_in_params(eqn.params):
      ranks += _lapack_operand_ranks(sub)
  return ranks

