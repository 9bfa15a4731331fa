"""Tests for ssljax.losses.simclr: InfoNCE on a graph and NT-Xent.

Identities are checked in float64 with rtol 1e-12 (1e-10 for gradients);
finite differences use jax.test_util.check_grads (float64 defaults).
"""

import functools

import jax
from jax.experimental import sparse as jsparse
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from ssljax import graphs
from ssljax import losses

pytestmark = pytest.mark.usefixtures("fast_compiles")


TERMS = ("positive", "logsumexp", "loss")


# One jitted value-and-gradient per (shape, dtype, block_size, kind of g):
# g and tau are traced arguments, so tests with equal shapes share a compile.
@functools.partial(jax.jit, static_argnames=("block_size",))
def _graph_vg(z, g, tau, block_size=None):
  return jax.value_and_grad(
      lambda z: losses.simclr(z, g, temperature=tau, block_size=block_size))(z)


@jax.jit
def _graph_loss(z, g, tau):
  return losses.simclr(z, g, temperature=tau)


@jax.jit
def _two_view_loss(z1, z2, tau):
  return losses.simclr_two_view(z1, z2, temperature=tau)


@functools.partial(jax.jit, static_argnames=("block_size",))
def _two_view_vg(z1, z2, tau, block_size=None):
  return jax.value_and_grad(
      lambda a, b: losses.simclr_two_view(a, b, temperature=tau,
                                          block_size=block_size),
      argnums=(0, 1))(z1, z2)


# ---------------------------------------------------------------------------
# Plain numpy references, written from the definitions.
# ---------------------------------------------------------------------------


def _cosine(z):
  u = z / np.linalg.norm(z, axis=1, keepdims=True)
  return u @ u.T


def _numpy_nt_xent(z1, z2, tau):
  """NT-Xent (Chen et al. 2020, eq. (1)): 2N anchors, loop over anchors."""
  n = z1.shape[0]
  s = _cosine(np.concatenate([z1, z2])) / tau
  losses_per_anchor = []
  for i in range(2 * n):
    positive = (i + n) % (2 * n)
    denom = sum(np.exp(s[i, k]) for k in range(2 * n) if k != i)
    losses_per_anchor.append(-np.log(np.exp(s[i, positive]) / denom))
  return np.mean(losses_per_anchor)


def _numpy_graph_infonce(z, g, tau):
  """−Σ_{i≠j} G_ij log softmax_{k≠i}(s_ik/τ)_j / Σ_{i≠j} G_ij, double loop."""
  n = z.shape[0]
  s = _cosine(z) / tau
  num = den = 0.0
  for i in range(n):
    others = [k for k in range(n) if k != i]
    log_z = np.log(np.sum(np.exp(s[i, others])))
    for j in others:
      num -= g[i, j] * (s[i, j] - log_z)
      den += g[i, j]
  return num / den


def _random_graph(rng, n, diagonal=False):
  a = rng.uniform(0.0, 1.0, size=(n, n))
  g = a + a.T
  if not diagonal:
    np.fill_diagonal(g, 0.0)
  return g


def _close(a, b, rtol=1e-12, atol=1e-13):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------
# Graph form and its relation to NT-Xent.
# ---------------------------------------------------------------------------


