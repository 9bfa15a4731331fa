"""Model output shapes and parameter counts (via jax.eval_shape: no compute),
BatchNorm modes, bf16 compute, and the ViT's position-embedding interpolation.

Reference parameter counts (no classification head): torchvision resnet50
25,557,032 minus its fc 2,049,000 = 23,508,032; torchvision resnet18 minus fc
= 11,176,512; timm vit_small_patch16_224 / vit_tiny_patch16_224 with
num_classes=0: 21,665,664 / 5,524,416.
"""

import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax import models
from ssljax.models import vit


def _network(name, kwargs, projector, dtype=jnp.float32):
  """Encoder ``name`` + projector of widths ``projector``, as the
  joint-embedding methods compose them."""
  return models.EncoderProjector(models.make_encoder(name, kwargs, dtype),
                                 models.Projector(projector, dtype=dtype))


def _shapes(net, x_shape):
  init = lambda key, x: net.init(key, x, train=False)
  variables = jax.eval_shape(init, jax.random.key(0), jnp.zeros(x_shape))
  out = jax.eval_shape(lambda v, x: net.apply(v, x, train=False), variables,
                       jnp.zeros(x_shape))
  return variables, out


@pytest.mark.parametrize("name,kwargs,image,dim", [
    ("mlp", dict(features=(32, 16)), (28, 28, 1), 16),
    ("cnn", dict(channels=(8, 16, 24)), (28, 28, 1), 24),
    ("cnn", dict(channels=(4, 8), downsample="stride"), (28, 28, 1), 8),
    ("resnet18", {}, (32, 32, 3), 512),
    ("resnet18", dict(stem="imagenet"), (64, 64, 3), 512),
    ("resnet50", {}, (224, 224, 3), 2048),
    ("resnet50", {}, (64, 64, 3), 2048),
    ("resnet50", dict(stem="cifar"), (32, 32, 3), 2048),
    ("vit_tiny16", {}, (224, 224, 3), 192),
    ("vit_small16", {}, (224, 224, 3), 384),
    ("vit_small16", {}, (96, 96, 3), 384),
    ("vit_small16", {}, (32, 48, 3), 384),
])
def test_encoder_and_projector_shapes(name, kwargs, image, dim):
  net = _network(name, kwargs, (64, 10))
  _, out = _shapes(net, (6, *image))
  h, z = out["h"], out["z"]
  assert h.shape == (6, dim) and z.shape == (6, 10)
  assert z.dtype == jnp.float32


def _count(variables):
  return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(variables["params"]))


@pytest.mark.parametrize("encoder,image,count", [
    (models.ResNet18(), 32, 11_168_832),                 # CIFAR stem
    (models.ResNet18(stem="imagenet"), 224, 11_176_512),  # torchvision - fc
    (models.ResNet50(), 224, 23_508_032),                 # torchvision - fc
    (models.ViTTiny16(), 224, 5_524_416),                 # timm, num_classes=0
    (models.ViTSmall16(), 224, 21_665_664),               # timm, num_classes=0
])
def test_encoders_have_the_standard_parameter_counts(encoder, image, count):
  variables, _ = _shapes(encoder, (1, image, image, 3))
  assert _count(variables) == count


def test_resnet18_parameter_tree_is_unchanged_by_the_move():
  # Names and shapes of make_network("resnet18", {}, (64, 10)) as they were
  # before ResNet18 moved to models.resnet (digest recorded then): old
  # checkpoints still restore.
  net = _network("resnet18", {}, (64, 10))
  variables, _ = _shapes(net, (2, 32, 32, 3))
  leaves = jax.tree_util.tree_leaves_with_path(variables)
  lines = sorted(f"{jax.tree_util.keystr(p)} {tuple(x.shape)}" for p, x in leaves)
  assert len(lines) == 107
  digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
  assert digest == "a44114b117d5a86f"
  params = variables["params"]["encoder"]
  assert sorted(params) == ["BatchNorm_0", "Conv_0"] + [
      f"_BasicBlock_{i}" for i in range(8)]
  assert params["_BasicBlock_2"]["Conv_2"]["kernel"].shape == (1, 1, 64, 128)


