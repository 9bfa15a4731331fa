"""PAL experiment scripts (experiments/pal_*.py): fast runs write PNG + JSON."""

import json
import pathlib
import sys

import numpy as np
import pytest

EXPERIMENTS = pathlib.Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

import _pal  # noqa: E402  pylint: disable=g-import-not-at-top
import pal_fig10  # noqa: E402
import pal_fig3  # noqa: E402
import pal_fig4  # noqa: E402
import pal_fig7  # noqa: E402
import pal_fig8  # noqa: E402
import pal_fig9  # noqa: E402

SCRIPTS = {
    "pal_fig3": (pal_fig3, ["pal_fig3"]),
    "pal_fig7": (pal_fig7, ["pal_fig7"]),
    "pal_fig4": (pal_fig4, ["pal_fig4"]),
    "pal_fig9": (pal_fig9, ["pal_fig9"]),
    "pal_fig8": (pal_fig8, ["pal_fig8"]),
    "pal_fig10": (pal_fig10, ["pal_fig10_queries", "pal_fig10_missing",
                              "pal_fig10_noise"]),
}


def _check_stats(obj):
  """Every {"mean", "std"} pair holds finite numbers of one length."""
  if isinstance(obj, dict):
    if set(obj) == {"mean", "std"}:
      m, s = np.asarray(obj["mean"], float), np.asarray(obj["std"], float)
      assert m.shape == s.shape and m.size > 0
      assert np.all(np.isfinite(m)) and np.all(s >= 0)
      return 1
    return sum(_check_stats(v) for v in obj.values())
  return 0


_COUNTS = ("answers", "components", "wrong_labels")


def _error_stats(obj):
  """The mean/std dicts of error curves (not of counts)."""
  if set(obj) == {"mean", "std"}:
    return [obj]
  return [s for k, v in obj.items() if k not in _COUNTS
          for s in _error_stats(v)]


def _fast(module, tmp_path, *extra):
  return module.main(["--out", str(tmp_path), "--fast", *extra])


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_fast_run_writes_png_and_json(tmp_path, name):
  module, outputs = SCRIPTS[name]
  _fast(module, tmp_path)
  for stem in outputs:
    assert (tmp_path / f"{stem}.png").stat().st_size > 0
    data = json.loads((tmp_path / f"{stem}.json").read_text())
    assert data["trials"] == 2 and "config" in data
    assert data["config"]["setup"] == "paper_notebook"
    assert _check_stats(data["curves"]) >= 2
    for stats in _error_stats(data["curves"]):
      assert np.all(np.asarray(stats["mean"]) <= 1.0)


@pytest.mark.parametrize("module", [pal_fig4, pal_fig8, pal_fig9])
def test_fast_run_of_former_setup(tmp_path, module):
  res = _fast(module, tmp_path, "--setup", "ssljax_v1")
  assert res["config"]["setup"] == "ssljax_v1"
  assert res["config"]["noise"] == pytest.approx(0.1)
  with pytest.raises(SystemExit):  # argparse rejects unknown set-ups
    _fast(module, tmp_path, "--setup", "nope")


@pytest.mark.parametrize("module", [pal_fig3, pal_fig4, pal_fig7, pal_fig8,
                                    pal_fig9])
def test_default_setup_is_the_authors(module):
  cfg = module.config()
  assert cfg["setup"] == "paper_notebook"
  assert list(module.SETUPS)[0] == "paper_notebook"
  # The authors' Fig. 3 run keeps input noise 0.1; every other figure has
  # none (Figs. 4, 7, 8, 9).
  assert cfg["noise"] == (0.1 if module is pal_fig3 else 0.0)


@pytest.mark.parametrize("module", [pal_fig4, pal_fig8, pal_fig9])
def test_setups_differ_exactly_in_documented_fields(module):
  a, b = module.SETUPS["paper_notebook"], module.SETUPS["ssljax_v1"]
  assert set(a) == set(b)
  differ = {k for k in a if a[k] != b[k]}
  assert differ == set(module.VARIANT_FIELDS)
  for field in module.VARIANT_FIELDS:  # named in the module docstring
    assert field in module.__doc__


def test_fig8_paper_setup():
  cfg = pal_fig8.SETUPS["paper_notebook"]
  assert (cfg["n"], cfg["n_test"], cfg["steps"], cfg["per_step"]) == (
      300, 1000, 30, 10)
  assert cfg["sigma"] == 0.2 and cfg["ridge"] == 1e-3


