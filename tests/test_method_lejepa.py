"""LeJEPA as a method and the SIGReg evaluator.

The method's loss equals `losses.lejepa` on its own embeddings with the
directions of the step's key (both forms), draws new directions per key;
the evaluator measures the view embeddings' distance to N(0, I); a resumed
run ends bit-exact with the uninterrupted one (-m slow: two smoke runs).
"""

import importlib
import os
import shutil
import sys

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from ssljax import losses, methods, train
from ssljax.evaluators import base

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # configs/
from configs import lejepa as lejepa_config  # noqa: E402

pytestmark = pytest.mark.usefixtures("fast_compiles")


def _batch(config, batch=16):
  rng = np.random.default_rng(0)
  sizes = ([28] * config.views.num_global
           + [config.views.local_size] * config.views.num_local)
  return {"views": tuple(jnp.asarray(rng.uniform(size=(batch, s, s, 1)),
                                     jnp.float32) for s in sizes)}


@pytest.mark.parametrize("form", [
    "multi_view", pytest.param("graph", marks=pytest.mark.slow)])
def test_loss_is_the_library_loss_with_the_keys_directions(form):
  config = lejepa_config.get_config("cnn,smoke")
  config.loss.form = form
  method = methods.build(config)
  spec = train.batch_spec(config, (28, 28, 1))
  params, state = method.init(jax.random.key(0), spec)
  batch, key = _batch(config), jax.random.key(7)
  schedule = {"step": jnp.zeros((), jnp.int32), "total_steps": 4,
              "steps_per_epoch": 2}
  def both(params, key):
    _, aux = method.loss(params, state, batch, key, schedule)
    outs, _ = method.forward(params, state["batch_stats"], batch["views"])
    z = jnp.stack([o["z"] for o in outs])
    a = losses.sigreg_directions(key, z.shape[-1], config.lejepa.num_slices)
    return aux.metrics, losses.lejepa_terms(
        z, num_global=2, lam=config.lejepa.lam, directions=a)
  both = jax.jit(both)
  got, want = both(params, key)
  for name in ("loss", "invariance", "sigreg"):
    np.testing.assert_allclose(got[name], want[name], rtol=2e-5)
  assert set(got) == {"loss", "invariance", "sigreg"}
  other, _ = both(params, jax.random.key(8))
  assert float(other["sigreg"]) != float(got["sigreg"])  # new directions


def test_joint_batch_norm_views_are_one_batch():
  # "joint": the views of one size meet BatchNorm as one batch (MINIMAL.md's
  # N·V rows); "per_view": one batch each.
  config = lejepa_config.get_config("cnn,smoke")
  assert config.lejepa.batch_norm_views == "joint"
  method = methods.build(config)
  params, state = method.init(jax.random.key(0),
                              train.batch_spec(config, (28, 28, 1)))
  views = _batch(config, batch=8)["views"]
  outs, stats = jax.jit(method.forward)(params, state["batch_stats"], views)
  g = config.views.num_global
  # The global views as one batch, rows (sample, view) as forward_views.
  rows = jnp.stack(views[:g], axis=1).reshape(8 * g, *views[0].shape[1:])
  want, updates = jax.jit(lambda x: method.network.apply(
      {"params": params, "batch_stats": state["batch_stats"]}, x,
      train=True, mutable=["batch_stats"]))(rows)
  for v in range(g):
    np.testing.assert_allclose(outs[v]["z"], want["z"][v::g], rtol=1e-5,
                               atol=1e-6)
  assert jax.tree.structure(stats) == jax.tree.structure(
      updates["batch_stats"])
  config.lejepa.batch_norm_views = "per_view"
  per_view, _ = jax.jit(methods.build(config).forward)(
      params, state["batch_stats"], views)
  assert float(jnp.abs(per_view[0]["z"] - outs[0]["z"]).max()) > 1e-3