def test_resnet_rejects_an_unknown_stem():
  with pytest.raises(ValueError, match="stem"):
    _shapes(models.ResNet18(stem="tiny"), (1, 32, 32, 3))


def test_resnet_zero_init_residual_zeroes_the_last_block_scale():
  enc = models.ResNet(stage_sizes=(1,), stage_widths=(4,), block="bottleneck",
                      zero_init_residual=True)
  v = jax.jit(enc.init, static_argnames="train")(
      jax.random.key(0), jnp.zeros((2, 8, 8, 3)), train=False)
  block = v["params"]["_Bottleneck_0"]
  assert not np.any(block["BatchNorm_2"]["scale"])
  assert np.all(block["BatchNorm_1"]["scale"] == 1)


@pytest.mark.parametrize("name,kwargs,image", [
    ("mlp", dict(features=(8,)), (4, 4, 1)),
    ("cnn", dict(channels=(4, 8)), (28, 28, 1)),
    ("resnet18", {}, (32, 32, 3)),
    ("resnet50", {}, (64, 64, 3)),
    ("vit_tiny16", {}, (32, 32, 3)),
])
def test_bfloat16_computes_in_bf16_with_float32_parameters(name, kwargs, image):
  net = _network(name, kwargs, (8, 4), jnp.bfloat16)
  variables, out = _shapes(net, (3, *image))
  h, z = out["h"], out["z"]
  assert h.dtype == jnp.bfloat16 and z.dtype == jnp.float32
  assert {p.dtype for p in jax.tree.leaves(variables)} == {jnp.dtype("float32")}


def test_bfloat16_vit_keeps_layernorm_in_float32():
  # LayerNorm outputs are float32 (cast back to bf16 by the caller); the
  # Dense layers compute in bf16.
  enc = models.VisionTransformer(patch_size=8, hidden_dim=16, depth=1,
                                 num_heads=2, dtype=jnp.bfloat16)
  x = jnp.zeros((2, 16, 16, 3))
  variables = jax.eval_shape(lambda k: enc.init(k, x), jax.random.key(0))
  _, state = jax.eval_shape(
      lambda v: enc.apply(v, x, capture_intermediates=True), variables)
  inter = state["intermediates"]
  block = inter["block_0"]
  assert block["norm1"]["__call__"][0].dtype == jnp.float32
  assert inter["norm"]["__call__"][0].dtype == jnp.float32
  assert block["attn"]["qkv"]["__call__"][0].dtype == jnp.bfloat16
  assert block["mlp"]["fc1"]["__call__"][0].dtype == jnp.bfloat16
  assert inter["__call__"][0].dtype == jnp.bfloat16  # h


def test_tiny_vit_forward_is_finite():
  enc = models.VisionTransformer(patch_size=16, hidden_dim=32, depth=1,
                                 num_heads=2)
  x = jax.random.normal(jax.random.key(1), (2, 32, 32, 3))
  v = jax.jit(enc.init)(jax.random.key(0), x)
  apply = jax.jit(enc.apply)
  h = apply(v, x, train=True)  # accepted, unused (no dropout)
  assert h.shape == (2, 32) and bool(jnp.all(jnp.isfinite(h)))
  # Another resolution reads the same parameters (interpolated positions).
  h48 = apply(v, jax.random.normal(jax.random.key(2), (2, 48, 64, 3)))
  assert h48.shape == (2, 32) and bool(jnp.all(jnp.isfinite(h48)))


