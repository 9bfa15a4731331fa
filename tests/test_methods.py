"""Tests for ssljax.methods: the method table, batch graphs and loss dispatch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax import graphs, losses, methods


def _numpy_supervised(labels, num_views):
  """(1_V1_Vᵀ ⊗ YYᵀ) − I over view-major rows, unknown (−1) rows empty."""
  y = np.tile(labels, num_views)
  g = (y[:, None] == y[None, :]) & (y[:, None] >= 0)
  np.fill_diagonal(g, False)
  return g.astype(np.float64)


LABELS = np.array([0, 1, 0, 2, -1, 1, 0])


@pytest.mark.parametrize("num_views", [2, 3])
def test_supervised_batch_graph_matches_reference(num_views):
  g = np.asarray(methods.batch_graph("supervised", num_views, len(LABELS),
                                     LABELS, normalize=False))
  np.testing.assert_array_equal(g, _numpy_supervised(LABELS, num_views))
  # Views of one sample are positives too: the SSL graph is inside it for
  # every known sample.
  g_views = np.asarray(graphs.views_graph(len(LABELS), num_views))
  known = np.tile(LABELS >= 0, num_views)
  assert np.all(g[known][:, known] >= g_views[known][:, known])


def test_normalized_label_graph_has_view_graph_mean_degree():
  num_views = 3
  g = np.asarray(methods.batch_graph("supervised", num_views, len(LABELS), LABELS))
  known = np.tile(LABELS >= 0, num_views)
  np.testing.assert_allclose(g.sum(1)[known].mean(), num_views - 1, rtol=1e-6)
  np.testing.assert_array_equal(g.sum(1)[~known], 0.0)
  np.testing.assert_allclose(g, g.T)


def test_mixed_graph_interpolates():
  n, v, alpha = len(LABELS), 2, 0.25
  mixed = methods.batch_graph("mixed", v, n, LABELS, alpha=alpha, normalize=False)
  expected = ((1 - alpha) * np.asarray(graphs.views_graph(n, v))
              + alpha * _numpy_supervised(LABELS, v))
  np.testing.assert_allclose(np.asarray(mixed), expected, rtol=1e-6)


def test_batch_graph_is_jittable_in_labels():
  fn = jax.jit(lambda y: methods.batch_graph("supervised", 2, len(LABELS), y))
  np.testing.assert_allclose(
      fn(jnp.asarray(LABELS)),
      methods.batch_graph("supervised", 2, len(LABELS), LABELS), rtol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    ({"kind": "knn"}, "graph kind"),
    ({"kind": "supervised", "labels": None}, "labels"),
    ({"kind": "supervised", "labels": np.zeros(3, int)}, "labels"),
    ({"kind": "mixed", "alpha": 1.5}, "alpha")])
def test_batch_graph_errors(kwargs, match):
  kwargs = {"labels": LABELS, **kwargs}
  with pytest.raises(ValueError, match=match):
    methods.batch_graph(kwargs.pop("kind"), 2, len(LABELS), **kwargs)


def test_loss_terms_dispatch_matches_library():
  z = jax.random.normal(jax.random.key(0), (2, 16, 4))
  two_view = methods.loss_terms("vicreg", z, form="two_view")
  np.testing.assert_allclose(two_view["loss"], losses.vicreg_two_view(z[0], z[1]),
                             rtol=1e-6)
  graph = methods.loss_terms("vicreg", z, form="graph")
  np.testing.assert_allclose(
      graph["loss"], losses.vicreg(z.reshape(32, 4), graphs.views_graph(16, 2)),
      rtol=1e-6)
  labels = jnp.arange(16) % 3
  sup = methods.loss_terms("vicreg", z, form="graph", labels=labels,
                           graph={"kind": "supervised", "normalize": False})
  g = methods.batch_graph("supervised", 2, 16, labels, normalize=False)
  np.testing.assert_allclose(sup["loss"], losses.vicreg(z.reshape(32, 4), g),
                             rtol=1e-6)


@pytest.mark.parametrize("method, form, views, kind, match", [
    ("swav", "two_view", 2, "views", "unknown method"),
    ("mocov3", "graph", 2, "views", "no 'graph' form"),
    ("byol", "graph", 2, "supervised", "not available for it"),
    ("vicreg", "pairs", 2, "views", "unknown loss form"),
    ("vicreg", "two_view", 3, "views", "num_views=2"),
    ("vicreg", "two_view", 2, "supervised", "needs loss form 'graph'"),
    ("vicreg", "graph", 1, "views", "num_views >= 2")])
def test_check_method_errors(method, form, views, kind, match):
  with pytest.raises(ValueError, match=match):
    methods.check_method(method, form, views, kind)


def test_every_method_offers_a_form():
  for name, spec in methods.METHODS.items():
    assert any(getattr(spec, f) is not None for f in methods.FORMS), name
