"""Tests for ssljax.graphs.

Views, supervised, mixed, signed and k-NN graphs; degree, validate_graph,
laplacian; dense <-> BCOO.
"""

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
    # The index construction of the Balestriero & LeCun 2022 (arXiv 2205.11508)
    # notes (torch code, §2).
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
    # Balestriero & LeCun 2024 ("The Birth of Self Supervised Learning: A
    # Supervised Theory") Prop. 1 / Cabannes et al. 2023 (arXiv 2303.15256) eq.
    # (8): G = I_n ⊗ 1_V 1_Vᵀ = Y Yᵀ.
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
    # eye(3) with one batch dimension: data (3, 1), indices (3, 1, 1).
    g = sparse.BCOO((jnp.ones((3, 1)), jnp.arange(3).reshape(3, 1, 1)),
                    shape=(3, 3))
    assert g.n_batch == 1
    with pytest.raises(ValueError, match="2 sparse dimensions.*n_batch = 1"):
      graphs.validate_graph(g)
    with pytest.raises(ValueError, match="2 sparse dimensions"):
      graphs.degree(g)

  def test_bcoo_non_square(self):
    with pytest.raises(ValueError, match=r"square.*\(2, 3\)"):
      graphs.validate_graph(graphs.to_bcoo(np.ones((2, 3))))

  def test_bcoo_under_jit_shape_checked_values_skipped(self):
    asym = graphs.to_bcoo(jnp.array([[0.0, 1.0], [0.0, 0.0]]))

    @jax.jit
    def f(g):
      graphs.validate_graph(g, n=2)
      return graphs.degree(g).sum()

    assert float(f(asym)) == 1.0
    with pytest.raises(ValueError, match="must have shape"):
      f(graphs.to_bcoo(jnp.eye(3)))


# ---------------------------------------------------------------------------
# Supervised, normalised, mixed, signed, k-NN graphs; Laplacian; conversion.
# ---------------------------------------------------------------------------

LABELS = np.array([0, 2, 0, -1, 1, 2, 0, -1])


def _naive_supervised(labels):
  n = len(labels)
  return np.array([[float(labels[i] == labels[j] and labels[i] >= 0)
                    for j in range(n)] for i in range(n)])


class TestSupervisedGraph:

  def test_structure_matches_loop_and_one_hot(self):
    g = np.asarray(graphs.supervised_graph(LABELS, num_classes=3))
    np.testing.assert_array_equal(g, _naive_supervised(LABELS))
    y = np.stack([(LABELS == c).astype(float) for c in range(3)], axis=1)
    np.testing.assert_array_equal(g, y @ y.T)  # G = YYᵀ, zero rows for -1
    np.testing.assert_array_equal(g, g.T)

  def test_unknown_labels_zero_row_and_column(self):
    g = np.asarray(graphs.supervised_graph(LABELS))
    unknown = LABELS < 0
    assert not g[unknown].any() and not g[:, unknown].any()
    np.testing.assert_array_equal(np.diag(g), (~unknown).astype(float))
    np.testing.assert_array_equal(g.sum(1), [3, 2, 3, 0, 1, 2, 3, 0])

  def test_augmentations_kron(self):
    # Y_sup = Y ⊗ 1_A (sample-major) via np.repeat(labels, A).
    labels, a = np.array([1, 0, 1]), 2
    y = np.eye(2)[labels]
    np.testing.assert_array_equal(
        np.asarray(graphs.supervised_graph(np.repeat(labels, a))),
        np.kron(y, np.ones((a, 1))) @ np.kron(y, np.ones((a, 1))).T)

  def test_distinct_labels_give_sample_major_views_graph(self):
    g = graphs.supervised_graph(np.repeat(np.arange(3), 2))
    np.testing.assert_array_equal(
        np.asarray(g),
        np.asarray(graphs.views_graph(3, 2, order="sample_major",
                                      self_loops=True)))

  def test_sparse_and_jit_match_dense(self):
    dense = np.asarray(graphs.supervised_graph(LABELS))
    sp = graphs.supervised_graph(LABELS, sparse=True)
    assert graphs.is_bcoo(sp) and sp.nse == 9 + 1 + 4
    np.testing.assert_array_equal(np.asarray(sp.todense()), dense)
    np.testing.assert_array_equal(
        np.asarray(jax.jit(graphs.supervised_graph)(jnp.asarray(LABELS))), dense)

  def test_errors(self):
    with pytest.raises(ValueError, match=r"labels must be a rank-1.*\(2, 2\)"):
      graphs.supervised_graph(np.zeros((2, 2), int))
    with pytest.raises(ValueError, match="integer dtype.*float"):
      graphs.supervised_graph(np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"labels must be >= -1.*-2"):
      graphs.supervised_graph(np.array([0, -2]))
    with pytest.raises(ValueError, match="< num_classes = 3.*= 3"):
      graphs.supervised_graph(np.array([0, 3]), num_classes=3)
    with pytest.raises(ValueError, match="sparse=True needs concrete labels"):
      jax.jit(lambda l: graphs.supervised_graph(l, sparse=True).data)(
          jnp.asarray(LABELS))