def test_default_config_is_vit_tiny_patch_7_with_the_official_values():
  config = lejepa_config.get_config()
  assert config.model.encoder == "vit_tiny16"
  assert config.model.encoder_kwargs.patch_size == 7
  assert (config.lejepa.lam, config.lejepa.num_slices) == (0.05, 1024)
  assert (config.views.num_global, config.views.num_local) == (2, 6)
  # MINIMAL.md's behaviour where the README is silent (docs/fidelity.md).
  assert config.lejepa.batch_norm_views == "joint"
  assert config.model.encoder_kwargs.head_dim == 512
  assert config.optim.weight_decay_mask == "all"
  assert config.optim.warmup_start_factor == 0.01
  assert lejepa_config.get_config("cnn").model.encoder == "cnn"
  assert "sigreg" in lejepa_config.get_config("smoke").evals
  with pytest.raises(ValueError, match="unknown variant word"):
    lejepa_config.get_config("huge")


# ---------------------------------------------------------------- evaluator --
def _evaluate(z_VxBxK, **options):
  ctx = base.EvalContext(
      config=lejepa_config.get_config("smoke"), mesh=None, total_steps=1,
      num_classes=0, features=None,
      view_embeddings=lambda state: (None, z_VxBxK, None),
      raw_pixels=lambda s: None, initial_state=lambda: None)
  module = importlib.import_module("ssljax.evaluators.sigreg")
  return dict(module.Evaluator("sigreg", ctx, **options).run(state=None))


def test_evaluator_separates_gaussian_from_collapsed_and_scales():
  rng = np.random.default_rng(0)
  gauss = rng.standard_normal((2, 512, 16)).astype(np.float32)
  got = _evaluate(gauss)
  assert set(got) == {"sigreg/sigreg_z", "sigreg/sigreg_z_standardized"}
  null = losses.sigreg_null_mean()
  assert got["sigreg/sigreg_z"] < 3 * null
  # Collapsed to a point, or a Gaussian of the wrong scale: far from N(0, I).
  collapsed = _evaluate(np.ones_like(gauss))["sigreg/sigreg_z"]
  assert collapsed > 100 * null
  scaled = _evaluate(5 * gauss + 2)
  assert scaled["sigreg/sigreg_z"] > 50 * null
  # The standardised statistic removes one location and one scale.
  np.testing.assert_allclose(scaled["sigreg/sigreg_z_standardized"],
                             got["sigreg/sigreg_z_standardized"], rtol=1e-4)
  # ... but not anisotropy: one coordinate 10x the others.
  aniso = gauss * np.r_[10.0, np.ones(15)].astype(np.float32)
  assert _evaluate(aniso)["sigreg/sigreg_z_standardized"] > 10 * null


def test_evaluator_rejects_bad_options():
  with pytest.raises(ValueError, match="evals.sigreg.num_slices"):
    _evaluate(np.zeros((2, 4, 3), np.float32), num_slices=0)


# ------------------------------------------------------------------- resume --
def _checkpoint_state(workdir, step):
  with ocp.CheckpointManager(os.path.abspath(
      os.path.join(workdir, "checkpoints"))) as m:
    return m.restore(step, args=ocp.args.StandardRestore())


@pytest.mark.slow
def test_resume_equals_uninterrupted_run(fmnist_data_dir, tmp_path):
  """ViT smoke run resumed from step 3 ends with the uninterrupted run's
  parameters, optimiser state and online probe, bit for bit: the views and
  the SIGReg directions are functions of (seed, step)."""
  config = lejepa_config.get_config("smoke")
  config.dataset.data_dir = fmnist_data_dir
  config.eval_inputs.baselines = False
  for name in list(config.evals.keys()):
    if name not in ("probe", "online_probe", "sigreg"):
      del config.evals[name]
  first = train.train_and_evaluate(config, str(tmp_path / "a"))
  shutil.copytree(tmp_path / "a", tmp_path / "c")
  shutil.rmtree(tmp_path / "c" / "checkpoints" / "6")
  resumed = train.train_and_evaluate(config, str(tmp_path / "c"))
  assert resumed["resumed_from_step"] == 3
  a, c = (_checkpoint_state(tmp_path / d, 6) for d in ("a", "c"))
  for key in ("params", "method_state", "probe", "opt_state"):
    for x, y in zip(jax.tree.leaves(a[key]), jax.tree.leaves(c[key])):
      np.testing.assert_array_equal(x, y)
  for key in ("probe/test_accuracy", "sigreg/sigreg_z"):
    assert resumed["evals"][key] == first["evals"][key], key
