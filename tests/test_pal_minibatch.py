"""Unbiased minibatch loss of PAL (ssljax.pal.minibatch), float64."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax import pal


def _signed_graph(rng, n):
  y = rng.integers(0, 3, n)
  g = 2.0 * (y[:, None] == y[None, :]) - 1.0
  g[rng.random((n, n)) < 0.3] = 0.0  # unknown entries
  g = np.triu(g, 1)
  return g + g.T + np.eye(n)


_loss = jax.jit(pal.pal_minibatch_loss)
_paper = jax.jit(pal.paper_minibatch_loss)


def _full(z, g):
  return float(pal.vic2_offset_loss(z, g))


class TestIdentities:

  def test_pair_terms_sum_to_vic2(self, x64):
    rng = np.random.default_rng(0)
    z, g = rng.standard_normal((7, 3)), _signed_graph(rng, 7)
    terms = pal.vic2_pair_terms(z, g, g.sum(1), 7)
    full = np.sum((z @ z.T - g)**2) - np.sum(g**2)
    np.testing.assert_allclose(float(terms.sum()), full, rtol=1e-12)
    np.testing.assert_allclose(_full(z, g), full, rtol=1e-12)

  def test_paper_terms_have_degree_bias(self, x64):
    rng = np.random.default_rng(1)
    z, g = rng.standard_normal((6, 2)), _signed_graph(rng, 6)
    d = g.sum(1)
    bias = 2 * np.trace(z.T @ np.diag(d - 6) @ z)
    np.testing.assert_allclose(float(pal.paper_pairwise_terms(z, g).sum()),
                               _full(z, g) + bias, rtol=1e-12)


class TestUnbiased:

  @pytest.mark.parametrize("n,b", [(6, 2), (6, 3), (7, 4)])
  def test_uniform_mean_over_all_minibatches_is_exact(self, x64, n, b):
    rng = np.random.default_rng(n * 10 + b)
    z, g = rng.standard_normal((n, 3)), _signed_graph(rng, n)
    d, w = g.sum(1), pal.uniform_pair_weights(b, n)
    ests = [float(_loss(z[list(s)], g[np.ix_(s, s)],
                                         d[list(s)], n, w))
            for s in itertools.combinations(range(n), b)]
    np.testing.assert_allclose(np.mean(ests), _full(z, g), rtol=1e-12)

  def test_paper_form_biased_unless_degrees_equal_n(self, x64):
    n, b = 6, 3
    rng = np.random.default_rng(3)
    z = rng.standard_normal((n, 2))
    w = pal.uniform_pair_weights(b, n)

    def paper_mean(g):
      return np.mean([float(_paper(z[list(s)],
                                                     g[np.ix_(s, s)], w))
                      for s in itertools.combinations(range(n), b)])

    g = _signed_graph(rng, n)
    assert not np.allclose(g.sum(1), n)
    gap = paper_mean(g) - _full(z, g)
    assert abs(gap) > 1e-3
    np.testing.assert_allclose(gap, 2 * np.trace(z.T @ np.diag(g.sum(1) - n)
                                                 @ z), rtol=1e-10)
    ones = np.ones((n, n))  # every degree is N: the paper's form is exact
    np.testing.assert_allclose(paper_mean(ones), _full(z, ones), rtol=1e-12)

  def test_group_sampling_mean_is_exact(self, x64):
    n_groups, views, m = 5, 2, 2
    groups = np.tile(np.arange(n_groups), views)  # view-major rows
    oracle = pal.SSLOracle(groups)
    g = oracle.target()
    rng = np.random.default_rng(4)
    z = rng.standard_normal((g.shape[0], 3))
    ests = []
    for chosen in itertools.combinations(range(n_groups), m):
      idx = np.flatnonzero(np.isin(groups, chosen))
      w = pal.group_pair_weights(groups[idx], n_groups, m)
      ests.append(float(_loss(
          z[idx], g[np.ix_(idx, idx)], g.sum(1)[idx], g.shape[0], w)))
    np.testing.assert_allclose(np.mean(ests), _full(z, g), rtol=1e-12)

  def test_full_batch_weights_are_one(self):
    np.testing.assert_array_equal(pal.uniform_pair_weights(4, 4),
                                  np.ones((4, 4)))

  def test_gradient_is_unbiased(self, x64):
    n, b = 5, 3
    rng = np.random.default_rng(5)
    z, g = rng.standard_normal((n, 2)), _signed_graph(rng, n)
    d, w = g.sum(1), pal.uniform_pair_weights(b, n)
    grad = jax.jit(jax.grad(pal.pal_minibatch_loss))
    grads = []
    for s in itertools.combinations(range(n), b):
      s = list(s)
      gz = grad(z[s], g[np.ix_(s, s)], d[s], n, w)
      full = np.zeros_like(z)
      full[s] = gz
      grads.append(full)
    ref = jax.grad(lambda zz: pal.vic2_offset_loss(zz, jnp.asarray(g)))(z)
    np.testing.assert_allclose(np.mean(grads, 0), ref, rtol=1e-10,
                               atol=1e-12)


class TestErrors:

  def test_shapes(self):
    with pytest.raises(ValueError, match="g must be"):
      pal.pal_minibatch_loss(np.ones((3, 2)), np.ones((2, 2)), np.ones(3), 3,
                             np.ones((3, 3)))
    with pytest.raises(ValueError, match="degree"):
      pal.pal_minibatch_loss(np.ones((3, 2)), np.ones((3, 3)), np.ones(2), 3,
                             np.ones((3, 3)))
    with pytest.raises(ValueError, match="batch_size"):
      pal.uniform_pair_weights(5, 4)