class TestNormalizedSupervisedGraph:

  def test_entries_and_projector(self):
    g = np.asarray(graphs.normalized_supervised_graph(LABELS), np.float64)
    counts = {c: np.sum(LABELS == c) for c in range(3)}
    want = np.array([[float(LABELS[i] == LABELS[j] and LABELS[i] >= 0)
                      / counts.get(LABELS[i], 1) for j in range(8)]
                     for i in range(8)])
    np.testing.assert_allclose(g, want, rtol=1e-7)
    y = np.stack([(LABELS == c).astype(float) for c in range(3)], axis=1)
    np.testing.assert_allclose(g, y @ np.diag(1 / y.sum(0)) @ y.T, rtol=1e-7)
    np.testing.assert_allclose(g @ g, g, atol=1e-7)  # projector onto span(Y)
    np.testing.assert_allclose(g.sum(1), (LABELS >= 0).astype(float),
                               rtol=1e-7)

  def test_sparse_and_jit_match_dense(self):
    dense = np.asarray(graphs.normalized_supervised_graph(LABELS))
    np.testing.assert_allclose(np.asarray(graphs.normalized_supervised_graph(
        LABELS, sparse=True).todense()), dense, rtol=1e-7)
    np.testing.assert_allclose(np.asarray(jax.jit(
        graphs.normalized_supervised_graph)(jnp.asarray(LABELS))), dense,
                               rtol=1e-7)

  def test_all_unknown(self):
    assert not np.asarray(graphs.normalized_supervised_graph(
        np.array([-1, -1]))).any()
    assert graphs.supervised_graph(np.array([-1, -1]), sparse=True).nse == 0


class TestMixedGraph:

  def test_convex_combination(self):
    g_ssl = graphs.views_graph(4, 2, order="sample_major")
    g_sup = graphs.supervised_graph(np.repeat([0, 1, 0, 1], 2))
    for alpha in (0.0, 0.3, 1.0):
      got = np.asarray(graphs.mixed_graph(g_ssl, g_sup, alpha))
      np.testing.assert_allclose(
          got, (1 - alpha) * np.asarray(g_ssl) + alpha * np.asarray(g_sup),
          rtol=1e-7)
    np.testing.assert_array_equal(
        np.asarray(graphs.mixed_graph(g_ssl, g_sup, 0.0)), np.asarray(g_ssl))

  def test_bcoo_stays_bcoo_mixed_kinds_dense(self):
    g_ssl = graphs.views_graph(3, 2, sparse=True)
    g_sup = graphs.supervised_graph(np.array([0, 1, 0, 0, 1, 0]), sparse=True)
    want = 0.6 * np.asarray(g_ssl.todense()) + 0.4 * np.asarray(g_sup.todense())
    sp = graphs.mixed_graph(g_ssl, g_sup, 0.4)
    assert graphs.is_bcoo(sp) and sp.nse == g_ssl.nse + g_sup.nse
    np.testing.assert_allclose(np.asarray(sp.todense()), want, rtol=1e-6)
    graphs.validate_graph(sp, n=6)
    mixed = graphs.mixed_graph(g_ssl, g_sup.todense(), 0.4)
    assert not graphs.is_bcoo(mixed)
    np.testing.assert_allclose(np.asarray(mixed), want, rtol=1e-6)

  def test_errors(self):
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\].*1.5"):
      graphs.mixed_graph(jnp.eye(2), jnp.eye(2), 1.5)
    with pytest.raises(ValueError, match=r"same \(N, N\) shape.*\(2, 2\).*\(3, 3\)"):
      graphs.mixed_graph(jnp.eye(2), jnp.eye(3), 0.5)
    with pytest.raises(ValueError, match="g_sup must be a square"):
      graphs.mixed_graph(jnp.eye(2), jnp.ones((2, 3)), 0.5)


