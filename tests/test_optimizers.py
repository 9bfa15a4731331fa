"""The optimiser options that make a step equal the official codes' step
(ssljax.optimizers, ssljax.methods.ema): each against a NumPy transcription
of what the official code does.

- per-tensor clipping: DINO's ``utils.clip_gradients`` (coefficient
  max_norm / (norm + 1e-6), applied when below 1);
- the frozen last layer's Adam count: torch.optim.AdamW skips a parameter
  whose grad is None (DINO's ``cancel_gradients_last_layer``), so its step
  count and moments start when it thaws;
- the cosine weight-decay schedule: DINO's ``cosine_scheduler`` /
  I-JEPA's ``CosineWDSchedule``, applied as AdamW's decoupled decay;
- I-JEPA's linear EMA schedule and ``ipe_scale``;
- the PyTorch LARS of MoCo v3 (moco/optimizer.py) and BYOL's
  (byol/utils/optimizers.py): a momentum of trust-scaled gradients, times
  the current learning rate (``lars.momentum_buffer = "gradients"``);
- apex's LARC around SGD (SwAV's optimiser) and solo-learn's LARS, with and
  without clipping (``lars.trust_ratio = "larc"``, ``lars.clip``);
- the learning rate in float64 under x64 (main_moco.py's
  ``adjust_learning_rate`` in Python floats).
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from ssljax import optimizers
from ssljax.methods import ema


def _optim(**fields):
  base = dict(name="adamw", learning_rate=1.0, weight_decay=0.0,
              warmup_epochs=0.0, end_lr_factor=1.0, clip_grad_norm=0.0,
              lars=dict(momentum=0.9, trust_coefficient=1e-3))
  base.update(fields)
  return ml_collections.ConfigDict(base)


def _params(rng):
  return {"head": {"mlp": {"kernel": rng.normal(size=(4, 3))},
                   "last_layer_v": {"kernel": rng.normal(size=(3, 5))}},
          "encoder": {"bias": rng.normal(size=(3,))}}


# ----------------------------------------------------------------- clipping --

def _dino_clip(grads, clip):
  """utils.clip_gradients: each tensor's norm, coefficient with eps 1e-6."""
  out = {}
  for name, g in grads.items():
    norm = np.linalg.norm(g.reshape(-1))
    coef = clip / (norm + 1e-6)
    out[name] = g * coef if coef < 1 else g
  return out


def test_per_tensor_clipping_is_dinos():
  rng = np.random.default_rng(0)
  grads = {"big": rng.normal(size=(5, 4)) * 3.0,       # norm ~13: clipped
           "small": rng.normal(size=(7,)) * 0.1,       # norm ~0.3: kept
           "edge": np.full((4,), 1.5)}                 # norm 3.0: coef < 1
  grads = {k: v.astype(np.float32) for k, v in grads.items()}
  want = _dino_clip(grads, 3.0)
  got, _ = optimizers.clip_by_tensor_norm(3.0).update(
      {k: jnp.asarray(v) for k, v in grads.items()}, optax.EmptyState())
  for name in grads:
    np.testing.assert_allclose(np.asarray(got[name]), want[name], rtol=1e-6)
  assert np.linalg.norm(np.asarray(got["big"])) == pytest.approx(3.0, 1e-5)
  np.testing.assert_array_equal(np.asarray(got["small"]), grads["small"])
  # The global mode scales every tensor by one coefficient: the small one
  # shrinks too, so the two modes differ on this gradient.
  glob, _ = optax.clip_by_global_norm(3.0).update(
      {k: jnp.asarray(v) for k, v in grads.items()}, optax.EmptyState())
  assert not np.allclose(np.asarray(glob["small"]), grads["small"])


@pytest.mark.parametrize("mode,clip", [
    ("per_tensor", optimizers.clip_by_tensor_norm),
    ("global", optax.clip_by_global_norm)])
def test_clip_mode_in_create_optimizer(mode, clip):
  rng = np.random.default_rng(3)
  params = {"a": jnp.ones((3,)), "b": jnp.ones((2, 2))}
  grads = [{"a": jnp.asarray(rng.normal(size=3) * 10.0),
            "b": jnp.asarray(rng.normal(size=(2, 2)) * 0.01)}
           for _ in range(3)]
  tx = optimizers.create_optimizer(
      _optim(learning_rate=0.1, weight_decay=0.05, clip_grad_norm=1.0,
             clip_mode=mode), 0.1)
  want = optax.chain(clip(1.0), optax.adamw(
      0.1, weight_decay=0.05, mask=lambda p: jax.tree.map(
          lambda x: x.ndim > 1, p)))
  got, ref = _run(tx, params, grads), _run(want, params, grads)
  for k in params:
    np.testing.assert_allclose(np.asarray(got[k]), np.asarray(ref[k]),
                               rtol=1e-6)
  # The two modes give different steps on these gradients (a large and a
  # small tensor).
  other = "global" if mode == "per_tensor" else "per_tensor"
  moved = _run(optimizers.create_optimizer(
      _optim(learning_rate=0.1, weight_decay=0.05, clip_grad_norm=1.0,
             clip_mode=other), 0.1), params, grads)
  assert not np.allclose(np.asarray(moved["b"]), np.asarray(got["b"]),
                         rtol=1e-4)


# ---------------------------------------------- frozen last layer, Adam count --

