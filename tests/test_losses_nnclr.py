"""Tests for ssljax.losses.nnclr and ssljax.methods.queue.

NNCLR is checked in float64 against a NumPy transcription of the paper's
Algorithm 1 (Dwibedi et al. 2021, arXiv 2104.14548): value, and the gradient
w.r.t. p against central finite differences of that transcription.
"""

import jax
from jax.experimental import sparse as jsparse
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax import losses
from ssljax.methods import queue as fifo

pytestmark = pytest.mark.usefixtures("fast_compiles")

B, K, Q = 4, 3, 6


@jax.jit
def _nnclr_vg(p, z, support, tau):
  return jax.value_and_grad(
      lambda p, z, q: losses.nnclr(p, z, q, temperature=tau),
      argnums=(0, 1, 2))(p, z, support)


@jax.jit
def _graph_vg(p, support, g, tau):
  return jax.value_and_grad(
      lambda p, q: losses.nnclr_graph(p, q, g, temperature=tau),
      argnums=(0, 1))(p, support)


# ---------------------------------------------------------------------------
# NumPy transcription of Algorithm 1.
# ---------------------------------------------------------------------------


def _normalize(x):
  return x / np.linalg.norm(x, axis=1, keepdims=True)


def _numpy_nn(z, support):
  idx = np.argmax(_normalize(z) @ _normalize(support).T, axis=1)
  return support[idx], idx


def _cross_entropy_diag(logits):
  lse = np.log(np.sum(np.exp(logits), axis=1))
  return np.mean(lse - np.diag(logits))


def _numpy_nnclr(p, z, support, tau):
  """L(nn, p) = cross_entropy(nn @ p.T / τ, arange(B)) on unit rows."""
  nn, _ = _numpy_nn(z, support)
  return _cross_entropy_diag(_normalize(nn) @ _normalize(p).T / tau)


def _numpy_graph(p, support, g, tau):
  """Σ_iq G_iq −log softmax_j(q̂·p̂_j/τ)_i / Σ G, double loop."""
  logits = _normalize(support) @ _normalize(p).T / tau  # (Q, B)
  total = 0.0
  for i in range(g.shape[0]):
    for q in range(g.shape[1]):
      total += g[i, q] * (np.log(np.sum(np.exp(logits[q]))) - logits[q, i])
  return total / g.sum()


def _finite_diff(f, x, eps=1e-6):
  grad = np.zeros_like(x)
  for idx in np.ndindex(x.shape):
    step = np.zeros_like(x)
    step[idx] = eps
    grad[idx] = (f(x + step) - f(x - step)) / (2 * eps)
  return grad


def _inputs(rng):
  return (rng.normal(size=(B, K)), rng.normal(size=(B, K)),
          rng.normal(size=(Q, K)))


def _close(a, b, rtol=1e-12, atol=1e-13):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------
# Loss.
# ---------------------------------------------------------------------------


