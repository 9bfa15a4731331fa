"""benchmarks/accelerator.py: its --smoke run ends and writes a sound table.

No speed is asserted: the numbers must exist, be positive and finite, and
agree with each other (images/s = batch / seconds per step; the stall
fraction is the share of the end-to-end step beyond the device step).
"""

import json
import math
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from benchmarks import accelerator  # noqa: E402
from ssljax import config_validation, data  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROW_NUMBERS = ("step_s", "step_images_per_s", "step_views_per_s", "e2e_s",
               "e2e_images_per_s", "compile_s", "xla_step_bytes")


def _check_row(row):
  assert "error" not in row, row.get("error")
  for key in ROW_NUMBERS:
    assert math.isfinite(row[key]) and row[key] > 0, (key, row[key])
  assert row["step_images_per_s"] == pytest.approx(row["batch"] / row["step_s"])
  assert row["step_views_per_s"] == pytest.approx(
      row["num_views"] * row["step_images_per_s"])
  assert row["e2e_images_per_s"] == pytest.approx(row["batch"] / row["e2e_s"])
  assert row["stall_fraction"] == pytest.approx(
      max(0.0, 1.0 - row["step_s"] / row["e2e_s"]))
  assert 0.0 <= row["stall_fraction"] < 1.0
  assert 0.0 <= row["host_wait_fraction"] <= 1.0 + 1e-9
  assert len(row["step_windows_s"]) == row["repeats"]
  assert row["metrics_finite"] is True
  peak = row["peak_device_bytes"]
  assert peak is None or (isinstance(peak, int) and peak > 0)
  assert row["batch"] == (row["devices"]
                          * accelerator.SMOKE_SIZES["batch_per_device"])


def _check_result(result, out, models):
  assert result["smoke"] is True
  m = result["machine"]
  assert m["devices"] and m["jax"] and m["backend"] and m["cpus"] >= 1
  assert [r["model"] for r in result["rows"]] == models
  for row in result["rows"]:
    _check_row(row)
  assert "skipped" in result["torch"] or result["torch"]["step_s"] > 0
  with open(os.path.join(out, "accelerator.json")) as f:
    assert json.load(f)["rows"] == json.loads(json.dumps(result["rows"]))
  with open(os.path.join(out, "accelerator.md")) as f:
    table = f.read()
  for row in result["rows"]:
    line = next(l for l in table.splitlines()
                if l.startswith(f"| {row['title']} |"))
    assert len(line.split("|")) == 14  # 12 columns
    if row["peak_device_bytes"] is None:
      assert "| n/a |" in line


def test_compile_only_fills_the_cache_that_the_timed_run_loads(
    tmp_path, restore_compilation_cache):
  """The cheapest model (ViT-Tiny MAE on 28 px), in this process, twice with
  one cache directory: --compile_only gives compile figures and the lowered
  step's matrix products, no timings, a 12-column row, and misses the empty
  cache; the timed run after it then loads that very program (a hit: the
  warm-up compiles exactly what is timed) and writes a sound row."""
  cache = str(tmp_path / "cache")
  argv = ["--smoke", "--isolate", "no", "--models", "vitt4_mae_fmnist",
          "--torch", "off", "--data_dir", str(tmp_path),
          "--compilation_cache", cache]
  out = str(tmp_path / "compile_only")
  result = accelerator.main(["--out", out, *argv, "--compile_only"])
  (row,) = result["rows"]
  assert row["compile_cache"] == "miss"
  assert row["matrix_products"] > 0 and row["stablehlo_lines"] > 0
  assert 0 < row["trace_and_lower_s"] <= row["compile_s"]
  assert "step_images_per_s" not in row and "compile" in row["phases_s"]
  with open(os.path.join(out, "accelerator.md")) as f:
    (line,) = [l for l in f if l.startswith(f"| {row['title']} ")]
  assert "compile only" in line and len(line.split("|")) == 14
  assert os.listdir(cache)

  out = str(tmp_path / "out")
  result = accelerator.main(["--out", out, *argv])
  _check_result(result, out, ["vitt4_mae_fmnist"])
  assert result["torch"] == {"skipped": "--torch off"}
  assert result["rows"][0]["compile_cache"] == "hit"
  with open(os.path.join(out, "accelerator.md")) as f:
    assert "(cache hit)" in f.read()