def _torch_adamw(params, grads_per_step, lr, wd, frozen_steps, frozen):
  """torch.optim.AdamW, per parameter: a parameter whose grad is None (the
  frozen ones during the first ``frozen_steps``) is skipped: no decay, no
  moment update, no step count."""
  b1, b2, eps = 0.9, 0.999, 1e-8
  p = {k: v.copy() for k, v in params.items()}
  state = {k: dict(step=0, m=np.zeros_like(v), v=np.zeros_like(v))
           for k, v in params.items()}
  for t, grads in enumerate(grads_per_step):
    for k in p:
      if k in frozen and t < frozen_steps:
        continue  # grad is None
      s, g = state[k], grads[k]
      s["step"] += 1
      decay = wd if p[k].ndim > 1 else 0.0
      p[k] = p[k] * (1 - lr * decay)
      s["m"] = b1 * s["m"] + (1 - b1) * g
      s["v"] = b2 * s["v"] + (1 - b2) * g * g
      m_hat = s["m"] / (1 - b1 ** s["step"])
      v_hat = s["v"] / (1 - b2 ** s["step"])
      p[k] = p[k] - lr * m_hat / (np.sqrt(v_hat) + eps)
  return p


def _flat(tree):
  return {jax.tree_util.keystr(k): np.asarray(v)
          for k, v in jax.tree_util.tree_leaves_with_path(tree)}


def _run(tx, params, grads_per_step):
  state = tx.init(params)
  step = jax.jit(lambda g, s, p: tx.update(g, s, p))
  for grads in grads_per_step:
    updates, state = step(grads, state, params)
    params = optax.apply_updates(params, updates)
  return params


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_held_adam_count_is_torchs_frozen_parameter(x64, wd):
  rng = np.random.default_rng(1)
  params = jax.tree.map(jnp.asarray, _params(rng))
  grads = [jax.tree.map(lambda a: jnp.asarray(rng.normal(size=a.shape)),
                        params) for _ in range(7)]
  lr, frozen_steps = 0.01, 3
  optim = _optim(learning_rate=lr, weight_decay=wd,
                 freeze_last_layer_epochs=1.0, frozen_adam_count="hold")
  tx = optimizers.create_optimizer(optim, lr, steps_per_epoch=frozen_steps)
  got = _flat(_run(tx, params, grads))
  frozen = {k for k in got if "last_layer" in k}
  want = _torch_adamw(_flat(params), [_flat(g) for g in grads], lr, wd,
                      frozen_steps, frozen)
  for k in got:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-12)

  # "advance" (optax's one count) gives the thawed layer Adam's bias
  # corrections of step 4 instead of step 1: its first update is
  # lr·0.1/(1 − 0.9⁴) / sqrt(0.001/(1 − 0.999⁴)) ≈ 0.58 lr instead of lr.
  advance = optimizers.create_optimizer(
      _optim(learning_rate=lr, weight_decay=wd, freeze_last_layer_epochs=1.0,
             frozen_adam_count="advance"), lr, steps_per_epoch=frozen_steps)
  other = _flat(_run(advance, params, grads[:frozen_steps + 1]))
  held = _flat(_run(tx, params, grads[:frozen_steps + 1]))
  start = _flat(params)
  key = next(iter(frozen))
  moved_held = np.abs(held[key] - start[key]).mean()
  moved_adv = np.abs(other[key] - start[key]).mean()
  assert moved_adv / moved_held == pytest.approx(
      (0.1 / (1 - 0.9 ** 4)) / np.sqrt(0.001 / (1 - 0.999 ** 4)), rel=0.05)


def test_hold_needs_adamw():
  with pytest.raises(ValueError, match="need optim.name='adamw'"):
    optimizers.create_optimizer(
        _optim(name="lars", freeze_last_layer_epochs=1.0,
               frozen_adam_count="hold"), 0.1, steps_per_epoch=2)
  with pytest.raises(ValueError, match="unknown clip_mode 'norm'"):
    optimizers.create_optimizer(_optim(clip_mode="norm"), 0.1)


# ------------------------------------------------- weight-decay schedule --

def test_cosine_weight_decay_is_the_official_schedule(x64):
  total, start, end, lr = 8, 0.04, 0.4, 0.05
  optim = _optim(learning_rate=lr, weight_decay=start,
                 weight_decay_schedule="cosine", final_weight_decay=end)
  tx = optimizers.create_optimizer(optim, lr, total_steps=total)
  rng = np.random.default_rng(2)
  params = {"w": jnp.asarray(rng.normal(size=(3, 3))),
            "b": jnp.asarray(rng.normal(size=(3,)))}
  grads = [{k: jnp.asarray(rng.normal(size=v.shape)) for k, v in
            params.items()} for _ in range(total)]
  got = _run(tx, params, grads)
  # DINO's cosine_scheduler(base, final, ...)[it], it = 0, 1, ...
  schedule = [end + 0.5 * (start - end) * (1 + np.cos(np.pi * t / total))
              for t in range(total)]
  b1, b2, eps = 0.9, 0.999, 1e-8
  p = {k: np.asarray(v) for k, v in params.items()}
  m = {k: np.zeros_like(v) for k, v in p.items()}
  v2 = {k: np.zeros_like(v) for k, v in p.items()}
  for t, g in enumerate(grads):
    for k in p:
      gk = np.asarray(g[k])
      m[k] = b1 * m[k] + (1 - b1) * gk
      v2[k] = b2 * v2[k] + (1 - b2) * gk * gk
      update = (m[k] / (1 - b1 ** (t + 1))) / (
          np.sqrt(v2[k] / (1 - b2 ** (t + 1))) + eps)
      decay = schedule[t] if p[k].ndim > 1 else 0.0
      p[k] = p[k] * (1 - lr * decay) - lr * update
  for k in p:
    np.testing.assert_allclose(np.asarray(got[k]), p[k], rtol=1e-10)


def test_cosine_schedule_end_points_and_errors():
  up = optimizers.cosine_schedule(0.04, 0.4, 10)
  assert float(up(0)) == pytest.approx(0.04)
  assert float(up(5)) == pytest.approx(0.22)
  assert float(up(10)) == pytest.approx(0.4)
  assert float(up(30)) == pytest.approx(0.4)  # held after the end
  with pytest.raises(ValueError, match="steps >= 1"):
    optimizers.cosine_schedule(0.1, 0.2, 0)
  with pytest.raises(ValueError, match="needs the run's total_steps"):
    optimizers.create_optimizer(
        _optim(weight_decay_schedule="cosine", final_weight_decay=0.4), 0.1)


