"""benchmarks/step_parity.py: ssljax's whole DINO step against the official
train_one_epoch of facebookresearch/dino.

Runs where torch is importable and the official checkout is given by
``SSLJAX_DINO_PEER`` (a path; the repository holds none of its code):
skipped elsewhere, CI included. In float64 both sides agree to float64
rounding (measured 2026-11-27 over 20 steps: losses within 2.4e-15,
updates within 2.5e-10 of their size, twice the rounding reference), with
the small ViT and with configs/dino.py's own CNN (2026-11-29).
"""

import pytest

import step_parity_util as util

PEER_VARIABLE = "SSLJAX_DINO_PEER"
pytestmark = util.marks(PEER_VARIABLE, "a facebookresearch/dino checkout")


@pytest.fixture(scope="module")
def step_parity():
  return util.step_parity_module("torch", "torchvision")


def _args(**kw):
  return util.args("dino", PEER_VARIABLE, **{"steps": 5, **kw})


def test_dino_step_equals_the_official_step_in_float64(step_parity):
  import jax  # pylint: disable=import-outside-toplevel
  with jax.enable_x64(True):
    result = step_parity.compare(_args())
  assert result["peer_commit"]
  first = result["losses"][0]
  assert first["relative"] < 1e-14  # the same forward pass
  assert max(r["relative"] for r in result["losses"]) < 1e-8
  for part in ("student", "teacher"):
    assert result["after_K_steps"][part]["worst_over_update"] < 1e-6


def test_global_clipping_is_seen(step_parity):
  # The comparison is sharp enough to see a difference of the step: with
  # global instead of per-tensor clipping the losses part at once.
  import jax  # pylint: disable=import-outside-toplevel
  with jax.enable_x64(True):
    result = step_parity.compare(_args(set=["optim.clip_mode=global"]))
  assert max(r["relative"] for r in result["losses"]) > 1e-5


def test_dino_step_with_local_crops_equals_the_official_step(step_parity):
  # Two 14-px local crops: their position embeddings are resized as DINO's
  # interpolate_pos_encoding (pos_interpolation="dino"); with timm's
  # resampling the losses part at once.
  import jax  # pylint: disable=import-outside-toplevel
  with jax.enable_x64(True):
    result = step_parity.compare(_args(local=2))
    timm = step_parity.compare(_args(
        local=2, steps=5,
        set=["model.encoder_kwargs.pos_interpolation=timm"]))
  assert max(r["relative"] for r in result["losses"]) < 1e-13
  for part in ("student", "teacher"):
    assert result["after_K_steps"][part]["worst_over_update"] < 1e-6
  assert timm["losses"][0]["relative"] > 1e-5


@pytest.mark.parametrize("local", [0, 2])
def test_dino_cnn_step_equals_the_official_step(step_parity, local):
  # configs/dino.py's own CNN, its BatchNorm in the official
  # MultiCropWrapper's batches (dino.batch_norm_views="multi_crop"): the
  # crops of one resolution through the backbone together, the teacher's
  # two global crops together. One view at a time parts the losses at once.
  import jax  # pylint: disable=import-outside-toplevel
  with jax.enable_x64(True):
    result = step_parity.compare(_args(encoder="cnn", local=local,
                                       steps=10))
    per_view = step_parity.compare(_args(
        encoder="cnn", local=local, set=["dino.batch_norm_views=per_view"]))
  assert result["losses"][0]["relative"] < 1e-13
  assert max(r["relative"] for r in result["losses"]) < 1e-12
  after = result["after_K_steps"]
  for part in ("student", "teacher", "student bn_means", "teacher bn_means"):
    assert after[part]["worst_over_update"] < 1e-8, part
  if not local:
    for net in ("student", "teacher"):
      assert after[f"{net} bn_vars, ssljax's made unbiased"][
          "largest_abs_difference"] < 1e-12
  assert per_view["losses"][0]["relative"] > 1e-6