def test_vit_head_is_a_linear_layer_on_the_representation():
  # head_dim: timm's classifier head (num_classes), LeJEPA's MINIMAL.md
  # embedding: Dense(head_dim) with bias on the class token.
  kw = dict(patch_size=7, hidden_dim=8, depth=1, num_heads=2)
  enc = models.VisionTransformer(head_dim=5, **kw)
  x = jax.random.normal(jax.random.key(1), (3, 28, 28, 1))
  params = enc.init(jax.random.key(0), x)["params"]
  out = enc.apply({"params": params}, x)
  assert out.shape == (3, 5)
  assert params["head"]["kernel"].shape == (8, 5)
  body = {k: v for k, v in params.items() if k != "head"}
  h = models.VisionTransformer(**kw).apply({"params": body}, x)
  np.testing.assert_allclose(
      out, h @ params["head"]["kernel"] + params["head"]["bias"],
      rtol=1e-5, atol=1e-6)
  tokens = enc.apply({"params": params}, x, output="tokens")
  assert tokens.shape == (3, 17, 8)  # the tokens have no head
  with pytest.raises(ValueError, match="head_dim"):
    models.VisionTransformer(head_dim=-1, **kw).init(jax.random.key(0), x)


def test_vit_last_blocks_class_tokens_are_shallower_vits_class_tokens():
  # "cls_last2" / "cls_last4": part k (of D columns) is the class token after
  # block depth-n+k through the final LayerNorm, i.e. the "cls"
  # representation of the same ViT cut after that block (DINO's
  # get_intermediate_layers); the last part is the plain "cls".
  kw = dict(patch_size=7, hidden_dim=8, num_heads=2)
  x = jax.random.normal(jax.random.key(1), (3, 28, 28, 1))
  params = models.VisionTransformer(depth=4, **kw).init(
      jax.random.key(0), x)["params"]
  for name, n in (("cls_last2", 2), ("cls_last4", 4)):
    h = models.VisionTransformer(depth=4, representation=name, **kw).apply(
        {"params": params}, x)
    assert h.shape == (3, 8 * n)
    for k in range(n):
      depth = 4 - n + k + 1
      cut = {m: v for m, v in params.items()
             if not m.startswith("block_") or int(m[6:]) < depth}
      want = models.VisionTransformer(depth=depth, **kw).apply(
          {"params": cut}, x)
      np.testing.assert_allclose(h[:, 8 * k:8 * (k + 1)], want, rtol=1e-5,
                                 atol=1e-6)
  with pytest.raises(ValueError, match="'cls_last4' needs depth >= 4, got 3"):
    models.VisionTransformer(depth=3, representation="cls_last4",
                             **kw).init(jax.random.key(0), x)


def test_vit_cls_last4_avg_is_cls_last4_then_the_patch_mean():
  # DINOv2's linear-evaluation input (create_linear_input, 4 blocks, avgpool):
  # the four class tokens, then the mean of the last block's normed patch
  # tokens; for a ViT of one class token, that mean is "avg_tokens".
  kw = dict(patch_size=7, hidden_dim=8, num_heads=2, depth=5)
  x = jax.random.normal(jax.random.key(1), (3, 28, 28, 1))
  params = models.VisionTransformer(**kw).init(jax.random.key(0), x)["params"]
  def rep(name):
    return models.VisionTransformer(representation=name, **kw).apply(
        {"params": params}, x)
  h = rep("cls_last4_avg")
  assert h.shape == (3, 40)
  np.testing.assert_array_equal(h[:, :32], rep("cls_last4"))
  np.testing.assert_array_equal(h[:, 32:], rep("avg_tokens"))
  tokens = models.VisionTransformer(**kw).apply({"params": params}, x,
                                                output="tokens")
  np.testing.assert_allclose(h[:, 32:], tokens[:, 1:].mean(1), rtol=1e-5,
                             atol=1e-6)
  with pytest.raises(ValueError, match="'cls_last4_avg' needs depth >= 4"):
    models.VisionTransformer(depth=3, representation="cls_last4_avg",
                             **{k: v for k, v in kw.items() if k != "depth"}
                             ).init(jax.random.key(0), x)


