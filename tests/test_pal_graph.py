"""Labeler and PairGraph bookkeeping (ssljax.pal.labeler / bookkeeping)."""

import numpy as np
import pytest
import scipy.sparse.csgraph

from ssljax import pal


class TestLabeler:

  def test_pair_and_screen_answers_and_cost(self):
    lab = pal.Labeler(np.array([0, 0, 1, 2, 1]))
    assert lab.pair(0, 1) and not lab.pair(0, 2)
    np.testing.assert_array_equal(lab.pairs([2, 3], [4, 4]), [True, False])
    np.testing.assert_array_equal(lab.screen(2, [0, 1, 4, 3]),
                                  [False, False, True, False])
    cost = lab.cost
    assert (cost.pairs, cost.screens, cost.screened_items) == (4, 1, 4)
    assert cost.answers == 8 and cost.flipped == 0

  def test_coarse_level(self):
    lab = pal.Labeler(np.array([0, 1, 2, 3]),
                      coarse_labels=np.array([0, 0, 1, 1]))
    assert lab.pair(0, 1, level="coarse") and not lab.pair(0, 1)
    np.testing.assert_array_equal(lab.screen(3, [0, 2], level="coarse"),
                                  [False, True])
    assert lab.cost.coarse == 3
    with pytest.raises(ValueError, match="coarse_labels"):
      pal.Labeler(np.array([0, 1])).pair(0, 1, level="coarse")

  def test_noise_rate_and_determinism(self):
    y = np.repeat(np.arange(4), 500)
    truth = y[:-1] == y[1:]
    i, j = np.arange(1999), np.arange(1, 2000)
    a = pal.Labeler(y, noise_rate=0.2, seed=7).pairs(i, j)
    b = pal.Labeler(y, noise_rate=0.2, seed=7).pairs(i, j)
    np.testing.assert_array_equal(a, b)
    frac = np.mean(a != truth)
    assert 0.15 < frac < 0.25
    assert not np.array_equal(a, pal.Labeler(y, noise_rate=0.2,
                                             seed=8).pairs(i, j))
    flipped = pal.Labeler(y, noise_rate=1.0)
    np.testing.assert_array_equal(flipped.pairs(i, j), ~truth)
    assert flipped.cost.flipped == 1999

  def test_errors(self):
    with pytest.raises(ValueError, match="noise_rate"):
      pal.Labeler(np.array([0, 1]), noise_rate=1.5)
    with pytest.raises(ValueError, match="labels"):
      pal.Labeler(np.array([[0, 1]]))
    with pytest.raises(ValueError, match="items"):
      pal.Labeler(np.array([0, 1])).screen(0, [2])


class TestPairGraph:

  def test_transitive_completion_fig6(self):
    # 0~1, 1~2 => 0~2; 2!~3 => {0,1,2}!~3; 3~4 => {0,1,2}!~4.
    pg = pal.PairGraph(6)
    pg.add(0, 1, True)
    pg.add(1, 2, True)
    pg.add(2, 3, False)
    pg.add(3, 4, True)
    g = pg.signed()
    expected = np.array([[1, 1, 1, -1, -1, 0],
                         [1, 1, 1, -1, -1, 0],
                         [1, 1, 1, -1, -1, 0],
                         [-1, -1, -1, 1, 1, 0],
                         [-1, -1, -1, 1, 1, 0],
                         [0, 0, 0, 0, 0, 1]])
    np.testing.assert_array_equal(g, expected)
    np.testing.assert_array_equal(pg.non_contrastive(), expected > 0)
    assert pg.num_components() == 3
    assert pg.same(0, 2) and pg.known_negative(4, 0)
    assert not pg.same(0, 5) and not pg.known_negative(0, 5)
    assert pg.counts() == {"positive": 8, "negative": 12, "unknown": 10,
                           "answered": 4}

  def test_raw_view_has_no_deduction(self):
    pg = pal.PairGraph(4)
    pg.add(0, 1, True)
    pg.add(1, 2, False)
    raw = pg.raw_signed()
    assert raw[0, 2] == 0 and pg.signed()[0, 2] == -1
    np.testing.assert_array_equal(raw, raw.T)
    np.testing.assert_array_equal(pg.raw_degree(), raw.sum(1))
    np.testing.assert_array_equal(pg.raw_block([0, 1], [2, 1]),
                                  [[0, 1], [-1, 1]])

  def test_degree_and_block_match_dense(self):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 30)
    pg = pal.PairGraph(30)
    for _ in range(40):
      i, j = rng.integers(0, 30, 2)
      pg.add(int(i), int(j), y[i] == y[j])
    for signed in (True, False):
      dense = pg.block(np.arange(30), np.arange(30), signed=signed)
      np.testing.assert_array_equal(pg.degree(signed=signed), dense.sum(1))
      rows, cols = rng.integers(0, 30, 5), rng.integers(0, 30, 7)
      np.testing.assert_array_equal(pg.block(rows, cols, signed=signed),
                                    dense[np.ix_(rows, cols)])
    # Completion of true answers never contradicts the labels.
    g = pg.signed()
    truth = 2.0 * (y[:, None] == y[None, :]) - 1.0
    assert np.all((g == 0) | (g == truth))
    n_cc = scipy.sparse.csgraph.connected_components(g > 0)[0]
    assert pg.num_components() == n_cc == pal.connected_components(g)

  def test_conflicts(self):
    pg = pal.PairGraph(3)
    pg.add(0, 1, False)
    assert not pg.add(0, 1, True) and pg.conflicts == 1
    assert pg.signed()[0, 1] == -1  # the earlier knowledge wins
    pg.add(1, 2, True)
    assert not pg.add(1, 2, False) and pg.conflicts == 2
    strict = pal.PairGraph(2, on_conflict="raise")
    strict.add(0, 1, True)
    with pytest.raises(ValueError, match="contradicts"):
      strict.add(0, 1, False)

  def test_connected_components(self):
    g = np.eye(5)
    g[0, 1] = g[1, 0] = 1
    g[2, 3] = g[3, 2] = -1  # negatives are not edges
    assert pal.connected_components(g) == 4
    with pytest.raises(ValueError, match="square"):
      pal.connected_components(np.ones((2, 3)))

  def test_errors(self):
    with pytest.raises(ValueError, match="n must"):
      pal.PairGraph(0)
    with pytest.raises(ValueError, match="on_conflict"):
      pal.PairGraph(3, on_conflict="keep")
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
      pal.PairGraph(3).add(0, 3, True)