class TestNnclr:

  def test_against_numpy_value_and_grad(self, x64):
    rng = np.random.default_rng(0)
    p, z, support = _inputs(rng)
    value, (g_p, g_z, g_q) = _nnclr_vg(p, z, support, 0.1)
    _close(value, _numpy_nnclr(p, z, support, 0.1))
    _close(g_p, _finite_diff(lambda x: _numpy_nnclr(x, z, support, 0.1), p),
           rtol=1e-6, atol=1e-8)
    # Only p gets a gradient: the neighbour is a stop-gradient look-up.
    assert np.all(np.asarray(g_z) == 0) and np.all(np.asarray(g_q) == 0)
    assert np.abs(np.asarray(g_p)).max() > 1e-3

  def test_nearest_neighbour(self, x64):
    rng = np.random.default_rng(1)
    _, z, support = _inputs(rng)
    nn, idx = losses.nearest_neighbour(z, support)
    want_nn, want_idx = _numpy_nn(z, support)
    np.testing.assert_array_equal(idx, want_idx)
    _close(nn, want_nn)
    assert idx.dtype == jnp.int32
    # Scale of the support rows is irrelevant (cosine); ties: lowest index.
    _, idx_scaled = losses.nearest_neighbour(z, support * 7.0)
    np.testing.assert_array_equal(idx_scaled, want_idx)
    _, tie = losses.nearest_neighbour(np.ones((1, 2)),
                                      np.array([[0., 1.], [1., 1.], [2., 2.]]))
    assert tie.tolist() == [1]

  def test_two_view_is_the_symmetrised_average(self, x64):
    rng = np.random.default_rng(2)
    p1, z1, support = _inputs(rng)
    p2, z2 = rng.normal(size=(B, K)), rng.normal(size=(B, K))
    want = 0.5 * (_numpy_nnclr(p2, z1, support, 0.2)
                  + _numpy_nnclr(p1, z2, support, 0.2))
    _close(losses.nnclr_two_view(p1, p2, z1, z2, support, temperature=0.2),
           want)

  def test_permutation_invariance(self, x64):
    rng = np.random.default_rng(3)
    p, z, support = _inputs(rng)
    perm, perm_q = rng.permutation(B), rng.permutation(Q)
    want = _nnclr_vg(p, z, support, 0.1)[0]
    _close(_nnclr_vg(p[perm], z[perm], support[perm_q], 0.1)[0], want)

  def test_neighbour_equal_to_the_positive_has_the_least_loss(self, x64):
    # p = z and the support holds the rows of z: NN(z_i) = z_i.
    rng = np.random.default_rng(4)
    z = rng.normal(size=(B, K))
    support = np.concatenate([z, rng.normal(size=(2, K))])
    _, idx = losses.nearest_neighbour(z, support)
    np.testing.assert_array_equal(idx, np.arange(B))
    _close(losses.nnclr(z, z, support), _numpy_nnclr(z, z, z, 0.1))

  @pytest.mark.parametrize("dtype", ["float32", "float64"])
  def test_dtypes(self, dtype):
    rng = np.random.default_rng(5)
    p, z, support = _inputs(rng)
    with jax.enable_x64(dtype == "float64"):
      args = [x.astype(dtype) for x in (p, z, support)]
      for value in (losses.nnclr(*args), losses.nnclr_two_view(
          args[0], args[0], args[1], args[1], args[2]), losses.nnclr_graph(
              args[0], args[2], losses.support_knn_graph(args[1], args[2]))):
        assert value.dtype == dtype and value.shape == ()
    np.testing.assert_allclose(float(value), _numpy_nnclr(p, z, support, 0.1),
                               rtol=1e-5)


# ---------------------------------------------------------------------------
# Graph form.
# ---------------------------------------------------------------------------


class TestNnclrGraph:

  def test_one_nn_graph_equals_nnclr_dense_and_bcoo(self, x64):
    rng = np.random.default_rng(10)
    p, z, support = _inputs(rng)
    value, (g_p, _, _) = _nnclr_vg(p, z, support, 0.1)
    for sparse in (False, True):
      g = losses.support_knn_graph(z, support, 1, dtype=jnp.float64,
                                   sparse=sparse)
      g_value, (gg_p, gg_q) = _graph_vg(p, support, g, 0.1)
      _close(g_value, value)
      _close(gg_p, g_p, rtol=1e-10)
      assert np.all(np.asarray(gg_q) == 0)

  def test_support_knn_graph(self):
    rng = np.random.default_rng(11)
    _, z, support = _inputs(rng)
    g = np.asarray(losses.support_knn_graph(z, support, 2))
    assert g.shape == (B, Q) and np.all(g.sum(axis=1) == 2)
    order = np.argsort(-(_normalize(z) @ _normalize(support).T), axis=1)
    for i in range(B):
      assert set(np.nonzero(g[i])[0]) == set(order[i, :2])
    sparse = losses.support_knn_graph(z, support, 2, sparse=True)
    np.testing.assert_array_equal(np.asarray(sparse.todense()), g)

  def test_weighted_graph_against_numpy_and_bcoo_padding(self, x64):
    rng = np.random.default_rng(12)
    p, _, support = _inputs(rng)
    g = rng.uniform(size=(B, Q)) * (rng.uniform(size=(B, Q)) < 0.5)
    g[0, 0] = 1.0
    want = _numpy_graph(p, support, g, 0.3)
    _close(losses.nnclr_graph(p, support, g, temperature=0.3), want)
    rows, cols = np.nonzero(g)
    padded = jsparse.BCOO(
        (np.concatenate([g[rows, cols], np.full(2, 5.0)]),
         np.concatenate([np.stack([rows, cols], 1), np.full((2, 2), Q)])),
        shape=(B, Q))
    _close(losses.nnclr_graph(p, support, padded, temperature=0.3), want)


# ---------------------------------------------------------------------------
# Queue.
# ---------------------------------------------------------------------------


