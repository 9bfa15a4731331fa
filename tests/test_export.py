"""Export of a trained encoder (ssljax.export, python -m ssljax.export) and
the encoder that ssljax.pretrained hands out (Method.encoder_variables).

- Every method family's ``encoder_variables`` computes its representation.
- The safetensors file reads back (``load_file``) into the same features.
- The command refuses, in one line, what it cannot write.
- Where torch, torchvision and timm are importable: the ``--format torch``
  state_dict loads with strict=True into torchvision's ResNet-18/50 and timm's
  ViT-Ti/S/B and gives our features, to float32 rounding, on the same images
  (CI has no torch: skipped there).
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax import export, methods, models, pretrained, train

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from configs import vicreg as vicreg_config  # noqa: E402  pylint: disable=g-import-not-at-top

pytestmark = pytest.mark.usefixtures("fast_compiles")


def _smoke(name, *words, **overrides):
  module = __import__(f"configs.{name}", fromlist=["get_config"])
  config = module.get_config(",".join(("smoke",) + words))
  for key, value in overrides.items():
    node = config
    *parents, leaf = key.split(".")
    for part in parents:
      node = node[part]
    node[leaf] = value
  return config


def _model(config, view=(28, 28, 1), seed=0) -> pretrained.Pretrained:
  """A Pretrained of freshly initialised weights (no run needed), its
  BatchNorm statistics perturbed so that inference mode is not the
  identity."""
  method = methods.build(config)
  spec = methods.BatchSpec(view, config.views.num_global,
                           config.views.get("num_local", 0))
  params, state = method.init(jax.random.key(seed), spec)
  rng = np.random.default_rng(seed)

  def perturb(path, leaf):
    name = jax.tree_util.keystr(path)
    if "batch_stats" in name and "var" in name:
      return jnp.asarray(rng.uniform(0.5, 2.0, leaf.shape), leaf.dtype)
    if "batch_stats" in name and "mean" in name:
      return jnp.asarray(rng.normal(0, 0.3, leaf.shape), leaf.dtype)
    return leaf

  state = jax.tree_util.tree_map_with_path(perturb, state)
  return pretrained.Pretrained(
      workdir="-", config=config, method=method, params=params,
      method_state=state, step=7, view_size=view[0], channels=view[-1])


def _images(n=4, size=28, channels=1, seed=1):
  return np.random.default_rng(seed).uniform(
      0, 1, (n, size, size, channels)).astype(np.float32)


# ---------------------------------------------------------------------------
# Method.encoder_variables: the encoder alone computes the representation.

@pytest.mark.parametrize("name,words", [
    ("vicreg", ()),          # joint embedding, BatchNorm CNN
    ("byol", ()),            # predictor, EMA teacher in the state
    ("dino", ()),            # DINO head
    ("mae", ()),             # ViT with sine-cosine positions, decoder
    ("ijepa", ()),           # the target encoder, from the state
    ("lejepa", ()),          # ViT, two class tokens
])
def test_encoder_variables_compute_the_representation(name, words):
  model = _model(_smoke(name, *words))
  x = _images()
  want = np.asarray(model.representation(x))
  got = np.asarray(model.encoder.apply(model.variables, x, train=False))
  assert got.shape == want.shape and want.shape[0] == 4
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
  assert set(model.variables) <= {"params", "batch_stats"}


def test_ijepa_encoder_is_the_target_encoder():
  # The context encoder is params["encoder"]; the probed one is the EMA
  # target: after moving them apart the export must follow the target.
  model = _model(_smoke("ijepa"))
  shifted = jax.tree.map(lambda a: a + 0.5, model.params)
  moved = pretrained.Pretrained(**{**model.__dict__, "params": shifted})
  x = _images()
  np.testing.assert_allclose(
      np.asarray(moved.encoder.apply(moved.variables, x, train=False)),
      np.asarray(moved.representation(x)), rtol=1e-6, atol=1e-6)
  assert not np.allclose(
      np.asarray(moved.encoder.apply({"params": shifted["encoder"]}, x)),
      np.asarray(moved.representation(x)), atol=1e-3)


# ---------------------------------------------------------------------------
# safetensors (flax names) round trip.

@pytest.mark.parametrize("name", ["vicreg", "mae"])
def test_safetensors_reads_back_into_the_same_features(name, tmp_path):
  model = _model(_smoke(name))
  path = str(tmp_path / "enc.safetensors")
  metadata = export.export(model, path)
  info = json.loads(metadata["ssljax"])
  assert info["method"] == name and info["step"] == 7
  assert info["view_size"] == 28 and info["channels"] == 1
  encoder, variables = export.load_file(path)
  x = _images()
  np.testing.assert_array_equal(
      np.asarray(encoder.apply(variables, x, train=False)),
      np.asarray(model.representation(x)))
  names = export.flax_tensors(jax.device_get(model.variables))
  assert sorted(names) == sorted(export.flax_tensors(variables))


def test_load_file_refuses_a_torch_export(tmp_path):
  model = _model(_smoke("lejepa"))
  path = str(tmp_path / "torch.safetensors")
  export.export(model, path, format="torch")
  with pytest.raises(ValueError, match="not a flax export of ssljax"):
    export.load_file(path)


def test_unknown_format_and_no_counterpart_write_nothing(tmp_path):
  model = _model(_smoke("vicreg"))  # the small CNN
  path = tmp_path / "enc.safetensors"
  path.write_bytes(b"kept")
  with pytest.raises(ValueError, match="format must be one of"):
    export.export(model, str(path), format="onnx")
  with pytest.raises(export.ExportError,
                     match=r"^the SmallCNN encoder has no torchvision or "
                           r"timm counterpart: export it with --format "
                           r"safetensors$"):
    export.export(model, str(path), format="torch")
  assert path.read_bytes() == b"kept"
  assert sorted(os.listdir(tmp_path)) == ["enc.safetensors"]


@pytest.mark.parametrize("encoder,match", [
    (models.ResNet18(), "CIFAR stem"),
    (models.ResNet18(stem="imagenet", stage_widths=(32, 64, 128, 256)),
     r"widths \(32, 64, 128, 256\)"),
    (models.MLPEncoder(), "MLPEncoder"),
    (models.ViTTiny16(head_dim=8, representation="cls_last2"),
     "head on two concatenated class tokens"),
    (models.ViTTiny16(head_dim=8, representation="cls_last4"),
     "head on four concatenated class tokens"),
    (models.ViTTiny16(head_dim=8, representation="cls_last4_avg"),
     "head on four class tokens and the patch mean"),
])
def test_encoders_without_a_pytorch_counterpart(encoder, match):
  assert export.no_torch_counterpart(models.ViTTiny16()) is None
  assert export.no_torch_counterpart(models.ResNet50()) is None
  reason = export.no_torch_counterpart(encoder)
  assert reason and "\n" not in reason
  with pytest.raises(export.ExportError, match=match):
    export.torch_tensors(encoder, {"params": {}})


def test_torch_layout_of_a_resnet(tmp_path):
  # Without torch: names, shapes and layouts of torchvision's resnet18.
  net = models.ResNet18(stem="imagenet")
  variables = net.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)),
                       train=False)
  tensors, target = export.torch_tensors(net, variables, step=3)
  assert target["constructor"] == "torchvision.models.resnet18"
  assert tensors["conv1.weight"].shape == (64, 3, 7, 7)
  assert tensors["layer2.0.conv1.weight"].shape == (128, 64, 3, 3)
  assert tensors["layer2.0.downsample.0.weight"].shape == (128, 64, 1, 1)
  assert "layer1.0.downsample.0.weight" not in tensors
  assert tensors["layer4.1.bn2.num_batches_tracked"] == 3
  # 20 convs (17 + 3 shortcuts) and 20 BatchNorms of 5 entries each.
  assert len(tensors) == 20 + 20 * 5
  np.testing.assert_array_equal(
      tensors["layer3.1.conv2.weight"][5, 7],
      np.asarray(variables["params"]["_BasicBlock_5"]["Conv_1"]["kernel"]
                 )[:, :, 7, 5])


# ---------------------------------------------------------------------------
# The command line.

@pytest.fixture(scope="module")
def run(fmnist_data_dir, tmp_path_factory):
  """The workdir of a finished smoke run of VICReg (small CNN)."""
  workdir = str(tmp_path_factory.mktemp("run"))
  config = vicreg_config.get_config("smoke")
  config.dataset.data_dir = fmnist_data_dir
  config.eval_inputs.baselines = False
  for name in list(config.evals.keys()):
    del config.evals[name]
  train.train_and_evaluate(config, workdir)
  return workdir


def _cli(*args):
  return subprocess.run([sys.executable, "-m", "ssljax.export", *args],
                        capture_output=True, text=True, cwd=REPO,
                        check=False)


def test_cli_writes_safetensors_and_refuses_torch_for_the_cnn(run, tmp_path):
  out = str(tmp_path / "cnn.safetensors")
  done = _cli("--workdir", run, "--out", out)
  assert done.returncode == 0, done.stderr
  assert "safetensors only: the SmallCNN encoder has no torchvision" in (
      done.stdout)
  encoder, variables = export.load_file(out)
  model = pretrained.load(run)
  x = _images(8)
  np.testing.assert_allclose(
      np.asarray(encoder.apply(variables, x, train=False)),
      np.asarray(model.representation(x)), rtol=1e-6, atol=1e-6)

  refused = _cli("--workdir", run, "--out", str(tmp_path / "t.pt"),
                 "--format", "torch")
  assert refused.returncode == export.USAGE_ERROR
  assert refused.stderr.strip().count("\n") == 0
  assert "has no torchvision or timm counterpart" in refused.stderr
  assert not os.path.exists(tmp_path / "t.pt")

  missing = _cli("--workdir", str(tmp_path), "--out", out)
  assert missing.returncode == export.USAGE_ERROR
  assert "is not a run of ssljax" in missing.stderr
  assert missing.stderr.strip().count("\n") == 0


# ---------------------------------------------------------------------------
# PyTorch round trips (where torch, torchvision and timm are installed).

def _torch():
  torch = pytest.importorskip("torch")
  torchvision = pytest.importorskip("torchvision")
  timm = pytest.importorskip("timm")
  return torch, torchvision, timm


def _build(target, torch, torchvision, timm):
  if target["library"] == "torchvision":
    name = target["constructor"].rsplit(".", 1)[1]
    net = getattr(torchvision.models, name)(**target["kwargs"])
    net.fc = torch.nn.Identity()
    return net
  name = target["constructor"].split("'")[1]
  return timm.create_model(name, **target["kwargs"])


def _torch_features(net, x_nhwc, representation, torch):
  x = torch.from_numpy(np.ascontiguousarray(x_nhwc.transpose(0, 3, 1, 2)))
  net.eval()
  with torch.no_grad():
    last = {"cls_last2": 2, "cls_last4": 4, "cls_last4_avg": 4}.get(
        representation)
    if last is None:
      return net(x).numpy()
    # The class tokens of the last blocks, each through the final norm
    # (and for "cls_last4_avg" the mean of the last block's normed patch
    # tokens after them, as DINOv2's create_linear_input).
    tokens = net._pos_embed(net.patch_embed(x))  # pylint: disable=protected-access
    outs = []
    for block in net.blocks:
      tokens = block(tokens)
      outs.append(tokens[:, 0])
    parts = [net.norm(t) for t in outs[-last:]]
    if representation == "cls_last4_avg":
      parts.append(net.norm(tokens)[:, 1:].mean(1))
    return torch.cat(parts, -1).numpy()


def _check_round_trip(encoder, variables, x, *, image_size=0, worst=None):
  torch, torchvision, timm = _torch()
  tensors, target = export.torch_tensors(
      encoder, variables, image_size=image_size, channels=x.shape[-1])
  net = _build(target, torch, torchvision, timm)
  state = {k: torch.from_numpy(np.array(v)) for k, v in tensors.items()}
  net.load_state_dict(state, strict=True)
  want = np.asarray(encoder.apply(variables, x, train=False))
  got = _torch_features(net, x, getattr(encoder, "representation", "h"),
                        torch)
  assert got.shape == want.shape
  error = float(np.abs(got - want).max() / np.abs(want).max())
  if worst is not None:
    worst.append(error)
  assert error < 1e-5, error
  return error


def _perturbed_stats(variables, seed=0):
  rng = np.random.default_rng(seed)
  stats = jax.tree_util.tree_map_with_path(
      lambda p, a: (rng.uniform(0.5, 2.0, a.shape) if "var" in
                    jax.tree_util.keystr(p) else rng.normal(0, 0.3, a.shape)
                    ).astype(np.float32), variables["batch_stats"])
  return {"params": variables["params"], "batch_stats": stats}


@pytest.mark.parametrize("encoder,size", [
    (models.ResNet18(stem="imagenet"), 64),
    (models.ResNet50(), 64),
])
def test_torchvision_resnet_gives_our_features(encoder, size):
  _torch()
  x = _images(3, size, 3)
  variables = encoder.init(jax.random.key(0), x, train=False)
  _check_round_trip(encoder, _perturbed_stats(variables), x)


@pytest.mark.parametrize("kwargs", [
    dict(hidden_dim=192, num_heads=3, depth=2),          # ViT-Tiny width
    dict(hidden_dim=384, num_heads=6, depth=2),          # ViT-S width
    dict(hidden_dim=768, num_heads=12, depth=2),         # ViT-B width
    dict(hidden_dim=192, num_heads=3, depth=2, representation="cls_last2"),
    dict(hidden_dim=96, num_heads=3, depth=4, representation="cls_last4",
         pos_embedding="sincos"),
    dict(hidden_dim=96, num_heads=3, depth=4, representation="cls_last4_avg",
         pos_embedding="sincos"),                        # DINOv2's probe
    dict(hidden_dim=192, num_heads=3, depth=2, representation="avg_tokens",
         pos_embedding="sincos", class_token=False),     # I-JEPA's
    dict(hidden_dim=192, num_heads=3, depth=2, representation="avg_tokens",
         pos_embedding="sincos"),                        # MAE's pooled
    dict(hidden_dim=192, num_heads=3, depth=2, head_dim=16),  # LeJEPA's head
])
def test_timm_vit_gives_our_features(kwargs):
  _torch()
  encoder = models.VisionTransformer(patch_size=4, **kwargs)
  x = _images(3, 28, 1)
  variables = encoder.init(jax.random.key(0), x, train=False)
  _check_round_trip(encoder, variables, x, image_size=28)


def test_full_depth_timm_names_load_strictly():
  # The shipped ViT-Ti/16, ViT-S/16 and a ViT-B/16 at full depth: strict
  # loading into timm's own constructors (names and shapes of all 12 blocks).
  torch, torchvision, timm = _torch()
  for encoder in (models.ViTTiny16(), models.ViTSmall16(),
                  models.VisionTransformer(hidden_dim=768, num_heads=12)):
    variables = jax.eval_shape(
        lambda e=encoder: e.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3))))
    variables = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), variables)
    tensors, target = export.torch_tensors(encoder, variables, channels=3)
    assert target["kwargs"]["depth"] == 12
    net = _build(target, torch, torchvision, timm)
    net.load_state_dict({k: torch.from_numpy(np.array(v))
                         for k, v in tensors.items()}, strict=True)


def test_exported_run_file_loads_into_timm(tmp_path):
  # export() of a LeJEPA ViT (two class tokens), through the file, as a
  # user would read it: safetensors.torch.load_file, then strict=True.
  torch, torchvision, timm = _torch()
  st_torch = pytest.importorskip("safetensors.torch")
  model = _model(_smoke("lejepa"))
  path = str(tmp_path / "vit.safetensors")
  metadata = export.export(model, path, format="torch")
  target = json.loads(metadata["torch_model"])
  net = _build(target, torch, torchvision, timm)
  net.load_state_dict(st_torch.load_file(path), strict=True)
  x = _images(5)
  want = np.asarray(model.representation(x))
  got = _torch_features(net, x, model.encoder.representation, torch)
  np.testing.assert_allclose(got, want, rtol=1e-5,
                             atol=1e-5 * np.abs(want).max())
  pt = str(tmp_path / "vit.pt")
  export.export(model, pt, format="torch")
  assert sorted(torch.load(pt)) == sorted(st_torch.load_file(path))


def test_torch_absent_pt_is_one_clear_error(tmp_path, monkeypatch):
  model = _model(_smoke("lejepa"))
  monkeypatch.setitem(sys.modules, "torch", None)
  with pytest.raises(ImportError, match="needs torch, which is not "
                                        "installed"):
    export.export(model, str(tmp_path / "vit.pt"), format="torch")
  assert os.listdir(tmp_path) == []
