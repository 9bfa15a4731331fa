"""benchmarks/step_parity.py: ssljax's whole BYOL step against the official
``ByolExperiment.update_pmap`` of google-deepmind/deepmind-research's
byol (JAX and haiku).

Runs where dm-haiku is importable and the official checkout (the
deepmind-research repository, or a copy holding its ``byol`` folder) is
given by ``SSLJAX_BYOL_PEER`` (a path; the repository holds none of its
code): skipped elsewhere, CI included. In float64 both sides agree up to
the official code's own float32 warm-up learning rate (measured
2026-11-27: losses within 5.3e-10 over 20 steps, the first two within
2.3e-16).
"""

import pytest

import step_parity_util as util

PEER_VARIABLE = "SSLJAX_BYOL_PEER"
pytestmark = util.marks(PEER_VARIABLE, "a google-deepmind/deepmind-research checkout", subfolder="byol")


@pytest.fixture(scope="module")
def step_parity():
  return util.step_parity_module("haiku", "tree")


def _args(**kw):
  return util.args("byol", PEER_VARIABLE, **kw)


def test_byol_step_equals_the_official_step_in_float64(step_parity):
  import jax  # pylint: disable=import-outside-toplevel
  with jax.enable_x64(True):
    result = step_parity.compare(_args())
  assert result["peer_commit"]
  first = result["losses"][0]
  assert first["relative"] < 1e-14  # the same forward pass
  # The official warm-up learning rate is float32 (schedules.py casts the
  # step): ~1e-8 of the rate, ~1e-10 of the loss.
  assert max(r["relative"] for r in result["losses"]) < 1e-8
  after = result["after_K_steps"]
  for part in after:
    if isinstance(after[part], dict) and "hidden biases" not in part:
      assert after[part]["worst_over_update"] < 1e-6, part
  assert after["online hidden biases (none in ssljax)"][
      "largest_abs_difference"] < 1e-12
  assert after["lr schedule"] < 1e-6
  assert after["momentum schedule"] < 1e-12


def test_optax_lars_momentum_is_seen(step_parity):
  # optax.lars's momentum of lr-scaled steps instead of the official
  # momentum of gradients: the losses part once the rate moves.
  import jax  # pylint: disable=import-outside-toplevel
  with jax.enable_x64(True):
    result = step_parity.compare(
        _args(set=["optim.lars.momentum_buffer=updates"]))
  assert max(r["relative"] for r in result["losses"]) > 1e-6