class TestSimclrGraph:

  def test_hand_computed(self):
    # Row 0 = (1, 0): others have cosines 0, 1, 0 -> lse = log(2 + e).
    z = jnp.array([[1., 0.], [0., 1.], [1., 0.], [0., 1.]])
    t = losses.simclr_terms(z, graphs.views_graph(2, 2), temperature=1.0)
    assert float(t["positive"]) == pytest.approx(-1.0)
    assert float(t["logsumexp"]) == pytest.approx(np.log(2 + np.e), rel=1e-6)
    assert float(t["loss"]) == pytest.approx(np.log(2 + np.e) - 1, rel=1e-6)

  def test_views_graph_equals_two_view_value_and_grad(self, x64):
    # N = 1 (each anchor's softmax holds only its positive) is covered by
    # TestSimclrTwoView.test_against_numpy_nt_xent.
    n, tau = 4, 0.1
    rng = np.random.default_rng(n)
    z1, z2 = rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    z = np.concatenate([z1, z2])
    g = graphs.views_graph(n, 2, dtype=jnp.float64)
    graph_t = losses.simclr_terms(z, g, temperature=tau)
    two_t = losses.simclr_two_view_terms(z1, z2, temperature=tau)
    for key in TERMS:
      _close(graph_t[key], two_t[key])
    value, grad = _graph_vg(z, g, tau)
    two_value, (g1, g2) = _two_view_vg(z1, z2, tau)
    _close(value, two_value)
    _close(grad, np.concatenate([g1, g2]), rtol=1e-10)

  def test_against_numpy_double_loop(self, x64):
    rng = np.random.default_rng(1)
    for tau in (0.2, 1.0):
      z = rng.normal(size=(8, 3))
      for g in (_random_graph(rng, 8), np.asarray(graphs.views_graph(2, 4), float)):
        _close(losses.simclr(z, g, temperature=tau),
               _numpy_graph_infonce(z, g, tau))

  def test_diagonal_of_g_is_ignored(self, x64):
    rng = np.random.default_rng(2)
    z = rng.normal(size=(8, 3))
    g = _random_graph(rng, 8)
    g_diag = g + np.diag(rng.uniform(1, 5, size=8))
    _close(losses.simclr(z, g_diag), losses.simclr(z, g))
    with_loops = graphs.views_graph(4, 2, order="sample_major", self_loops=True)
    _close(losses.simclr(z, with_loops),
           losses.simclr(z, graphs.views_graph(4, 2, order="sample_major")))

  def test_view_orders_give_same_loss(self, x64):
    rng = np.random.default_rng(3)
    n, v = 2, 4
    z_vm = rng.normal(size=(n * v, 3))
    perm = np.array([a * n + i for i in range(n) for a in range(v)])
    _close(losses.simclr(z_vm[perm], graphs.views_graph(n, v, order="sample_major")),
           losses.simclr(z_vm, graphs.views_graph(n, v)))

  def test_invariant_to_positive_row_scaling(self, x64):
    rng = np.random.default_rng(4)
    z = rng.normal(size=(8, 3))
    g = _random_graph(rng, 8)
    scale = rng.uniform(0.01, 100.0, size=(8, 1))
    _close(losses.simclr(scale * z, g), losses.simclr(z, g))
    z1, z2 = z[:4], z[4:]
    _close(losses.simclr_two_view(scale[:4] * z1, scale[4:] * z2),
           losses.simclr_two_view(z1, z2))

  def test_check_grads(self, x64):
    # Blockwise and BCOO gradients equal these to 1e-10 (tests below).
    rng = np.random.default_rng(5)
    z = jnp.asarray(rng.normal(size=(8, 3)))
    g = jnp.asarray(_random_graph(rng, 8))
    check_grads(lambda z: _graph_loss(z, g, 0.3), (z,), order=1, modes=["rev"])

  def test_jit_matches_eager(self):
    rng = np.random.default_rng(6)
    z = jnp.asarray(rng.normal(size=(8, 3)), jnp.float32)
    g = graphs.views_graph(4, 2)
    eager = losses.simclr_terms(z, g, temperature=0.2)
    jitted = jax.jit(lambda z, g: losses.simclr_terms(z, g, temperature=0.2))(z, g)
    for key in TERMS:
      np.testing.assert_allclose(jitted[key], eager[key], rtol=1e-5)

  @pytest.mark.parametrize("dtype", ["float32", "float64"])
  def test_dtypes(self, dtype):
    rng = np.random.default_rng(7)
    z64 = rng.normal(size=(8, 3))
    g = _random_graph(rng, 8)
    with jax.enable_x64(dtype == "float64"):
      t = losses.simclr_terms(jnp.asarray(z64, dtype), jnp.asarray(g, "float32"))
      for key in TERMS:
        assert t[key].dtype == dtype and t[key].shape == ()
    got = losses.simclr(z64.astype(np.float32), g.astype(np.float32))
    np.testing.assert_allclose(float(got), _numpy_graph_infonce(z64, g, 0.5),
                               rtol=1e-5)

  def test_bool_graph_and_int_embeddings(self):
    z = jnp.array([[1, 0], [0, 1], [1, 0], [0, 1]])
    loss = losses.simclr(z, graphs.views_graph(2, 2, dtype=jnp.bool_),
                         temperature=1.0)
    assert jnp.issubdtype(loss.dtype, jnp.floating)
    assert float(loss) == pytest.approx(np.log(2 + np.e) - 1, rel=1e-6)


