"""BCOO graphs in the graph-form losses: same value and gradient as dense.

VICReg here (its dense tests are in tests/test_losses.py); spectral
contrastive and Barlow Twins have their BCOO tests in
tests/test_losses_spectral.py and tests/test_losses_barlow.py. BCOO graphs
are padded to one nse so the loss compiles once. float64, rtol 1e-12 unless
stated.
"""

import jax
from jax.experimental import sparse
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import pad_bcoo as _pad
from ssljax import graphs
from ssljax import losses

TERMS = ("invariance", "variance", "covariance", "loss")
N, K = 8, 4


def _z(rng):
  return rng.normal(size=(N, K)) * np.linspace(0.3, 2.0, K) + 1.0


def _graphs(rng):
  yield graphs.views_graph(4, 2, sparse=True, dtype=jnp.float64)
  yield graphs.views_graph(2, 4, order="sample_major", self_loops=True,
                           sparse=True, dtype=jnp.float64)
  yield graphs.supervised_graph(np.array([0, 1, 0, -1, 1, 2, 2, 0]),
                                sparse=True, dtype=jnp.float64)
  yield graphs.mixed_graph(graphs.views_graph(4, 2, sparse=True),
                           graphs.supervised_graph(np.repeat([0, 1], 4),
                                                   sparse=True), 0.3)
  a = rng.uniform(size=(N, N)) * (rng.uniform(size=(N, N)) < 0.3)
  yield graphs.to_bcoo(a + a.T)


class TestVicregBcoo:

  def test_terms_match_dense(self, x64):
    rng = np.random.default_rng(0)
    for g_sp in map(_pad, _graphs(rng)):
      z = _z(rng)
      got = losses.vicreg_terms(z, g_sp, inv_weight=2.0)
      want = losses.vicreg_terms(z, graphs.to_dense(g_sp), inv_weight=2.0)
      for key in TERMS:
        np.testing.assert_allclose(float(got[key]), float(want[key]),
                                   rtol=1e-12, atol=1e-14, err_msg=key)

  def test_gradient_matches_dense(self, x64):
    rng = np.random.default_rng(1)
    for g_sp in map(_pad, _graphs(rng)):
      z = jnp.asarray(_z(rng))
      g = graphs.to_dense(g_sp)
      np.testing.assert_allclose(np.asarray(jax.grad(losses.vicreg)(z, g_sp)),
                                 np.asarray(jax.grad(losses.vicreg)(z, g)),
                                 rtol=1e-11, atol=1e-13)

  def test_duplicates_and_padding(self, x64):
    # (0, 1) stored as 0.5 + 0.5, (1, 0) once, one padding slot (index N).
    g_sp = sparse.BCOO((jnp.array([0.5, 0.5, 1.0, 7.0]),
                        jnp.array([[0, 1], [0, 1], [1, 0], [4, 4]])),
                       shape=(4, 4))
    g = np.zeros((4, 4))
    g[0, 1] = g[1, 0] = 1.0
    z = _z(np.random.default_rng(2))[:4]
    for key in TERMS:
      np.testing.assert_allclose(float(losses.vicreg_terms(z, g_sp)[key]),
                                 float(losses.vicreg_terms(z, g)[key]),
                                 rtol=1e-12, err_msg=key)

  def test_under_jit(self):
    rng = np.random.default_rng(3)
    z = jnp.asarray(_z(rng), jnp.float32)
    g_sp = graphs.views_graph(4, 2, sparse=True)
    np.testing.assert_allclose(float(jax.jit(losses.vicreg)(z, g_sp)),
                               float(losses.vicreg(z, graphs.to_dense(g_sp))),
                               rtol=1e-5)

  def test_errors(self):
    g_sp = graphs.views_graph(2, 2, sparse=True)
    with pytest.raises(ValueError, match=r"g must have shape \(6, 6\).*\(4, 4\)"):
      losses.vicreg(jnp.ones((6, 2)), g_sp)
    asym = graphs.to_bcoo(np.triu(np.ones((4, 4))))
    with pytest.raises(ValueError, match="g must be symmetric"):
      losses.vicreg(jnp.ones((4, 2)), asym)
    bad = sparse.BCOO((jnp.array([jnp.inf]), jnp.array([[0, 0]])), shape=(4, 4))
    with pytest.raises(ValueError, match="g must be finite"):
      losses.vicreg(jnp.ones((4, 2)), bad)



def test_chunked_quadratic_form_matches_dense(x64):
  """Tr(ZᵀGZ) over BCOO edges in several chunks (the last one padded), with
  duplicates and out-of-range padding entries: value and gradient equal the
  dense form."""
  rng = np.random.default_rng(3)
  a = rng.uniform(size=(N, N)) * (rng.uniform(size=(N, N)) < 0.4)
  g_sp = graphs.to_bcoo(a + a.T)
  dup = sparse.BCOO((jnp.concatenate([g_sp.data, g_sp.data[:3]]),
                     jnp.concatenate([g_sp.indices, g_sp.indices[:3]])),
                    shape=g_sp.shape)  # three edges stored twice
  g_sp = _pad(dup, nse=dup.nse + 7)
  g = graphs.to_dense(g_sp)
  z = jnp.asarray(_z(rng))
  # chunk=5: 64 slots -> 13 chunks
  fn = lambda gg: lambda zz: graphs.graph_quadratic(gg, zz, chunk=5)
  np.testing.assert_allclose(float(fn(g_sp)(z)), float(jnp.sum(z * (g @ z))),
                             rtol=1e-12)
  np.testing.assert_allclose(jax.grad(fn(g_sp))(z), jax.grad(fn(g))(z),
                             rtol=1e-12, atol=1e-12)
