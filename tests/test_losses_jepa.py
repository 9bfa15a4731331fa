"""Parity of the I-JEPA and MAE losses and of patchify with the official code.

References are NumPy float64 transcriptions of the official PyTorch code:
I-JEPA's ``forward_target`` (``F.layer_norm`` over the features, no affine,
eps 1e-5; ``apply_masks``; ``repeat_interleave_batch``) and ``loss_fn``
(``F.smooth_l1_loss``, beta 1, mean) from facebookresearch/ijepa
``src/train.py`` and ``src/masks/utils.py``; MAE's ``patchify`` /
``unpatchify`` and ``forward_loss`` from facebookresearch/mae
``models_mae.py`` (NCHW images, ``Tensor.var`` unbiased). Gradients: the
closed-form derivative of the transcription (I-JEPA, MAE w.r.t. pred) and
central finite differences of it (MAE w.r.t. target under norm_pix_loss).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax import losses, models

pytestmark = pytest.mark.usefixtures("x64")

# Worst relative errors seen in float64 (2026-11-25) are printed with -s.
RTOL = 1e-12


# ---------------------------------------------------------------- I-JEPA --
def _np_layer_norm(h, eps=1e-5):
  mean = h.mean(-1, keepdims=True)
  var = ((h - mean) ** 2).mean(-1, keepdims=True)
  return (h - mean) / np.sqrt(var + eps)


def _np_apply_masks(x, masks):
  """cat over masks of gather(x, 1, mask): rows mask-major."""
  return np.concatenate([np.take_along_axis(x, m[..., None], axis=1)
                         for m in masks], axis=0)


def _np_repeat_interleave_batch(x, b, repeat):
  n = len(x) // b
  return np.concatenate([np.concatenate([x[i * b:(i + 1) * b]] * repeat)
                         for i in range(n)])


def _np_smooth_l1(z, h):
  d = np.abs(z - h)
  return np.mean(np.where(d < 1, 0.5 * d * d, d - 0.5))


def _np_smooth_l1_grad(z, h):
  return np.clip(z - h, -1.0, 1.0) / z.size


def _ijepa_case(seed=0, b=3, l=16, d=5, m=4, t=3):
  rng = np.random.default_rng(seed)
  h_full = rng.normal(size=(b, l, d)) * 2.0
  masks_pred = [np.stack([rng.choice(l, t, replace=False) for _ in range(b)])
                for _ in range(m)]
  z = rng.normal(size=(m * b, t, d)) * 1.5
  return h_full, masks_pred, z


def test_ijepa_matches_official_value_and_gradient(capsys):
  h_full, masks_pred, z = _ijepa_case()
  b = len(h_full)
  # Official: LN over the whole output, gather, repeat for nenc = 1 masks.
  target_official = _np_repeat_interleave_batch(
      _np_apply_masks(_np_layer_norm(h_full), masks_pred), b, 1)
  value = _np_smooth_l1(z, target_official)
  grad = _np_smooth_l1_grad(z, target_official)
  # Ours: gather the raw tokens, the layer norm inside the loss.
  raw = _np_apply_masks(h_full, masks_pred)
  ours, (g_pred, g_target) = jax.value_and_grad(losses.ijepa, (0, 1))(
      jnp.asarray(z), jnp.asarray(raw))
  err_v = abs(float(ours) - value) / abs(value)
  err_g = np.max(np.abs(g_pred - grad)) / np.max(np.abs(grad))
  with capsys.disabled():
    print(f"\nijepa vs official train.py: value {err_v:.1e} grad {err_g:.1e}")
  assert err_v < RTOL and err_g < RTOL
  assert np.all(np.asarray(g_target) == 0)  # targets under stop-gradient
  assert ours.dtype == jnp.float64
  # Both sides of the smooth-L1 kink are exercised.
  d = np.abs(z - target_official)
  assert (d < 1).any() and (d > 1).any()


def test_ijepa_padding_equals_the_unpadded_loss():
  h_full, masks_pred, z = _ijepa_case(seed=1)
  raw = _np_apply_masks(h_full, masks_pred)
  pad = lambda x: np.concatenate([x, 7.0 * np.ones_like(x[:, :2])], axis=1)
  valid = np.zeros(pad(z).shape[:2], bool)
  valid[:, :z.shape[1]] = True
  padded = jax.value_and_grad(lambda p: losses.ijepa(p, pad(raw), valid=valid))
  plain = jax.value_and_grad(lambda p: losses.ijepa(p, raw))
  v1, g1 = padded(jnp.asarray(pad(z)))
  v2, g2 = plain(jnp.asarray(z))
  np.testing.assert_allclose(v1, v2, rtol=1e-13)
  np.testing.assert_allclose(g1[:, :z.shape[1]], g2, rtol=1e-13)
  assert np.all(np.asarray(g1[:, z.shape[1]:]) == 0)


def test_ijepa_bf16_inputs_compute_in_float32():
  _, _, z = _ijepa_case(seed=2)
  t = np.random.default_rng(3).normal(size=z.shape)
  lo = losses.ijepa(jnp.asarray(z, jnp.bfloat16), jnp.asarray(t, jnp.bfloat16))
  ref = losses.ijepa(jnp.asarray(z, jnp.bfloat16).astype(jnp.float32),
                     jnp.asarray(t, jnp.bfloat16).astype(jnp.float32))
  assert lo.dtype == jnp.float32
  np.testing.assert_allclose(lo, ref, rtol=1e-6)


def test_ijepa_errors():
  with pytest.raises(ValueError, match="same shape"):
    losses.ijepa(jnp.zeros((2, 3, 4)), jnp.zeros((2, 3, 5)))
  with pytest.raises(ValueError, match=r"\(R, T, D\)"):
    losses.ijepa(jnp.zeros((2, 3)), jnp.zeros((2, 3)))
  with pytest.raises(ValueError, match="valid must be"):
    losses.ijepa(jnp.zeros((2, 3, 4)), jnp.zeros((2, 3, 4)),
                 valid=jnp.ones((2, 4), bool))


# ------------------------------------------------------------------- MAE --
def _np_patchify(imgs_nchw, p):
  n, c, hh, ww = imgs_nchw.shape
  h = w = hh // p
  x = imgs_nchw.reshape(n, c, h, p, w, p)
  x = np.einsum("nchpwq->nhwpqc", x)
  return x.reshape(n, h * w, p * p * c)


def _np_unpatchify(x, p, c):
  h = w = int(round(x.shape[1] ** 0.5))
  x = x.reshape(x.shape[0], h, w, p, p, c)
  x = np.einsum("nhwpqc->nchpwq", x)
  return x.reshape(x.shape[0], c, h * p, h * p)


def _np_mae_loss(target, pred, mask, norm_pix_loss):
  if norm_pix_loss:
    mean = target.mean(-1, keepdims=True)
    var = target.var(-1, keepdims=True, ddof=1)  # torch's Tensor.var
    target = (target - mean) / (var + 1.e-6) ** .5
  loss = ((pred - target) ** 2).mean(-1)
  return (loss * mask).sum() / mask.sum()


@pytest.mark.parametrize("channels", [1, 3])
def test_patchify_matches_official_and_inverts(channels):
  rng = np.random.default_rng(channels)
  imgs = rng.normal(size=(2, channels, 12, 12))
  ours = models.patchify(jnp.asarray(imgs.transpose(0, 2, 3, 1)), 4)
  np.testing.assert_array_equal(ours, _np_patchify(imgs, 4))
  back = models.unpatchify(ours, 4)
  np.testing.assert_array_equal(back, imgs.transpose(0, 2, 3, 1))
  patches = rng.normal(size=(2, 9, 16 * channels))
  np.testing.assert_array_equal(
      models.unpatchify(jnp.asarray(patches), 4),
      _np_unpatchify(patches, 4, channels).transpose(0, 2, 3, 1))
  np.testing.assert_array_equal(
      models.patchify(models.unpatchify(jnp.asarray(patches), 4), 4), patches)


def test_patchify_errors():
  with pytest.raises(ValueError, match="not divisible"):
    models.patchify(jnp.zeros((1, 10, 10, 1)), 4)
  with pytest.raises(ValueError, match="square"):
    models.unpatchify(jnp.zeros((1, 8, 16)), 4)
  with pytest.raises(ValueError, match="divisible"):
    models.unpatchify(jnp.zeros((1, 9, 15)), 4)


def _mae_case(seed=0, b=3, l=9, p=12):
  rng = np.random.default_rng(seed)
  pred = rng.normal(size=(b, l, p))
  target = rng.uniform(size=(b, l, p))
  mask = np.zeros((b, l))
  for i in range(b):
    mask[i, rng.choice(l, 6, replace=False)] = 1
  return pred, target, mask


@pytest.mark.parametrize("norm_pix_loss", [False, True])
def test_mae_matches_official_value_and_gradient(norm_pix_loss, capsys):
  pred, target, mask = _mae_case()
  ref = _np_mae_loss(target, pred, mask, norm_pix_loss)
  fn = lambda p, t: losses.mae(p, t, mask, norm_pix_loss=norm_pix_loss)
  ours, (g_pred, g_target) = jax.value_and_grad(fn, (0, 1))(
      jnp.asarray(pred), jnp.asarray(target))
  t = target
  if norm_pix_loss:
    t = (t - t.mean(-1, keepdims=True)) / np.sqrt(t.var(-1, keepdims=True,
                                                        ddof=1) + 1e-6)
  grad = 2 * (pred - t) / pred.shape[-1] * mask[..., None] / mask.sum()
  # d/d target by central differences of the transcription (float64).
  eps, fd = 1e-6, np.zeros_like(target)
  for idx in np.ndindex(target.shape):
    up, down = target.copy(), target.copy()
    up[idx] += eps
    down[idx] -= eps
    fd[idx] = (_np_mae_loss(up, pred, mask, norm_pix_loss)
               - _np_mae_loss(down, pred, mask, norm_pix_loss)) / (2 * eps)
  err_v = abs(float(ours) - ref) / abs(ref)
  err_g = np.max(np.abs(g_pred - grad)) / np.max(np.abs(grad))
  err_t = np.max(np.abs(g_target - fd)) / np.max(np.abs(fd))
  with capsys.disabled():
    print(f"\nmae(norm_pix_loss={norm_pix_loss}) vs official models_mae.py: "
          f"value {err_v:.1e} grad(pred) {err_g:.1e} grad(target, FD) "
          f"{err_t:.1e}")
  assert err_v < RTOL and err_g < RTOL and err_t < 1e-7


def test_mae_biased_variance_would_differ():
  """The ddof matters: ddof 0 (several ports) moves the loss."""
  pred, target, mask = _mae_case(seed=4, p=4)
  ours = float(losses.mae(pred, target, mask, norm_pix_loss=True))
  t0 = (target - target.mean(-1, keepdims=True)) / np.sqrt(
      target.var(-1, keepdims=True) + 1e-6)
  biased = float(((((pred - t0) ** 2).mean(-1)) * mask).sum() / mask.sum())
  assert abs(ours - _np_mae_loss(target, pred, mask, True)) < 1e-12
  assert abs(ours - biased) > 1e-3


def test_mae_bf16_inputs_and_errors():
  pred, target, mask = _mae_case(seed=5)
  lo = losses.mae(jnp.asarray(pred, jnp.bfloat16),
                  jnp.asarray(target, jnp.bfloat16), mask, norm_pix_loss=True)
  ref = losses.mae(jnp.asarray(pred, jnp.bfloat16).astype(jnp.float32),
                   jnp.asarray(target, jnp.bfloat16).astype(jnp.float32),
                   mask, norm_pix_loss=True)
  assert lo.dtype == jnp.float32
  np.testing.assert_allclose(lo, ref, rtol=1e-6)
  with pytest.raises(ValueError, match="mask must be"):
    losses.mae(pred, target, mask[:, :3], norm_pix_loss=False)
  with pytest.raises(ValueError, match="same shape"):
    losses.mae(pred, target[:, :, :3], mask, norm_pix_loss=False)