class TestSimclrTwoView:

  @pytest.mark.parametrize("n,tau", [(1, 0.5), (4, 0.5), (4, 0.07)])
  def test_against_numpy_nt_xent(self, x64, n, tau):
    rng = np.random.default_rng(100 + n)
    z1 = rng.normal(size=(n, 3))
    z2 = z1 + 0.3 * rng.normal(size=(n, 3))
    _close(losses.simclr_two_view(z1, z2, temperature=tau),
           _numpy_nt_xent(z1, z2, tau))

  def test_perfect_alignment_lower_bound(self, x64):
    # z1 = z2 orthonormal rows, K >= 2N: every negative has cosine 0.
    z = np.eye(6)[:3]
    tau = 0.5
    want = -1 / tau + np.log(np.exp(1 / tau) + 4)
    _close(losses.simclr_two_view(z, z, temperature=tau), want)

  def test_check_grads(self, x64):
    rng = np.random.default_rng(8)
    z1, z2 = (jnp.asarray(rng.normal(size=(4, 3))) for _ in range(2))
    check_grads(lambda a, b: _two_view_loss(a, b, 0.2), (z1, z2), order=1,
                modes=["rev"])

  @pytest.mark.parametrize("dtype", ["float32", "float64"])
  def test_dtypes(self, dtype):
    rng = np.random.default_rng(9)
    z1, z2 = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    with jax.enable_x64(dtype == "float64"):
      t = losses.simclr_two_view_terms(z1.astype(dtype), z2.astype(dtype))
      for key in TERMS:
        assert t[key].dtype == dtype and t[key].shape == ()
    np.testing.assert_allclose(
        float(losses.simclr_two_view(z1.astype("float32"), z2.astype("float32"))),
        _numpy_nt_xent(z1, z2, 0.5), rtol=1e-5)

  def test_zero_row_is_finite(self):
    z1 = jnp.array([[0., 0., 0.], [1., 2., 0.], [0., 1., 1.], [1., 1., 1.]])
    z2 = z1[::-1]
    value, grads = _two_view_vg(z1, z2, 0.5)
    assert np.isfinite(float(value))
    assert all(np.all(np.isfinite(g)) for g in grads)


# ---------------------------------------------------------------------------
# Blockwise evaluation and sparse graphs.
# ---------------------------------------------------------------------------


def _max_intermediate_size(jaxpr) -> int:
  """Largest array (in elements) produced anywhere in a jaxpr, recursively."""
  biggest = 0
  for eqn in jaxpr.eqns:
    for var in eqn.outvars:
      biggest = max(biggest, int(np.prod(getattr(var.aval, "shape", ()))))
    for param in eqn.params.values():
      subs = param if isinstance(param, (list, tuple)) else [param]
      for sub in subs:
        inner = getattr(sub, "jaxpr", sub)
        if hasattr(inner, "eqns"):
          biggest = max(biggest, _max_intermediate_size(inner))
  return biggest


