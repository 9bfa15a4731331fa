"""The ":cpu" variants of the ViT recipes configs/lejepa.py and configs/mae.py
(issue 44): they validate, keep their methods, and run a few steps of their
own ViT end to end on a slice of Fashion-MNIST.
"""

import json
import os
import subprocess
import sys

import pytest

from ssljax import config_validation

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from configs import dinov2, lejepa, mae  # noqa: E402


def test_lejepa_cpu_variant():
  c = lejepa.get_config("cpu")
  config_validation.validate(c)
  assert "cpu" in lejepa.VARIANTS and c.method == "lejepa"
  # A small ViT with the default's 512-wide head; MINIMAL.md's 4 global
  # views of one kind and lr 2e-3; λ 0.1 by the CV probe.
  kw = c.model.encoder_kwargs
  assert (kw.hidden_dim, kw.depth, kw.patch_size, kw.head_dim) == (
      64, 4, 4, 512)
  assert (c.views.num_global, c.views.num_local) == (4, 0)
  assert (c.lejepa.lam, c.optim.learning_rate) == (0.1, 2e-3)
  with pytest.raises(ValueError, match="stands alone"):
    lejepa.get_config("cpu,smoke")


def test_mae_cpu_variant():
  c = mae.get_config("cpu")
  config_validation.validate(c)
  assert "cpu" in mae.VARIANTS and c.method == "mae"
  assert c.masks.mask_ratio == 0.75 and c.loss.norm_pix_loss
  # DINOv2's linear probe: the last four blocks' class tokens and the patch
  # mean (the encoder has at least four blocks); the main job's 4 epochs.
  assert c.model.encoder_kwargs.representation == "cls_last4_avg"
  assert c.model.encoder_kwargs.depth >= 4
  assert (c.num_steps, c.batch_size) == (4 * 234, 256)
  assert c.model.encoder_kwargs.hidden_dim < 192  # smaller than ViT-Tiny
  with pytest.raises(ValueError, match="unknown variant"):
    mae.get_config("gpu")


def test_dinov2_cpu_variant():
  c = dinov2.get_config("cpu")
  config_validation.validate(c)
  assert c.method == "dinov2"
  # DINOv2's linear-evaluation input (4 class tokens and the patch mean)
  # after 3 epochs, and the official optimiser step of the default.
  assert c.model.encoder_kwargs.representation == "cls_last4_avg"
  assert c.model.encoder_kwargs.depth >= 4 and c.epochs == 3
  assert c.model.encoder_kwargs.hidden_dim < 192
  assert (c.optim.clip_mode, c.optim.freeze_last_layer_by) == (
      "per_module", "learning_rate")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lejepa", "mae"])
def test_cpu_variant_runs(name, tmp_path):
  """Two steps of batch 16 of the variant's own ViT with the methods
  table's evaluators (benchmarks/methods_config.py), baselines off (about a
  minute each on 2 shared cores: slow suite)."""
  workdir = tmp_path / "run"
  overrides = {"dataset.train_split": "train[:256]",
               "dataset.test_split": "test[:128]", "batch_size": 16,
               "num_steps": 2, "eval_inputs.baselines": False,
               "eval_inputs.batch_size": 128, "eval_inputs.view_samples": 32,
               "evals.probe.max_iter": 10}
  cmd = [sys.executable, "-m", "ssljax.main", "--config",
         os.path.join(REPO, "benchmarks", "methods_config.py") + f":{name}:cpu",
         f"--workdir={workdir}"] + [f"--config.{k}={v}"
                                    for k, v in overrides.items()]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                        timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads((workdir / "results.json").read_text())
  assert results["steps"] == 2
  assert 0.0 <= results["evals"]["probe/test_accuracy"] <= 1.0
