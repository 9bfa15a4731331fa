"""Property-based tests (hypothesis) of the public losses, graphs and theory.

Issue 6, "Reliability": random shapes, float32/float64 and invalid inputs
must give either a finite result or the documented ValueError, never
another exception type, a crash, a hang or a silent NaN; plus the cheap
invariances the maths guarantees (row permutations of (Z, G), rotations of
Z for rotation-invariant losses, documented scale invariances).

Speed: a few fixed shapes (`st.sampled_from`) so the jitted cores compile a
handful of times; `fast_compiles` skips XLA's optimisation passes; 20-40
examples per property (`_SETTINGS`, local to this file); about 1.5 min on
2 busy cores. Every test runs
under a SIGALRM guard (`_hang_guard`) so a hang fails instead of blocking.
"""

import contextlib
import signal

import hypothesis
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import import_experiment
from ssljax import graphs
from ssljax import losses

pytestmark = pytest.mark.usefixtures("fast_compiles")

# Local settings, not a loaded profile: other test files keep hypothesis'
# defaults. deadline=None: the first example of a shape pays a compile.
# function_scoped_fixture: the autouse fixtures here and in conftest run
# once per test, which is what they are meant to do.
_SETTINGS = hypothesis.settings(
    max_examples=20, deadline=None, print_blob=True,
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture,
                           hypothesis.HealthCheck.too_slow])
_CHEAP = hypothesis.settings(_SETTINGS, max_examples=40)  # no compile inside

_HANG_SECONDS = 120


@pytest.fixture(autouse=True)
def _hang_guard():
  """Fails a test that runs longer than _HANG_SECONDS instead of hanging."""
  def _raise(signum, frame):
    del signum, frame
    raise TimeoutError(f"property test exceeded {_HANG_SECONDS} s")
  previous = signal.signal(signal.SIGALRM, _raise)
  signal.setitimer(signal.ITIMER_REAL, _HANG_SECONDS)
  yield
  signal.setitimer(signal.ITIMER_REAL, 0)
  signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------- helpers --
# (N, K) and dtype together: two shapes × two dtypes would double the
# compiles (the bulk of the run time) for little extra coverage.
CONFIGS = [((4, 2), "float32"), ((6, 3), "float64")]
SHAPES = [shape for shape, _ in CONFIGS]
DTYPES = [dtype for _, dtype in CONFIGS]
# Bounded float32 values (exact in float64 too); includes 0 and repeats, so
# collapsed columns and duplicate rows are drawn often.
_ELEM = st.floats(-8, 8, width=32, allow_subnormal=False)


@contextlib.contextmanager
def _precision(dtype):
  with jax.enable_x64(dtype == "float64"):
    yield


def _tol(dtype):
  return {"float32": 2e-4, "float64": 1e-9}[dtype]


def _close(a, b, dtype, scale=1.0):
  np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                             rtol=_tol(dtype), atol=_tol(dtype) * scale)


def _assert_finite(x, what):
  x = np.asarray(x, np.float64)
  assert np.all(np.isfinite(x)), f"{what} is not finite: {x}"


@st.composite
def _dense_graph(draw, n):
  """A symmetric nonnegative (n, n) numpy graph: views, labels or weights."""
  kind = draw(st.sampled_from(["views", "labels", "weights"]))
  if kind == "views":
    return np.asarray(graphs.views_graph(n // 2, 2), np.float64)
  if kind == "labels":
    labels = draw(hnp.arrays(np.int32, n, elements=st.integers(-1, 2)))
    return np.asarray(graphs.supervised_graph(labels), np.float64)
  w = draw(hnp.arrays(np.float64, (n, n),
                      elements=st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.0])))
  return np.triu(w) + np.triu(w, 1).T


def _bcoo(g_np, dtype):
  """BCOO with nse = N² (padded): one shape per N, so one compile per N."""
  return graphs.to_bcoo(jnp.asarray(g_np, dtype), nse=g_np.shape[0]**2)


def _offdiag_weight(g_np):
  return float(g_np.sum() - np.trace(g_np))


def _draw_z_and_g(data, shape):
  """A bounded float32 z of ``shape`` (N, K) and a dense (N, N) graph."""
  z_np = data.draw(hnp.arrays(np.float32, shape, elements=_ELEM), "z")
  return z_np, data.draw(_dense_graph(shape[0]), "g")


# Graph-form losses, each as f(z, g). eps=0 is a documented valid value.
GRAPH_LOSSES = {
    "vicreg": losses.vicreg,
    "simclr": lambda z, g: losses.simclr(z, g, temperature=0.5),
    "barlow_degree": losses.barlow_twins,
    "barlow_unit": lambda z, g: losses.barlow_twins(z, g, column_norm="unit"),
    "barlow_eps0": lambda z, g: losses.barlow_twins(z, g, eps=0.0),
    "spectral": losses.spectral_contrastive,
}


def _needs_offdiag(name):
  """simclr documents a ValueError when Σ_{i≠j} G_ij <= 0."""
  return name.startswith("simclr")


# ------------------------------------------------- graph losses: validity --
@pytest.mark.parametrize("name", sorted(GRAPH_LOSSES))
@_SETTINGS
@given(data=st.data(), config=st.sampled_from(CONFIGS))
def test_graph_loss_finite_value_and_grad_dense_equals_bcoo(name, data, config):
  """Finite loss and gradient on any bounded finite (z, G); dense == BCOO;
  or simclr's documented ValueError for a G without off-diagonal weight."""
  shape, dtype = config
  loss = GRAPH_LOSSES[name]
  z_np, g_np = _draw_z_and_g(data, shape)
  with _precision(dtype):
    z, g = jnp.asarray(z_np, dtype), jnp.asarray(g_np, dtype)
    g_sp = _bcoo(g_np, dtype)
    if _needs_offdiag(name) and _offdiag_weight(g_np) <= 0:
      for graph in (g, g_sp):
        with pytest.raises(ValueError, match="off-diagonal weight"):
          loss(z, graph)
      return
    value = loss(z, g)
    assert value.dtype == jnp.dtype(dtype) and value.shape == ()
    _assert_finite(value, f"{name} value")
    _assert_finite(jax.grad(loss)(z, g), f"{name} gradient")
    # The BCOO path is a separate implementation: same value (its gradient
    # is compared with the dense one in the per-loss test files).
    _close(loss(z, g_sp), value, dtype, 1.0 + abs(float(value)))


# ---------------------------------------------- graph losses: invariances --
@pytest.mark.parametrize("name", sorted(GRAPH_LOSSES))
@_SETTINGS
@given(data=st.data(), config=st.sampled_from(CONFIGS))
def test_graph_loss_invariant_to_row_permutation(name, data, config):
  """Rows are samples: relabelling them (z → Pz, G → PGPᵀ) changes nothing."""
  shape, dtype = config
  n, _ = shape
  loss = GRAPH_LOSSES[name]
  z_np, g_np = _draw_z_and_g(data, shape)
  hypothesis.assume(not _needs_offdiag(name) or _offdiag_weight(g_np) > 0)
  perm = np.asarray(data.draw(st.permutations(range(n)), "perm"))
  with _precision(dtype):
    value = loss(jnp.asarray(z_np, dtype), jnp.asarray(g_np, dtype))
    permuted = loss(jnp.asarray(z_np[perm], dtype),
                    jnp.asarray(g_np[perm][:, perm], dtype))
    _close(permuted, value, dtype, 1.0 + abs(float(value)))


def _rotation(draw, k):
  """A random (k, k) orthogonal matrix (QR of a Gaussian, seeded by draw)."""
  seed = draw(st.integers(0, 2**32 - 1), "rotation seed")
  q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((k, k)))
  return q * np.sign(np.diag(r))


# Losses that depend on z only through z zᵀ (inner products of rows), hence
# invariant to z → zR for orthogonal R: VIC² ‖ZZᵀ − G‖², SimCLR (cosines)
# and VICReg's invariance term Σ G_ij‖z_i − z_j‖². VICReg's variance and
# covariance terms and Barlow Twins are NOT (they act on columns).
ROTATION_INVARIANT = {
    "spectral": losses.spectral_contrastive,
    "simclr": lambda z, g: losses.simclr(z, g, temperature=0.5),
    "vicreg_invariance": lambda z, g: losses.vicreg_terms(z, g)["invariance"],
}