def test_fig8_schedule_replaces_then_measures():
  counts = pal_fig8.resampled_counts(30, 10, "replace_then_measure")
  np.testing.assert_array_equal(counts, 10 * (np.arange(30) + 1))
  old = pal_fig8.resampled_counts(30, 10, "measure_then_replace")
  np.testing.assert_array_equal(old, 10 * np.arange(31))
  with pytest.raises(ValueError, match="schedule"):
    pal_fig8.resampled_counts(30, 10, "nope")


def test_fig8_corrupt_labels_replaces_exactly_the_first_of_the_order():
  rng = np.random.default_rng(0)
  n = 50
  y = rng.integers(0, 4, n)
  order = rng.permutation(n)
  replacement = (y + 1) % 4  # every replacement changes the label
  for j in range(5):
    count = 10 * (j + 1)
    noisy = pal_fig8.corrupt_labels(y, order, replacement, count)
    changed = np.flatnonzero(noisy != y)
    np.testing.assert_array_equal(np.sort(changed), np.sort(order[:count]))
    np.testing.assert_array_equal(noisy[order[:count]],
                                  replacement[order[:count]])
  # Replacements drawn uniformly keep the label with probability 1/4.
  same = pal_fig8.corrupt_labels(y, order, y, n)
  np.testing.assert_array_equal(same, y)
  with pytest.raises(ValueError, match="count"):
    pal_fig8.corrupt_labels(y, order, replacement, n + 1)


def test_fig8_fast_run_counts_wrong_labels(tmp_path):
  res = _fast(pal_fig8, tmp_path)
  np.testing.assert_array_equal(res["resampled_labels"], [10, 20, 30])
  wrong = np.asarray(res["curves"]["wrong_labels"]["mean"])
  # About 3/4 of the replaced labels are wrong, never more than replaced.
  assert np.all(wrong <= res["resampled_labels"]) and np.all(wrong > 0)


def test_fig9_paper_setup():
  cfg = pal_fig9.SETUPS["paper_notebook"]
  np.testing.assert_allclose(cfg["p_grid"], np.linspace(0.5, 1.0, 20))
  assert cfg["graphs"] == ("non_contrastive",) and cfg["drop_diagonal"]
  assert cfg["mask_per_p"] and cfg["n"] == 100


def test_fig9_mask_is_symmetric_and_drops_the_diagonal():
  rng = np.random.default_rng(1)
  u = rng.random((60, 60))
  for p in (0.0, 0.3, 0.7, 1.0):
    keep = pal_fig9.keep_mask(u, p, drop_diagonal=True)
    np.testing.assert_array_equal(keep, keep.T)
    np.testing.assert_array_equal(np.diag(keep), ~(np.diag(u) < p))
    iu = np.triu_indices(60, 1)
    np.testing.assert_array_equal(keep[iu], ~(u[iu] < p))
    kept_diag = pal_fig9.keep_mask(u, p, drop_diagonal=False)
    assert np.all(np.diag(kept_diag))
    np.testing.assert_array_equal(kept_diag[iu], keep[iu])
  assert not pal_fig9.keep_mask(u, 1.0, True).any()  # p = 1: all unknown
  with pytest.raises(ValueError, match="p must"):
    pal_fig9.keep_mask(u, 1.5, True)
  with pytest.raises(ValueError, match="u must"):
    pal_fig9.keep_mask(u[:3], 0.5, True)


def test_fig9_mask_drops_about_a_fraction_p():
  u = np.random.default_rng(2).random((200, 200))
  keep = pal_fig9.keep_mask(u, 0.7, drop_diagonal=True)
  assert abs(1.0 - keep.mean() - 0.7) < 0.02


def test_fig4_reveals_the_first_copy_of_each_base_point():
  order = np.array([3, 0, 2, 1])
  np.testing.assert_array_equal(
      pal_fig4.revealed_rows(order, 3, 2, "first_view"), [6, 0, 4])
  np.testing.assert_array_equal(
      pal_fig4.revealed_rows(order, 2, 2, "rows"), [3, 0])
  assert pal_fig4.revealed_rows(order, 0, 2, "first_view").size == 0
  with pytest.raises(ValueError, match="reveal"):
    pal_fig4.revealed_rows(order, 1, 2, "nope")
  with pytest.raises(ValueError, match="m must"):
    pal_fig4.revealed_rows(order, 5, 2, "rows")


