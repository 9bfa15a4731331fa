"""Smoke tests of the dynamics experiments (`--fast`), full runs under -m slow.

Each script runs in a subprocess (it enables float64 globally) and must
write its PNG(s) and a JSON whose headline numbers show the papers' claims.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(name, out, fast=True, env=None):
  cmd = [sys.executable, str(ROOT / "experiments" / f"{name}.py"), "--out",
         str(out)] + (["--fast"] if fast else [])
  env = None if env is None else {**os.environ, **env}
  subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, timeout=1800,
                 env=env)
  return json.loads((out / f"{name}.json").read_text())


def _check_half_moons(res, out):
  assert (out / "dynamics_half_moons.png").exists()
  s = res["summary"]
  assert s["min_final_alignment"] > 0.999  # W → ±v_min from every init
  assert s["max_final_loss_gap"] < 1e-4
  assert all(t is not None for t in s["unconstrained_t_norm_above_1e6"])


def _check_width(res, out):
  assert (out / "dynamics_width.png").exists()
  tanh = res["difference"]["tanh"]["trained"]["mean"]
  assert tanh[-1] < tanh[0]  # tanh: closer to linear as h grows


def _fashion_mnist_present():
  from ssljax.data.fashion_mnist import find_fashion_mnist_files
  return find_fashion_mnist_files() is not None


def _check_ode_vs_gd(res, out, fashion=None):
  """fashion: must the Fashion-MNIST part run (None: iff the files exist)."""
  for f in ("dynamics_ode_vs_gd_fig3.png", "dynamics_ode_vs_gd_fig4.png"):
    assert (out / f).exists()
  s = res["summary"]
  assert len(res["timing"]["gd_step_s"]) == len(res["timing"]["width"])
  fashion = _fashion_mnist_present() if fashion is None else fashion
  if fashion:
    assert "skipped" not in s["fashion_mnist"]
    assert s["fashion_mnist"]["d"] == 49 and s["fashion_mnist"]["n"] == 400
    assert len(res["fashion_mnist"]["svm"]["ode"]) == len(res["svm"]["ode"])
  else:
    assert "not found" in s["fashion_mnist"]["skipped"]
    assert "skipped" in res["fashion_mnist"]
  # digits 0 vs 1 (top level) and the Fashion-MNIST pair (T-shirt vs Shirt).
  for p in [s] + ([s["fashion_mnist"]] if fashion else []):
    assert p["final_angle_ode_vs_gd_deg"] < 1.0
    assert abs(p["final_loss"]["ode"] - p["final_loss"]["gd"]) < 1e-2
    assert p["final_loss"]["gd"] > p["final_loss"]["optimum"] - 1e-9
    assert abs(p["svm_final"]["ode"] - p["svm_final"]["gd"]) <= 0.02
    assert p["svm_final"]["ode"] > 0.6


def _check_frossl(res, out):
  if "skipped" in res:
    pytest.skip("Fashion-MNIST files missing")
  assert (out / "frossl_dynamics.png").exists()
  s = res["summary"]
  assert s["max_rel_err_paper_eq34"] > 0.9  # eq. 34 misses
  assert s["max_rel_err_corrected_ode"] < 0.5 * s["max_rel_err_paper_eq34"]


CASES = [("dynamics_half_moons", _check_half_moons),
         ("dynamics_width", _check_width),
         ("dynamics_ode_vs_gd", _check_ode_vs_gd),
         ("frossl_dynamics", _check_frossl)]


# dynamics_width runs the solver of dynamics_half_moons at several widths:
# its fast run is -m slow.
@pytest.mark.parametrize("name,check", [
    pytest.param(*c, marks=pytest.mark.slow) if c[0] == "dynamics_width"
    else c for c in CASES], ids=[c[0] for c in CASES])
def test_fast(name, check, tmp_path):
  check(_run(name, tmp_path), tmp_path)


@pytest.mark.slow  # the fast run with the data is in the default suite
def test_ode_vs_gd_skips_missing_fashion_mnist(tmp_path):
  # The env variable is authoritative: an empty directory means "missing".
  empty = tmp_path / "no_fashion_mnist"
  empty.mkdir()
  res = _run("dynamics_ode_vs_gd", tmp_path,
             env={"SSLJAX_FASHION_MNIST_DIR": str(empty)})
  _check_ode_vs_gd(res, tmp_path, fashion=False)  # digits still run


@pytest.mark.slow
@pytest.mark.parametrize("name,check", CASES, ids=[c[0] for c in CASES])
def test_full(name, check, tmp_path):
  check(_run(name, tmp_path, fast=False), tmp_path)
