"""Smoke tests of experiments/lemma1.py and experiments/spectral_optima.py.

Fast mode runs in-process through each script's main(argv) and checks the
JSON it writes (thresholds are loose multiples of the float64 agreement
measured in full runs); the full-size runs are marked slow.
"""

import json

import pytest

from conftest import import_experiment


def _run(name, tmp_path, fast=True):
  module = import_experiment(name)
  argv = ["--out", str(tmp_path)] + (["--fast"] if fast else [])
  module.main(argv)
  return json.loads((tmp_path / f"{name}.json").read_text())


def _check_lemma1(result):
  summary = result["summary"]
  assert summary["max_rel_gap_trace"] < 1e-9
  assert summary["max_rel_gap_optimiser"] < 1e-6
  assert summary["max_theorem2_rel_gap"] < 1e-8


def _check_spectral(result):
  summary = result["summary"]
  assert summary["max_rel_gram_gap_free"] < 1e-4
  assert summary["max_angle_deg_free"] < 1.0
  assert summary["max_rel_loss_gap_free"] < 1e-8
  assert summary["linear_rel_gram_gap"] < 1e-4
  assert summary["kernel_rel_gram_gap"] < 1e-4
  assert summary["kernel_rel_gram_gap_out_of_sample"] < 1e-4


def test_lemma1_fast(tmp_path):
  result = _run("lemma1", tmp_path)
  assert (tmp_path / "lemma1.png").exists()
  assert len(result["rows"]) == 4
  _check_lemma1(result)


def test_spectral_optima_fast(tmp_path):
  result = _run("spectral_optima", tmp_path)
  assert (tmp_path / "spectral_optima.png").exists()
  assert len(result["free"]) == 6
  _check_spectral(result)


@pytest.mark.slow
def test_lemma1_full(tmp_path):
  result = _run("lemma1", tmp_path, fast=False)
  assert len(result["rows"]) == 27
  _check_lemma1(result)


@pytest.mark.slow
def test_spectral_optima_full(tmp_path):
  _check_spectral(_run("spectral_optima", tmp_path, fast=False))
