"""benchmarks/step_parity.py: ssljax's whole SwAV step against the official
``train`` of facebookresearch/swav (main_swav.py), both with the config's
AdamW.

Runs where torch is importable and the official checkout is given by
``SSLJAX_SWAV_PEER`` (a path; the repository holds none of its code):
skipped elsewhere, CI included. In float64 both sides agree to float64
rounding over whole steps, with and without local crops: prototype
normalisation, the multi-crop forward (``swav.batch_norm_views =
"multi_crop"``), Sinkhorn-Knopp codes, the swapped loss and the prototypes'
freeze.
"""

import pytest

import step_parity_util as util

PEER_VARIABLE = "SSLJAX_SWAV_PEER"
pytestmark = util.marks(PEER_VARIABLE, "a facebookresearch/swav checkout")


@pytest.fixture(scope="module")
def step_parity():
  return util.step_parity_module("torch")


def _compare(step_parity, **kw):
  import jax  # pylint: disable=import-outside-toplevel
  # 10 steps: the prototypes frozen for the first epoch of 5, then free.
  with jax.enable_x64(True):
    return step_parity.compare(util.args("swav", PEER_VARIABLE, **kw))


@pytest.mark.parametrize("local", [0, 2])
def test_swav_step_equals_the_official_step_in_float64(step_parity, local):
  result = _compare(step_parity, local=local)
  assert result["peer_commit"]
  assert result["losses"][0]["relative"] < 1e-13  # the same forward pass
  assert max(r["relative"] for r in result["losses"]) < 1e-12
  after = result["after_K_steps"]
  assert after["parameters"]["worst_over_update"] < 1e-9
  assert after["bn_means"]["worst_over_update"] < 1e-9
  if not local:
    # flax averages the biased batch variance, PyTorch the unbiased one:
    # turned into PyTorch's, they agree.
    assert after["bn_vars"]["worst_over_update"] > 1e-4
    assert after["bn_vars, ssljax's made unbiased"][
        "largest_abs_difference"] < 1e-12


def test_per_view_batch_norm_is_seen(step_parity):
  # The comparison sees the forward: BatchNorm over each view on its own
  # (the solo-learn recipes' forward) parts from the official one at once.
  result = _compare(step_parity, local=2,
                    set=["swav.batch_norm_views=per_view"])
  assert result["losses"][0]["relative"] > 1e-6


def test_optax_adam_count_is_seen(step_parity):
  # Adam's step count advancing while the prototypes are frozen (optax's
  # one count) in place of PyTorch's per-parameter count moves the
  # prototypes once they thaw.
  result = _compare(step_parity, set=["optim.frozen_adam_count=advance"])
  assert result["after_K_steps"]["parameters"]["worst_over_update"] > 1e-3