@pytest.mark.parametrize("name", sorted(ROTATION_INVARIANT))
@_SETTINGS
@given(data=st.data(), config=st.sampled_from(CONFIGS))
def test_rotation_invariant_losses(name, data, config):
  shape, dtype = config
  loss = ROTATION_INVARIANT[name]
  z_np, g_np = _draw_z_and_g(data, shape)
  hypothesis.assume(not _needs_offdiag(name) or _offdiag_weight(g_np) > 0)
  r = _rotation(data.draw, shape[1])
  with _precision(dtype):
    g = jnp.asarray(g_np, dtype)
    value = loss(jnp.asarray(z_np, dtype), g)
    rotated = loss(jnp.asarray(z_np.astype(np.float64) @ r, dtype), g)
    # Scale: the terms that cancel (‖ZᵀZ‖² + ‖G‖² for VIC²) set the error.
    scale = 1.0 + float(np.sum(z_np.astype(np.float64)**2))**2 + np.sum(g_np**2)
    _close(rotated, value, dtype, scale)


@_SETTINGS
@given(data=st.data(), config=st.sampled_from(CONFIGS), column_norm=st.sampled_from(["degree",
                                                                  "unit"]))
def test_barlow_twins_invariant_to_positive_column_scaling(data, config,
                                                           column_norm):
  """Documented: 'The loss is invariant to a positive rescaling of each
  column of Z' (columns kept away from the eps floor)."""
  shape, dtype = config
  n, k = shape
  seed = data.draw(st.integers(0, 2**32 - 1), "seed")
  rng = np.random.default_rng(seed)
  z_np = rng.standard_normal(shape)
  scale_k = data.draw(hnp.arrays(np.float64, k, elements=st.floats(0.1, 10)))
  g_np = np.asarray(graphs.views_graph(n // 2, 2), np.float64)
  with _precision(dtype):
    g = jnp.asarray(g_np, dtype)
    f = lambda z: losses.barlow_twins(jnp.asarray(z, dtype), g,
                                      column_norm=column_norm)
    value = f(z_np)
    _close(f(z_np * scale_k), value, dtype, 1.0 + abs(float(value)))


# ---------------------------------------------------- two-view losses -----
TWO_VIEW_LOSSES = {
    "vicreg_two_view": losses.vicreg_two_view,
    "simclr_two_view": lambda a, b: losses.simclr_two_view(a, b,
                                                           temperature=0.3),
    "barlow_two_view": losses.barlow_twins_two_view,
    "barlow_two_view_eps0": lambda a, b: losses.barlow_twins_two_view(a, b,
                                                                      eps=0.0),
    "spectral_two_view": losses.spectral_contrastive_two_view,
    "frossl": lambda a, b: losses.frossl([a, b]),
}


@pytest.mark.parametrize("name", sorted(TWO_VIEW_LOSSES))
@_SETTINGS
@given(data=st.data(), config=st.sampled_from(CONFIGS))
def test_two_view_loss_finite_value_and_grad(name, data, config):
  """Any bounded finite pair of views: finite loss and gradient, or (frossl,
  an all-zero view, where ‖C/tr C‖ is 0/0) the documented ValueError."""
  shape, dtype = config
  loss = TWO_VIEW_LOSSES[name]
  z1_np = data.draw(hnp.arrays(np.float32, shape, elements=_ELEM), "z1")
  z2_np = data.draw(hnp.arrays(np.float32, shape, elements=_ELEM), "z2")
  with _precision(dtype):
    z1, z2 = jnp.asarray(z1_np, dtype), jnp.asarray(z2_np, dtype)
    if name == "frossl" and (not z1_np.any() or not z2_np.any()):
      with pytest.raises(ValueError, match="all zero"):
        loss(z1, z2)
      return
    value = loss(z1, z2)
    assert value.dtype == jnp.dtype(dtype) and value.shape == ()
    _assert_finite(value, f"{name} value")
    _assert_finite(jax.grad(loss)(z1, z2), f"{name} gradient")


@pytest.mark.parametrize("name", ["simclr_two_view", "spectral_two_view"])
@_SETTINGS
@given(data=st.data(), config=st.sampled_from(CONFIGS))
def test_two_view_rotation_invariance(name, data, config):
  """Both depend on the views only through z1_iᵀz2_j (and norms)."""
  shape, dtype = config
  loss = TWO_VIEW_LOSSES[name]
  z1_np = data.draw(hnp.arrays(np.float32, shape, elements=_ELEM), "z1")
  z2_np = data.draw(hnp.arrays(np.float32, shape, elements=_ELEM), "z2")
  r = _rotation(data.draw, shape[1])
  with _precision(dtype):
    f = lambda a, b: loss(jnp.asarray(a, dtype), jnp.asarray(b, dtype))
    value = f(z1_np, z2_np)
    rotated = f(z1_np.astype(np.float64) @ r, z2_np.astype(np.float64) @ r)
    scale = 1.0 + float(np.sum(z1_np.astype(np.float64)**2)
                        * np.sum(z2_np.astype(np.float64)**2))
    _close(rotated, value, dtype, scale)


def _well_conditioned(data, shape, name="z"):
  """Gaussian rows with column scales in [0.1, 10] (full rank a.s.)."""
  seed = data.draw(st.integers(0, 2**32 - 1), f"{name} seed")
  scale = data.draw(st.floats(0.1, 10), f"{name} scale")
  return np.random.default_rng(seed).standard_normal(shape) * scale


@_SETTINGS
@given(data=st.data(), config=st.sampled_from(CONFIGS),
       eps=st.sampled_from([0.0, 0.1]))
def test_wmse_finite_and_invariant_to_upper_triangular_maps(data, config, eps):
  """W-MSE: finite loss/gradient on full-rank views; documented invariance
  z_v → z_v A + b_v for an invertible upper-triangular A (eps = 0 only: the
  shrinkage toward I is not affine-equivariant)."""
  shape, dtype = config
  n, k = shape
  z1_np = _well_conditioned(data, shape, "z1")
  z2_np = z1_np + 0.5 * _well_conditioned(data, shape, "z2")
  with _precision(dtype):
    f = lambda a, b: losses.wmse_two_view(jnp.asarray(a, dtype),
                                          jnp.asarray(b, dtype), eps=eps)
    value = f(z1_np, z2_np)
    _assert_finite(value, "wmse value")
    assert -1e-5 <= float(value) <= 4.0 + 1e-5  # 2 − 2·mean cosine
    _assert_finite(jax.grad(f)(z1_np, z2_np), "wmse gradient")
    if eps == 0.0:
      upper = np.triu(data.draw(hnp.arrays(np.float64, (k, k),
                                           elements=st.floats(-1, 1))), 1)
      diag = data.draw(hnp.arrays(np.float64, k, elements=st.floats(0.5, 2)))
      a = upper + np.diag(diag)
      b1, b2 = np.arange(k), -np.arange(k)
      # float32 whitening loses ~cond(cov)·eps_f32; compare loosely there.
      tol = 1e-8 if dtype == "float64" else 2e-3
      np.testing.assert_allclose(float(f(z1_np @ a + b1, z2_np @ a + b2)),
                                 float(value), atol=tol)


@_SETTINGS
@given(data=st.data(), config=st.sampled_from(CONFIGS),
       views=st.sampled_from([2, 3]))
def test_frossl_invariant_to_positive_column_scaling(data, config, views):
  """Documented: the released normalisation makes FroSSL invariant to
  scaling each column of each view (away from the 1e-12 norm floor)."""
  shape, dtype = config
  z_np = np.stack([_well_conditioned(data, shape, f"view {v}")
                   for v in range(views)])
  scale = data.draw(hnp.arrays(np.float64, (views, 1, shape[1]),
                               elements=st.floats(0.01, 100)))
  with _precision(dtype):
    value = losses.frossl(jnp.asarray(z_np, dtype))
    _assert_finite(value, "frossl")
    # Bounded below by −V·log min(N, K) (documented).
    assert float(value) >= -views * np.log(min(shape)) - 1e-4
    _close(losses.frossl(jnp.asarray(z_np * scale, dtype)), value, dtype,
           1.0 + abs(float(value)))


@_SETTINGS
@given(data=st.data(), config=st.sampled_from(CONFIGS))
def test_edge_vic2_terms_finite_and_loss_is_the_sum(data, config):
  (b, k), dtype = config  # B edges
  z_np = data.draw(hnp.arrays(np.float32, (2, b, k), elements=_ELEM), "z")
  info_np = data.draw(hnp.arrays(np.float32, (3, 2, b),
                                 elements=st.floats(1 / 64, 4, width=32)), "info")
  with _precision(dtype):
    terms = losses.edge_vic2_terms(jnp.asarray(z_np, dtype),
                                   jnp.asarray(info_np, dtype))
    for key in ("loss", "attraction", "repulsion"):
      _assert_finite(terms[key], key)
      assert terms[key].dtype == jnp.dtype(dtype)
    # The attraction is a positively weighted sum of squared distances.
    assert float(terms["attraction"]) >= 0
    _close(terms["loss"], terms["attraction"] + terms["repulsion"], dtype,
           1.0 + abs(float(terms["repulsion"])))


# ------------------------------------------------ losses: invalid inputs --
# Each corruption maps a valid (z, g) (numpy) to an invalid one; all are
# documented ValueErrors of every graph-form loss. pytest.raises(ValueError)
# lets any other exception type through as a failure.
def _corrupt_z_value(value):
  def corrupt(z, g, draw):
    z = z.copy()
    z[draw(st.integers(0, z.shape[0] - 1)), draw(st.integers(0, z.shape[1] - 1))] = value
    return z, g
  return corrupt


def _corrupt_g_value(value):
  def corrupt(z, g, draw):
    g = g.copy()
    i, j = draw(st.integers(0, g.shape[0] - 1)), draw(st.integers(0, g.shape[0] - 1))
    g[i, j] = g[j, i] = value
    return z, g
  return corrupt


def _asymmetric(z, g, draw):
  g = g.copy()
  i = draw(st.integers(0, g.shape[0] - 2))
  g[i, i + 1] += draw(st.floats(1e-3, 10))  # > validate_graph's atol 1e-6
  return z, g


Z_G_CORRUPTIONS = {
    "z rank 1": lambda z, g, draw: (z[:, 0], g),
    "z rank 3": lambda z, g, draw: (z[None], g),
    "z one row": lambda z, g, draw: (z[:1], g[:1, :1]),
    "z no column": lambda z, g, draw: (z[:, :0], g),
    "z nan": _corrupt_z_value(np.nan),
    "z inf": _corrupt_z_value(-np.inf),
    "g wrong N": lambda z, g, draw: (z, np.pad(g, ((0, 1), (0, 1)))),
    "g not square": lambda z, g, draw: (z, g[:, :-1]),
    "g rank 1": lambda z, g, draw: (z, g[0]),
    "g asymmetric": _asymmetric,
    "g nan": _corrupt_g_value(np.nan),
    "g inf": _corrupt_g_value(np.inf),
}
ALL_GRAPH_LOSSES = dict(GRAPH_LOSSES, simclr_blocks=lambda z, g: losses.simclr(
    z, g, block_size=3))


@_CHEAP
@given(data=st.data(), name=st.sampled_from(sorted(ALL_GRAPH_LOSSES)),
       corruption=st.sampled_from(sorted(Z_G_CORRUPTIONS)),
       sparse=st.booleans(), dtype=st.sampled_from(DTYPES))
def test_graph_loss_invalid_z_or_g_raises_value_error(data, name, corruption,
                                                     sparse, dtype):
  z, g = np.ones((4, 2)) + np.arange(8).reshape(4, 2), np.asarray(
      graphs.views_graph(2, 2), np.float64)
  z, g = Z_G_CORRUPTIONS[corruption](z, g, data.draw)
  with _precision(dtype):
    g = jnp.asarray(g, dtype)
    if sparse and g.ndim == 2 and g.shape[0] == g.shape[1]:  # stored values
      g = graphs.to_bcoo(g)
    with pytest.raises(ValueError):
      ALL_GRAPH_LOSSES[name](jnp.asarray(z, dtype), g)


# (loss, keyword, invalid values): each a documented ValueError.
BAD_HYPERPARAMETERS = [
    (losses.vicreg, "eps", [-1e-3, -np.inf, np.nan]),
    (losses.simclr, "temperature", [0.0, -0.5, np.nan, np.inf, -np.inf]),
    (losses.simclr, "block_size", [0, -2, 2.5, True]),
    (losses.barlow_twins, "eps", [-1e-12, np.nan]),
    (losses.barlow_twins, "column_norm", ["rows", ""]),
]


@_CHEAP
@given(case=st.sampled_from([(f, kw, v) for f, kw, vs in BAD_HYPERPARAMETERS
                             for v in vs]))
def test_graph_loss_bad_hyperparameter_raises_value_error(case):
  loss, keyword, value = case
  z = jnp.ones((4, 2)) + jnp.arange(8.0).reshape(4, 2)
  with pytest.raises(ValueError, match=keyword):
    loss(z, graphs.views_graph(2, 2), **{keyword: value})


def _two_view_cases():
  ok = np.arange(8.0).reshape(4, 2) ** 1.5
  nan = ok.copy()
  nan[1, 1] = np.nan
  cases = []
  for name in ("vicreg_two_view", "simclr_two_view", "barlow_twins_two_view",
               "spectral_contrastive_two_view", "wmse_two_view"):
    f = getattr(losses, name)
    cases += [(f, (ok, ok[:3]), {}), (f, (ok, ok[:, :1]), {}),
              (f, (ok[0], ok[0]), {}), (f, (ok[None], ok[None]), {}),
              (f, (ok, nan), {}), (f, (ok + np.inf, ok), {})]
    if name != "simclr_two_view":  # documented N >= 1 there, N >= 2 here
      cases.append((f, (ok[:1], ok[:1]), {}))
  cases += [
      (losses.vicreg_two_view, (ok, ok), {"eps": -1.0}),
      (losses.simclr_two_view, (ok, ok), {"temperature": 0.0}),
      (losses.simclr_two_view, (ok, ok), {"block_size": 0}),
      (losses.barlow_twins_two_view, (ok, ok), {"eps": np.nan}),
      (losses.wmse_two_view, (ok, ok), {"eps": 1.0}),
      (losses.wmse_two_view, (ok, ok), {"eps": -0.1}),
      (losses.wmse_two_view, (ok, ok), {"whitening_size": 3}),  # ∤ N = 4
      (losses.wmse_two_view, (ok, ok), {"whitening_size": 2}),  # M <= K
      (losses.wmse_two_view, (ok[:2], ok[:2]), {}),  # N <= K with eps = 0
      (losses.wmse_whiten, (ok[:2],), {}),
      (losses.wmse_whiten, (ok,), {"eps": np.nan}),
      (lambda *v: losses.frossl(list(v)), (ok,), {}),  # V = 1
      (lambda *v: losses.frossl(list(v)), (ok, ok[:3]), {}),
      (lambda *v: losses.frossl(list(v)), (ok, nan), {}),
      (lambda *v: losses.frossl(list(v)), (ok, 0 * ok), {}),  # all-zero view
      (lambda v: losses.frossl(v), (ok[None],), {}),  # (1, N, K)
      (lambda v: losses.frossl(v), (ok,), {}),  # rank 2
      (losses.edge_vic2_terms, (np.ones((2, 1, 2)), np.ones((3, 2, 1))), {}),
      (losses.edge_vic2_terms, (np.ones((3, 4, 2)), np.ones((3, 2, 4))), {}),
      (losses.edge_vic2_terms, (np.ones((2, 4, 2)), np.ones((3, 4))), {}),
      (losses.edge_vic2_terms, (np.full((2, 4, 2), np.nan), np.ones((3, 2, 4))),
       {}),
      (losses.edge_vic2_terms, (np.ones((2, 4, 2)), np.full((3, 2, 4), np.inf)),
       {}),
  ]
  return cases


@_CHEAP
@given(case=st.sampled_from(_two_view_cases()), dtype=st.sampled_from(DTYPES))
def test_two_view_and_edge_losses_invalid_input_raises_value_error(case, dtype):
  loss, args, kwargs = case
  with _precision(dtype):
    with pytest.raises(ValueError):
      loss(*(jnp.asarray(a, dtype) for a in args), **kwargs)


# ================================================================ graphs ==
def _dense(g):
  """Dense float64 numpy copy; BCOO densified in numpy (duplicates summed,
  padding dropped, as BCOO.todense) so that no shape triggers a compile."""
  if not graphs.is_bcoo(g):
    return np.asarray(g, np.float64)
  n = g.shape[0]
  data = np.asarray(g.data, np.float64)
  rows, cols = np.asarray(g.indices).T
  keep = (rows < n) & (cols < n)
  out = np.zeros(g.shape)
  np.add.at(out, (rows[keep], cols[keep]), data[keep])
  return out


def _assert_symmetric(g_np):
  np.testing.assert_array_equal(g_np, g_np.T)


@_CHEAP
@given(n=st.sampled_from([1, 3]), v=st.sampled_from([1, 2, 3]),
       order=st.sampled_from(["view_major", "sample_major"]),
       self_loops=st.booleans())
def test_views_graph_structure(n, v, order, self_loops):
  """Symmetric 0/1, degree V − 1 (+1 with self loops), diagonal 0/1,
  dense == sparse, and the two orders are one graph up to a permutation."""
  g = _dense(graphs.views_graph(n, v, order=order, self_loops=self_loops))
  assert g.shape == (n * v, n * v)
  _assert_symmetric(g)
  assert set(np.unique(g)) <= {0.0, 1.0}
  np.testing.assert_array_equal(g.sum(axis=1), v - 1 + self_loops)
  np.testing.assert_array_equal(np.diag(g), float(self_loops))
  np.testing.assert_array_equal(
      _dense(graphs.views_graph(n, v, order=order, self_loops=self_loops,
                                sparse=True)), g)
  # Row v·n + i (view-major) is row i·V + v (sample-major).
  perm = np.arange(n * v).reshape(v, n).T.ravel()  # sample-major → view-major
  other = "sample_major" if order == "view_major" else "view_major"
  g_other = _dense(graphs.views_graph(n, v, order=other, self_loops=self_loops))
  if order == "view_major":
    np.testing.assert_array_equal(g[perm][:, perm], g_other)
  else:
    np.testing.assert_array_equal(g_other[perm][:, perm], g)


@_CHEAP
@given(bad=st.sampled_from([("n", 0), ("n", -3), ("n", 2.5), ("n", True),
                            ("n", np.inf), ("n", None), ("v", 0), ("v", -1),
                            ("v", 1.5), ("order", "random")]))
def test_views_graph_invalid_raises_value_error(bad):
  kwargs = {"n": 3, "v": 2, **dict([bad])}
  with pytest.raises(ValueError):
    graphs.views_graph(**kwargs)


@_CHEAP
@given(labels=hnp.arrays(np.int32, st.sampled_from([0, 3, 6]),
                         elements=st.integers(-1, 3)),
       normalized=st.booleans())
def test_label_graphs_structure(labels, normalized):
  """G_ij = [y_i = y_j ≥ 0] (/N_c normalised): symmetric, dense == sparse;
  normalised rows of labelled samples sum to 1 and G_n is a projector."""
  make = graphs.normalized_supervised_graph if normalized else graphs.supervised_graph
  g = _dense(make(labels))
  _assert_symmetric(g)
  same = (labels[:, None] == labels[None, :]) & (labels[:, None] >= 0)
  counts = same.sum(axis=1)
  expected = same / np.maximum(counts, 1)[:, None] if normalized else same
  np.testing.assert_allclose(g, expected, rtol=1e-6)
  np.testing.assert_allclose(_dense(make(labels, sparse=True)), g, rtol=1e-6)
  if normalized:
    np.testing.assert_allclose(g.sum(axis=1), (labels >= 0).astype(float),
                               rtol=1e-6)
    np.testing.assert_allclose(g @ g, g, atol=1e-6)


@_CHEAP
@given(case=st.sampled_from([
    (np.zeros((2, 2), np.int32), {}),  # rank 2
    (np.array([0.0, 1.0]), {}),  # float labels
    (np.array([True, False]), {}),  # bool labels
    (np.array([0, -2]), {}),  # < -1
    (np.array([0, 3]), {"num_classes": 3}),  # >= C
    (np.array([0, 1]), {"num_classes": 0}),
    (np.array([0, 1]), {"num_classes": 1.5}),
]), normalized=st.booleans(), sparse=st.booleans())
def test_label_graphs_invalid_raises_value_error(case, normalized, sparse):
  labels, kwargs = case
  make = graphs.normalized_supervised_graph if normalized else graphs.supervised_graph
  with pytest.raises(ValueError):
    make(labels, sparse=sparse, **kwargs)


@_CHEAP
@given(data=st.data(), n=st.sampled_from([1, 4]), alpha=st.floats(0, 1),
       sparse=st.booleans())
def test_mixed_graph_is_the_convex_mix(data, n, alpha, sparse):
  labels = data.draw(hnp.arrays(np.int32, n, elements=st.integers(-1, 2)))
  g_sup = graphs.supervised_graph(labels, sparse=sparse)
  g_ssl = graphs.to_bcoo(jnp.eye(n)) if sparse else jnp.eye(n)
  g = graphs.mixed_graph(g_ssl, g_sup, alpha)
  assert graphs.is_bcoo(g) == sparse
  expected = (1 - alpha) * np.eye(n) + alpha * _dense(g_sup)
  np.testing.assert_allclose(_dense(g), expected, rtol=1e-6, atol=1e-6)
  graphs.validate_graph(g, n)  # symmetric and finite


@_CHEAP
@given(bad=st.sampled_from([("alpha", -0.1), ("alpha", 1.5), ("alpha", np.nan),
                            ("alpha", np.inf), ("shape", None),
                            ("square", None)]))
def test_mixed_graph_invalid_raises_value_error(bad):
  kind, alpha = bad
  a, b = jnp.eye(3), jnp.ones((3, 3))
  if kind == "shape":
    a, alpha = jnp.eye(4), 0.5
  elif kind == "square":
    a, alpha = jnp.ones((3, 2)), 0.5
  with pytest.raises(ValueError):
    graphs.mixed_graph(a, b, alpha)


@_CHEAP
@given(data=st.data(), n=st.integers(1, 6), sparse=st.booleans())
def test_signed_graph_structure_or_conflict_error(data, n, sparse):
  pair = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
  pos = data.draw(st.lists(pair, max_size=6))
  neg = data.draw(st.lists(pair, max_size=6))
  pos_set = {frozenset(p) for p in pos}
  neg_set = {frozenset(p) for p in neg}
  if pos_set & neg_set:  # documented: a pair both positive and negative
    with pytest.raises(ValueError, match="disjoint"):
      graphs.signed_graph(n, np.array(pos, int).reshape(-1, 2),
                          np.array(neg, int).reshape(-1, 2), sparse=sparse)
    return
  g = _dense(graphs.signed_graph(n, np.array(pos, int).reshape(-1, 2),
                                 np.array(neg, int).reshape(-1, 2),
                                 sparse=sparse))
  _assert_symmetric(g)
  expected = np.zeros((n, n))
  for p in pos:
    expected[p[0], p[1]] = expected[p[1], p[0]] = 1
  for p in neg:
    expected[p[0], p[1]] = expected[p[1], p[0]] = -1
  np.testing.assert_array_equal(g, expected)


@_CHEAP
@given(case=st.sampled_from([
    (0, [[0, 1]], ()), (-1, (), ()), (2.5, (), ()),
    (3, [[0, 3]], ()), (3, [[-1, 0]], ()), (3, (), [[0, 5]]),
    (3, [[0.0, 1.0]], ()), (3, [0, 1], ()), (3, [[0, 1, 2]], ()),
]))
def test_signed_graph_invalid_raises_value_error(case):
  n, pos, neg = case
  with pytest.raises(ValueError):
    graphs.signed_graph(n, np.asarray(pos), np.asarray(neg))


@_SETTINGS
@given(data=st.data(), n=st.sampled_from([5, 7]), k=st.sampled_from([1, 2]),
       symmetrize=st.sampled_from(["union", "mutual", "average"]),
       metric=st.sampled_from(["cosine", "euclidean"]), sparse=st.booleans())
def test_knn_graph_structure(data, n, k, symmetrize, metric, sparse):
  """Symmetric, entries in {0, ½, 1}, zero diagonal (exclude_self), union
  degree >= k, average sums to N·k; dense == sparse."""
  z = data.draw(hnp.arrays(np.float32, (n, 3), elements=_ELEM))
  g = _dense(graphs.knn_graph(z, k, symmetrize=symmetrize, metric=metric))
  _assert_symmetric(g)
  assert set(np.unique(g)) <= {0.0, 0.5, 1.0}
  np.testing.assert_array_equal(np.diag(g), 0.0)
  if symmetrize == "union":
    assert np.all((g > 0).sum(axis=1) >= k)
  if symmetrize == "average":
    np.testing.assert_allclose(g.sum(), n * k)
  if sparse:
    np.testing.assert_array_equal(
        _dense(graphs.knn_graph(z, k, symmetrize=symmetrize, metric=metric,
                                sparse=True)), g)


@_CHEAP
@given(case=st.sampled_from([
    (np.ones((4, 2)), {"k": 4}),  # k > N − 1
    (np.ones((4, 2)), {"k": 5, "exclude_self": False}),
    (np.ones((4, 2)), {"k": 0}),
    (np.ones((4, 2)), {"k": 1.5}),
    (np.ones(4), {"k": 1}),
    (np.full((4, 2), np.nan), {"k": 1}),
    (np.ones((4, 2)), {"k": 1, "symmetrize": "max"}),
    (np.ones((4, 2)), {"k": 1, "metric": "l1"}),
]))
def test_knn_graph_invalid_raises_value_error(case):
  z, kwargs = case
  with pytest.raises(ValueError):
    graphs.knn_graph(z, **kwargs)


def _assert_edge_graph_invariants(eg):
  """EdgeGraph contract: sorted, unique, both orders with equal weight > 0."""
  keys = eg.rows.astype(np.int64) * eg.n + eg.cols
  assert np.all(np.diff(keys) > 0)  # sorted by (row, col), no duplicates
  assert np.all(eg.weights > 0) and np.all(np.isfinite(eg.weights))
  assert np.all((eg.rows >= 0) & (eg.rows < eg.n) & (eg.cols >= 0)
                & (eg.cols < eg.n))
  g = _dense(eg.to_bcoo())
  _assert_symmetric(g)
  np.testing.assert_allclose(eg.degree(), g.sum(axis=1), rtol=1e-6)


@_CHEAP
@given(data=st.data(), n=st.integers(1, 6), mode=st.sampled_from(["union",
                                                                  "sum"]))
def test_symmetrize_edges_structure(data, n, mode):
  e = data.draw(st.integers(0, 10))  # E = 0 (no edges) included
  rows = data.draw(hnp.arrays(np.int64, e, elements=st.integers(0, n - 1)))
  cols = data.draw(hnp.arrays(np.int64, e, elements=st.integers(0, n - 1)))
  w = data.draw(hnp.arrays(np.float64, e, elements=st.floats(0.5, 4)))
  eg = graphs.symmetrize_edges(n, rows, cols, w, mode=mode)
  _assert_edge_graph_invariants(eg)
  a = np.zeros((n, n))
  for i, j, x in zip(rows, cols, w):
    if mode == "union":
      a[i, j] = max(a[i, j], x)
    else:
      a[i, j] += x
  expected = np.maximum(a, a.T) if mode == "union" else a + a.T
  np.testing.assert_allclose(_dense(eg.to_bcoo()), expected, rtol=1e-6)


@_CHEAP
@given(case=st.sampled_from([
    (0, [0], [0], None, "union"), (np.inf, [0], [0], None, "union"),
    (None, [0], [0], None, "union"), (2.5, [0], [1], None, "union"),
    (3, [0], [3], None, "union"), (3, [-1], [0], None, "union"),
    (3, [0, 1], [1], None, "union"), (3, [0], [1], [0.0], "union"),
    (3, [0], [1], [np.nan], "union"), (3, [0], [1], [-np.inf], "union"),
    (3, [0], [1], [1.0, 2.0], "union"), (3, [0], [1], None, "max"),
]))
def test_symmetrize_edges_invalid_raises_value_error(case):
  n, rows, cols, weights, mode = case
  with pytest.raises(ValueError):
    graphs.symmetrize_edges(n, rows, cols, weights, mode=mode)


@_SETTINGS
@given(data=st.data(), n=st.integers(2, 12), mode=st.sampled_from(["union",
                                                                   "sum"]))
def test_knn_edges_structure_or_documented_error(data, n, mode):
  k = data.draw(st.integers(0, n + 1))
  x = data.draw(hnp.arrays(np.float32, (n, 2), elements=_ELEM))
  if not 1 <= k < n:
    with pytest.raises(ValueError):
      graphs.knn_edges(x, k, mode=mode)
    return
  eg = graphs.knn_edges(x, k, mode=mode)
  _assert_edge_graph_invariants(eg)
  assert np.all(eg.rows != eg.cols)  # never its own neighbour
  assert n * k <= eg.num_entries <= 2 * n * k
  assert np.all(np.bincount(eg.rows, minlength=n) >= k)


@_CHEAP
@given(case=st.sampled_from([
    (np.ones((4, 2)), np.inf), (np.ones((4, 2)), None), (np.ones((4, 2)), 1.5),
    (np.ones(4), 1), (np.full((4, 2), np.nan), 1), (np.ones((4, 2)), 1, "max"),
]))
def test_knn_edges_invalid_raises_value_error(case):
  x, k, *mode = case
  with pytest.raises(ValueError):
    graphs.knn_edges(x, k, mode=mode[0] if mode else "union")


@_CHEAP
@given(labels=hnp.arrays(np.int64, st.integers(1, 12),
                         elements=st.integers(-1, 3)),
       per_node=st.integers(1, 3), seed=st.integers(0, 10))
def test_supervised_edges_only_link_same_known_labels(labels, per_node, seed):
  eg = graphs.supervised_edges(labels, per_node, seed=seed)
  _assert_edge_graph_invariants(eg)
  assert np.all(labels[eg.rows] == labels[eg.cols])
  assert np.all(labels[eg.rows] >= 0) and np.all(eg.rows != eg.cols)
  # Every labelled row of a class with >= 2 members has an edge.
  sizes = {c: np.sum(labels == c) for c in np.unique(labels[labels >= 0])}
  deg = np.bincount(eg.rows, minlength=labels.size)
  for i, y in enumerate(labels):
    if y >= 0 and sizes[y] >= 2:
      assert deg[i] >= 1


@_CHEAP
@given(case=st.sampled_from([
    (np.array([0.0, 1.0]), 1), (np.zeros((2, 2), int), 1),
    (np.array([0, -2]), 1), (np.array([0, 0]), 0), (np.array([0, 0]), np.inf),
    (np.array([0, 0]), 1.5),
]))
def test_supervised_edges_invalid_raises_value_error(case):
  labels, per_node = case
  with pytest.raises(ValueError):
    graphs.supervised_edges(labels, per_node)


_BAD_FILES = {
    "empty.npy": lambda p: open(p, "wb").close(),
    "empty.npz": lambda p: open(p, "wb").close(),
    "junk.npy": lambda p: open(p, "wb").write(b"\x93NUMPY not an array"),
    "junk.npz": lambda p: open(p, "wb").write(b"PK\x03\x04 not a zip"),
    "text.npy": lambda p: open(p, "w").write("0 1\n1 2\n"),
    "truncated.npy": lambda p: (np.save(p, np.array([[0, 1], [1, 2]])),
                                _truncate(p, 5)),
    "object.npy": lambda p: np.save(p, np.array([[0, 1]], object),
                                    allow_pickle=True),
    "float.npy": lambda p: np.save(p, np.array([[0.0, 1.0]])),
    "rank1.npy": lambda p: np.save(p, np.array([0, 1])),
    "three.npy": lambda p: np.save(p, np.array([[0, 1, 2]])),
    "outside.npy": lambda p: np.save(p, np.array([[0, 3]])),
    "npz_as.npy": lambda p: _save_renamed_npz(p),
    "npy_as.npz": lambda p: _save_renamed_npy(p),
    "no_edges.npz": lambda p: np.savez(p, pairs=np.array([[0, 1]])),
    "bad_weights.npz": lambda p: np.savez(p, edges=np.array([[0, 1]]),
                                          weights=np.array([-1.0])),
    "nan_weights.npz": lambda p: np.savez(p, edges=np.array([[0, 1]]),
                                          weights=np.array([np.nan])),
    "short_weights.npz": lambda p: np.savez(p, edges=np.array([[0, 1]]),
                                            weights=np.array([1.0, 2.0])),
    "edges.txt": lambda p: open(p, "w").write("0 1\n"),
}


def _truncate(path, nbytes):
  data = open(path, "rb").read()
  open(path, "wb").write(data[:-nbytes])


def _save_renamed_npz(path):
  with open(path, "wb") as f:
    np.savez(f, edges=np.array([[0, 1]]))


def _save_renamed_npy(path):
  with open(path, "wb") as f:
    np.save(f, np.array([[0, 1]]))


@pytest.mark.parametrize("name", sorted(_BAD_FILES))
def test_load_edge_list_bad_file_raises_value_error(tmp_path, name):
  path = str(tmp_path / name)
  _BAD_FILES[name](path)
  with pytest.raises(ValueError):
    graphs.load_edge_list(path, 3)


def test_load_edge_list_missing_file_raises_file_not_found(tmp_path):
  with pytest.raises(FileNotFoundError):
    graphs.load_edge_list(str(tmp_path / "missing.npy"), 3)


@_CHEAP
@given(data=st.data(), n=st.integers(1, 6), weighted=st.booleans())
def test_load_edge_list_round_trip(tmp_path_factory, data, n, weighted):
  """Saved pairs (E = 0 included) load as symmetrize_edges of them."""
  e = data.draw(st.integers(0, 6))
  edges = data.draw(hnp.arrays(np.int64, (e, 2), elements=st.integers(0, n - 1)))
  w = data.draw(hnp.arrays(np.float64, e, elements=st.floats(0.5, 4)))
  path = str(tmp_path_factory.mktemp("edges") / ("e.npz" if weighted else "e.npy"))
  if weighted:
    np.savez(path, edges=edges, weights=w)
  else:
    np.save(path, edges)
  eg = graphs.load_edge_list(path, n)
  ref = graphs.symmetrize_edges(n, edges[:, 0], edges[:, 1],
                                w if weighted else None)
  _assert_edge_graph_invariants(eg)
  for field in ("rows", "cols", "weights"):
    np.testing.assert_array_equal(getattr(eg, field), getattr(ref, field))


# ================================================================ theory ==
from ssljax import theory  # noqa: E402  (kept next to its tests)


def _vic2(z, g):
  """‖ZZᵀ − G‖² in float64 numpy."""
  z = np.asarray(z, np.float64)
  return float(np.sum((z @ z.T - g)**2))


@_SETTINGS
@given(data=st.data(), config=st.sampled_from(CONFIGS),
       loss=st.sampled_from(["spectral_contrastive", "vic2", "vicreg_squared"]))
def test_optimal_embedding_attains_the_eckart_young_minimum(data, config, loss):
  """Z* is finite, (N, k), and its VIC² loss is the Eckart–Young minimum
  Σ_{i>k} μ_i² + Σ_{i<=k} min(μ_i, 0)², which no random Z beats."""
  (n, _), dtype = config
  g = data.draw(_dense_graph(n), "g")
  k = data.draw(st.integers(1, n), "k")
  with _precision(dtype):
    z = np.asarray(theory.optimal_embedding(jnp.asarray(g, dtype), k,
                                            loss=loss), np.float64)
  assert z.shape == (n, k)
  _assert_finite(z, "Z*")
  mu = np.sort(np.linalg.eigvalsh(g))[::-1]
  minimum = np.sum(mu[k:]**2) + np.sum(np.minimum(mu[:k], 0)**2)
  scale = 1.0 + np.sum(g**2)
  np.testing.assert_allclose(_vic2(z, g), minimum, atol=_tol(dtype) * 10 * scale)
  z_rand = _well_conditioned(data, (n, k))
  assert _vic2(z, g) <= _vic2(z_rand, g) + _tol(dtype) * 10 * scale


@_SETTINGS
@given(data=st.data(), config=st.sampled_from(CONFIGS))
def test_optimal_embedding_barlow_twins_is_optimal_or_documented_error(data,
                                                                      config):
  """Under the class-size normalised graph (a projector) and k <= C, Z* has
  loss 0; the un-normalised YYᵀ with a class of size >= 2 has no closed
  form: ValueError (documented)."""
  (n, _), dtype = config
  labels = data.draw(hnp.arrays(np.int32, n, elements=st.integers(0, 2)))
  c = len(np.unique(labels))
  k = data.draw(st.integers(1, c))
  with _precision(dtype):
    g_n = graphs.normalized_supervised_graph(labels, dtype=dtype)
    z = theory.optimal_embedding(g_n, k, loss="barlow_twins")
    _assert_finite(z, "Z*")
    loss = losses.barlow_twins(z, g_n, column_norm="unit", lambda_offdiag=1.0)
    assert float(loss) <= (1e-3 if dtype == "float32" else 1e-9)
    g = graphs.supervised_graph(labels, dtype=dtype)
    if np.max(np.bincount(labels)) >= 2:  # eigenvalues N_c ≠ 1 present
      hypothesis.assume(np.sum(np.bincount(labels) == 1) < k)
      with pytest.raises(ValueError, match="closed-form"):
        theory.optimal_embedding(g, k, loss="barlow_twins")


@_CHEAP
@given(case=st.sampled_from([
    (np.eye(3), 0, {}), (np.eye(3), 4, {}), (np.eye(3), 1.5, {}),
    (np.eye(3), True, {}), (np.eye(3), 1, {"loss": "vicreg"}),
    (np.eye(3), 1, {"loss": "simclr"}), (np.eye(3), 1, {"loss": "mse"}),
    (np.triu(np.ones((3, 3))), 1, {}), (np.full((3, 3), np.nan), 1, {}),
    (np.ones((3, 2)), 1, {}), (np.ones(3), 1, {}),
]))
def test_optimal_embedding_invalid_raises_value_error(case):
  g, k, kwargs = case
  with pytest.raises(ValueError):
    theory.optimal_embedding(jnp.asarray(g), k, **kwargs)


@_SETTINGS
@given(data=st.data(), config=st.sampled_from(CONFIGS), d=st.sampled_from([2,
                                                                          5]))
def test_linear_optimal_weights_beats_random_weights(data, config, d):
  (n, _), dtype = config
  g = data.draw(_dense_graph(n), "g")
  k = data.draw(st.integers(1, n), "k")
  x = _well_conditioned(data, (n, d), "x")
  with _precision(dtype):
    w = np.asarray(theory.linear_optimal_weights(jnp.asarray(x, dtype),
                                                 jnp.asarray(g, dtype), k),
                   np.float64)
  assert w.shape == (d, k)
  _assert_finite(w, "W*")
  best = _vic2(x @ w, g)
  scale = 1.0 + np.sum(g**2)
  for _ in range(3):  # any W, in particular random ones and W* ± noise
    w_rand = _well_conditioned(data, (d, k), "w")
    assert best <= _vic2(x @ w_rand, g) + _tol(dtype) * 10 * scale
    assert best <= _vic2(x @ (w + 1e-2 * w_rand), g) + _tol(dtype) * 10 * scale


@hypothesis.settings(_SETTINGS, max_examples=15)  # two eigh/subspace solves each
@given(data=st.data(), n=st.sampled_from([4, 6]), k=st.sampled_from([1, 3]),
       ridge=st.floats(0, 5), sigma=st.floats(0.5, 3))
def test_kernel_embedding_is_stationary_and_methods_agree(data, n, k, ridge,
                                                          sigma):
  """float64: the gradient of ‖ZZᵀ − G‖² + ridge·Tr(ZᵀK⁻¹Z) vanishes at Z*,
  coef = K⁻¹Z*, and eigh and subspace reach the same objective."""
  with _precision("float64"):
    x = _well_conditioned(data, (n, 2), "x")
    kmat = np.asarray(theory.gaussian_kernel(x, x, sigma)) + 1e-3 * np.eye(n)
    g = data.draw(_dense_graph(n), "g")
    out = theory.kernel_embedding(jnp.asarray(kmat), jnp.asarray(g), k, ridge,
                                  method="eigh")
    z = np.asarray(out.z)
    _assert_finite(z, "Z*")
    kinv = np.linalg.inv(kmat)
    objective = lambda z: _vic2(z, g) + ridge * np.trace(z.T @ kinv @ z)
    grad = 4 * (z @ (z.T @ z) - g @ z) + 2 * ridge * kinv @ z
    scale = 1.0 + np.sum(g**2) + ridge * np.linalg.norm(kinv, 2)
    np.testing.assert_allclose(grad, 0, atol=1e-6 * scale)
    np.testing.assert_allclose(kmat @ np.asarray(out.coef), z, atol=1e-6 * scale)
    sub = theory.kernel_embedding(jnp.asarray(kmat), jnp.asarray(g), k, ridge,
                                  method="subspace")
    np.testing.assert_allclose(objective(np.asarray(sub.z)), objective(z),
                               rtol=1e-6, atol=1e-6 * scale)
    assert objective(z) <= objective(_well_conditioned(data, (n, k))) + 1e-9


@_CHEAP
@given(case=st.sampled_from([
    ("kernel", -np.eye(3)), ("kernel", np.zeros((3, 3))),
    ("kernel", np.triu(np.ones((3, 3)))), ("kernel", np.full((3, 3), np.inf)),
    ("g", np.eye(4)), ("g", np.full((3, 3), np.nan)), ("k", 0), ("k", 4),
    ("ridge", -1.0), ("ridge", np.nan), ("ridge", np.inf),
    ("method", "lanczos"),
]))
def test_kernel_embedding_invalid_raises_value_error(case):
  kwargs = {"kernel_matrix": np.eye(3), "g": np.eye(3), "k": 1, "ridge": 0.1,
            "method": "eigh"}
  kwargs["kernel_matrix" if case[0] == "kernel" else case[0]] = case[1]
  with pytest.raises(ValueError):
    theory.kernel_embedding(**kwargs)


@_CHEAP
@given(data=st.data(), kernel=st.sampled_from(["gaussian", "laplacian"]),
       sigma=st.floats(0.1, 10))
def test_kernels_are_symmetric_in_unit_interval(data, kernel, sigma):
  x = data.draw(hnp.arrays(np.float64, (4, 2), elements=st.floats(-5, 5)))
  f = theory.gaussian_kernel if kernel == "gaussian" else theory.laplacian_kernel
  kmat = np.asarray(f(x, x, sigma))
  np.testing.assert_allclose(kmat, kmat.T, atol=1e-6)
  assert np.all((kmat > -1e-7) & (kmat <= 1 + 1e-6))
  np.testing.assert_allclose(np.diag(kmat), 1.0, atol=1e-6)


@_CHEAP
@given(case=st.sampled_from([(np.ones((3, 2)), np.ones((3, 2)), s)
                             for s in (0.0, -1.0, np.nan)]
                            + [(np.ones((3, 2)), np.ones((3, 3)), 1.0),
                               (np.ones(3), np.ones((3, 1)), 1.0)]),
       kernel=st.sampled_from(["gaussian", "laplacian"]))
def test_kernels_invalid_raise_value_error(case, kernel):
  f = theory.gaussian_kernel if kernel == "gaussian" else theory.laplacian_kernel
  with pytest.raises(ValueError):
    f(*case)


@_SETTINGS
@given(data=st.data(), config=st.sampled_from(CONFIGS), ridge=st.floats(0, 3),
       c=st.sampled_from([1, 2]))
def test_ridge_head_is_the_minimiser_and_matches_lemma1(data, config, ridge, c):
  """(W*, b*) is a stationary point of the convex eq. (1) (no perturbation
  lowers it); Lemma 1's trace objective with G = y yᵀ equals its value;
  Theorem 2's σ-gradient is <= 0 for this PSD G."""
  (n, k), dtype = config
  f = _well_conditioned(data, (n, k), "f")
  y = _well_conditioned(data, (n, c), "y")
  with _precision(dtype):
    w, b = theory.ridge_head(f, y, ridge)
    _assert_finite(w, "W*")
    _assert_finite(b, "b*")
    best = float(theory.ridge_head_loss(f, y, w, b, ridge))
    tol = _tol(dtype) * 10 * (1.0 + best)
    for _ in range(3):
      dw = 1e-2 * _well_conditioned(data, w.shape, "dw")
      db = 1e-2 * _well_conditioned(data, b.shape, "db")
      assert best <= float(theory.ridge_head_loss(f, y, w + dw, b + db,
                                                  ridge)) + tol
    g = y @ y.T
    np.testing.assert_allclose(float(theory.lemma1_objective(f, g, ridge)), best,
                               rtol=1e-3 if dtype == "float32" else 1e-8,
                               atol=tol)
    sigma_grad = np.asarray(theory.sigma_gradient(f, g, ridge))
    _assert_finite(sigma_grad, "σ-gradient")
    assert np.all(sigma_grad <= tol)


@_SETTINGS
@given(data=st.data(), p=st.sampled_from([4, 6]), k=st.sampled_from([1, 2]),
       extra=st.sampled_from([0, 1]))
def test_orthogonal_head_is_the_minimum_over_orthonormal_heads(data, p, k,
                                                               extra):
  c = k + extra
  z = _well_conditioned(data, (p, k), "z")
  y = _well_conditioned(data, (p, c), "y")
  value, w = theory.orthogonal_head_objective(z, y)
  w = np.asarray(w, np.float64)
  np.testing.assert_allclose(w @ w.T, np.eye(k), atol=1e-5)
  loss = lambda w: float(np.sum((z @ w - y)**2) / p)
  np.testing.assert_allclose(float(value), loss(w), rtol=1e-4, atol=1e-4)
  for _ in range(3):  # random heads with orthonormal rows do no better
    q, _ = np.linalg.qr(_well_conditioned(data, (c, k), "w").T.T)
    assert float(value) <= loss(q.T) + 1e-4 * (1 + float(value))


@_CHEAP
@given(case=st.sampled_from([
    (theory.ridge_head, (np.ones((3, 2)), np.ones((4, 1)), 0.1)),
    (theory.ridge_head, (np.ones((3, 2)), np.ones((3, 1)), -0.1)),
    (theory.ridge_head, (np.ones((3, 2)), np.ones((3, 1)), np.nan)),
    (theory.ridge_head, (np.ones((3, 2)), np.ones((3, 1)), np.inf)),
    (theory.ridge_head, (np.full((3, 2), np.nan), np.ones((3, 1)), 0.1)),
    (theory.ridge_head, (np.ones(3), np.ones((3, 1)), 0.1)),
    (theory.ridge_head, (np.ones((0, 2)), np.ones((0, 1)), 0.1)),
    (theory.ridge_head_loss, (np.ones((3, 2)), np.ones((3, 1)), np.ones((3, 1)),
                              np.ones(1), 0.1)),
    (theory.ridge_head_loss, (np.ones((3, 2)), np.ones((3, 1)), np.ones((2, 1)),
                              np.ones(2), 0.1)),
    (theory.ridge_head_loss, (np.ones((3, 2)), np.ones((3, 1)), np.ones((2, 1)),
                              np.ones(1), -1.0)),
    (theory.lemma1_objective, (np.ones((3, 2)), np.eye(4), 0.1)),
    (theory.lemma1_objective, (np.ones((3, 2)), np.triu(np.ones((3, 3))), 0.1)),
    (theory.lemma1_objective, (np.ones((3, 2)), np.eye(3), -0.1)),
    (theory.sigma_gradient, (np.ones((3, 2)), np.full((3, 3), np.inf), 0.1)),
    (theory.orthogonal_head_objective, (np.ones((3, 2)), np.ones((3, 1)))),
    (theory.orthogonal_head_objective, (np.ones((3, 1)), np.ones((4, 1)))),
    (theory.orthogonal_head_objective, (np.ones((3, 1)), np.full((3, 1), np.nan))),
]))
def test_supervised_theory_invalid_raises_value_error(case):
  f, args = case
  with pytest.raises(ValueError):
    f(*args)


def _orthonormal_rows(data, z, d):
  q, _ = np.linalg.qr(_well_conditioned(data, (d, z), "w").astype(np.float64))
  return q.T  # (z, d), W Wᵀ = I


def _symmetric(data, d):
  a = _well_conditioned(data, (d, d), "a")
  return (a + a.T) / 4


@_CHEAP
@given(data=st.data(), d=st.sampled_from([3, 4]), z=st.sampled_from([1, 2]))
def test_stiefel_velocity_is_tangent_and_descends(data, d, z):
  """For W with orthonormal rows: ẆWᵀ = 0 (the flow stays on the Stiefel
  manifold) and d/dt Tr(WAWᵀ) = 2Tr(ẆAWᵀ) <= 0 (it is a gradient flow)."""
  with _precision("float64"):
    a = _symmetric(data, d)
    w = _orthonormal_rows(data, z, d)
    v = np.asarray(theory.stiefel_flow_velocity(a, w))
    np.testing.assert_allclose(v @ w.T, 0, atol=1e-10 * (1 + np.abs(a).max()))
    assert 2 * np.trace(v @ a @ w.T) <= 1e-10 * (1 + np.abs(a).max())


@_SETTINGS
@given(data=st.data(), retraction=st.sampled_from(["polar", "qr"]),
       tangent=st.booleans())
def test_projected_gradient_descent_keeps_orthonormal_weights(data, retraction,
                                                              tangent):
  d, h, z = 3, 4, 2
  with _precision("float64"):
    a = _symmetric(data, d)
    w1 = _orthonormal_rows(data, d, h).T  # (h, d), orthonormal columns
    w2 = _orthonormal_rows(data, z, h)  # (z, h), orthonormal rows
    w1_t, w2_t, path = theory.projected_gradient_descent(
        a, w1, w2, lr=0.05, steps=5, retraction=retraction, tangent=tangent)
    _assert_finite(path, "W path")
    np.testing.assert_allclose(np.asarray(w1_t).T @ w1_t, np.eye(d), atol=1e-9)
    np.testing.assert_allclose(np.asarray(w2_t) @ np.asarray(w2_t).T, np.eye(z),
                               atol=1e-9)
    euler = theory.stiefel_flow_euler(a, np.asarray(w2 @ w1), lr=0.05, steps=5)
    assert euler.shape == path.shape == (6, z, d)
    _assert_finite(euler, "Euler path")


@_CHEAP
@given(case=st.sampled_from([
    ("a", np.triu(np.ones((3, 3)))), ("a", np.full((3, 3), np.nan)),
    ("a", np.ones((3, 2))), ("w0", np.ones((1, 4))), ("w0", 2 * np.eye(1, 3)),
    ("lr", 0.0), ("lr", -0.1), ("lr", np.nan), ("lr", np.inf),
    ("steps", -1), ("steps", 2.0), ("steps", True),
]))
def test_stiefel_flow_euler_invalid_raises_value_error(case):
  kwargs = {"a": np.eye(3), "w0": 0.5 * np.eye(1, 3), "lr": 0.1, "steps": 2}
  kwargs[case[0]] = case[1]
  with pytest.raises(ValueError):
    theory.stiefel_flow_euler(**kwargs)


@_CHEAP
@given(case=st.sampled_from([
    ("ts", [0.0]), ("ts", [1.0, 0.0]), ("ts", [0.0, np.nan]),
    ("ts", [[0.0, 1.0]]), ("w0", 2 * np.eye(1, 3)), ("a", np.ones((3, 2))),
]))
def test_stiefel_flow_invalid_raises_value_error_before_solving(case):
  kwargs = {"a": np.eye(3), "w0": 0.5 * np.eye(1, 3), "ts": [0.0, 1.0]}
  kwargs[case[0]] = np.asarray(case[1])
  with pytest.raises(ValueError):
    theory.stiefel_flow(**kwargs)


@_CHEAP
@given(case=st.sampled_from([
    (theory.projected_gradient_descent, {"w1": np.ones((4, 3))}),  # not orth.
    (theory.projected_gradient_descent, {"w2": np.ones((2, 4))}),
    (theory.projected_gradient_descent, {"retraction": "cayley"}),
    (theory.projected_gradient_descent, {"lr": -1.0}),
    (theory.stiefel_weight_flow, {"ts": np.array([0.0, 0.0])}),
    (theory.stiefel_weight_flow, {"w1": np.eye(4, 2)}),  # d mismatch
]))
def test_weight_dynamics_invalid_raises_value_error(case):
  f, override = case
  kwargs = {"a": np.eye(3), "w1": np.eye(4, 3), "w2": np.eye(2, 4)}
  if f is theory.projected_gradient_descent:
    kwargs.update(lr=0.1, steps=2)
  else:
    kwargs.update(ts=np.array([0.0, 1.0]))
  kwargs.update(override)
  with pytest.raises(ValueError):
    f(**kwargs)


@_CHEAP
@given(t=hnp.arrays(np.float64, st.integers(1, 4), elements=st.floats(0, 50)),
       lam=st.floats(0.01, 10), s0=st.floats(0.01, 10))
def test_frossl_symmetric_singular_values_finite_and_between_s0_and_limit(
    t, lam, s0):
  """s(t) stays between s0 and its limit 1/√λ for t >= 0 (monotone)."""
  with _precision("float64"):
    s = np.asarray(theory.frossl_symmetric_singular_values(t, lam, s0))
  _assert_finite(s, "s(t)")
  lo, hi = sorted([s0, 1 / np.sqrt(lam)])
  assert np.all((s >= lo * (1 - 1e-9)) & (s <= hi * (1 + 1e-9)))


def _paper_eq34(*args):
  """The printed FroSSL eq. 34; it lives in experiments/frossl_dynamics.py."""
  return import_experiment("frossl_dynamics").paper_eq34(*args)


@_CHEAP
@given(case=st.sampled_from([
    (theory.frossl_symmetric_singular_values, (1.0, 0.0, 1.0)),
    (theory.frossl_symmetric_singular_values, (1.0, 1.0, -0.5)),
    (theory.frossl_symmetric_singular_values, (np.nan, 1.0, 1.0)),
    (theory.frossl_symmetric_singular_values, (np.zeros((2, 2)), 1.0, 1.0)),
    (theory.frossl_symmetric_singular_values, (-1.0, 1.0, 2.0)),  # t < 0
    (theory.frossl_symmetric_singular_values, (1.0, np.ones((2, 2)), 1.0)),
    (theory.frossl_symmetric_singular_values, (1.0, np.ones(2), np.ones(3))),
    (_paper_eq34, (1.0, 1.0, 0.0, 1.0)),
    (_paper_eq34, (1.0, np.nan, 1.0, 1.0)),
    (theory.frossl_linear_dynamics, ([0.0, 1.0], 1.0, -1.0, 1.0, 1.0)),
    (theory.frossl_linear_dynamics, ([1.0, 0.0], 1.0, 1.0, 1.0, 1.0)),
    (theory.frossl_linear_dynamics, ([0.0, 1.0], np.ones(2), 1.0, np.ones(3),
                                     1.0)),
    (theory.frossl_linear_loss, (np.ones((2, 3)), np.ones((2, 4)),
                                 np.ones((5, 3)), np.ones((5, 3)))),
    (theory.frossl_linear_loss, (np.ones((2, 3)), np.ones((2, 3)),
                                 np.ones((5, 3)), np.full((5, 3), np.inf))),
    (theory.contrastive_data_matrix, (np.ones((4, 3)), np.ones((4, 2)))),
    (theory.contrastive_data_matrix, (np.ones((4, 3)), np.ones((4, 3)),
                                      np.full((4, 3), np.nan))),
    (theory.contrastive_data_matrix, (np.ones(4), np.ones(4))),
]))
def test_frossl_and_data_dynamics_invalid_raise_value_error(case):
  f, args = case
  with pytest.raises(ValueError):
    f(*args)


@_CHEAP
@given(data=st.data(), n=st.sampled_from([3, 6]), d=st.sampled_from([2, 3]),
       negatives=st.booleans())
def test_contrastive_data_matrix_symmetric_and_linear_loss_nonnegative(
    data, n, d, negatives):
  x = data.draw(hnp.arrays(np.float64, (n, d), elements=st.floats(-5, 5)))
  xp = data.draw(hnp.arrays(np.float64, (n, d), elements=st.floats(-5, 5)))
  xn = xp[::-1] if negatives else None
  a = np.asarray(theory.contrastive_data_matrix(x, xp, xn))
  _assert_finite(a, "A")
  np.testing.assert_allclose(a, a.T, atol=1e-9)
  w = data.draw(hnp.arrays(np.float64, (2, d), elements=st.floats(-2, 2)))
  loss = theory.frossl_linear_loss(w, w, x, xp)
  _assert_finite(loss, "FroSSL linear loss")
  assert float(loss) >= 0  # a sum of squares
