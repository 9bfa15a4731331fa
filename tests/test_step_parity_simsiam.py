"""benchmarks/step_parity.py: ssljax's whole SimSiam step against
facebookresearch/simsiam's main_simsiam.py (its ``train``,
``adjust_learning_rate``, ``torch.optim.SGD`` and the builder's
``SimSiam``).

Runs where torch is importable and the official checkout is given by
``SSLJAX_SIMSIAM_PEER`` (a path; the repository holds none of its code):
skipped elsewhere, CI included.
"""

import pytest

import step_parity_util as util

PEER_VARIABLE = "SSLJAX_SIMSIAM_PEER"
pytestmark = util.marks(PEER_VARIABLE, "a facebookresearch/simsiam checkout")


@pytest.fixture(scope="module")
def step_parity():
  return util.step_parity_module("torch")


def _compare(step_parity, **kw):
  import jax  # pylint: disable=import-outside-toplevel
  # 10 steps: 2 epochs of 5, the second at the per-epoch cosine's next rate.
  with jax.enable_x64(True):
    return step_parity.compare(util.args("simsiam", PEER_VARIABLE, **kw))


def test_simsiam_step_equals_the_official_step_in_float64(step_parity):
  result = _compare(step_parity)
  assert max(r["relative"] for r in result["losses"]) < 1e-11
  after = result["after_K_steps"]
  assert after["parameters"]["worst_over_update"] < 1e-9
  # The predictor's hidden BatchNorm sees centred inputs: its running means
  # barely move, so their difference is compared absolutely.
  assert after["bn_means"]["largest_abs_difference"] < 1e-12
  assert after["bn_vars, ssljax's made unbiased"][
      "largest_abs_difference"] < 1e-12
  assert after["lr schedule"] < 1e-12


@pytest.mark.parametrize("change", ["optim.schedule_unit=step",
                                    "optim.weight_decay_mask=kernels"])
def test_per_step_schedule_and_kernel_decay_are_seen(step_parity, change):
  result = _compare(step_parity, set=[change])
  assert result["after_K_steps"]["parameters"]["worst_over_update"] > 1e-3