def test_fig4_paper_setup():
  cfg = pal_fig4.SETUPS["paper_notebook"]
  assert cfg["revealed"] == tuple(range(200)) and cfg["base"] == 200
  assert cfg["cutoff"] == 0.0 and cfg["orders"] == 5
  assert (cfg["n_test"], cfg["sigma"], cfg["ridge"]) == (500, 1.0, 1e-3)


def test_fig4_fast_run_averages_over_label_orders(tmp_path):
  res = _fast(pal_fig4, tmp_path)
  assert res["runs"] == 2 * 2  # 2 trials x 2 orders
  # No label revealed: T = (1 − α)G_ssl, whose top eigenspace (eigenvalue
  # 2, one direction per base point) is split by λK⁺ alone; to first order
  # the scale 1 − α does not change which 5 directions come first.
  first = [res["curves"][f"{a}_oracle"]["mean"][0] for a in pal_fig4.ALPHAS]
  np.testing.assert_allclose(first, first[0], atol=0.02)
  # With labels, α = 0.5 moves away from the SSL-only embedding.
  assert res["curves"]["0.5_oracle"]["mean"][-1] != pytest.approx(first[0])


def test_table_reads_the_curve_at_its_x_values():
  stats = {"mean": np.array([0.1, 0.2, 0.3]), "std": np.array([0.0, 1.0,
                                                                2.0])}
  assert _pal.table([0, 10, 20], stats, [10]) == {10.0: [0.2, 1.0]}
  with pytest.raises(ValueError, match="not on the curve"):
    _pal.table([0, 10, 20], stats, [15])