# ------------------------------------------------------------ EMA schedules --

def test_linear_momentum_is_ijepas_generator():
  # src/train.py: (ema0 + i * (ema1 - ema0) / (ipe * epochs * ipe_scale)
  #                for i in range(int(ipe * epochs * ipe_scale) + 1))
  ipe, epochs, ipe_scale, ema0, ema1 = 7, 3, 1.25, 0.996, 1.0
  official = [ema0 + i * (ema1 - ema0) / (ipe * epochs * ipe_scale)
              for i in range(int(ipe * epochs * ipe_scale) + 1)]
  optim = _optim(schedule_scale=ipe_scale)
  k = optimizers.schedule_steps(optim, ipe * epochs)
  assert k == int(ipe * epochs * ipe_scale)  # the lr and wd schedules' T_max
  length = optim.schedule_scale * ipe * epochs  # the EMA's denominator
  for i in range(ipe * epochs):  # the run's updates use the first ipe*epochs
    got = float(ema.momentum("linear", i, length, base=ema0, final=ema1))
    assert got == pytest.approx(official[i], abs=1e-7)
  # The cosine differs in between, equal at the ends.
  assert float(ema.momentum("cosine", 0, k)) == pytest.approx(official[0])
  assert abs(float(ema.momentum("cosine", k // 4, k)) - official[k // 4]) > 1e-4
  with pytest.raises(ValueError, match="unknown momentum schedule"):
    ema.momentum("step", 0, 10)


# ------------------------------------- LeJEPA's minimal example (MINIMAL.md) --

def test_warmup_start_factor_is_torchs_linear_then_cosine(x64):
  # MINIMAL.md: SequentialLR(LinearLR(start_factor=0.01, total_iters=W),
  # CosineAnnealingLR(T_max=T - W, eta_min)) stepped once per step; their
  # closed forms at steps 0 .. T - 1.
  peak, f, w, total, end = 2e-3, 0.01, 5, 20, 0.5
  optim = _optim(learning_rate=peak * 256 / 16, warmup_epochs=1.0,
                 warmup_start_factor=f, end_lr_factor=end)
  fn = optimizers.create_learning_rate_fn(optim, 16, w, total)
  want = [peak * (f + (1 - f) * i / w) if i < w else
          end * peak + (1 - end) * peak
          * (1 + np.cos(np.pi * (i - w) / (total - w))) / 2
          for i in range(total)]
  got = [float(fn(jnp.asarray(i, jnp.int32))) for i in range(total)]
  np.testing.assert_allclose(got, want, rtol=1e-14)
  # Without the field: the warm-up starts at 0.
  plain = optimizers.create_learning_rate_fn(
      _optim(learning_rate=1.0, warmup_epochs=1.0), 256, w, total)
  assert float(plain(jnp.asarray(0, jnp.int32))) == 0.0
  with pytest.raises(ValueError, match="warmup_start_factor"):
    optimizers.create_learning_rate_fn(
        _optim(warmup_epochs=1.0, warmup_start_factor=1.5), 256, w, total)


@pytest.mark.parametrize("mask", ["kernels", "all"])
def test_weight_decay_mask(mask):
  # "all": MINIMAL.md's one AdamW group decays biases and norms too.
  params = {"w": jnp.ones((2, 2)), "b": jnp.ones((2,))}
  tx = optimizers.create_optimizer(
      _optim(weight_decay=0.5, weight_decay_mask=mask), 0.1)
  zeros = jax.tree.map(jnp.zeros_like, params)
  updates, _ = tx.update(zeros, tx.init(params), params)
  np.testing.assert_allclose(updates["w"], -0.05, rtol=1e-6)
  np.testing.assert_allclose(updates["b"], -0.05 if mask == "all" else 0.0,
                             rtol=1e-6)


def test_weight_decay_mask_errors():
  with pytest.raises(ValueError, match="unknown weight_decay_mask 'none'"):
    optimizers.create_optimizer(_optim(weight_decay_mask="none"), 0.1)
  with pytest.raises(ValueError, match="need optim.name='adamw'"):
    optimizers.create_optimizer(
        _optim(name="lars", weight_decay_mask="all"), 0.1)


# ------------------------------------------- I-JEPA's schedulers, Adam bias --

def _ijepa_schedulers(steps, warmup, start_lr, ref_lr, final_lr, wd, final_wd):
  """I-JEPA's WarmupCosineSchedule and CosineWDSchedule (src/utils/
  schedulers.py), read as its loop reads them: ``step()`` before update k,
  so update k gets the value at k + 1."""
  lrs, wds = [], []
  for k in range(steps):
    t = k + 1
    if t < warmup:
      lr = start_lr + t / max(1, warmup) * (ref_lr - start_lr)
    else:
      progress = (t - warmup) / max(1, steps - warmup)
      lr = max(final_lr, final_lr + (ref_lr - final_lr) * 0.5
               * (1 + np.cos(np.pi * progress)))
    lrs.append(lr)
    w = final_wd + (wd - final_wd) * 0.5 * (1 + np.cos(np.pi * t / steps))
    wds.append(min(final_wd, w))
  return lrs, wds


def test_offset_schedules_are_ijepas_schedulers(x64):
  steps, per_epoch = 20, 5
  optim = _optim(learning_rate=1e-3 * 256 / 16, warmup_epochs=1.0,
                 end_lr_factor=1e-3, warmup_start_factor=0.2,
                 schedule_offset=1, weight_decay=0.04, final_weight_decay=0.4,
                 weight_decay_schedule="cosine")
  lr = optimizers.create_learning_rate_fn(optim, 16, per_epoch, steps)
  wd = optimizers.weight_decay_fn(optim, steps)
  want_lr, want_wd = _ijepa_schedulers(steps, per_epoch, 2e-4, 1e-3, 1e-6,
                                       0.04, 0.4)
  count = lambda k: jnp.asarray(k, jnp.int32)  # the optimiser's count
  got_lr = [float(lr(count(k))) for k in range(steps)]
  got_wd = [float(wd(count(k))) for k in range(steps)]
  np.testing.assert_allclose(got_lr, want_lr, rtol=1e-13)
  np.testing.assert_allclose(got_wd, want_wd, rtol=1e-13)
  # Offset 0 from 0 (the defaults) is a schedule one step behind, from 0.
  plain = optimizers.create_learning_rate_fn(
      _optim(learning_rate=1e-3 * 256 / 16, warmup_epochs=1.0,
             end_lr_factor=1e-3), 16, per_epoch, steps)
  assert float(plain(count(0))) == 0.0
  assert float(plain(count(1))) == pytest.approx(2e-4)


def test_accurate_bias_correction_is_torchs_in_float32():
  # One AdamW step in float32 on gradients of one size: optax's 1 - 0.999
  # in float32 is 1.3e-5 off, so its update is ~6e-6 off torch's (float64
  # corrections); the accurate form is within float32 rounding.
  rng = np.random.default_rng(3)
  params = {"w": rng.normal(size=(4, 3)).astype(np.float32)}
  grads = [{"w": rng.normal(size=(4, 3)).astype(np.float32)}]
  want = _torch_adamw({k: v.astype(np.float64) for k, v in params.items()},
                      [{k: v.astype(np.float64) for k, v in g.items()}
                       for g in grads], 0.1, 0.0, 0, ())["w"]
  moved = lambda tree: np.abs(tree["w"] - want) / np.abs(want - params["w"])
  for bias, low, high in (("accurate", 0.0, 1e-6), ("optax", 3e-6, 1e-5)):
    tx = optimizers.create_optimizer(
        _optim(learning_rate=0.1, adam_bias_correction=bias), 0.1)
    got = _run(tx, jax.tree.map(jnp.asarray, params),
               [jax.tree.map(jnp.asarray, g) for g in grads])
    assert low <= moved({"w": np.asarray(got["w"], np.float64)}).max() < high


def test_accurate_bias_correction_equals_optax_in_float64(x64):
  rng = np.random.default_rng(4)
  params = jax.tree.map(jnp.asarray, _params(rng))
  grads = [jax.tree.map(lambda a: jnp.asarray(rng.normal(size=a.shape)),
                        params) for _ in range(5)]
  runs = [_run(optimizers.create_optimizer(
      _optim(learning_rate=0.1, weight_decay=0.05,
             adam_bias_correction=bias), 0.1), params, grads)
          for bias in ("optax", "accurate")]
  for a, b in zip(*(jax.tree.leaves(r) for r in runs)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-13)
  with pytest.raises(ValueError, match="need optim.name='adamw'"):
    optimizers.create_optimizer(
        _optim(name="lars", adam_bias_correction="accurate"), 0.1)
  with pytest.raises(ValueError, match="unknown adam_bias_correction"):
    optimizers.create_optimizer(_optim(adam_bias_correction="exact"), 0.1)


# ------------------------------------------------------------------ LARS --

def _moco_lars(params, grads_per_step, lrs, wd, momentum=0.9, eta=1e-3,
               bias_lr_factor=1.0):
  """moco/optimizer.py's LARS.step: decay and trust ratio for ndim > 1,
  mu = momentum·mu + dp, p -= lr·mu. With ``bias_lr_factor``, barlowtwins
  main.py's LARS over its two groups (weights at lr, biases and norms at
  lr·factor, both filters on): the same rule."""
  params = {k: v.copy() for k, v in params.items()}
  mu = {k: np.zeros_like(v) for k, v in params.items()}
  for grads, lr in zip(grads_per_step, lrs):
    for k, p in params.items():
      dp = grads[k]
      if p.ndim > 1:
        dp = dp + wd * p
        pn, un = np.linalg.norm(p), np.linalg.norm(dp)
        dp = dp * (eta * pn / un if pn > 0 and un > 0 else 1.0)
      mu[k] = momentum * mu[k] + dp
      params[k] = p - (lr if p.ndim > 1 else lr * bias_lr_factor) * mu[k]
  return params


def test_lars_gradient_buffer_is_mocos_and_byols(x64):
  rng = np.random.default_rng(2)
  params = jax.tree.map(jnp.asarray, _params(rng))
  grads = [jax.tree.map(lambda a: jnp.asarray(rng.normal(size=a.shape)),
                        params) for _ in range(6)]
  lrs = [0.0, 0.1, 0.2, 0.3, 0.2, 0.1]  # a warm-up, then a decay
  schedule = lambda count: jnp.asarray(lrs)[count]
  wd = 0.01
  tx = optimizers.create_optimizer(
      _optim(name="lars", weight_decay=wd,
             lars=dict(momentum=0.9, trust_coefficient=1e-3,
                       momentum_buffer="gradients")), schedule)
  got = _flat(_run(tx, params, grads))
  want = _moco_lars(_flat(params), [_flat(g) for g in grads], lrs, wd)
  for k in got:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-14)
  # optax.lars's buffer of lr-scaled steps differs once the rate moves.
  tx = optimizers.create_optimizer(
      _optim(name="lars", weight_decay=wd), schedule)
  other = _flat(_run(tx, params, grads))
  assert max(np.abs(other[k] - want[k]).max() for k in got) > 1e-4


def _larc_sgd(params, grads_per_step, lrs, wd, *, eta, clip, kernels_only,
              frozen_steps=0, momentum=0.9):
  """apex's LARC.step around torch.optim.SGD (SwAV's main_swav.py), which
  is also solo-learn's LARS.step (solo/utils/lars.py; ``kernels_only``:
  its exclude_bias_n_norm, ``clip``: its clip_lr): where ‖w‖ and ‖g‖ are
  non-zero, r = eta·‖w‖ / (‖g‖ + wd·‖w‖ + 1e-8), min(r / lr, 1) when
  clipped, dp = r·(g + wd·w); mu = momentum·mu + dp (the buffer is made at
  a parameter's first gradient), p -= lr·mu. A parameter whose name has
  "last_layer" has no gradient (None: skipped) during the first
  ``frozen_steps`` steps, as SwAV's prototypes."""
  params = {k: v.copy() for k, v in params.items()}
  mu = {}
  for step, (grads, lr) in enumerate(zip(grads_per_step, lrs)):
    for k, p in params.items():
      if "last_layer" in k and step < frozen_steps:
        continue
      dp = grads[k]
      pn, gn = np.linalg.norm(p), np.linalg.norm(dp)
      if (p.ndim > 1 or not kernels_only) and pn != 0 and gn != 0:
        ratio = eta * pn / (gn + pn * wd + 1e-8)
        if clip:
          ratio = min(ratio / lr, 1) if lr else 1.0
        dp = (dp + wd * p) * ratio
      mu[k] = momentum * mu[k] + dp if k in mu else dp.copy()
      params[k] = p - lr * mu[k]
  return params


@pytest.mark.parametrize("mask,clip,frozen", [
    ("all", False, 0),       # SwAV: LARC(SGD, 0.001, clip=False), all params
    ("all", False, 2),       # ... with its prototypes frozen for 2 steps
    ("kernels", True, 0),    # solo-learn: clip_lr, exclude_bias_n_norm
    ("kernels", False, 0)])
def test_larc_is_apexs_and_solo_learns(x64, mask, clip, frozen):
  rng = np.random.default_rng(5)
  params = jax.tree.map(jnp.asarray, _params(rng))
  grads = [jax.tree.map(lambda a: jnp.asarray(rng.normal(size=a.shape)),
                        params) for _ in range(6)]
  lrs = [0.0, 0.1, 0.2, 0.3, 0.2, 0.1]
  schedule = lambda count: jnp.asarray(lrs)[count]
  wd, eta = 0.05, 0.02
  optim = _optim(name="lars", weight_decay=wd, weight_decay_mask=mask,
                 freeze_last_layer_epochs=float(frozen),
                 lars=dict(momentum=0.9, trust_coefficient=eta,
                           momentum_buffer="gradients", trust_ratio="larc",
                           clip=clip))
  tx = optimizers.create_optimizer(optim, schedule, steps_per_epoch=1)
  got = _flat(_run(tx, params, grads))
  want = _larc_sgd(_flat(params), [_flat(g) for g in grads], lrs, wd,
                   eta=eta, clip=clip, kernels_only=mask == "kernels",
                   frozen_steps=frozen)
  for k in got:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-14)
  if frozen:
    key = next(k for k in got if "last_layer" in k)
    moved = _larc_sgd(_flat(params), [_flat(g) for g in grads], lrs, wd,
                      eta=eta, clip=clip, kernels_only=False)
    assert np.abs(moved[key] - want[key]).max() > 1e-4
  # LARS's ratio over ‖g + λw‖ is another optimiser on the same gradients.
  optim.lars.trust_ratio, optim.lars.clip = "update", False
  optim.weight_decay_mask = "kernels"
  other = _flat(_run(optimizers.create_optimizer(optim, schedule,
                                                 steps_per_epoch=1),
                     params, grads))
  assert max(np.abs(other[k] - want[k]).max() for k in got) > 1e-4


def test_larc_clip_caps_the_rate_at_the_learning_rate(x64):
  # A tiny gradient on a large weight: the unclipped ratio is above 1, so
  # clipping makes the step plain SGD with decay (ratio 1).
  w = {"kernel": jnp.full((3, 3), 10.0)}
  g = {"kernel": jnp.full((3, 3), 1e-3)}
  tx = optimizers.scale_by_larc(0.0, 0.02, clip=True, learning_rate_fn=0.1)
  out, _ = tx.update(g, tx.init(w), w)
  np.testing.assert_allclose(np.asarray(out["kernel"]), 1e-3, rtol=1e-12)
  free = optimizers.scale_by_larc(0.0, 0.02)
  out, _ = free.update(g, free.init(w), w)
  np.testing.assert_allclose(np.asarray(out["kernel"]),
                             0.02 * 30.0 / (3e-3 + 1e-8) * 1e-3, rtol=1e-12)


@pytest.mark.parametrize("lars,mask,match", [
    (dict(trust_ratio="larc"), "kernels", "momentum_buffer='gradients'"),
    (dict(clip=True, momentum_buffer="gradients"), "kernels",
     "clip needs trust_ratio 'larc'"),
    (dict(trust_ratio="larcs", momentum_buffer="gradients"), "kernels",
     "unknown lars.trust_ratio"),
    (dict(momentum_buffer="gradients"), "all", "trust_ratio='larc'"),
    (dict(trust_ratio="larc", momentum_buffer="gradients"), "no_bias_norm",
     "no_bias_norm")])
def test_bad_larc_settings(lars, mask, match):
  optim = _optim(name="lars", weight_decay_mask=mask,
                 lars=dict(momentum=0.9, trust_coefficient=1e-3, **lars))
  with pytest.raises(ValueError, match=match):
    optimizers.create_optimizer(optim, 0.1)


@pytest.mark.parametrize("name", ["lars", "adamw"])
def test_bias_norm_lr_factor_is_barlow_twins_groups(x64, name):
  rng = np.random.default_rng(7)
  params = jax.tree.map(jnp.asarray, _params(rng))
  grads = [jax.tree.map(lambda a: jnp.asarray(rng.normal(size=a.shape)),
                        params) for _ in range(5)]
  lrs = [0.0, 0.1, 0.2, 0.15, 0.05]
  schedule = lambda count: jnp.asarray(lrs)[count]
  factor = 0.0048 / 0.2
  lars = dict(momentum=0.9, trust_coefficient=1e-3,
              momentum_buffer="gradients")
  got = _flat(_run(optimizers.create_optimizer(
      _optim(name=name, weight_decay=0.01, bias_norm_lr_factor=factor,
             lars=lars), schedule), params, grads))
  one = _flat(_run(optimizers.create_optimizer(
      _optim(name=name, weight_decay=0.01, lars=lars), schedule),
      params, grads))
  start = _flat(params)
  for k in got:
    if start[k].ndim > 1:  # the weights' steps are unchanged
      np.testing.assert_allclose(got[k], one[k], rtol=1e-13, atol=1e-15)
    else:  # the others' whole move is scaled
      np.testing.assert_allclose(got[k] - start[k],
                                 factor * (one[k] - start[k]), rtol=1e-10)
  if name == "lars":
    want = _moco_lars(start, [_flat(g) for g in grads], lrs, 0.01,
                      bias_lr_factor=factor)
    for k in got:
      np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-14)


