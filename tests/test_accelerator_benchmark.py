"""benchmarks/accelerator.py: its --smoke run ends and writes a sound table.

No speed is asserted: the numbers must exist, be positive and finite, and
agree with each other (images/s = batch / seconds per step; the stall
fraction is the share of the end-to-end step beyond the device step; MFU =
FLOPs per image x images/s / devices / the measured peak). The FLOP counts
of both sides equal the textbook formula on a matrix product and a
convolution, and the PyTorch twin's view ops give ssljax's outputs on the
same draws (the tests that need torch skip without it: run them with a
Python that has torch, e.g. `make test-bench`).
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


def _check_fair(result, models, torch_modes):
  """The same-work rows: for each model ssljax on ready and on device-made
  views, then PyTorch in each mode (measured or skipped with a reason);
  FLOPs positive, MFU = FLOPs/img x img/s / devices / peak."""
  peak = result["fair"]["peak"]
  assert peak["flop_per_s"] > 0 and peak["size"] == 256
  assert peak["flop_per_s"] == pytest.approx(
      2 * 256**3 / sorted(peak["windows_s"])[1])
  rows = result["fair"]["rows"]
  expected = []
  for m in models:
    expected += [(m, "ssljax", None)] * 2 + [(m, "pytorch", t)
                                             for t in torch_modes]
  got = [(r["model"], r["side"], r["torch_mode"]) for r in rows
         if r["side"] == "ssljax" or "view_mode" in r]
  skipped = [(r["model"], r["side"], r["torch_mode"]) for r in rows
             if "skipped" in r]
  assert sorted(set(got + skipped)) == sorted(set(expected))
  for r in rows:
    assert "error" not in r, r
    if "skipped" in r:
      assert r["side"] == "pytorch" and r["skipped"]
      continue
    assert r["view_mode"] in ("ready", "gpu")
    assert math.isfinite(r["flops_per_image"]) and r["flops_per_image"] > 0
    assert r["images_per_s"] == pytest.approx(r["batch"] / r["step_s"])
    assert r["mfu"] == pytest.approx(
        r["flops_per_image"] * r["images_per_s"] / r["devices"]
        / peak["flop_per_s"])
    assert r["loss_finite"] is True
  for m in models:  # device views cost more than none: the same network
    jax_rows = {r["view_mode"]: r for r in rows
                if r["model"] == m and r["side"] == "ssljax"}
    assert jax_rows["gpu"]["flops_per_image"] > jax_rows["ready"][
        "flops_per_image"]


def test_fair_rows_in_process_with_profiles(tmp_path):
  """--parts fair on the cheapest model (ViT-Tiny MAE, 28 px, no PyTorch
  twin): the peak, ssljax's two rows with XLA's FLOPs and MFU, a skipped
  PyTorch row per mode, the table, and a profile summary per row."""
  out, profile = str(tmp_path / "out"), str(tmp_path / "profile")
  result = accelerator.main([
      "--out", out, "--smoke", "--isolate", "no", "--parts", "fair",
      "--models", "vitt4_mae_fmnist", "--torch_modes", "compile,eager",
      "--profile", profile, "--profile_steps", "1", "--profile_top", "5"])
  assert result["rows"] == []
  _check_fair(result, ["vitt4_mae_fmnist"], ["compile", "eager"])
  jax_rows = [r for r in result["fair"]["rows"] if r["side"] == "ssljax"]
  assert [r["source"] for r in jax_rows] == [None, "28×28"]
  with open(os.path.join(out, "accelerator.md")) as f:
    table = f.read()
  assert "Measured bf16 matrix peak: 256×256×256" in table
  lines = [l for l in table.splitlines() if l.startswith("| ViT-Ti/4 MAE")]
  assert len(lines) == 4 and all(len(l.split("|")) == 13 for l in lines)
  assert sum("no PyTorch twin" in l for l in lines) == 2
  with open(os.path.join(profile, "profile_summary.txt")) as f:
    summary = f.read()
  assert summary.count("=== ssljax, vitt4_mae_fmnist") == 2
  assert "total ms" in summary


def test_xla_flops_equal_the_formula():
  """XLA's count of a lowered matrix product is 2mkn and of a lowered
  convolution 2·B·H'·W'·C_out·C_in·k_h·k_w: the count the MFU column rests
  on (on the CPU the compiled product's count is the same)."""
  import jax
  import jax.numpy as jnp
  x, w = jnp.ones((8, 32)), jnp.ones((32, 16))
  lowered = jax.jit(lambda x, w: x @ w).lower(x, w)  # what the rows count
  assert accelerator.xla_flops(lowered) == 2 * 8 * 32 * 16
  assert accelerator.xla_flops(lowered.compile()) == 2 * 8 * 32 * 16
  images, kernel = jnp.ones((2, 10, 10, 3)), jnp.ones((3, 3, 3, 4))
  conv = jax.jit(lambda a, k: jax.lax.conv_general_dilated(
      a, k, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")))
  lowered = conv.lower(images, kernel)
  assert accelerator.xla_flops(lowered) == 2 * 2 * 8 * 8 * 4 * 3 * 3 * 3


def test_stablehlo_count_equals_the_formula():
  """The count of the ssljax rows (`stablehlo_matmul_flops` of the lowered
  program): a convolution 2·B·H'·W'·C_out·C_in·k², its two gradients
  (input and kernel, strided or not) as much each, a matrix product 2mkn
  and its gradients, functions counted once per call."""
  import jax
  import jax.numpy as jnp
  count = lambda f, *a: accelerator.stablehlo_matmul_flops(
      jax.jit(f).lower(*a).as_text())
  x, k = jnp.ones((2, 10, 10, 3)), jnp.ones((3, 3, 3, 4))
  for stride, padding, side in ((2, "VALID", 4), (1, "SAME", 10)):
    conv = lambda x, k, s=stride, p=padding: jax.lax.conv_general_dilated(
        x, k, (s, s), p, dimension_numbers=("NHWC", "HWIO", "NHWC"))
    forward = 2 * 2 * side * side * 4 * 3 * 3 * 3
    assert count(conv, x, k) == forward
    # The gradients of a sum need no forward value (it is not lowered).
    grads = jax.grad(lambda x, k, c=conv: c(x, k).sum(), argnums=(0, 1))
    assert count(grads, x, k) == 2 * forward
  a, w = jnp.ones((8, 32)), jnp.ones((32, 16))
  grads = jax.grad(lambda a, w: jnp.tanh(a @ w).sum(), argnums=(0, 1))
  assert count(grads, a, w) == 3 * 2 * 8 * 32 * 16
  inner = jax.jit(lambda a, w: a @ w)
  assert count(lambda a, w: inner(a, w) + inner(a, w), a, w) == (
      2 * 2 * 8 * 32 * 16)


def test_wide_products_name_their_source():
  """`matrix_products` / `wide_products` of a lowered program: a bf16
  product is not listed; the VICReg loss's two float32 covariances are,
  at precision HIGHEST, with their FLOPs, op name and ssljax source line;
  a function called twice counts twice, as `stablehlo_matmul_flops`."""
  import jax
  import jax.numpy as jnp
  from ssljax import losses
  n, d, k = 8, 16, 32
  z1, z2 = jnp.ones((n, d)), jnp.ones((n, k))
  w = jnp.ones((d, k), jnp.bfloat16)
  step = lambda z1, z2, w: losses.vicreg_two_view(
      (z1.astype(jnp.bfloat16) @ w).astype(jnp.float32), z2)
  text = jax.jit(step).lower(z1, z2, w).as_text(debug_info=True)
  ops = accelerator.matrix_products(text)
  assert sum(o["flops"] for o in ops) == accelerator.stablehlo_matmul_flops(
      text) == 2 * n * d * k + 2 * (2 * k * k * n)
  wide = accelerator.wide_products(text, n)
  assert [o["precision"] for o in wide["ops"]] == ["HIGHEST, HIGHEST"] * 2
  assert wide["flops_per_image"] == 2 * 2 * k * k
  assert wide["share"] == pytest.approx(4 * k * k * n / (
      2 * n * d * k + 4 * k * k * n))
  for o in wide["ops"]:
    assert o["source"].startswith("_covariance ")
    assert "ssljax/losses/vicreg.py:" in o["source"]
    assert o["op_name"].endswith("dot_general")
    assert o["types"][2] == f"tensor<{k}x{k}xf32>"
  a, w = jnp.ones((8, 32)), jnp.ones((32, 16))
  inner = jax.jit(lambda a, w: a @ w)
  text = jax.jit(lambda a, w: inner(a, w) + inner(a, w)).lower(
      a, w).as_text(debug_info=True)
  (op,) = accelerator.matrix_products(text)
  assert op["calls"] == 2 and op["flops"] == 2 * 2 * 8 * 32 * 16


@pytest.mark.slow
def test_resnet50_counts_agree_between_the_sides():
  """ssljax's count of its full ResNet-50 VICReg step and the flop counter
  of the PyTorch twin's step (one eager step on the CPU, batch 2) give the
  same FLOPs per image, with views given ready."""
  torch = pytest.importorskip("torch")
  from benchmarks import accelerator_torch
  args = accelerator.parse_args(["--out", "unused", "--batch_per_device",
                                 "2"])
  rows = {r["view_mode"]: r for r in accelerator.count_fair_flops(
      "r50_in1k", args)}
  twin = accelerator.torch_twin("r50_in1k", args)
  _, step = accelerator_torch.make_step(twin, torch.device("cpu"))
  views = [torch.rand(2, 3, 224, 224) for _ in range(2)]
  torch_flops = accelerator_torch.count_flops(step, *views) / 2
  assert rows["ready"]["flops_per_image"] == pytest.approx(torch_flops,
                                                           rel=1e-9)
  assert 51e9 < torch_flops < 52e9
  assert rows["gpu"]["flops_per_image"] > rows["ready"]["flops_per_image"]


def test_torch_flop_count_equals_the_formula():
  """torch.utils.flop_counter, as the PyTorch rows use it: forward 2·MACs,
  forward + backward of a convolution whose input needs no gradient 2 x."""
  torch = pytest.importorskip("torch")
  from benchmarks import accelerator_torch
  conv = torch.nn.Conv2d(3, 4, 3, bias=False)
  linear = torch.nn.Linear(32, 16, bias=False)
  forward = 2 * 2 * 8 * 8 * 4 * 3 * 3 * 3
  with torch.no_grad():
    assert accelerator_torch.count_flops(
        lambda: conv(torch.ones(2, 3, 10, 10))) == forward
    assert accelerator_torch.count_flops(
        lambda: linear(torch.ones(8, 32))) == 2 * 8 * 32 * 16
  assert accelerator_torch.count_flops(
      lambda: conv(torch.ones(2, 3, 10, 10)).sum().backward()) == 2 * forward


def test_mfu_formula():
  """24 GFLOP per image at 3,000 img/s on 2 devices of 800 TFLOP/s peak:
  24e9 · 3000 / 2 / 800e12 = 4.5 %."""
  assert accelerator.mfu(24e9, 3000.0, 2, 800e12) == pytest.approx(0.045)


def test_twin_of_the_resnet50_recipe():
  """The PyTorch twin of r50_in1k does the recipe's work: 8192³ projector,
  VICReg (25, 25, 1), LARS (η 1e-3, momentum 0.9, wd 1e-6), batch 256, and
  the recipe's asymmetric views (blur 1.0 / 0.1, solarize 0 / 0.2)."""
  args = accelerator.parse_args(["--out", "unused"])
  twin = accelerator.torch_twin("r50_in1k", args)
  assert twin["projector"] == [8192] * 3 and twin["batch"] == 256
  assert twin["layers"] == [3, 4, 6, 3] and twin["width_per_group"] == 64
  assert twin["loss"] == {"inv": 25.0, "var": 25.0, "cov": 1.0, "eps": 1e-4}
  assert twin["optim"]["eta"] == 1e-3 and twin["optim"]["momentum"] == 0.9
  assert twin["optim"]["weight_decay"] == 1e-6
  views = twin["views"]
  assert views["sizes"] == [224, 224] and twin["source_size"] == 256
  assert views["crop_scale"] == [[0.08, 1.0]] * 2
  assert [o["blur_prob"] for o in views["ops"]] == [1.0, 0.1]
  assert [o["solarize_prob"] for o in views["ops"]] == [0.0, 0.2]
  assert all(o["jitter_prob"] == 0.8 and o["hue"] == 0.1 and
             o["grayscale_prob"] == 0.2 for o in views["ops"])
  assert accelerator.torch_twin("vitt4_mae_fmnist", args) is None
  assert args.torch_modes == ["compile", "eager"] and args.parts == [
      "recipe", "fair"]
  smoke = accelerator.parse_args(["--out", "unused", "--smoke"])
  assert smoke.torch_modes == ["eager"] and smoke.source_size == 80


def test_twin_of_the_mae_recipe():
  """The PyTorch twin of vitb16_mae does configs/imagenet_vit.py:mae's
  work: ViT-B/16 (768 wide, 12 blocks, 12 heads), decoder 512 wide, 8
  blocks, 16 heads, mask ratio 0.75, normalised pixels, AdamW (β2 0.95,
  weight decay 0.05, 1.5e-4 per 256), batch 256, one 224 px view of scale
  0.2-1 with flips only."""
  args = accelerator.parse_args(["--out", "unused"])
  twin = accelerator.torch_twin("vitb16_mae", args)
  assert twin["kind"] == "vit_mae" and twin["batch"] == 256
  assert twin["encoder"] == {"patch_size": 16, "hidden_dim": 768,
                             "depth": 12, "num_heads": 12, "mlp_ratio": 4.0}
  assert twin["decoder"] == {"width": 512, "depth": 8, "num_heads": 16}
  assert twin["mask_ratio"] == 0.75 and twin["norm_pix_loss"] is True
  assert twin["optim"] == {"lr": 1.5e-4, "b1": 0.9, "b2": 0.95, "eps": 1e-8,
                           "weight_decay": 0.05}
  views = twin["views"]
  assert views["sizes"] == [224] and views["crop_scale"] == [[0.2, 1.0]]
  (ops,) = views["ops"]
  assert ops["flip_prob"] == 0.5 and ops["jitter_prob"] == 0.0
  assert ops["blur_prob"] == ops["solarize_prob"] == ops["grayscale_prob"] \
      == 0.0


def test_mae_twin_counts_and_pieces_agree_with_ssljax():
  """The PyTorch MAE twin at the recipe's smoke sizes: the flop counter of
  one eager step equals ssljax's count of its lowered step (views given
  ready) to the FLOP; its loss, sine-cosine positions and patch order are
  ssljax's on the same inputs."""
  torch = pytest.importorskip("torch")
  import numpy as np
  from benchmarks import accelerator_torch as tv
  from ssljax import losses, models
  args = accelerator.parse_args(["--out", "unused", "--smoke", "--parts",
                                 "fair"])
  twin = accelerator.torch_twin("vitb16_mae", args)
  b, size = twin["batch"], twin["views"]["sizes"][0]
  _, step = tv.make_step(twin, torch.device("cpu"))
  torch_flops = tv.count_flops(step, torch.rand(b, 3, size, size)) / b
  (ready,) = [r for r in accelerator.count_fair_flops("vitb16_mae", args)
              if r["view_mode"] == "ready"]
  assert ready["flops_per_image"] == torch_flops > 0
  rng = np.random.default_rng(0)
  pred, target = rng.normal(size=(2, 2, 6, 12)).astype(np.float32)
  mask = (rng.random((2, 6)) < 0.75).astype(np.float32)
  got = tv.mae_loss(*(torch.from_numpy(a) for a in (pred, target, mask)))
  np.testing.assert_allclose(
      float(got), float(losses.mae(pred, target, mask, norm_pix_loss=True)),
      rtol=1e-5)
  np.testing.assert_array_equal(
      tv.sincos_positions(16, 4).numpy(),
      np.asarray(models.vit.sincos_pos_embed_2d(16, (4, 4))))
  images = rng.random((2, 8, 8, 3)).astype(np.float32)
  mae = tv.MaskedAutoencoder(image_size=8, patch_size=4, hidden_dim=8,
                             depth=1, num_heads=2, decoder_width=8,
                             decoder_depth=1, decoder_heads=2)
  np.testing.assert_array_equal(
      mae.patchify(torch.from_numpy(images).permute(0, 3, 1, 2)).numpy(),
      np.asarray(models.patchify(images, 4)))


@pytest.mark.slow
def test_mae_counts_agree_between_the_sides():
  """The full ViT-B/16 MAE step: ssljax's count and the PyTorch twin's
  flop counter (one eager step on the CPU, batch 2) give the same FLOPs
  per image with views given ready (58.46 GFLOP)."""
  torch = pytest.importorskip("torch")
  from benchmarks import accelerator_torch
  args = accelerator.parse_args(["--out", "unused", "--batch_per_device",
                                 "2", "--parts", "fair"])
  rows = {r["view_mode"]: r for r in accelerator.count_fair_flops(
      "vitb16_mae", args)}
  twin = accelerator.torch_twin("vitb16_mae", args)
  _, step = accelerator_torch.make_step(twin, torch.device("cpu"))
  torch_flops = accelerator_torch.count_flops(
      step, torch.rand(2, 3, 224, 224)) / 2
  assert rows["ready"]["flops_per_image"] == torch_flops
  assert 58.4e9 < torch_flops < 58.5e9


def test_torch_view_ops_match_ssljax_on_the_same_draws():
  """Given the uniforms ssljax's op draws from its key, the PyTorch twin's
  flip, colour jitter, grayscale, blur and solarisation give ssljax's
  outputs, and its crop boxes are ssljax's boxes."""
  torch = pytest.importorskip("torch")
  import jax
  import numpy as np
  from benchmarks import accelerator_torch as tv
  from ssljax.data import crops, view_ops
  rng = np.random.default_rng(0)
  x = rng.random((6, 24, 24, 3), np.float32)
  to_t = lambda a: torch.from_numpy(np.asarray(a)).permute(0, 3, 1, 2)
  key = jax.random.key(3)
  draw = lambda shape: torch.from_numpy(np.array(
      jax.random.uniform(key, shape)))
  cases = [
      (view_ops.flip(x, key, 0.5), tv.flip(to_t(x), draw((6,)), 0.5)),
      (view_ops.color_jitter(x, key, prob=0.8, brightness=0.4, contrast=0.4,
                             saturation=0.2, hue=0.1),
       tv.color_jitter(to_t(x), draw((6, 9)), prob=0.8, brightness=0.4,
                       contrast=0.4, saturation=0.2, hue=0.1)),
      (view_ops.gaussian_blur(x, key, prob=0.7),
       tv.gaussian_blur(to_t(x), draw((6, 2)), prob=0.7)),
      (view_ops.solarize(x, key, 0.5), tv.solarize(to_t(x), draw((6,)), 0.5)),
  ]
  for want, got in cases:
    np.testing.assert_allclose(got.permute(0, 2, 3, 1).numpy(), want,
                               atol=2e-5)
  # torchvision's grayscale weighs red 0.2989 where ssljax's 0.299.
  np.testing.assert_allclose(
      tv.grayscale(to_t(x), draw((6,)), 0.5).permute(0, 2, 3, 1).numpy(),
      view_ops.grayscale(x, key, 0.5), atol=2e-4)
  u = rng.random((50, crops.CROP_TRIES, 4))
  want = crops.box_fractions(u, (0.08, 1.0), (3 / 4, 4 / 3), 30, 40)
  got = tv.box_fractions(torch.from_numpy(u), (0.08, 1.0), (3 / 4, 4 / 3),
                         30, 40)
  for a, b in zip(want, got):
    np.testing.assert_allclose(b.numpy(), a, atol=1e-12)


def test_torch_lars_is_optax_lars():
  """The PyTorch twin's LARS takes optax.lars's steps (decay and trust ratio
  on kernels only, then the learning rate, then momentum): 3 steps."""
  torch = pytest.importorskip("torch")
  import jax.numpy as jnp
  import numpy as np
  import optax
  from benchmarks.accelerator_torch import Lars
  torch.manual_seed(0)
  params = [torch.randn(4, 3, requires_grad=True),
            torch.randn(3, requires_grad=True),
            torch.randn(2, 2, 3, requires_grad=True)]
  grads = [torch.randn_like(p) for p in params]
  ours = [jnp.asarray(p.detach().numpy()) for p in params]
  opt = Lars(params, lr=0.3, momentum=0.9, weight_decay=1e-2, eta=1e-3)
  kernels = lambda tree: [x.ndim > 1 for x in tree]
  tx = optax.lars(0.3, weight_decay=1e-2, weight_decay_mask=kernels,
                  trust_ratio_mask=kernels, trust_coefficient=1e-3,
                  momentum=0.9)
  state = tx.init(ours)
  for i in range(3):
    for p, g in zip(params, grads):
      p.grad = g.clone() * (i + 1)
    opt.step()
    updates, state = tx.update([jnp.asarray(g.numpy()) * (i + 1)
                                for g in grads], state, ours)
    ours = optax.apply_updates(ours, updates)
  for p, q in zip(params, ours):
    np.testing.assert_allclose(p.detach().numpy(), q, atol=1e-6)


@pytest.mark.slow
def test_fair_smoke_resnet50_against_pytorch_on_cpu(tmp_path):
  """The whole same-work table of the ResNet-50 recipe with its PyTorch
  twin on the CPU (eager; minutes on 2 cores)."""
  pytest.importorskip("torch")
  out, profile = str(tmp_path / "out"), str(tmp_path / "profile")
  result = accelerator.main([
      "--out", out, "--smoke", "--isolate", "no", "--parts", "fair",
      "--models", "r50_in1k", "--torch_device", "cpu", "--profile", profile,
      "--profile_steps", "1"])
  _check_fair(result, ["r50_in1k"], ["eager"])
  torch_rows = [r for r in result["fair"]["rows"] if r["side"] == "pytorch"]
  assert [r["view_mode"] for r in torch_rows] == ["ready", "gpu"]
  with open(os.path.join(out, "accelerator.md")) as f:
    table = f.read()
  assert "ssljax / PyTorch eager img/s per device, r50_in1k, views given " \
      "ready" in table
  with open(os.path.join(profile, "profile_summary.txt")) as f:
    assert f.read().count("=== PyTorch eager, r50_in1k") == 2


@pytest.mark.slow
def test_fair_smoke_mae_against_pytorch_on_cpu(tmp_path):
  """The same-work table of the ViT MAE recipe with its PyTorch twin on the
  CPU (eager, smoke sizes): every row measured, the FLOPs of the two sides
  equal with views given ready."""
  pytest.importorskip("torch")
  out = str(tmp_path / "out")
  result = accelerator.main([
      "--out", out, "--smoke", "--isolate", "no", "--parts", "fair",
      "--models", "vitb16_mae", "--torch_device", "cpu"])
  _check_fair(result, ["vitb16_mae"], ["eager"])
  rows = {(r["side"], r["view_mode"]): r for r in result["fair"]["rows"]}
  assert rows[("pytorch", "ready")]["flops_per_image"] == rows[
      ("ssljax", "ready")]["flops_per_image"]
  with open(os.path.join(out, "accelerator.md")) as f:
    assert "ssljax / PyTorch eager img/s per device, vitb16_mae, views " \
        "given ready" in f.read()


def test_compile_only_fills_the_cache_that_the_timed_run_loads(
    tmp_path, restore_compilation_cache):
  """The cheapest model (ViT-Tiny MAE on 28 px), in this process, twice with
  one cache directory: --compile_only gives compile figures and the lowered
  step's matrix products, no timings, a 12-column row, and misses the empty
  cache; the timed run after it then loads that very program (a hit: the
  warm-up compiles exactly what is timed) and writes a sound row."""
  cache = str(tmp_path / "cache")
  argv = ["--smoke", "--isolate", "no", "--models", "vitt4_mae_fmnist",
          "--torch", "off", "--parts", "recipe", "--data_dir", str(tmp_path),
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
  assert "fair" not in result
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
  fair = [m for m in accelerator.DEFAULT_MODELS if m in accelerator.FAIR_TWINS]
  _check_fair(result, fair, accelerator.parse_args(
      ["--out", out, "--smoke"]).torch_modes)


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


def _fair_result(rows, peak=800e12):
  return {"smoke": False, "machine": accelerator.machine(), "rows": [],
          "fair": {"peak": {"size": 8192, "flop_per_s": peak,
                            "device_kind": "GPU", "windows_s": [1.0]},
                   "rows": rows},
          "load_average_before": (0, 0, 0), "load_average_after": (0, 0, 0)}


def test_fair_rows_run_every_compile_row_before_the_eager_ones(
    tmp_path, monkeypatch):
  """--parts fair runs each model's ssljax rows and its first torch mode,
  then the other modes model after model (a run stopped early loses the
  eager rows first); the table lists them by model again."""
  monkeypatch.setattr(accelerator, "run_peak", lambda args: {
      "flop_per_s": 1e12, "size": 256, "device_kind": "cpu",
      "windows_s": [1.0] * 3})
  monkeypatch.setattr(accelerator, "run_fair_jax", lambda name, args: [
      {"side": "ssljax", "model": name, "title": name, "torch_mode": None,
       "view_mode": "ready", "views": "1×64", "batch": 8, "devices": 1,
       "step_s": 0.1, "images_per_s": 80.0, "flops_per_image": 1e9,
       "compile_s": 1.0, "peak_device_bytes": None}])
  result = accelerator.main([
      "--out", str(tmp_path), "--smoke", "--isolate", "no", "--parts",
      "fair", "--models", "r50_in1k,vitb16_mae", "--torch", "off",
      "--torch_modes", "compile,eager"])
  ran = [(r["model"], r["torch_mode"]) for r in result["fair"]["rows"]]
  assert ran == [("r50_in1k", None), ("r50_in1k", "compile"),
                 ("vitb16_mae", None), ("vitb16_mae", "compile"),
                 ("r50_in1k", "eager"), ("vitb16_mae", "eager")]
  table = [(r["model"], r["torch_mode"])
           for r in accelerator.fair_order(result["fair"]["rows"])]
  assert table == [("r50_in1k", None), ("r50_in1k", "compile"),
                   ("r50_in1k", "eager"), ("vitb16_mae", None),
                   ("vitb16_mae", "compile"), ("vitb16_mae", "eager")]


def test_table_marks_failed_models_and_unknown_memory():
  row = {"model": "r18_cifar", "title": "ResNet-18 CIFAR VICReg",
         "views": "2×32", "dtype": "float32", "batch": 8, "devices": 1,
         "step_images_per_s": 10.0, "e2e_images_per_s": 5.0,
         "stall_fraction": 0.5, "compile_s": 1.0, "peak_device_bytes": None,
         "xla_step_bytes": float("nan"), "workers": 0, "threads": 4}
  result = {"smoke": True, "machine": accelerator.machine(),
            "rows": [row, {"model": "r50_in1k", "error": "OOM"}],
            "load_average_before": (1, 1, 1),
            "load_average_after": (2, 2, 2)}
  lines = accelerator.markdown(result).splitlines()
  line = next(l for l in lines if l.startswith("| ResNet-18"))
  assert "| 1 | 4 threads | 10.0 | 5.0 | 50.0 | 1.0 | n/a | n/a |" in line
  assert any(l.startswith("| r50_in1k | failed: OOM") for l in lines)
  assert not any("Same work" in l for l in lines)


def test_fair_table_gives_mfu_and_the_ratio_per_device():
  """ssljax on 2 devices at 3,000 img/s in all against PyTorch's 1,000 on
  one GPU, views made on the GPU: 1.50 per device; MFU 24e9 · 3000 / 2 /
  800e12 = 4.5 %; a skipped and a failed row say why."""
  jax_row = {"side": "ssljax", "model": "r50_in1k",
             "title": "ResNet-50 ImageNet VICReg", "view_mode": "gpu",
             "torch_mode": None, "batch": 512, "devices": 2,
             "step_s": 512 / 3000.0, "images_per_s": 3000.0,
             "flops_per_image": 24e9, "compile_s": 40.0,
             "peak_device_bytes": 30 * 2**30}
  torch_row = {"side": "pytorch", "model": "r50_in1k",
               "title": "ResNet-50 ImageNet VICReg", "view_mode": "gpu",
               "torch_mode": "compile", "batch": 256, "devices": 1,
               "step_s": 0.256, "images_per_s": 1000.0,
               "flops_per_image": 23e9, "first_step_s": 90.0,
               "peak_device_bytes": 2**30}
  eager = {"side": "pytorch", "model": "r50_in1k", "torch_mode": "eager",
           "title": "ResNet-50 ImageNet VICReg", "skipped": "--torch off"}
  mae = {"side": "ssljax", "model": "vitb16_mae", "torch_mode": None,
         "error": "RuntimeError: exit 1"}
  result = _fair_result([])
  accelerator.add_fair_rows(result, [jax_row, torch_row, eager, mae])
  assert jax_row["mfu"] == pytest.approx(0.045)
  assert torch_row["mfu"] == pytest.approx(23e9 * 1000 / 800e12)
  lines = accelerator.markdown(result).splitlines()
  assert ("| ResNet-50 ImageNet VICReg | ssljax | views made on the GPU | "
          "512 | 3,000.0 | 170.7 | 24.00 | 36.00 | 4.5 | 40.0 | 30.00 GiB |"
          ) in lines
  assert ("| ResNet-50 ImageNet VICReg | PyTorch torch.compile | views made "
          "on the GPU | 256 | 1,000.0 | 256.0 | 23.00 | 23.00 | 2.9 | 90.0 | "
          "1.00 GiB |") in lines
  assert any(l.startswith("| ResNet-50 ImageNet VICReg | PyTorch eager | "
                          "--torch off |") for l in lines)
  assert any(l.startswith("| vitb16_mae | ssljax | failed: RuntimeError")
             for l in lines)
  assert lines[-1] == ("ssljax / PyTorch compile img/s per device, r50_in1k, "
                       "views made on the GPU: 1.50.")
  assert any("800.0 TFLOP/s" in l for l in lines)