class TestSimclrBlockwise:

  @pytest.mark.parametrize("block_size", [3, 5])
  def test_graph_blockwise_equals_dense_value_and_grad(self, x64, block_size):
    rng = np.random.default_rng(10)
    z = rng.normal(size=(8, 3))  # 8 is not divisible by 3 or 5
    for g in (_random_graph(rng, 8), np.asarray(graphs.views_graph(4, 2), float)):
      value, grad = _graph_vg(z, g, 0.3, block_size=block_size)
      dense_value, dense_grad = _graph_vg(z, g, 0.3)
      _close(value, dense_value)
      _close(grad, dense_grad, rtol=1e-10)

  @pytest.mark.parametrize("block_size", [1, 8, 64])
  def test_graph_blockwise_value_other_sizes(self, x64, block_size):
    rng = np.random.default_rng(11)
    z = rng.normal(size=(8, 3))
    g = _random_graph(rng, 8)
    dense = losses.simclr_terms(z, g, temperature=0.3)
    blocked = losses.simclr_terms(z, g, temperature=0.3, block_size=block_size)
    for key in TERMS:
      _close(blocked[key], dense[key])

  def test_two_view_blockwise_equals_dense_value_and_grad(self, x64):
    rng = np.random.default_rng(12)
    z1, z2 = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))  # 2N = 8
    value, grads = _two_view_vg(z1, z2, 0.5, block_size=3)
    dense_value, dense_grads = _two_view_vg(z1, z2, 0.5)
    _close(value, dense_value)
    for got, want in zip(grads, dense_grads):
      _close(got, want, rtol=1e-10)

  def test_blockwise_never_builds_n_by_n(self):
    # The gradient's jaxpr (forward + backward) has no N×N-sized array when
    # blocked; the dense one has.
    n, k, b = 64, 4, 8
    z1 = jnp.ones((n // 2, k)) + jnp.arange(k)
    z2 = z1[::-1]
    blocked = jax.make_jaxpr(jax.grad(
        lambda a: losses.simclr_two_view(a, z2, block_size=b)))(z1)
    dense = jax.make_jaxpr(jax.grad(
        lambda a: losses.simclr_two_view(a, z2)))(z1)
    assert _max_intermediate_size(dense.jaxpr) >= n * n
    assert _max_intermediate_size(blocked.jaxpr) <= 2 * n * b
    # Graph form with a sparse g: O(N·B + nnz·K) as well.
    g_sp = graphs.to_bcoo(graphs.views_graph(n // 2, 2))
    z = jnp.concatenate([z1, z2])
    blocked_graph = jax.make_jaxpr(jax.grad(
        lambda z: losses.simclr(z, g_sp, block_size=b)))(z)
    assert _max_intermediate_size(blocked_graph.jaxpr) <= 2 * n * b

  def test_blockwise_under_jit(self):
    rng = np.random.default_rng(13)
    z = jnp.asarray(rng.normal(size=(8, 3)), jnp.float32)
    g = graphs.views_graph(4, 2)
    f = jax.jit(lambda z: losses.simclr(z, g, block_size=4))
    np.testing.assert_allclose(f(z), losses.simclr(z, g), rtol=1e-5)


class TestSimclrSparse:

  def test_bcoo_equals_dense_value_and_grad(self, x64):
    rng = np.random.default_rng(14)
    z = rng.normal(size=(8, 3))
    for g in (_random_graph(rng, 8, diagonal=True),
              np.asarray(graphs.views_graph(4, 2), np.float64)):
      g_sp = graphs.to_bcoo(jnp.asarray(g), nse=64)  # same nse: one compile
      value, grad = _graph_vg(z, g_sp, 0.5)
      dense_value, dense_grad = _graph_vg(z, g, 0.5)
      _close(value, dense_value)
      _close(grad, dense_grad, rtol=1e-10)

  def test_bcoo_with_duplicates_and_padding(self, x64):
    # Entries (0, 1) stored twice (summed) plus padding slots (index N).
    n = 4
    rows = np.array([0, 0, 1, 2, 3, 2, 1, 4, 4])
    cols = np.array([1, 1, 0, 3, 2, 2, 1, 4, 4])
    data = np.array([0.5, 1.5, 2.0, 1.0, 1.0, 7.0, 3.0, 9.0, 9.0])
    g_sp = jsparse.BCOO((jnp.asarray(data), jnp.asarray(np.stack([rows, cols], 1))),
                        shape=(n, n))
    dense = np.zeros((n, n))
    for r, c, d in zip(rows, cols, data):
      if r < n and c < n:
        dense[r, c] += d
    z = np.random.default_rng(14).normal(size=(n, 2))
    _close(losses.simclr(z, g_sp), _numpy_graph_infonce(z, dense, 0.5))

  def test_bcoo_under_jit(self):
    rng = np.random.default_rng(15)
    z = jnp.asarray(rng.normal(size=(8, 3)), jnp.float32)
    g_sp = graphs.to_bcoo(graphs.views_graph(4, 2))
    f = jax.jit(losses.simclr)
    np.testing.assert_allclose(f(z, g_sp), losses.simclr(z, graphs.views_graph(4, 2)),
                               rtol=1e-5)


# ---------------------------------------------------------------------------
# Errors.
# ---------------------------------------------------------------------------


class TestSimclrErrors:

  @pytest.mark.parametrize("tau", [0.0, -0.5, float("nan"), float("inf")])
  def test_temperature(self, tau):
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
      losses.simclr(jnp.eye(4, 2), graphs.views_graph(2, 2), temperature=tau)
    with pytest.raises(ValueError, match="temperature"):
      losses.simclr_two_view(jnp.eye(2), jnp.eye(2), temperature=tau)

  def test_shape_mismatch(self):
    with pytest.raises(ValueError, match=r"z1 and z2 must have the same \(N, K\)"
                       r" shape, got \(4, 3\) and \(4, 2\)"):
      losses.simclr_two_view(jnp.ones((4, 3)), jnp.ones((4, 2)))
    with pytest.raises(ValueError, match=r"g must have shape \(6, 6\).*\(4, 4\)"):
      losses.simclr(jnp.ones((6, 2)), graphs.views_graph(2, 2))

  def test_nan_input(self):
    z = np.ones((4, 2))
    z[1, 0] = np.nan
    with pytest.raises(ValueError, match="z must be finite"):
      losses.simclr(z, graphs.views_graph(2, 2))
    with pytest.raises(ValueError, match="z2 must be finite"):
      losses.simclr_two_view(np.ones((4, 2)), z)
    g = np.asarray(graphs.views_graph(2, 2)).copy()
    g[0, 2] = g[2, 0] = np.inf
    with pytest.raises(ValueError, match="g must be finite"):
      losses.simclr(np.ones((4, 2)), g)

  def test_rank_and_rows(self):
    with pytest.raises(ValueError, match="z must be a rank-2"):
      losses.simclr(jnp.ones(4), jnp.eye(4))
    with pytest.raises(ValueError, match=r"z must have N >= 2 rows.*\(1, 3\)"):
      losses.simclr(jnp.ones((1, 3)), jnp.zeros((1, 1)))

  def test_graph_without_off_diagonal_weight(self):
    with pytest.raises(ValueError, match="positive total off-diagonal weight"):
      losses.simclr(jnp.eye(4, 2), jnp.eye(4))
    with pytest.raises(ValueError, match="positive total off-diagonal weight"):
      losses.simclr(jnp.eye(4, 2), graphs.to_bcoo(jnp.eye(4)))

  def test_asymmetric_graph(self):
    with pytest.raises(ValueError, match="g must be symmetric"):
      losses.simclr(jnp.eye(4, 2), jnp.triu(jnp.ones((4, 4))))

  @pytest.mark.parametrize("block_size", [0, -2, 2.5, True, "4"])
  def test_block_size(self, block_size):
    with pytest.raises(ValueError, match="block_size must be None or an int >= 1"):
      losses.simclr(jnp.eye(4, 2), graphs.views_graph(2, 2), block_size=block_size)

  def test_shape_checked_under_jit(self):
    with pytest.raises(ValueError, match="same"):
      jax.jit(losses.simclr_two_view)(jnp.ones((4, 3)), jnp.ones((4, 2)))

