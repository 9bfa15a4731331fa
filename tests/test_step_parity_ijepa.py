"""benchmarks/step_parity.py: ssljax's whole I-JEPA step against the
official training loop of facebookresearch/ijepa (``src.train.main``).

Runs where torch is importable and the official checkout is given by
``SSLJAX_IJEPA_PEER`` (a path; the repository holds none of its code):
skipped elsewhere, CI included. In float64 both sides agree to float64
rounding (measured 2026-11-27 over 20 steps: losses within 9.7e-16,
tensors within 3.1e-12 of their update), and ssljax's learning-rate,
weight-decay and momentum schedules equal the official schedulers'.
"""

import pytest

import step_parity_util as util

PEER_VARIABLE = "SSLJAX_IJEPA_PEER"
pytestmark = util.marks(PEER_VARIABLE, "a facebookresearch/ijepa checkout")


@pytest.fixture(scope="module")
def step_parity():
  return util.step_parity_module("torch", "torchvision", "yaml")


def _args(**kw):
  # 10 steps: the warm-up (1 epoch of 5 steps) ends inside the run.
  return util.args("ijepa", PEER_VARIABLE, **kw)


def test_ijepa_step_equals_the_official_step_in_float64(step_parity):
  import jax  # pylint: disable=import-outside-toplevel
  with jax.enable_x64(True):
    result = step_parity.compare(_args())
  assert result["peer_commit"]
  assert max(r["relative"] for r in result["losses"]) < 1e-14
  for part in ("encoder", "predictor", "target encoder"):
    assert result["after_K_steps"][part]["worst_over_update"] < 1e-9
  for table in ("encoder position table", "predictor position table"):
    assert result["after_K_steps"][table] == 0.0
  for name, value in result["schedules"][
      "worst_relative_difference"].items():
    assert value < 1e-14, name


def test_schedule_offset_is_seen(step_parity):
  # Reading the schedules at step k (not k + 1 as the official schedulers
  # do) changes every learning rate of the warm-up and, with it, the steps.
  import jax  # pylint: disable=import-outside-toplevel
  with jax.enable_x64(True):
    result = step_parity.compare(_args(set=["optim.schedule_offset=0"]))
  assert result["schedules"]["worst_relative_difference"]["lr"] > 0.1
  assert result["losses"][0]["relative"] < 1e-14  # the same first forward
  assert max(r["relative"] for r in result["losses"]) > 1e-6