class TestQueue:

  def test_init(self):
    q = fifo.queue_init(jax.random.key(0), 5, 3)
    assert q["z"].shape == (5, 3) and q["z"].dtype == jnp.float32
    np.testing.assert_allclose(np.linalg.norm(q["z"], axis=1), 1.0, rtol=1e-6)
    assert q["ptr"].dtype == jnp.int32 and int(q["ptr"]) == 0

  def test_push_order_wrap_around_and_ptr(self):
    q = {"z": jnp.zeros((5, 1)), "ptr": jnp.array(0, jnp.int32)}
    push = jax.jit(fifo.queue_push)  # ptr traced
    batches = [np.array([[1.], [2.]]), np.array([[3.], [4.]]),
               np.array([[5.], [6.]]), np.array([[7.], [8.]])]
    want_rows = [[1, 2, 0, 0, 0], [1, 2, 3, 4, 0], [6, 2, 3, 4, 5],
                 [6, 7, 8, 4, 5]]
    want_ptr = [2, 4, 1, 3]
    for batch, rows, ptr in zip(batches, want_rows, want_ptr):
      q = push(q, batch)
      assert q["z"][:, 0].tolist() == rows and int(q["ptr"]) == ptr
    # Eager call, a batch as large as the queue: every row replaced.
    q = fifo.queue_push(q, np.arange(5.0)[:, None])
    assert q["z"][:, 0].tolist() == [2, 3, 4, 0, 1] and int(q["ptr"]) == 3

  def test_push_stops_gradients(self):
    q = {"z": jnp.zeros((3, 2)), "ptr": jnp.array(1, jnp.int32)}
    grad = jax.grad(lambda z: jnp.sum(fifo.queue_push(q, z)["z"]))(
        jnp.ones((2, 2)))
    assert np.all(np.asarray(grad) == 0)

  def test_errors(self):
    q = {"z": np.zeros((3, 2)), "ptr": 0}
    with pytest.raises(ValueError, match="queue smaller than the batch"):
      fifo.queue_push(q, np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"z and queue\['z'\] must have the same"
                       r" width"):
      fifo.queue_push(q, np.ones((2, 3)))
    with pytest.raises(ValueError, match="queue must be a dict"):
      fifo.queue_push({"z": q["z"]}, np.ones((2, 2)))
    with pytest.raises(ValueError, match="size"):
      fifo.queue_init(jax.random.key(0), 0, 2)


# ---------------------------------------------------------------------------
# Errors.
# ---------------------------------------------------------------------------


class TestNnclrErrors:

  @pytest.mark.parametrize("tau", [0.0, -1.0, float("nan"), float("inf")])
  def test_temperature(self, tau):
    x, support = np.ones((2, 3)), np.ones((4, 3))
    with pytest.raises(ValueError, match="temperature must be a finite number"):
      losses.nnclr(x, x, support, temperature=tau)
    with pytest.raises(ValueError, match="temperature"):
      losses.nnclr_two_view(x, x, x, x, support, temperature=tau)
    with pytest.raises(ValueError, match="temperature"):
      losses.nnclr_graph(x, support, np.ones((2, 4)), temperature=tau)

  def test_shapes(self):
    support = np.ones((4, 3))
    with pytest.raises(ValueError, match=r"p and z must have the same \(N, K\)"
                       r" shape, got \(2, 3\) and \(3, 3\)"):
      losses.nnclr(np.ones((2, 3)), np.ones((3, 3)), support)
    with pytest.raises(ValueError, match="p1 and z2"):
      losses.nnclr_two_view(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 3)),
                            np.ones((3, 3)), support)
    with pytest.raises(ValueError, match="support and z must have the same"
                       " width"):
      losses.nnclr(np.ones((2, 2)), np.ones((2, 2)), support)
    with pytest.raises(ValueError, match=r"g must have shape \(2, 4\).*\(4, 2\)"):
      losses.nnclr_graph(np.ones((2, 3)), support, np.ones((4, 2)))
    with pytest.raises(ValueError, match="g must have a positive total"):
      losses.nnclr_graph(np.ones((2, 3)), support, np.zeros((2, 4)))
    with pytest.raises(ValueError, match="k must be <= Q"):
      losses.support_knn_graph(np.ones((2, 3)), support, 5)
    z = np.ones((2, 3))
    z[0, 0] = np.inf
    with pytest.raises(ValueError, match="z must be finite"):
      losses.nearest_neighbour(z, support)
