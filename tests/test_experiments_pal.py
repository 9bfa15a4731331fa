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


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_fast_run_writes_png_and_json(tmp_path, name):
  module, outputs = SCRIPTS[name]
  module.run(_pal.parse_args("t", ["--out", str(tmp_path), "--fast"]))
  for stem in outputs:
    assert (tmp_path / f"{stem}.png").stat().st_size > 0
    data = json.loads((tmp_path / f"{stem}.json").read_text())
    assert data["trials"] == 2 and "config" in data
    assert _check_stats(data["curves"]) >= 2
    for stats in _error_stats(data["curves"]):
      assert np.all(np.asarray(stats["mean"]) <= 1.0)

def test_fig3_fast_active_spends_its_queries(tmp_path):
  res = pal_fig3.run(_pal.parse_args("t", ["--out", str(tmp_path), "--fast"]))
  answers = res["curves"]["active"]["answers"]["mean"]
  np.testing.assert_array_equal(answers[:3], [0, 10, 20])
  err = res["curves"]["active"]["oracle"]["mean"]
  assert err[-1] < err[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_full_run(tmp_path, name):
  module, outputs = SCRIPTS[name]
  module.run(_pal.parse_args("t", ["--out", str(tmp_path), "--trials", "10"]))
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