def test_vit_input_standardisation_equals_standardised_images():
  # input_mean / input_std: (x - mean) / std inside the encoder, as the
  # official I-JEPA's Normalize transform; off by default.
  kw = dict(patch_size=7, hidden_dim=8, depth=1, num_heads=2)
  x = jax.random.uniform(jax.random.key(1), (3, 28, 28, 1))
  params = models.VisionTransformer(**kw).init(jax.random.key(0), x)
  enc = models.VisionTransformer(input_mean=(0.3,), input_std=(0.4,), **kw)
  np.testing.assert_allclose(
      enc.apply(params, x),
      models.VisionTransformer(**kw).apply(params, (x - 0.3) / 0.4),
      rtol=1e-5, atol=1e-6)
  for bad in (dict(input_mean=(0.3,), input_std=(0.0,)),
              dict(input_mean=(0.3,), input_std=()),
              dict(input_mean=(0.3, 0.3), input_std=(0.4, 0.4))):
    with pytest.raises(ValueError, match="input_"):
      models.VisionTransformer(**bad, **kw).init(jax.random.key(0), x)


def test_vit_ijepa_init_is_the_official_one():
  # weight_init="ijepa": what the official init_model leaves (it redraws
  # every Linear at N(0, 0.02²) after the constructor's fix_init_weight, so
  # no depth rescale); the patch-embedding conv N(0, 0.02²); zero biases;
  # the predictor the same. The parameter tree is the default's.
  kw = dict(patch_size=4, hidden_dim=64, depth=4, num_heads=2,
            class_token=False, representation="avg_tokens",
            pos_embedding="sincos")
  x = jnp.zeros((1, 28, 28, 1))
  default = models.VisionTransformer(**kw).init(jax.random.key(0), x)
  params = models.VisionTransformer(weight_init="ijepa", **kw).init(
      jax.random.key(0), x)["params"]
  assert (jax.tree_util.tree_structure(default["params"])
          == jax.tree_util.tree_structure(params))
  def std(a):
    return float(np.std(np.asarray(a)))
  assert abs(std(params["patch_embed"]["kernel"]) / 0.02 - 1) < 0.1
  assert not np.any(np.asarray(params["patch_embed"]["bias"]))
  for l in range(4):
    block = params[f"block_{l}"]
    for name, layer in (("attn", "qkv"), ("attn", "proj"), ("mlp", "fc1"),
                        ("mlp", "fc2")):
      leaf = block[name][layer]
      assert abs(std(leaf["kernel"]) / 0.02 - 1) < 0.1, (l, layer)
      assert not np.any(np.asarray(leaf["bias"]))
  # The default is Xavier-uniform: fc1 (64 -> 256) at sqrt(2 / 320).
  fc1 = default["params"]["block_0"]["mlp"]["fc1"]["kernel"]
  assert abs(std(fc1) / np.sqrt(2 / 320) - 1) < 0.1
  pred = models.JEPAPredictor(32, 3, 2, 64, weight_init="ijepa")
  tokens = jnp.zeros((2, 5, 64))
  idx = jnp.broadcast_to(jnp.arange(5), (2, 5))
  p = pred.init(jax.random.key(1), tokens, idx, idx[None, :, :2],
                (7, 7))["params"]
  for leaf in (p["embed"], p["proj"], p["block_2"]["mlp"]["fc2"]):
    assert abs(std(leaf["kernel"]) / 0.02 - 1) < 0.1
  # timm's (the official DINOv2's and LeJEPA's): N(0, 0.02²) linear
  # kernels, PyTorch's default patch embedding U(±1/sqrt(C·p²)), bias too.
  timm = models.VisionTransformer(weight_init="timm", **kw).init(
      jax.random.key(0), x)["params"]
  assert abs(std(timm["block_1"]["mlp"]["fc2"]["kernel"]) / 0.02 - 1) < 0.1
  for leaf in (timm["patch_embed"]["kernel"], timm["patch_embed"]["bias"]):
    assert np.max(np.abs(np.asarray(leaf))) <= 0.25
  assert abs(std(timm["patch_embed"]["kernel"]) * np.sqrt(3 * 16) - 1) < 0.1
  with pytest.raises(ValueError, match="weight_init 'lecun'"):
    models.VisionTransformer(weight_init="lecun", **kw).init(
        jax.random.key(0), x)


