"""benchmarks/step_parity.py: ssljax's whole VICReg step against
facebookresearch/vicreg's main_vicreg.py (its ``VICReg`` loss module,
``Projector``, ``adjust_learning_rate`` and ``LARS``).

Runs where torch is importable and the official checkout is given by
``SSLJAX_VICREG_PEER`` (a path; the repository holds none of its code):
skipped elsewhere, CI included. In float64 both sides agree to float64
rounding over the warm-up and into the cosine decay, with the official
LARS or with the main job's AdamW.
"""

import pytest

import step_parity_util as util

PEER_VARIABLE = "SSLJAX_VICREG_PEER"
pytestmark = util.marks(PEER_VARIABLE, "a facebookresearch/vicreg checkout")


@pytest.fixture(scope="module")
def step_parity():
  return util.step_parity_module("torch")


def _compare(step_parity, **kw):
  import jax  # pylint: disable=import-outside-toplevel
  # 60 steps of 5 per epoch: the official 10 warm-up epochs, then 2 of
  # its cosine.
  with jax.enable_x64(True):
    return step_parity.compare(util.args("vicreg", PEER_VARIABLE, steps=60,
                                         **kw))


def test_vicreg_step_with_the_official_lars_in_float64(step_parity):
  result = _compare(step_parity)
  assert result["optimizer"] == "lars"
  assert max(r["relative"] for r in result["losses"]) < 1e-12
  after = result["after_K_steps"]
  assert after["parameters"]["worst_over_update"] < 1e-9
  assert after["bn_means"]["worst_over_update"] < 1e-9
  assert after["bn_vars, ssljax's made unbiased"][
      "largest_abs_difference"] < 1e-12
  assert after["lr schedule"] < 1e-12


def test_vicreg_step_with_the_main_jobs_adamw_in_float64(step_parity):
  result = _compare(step_parity, optimizer="adamw")
  assert max(r["relative"] for r in result["losses"]) < 1e-12
  assert result["after_K_steps"]["parameters"]["worst_over_update"] < 1e-9


def test_optax_lars_momentum_is_seen(step_parity):
  # optax.lars's momentum of learning-rate-scaled steps in place of
  # main_vicreg.py's momentum of trust-scaled gradients: the warm-up moves
  # the rate every step, so the parameters part.
  result = _compare(step_parity,
                    set=["optim.lars.momentum_buffer=updates"])
  assert result["after_K_steps"]["parameters"]["worst_over_update"] > 1e-3