def test_bias_norm_lr_factor_must_be_positive():
  with pytest.raises(ValueError, match="bias_norm_lr_factor must be > 0"):
    optimizers.create_optimizer(_optim(bias_norm_lr_factor=0.0), 0.1)


def _torch_sgd(params, grads_per_step, lrs, wd, momentum=0.9):
  """torch.optim.SGD.step (dampening 0, no Nesterov) on every parameter:
  d_p = g + wd·p, buf = momentum·buf + d_p (buf = d_p at the first step),
  p -= lr·buf."""
  params = {k: v.copy() for k, v in params.items()}
  buf = {}
  for grads, lr in zip(grads_per_step, lrs):
    for k, p in params.items():
      dp = grads[k] + wd * p
      buf[k] = momentum * buf[k] + dp if k in buf else dp
      params[k] = p - lr * buf[k]
  return params


def test_sgd_is_torchs(x64):
  rng = np.random.default_rng(9)
  params = jax.tree.map(jnp.asarray, _params(rng))
  grads = [jax.tree.map(lambda a: jnp.asarray(rng.normal(size=a.shape)),
                        params) for _ in range(5)]
  lrs = [0.05, 0.05, 0.04, 0.04, 0.01]
  tx = optimizers.create_optimizer(
      _optim(name="sgd", weight_decay=1e-4, weight_decay_mask="all",
             sgd=dict(momentum=0.9)), lambda k: jnp.asarray(lrs)[k])
  got = _flat(_run(tx, params, grads))
  want = _torch_sgd(_flat(params), [_flat(g) for g in grads], lrs, 1e-4)
  for k in got:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-14)