def test_vit_initialised_at_224_takes_96_pixel_local_crops():
  enc = models.ViTSmall16()
  variables = jax.eval_shape(lambda k: enc.init(k, jnp.zeros((1, 224, 224, 3))),
                             jax.random.key(0))
  assert variables["params"]["pos_embed"].shape == (1, 197, 384)
  h = jax.eval_shape(enc.apply, variables, jnp.zeros((5, 96, 96, 3)))
  assert h.shape == (5, 384)


def test_pos_embed_interpolation_is_the_identity_at_the_init_grid():
  pos = jax.random.normal(jax.random.key(0), (1, 1 + 14 * 14, 8))
  for method in ("bicubic", "linear"):
    same = models.interpolate_pos_embed(pos, (14, 14), method=method)
    np.testing.assert_allclose(same, pos, rtol=1e-5, atol=1e-5)
  small = models.interpolate_pos_embed(pos, (6, 6))
  assert small.shape == (1, 37, 8)
  np.testing.assert_array_equal(small[:, 0], pos[:, 0])  # class token kept


def test_pos_embed_interpolation_needs_a_square_init_grid():
  with pytest.raises(ValueError, match="square"):
    models.interpolate_pos_embed(jnp.zeros((1, 1 + 2 * 3, 4)), (2, 2))


def test_vit_rejects_an_image_not_divisible_by_the_patch():
  with pytest.raises(ValueError, match="divisible"):
    _shapes(models.ViTTiny16(), (1, 40, 40, 3))


def test_batchnorm_uses_batch_statistics_only_in_training():
  net = _network("mlp", dict(features=(8,)), (4,))
  x = jax.random.normal(jax.random.key(1), (16, 2, 2, 1))
  v = net.init(jax.random.key(0), x, train=False)
  z_eval = net.apply(v, x, train=False)["z"]
  out, updates = net.apply(v, x, train=True, mutable=["batch_stats"])
  z_train = out["z"]
  # Eval mode is per-example: the first row does not depend on the others.
  z_eval_one = net.apply(v, x[:1], train=False)["z"]
  np.testing.assert_allclose(z_eval_one[0], z_eval[0], rtol=1e-5, atol=1e-6)
  assert not np.allclose(z_train, z_eval) and "batch_stats" in updates


def test_unknown_encoder_name():
  with pytest.raises(ValueError, match="unknown encoder"):
    _network("vit", {}, (4,))


@pytest.mark.parametrize("downsample", ["avg", "stride"])
def test_small_cnn_conv_chunks_give_the_whole_batch_result(downsample):
  # 10 samples in chunks of 4 (the last holds 2), against one call: the
  # same outputs, BatchNorm statistics and parameter gradient (the chunks
  # only reorder the kernel gradient's sum over samples), and the same
  # parameter tree, so checkpoints load either way.
  x = jax.random.normal(jax.random.key(1), (10, 12, 12, 3))
  whole = models.SmallCNN(channels=(4, 6), downsample=downsample,
                          conv_chunk=0)
  parts = models.SmallCNN(channels=(4, 6), downsample=downsample,
                          conv_chunk=(4, 3))
  v = whole.init(jax.random.key(0), x, train=False)
  assert (jax.tree.structure(v) == jax.tree.structure(
      parts.init(jax.random.key(0), x, train=False)))

  def loss(net, params):
    h, upd = net.apply({**v, "params": params}, x, train=True,
                       mutable=["batch_stats"])
    return jnp.sum(jnp.sin(h)), (h, upd)

  (_, (h0, s0)), g0 = jax.jit(jax.value_and_grad(
      lambda p: loss(whole, p), has_aux=True))(v["params"])
  (_, (h1, s1)), g1 = jax.jit(jax.value_and_grad(
      lambda p: loss(parts, p), has_aux=True))(v["params"])
  np.testing.assert_allclose(h1, h0, rtol=1e-5, atol=1e-6)
  assert float(h0.std()) > 0.01  # not a constant output
  for a, b in zip(jax.tree.leaves((s0, g0)), jax.tree.leaves((s1, g1))):
    # float32 sums in another order: relative to the leaf's scale
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4 * np.abs(a).max())


