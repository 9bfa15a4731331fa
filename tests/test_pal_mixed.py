"""MixedOracle: the SSL graph mixed with label answers (ssljax.pal.mixed)."""

import itertools

import numpy as np
import pytest

from ssljax import pal

# 4 source images, 2 views each, view-major: row v·4 + i is view v of image i.
GROUPS = np.tile(np.arange(4), 2)
Y_ROWS = np.tile(np.array([0, 1, 0, 1]), 2)


class _FixedChoice:
  """Stands in for the Generator: `choice` returns the given groups."""

  def __init__(self, chosen):
    self.chosen = np.asarray(chosen)

  def choice(self, *args, **kwargs):
    del args, kwargs
    return self.chosen


def _mixed(alpha=0.3, budget=None, **kw):
  inner = pal.SupervisedOracle(pal.Labeler(Y_ROWS), 2, complete=True)
  return pal.MixedOracle(GROUPS, inner, alpha=alpha, budget=budget, **kw)


def test_views_are_known_positives_at_no_cost():
  mix = _mixed()
  assert mix.labels.graph.same(0, 4) and mix.labels.graph.same(3, 7)
  assert mix.labels.labeler.cost.answers == 0
  mix.labels.graph.add_negative(0, 1)  # one answer: image 0 !~ image 1
  block = mix.labels.block(np.array([4]), np.array([1, 5]))
  np.testing.assert_array_equal(block, [[-1, -1]])  # spread to all views


def test_target_is_the_alpha_mixture():
  mix = _mixed(alpha=0.25)
  mix.labels.graph.add_positive(0, 2)
  g_ssl = (GROUPS[:, None] == GROUPS[None, :]).astype(float)
  expected = 0.75 * g_ssl + 0.25 * mix.labels.graph.signed()
  np.testing.assert_allclose(mix.target(), expected)
  assert mix.target()[4, 6] == 0.25  # image 0 ~ image 2 through the views


def test_minibatch_loss_is_unbiased_for_the_mixed_graph(x64):
  """Mean over all 6 draws of 2 of 4 groups equals the full loss."""
  mix = _mixed(alpha=0.4)
  mix.labels.graph.add_positive(0, 2)
  mix.labels.graph.add_negative(1, 2)
  target = mix.target()
  z = np.random.default_rng(0).standard_normal((8, 3))
  losses = []
  for chosen in itertools.combinations(range(4), 2):
    mb = mix.minibatch(_FixedChoice(chosen), 4)
    np.testing.assert_allclose(mb.g, target[np.ix_(mb.idx, mb.idx)])
    np.testing.assert_allclose(mb.degree, target.sum(1)[mb.idx])
    losses.append(float(pal.pal_minibatch_loss(z[mb.idx], mb.g, mb.degree,
                                               mb.n, mb.pair_weights)))
  full = float(pal.vic2_offset_loss(z, target))
  np.testing.assert_allclose(np.mean(losses), full, rtol=1e-10)


def test_budget_stops_the_label_rounds():
  mix = _mixed(budget=5)
  rng = np.random.default_rng(0)
  spent = [mix.query(rng) for _ in range(5)]
  assert spent == [2, 2, 2, 0, 0]  # checked before a round: 6 >= 5 stops
  assert mix.spent == 6 == mix.labels.labeler.cost.answers


def test_errors():
  inner = pal.SupervisedOracle(pal.Labeler(Y_ROWS), 2)
  with pytest.raises(ValueError, match="alpha"):
    pal.MixedOracle(GROUPS, inner, alpha=1.5)
  with pytest.raises(ValueError, match="budget"):
    pal.MixedOracle(GROUPS, inner, alpha=0.5, budget=-1)
  with pytest.raises(ValueError, match="N=4"):
    pal.MixedOracle(np.array([0, 0, 1, 1]), inner, alpha=0.5)
