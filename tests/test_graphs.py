"""Tests for ssljax.graphs: the V-view SSL graph, degree and validate_graph."""

import itertools

import jax
from jax.experimental import sparse
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax import graphs

SIZES = [(1, 1), (1, 3), (4, 1), (3, 2), (5, 3), (2, 4)]


def _naive_view_major(n, v):
  """G[a·n + i, b·n + j] = 1 iff i == j and a != b, by a plain loop."""
  g = np.zeros((n * v, n * v))
  for a, i, b, j in itertools.product(range(v), range(n), range(v), range(n)):
    g[a * n + i, b * n + j] = float(i == j and a != b)
  return g


def _view_to_sample_major(n, v):
  """perm with (P x)[i·v + a] = x[a·n + i], as an index array."""
  return np.array([a * n + i for i in range(n) for a in range(v)])


class TestViewsGraph:

  @pytest.mark.parametrize("n,v", SIZES)
  @pytest.mark.parametrize("order", ["view_major", "sample_major"])
  @pytest.mark.parametrize("self_loops", [False, True])
  def test_symmetric_diagonal_and_degree(self, n, v, order, self_loops):
    g = np.asarray(graphs.views_graph(n, v, order=order, self_loops=self_loops))
    assert g.shape == (n * v, n * v)
    np.testing.assert_array_equal(g, g.T)
    np.testing.assert_array_equal(np.diag(g), np.full(n * v, float(self_loops)))
    assert set(np.unique(g)) <= {0.0, 1.0}
    expected_degree = v if self_loops else v - 1
    np.testing.assert_array_equal(np.asarray(graphs.degree(g)),
                                  np.full(n * v, expected_degree))

  @pytest.mark.parametrize("n,v", SIZES)
  def test_view_major_matches_naive_loop(self, n, v):
    np.testing.assert_array_equal(np.asarray(graphs.views_graph(n, v)),
                                  _naive_view_major(n, v))

  @pytest.mark.parametrize("n,v", SIZES)
  def test_view_major_matches_001_code(self, n, v):
    # The index construction of the 001 notes (torch code, §2).
    g = np.zeros((n * v, n * v))
    i = np.repeat(np.arange(n * v), v - 1)
    j = (i + np.tile(np.arange(1, v), n * v) * n) % (n * v)
    g[i, j] = 1.0
    np.testing.assert_array_equal(np.asarray(graphs.views_graph(n, v)), g)

  @pytest.mark.parametrize("n,v", SIZES)
  @pytest.mark.parametrize("self_loops", [False, True])
  def test_orders_are_a_permutation(self, n, v, self_loops):
    g_vm = np.asarray(graphs.views_graph(n, v, self_loops=self_loops))
    g_sm = np.asarray(graphs.views_graph(n, v, order="sample_major",
                                         self_loops=self_loops))
    perm = _view_to_sample_major(n, v)
    p = np.eye(n * v)[perm]  # (P x)[r] = x[perm[r]]
    np.testing.assert_array_equal(p @ g_vm @ p.T, g_sm)
    np.testing.assert_array_equal(g_vm[np.ix_(perm, perm)], g_sm)
    if n > 1 and v > 1:
      assert not np.array_equal(g_vm, g_sm)  # the orders really differ

  @pytest.mark.parametrize("n,v", SIZES)
  def test_sample_major_self_loops_is_kron_i_ones(self, n, v):
    # 000 Prop. 1 / 002 eq. (8): G = I_n ⊗ 1_V 1_Vᵀ = Y Yᵀ.
    g = graphs.views_graph(n, v, order="sample_major", self_loops=True)
    np.testing.assert_array_equal(np.asarray(g),
                                  np.kron(np.eye(n), np.ones((v, v))))
    y = np.kron(np.eye(n), np.ones((v, 1)))  # (nV, n) one-hot of the sample
    np.testing.assert_array_equal(np.asarray(g), y @ y.T)

  def test_view_major_kron_formula(self):
    n, v = 3, 4
    np.testing.assert_array_equal(
        np.asarray(graphs.views_graph(n, v)),
        np.kron(np.ones((v, v)) - np.eye(v), np.eye(n)))

  @pytest.mark.parametrize("dtype", [jnp.float32, jnp.int32, jnp.bool_])
  def test_dtype(self, dtype):
    assert graphs.views_graph(2, 3, dtype=dtype).dtype == dtype

  def test_dtype_float64(self):
    with jax.enable_x64(True):
      assert graphs.views_graph(2, dtype=jnp.float64).dtype == jnp.float64

  @pytest.mark.parametrize("n", [0, -1, 2.0, "3", True, None])
  def test_bad_n(self, n):
    with pytest.raises(ValueError, match="n must be an int >= 1"):
      graphs.views_graph(n)

  @pytest.mark.parametrize("v", [0, -2, 1.5])
  def test_bad_v(self, v):
    with pytest.raises(ValueError, match="v must be an int >= 1"):
      graphs.views_graph(3, v)

  def test_numpy_int_accepted(self):
    assert graphs.views_graph(np.int64(2), np.int32(3)).shape == (6, 6)

  @pytest.mark.parametrize("order", ["viewmajor", "", "VIEW_MAJOR", None])
  def test_bad_order(self, order):
    with pytest.raises(ValueError, match="order must be one of"):
      graphs.views_graph(3, 2, order=order)