def test_small_cnn_default_chunks_on_one_cpu_device_only_large_maps():
  # The default (None) chunks the stages with >= 7x7 outputs on one CPU
  # device; the 3x3 stage, accelerators and sharded batches run whole.
  cnn = models.SmallCNN(channels=(4, 4, 4, 4))
  on_cpu = jax.default_backend() == "cpu" and jax.device_count() == 1
  expected = [32, 32, 32, 0] if on_cpu else [0, 0, 0, 0]
  assert [cnn._chunk(i, hw) for i, hw in
          enumerate((28 * 28, 14 * 14, 7 * 7, 3 * 3))] == expected
  assert models.SmallCNN(conv_chunk=8)._chunk(3, 9) == 8


@pytest.mark.parametrize("chunk,match", [
    (-1, "conv_chunk must be None or >= 0, got -1"),
    ((4, 4, 4), "conv_chunk has 3 values for 2 stages"),
])
def test_small_cnn_rejects_a_bad_conv_chunk(chunk, match):
  net = models.SmallCNN(channels=(4, 6), conv_chunk=chunk)
  with pytest.raises(ValueError, match=match):
    net.init(jax.random.key(0), jnp.zeros((6, 8, 8, 1)), train=False)


def test_small_cnn_chunks_only_in_training():
  # Evaluation runs each convolution once on the whole batch; training
  # runs one call per chunk (10 samples in chunks of 4: 3 calls a stage).
  net = models.SmallCNN(channels=(4, 6), conv_chunk=4)
  x = jnp.zeros((10, 8, 8, 1))
  v = net.init(jax.random.key(0), x, train=False)
  count = lambda train: str(jax.make_jaxpr(lambda: net.apply(
      v, x, train=train, mutable=["batch_stats"]))()).count(
          "conv_general_dilated[")
  assert (count(False), count(True)) == (2, 6)


def test_projector_last_layer_forms():
  # MoCo v3's heads: no bias in the last Linear, and (its projectors) a
  # BatchNorm without scale and offset after it; the defaults are VICReg's.
  x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 5)), jnp.float32)
  default = models.Projector((6, 4))
  variables = default.init(jax.random.key(0), x)
  assert "bias" in variables["params"]["Dense_1"]
  assert "BatchNorm_1" not in variables.get("batch_stats", {})
  moco = models.Projector((6, 4), last_bias=False, last_bn=True)
  variables = moco.init(jax.random.key(0), x)
  assert set(variables["params"]["Dense_1"]) == {"kernel"}
  assert "BatchNorm_1" not in variables["params"]  # no scale, no offset
  assert set(variables["batch_stats"]["BatchNorm_1"]) == {"mean", "var"}
  z, _ = moco.apply(variables, x, mutable=["batch_stats"])
  np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-6)
  np.testing.assert_allclose(z.var(0), 1.0, rtol=1e-3)


