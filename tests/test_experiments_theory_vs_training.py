"""Smoke test of experiments/theory_vs_training.py (issue 4, experiment 7).

Fast mode (N = 300 rows, 60 steps) runs in-process through main(argv) on
the prepared fashion_mnist_local data dir and checks the JSON keys and
invariants that hold at any size: accuracies in [0, 1] and above chance,
cos² in [0, 1], the closed form is the global minimiser of its regularised
objective (so the network's objective is not lower), the free optimum lower-
bounds every plain loss, and training lowers the loss. The full run is slow.
"""

import json

import numpy as np
import pytest

from conftest import import_experiment

def _run(tmp_path, data_dir, fast=True):
  module = import_experiment("theory_vs_training")
  argv = ["--out", str(tmp_path), "--data-dir", data_dir]
  module.main(argv + (["--fast"] if fast else []))
  assert (tmp_path / "theory_vs_training.png").exists()
  return json.loads((tmp_path / "theory_vs_training.json").read_text())


def _check(result, min_probe):
  assert set(result) == {"config", "reference", "graphs", "summary"}
  assert set(result["graphs"]) == {"G_ssl", "G_sup"}
  assert 0.0 < result["reference"]["probe_raw_pixels"] <= 1.0
  for name, res in result["graphs"].items():
    for kind in ("closed_form", "network"):
      part = res[kind]
      assert min_probe < part["probe"] <= 1.0, (name, kind, part["probe"])
      # The free (interpolation-regime) optimum bounds every plain loss.
      assert part["plain_loss"] >= res["free_optimum_loss"] * (1 - 1e-9) - 1e-6
      assert 0.0 <= part["top_fraction"] <= 1.0 + 1e-9
      assert len(part["singular_values"]) == result["config"]["k"]
    # Z* minimises ‖ZZᵀ − G‖² + ridge·Tr(ZᵀK⁻¹Z): no network does better.
    assert (res["network"]["objective"]
            >= res["closed_form"]["objective"] * (1 - 1e-6))
    cmp = res["comparison"]
    cos2 = np.asarray(cmp["cos2"])
    assert cos2.shape == (res["closed_form"]["rank"],)
    assert np.all((cos2 >= 0) & (cos2 <= 1))
    assert 0.0 <= cmp["max_angle_deg"] <= 90.0
    assert cmp["rel_gram_gap"] >= 0.0
    curve = res["curve"]
    lengths = {len(v) for v in curve.values()}
    assert len(lengths) == 1 and lengths.pop() >= 2
    assert curve["step"][-1] == result["config"]["steps"]
    assert curve["loss"][-1] < curve["loss"][0]
  for key, value in result["summary"].items():
    assert np.isfinite(value), key


def test_theory_vs_training_fast(tmp_path, fmnist_data_dir):
  _check(_run(tmp_path, fmnist_data_dir), min_probe=0.2)


@pytest.mark.slow
def test_theory_vs_training_full(tmp_path, fmnist_data_dir):
  result = _run(tmp_path, fmnist_data_dir, fast=False)
  _check(result, min_probe=0.5)
  assert result["config"]["rows"] <= 4000
