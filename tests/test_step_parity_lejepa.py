"""benchmarks/step_parity.py: ssljax's whole LeJEPA step against the
authors' minimal training step (rbalestr-lab/lejepa MINIMAL.md, its code
read from the checkout and executed).

Runs where torch is importable and the official checkout is given by
``SSLJAX_LEJEPA_PEER`` (a path; the repository holds none of its code):
skipped elsewhere, CI included. In float64 the two steps agree to float64
rounding at every step (measured 2026-11-27 over 20 steps: docs/fidelity.md).
MINIMAL.md's cosine needs a second epoch, so the shortest run is 10 steps.
"""

import pytest

import step_parity_util as util

PEER_VARIABLE = "SSLJAX_LEJEPA_PEER"
pytestmark = util.marks(PEER_VARIABLE, "an rbalestr-lab/lejepa checkout")


@pytest.fixture(scope="module")
def step_parity():
  return util.step_parity_module("torch", "timm")


def _args(**kw):
  return util.args("lejepa", PEER_VARIABLE, **kw)


def test_lejepa_step_equals_the_official_step_in_float64(step_parity):
  import jax  # pylint: disable=import-outside-toplevel
  with jax.enable_x64(True):
    result = step_parity.compare(_args())
  assert result["peer_commit"]
  assert max(r["relative"] for r in result["losses"]) < 1e-12
  assert result["after_K_steps"]["network"]["worst_over_update"] < 1e-9
  assert result["after_K_steps"]["batch_norm_running_mean"] < 1e-9
  assert result["learning_rate"]["worst_relative"] < 1e-14
  for moved in result["null_gradient_largest_move"].values():
    assert moved["official"] < 1e-6 and moved["ssljax"] < 1e-6


def test_per_view_batch_norm_is_seen(step_parity):
  # The comparison is sharp enough to see a difference of the step: with
  # one BatchNorm batch per view the first loss already differs.
  import jax  # pylint: disable=import-outside-toplevel
  with jax.enable_x64(True):
    result = step_parity.compare(
        _args(set=["lejepa.batch_norm_views=per_view"]))
  assert result["losses"][0]["relative"] > 1e-4
