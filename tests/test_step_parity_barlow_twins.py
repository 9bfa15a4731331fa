"""benchmarks/step_parity.py: ssljax's whole Barlow Twins step against
facebookresearch/barlowtwins' main.py (its ``BarlowTwins`` loss module,
``adjust_learning_rate`` with the weights' and the biases' rates, and
``LARS`` over its two parameter groups).

Runs where torch is importable and the official checkout is given by
``SSLJAX_BARLOW_TWINS_PEER`` (a path; the repository holds none of its
code): skipped elsewhere, CI included.
"""

import pytest

import step_parity_util as util

PEER_VARIABLE = "SSLJAX_BARLOW_TWINS_PEER"
pytestmark = util.marks(PEER_VARIABLE,
                        "a facebookresearch/barlowtwins checkout")


@pytest.fixture(scope="module")
def step_parity():
  return util.step_parity_module("torch")


def _compare(step_parity, **kw):
  import jax  # pylint: disable=import-outside-toplevel
  # 60 steps of 5 per epoch: the official 10 warm-up epochs, then 2 of
  # its cosine.
  with jax.enable_x64(True):
    return step_parity.compare(util.args("barlow_twins", PEER_VARIABLE,
                                         steps=60, **kw))


def test_barlow_twins_step_equals_the_official_step_in_float64(step_parity):
  result = _compare(step_parity)
  assert max(r["relative"] for r in result["losses"]) < 1e-12
  after = result["after_K_steps"]
  assert after["parameters"]["worst_over_update"] < 1e-9
  assert after["bn_means"]["worst_over_update"] < 1e-9
  assert after["bn_vars, ssljax's made unbiased"][
      "largest_abs_difference"] < 1e-12
  assert after["lr schedule, weights"] < 1e-12
  assert after["lr schedule, biases and norms"] < 1e-12


def test_one_learning_rate_for_biases_is_seen(step_parity):
  # The biases and BatchNorm parameters at the weights' rate (0.2) instead
  # of the official 0.0048.
  result = _compare(step_parity, set=["optim.bias_norm_lr_factor=1.0"])
  assert result["after_K_steps"]["parameters"]["worst_over_update"] > 1.0