# PyTorch's F.interpolate(mode="bicubic", align_corners=False) on one axis,
# 4 -> 2 entries (rows: outputs), recorded from torch 2.11 in float64:
# antialias=True at size 2 (timm's resample_abs_pos_embed), and without
# antialiasing at scale_factor 2.1 / 4 (DINO's and DINOv2's offset 0.1).
_TORCH_4_TO_2 = {
    "timm": [[0.458677686, 0.458677686, 0.1198347107, -0.0371900826],
             [-0.0371900826, 0.1198347107, 0.458677686, 0.458677686]],
    "dino": [[0.5535174387, 0.5305346345, -0.0840520732, 0.0],
             [0.0, -0.1106960641, 0.7699526239, 0.3407434402]]}


@pytest.mark.parametrize("interpolation", ["timm", "dino"])
def test_pos_embed_interpolation_is_pytorchs(interpolation):
  kw = ({"antialias": True} if interpolation == "timm"
        else {"scale_factor": 2.1 / 4})
  m = vit.torch_bicubic_matrix(4, 2, **kw)
  np.testing.assert_allclose(m, _TORCH_4_TO_2[interpolation], atol=1e-9)
  # Applied to a 4 x 4 table, the resize is that matrix on each axis.
  pos = jax.random.normal(jax.random.key(1), (1, 1 + 16, 3))
  got = models.interpolate_pos_embed(pos, (2, 2), interpolation=interpolation)
  grid = np.asarray(pos[0, 1:]).reshape(4, 4, 3)
  want = np.einsum("ia,acd,jc->ijd", m, grid, m).reshape(4, 3)
  np.testing.assert_allclose(got[0, 1:], want, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(got[:, 0], pos[:, 0])
  # jax.image.resize's bicubic is neither when downsampling.
  other = models.interpolate_pos_embed(pos, (2, 2), interpolation="jax")
  assert np.abs(np.asarray(other) - np.asarray(got)).max() > 0.05


def test_pos_embed_interpolation_matches_torch_on_many_grids():
  torch = pytest.importorskip("torch")
  rng = np.random.default_rng(0)
  for side in (4, 14):
    pos = rng.normal(size=(1, 1 + side * side, 5)).astype(np.float32)
    table = torch.tensor(pos[:, 1:]).reshape(1, side, side, 5).permute(
        0, 3, 1, 2)
    for g in (2, 3, 5, 7, 16, 24):
      want = {
          "timm": torch.nn.functional.interpolate(
              table, size=(g, g), mode="bicubic", align_corners=False,
              antialias=True),
          "dino": torch.nn.functional.interpolate(
              table, scale_factor=((g + 0.1) / side,) * 2, mode="bicubic",
              align_corners=False)}
      for name, out in want.items():
        got = models.interpolate_pos_embed(jnp.asarray(pos), (g, g),
                                           interpolation=name)
        np.testing.assert_allclose(
            np.asarray(got[0, 1:]),
            out.permute(0, 2, 3, 1).reshape(-1, 5).numpy(), atol=1e-5,
            err_msg=f"{name} {side} -> {g}")


def test_vit_local_crops_read_the_chosen_interpolation():
  x28 = jax.random.uniform(jax.random.key(0), (2, 28, 28, 1))
  x14 = x28[:, :14, :14]
  outs = {}
  for name in ("timm", "dino"):
    enc = models.VisionTransformer(patch_size=7, hidden_dim=8, depth=1,
                                   num_heads=2, pos_interpolation=name)
    variables = enc.init(jax.random.key(0), x28)
    outs[name] = (enc.apply(variables, x28), enc.apply(variables, x14))
  # The init grid is not resampled; the 2 x 2 local crop's grid is.
  np.testing.assert_array_equal(outs["timm"][0], outs["dino"][0])
  assert np.abs(np.asarray(outs["timm"][1] - outs["dino"][1])).max() > 1e-4
  with pytest.raises(ValueError, match="pos_interpolation 'cubic'"):
    models.VisionTransformer(patch_size=7, hidden_dim=8, depth=1,
                             num_heads=2, pos_interpolation="cubic").init(
                                 jax.random.key(0), x28)