class TestDegree:

  def test_weighted_row_sums(self):
    rng = np.random.default_rng(0)
    a = rng.uniform(size=(5, 5))
    g = a + a.T
    np.testing.assert_allclose(np.asarray(graphs.degree(g)), g.sum(axis=1),
                               rtol=1e-6)

  def test_jit(self):
    g = graphs.views_graph(3, 3)
    np.testing.assert_array_equal(jax.jit(graphs.degree)(g), graphs.degree(g))

  @pytest.mark.parametrize("shape", [(3,), (2, 3), (2, 2, 2)])
  def test_bad_shape(self, shape):
    with pytest.raises(ValueError, match="g must be a square"):
      graphs.degree(jnp.zeros(shape))


class TestValidateGraph:

  def test_valid_graphs_pass(self):
    assert graphs.validate_graph(graphs.views_graph(4, 3)) is None
    graphs.validate_graph(graphs.views_graph(4, 3), n=12)
    graphs.validate_graph(np.eye(3).tolist(), n=3)
    graphs.validate_graph(jnp.zeros((0, 0)), n=0)

  @pytest.mark.parametrize("shape", [(4,), (3, 4), (2, 2, 2), ()])
  def test_non_square(self, shape):
    with pytest.raises(ValueError, match=r"g must be a square \(N, N\) array"):
      graphs.validate_graph(jnp.zeros(shape))

  def test_wrong_size(self):
    with pytest.raises(ValueError, match=r"must have shape \(5, 5\).*\(4, 4\)"):
      graphs.validate_graph(jnp.eye(4), n=5)

  def test_asymmetric(self):
    g = np.asarray(graphs.views_graph(3, 2)).copy()
    g[0, 1] = 0.5
    with pytest.raises(ValueError, match="must be symmetric.*0.5"):
      graphs.validate_graph(g)

  def test_asymmetry_within_atol_passes(self):
    g = np.eye(3)
    g[0, 1] = 1e-8
    graphs.validate_graph(g)
    with pytest.raises(ValueError, match="symmetric"):
      graphs.validate_graph(g, atol=1e-9)

  @pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
  def test_non_finite(self, bad):
    g = np.eye(3)
    g[1, 1] = bad
    with pytest.raises(ValueError, match="g must be finite"):
      graphs.validate_graph(g)

  def test_name_in_message(self):
    with pytest.raises(ValueError, match="g_sup must be a square"):
      graphs.validate_graph(jnp.zeros((2, 3)), name="g_sup")

  def test_under_jit_shape_checked_values_skipped(self):
    asym = jnp.array([[0.0, 1.0], [0.0, 0.0]])

    @jax.jit
    def f(g):
      graphs.validate_graph(g, n=2)
      return g.sum()

    assert float(f(asym)) == 1.0  # no value check on tracers
    with pytest.raises(ValueError, match="must have shape"):
      f(jnp.zeros((3, 3)))  # static shape check still fires