class TestSignedGraph:

  def test_values(self):
    g = np.asarray(graphs.signed_graph(4, [[0, 1], [1, 0], [2, 2]],
                                       [[3, 0]]))
    want = np.zeros((4, 4))
    want[0, 1] = want[1, 0] = want[2, 2] = 1.0
    want[0, 3] = want[3, 0] = -1.0
    np.testing.assert_array_equal(g, want)  # duplicate pair set, not summed
    sp = graphs.signed_graph(4, [[0, 1], [1, 0], [2, 2]], [[3, 0]], sparse=True)
    assert sp.nse == 5
    np.testing.assert_array_equal(np.asarray(sp.todense()), want)

  def test_empty_lists(self):
    assert not np.asarray(graphs.signed_graph(3, [], [])).any()
    np.testing.assert_array_equal(
        np.asarray(graphs.signed_graph(3, np.zeros((0, 2), int), [[0, 1]])),
        -np.asarray(graphs.signed_graph(3, [[1, 0]])))

  def test_errors(self):
    with pytest.raises(ValueError, match="must be disjoint.*both"):
      graphs.signed_graph(3, [[0, 1]], [[1, 0]])
    with pytest.raises(ValueError, match=r"negative_pairs must index rows in \[0, 3\)"):
      graphs.signed_graph(3, [[0, 1]], [[1, 3]])
    with pytest.raises(ValueError, match=r"positive_pairs must be an integer \(P, 2\)"):
      graphs.signed_graph(3, [[0, 1, 2]])
    with pytest.raises(ValueError, match="n must be an int >= 1"):
      graphs.signed_graph(0, [])


def _naive_knn(z, k, exclude_self=True, metric="cosine"):
  n = len(z)
  if metric == "cosine":
    zn = z / np.linalg.norm(z, axis=1, keepdims=True)
    score = zn @ zn.T
  else:
    score = -np.sum((z[:, None] - z[None]) ** 2, axis=-1)
  a = np.zeros((n, n))
  for i in range(n):
    cand = [j for j in range(n) if not (exclude_self and j == i)]
    cand.sort(key=lambda j: (-score[i, j], j))
    a[i, cand[:k]] = 1.0
  return a


class TestKnnGraph:

  @pytest.mark.parametrize("metric,sparse_out", [
      ("cosine", False), ("euclidean", False), ("cosine", True)])
  def test_symmetrisations_match_naive(self, metric, sparse_out):
    z = np.random.default_rng(3).normal(size=(9, 3))
    a = _naive_knn(z, 2, metric=metric)
    wants = {"union": np.maximum(a, a.T), "mutual": np.minimum(a, a.T),
             "average": (a + a.T) / 2}
    for mode, want in wants.items():
      g = graphs.knn_graph(z, 2, symmetrize=mode, metric=metric,
                           sparse=sparse_out)
      assert graphs.is_bcoo(g) == sparse_out
      g = np.asarray(graphs.to_dense(g))
      np.testing.assert_array_equal(g, want, err_msg=mode)
      np.testing.assert_array_equal(g, g.T)
      assert not np.diag(g).any()
    g_union = np.asarray(graphs.knn_graph(z, 2))
    assert (g_union.sum(1) >= 2).all()
    assert np.asarray(graphs.knn_graph(z, 2, symmetrize="average")).sum() == 18

  def test_include_self(self):
    z = np.random.default_rng(4).normal(size=(5, 3))
    np.testing.assert_array_equal(
        np.asarray(graphs.knn_graph(z, 1, exclude_self=False)), np.eye(5))
    np.testing.assert_array_equal(
        np.asarray(graphs.knn_graph(z, 2, exclude_self=False)),
        np.maximum(np.eye(5), np.asarray(graphs.knn_graph(z, 1))))

  def test_no_gradient_and_jit(self):
    z = jnp.asarray(np.random.default_rng(5).normal(size=(6, 2)), jnp.float32)
    grad = jax.grad(lambda z: jnp.sum(graphs.knn_graph(z, 2) @ z))(z)
    np.testing.assert_allclose(np.asarray(grad),
                               np.asarray(graphs.knn_graph(z, 2)).sum(0)[:, None]
                               * np.ones((6, 2)), rtol=1e-6)  # only through @ z

  def test_errors(self):
    z = jnp.ones((4, 2))
    with pytest.raises(ValueError, match=r"k must be <= N - 1 = 3.*\(4, 2\).*4"):
      graphs.knn_graph(z, 4)
    graphs.knn_graph(z, 4, exclude_self=False)
    with pytest.raises(ValueError, match="symmetrize must be one of"):
      graphs.knn_graph(z, 1, symmetrize="max")
    with pytest.raises(ValueError, match="metric must be one of"):
      graphs.knn_graph(z, 1, metric="l1")
    with pytest.raises(ValueError, match="z must be a rank-2"):
      graphs.knn_graph(jnp.ones(4), 1)
    with pytest.raises(ValueError, match="z must be finite"):
      graphs.knn_graph(z.at[0, 0].set(jnp.nan), 1)


