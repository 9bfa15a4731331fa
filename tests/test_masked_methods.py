"""I-JEPA and MAE beyond their losses: the ViT on token subsets, the
predictor's row order, the decoder's unshuffle, the representations, bf16,
and resume bit-exactness with the masks drawn from (seed, step)."""

import os
import shutil
import sys

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from ssljax import methods, models, train

pytestmark = pytest.mark.usefixtures("fast_compiles")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # configs/


def _vit(**kw):
  return models.VisionTransformer(patch_size=4, hidden_dim=16, depth=2,
                                  num_heads=2, **kw)


def _images(b=3, seed=0):
  return jnp.asarray(np.random.default_rng(seed).uniform(size=(b, 16, 16, 1)),
                     jnp.float32)


def test_padded_token_subset_equals_the_unpadded_subset():
  """Padding masked out of attention changes no real token's output."""
  vit, x = _vit(class_token=False, representation="avg_tokens",
                pos_embedding="sincos"), _images()
  params = vit.init(jax.random.key(0), x)
  apply = jax.jit(vit.apply, static_argnames="output")
  keep = jnp.array([[0, 3, 5, 9]] * 3)
  padded = jnp.concatenate([keep, jnp.array([[1, 2]] * 3)], axis=1)
  valid = jnp.arange(6)[None, :].repeat(3, 0) < 4
  a = apply(params, x, keep=keep, output="tokens")
  b = apply(params, x, keep=padded, keep_valid=valid, output="tokens")
  np.testing.assert_allclose(b[:, :4], a, rtol=1e-5, atol=1e-6)
  ra = apply(params, x, keep=keep)
  rb = apply(params, x, keep=padded, keep_valid=valid)
  np.testing.assert_allclose(rb, ra, rtol=1e-5, atol=1e-6)
  # avg_tokens is the mean of the normalised patch tokens.
  full = apply(params, x, output="tokens")
  np.testing.assert_allclose(apply(params, x), full.mean(1), rtol=1e-5,
                             atol=1e-6)


@pytest.mark.slow
def test_representations_cls_and_last_two_cls():
  x = _images()
  cls_vit, two = _vit(), _vit(representation="cls_last2")
  params = cls_vit.init(jax.random.key(0), x)  # same parameter tree
  h = cls_vit.apply(params, x)
  h2 = two.apply(params, x)
  assert h.shape == (3, 16) and h2.shape == (3, 32)
  np.testing.assert_allclose(h2[:, 16:], h, rtol=1e-6)  # last block's CLS
  # The first half: the CLS after block 0, through the final LayerNorm.
  one = models.VisionTransformer(patch_size=4, hidden_dim=16, depth=1,
                                 num_heads=2)
  p1 = {"params": {k: v for k, v in params["params"].items()
                   if k != "block_1"}}
  np.testing.assert_allclose(h2[:, :16], one.apply(p1, x), rtol=1e-5,
                             atol=1e-6)
  with pytest.raises(ValueError, match="class token"):
    _vit(class_token=False).init(jax.random.key(0), x)


@pytest.mark.slow
def test_predictor_rows_are_target_block_major():
  pred = models.JEPAPredictor(width=8, depth=1, num_heads=2, out_dim=16)
  rng = np.random.default_rng(1)
  ctx = jnp.asarray(rng.normal(size=(3, 5, 16)), jnp.float32)
  ctx_idx = jnp.asarray(np.stack([rng.choice(16, 5, replace=False)
                                  for _ in range(3)]))
  tgt_idx = jnp.asarray(rng.integers(0, 16, size=(2, 3, 4)))
  params = pred.init(jax.random.key(0), ctx, ctx_idx, tgt_idx, (4, 4))
  apply = jax.jit(pred.apply, static_argnums=4)
  out = apply(params, ctx, ctx_idx, tgt_idx, (4, 4))
  assert out.shape == (6, 4, 16)
  for m in range(2):
    for b in range(3):
      alone = apply(params, ctx[b:b + 1], ctx_idx[b:b + 1],
                         tgt_idx[m:m + 1, b:b + 1], (4, 4))
      np.testing.assert_allclose(out[m * 3 + b], alone[0], rtol=1e-5,
                                 atol=1e-6)


