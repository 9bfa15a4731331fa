"""DINOv2 / DINOv3 as a method (ssljax.methods.dinov2, configs/dinov2.py).

The method's loss is `losses.dinov2_terms` of its networks' outputs
(recomputed here from the student and teacher networks, the masks and the
masked patches gathered in ``masks.flatten().nonzero()`` order); the masks
mask ⌊C·p⌋ of the C global crops with ratios in the configured range
(Oquab et al. 2023, arXiv 2304.07193; official collate); the lazy centres
move in the state; the smoke config trains; bad configs are refused in one
line.
"""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ssljax import config_validation, losses, methods, optimizers, train
from ssljax.methods import dinov2 as dinov2_method, masks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # configs/
from configs import dinov2 as dinov2_config  # noqa: E402

pytestmark = pytest.mark.usefixtures("fast_compiles")
B = 8


def _config(variant="smoke", **loss):
  config = dinov2_config.get_config(variant)
  config.batch_size = B
  for key, value in loss.items():
    config.loss[key] = value
  return config


def _batch(config, seed=0):
  rng = np.random.default_rng(seed)
  sizes = ([28] * config.views.num_global
           + [config.views.local_size] * config.views.num_local)
  return {"views": tuple(jnp.asarray(rng.uniform(size=(B, s, s, 1)),
                                     jnp.float32) for s in sizes)}


def _schedule(step, steps_per_epoch=2):
  return {"step": jnp.asarray(step, jnp.int32), "total_steps": 20,
          "steps_per_epoch": steps_per_epoch}


def _init(config):
  method = methods.build(config)
  params, state = method.init(jax.random.key(0),
                              train.batch_spec(config, (28, 28, 1)))
  return method, params, state


def _recomputed_terms(method, params, state, views, key, tau_t):
  """dinov2_terms from the networks applied here, not by the method."""
  net, h = method.network, method.hparams
  x = jnp.concatenate(views[:2])
  mask = masks.dinov2_masks(key, 2 * B, 16, ratio_min_max=(0.1, 0.5),
                            sample_probability=0.5)
  idx = np.flatnonzero(np.asarray(mask).reshape(-1))
  s = net.apply({"params": params}, x, masks=mask)
  t = net.apply({"params": state["teacher"]["params"]}, x)
  patch = lambda p, tok: net.apply(
      {"params": p}, tok.reshape(-1, tok.shape[-1])[idx],
      method=dinov2_method.Network.patch_logits)
  local = net.apply({"params": params}, jnp.concatenate(views[2:]))["z"]
  centred = h["centering"] == "centering"
  return losses.dinov2_terms(
      s["z"].reshape(2, B, -1), local.reshape(len(views) - 2, B, -1),
      t["z"].reshape(2, B, -1), patch(params, s["patch"]),
      patch(state["teacher"]["params"], t["patch"]), mask,
      s["h"].reshape(2, B, -1), centering=h["centering"],
      teacher_temperature=tau_t,
      dino_center=state["dino_center"] if centred else None,
      ibot_center=state["ibot_center"] if centred else None,
      koleo_weight=h["koleo_weight"], version=h["version"])


@pytest.mark.parametrize("loss", [
    {}, {"centering": "sinkhorn_knopp"},
    {"centering": "sinkhorn_knopp", "version": "dinov3"}])