def test_epoch_schedule_is_simsiams(x64):
  import math  # pylint: disable=import-outside-toplevel
  optim = _optim(learning_rate=0.05, warmup_epochs=0.0, end_lr_factor=0.0,
                 schedule_unit="epoch")
  fn = optimizers.create_learning_rate_fn(optim, 512, 7, 28)
  init_lr = 0.05 * 512 / 256
  for k in range(28):  # main_simsiam.py's adjust_learning_rate, 4 epochs
    want = init_lr * 0.5 * (1.0 + math.cos(math.pi * (k // 7) / 4))
    assert float(fn(k)) == pytest.approx(want, rel=1e-12, abs=1e-15)
  # Per step, the rate moves within an epoch.
  step = optimizers.create_learning_rate_fn(
      _optim(learning_rate=0.05, warmup_epochs=0.0, end_lr_factor=0.0),
      512, 7, 28)
  assert float(step(3)) < float(fn(3))


def test_unknown_schedule_unit():
  with pytest.raises(ValueError, match="unknown optim.schedule_unit"):
    optimizers.create_learning_rate_fn(_optim(schedule_unit="batch"), 256,
                                       10, 100)


def test_unknown_lars_momentum_buffer():
  with pytest.raises(ValueError, match="unknown lars.momentum_buffer"):
    optimizers.create_optimizer(
        _optim(name="lars", lars=dict(momentum=0.9, trust_coefficient=1e-3,
                                      momentum_buffer="mu")), 0.1)


def test_learning_rate_is_float64_under_x64(x64):
  import math  # pylint: disable=import-outside-toplevel
  optim = _optim(learning_rate=0.6, warmup_epochs=1.0, end_lr_factor=0.0)
  fn = optimizers.create_learning_rate_fn(optim, 16, 5, 20)
  peak = 0.6 * 16 / 256
  for k in range(20):  # main_moco.py's adjust_learning_rate, epochs of 5
    epoch = k / 5
    want = (peak * epoch if epoch < 1 else
            peak * 0.5 * (1 + math.cos(math.pi * (epoch - 1) / 3)))
    got = jax.jit(fn)(jnp.asarray(k, jnp.int32))
    assert got.dtype == jnp.float64
    assert abs(float(got) - want) <= 4e-16 * peak  # float64 rounding


# ------------------------------------------------ DINOv2's optimiser step --

def _dinov2_tree(rng, scale=1.0):
  return {"encoder": {"block": {"kernel": rng.normal(size=(4, 3)) * scale,
                                "bias": rng.normal(size=(3,)) * scale},
                      "norm": {"scale": rng.normal(size=(3,)) * scale,
                               "bias": rng.normal(size=(3,)) * scale},
                      "cls_token": rng.normal(size=(1, 1, 3)) * scale},
          "projector": {"Dense_0": {"kernel": rng.normal(size=(3, 5)) * scale,
                                    "bias": rng.normal(size=(5,)) * scale},
                        "last_layer_v": rng.normal(size=(5, 6)) * scale,
                        "last_layer_g": rng.normal(size=(6,)) * scale}}


def _dinov2_official_step(params, grads_per_step, lr, wd, frozen_steps,
                          clip, lr_multiplier=lambda module, name: 1.0):
  """DINOv2's train.py loop on a {module: {name: array}} tree, per
  parameter as torch.optim.AdamW runs it: ``clip_grad_norm_(clip)`` on each
  student module (coefficient clip / (norm + 1e-6), at most 1), then
  ``apply_optim_scheduler``: the learning rate of a name holding
  "last_layer" is ``last_layer_lr``, 0 for the first ``frozen_steps``, and
  the weight decay is 0 for a name ending in ".bias" or holding "norm"
  (get_params_groups_with_decay). Every parameter has a gradient, so every
  step counts for Adam."""
  b1, b2, eps = 0.9, 0.999, 1e-8
  p = {m: {k: v.copy() for k, v in t.items()} for m, t in params.items()}
  state = {m: {k: dict(step=0, m=np.zeros_like(v), v=np.zeros_like(v))
               for k, v in t.items()} for m, t in params.items()}
  for t, grads in enumerate(grads_per_step):
    for module, g_mod in grads.items():
      norm = np.sqrt(sum(np.sum(g ** 2) for g in g_mod.values()))
      coef = min(clip / (norm + 1e-6), 1.0)
      for name in p[module]:
        g = g_mod[name] * coef
        s = state[module][name]
        is_last = "last_layer" in name
        step_lr = (0.0 if is_last and t < frozen_steps else lr
                   ) * lr_multiplier(module, name)
        decay = 0.0 if name.endswith(".bias") or "norm" in name else wd
        s["step"] += 1
        p[module][name] = p[module][name] * (1 - step_lr * decay)
        s["m"] = b1 * s["m"] + (1 - b1) * g
        s["v"] = b2 * s["v"] + (1 - b2) * g * g
        m_hat = s["m"] / (1 - b1 ** s["step"])
        v_hat = s["v"] / (1 - b2 ** s["step"])
        p[module][name] = p[module][name] - step_lr * m_hat / (
            np.sqrt(v_hat) + eps)
  return p


def _by_module(tree):
  """{module: {"a.b.c": array}}: the official code's dotted names."""
  return {m: {".".join(str(getattr(k, "key", k)) for k in path): np.asarray(v)
              for path, v in jax.tree_util.tree_leaves_with_path(t)}
          for m, t in tree.items()}


def test_dinov2_optimizer_is_the_official_step(x64):
  rng = np.random.default_rng(7)
  params = jax.tree.map(jnp.asarray, _dinov2_tree(rng))
  # Large encoder gradients (clipped), small head gradients (kept).
  grads = [{"encoder": jax.tree.map(jnp.asarray, _dinov2_tree(rng, 5.0)
                                    )["encoder"],
            "projector": jax.tree.map(jnp.asarray, _dinov2_tree(rng, 0.05)
                                      )["projector"]} for _ in range(7)]
  lr, wd, frozen_steps, clip = 0.01, 0.1, 3, 3.0
  optim = _optim(learning_rate=lr, weight_decay=wd, clip_grad_norm=clip,
                 clip_mode="per_module", freeze_last_layer_epochs=1.0,
                 freeze_last_layer_by="learning_rate",
                 weight_decay_mask="no_bias_norm")
  tx = optimizers.create_optimizer(optim, lr, steps_per_epoch=frozen_steps)
  got = _by_module(_run(tx, params, grads))
  want = _dinov2_official_step(_by_module(params),
                               [_by_module(g) for g in grads], lr, wd,
                               frozen_steps, clip)
  for module in want:
    for name in want[module]:
      np.testing.assert_allclose(got[module][name], want[module][name],
                                 rtol=1e-12, atol=1e-14, err_msg=name)
  start = _by_module(params)
  frozen = _by_module(_run(tx, params, grads[:frozen_steps]))
  for name in ("last_layer_v", "last_layer_g"):  # not moved while frozen
    np.testing.assert_array_equal(frozen["projector"][name],
                                  start["projector"][name])

  # Each option is seen: DINO's cancelled gradients (moments start at the
  # thaw), per-tensor clipping, the kernels-only decay (g not decayed).
  for change in (dict(freeze_last_layer_by="gradient"),
                 dict(clip_mode="per_tensor"), dict(clip_mode="global"),
                 dict(weight_decay_mask="kernels")):
    other = _by_module(_run(optimizers.create_optimizer(
        ml_collections.ConfigDict({**optim.to_dict(), **change}), lr,
        steps_per_epoch=frozen_steps), params, grads))
    assert max(np.abs(other[m][n] - want[m][n]).max()
               for m in want for n in want[m]) > 1e-6, change


def _official_vit_lr_decay_rate(name, lr_decay_rate, num_layers):
  """DINOv2's get_vit_lr_decay_rate for a backbone module's parameter
  (``force_is_backbone``: the module has blocks), on the official names."""
  layer_id = num_layers + 1
  if any(k in name for k in ("pos_embed", "patch_embed", "mask_token",
                             "cls_token", "register_tokens")):
    layer_id = 0
  elif "blocks." in name and "residual." not in name:
    layer_id = int(name[name.find("blocks."):].split(".")[1]) + 1
  return lr_decay_rate ** (num_layers + 1 - layer_id)


def _vit_tree(rng, scale=1.0):
  block = lambda: {"attn": {"kernel": rng.normal(size=(3, 3)) * scale,
                            "bias": rng.normal(size=(3,)) * scale},
                   "norm1": {"scale": rng.normal(size=(3,)) * scale}}
  return {"encoder": {"block_0": block(), "block_1": block(),
                      "block_2": block(),
                      "patch_embed": {"kernel": rng.normal(size=(2, 2, 1, 3))
                                      * scale,
                                      "bias": rng.normal(size=(3,)) * scale},
                      "pos_embed": rng.normal(size=(1, 5, 3)) * scale,
                      "cls_token": rng.normal(size=(1, 1, 3)) * scale,
                      "mask_token": rng.normal(size=(1, 1, 3)) * scale,
                      "norm": {"scale": rng.normal(size=(3,)) * scale}},
          "projector": {"Dense_0": {"kernel": rng.normal(size=(3, 5)) * scale},
                        "last_layer_v": rng.normal(size=(5, 6)) * scale}}


def test_layerwise_decay_is_dinov2s_parameter_groups(x64):
  # DINOv2's layer-wise decay (0.9) and patch-embedding multiplier (0.2),
  # on top of its per-module clipping, freeze and decay mask: each
  # parameter group's learning rate (and so its decoupled weight decay)
  # times get_vit_lr_decay_rate's multiplier; the heads' multiplier is 1.
  rng = np.random.default_rng(11)
  params = jax.tree.map(jnp.asarray, _vit_tree(rng))
  grads = [jax.tree.map(jnp.asarray, _vit_tree(rng, 0.5)) for _ in range(6)]
  lr, wd, frozen_steps, clip, decay, embed = 0.01, 0.1, 2, 3.0, 0.9, 0.2
  optim = _optim(learning_rate=lr, weight_decay=wd, clip_grad_norm=clip,
                 clip_mode="per_module", freeze_last_layer_epochs=1.0,
                 freeze_last_layer_by="learning_rate",
                 weight_decay_mask="no_bias_norm", layerwise_decay=decay,
                 patch_embed_lr_mult=embed)

  def multiplier(module, name):
    if module != "encoder":
      return 1.0
    official = name.replace("block_", "blocks.")
    rate = _official_vit_lr_decay_rate(official, decay, num_layers=3)
    return rate * (embed if "patch_embed" in official else 1.0)

  tx = optimizers.create_optimizer(optim, lr, steps_per_epoch=frozen_steps)
  got = _by_module(_run(tx, params, grads))
  want = _dinov2_official_step(_by_module(params),
                               [_by_module(g) for g in grads], lr, wd,
                               frozen_steps, clip, multiplier)
  for module in want:
    for name in want[module]:
      np.testing.assert_allclose(got[module][name], want[module][name],
                                 rtol=1e-12, atol=1e-14, err_msg=name)
  scale = optimizers.layerwise_lr_multipliers(_vit_tree(rng), decay, embed)
  assert scale["encoder"]["block_2"]["attn"]["kernel"] == pytest.approx(0.9)
  assert scale["encoder"]["block_0"]["attn"]["kernel"] == pytest.approx(
      0.9 ** 3)
  assert scale["encoder"]["patch_embed"]["bias"] == pytest.approx(
      0.2 * 0.9 ** 4)
  assert scale["encoder"]["norm"]["scale"] == 1.0
  assert scale["projector"]["last_layer_v"] == 1.0
  # Without the multipliers the step is another one.
  plain = _by_module(_run(optimizers.create_optimizer(
      ml_collections.ConfigDict({**optim.to_dict(), "layerwise_decay": 1.0,
                                 "patch_embed_lr_mult": 1.0}), lr,
      steps_per_epoch=frozen_steps), params, grads))
  assert np.abs(plain["encoder"]["block_0.attn.kernel"]
                - want["encoder"]["block_0.attn.kernel"]).max() > 1e-4


def test_layerwise_decay_errors():
  with pytest.raises(ValueError, match="layerwise_decay must be in"):
    optimizers.create_optimizer(_optim(layerwise_decay=1.5), 0.1)
  with pytest.raises(ValueError, match="need a ViT encoder"):
    optimizers.layerwise_lr_multipliers(_params(np.random.default_rng(0)),
                                        0.9)


def test_module_clipping_and_decay_mask_by_name():
  grads = {"a": {"x": jnp.full((4,), 3.0)}, "b": {"y": jnp.full((1,), 0.5)}}
  out, _ = optimizers.clip_by_module_norm(1.0).update(grads, optax.EmptyState())
  assert float(jnp.linalg.norm(out["a"]["x"])) == pytest.approx(1.0, 1e-5)
  np.testing.assert_array_equal(out["b"]["y"], grads["b"]["y"])  # kept
  single, _ = optimizers.clip_by_module_norm(1.0).update(
      jnp.full((4,), 3.0), optax.EmptyState())  # not a dict: one module
  assert float(jnp.linalg.norm(single)) == pytest.approx(1.0, 1e-5)
  mask = optimizers._no_bias_norm_mask(  # pylint: disable=protected-access
      {"encoder": {"block_0": {"norm1": {"scale": 1, "bias": 1},
                               "fc": {"kernel": 1, "bias": 1}},
                   "LayerNorm_0": {"scale": 1}, "cls_token": 1,
                   "pos_embed": 1},
       "projector": {"last_layer_g": 1, "last_layer_v": 1}})
  assert mask == {"encoder": {"block_0": {"norm1": {"scale": False,
                                                    "bias": False},
                                          "fc": {"kernel": True,
                                                 "bias": False}},
                              "LayerNorm_0": {"scale": False},
                              "cls_token": True, "pos_embed": True},
                  "projector": {"last_layer_g": True, "last_layer_v": True}}


def test_learning_rate_freeze_needs_the_advancing_count():
  with pytest.raises(ValueError, match="needs optim.frozen_adam_count="
                     "'advance'"):
    optimizers.create_optimizer(
        _optim(freeze_last_layer_epochs=1.0, frozen_adam_count="hold",
               freeze_last_layer_by="learning_rate"), 0.1)
  with pytest.raises(ValueError, match="unknown freeze_last_layer_by"):
    optimizers.create_optimizer(
        _optim(freeze_last_layer_epochs=1.0, freeze_last_layer_by="lr"), 0.1)
