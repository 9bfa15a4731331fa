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