def test_loss_is_dinov2_terms_of_the_network_outputs(loss):
  # The official warm-up 0.04 -> 0.07 (the config's default is 0.02 flat),
  # so that the temperature read back is one mid-warm-up.
  config = _config(**{"warmup_teacher_temperature": 0.04,
                      "teacher_temperature": 0.07, **loss})
  method, params, state = _init(config)
  # A non-zero centre (as after a step) and a teacher unlike the student.
  if "dino_center" in state:
    state = {**state, "dino_center": jnp.linspace(-0.1, 0.1, 32),
             "ibot_center": jnp.linspace(0.1, -0.1, 32)}
  state["teacher"]["params"] = jax.tree.map(
      lambda a: a * 0.9 + 0.01, state["teacher"]["params"])
  batch, key = _batch(config), jax.random.key(3)
  loss_value, aux = method.loss(params, state, batch, key, _schedule(1))
  tau_t = float(aux.metrics["teacher_temperature"])
  assert 0.04 < tau_t < 0.07  # warming up over 0.3·4 epochs of 2 steps
  want = _recomputed_terms(method, params, state, batch["views"], key, tau_t)
  for name in ("loss", "dino_global", "dino_local", "koleo", "ibot"):
    np.testing.assert_allclose(aux.metrics[name], want[name], rtol=2e-5,
                               err_msg=name)
  np.testing.assert_allclose(loss_value, want["loss"], rtol=2e-5)
  if "dino_center" in want:  # the lazy centres go to the state
    for name in ("dino_center", "ibot_center"):
      np.testing.assert_allclose(aux.state[name], want[name], rtol=1e-5)
      assert not np.allclose(aux.state[name], state[name])
  # The evaluators probe the teacher's backbone class token.
  h = method.representation(params, state, batch["views"][0])
  encoder, variables = method.encoder_variables(params, state)
  np.testing.assert_allclose(encoder.apply(variables, batch["views"][0],
                                           train=False), h, rtol=1e-6)
  assert not np.allclose(h, method.network.apply(
      {"params": params}, batch["views"][0], method="represent"))


def test_gram_anchoring_adds_its_weighted_term():
  config = _config(centering="sinkhorn_knopp", version="dinov3",
                   gram_weight=2.0)
  method, params, state = _init(config)
  state["teacher"]["params"] = jax.tree.map(
      lambda a: a * 0.5, state["teacher"]["params"])
  batch, key = _batch(config), jax.random.key(1)
  _, aux = method.loss(params, state, batch, key, _schedule(0))
  outs = method.outputs(params, state["teacher"]["params"], batch["views"],
                        key)
  gram = losses.gram_anchoring(outs["student_tokens"], outs["teacher_tokens"])
  np.testing.assert_allclose(aux.metrics["gram"], 2.0 * gram, rtol=1e-5)
  np.testing.assert_allclose(
      aux.metrics["loss"], aux.metrics["dino_global"]
      + aux.metrics["dino_local"] + aux.metrics["koleo"]
      + aux.metrics["ibot"] + aux.metrics["gram"], rtol=1e-5)


def test_masks_fraction_of_crops_and_ratio_range():
  c, t, lo, hi, p = 40, 49, 0.1, 0.5, 0.5
  counts = masks.dinov2_mask_counts(c, t, ratio_min_max=(lo, hi),
                                    sample_probability=p)
  assert len(counts) == int(c * p) == 20
  assert list(counts) == sorted(counts)
  assert all(int(t * lo) <= k <= t * hi for k in counts)
  seen = np.zeros(c)
  for seed in range(20):
    m = np.asarray(masks.dinov2_masks(jax.random.key(seed), c, t,
                                      ratio_min_max=(lo, hi),
                                      sample_probability=p))
    assert m.shape == (c, t) and m.dtype == bool
    per_crop = m.sum(1)
    assert np.sum(per_crop > 0) == 20            # p of the crops masked
    assert sorted(per_crop[per_crop > 0]) == list(counts)
    ratios = per_crop[per_crop > 0] / t
    assert ratios.min() >= lo and ratios.max() <= hi
    seen += per_crop > 0
  assert seen.min() > 0  # every crop is masked under some key (shuffled)
  # Patches are spread: every patch masked somewhere.
  m = np.asarray(masks.dinov2_masks(jax.random.key(0), 400, t,
                                    ratio_min_max=(lo, hi),
                                    sample_probability=p))
  assert m.any(0).all()
  with pytest.raises(ValueError, match="no masked patch"):
    masks.dinov2_mask_counts(2, 16, ratio_min_max=(0.1, 0.5),
                             sample_probability=0.2)


def test_mask_token_replaces_only_masked_patches():
  config = _config()
  method, params, _ = _init(config)
  x = _batch(config)["views"][0]
  none = np.zeros((B, 16), bool)
  a = method.network.apply({"params": params}, x)
  b = method.network.apply({"params": params}, x, masks=none)
  np.testing.assert_allclose(a["patch"], b["patch"], rtol=1e-6)
  some = none.copy()
  some[0, 3] = True
  c = method.network.apply({"params": params}, x, masks=some)
  assert not np.allclose(a["h"][0], c["h"][0])
  np.testing.assert_allclose(a["h"][1:], c["h"][1:], rtol=1e-6)


