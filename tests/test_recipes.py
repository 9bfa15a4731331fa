"""The recipe configs: every variant validates, learning rates match their
sources, and the smoke variants run end to end.

    .venv/bin/python -m pytest tests/test_recipes.py          # fast suite
    .venv/bin/python -m pytest tests/test_recipes.py -m slow  # other smokes
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ssljax import config_validation, optimizers
from ssljax.methods import ema

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from configs import cifar_resnet18  # noqa: E402
from configs import imagenet100_resnet18  # noqa: E402
from configs import imagenet_vit  # noqa: E402
from configs import imagenette_vit_small  # noqa: E402
from configs import vicreg_imagenet_resnet50  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ALL = ([("cifar_resnet18", a) for a in cifar_resnet18.all_args()] +
       [("imagenet100_resnet18", a) for a in imagenet100_resnet18.all_args()] +
       [("vicreg_imagenet_resnet50", a)
        for a in vicreg_imagenet_resnet50.VARIANTS] +
       [("imagenette_vit_small", a) for a in imagenette_vit_small.all_args()] +
       [("imagenet_vit", a) for a in imagenet_vit.all_args()])
MODULES = {"cifar_resnet18": cifar_resnet18,
           "imagenet100_resnet18": imagenet100_resnet18,
           "vicreg_imagenet_resnet50": vicreg_imagenet_resnet50,
           "imagenette_vit_small": imagenette_vit_small,
           "imagenet_vit": imagenet_vit}


def _config(module, arg):
  return MODULES[module].get_config(arg)


@pytest.mark.parametrize("module,arg", ALL, ids=[f"{m}:{a}" for m, a in ALL])
def test_recipe_validates(module, arg):
  config = _config(module, arg)
  config_validation.validate(config)
  words = set(arg.split(","))
  if "smoke" in words:
    assert config.dataset.name == "image_folder" and config.dataset.generate
    assert config.num_steps == 3 and config.batch_size == 16
  if "multicrop" in words:
    assert (config.views.num_global, config.views.num_local) == (2, 4)
    assert (config.views.size, config.views.local_size) == (32, 16)
    # DINO's and LeJEPA's own forms take V > 2 views; the others use the
    # graph.
    assert config.loss.form == (
        "multi_view" if config.method in ("dino", "lejepa") else "graph")


def test_cifar_default_arg_and_errors():
  c = cifar_resnet18.get_config()
  assert (c.method, c.dataset.name) == ("vicreg", "cifar10")
  assert cifar_resnet18.get_config("barlow_twins,cifar100").dataset.name == (
      "cifar100")
  with pytest.raises(ValueError, match="two-view"):
    cifar_resnet18.get_config("wmse,cifar10,multicrop")
  with pytest.raises(ValueError, match="two-view"):
    cifar_resnet18.get_config("nnclr,cifar10,multicrop")
  with pytest.raises(ValueError, match="unknown method"):
    cifar_resnet18.get_config("dinov2,cifar10")
  with pytest.raises(ValueError, match="unknown dataset"):
    cifar_resnet18.get_config("vicreg,stl10")
  with pytest.raises(ValueError, match="variant"):
    cifar_resnet18.get_config("vicreg,cifar10,long")


def _peak_lr(config):
  steps_per_epoch = 100
  total = int(config.epochs * steps_per_epoch)
  fn = optimizers.create_learning_rate_fn(config.optim, config.batch_size,
                                          steps_per_epoch, total)
  warmup = int(config.optim.warmup_epochs * steps_per_epoch)
  # The end of the schedule (past the run's last step when
  # optim.schedule_scale > 1; test_schedule_scale_stops_a_run_inside_...).
  return (float(fn(warmup)),
          float(fn(optimizers.schedule_steps(config.optim, total))))


def test_schedule_scale_stops_a_run_inside_its_schedules():
  # I-JEPA's ipe_scale: WarmupCosineSchedule and CosineWDSchedule have
  # T_max = int(ipe_scale * epochs * ipe), so with 1.25 (its code's
  # default; its configs use 1.0) the last step reads them at 80 %, and the
  # EMA line stops at 0.996 + 0.8 * 0.004.
  config = _config("imagenet_vit", "ijepa")
  assert config.optim.schedule_scale == 1.0
  assert config.teacher.schedule == "linear"
  config.optim.schedule_scale = 1.25
  steps_per_epoch = 100
  total = int(config.epochs * steps_per_epoch)
  fn = optimizers.create_learning_rate_fn(config.optim, config.batch_size,
                                          steps_per_epoch, total)
  warmup = int(config.optim.warmup_epochs * steps_per_epoch)
  t_max = int(1.25 * total) - warmup
  ref, final = 1e-3, 1e-6
  progress = (total - warmup) / t_max
  official = final + (ref - final) * 0.5 * (1 + np.cos(np.pi * progress))
  # The last update, k = total - 1, reads the schedule at total (the
  # official schedulers step before the update: optim.schedule_offset 1).
  assert config.optim.schedule_offset == 1
  assert float(fn(total - 1)) == pytest.approx(official, rel=1e-5)
  momentum = ema.momentum("linear", total, 1.25 * total, base=0.996,
                          final=1.0)
  assert float(momentum) == pytest.approx(0.996 + 0.8 * 0.004, abs=1e-7)
  wd = optimizers.cosine_schedule(
      0.04, 0.4, optimizers.schedule_steps(config.optim, total))(total)
  assert float(wd) == pytest.approx(
      0.4 + (0.04 - 0.4) * 0.5 * (1 + np.cos(np.pi * 0.8)), rel=1e-6)


@pytest.mark.parametrize("module,arg,peak,end", [
    # Bardes et al. 2022 Sec. 4.1: 0.2 x 2048/256; end_lr = 0.001 x peak
    # (facebookresearch/vicreg main_vicreg.py).
    ("vicreg_imagenet_resnet50", "default", 1.6, 1.6e-3),
    # solo-learn: yaml lr x (batch 256 x 1 device)/256; min_lr 0.
    ("cifar_resnet18", "vicreg,cifar10", 0.3, 0.0),
    ("cifar_resnet18", "barlow_twins,cifar100", 0.3, 0.0),
    ("cifar_resnet18", "simclr,cifar10", 0.4, 0.0),
    ("cifar_resnet18", "wmse,cifar10", 2e-3, 0.0),
    ("cifar_resnet18", "byol,cifar10", 1.0, 0.0),
    ("cifar_resnet18", "simsiam,cifar100", 0.5, 0.0),
    ("cifar_resnet18", "nnclr,cifar10", 0.4, 0.0),
    # solo-learn imagenet-100: lr 0.3 x (batch 128 x 2 devices)/256.
    ("imagenet100_resnet18", "vicreg", 0.3, 0.0),
    ("imagenet100_resnet18", "barlow_twins", 0.3, 0.0),
    ("imagenet100_resnet18", "byol", 0.5, 0.0),
    ("imagenet100_resnet18", "dino", 0.3, 0.0),
    # swav.yaml: lars lr 0.6 x 256/256 (cifar: batch 256 x 1 device;
    # imagenet-100: 128 x 2 devices).
    ("cifar_resnet18", "swav,cifar10", 0.6, 0.0),
    ("imagenet100_resnet18", "swav", 0.6, 0.0),
    # I-JEPA App. A / in1k yaml: lr 1e-3 at batch 2048, final 1e-6; MAE
    # Table 8: 1.5e-4 x 4096/256; DINO ViT-S/16: 5e-4 x 256/256, min 1e-6.
    ("imagenet_vit", "ijepa", 1e-3, 1e-6),
    ("imagenet_vit", "mae", 2.4e-3, 0.0),
    ("imagenette_vit_small", "dino", 5e-4, 1e-6),
    # DINOv2 ssl_default_config.yaml: base_lr 4e-3 x sqrt(batch/1024)
    # (scaling_rule sqrt_wrt_1024), min_lr 1e-6.
    ("imagenette_vit_small", "dinov2", 2e-3, 1e-6),
    ("imagenet_vit", "dinov2", 4e-3 * 2 ** 0.5, 1e-6),
    ("imagenette_vit_small", "ijepa", 1.25e-4, 1.25e-7),
])
def test_effective_learning_rate(module, arg, peak, end):
  got_peak, got_end = _peak_lr(_config(module, arg))
  assert got_peak == pytest.approx(peak, rel=1e-6)
  assert got_end == pytest.approx(end, rel=1e-5, abs=1e-9)


@pytest.mark.parametrize("module,arg,opt,wd,eta", [
    ("vicreg_imagenet_resnet50", "default", "lars", 1e-6, 1e-3),
    ("cifar_resnet18", "vicreg,cifar10", "lars", 1e-4, 0.02),
    ("cifar_resnet18", "wmse,cifar10", "adamw", 1e-6, None),
    ("imagenet100_resnet18", "vicreg", "lars", 1e-4, 0.02),
])
def test_optimiser_settings(module, arg, opt, wd, eta):
  o = _config(module, arg).optim
  assert (o.name, o.weight_decay) == (opt, wd)
  if eta is not None:
    assert o.lars.trust_coefficient == eta


def test_teacher_student_recipes_solo_learn_values():
  """Key values of scripts/pretrain/{cifar,imagenet-100}/*.yaml in
  vturrisi/solo-learn (and the defaults of solo/methods/*.py)."""
  byol = cifar_resnet18.get_config("byol,cifar10")
  assert (byol.teacher.momentum, byol.teacher.final_momentum) == (0.99, 1.0)
  assert (tuple(byol.model.projector), tuple(byol.model.predictor)) == (
      (4096, 256), (4096, 256))
  assert (byol.optim.weight_decay, byol.epochs, byol.batch_size) == (
      1e-5, 1000, 256)
  assert imagenet100_resnet18.get_config("byol").model.predictor[0] == 8192
  dino = cifar_resnet18.get_config("dino,cifar100")
  assert "projector" not in dino.model and dino.loss.form == "multi_view"
  assert dino.model.dino_head.out_dim == 4096  # num_prototypes
  assert dino.teacher.momentum == 0.9995
  assert dino.views.num_local == 0  # 2 large crops, no small ones
  assert dino.loss.teacher_temperature_warmup_epochs == 0.0
  assert imagenet100_resnet18.get_config(
      "dino").loss.teacher_temperature_warmup_epochs == 49.0
  nnclr = cifar_resnet18.get_config("nnclr,cifar10")
  assert (nnclr.loss.queue_size, nnclr.loss.temperature) == (65536, 0.2)
  assert tuple(nnclr.model.projector) == (2048, 2048, 256)
  mocov3 = cifar_resnet18.get_config("mocov3,cifar10")
  assert (mocov3.loss.temperature, mocov3.optim.weight_decay) == (0.2, 1e-6)
  simsiam = cifar_resnet18.get_config("simsiam,cifar10")
  assert simsiam.views.blur_prob == 0.5 and simsiam.views.saturation == 0.4
  assert tuple(simsiam.model.predictor) == (512, 2048)
  for module, arg in [("cifar_resnet18", "nnclr,cifar10,smoke"),
                      ("imagenet100_resnet18", "dino,smoke")]:
    c = _config(module, arg)
    assert c.batch_size == 16
    assert c.method != "nnclr" or c.loss.queue_size == 64
    assert c.method != "dino" or c.model.dino_head.out_dim == 64


def test_swav_recipes_solo_learn_values():
  """scripts/pretrain/{cifar,imagenet-100}/swav.yaml of solo-learn."""
  for c in (cifar_resnet18.get_config("swav,cifar100"),
            imagenet100_resnet18.get_config("swav")):
    assert c.method == "swav" and "graph" not in c
    assert tuple(c.model.projector) == (2048, 128)
    assert c.model.num_prototypes == 3000
    assert (c.loss.queue_length, c.loss.epoch_queue_starts,
            c.loss.temperature) == (3840, 50.0, 0.1)
    assert c.optim.freeze_last_layer_epochs == 2.0
    assert (c.optim.name, c.optim.weight_decay,
            c.optim.lars.trust_coefficient) == ("lars", 1e-6, 0.02)
    assert (c.views.num_global, c.views.num_local) == (2, 0)
    assert (c.views.blur_prob, c.views.solarize_prob) == (0.5, 0.0)
    assert c.views.brightness == 0.8 and c.batch_size == 256
  assert cifar_resnet18.get_config("swav,cifar10").epochs == 1000
  assert imagenet100_resnet18.get_config("swav").epochs == 400


def test_dinov2_recipes_follow_the_official_config():
  """Key values of DINOv2's ssl_default_config.yaml and vitl16_short.yaml."""
  for c in (imagenet_vit.get_config("dinov2"),
            imagenette_vit_small.get_config("dinov2")):
    assert c.method == "dinov2" and c.loss.centering == "centering"
    assert (c.loss.teacher_temperature, c.loss.warmup_teacher_temperature,
            c.loss.teacher_temperature_warmup_epochs) == (0.07, 0.04, 30.0)
    assert (c.loss.koleo_weight, c.loss.ibot_weight) == (0.1, 1.0)
    assert tuple(c.masks.mask_ratio_min_max) == (0.1, 0.5)
    assert c.masks.mask_sample_probability == 0.5
    assert not c.model.ibot_separate_head
    assert (c.model.dino_head.out_dim, c.model.dino_head.hidden_dim) == (
        65536, 2048)
    assert (c.teacher.momentum, c.optim.weight_decay,
            c.optim.final_weight_decay) == (0.992, 0.04, 0.4)
    assert (c.views.num_local, c.views.local_size) == (8, 96)
    assert tuple(c.views.crop_scale) == (0.32, 1.0)
  big = imagenet_vit.get_config("dinov2")
  assert (big.batch_size, big.epochs,
          big.model.encoder_kwargs.hidden_dim) == (2048, 100, 1024)


def test_masked_vit_recipes_follow_the_papers():
  """I-JEPA's multi-block settings and MAE's decoder and masking (the
  official values, configs/_masked_vit_recipes.py)."""
  ij = imagenet_vit.get_config("ijepa")
  assert (ij.batch_size, ij.epochs, ij.model.encoder_kwargs.hidden_dim) == (
      2048, 600, 768)
  assert not ij.model.encoder_kwargs.class_token
  assert (ij.masks.num_targets, tuple(ij.masks.target_scale),
          tuple(ij.masks.context_scale), ij.masks.min_keep) == (
              4, (0.15, 0.2), (0.85, 1.0), 10)
  mae = imagenet_vit.get_config("mae")
  assert (mae.batch_size, mae.masks.mask_ratio, mae.loss.norm_pix_loss) == (
      4096, 0.75, True)
  assert (mae.model.mae_decoder.width, mae.model.mae_decoder.depth) == (512, 8)
  for arg in imagenette_vit_small.all_args():
    c = imagenette_vit_small.get_config(arg)
    assert c.model.encoder == "vit_small16"
    assert "smoke" in arg or (c.epochs, c.views.size) == (200, 224)
  with pytest.raises(ValueError, match="unknown method"):
    imagenet_vit.get_config("dino")
  le = imagenette_vit_small.get_config("lejepa")
  assert (le.lejepa.lam, le.lejepa.num_slices) == (0.05, 1024)
  assert (le.views.num_global, le.views.num_local) == (2, 6)
  assert le.model.encoder_kwargs.representation == "cls_last2"
  assert imagenet_vit.get_config("lejepa").views.local_size % 14 == 0


def test_asymmetric_views():
  v = vicreg_imagenet_resnet50.get_config().views
  assert tuple(v.blur_prob) == (1.0, 0.1)
  assert tuple(v.solarize_prob) == (0.0, 0.2)
  v = imagenet100_resnet18.get_config("barlow_twins").views
  assert tuple(v.blur_prob) == (1.0, 0.1)
  assert tuple(v.solarize_prob) == (0.0, 0.2)
  v = cifar_resnet18.get_config("barlow_twins,cifar10").views
  assert tuple(v.solarize_prob) == (0.0, 0.2) and v.blur_prob == 0.0


def _run_smoke(module, arg, tmp_path, extra=()):
  workdir = tmp_path / "run"
  cmd = [sys.executable, "-m", "ssljax.main", "--config",
         os.path.join(REPO, "configs", module + ".py") + ":" + arg,
         f"--config.dataset.data_dir={tmp_path / 'images'}",
         f"--workdir={workdir}", *extra]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                        timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads((workdir / "results.json").read_text())
  assert results["steps"] == 3
  assert results["dataset"] == "image_folder"
  assert 0.0 <= results["evals"]["probe/test_accuracy"] <= 1.0
  assert 0.0 <= results["evals"]["knn/test_accuracy"] <= 1.0
  return results


def test_image_folder_multicrop_main_job(tmp_path):
  """The fast suite's end-to-end run of the recipes' code path: a generated
  RGB image folder, 2 x 24 px + 2 x 12 px views cut on the host, the BYOL
  colour ops on the device, graph-form VICReg, with the small CNN (the
  recipes' ResNets compile for over a minute here: see the slow runs)."""
  workdir = tmp_path / "run"
  overrides = {
      "dataset.name": "image_folder", "dataset.generate": True,
      "dataset.data_dir": tmp_path / "images", "dataset.train_split": "train",
      "dataset.test_split": "test", "loss.form": "graph", "views.size": 24,
      "views.num_local": 2, "views.local_size": 12,
      "views.saturation": 0.2, "views.hue": 0.1, "views.grayscale_prob": 0.2,
      "views.blur_prob": 0.5, "num_steps": 3,
      "eval_inputs.baselines": False}
  cmd = [sys.executable, "-m", "ssljax.main", "--config",
         os.path.join(REPO, "configs", "vicreg.py") + ":smoke",
         f"--workdir={workdir}"] + [f"--config.{k}={v}"
                                    for k, v in overrides.items()]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                        timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads((workdir / "results.json").read_text())
  assert results["steps"] == 3 and results["dataset"] == "image_folder"
  assert 0.0 <= results["evals"]["probe/test_accuracy"] <= 1.0
  assert len(list((tmp_path / "images" / "train").rglob("*.jpg"))) == 64


@pytest.mark.slow
def test_cifar_vicreg_multicrop_smoke(tmp_path):
  """The CIFAR recipe end to end: 2 x 32 px + 4 x 16 px views on a generated
  image folder, graph-form VICReg, LARS, ResNet-18 (~100 s here)."""
  results = _run_smoke("cifar_resnet18", "vicreg,cifar10,multicrop,smoke",
                       tmp_path)
  assert results["loss_form"] == "graph"


@pytest.mark.slow
def test_cifar_dino_smoke(tmp_path):
  """solo-learn's CIFAR DINO recipe end to end at toy size: DINO head,
  momentum teacher, centre, LARS, ResNet-18 on a generated image folder."""
  results = _run_smoke("cifar_resnet18", "dino,cifar10,smoke", tmp_path)
  assert results["loss_form"] == "multi_view"


SLOW = [("cifar_resnet18", f"{m},cifar10,smoke")
        for m in cifar_resnet18.METHODS if m != "dino"] + [
            ("cifar_resnet18", "barlow_twins,cifar100,multicrop,smoke"),
            ("cifar_resnet18", "simclr,cifar10,multicrop,smoke"),
            ("imagenet100_resnet18", "vicreg,smoke"),
            ("imagenet100_resnet18", "vicreg,asymmetric,smoke"),
            ("imagenet100_resnet18", "barlow_twins,smoke"),
            ("vicreg_imagenet_resnet50", "smoke"),
            ("imagenette_vit_small", "lejepa,smoke"),
            ("imagenet_vit", "lejepa,smoke"),
            ("imagenette_vit_small", "dino,smoke"),
            ("imagenette_vit_small", "ijepa,smoke"),
            ("imagenette_vit_small", "mae,smoke"),
            ("imagenet_vit", "ijepa,smoke"),
            ("imagenet_vit", "mae,smoke")]


@pytest.mark.slow
@pytest.mark.parametrize("module,arg", SLOW, ids=[f"{m}:{a}" for m, a in SLOW])
def test_recipe_smoke(module, arg, tmp_path):
  _run_smoke(module, arg, tmp_path)