class TestLaplacianAndConversion:

  def _graphs(self):
    rng = np.random.default_rng(6)
    yield _sym_random(rng, 6)
    yield np.asarray(graphs.signed_graph(6, [[0, 1], [2, 3]], [[0, 5], [1, 1]]))
    yield np.asarray(graphs.views_graph(3, 2))

  def test_row_sums_zero_and_quadratic_form(self):
    z = np.random.default_rng(7).normal(size=(6, 2))
    for g in self._graphs():
      lap = np.asarray(graphs.laplacian(g), np.float64)
      np.testing.assert_allclose(lap.sum(1), 0.0, atol=1e-5)
      np.testing.assert_allclose(lap, np.diag(g.sum(1)) - g, rtol=1e-6,
                                 atol=1e-6)
      pair = sum(g[i, j] * np.sum((z[i] - z[j]) ** 2)
                 for i in range(6) for j in range(6))
      np.testing.assert_allclose(2 * np.trace(z.T @ lap @ z), pair, rtol=1e-5)
      sp = graphs.laplacian(graphs.to_bcoo(g))
      assert graphs.is_bcoo(sp)
      np.testing.assert_allclose(np.asarray(sp.todense()), lap, rtol=1e-6,
                                 atol=1e-6)

  def test_normalized(self):
    g = np.asarray(graphs.views_graph(3, 3)) * 2.0
    g[:, 0] = g[0, :] = 0.0  # isolated row 0
    d = g.sum(1)
    s = np.where(d > 0, 1 / np.sqrt(np.where(d > 0, d, 1)), 0)
    want = np.eye(9) - s[:, None] * g * s[None, :]
    for gg in (g, graphs.to_bcoo(g)):
      got = np.asarray(graphs.to_dense(graphs.laplacian(gg, normalized=True)))
      np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)

  def test_round_trip(self):
    for g in self._graphs():
      sp = graphs.to_bcoo(g)
      assert graphs.is_bcoo(sp) and sp.nse == np.count_nonzero(g)
      assert graphs.to_bcoo(sp) is sp
      np.testing.assert_array_equal(np.asarray(graphs.to_dense(sp)),
                                    np.asarray(g, np.float32))
      np.testing.assert_array_equal(np.asarray(graphs.to_dense(g)),
                                    np.asarray(g, np.float32))
    padded = jax.jit(lambda g: graphs.to_bcoo(g, nse=5))(jnp.eye(3))
    assert padded.nse == 5
    np.testing.assert_array_equal(np.asarray(graphs.to_dense(padded)), np.eye(3))

  def test_views_graph_sparse(self):
    for order in ("view_major", "sample_major"):
      for self_loops in (False, True):
        sp = graphs.views_graph(4, 3, order=order, self_loops=self_loops,
                                sparse=True)
        assert sp.nse == 12 * (3 if self_loops else 2)
        np.testing.assert_array_equal(
            np.asarray(sp.todense()),
            np.asarray(graphs.views_graph(4, 3, order=order,
                                          self_loops=self_loops)))

  def test_errors(self):
    with pytest.raises(ValueError, match="g must be a square"):
      graphs.laplacian(jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="g must be a square"):
      graphs.to_dense(jnp.ones(3))


def test_to_bcoo_nse_pads_or_raises():
  g = graphs.to_bcoo(np.eye(3), nse=5)
  assert g.nse == 5
  np.testing.assert_array_equal(np.asarray(g.indices[3:]), 3)  # padding
  np.testing.assert_array_equal(np.asarray(graphs.degree(g)), np.ones(3))
  with pytest.raises(ValueError, match="nse must be >= the 3 nonzeros.*2"):
    graphs.to_bcoo(np.eye(3), nse=2)