@pytest.mark.slow
def test_smoke_of_the_default_models_in_child_processes(tmp_path):
  """The whole --smoke command as a user runs it (a process per model):
  several minutes on 2 busy cores."""
  out = str(tmp_path / "out")
  subprocess.run([sys.executable, "benchmarks/accelerator.py", "--out", out,
                  "--smoke", "--isolate", "yes", "--data_dir", str(tmp_path)],
                 cwd=ROOT,
                 check=True, capture_output=True, text=True)
  with open(os.path.join(out, "accelerator.json")) as f:
    result = json.load(f)
  _check_result(result, out, accelerator.DEFAULT_MODELS)


def test_dino_case_has_two_global_and_six_local_crops():
  """The full-size DINO case: 2 x 224 + 6 x 96 px, per-view ops cut to V = 8,
  and the config still validates."""
  args = accelerator.parse_args(["--out", "unused"])
  config = accelerator.model_config(accelerator.CASES["vits16_dino"], args)
  config_validation.validate(config)
  spec = data.view_spec(config.views)
  assert accelerator.describe_views(spec) == "2×224 + 6×96"
  assert len(config.views.blur_prob) == len(config.views.solarize_prob) == 8
  assert config.model.dtype == "bfloat16"


def test_table_marks_failed_models_and_unknown_memory():
  row = {"model": "r18_cifar", "title": "ResNet-18 CIFAR VICReg",
         "views": "2×32", "dtype": "float32", "batch": 8, "devices": 1,
         "step_images_per_s": 10.0, "e2e_images_per_s": 5.0,
         "stall_fraction": 0.5, "compile_s": 1.0, "peak_device_bytes": None,
         "xla_step_bytes": float("nan"), "workers": 0, "threads": 4}
  result = {"smoke": True, "machine": accelerator.machine(),
            "rows": [row, {"model": "r50_in1k", "error": "OOM"}],
            "torch": {"skipped": "no CUDA"}, "load_average_before": (1, 1, 1),
            "load_average_after": (2, 2, 2)}
  lines = accelerator.markdown(result).splitlines()
  line = next(l for l in lines if l.startswith("| ResNet-18"))
  assert "| 1 | 4 threads | 10.0 | 5.0 | 50.0 | 1.0 | n/a | n/a |" in line
  assert any(l.startswith("| r50_in1k | failed: OOM") for l in lines)
  assert lines[-1] == "PyTorch ResNet-50 step: not measured (no CUDA)."


def test_table_gives_the_jax_over_pytorch_ratio_per_device():
  """2 devices at 3,000 img/s in all against PyTorch's 1,000 on one GPU at
  the same batch per device: 1.50."""
  row = {"model": "r50_in1k", "title": "ResNet-50 ImageNet VICReg",
         "views": "2×224", "dtype": "bfloat16", "batch": 512, "devices": 2,
         "step_images_per_s": 3000.0, "e2e_images_per_s": 2500.0,
         "stall_fraction": 1 / 6, "compile_s": 40.0,
         "peak_device_bytes": 30 * 2**30, "xla_step_bytes": 28 * 2**30,
         "workers": 12, "threads": 1}
  torch_row = {"model": "torch_r50", "device": "GPU", "torch": "2",
               "torch_compile": False, "batch": 256,
               "step_images_per_s": 1000.0, "peak_device_bytes": 2**30}
  result = {"smoke": False, "machine": accelerator.machine(), "rows": [row],
            "torch": torch_row, "load_average_before": (0, 0, 0),
            "load_average_after": (0, 0, 0)}
  lines = accelerator.markdown(result).splitlines()
  assert ("| ResNet-50 ImageNet VICReg | 2×224 | bfloat16 | 512 | 2 | "
          "12 processes × 1 thread | 3,000.0 | 2,500.0 | 16.7 | 40.0 | "
          "30.00 GiB | 28.00 GiB |") in lines
  assert lines[-1] == "JAX / PyTorch step img/s: 1.50 (per device)."
  assert "non-finite" not in accelerator.markdown(result)
  torch_row["loss_finite"] = False  # said, and the ratio still given
  lines = accelerator.markdown(result).splitlines()
  assert lines[-2].endswith("loss non-finite after the timed steps.")
  assert lines[-1] == "JAX / PyTorch step img/s: 1.50 (per device)."
