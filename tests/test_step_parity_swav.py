"""benchmarks/step_parity.py: ssljax's whole SwAV step against the official
``train`` of facebookresearch/swav (main_swav.py), both with the config's
AdamW or both with the official optimiser (SGD in apex's LARC, loaded from
the checkout ``SSLJAX_APEX_PEER`` names: one holding apex/parallel/LARC.py).

Runs where torch is importable and the official checkout is given by
``SSLJAX_SWAV_PEER`` (a path; the repository holds none of its code):
skipped elsewhere, CI included. In float64 both sides agree to float64
rounding over whole steps, with and without local crops: prototype
normalisation, the multi-crop forward (``swav.batch_norm_views =
"multi_crop"``), Sinkhorn-Knopp codes, the swapped loss, the prototypes'
freeze and the queue.
"""

import os

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


def test_swav_queue_equals_the_official_queue(step_parity):
  # A queue of 2 batches from epoch 1 (step 5), used once full (step 7):
  # the queued embeddings' scores against the current prototypes join the
  # Sinkhorn-Knopp batch on both sides.
  result = _compare(step_parity, queue=True)
  assert result["queue"]
  assert max(r["relative"] for r in result["losses"]) < 1e-12
  assert result["after_K_steps"]["parameters"]["worst_over_update"] < 1e-9
  # Without the queue on ssljax's side the codes part from step 7 on.
  result = _compare(step_parity, queue=True, set=["loss.queue_length=0"])
  assert max(r["relative"] for r in result["losses"][:7]) < 1e-12
  assert result["losses"][7]["relative"] > 1e-4


APEX_VARIABLE = "SSLJAX_APEX_PEER"
needs_apex = pytest.mark.skipif(
    not os.path.isfile(os.path.join(util.peer(APEX_VARIABLE), "apex",
                                    "parallel", "LARC.py")),
    reason=f"set {APEX_VARIABLE} to an NVIDIA/apex checkout with "
           "apex/parallel/LARC.py")


@needs_apex
@pytest.mark.parametrize("local", [0, 2])
def test_swav_step_with_the_official_larc_in_float64(step_parity, local):
  # SGD (momentum 0.9, weight decay on every parameter) in LARC (η 0.001,
  # no clipping), the frozen prototypes skipped: ssljax's LARS with
  # lars.trust_ratio="larc" on every parameter.
  result = _compare(step_parity, local=local, optimizer="larc",
                    apex=util.peer(APEX_VARIABLE))
  assert result["optimizer"] == "larc"
  assert max(r["relative"] for r in result["losses"]) < 1e-12
  after = result["after_K_steps"]
  assert after["parameters"]["worst_over_update"] < 1e-9
  assert after["bn_means"]["worst_over_update"] < 1e-9


@needs_apex
def test_larc_on_kernels_only_is_seen(step_parity):
  # LARC reaches every parameter in SwAV: leaving biases and BatchNorm out
  # (solo-learn's exclude_bias_n_norm) moves them by unscaled gradients.
  result = _compare(step_parity, optimizer="larc",
                    apex=util.peer(APEX_VARIABLE),
                    set=["optim.weight_decay_mask=kernels"])
  assert result["after_K_steps"]["parameters"]["worst_over_update"] > 1e-3