def test_smoke_config_trains_with_a_finite_changing_loss():
  config = _config()
  config_validation.validate(config)
  method, params, state = _init(config)
  tx = optimizers.create_optimizer(config.optim, 1e-3, steps_per_epoch=2,
                                   total_steps=20)
  opt_state = tx.init(params)
  batch = _batch(config)

  @jax.jit
  def step(params, state, opt_state, key, step):
    sched = {"step": step, "total_steps": 20, "steps_per_epoch": 2}
    grads, aux = jax.grad(method.loss, has_aux=True)(params, state, batch,
                                                     key, sched)
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    new, _ = method.after_update(aux.state, params, sched)
    return params, new, opt_state, aux.metrics["loss"]

  found = []
  teacher0 = state["teacher"]["params"]["encoder"]["patch_embed"]["kernel"]
  for i in range(4):
    params, state, opt_state, loss = step(params, state, opt_state,
                                          jax.random.key(i), jnp.int32(i))
    found.append(float(loss))
  assert np.all(np.isfinite(found)) and len(set(found)) == 4, found
  teacher = state["teacher"]["params"]["encoder"]["patch_embed"]["kernel"]
  assert not np.allclose(teacher, teacher0)  # the EMA teacher moved


@pytest.mark.parametrize("field,value,needle", [
    ("masks.mask_sample_probability", 1.5, "mask_sample_probability"),
    ("masks.mask_ratio_min_max", (0.6, 0.2), "mask_ratio_min_max"),
    ("loss.version", "dinov4", "version"),
    ("loss.centering", "softmax", "centering"),
    ("model.encoder", "cnn", "ViT encoder"),
    ("views.num_global", 3, "num_global"),
])
def test_config_validation_refuses_bad_values_in_one_line(field, value,
                                                          needle):
  config_validation.validate(dinov2_config.get_config("smoke"))
  config_validation.validate(dinov2_config.get_config("cpu"))
  config = dinov2_config.get_config("smoke")
  group, name = field.split(".")
  config[group][name] = value
  with pytest.raises(config_validation.ConfigError) as err:
    config_validation.validate(config)
  message = str(err.value)
  assert needle in message and "\n" not in message, message


def test_dinov3_needs_sinkhorn_knopp():
  config = dinov2_config.get_config("smoke")
  config.loss.version = "dinov3"
  with pytest.raises(config_validation.ConfigError, match="sinkhorn_knopp"):
    config_validation.validate(config)


def test_dinov3_head_trains_and_freezes_its_plain_last_layer():
  # model.dino_head.weight_norm=False: DINOv3's plain last layer, named
  # "last_layer" so that the freeze and the optimiser's masks find it.
  config = dinov2_config.get_config("smoke")
  config.loss.version = "dinov3"
  config.loss.centering = "sinkhorn_knopp"
  config.model.dino_head.weight_norm = False
  config_validation.validate(config)
  method, params, state = _init(config)
  assert "last_layer" in params["projector"]
  assert "last_layer_v" not in params["projector"]
  tx = optimizers.create_optimizer(config.optim, 1e-2, steps_per_epoch=2,
                                   total_steps=20)
  opt_state = tx.init(params)
  batch = _batch(config)
  @jax.jit
  def grad_fn(params, state, key, step):
    sched = {"step": step, "total_steps": 20, "steps_per_epoch": 2}
    return jax.grad(method.loss, has_aux=True)(params, state, batch, key,
                                               sched)

  start = params["projector"]["last_layer"]
  for i in range(3):
    grads, aux = grad_fn(params, state, jax.random.key(i), jnp.int32(i))
    updates, opt_state = tx.update(grads, opt_state, params)
    params, state = optax.apply_updates(params, updates), aux.state
    moved = float(jnp.max(jnp.abs(params["projector"]["last_layer"]
                                  - start)))
    assert (moved == 0.0) == (i < 2), (i, moved)  # frozen for 1 epoch
  with config.model.dino_head.ignore_type():
    config.model.dino_head.weight_norm = "no"
  with pytest.raises(config_validation.ConfigError, match="weight_norm"):
    config_validation.validate(config)