# ---------------------------------------------------------------------------
# BCOO graphs in degree / validate_graph.
# ---------------------------------------------------------------------------


def _sym_random(rng, n):
  a = rng.uniform(size=(n, n)) * (rng.uniform(size=(n, n)) < 0.4)
  return a + a.T


class TestBcooDegreeValidate:

  def test_degree_matches_dense(self):
    rng = np.random.default_rng(1)
    g = _sym_random(rng, 7)
    d = graphs.degree(graphs.to_bcoo(g))
    assert isinstance(d, jax.Array) and d.shape == (7,)
    np.testing.assert_allclose(np.asarray(d), g.sum(1), rtol=1e-6)

  def test_degree_under_jit(self):
    g = graphs.to_bcoo(graphs.views_graph(3, 3))
    np.testing.assert_array_equal(jax.jit(graphs.degree)(g), np.full(9, 2.0))

  def test_degree_sums_duplicates_and_ignores_padding(self):
    # Entries (0, 1) stored twice; index 3 == N is BCOO padding.
    g = sparse.BCOO((jnp.array([1.0, 2.0, 3.0, 5.0]),
                     jnp.array([[0, 1], [0, 1], [1, 0], [3, 3]])), shape=(3, 3))
    np.testing.assert_array_equal(np.asarray(graphs.degree(g)), [3.0, 3.0, 0.0])
    graphs.validate_graph(g, n=3)  # 1 + 2 == 3: symmetric after summing

  def test_valid_bcoo_passes(self):
    graphs.validate_graph(graphs.to_bcoo(graphs.views_graph(4, 3)), n=12)
    graphs.validate_graph(graphs.to_bcoo(jnp.zeros((3, 3))), n=3)

  def test_bcoo_wrong_size(self):
    with pytest.raises(ValueError, match=r"must have shape \(5, 5\).*\(4, 4\)"):
      graphs.validate_graph(graphs.to_bcoo(jnp.eye(4)), n=5)

  def test_bcoo_asymmetric(self):
    g = np.asarray(graphs.views_graph(3, 2)).copy()
    g[0, 1] = 0.5
    with pytest.raises(ValueError, match=r"g must be symmetric.*0\.5"):
      graphs.validate_graph(graphs.to_bcoo(g))

  def test_bcoo_asymmetric_duplicates(self):
    g = sparse.BCOO((jnp.array([1.0, 2.0, 1.0]),
                     jnp.array([[0, 1], [0, 1], [1, 0]])), shape=(2, 2))
    with pytest.raises(ValueError, match=r"symmetric.*= 2 >"):
      graphs.validate_graph(g)

  def test_bcoo_non_finite(self):
    g = sparse.BCOO((jnp.array([jnp.nan]), jnp.array([[1, 1]])), shape=(3, 3))
    with pytest.raises(ValueError, match="g must be finite.*BCOO.*(3, 3)"):
      graphs.validate_graph(g)

  def test_bcoo_batched_rejected(self):
    g = sparse.BCOO.fromdense(jnp.eye(3), n_batch=1)
    with pytest.raises(ValueError, match="2 sparse dimensions.*n_batch = 1"):
      graphs.validate_graph(g)
    with pytest.raises(ValueError, match="2 sparse dimensions"):
      graphs.degree(g)

  def test_bcoo_non_square(self):
    with pytest.raises(ValueError, match=r"square.*\(2, 3\)"):
      graphs.validate_graph(sparse.BCOO.fromdense(jnp.ones((2, 3))))

  def test_bcoo_under_jit_shape_checked_values_skipped(self):
    asym = graphs.to_bcoo(jnp.array([[0.0, 1.0], [0.0, 0.0]]))

    @jax.jit
    def f(g):
      graphs.validate_graph(g, n=2)
      return graphs.degree(g).sum()

    assert float(f(asym)) == 1.0
    with pytest.raises(ValueError, match="must have shape"):
      f(graphs.to_bcoo(jnp.eye(3)))