def test_fig3_fast_active_spends_its_queries(tmp_path):
  res = _fast(pal_fig3, tmp_path)
  answers = res["curves"]["active"]["answers"]["mean"]
  np.testing.assert_array_equal(answers[:3], [0, 10, 20])
  err = res["curves"]["active"]["oracle"]["mean"]
  assert err[-1] < err[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_full_run(tmp_path, name):
  module, outputs = SCRIPTS[name]
  module.main(["--out", str(tmp_path), "--trials", "2"])
  for stem in outputs:
    assert (tmp_path / f"{stem}.json").exists()


# ---------------------------------------------------------------------------
# experiments/pal_neural.py: the PAL loop with a network on Fashion-MNIST.
# ---------------------------------------------------------------------------

import pal_neural  # noqa: E402


def _tiny_rows(n=30, views=2):
  y = np.arange(n) % 10
  return {"y_rows": np.tile(y, views), "groups": np.tile(np.arange(n), views)}


def test_neural_oracles_count_pair_answers():
  """Every oracle spends per_step answers a round (mixed: up to its budget);
  an SSL minibatch of B rows shows B/2 view pairs, the same per_step."""
  cfg = dict(pal_neural._FAST, per_step=6, batch=12, mix_budget=10)
  assert pal_neural.ssl_pairs_per_step(cfg) == 6
  d = _tiny_rows()
  rng = np.random.default_rng(0)
  spent = {kind: [pal_neural.make_oracle(kind, d, cfg, 0).query(rng)
                  for _ in range(1)] for kind in pal_neural.KINDS}
  assert spent["ssl"] == [0] and spent["passive"] == [6]
  mixed = pal_neural.make_oracle("mixed", d, cfg, 0)
  rounds = [mixed.query(rng) for _ in range(4)]
  assert sum(rounds) == mixed.labels.labeler.cost.answers
  assert 10 <= sum(rounds) < 10 + 6 and rounds[-1] == 0
  assert mixed.labels.graph.same(0, 30)  # views are free positives
  with pytest.raises(ValueError, match="kind"):
    pal_neural.make_oracle("nope", d, cfg, 0)


@pytest.mark.slow  # ~2.5 min CPU (7 min wall on the loaded box): 8 run_pal compiles, probes
def test_neural_fast_run_writes_png_and_json(tmp_path, fmnist_data_dir):
  args = pal_neural.parse_args("t", ["--out", str(tmp_path), "--fast",
                                     "--data-dir", fmnist_data_dir])
  res = pal_neural.run(args)
  assert (tmp_path / "pal_neural.png").stat().st_size > 0
  data = json.loads((tmp_path / "pal_neural.json").read_text())
  assert data["seeds"] == 2 and set(data["curves"]) == set(pal_neural.KINDS)
  assert _check_stats(data["curves"]) >= 4 * 6
  cfg = res["config"]
  for kind, c in res["curves"].items():
    for metric in ("probe", "knn"):
      assert np.all((c[metric]["mean"] > 0) & (c[metric]["mean"] <= 1))
    assert c["x"]["mean"][0] == 0 and np.all(np.diff(c["x"]["mean"]) > 0)
    # The initial network is shared by every oracle of a seed.
    np.testing.assert_array_equal(
        c["probe"]["mean"][0], res["curves"]["ssl"]["probe"]["mean"][0])
  np.testing.assert_array_equal(res["curves"]["passive"]["answers"]["mean"],
                                [0] + list(cfg["budgets"]))
  assert res["curves"]["mixed"]["answers"]["mean"][-1] < (
      cfg["mix_budget"] + cfg["per_step"])
  assert 0 < data["baselines"]["raw_pixels"]["probe"] <= 1


def test_active_vs_passive_graph_stats_count_true_pairs():
  """`pal_active_vs_passive.graph_stats` on a hand-built graph: a wrong
  "same" answer joins two classes, so of the 3 completed positive pairs
  of component {0, 1, 2} only one is truly same; the negative answer
  (2, 3) completes to 3 negatives of which two, (0, 3) and (1, 3), are
  truly same."""
  import pal_active_vs_passive as avp  # pylint: disable=import-outside-toplevel
  from ssljax.pal.serve import strategy  # pylint: disable=import-outside-toplevel
  y = np.array([0, 0, 1, 0, 2, 2])
  votes = {(0, 1): [1, 0], (1, 2): [2, 1], (2, 3): [0, 1], (4, 5): [1, 1]}
  graph = strategy.graph_from_votes(6, votes)
  s = avp.graph_stats(graph, votes, y, alpha=0.5)
  assert s["sizes"] == [3] and s["largest"] == 3 and s["components"] == 1
  assert (s["pos_pairs"], s["neg_pairs"], s["answered_pos"]) == (3, 3, 2)
  assert s["tp_pos"] == pytest.approx(1 / 3)
  assert s["tp_neg"] == pytest.approx(1 / 3)
  assert s["answer_acc"] == pytest.approx(2 / 3)  # (1, 2) majority wrong
  assert s["margin_mean"] == pytest.approx((1 + 1 / 3 + 1 + 0) / 4)
  assert s["margin_low"] == pytest.approx(0.5)
  # ‖G_ans‖² per view pair: diagonal 6, answered 2·3, deduced 2·3 (the
  # positive (0, 2), the negatives (0, 3), (1, 3)) at w²; α = ½.
  s = avp.graph_stats(graph, votes, y, alpha=0.5, complete_weight=0.5)
  assert s["answer_share"] == pytest.approx(13.5 / (6 + 13.5))
  assert s["deg_min"] == -2.0  # image 3: itself, minus component {0, 1, 2}


@pytest.mark.slow  # ~70 s on 2 shared cores: 12 rounds of run_pal
def test_active_vs_passive_fast_run_writes_table_figure_json(tmp_path):
  import pal_active_vs_passive as avp  # pylint: disable=import-outside-toplevel
  res = avp.main(["--out", str(tmp_path), "--fast", "--seeds", "2",
                  "--noise", "0,0.2"])
  assert (tmp_path / "pal_active_vs_passive.png").stat().st_size > 0
  table = (tmp_path / "pal_active_vs_passive.md").read_text()
  results, diagnostics = table.split("\n\n")
  assert results.count("\n") == 3  # header, rule, 2 budgets
  # header, rule, 4 runs x 2 budgets, kernel set-up: 2 kinds x 3 budgets
  assert diagnostics.strip().count("\n") == 1 + 8 + 6
  assert "| kernel Fig. 3, active | 400 |" in diagnostics
  data = json.loads((tmp_path / "pal_active_vs_passive.json").read_text())
  assert set(data["runs"]) == {"active, noise=0.0", "passive, noise=0.0",
                               "active, noise=0.2", "passive, noise=0.2",
                               "ssl_only"}
  for name, stats in res["summary"].items():
    for answers, mean, se in stats["probe"]:
      runs = [c[answers // 40 - 1]["probe"] for c in res["runs"][name].values()]
      assert mean == pytest.approx(np.mean(runs))
      assert se == pytest.approx(np.std(runs, ddof=1) / np.sqrt(2))
  noisy = res["runs"]["passive, noise=0.2"]
  assert any(p["answer_acc"] < 1 for c in noisy.values() for p in c)
  clean = res["runs"]["passive, noise=0.0"]
  assert all(p["answer_acc"] == 1 and p["tp_pos"] in (1.0, None)
             or p["pos_pairs"] == 0 for c in clean.values() for p in c)