def test_sincos_table_is_the_official_table_rounded_to_float32():
  # MAE's and I-JEPA's get_2d_sincos_pos_embed: float64 NumPy (the column
  # coordinate in the first half), stored as float32. Computed in float32,
  # entries were up to 1.2e-7 off, which float64 step comparisons see.
  dim, side = 48, 7

  def one_axis(d, pos):
    omega = 1.0 / 10000 ** (np.arange(d // 2, dtype=float) / (d / 2.0))
    out = np.einsum("m,d->md", pos.reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)

  cols, rows = np.meshgrid(np.arange(side, dtype=float),
                           np.arange(side, dtype=float))
  want = np.concatenate([one_axis(dim // 2, cols), one_axis(dim // 2, rows)],
                        axis=1).astype(np.float32)
  got = np.asarray(models.vit.sincos_pos_embed_2d(dim, (side, side)))
  assert got.dtype == np.float32
  np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_mae_decoder_reads_visible_tokens_by_position_not_order():
  net = models.MAENetwork(_vit(pos_embedding="sincos"),
                          models.MAEDecoder(width=8, depth=1, num_heads=2))
  x = _images(b=2)
  params = net.init(jax.random.key(0), x)
  shuffle = jnp.asarray(np.stack([np.random.default_rng(s).permutation(16)
                                  for s in range(2)]))
  other = jnp.concatenate([shuffle[:, :4][:, ::-1], shuffle[:, 4:]], axis=1)
  apply = jax.jit(lambda p, k, r: net.apply(
      p, x, k, r, method=models.MAENetwork.reconstruct))
  outs = [apply(params, s[:, :4], jnp.argsort(s, axis=1))
          for s in (shuffle, other)]
  assert outs[0].shape == (2, 16, 16)
  np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ijepa", "mae"])
def test_bfloat16_step_is_finite_and_close_to_float32(name):
  module = __import__(f"configs.{name}", fromlist=["get_config"])
  results = {}
  for dtype in ("float32", "bfloat16"):
    config = module.get_config("smoke")
    config.model.dtype = dtype
    method = methods.build(config)
    params, state = method.init(jax.random.key(0),
                                methods.BatchSpec((28, 28, 1), 1, 0))
    views = (jnp.asarray(np.random.default_rng(0).uniform(
        size=(8, 28, 28, 1)), jnp.float32),)
    schedule = {"step": jnp.zeros((), jnp.int32), "total_steps": 4,
                "steps_per_epoch": 2}
    loss, aux = jax.jit(method.loss)(params, state, {"views": views},
                                     jax.random.key(1), schedule)
    assert loss.dtype == jnp.float32
    results[dtype] = float(loss)
  assert np.isfinite(results["bfloat16"])
  assert abs(results["bfloat16"] - results["float32"]) < 0.05 * abs(
      results["float32"])


def _checkpoint_state(workdir, step):
  with ocp.CheckpointManager(os.path.abspath(
      os.path.join(workdir, "checkpoints"))) as m:
    return m.restore(step, args=ocp.args.StandardRestore())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ijepa", "mae"])
def test_resume_equals_uninterrupted_run(name, fmnist_data_dir, tmp_path):
  """Resumed from step 3, the run ends bit for bit where the uninterrupted
  one does: parameters, I-JEPA's target encoder, optimiser and probe; the
  masks of steps 4-6 come from (seed, step), so they are the same."""
  module = __import__(f"configs.{name}", fromlist=["get_config"])
  config = module.get_config("smoke")
  config.dataset.data_dir = fmnist_data_dir
  config.eval_inputs.baselines = False
  for key in list(config.evals.keys()):
    if key not in ("probe", "online_probe"):
      del config.evals[key]
  first = train.train_and_evaluate(config, str(tmp_path / "a"))
  shutil.copytree(tmp_path / "a", tmp_path / "c")
  shutil.rmtree(tmp_path / "c" / "checkpoints" / "6")
  resumed = train.train_and_evaluate(config, str(tmp_path / "c"))
  assert resumed["resumed_from_step"] == 3
  a, c = (_checkpoint_state(tmp_path / d, 6) for d in ("a", "c"))
  if name == "ijepa":
    assert "teacher" in a["method_state"]
  for key in ("params", "method_state", "probe", "opt_state"):
    for x, y in zip(jax.tree.leaves(a[key]), jax.tree.leaves(c[key])):
      np.testing.assert_array_equal(x, y)
  assert (resumed["evals"]["probe/test_accuracy"]
          == first["evals"]["probe/test_accuracy"])
