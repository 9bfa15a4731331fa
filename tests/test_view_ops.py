"""ssljax.data.view_ops: the batched, keyed jnp view ops.

Each op is checked against its definition (luma weights, HSV hue shift,
torchvision's blend factors, solarize threshold, Gaussian kernel moments),
the per-row probabilities against binomial bounds, and apply_view for
determinism, jit agreement and the uint8 path.
"""

import functools

import dm_pix as pix
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax.data import view_ops

SIMPLE = dict(jitter_prob=0.8, brightness=0.4, contrast=0.4, grayscale_prob=0.5,
              solarize_prob=0.5, erase_prob=0.5, noise_std=0.02)
BYOL = dict(jitter_prob=0.8, brightness=0.4, contrast=0.4, saturation=0.2,
            hue=0.1, grayscale_prob=0.2, blur_prob=1.0, solarize_prob=0.2)
_BYOL_VIEW = jax.jit(functools.partial(view_ops.apply_view, **BYOL))
_SIMPLE_VIEW = jax.jit(functools.partial(view_ops.apply_view, **SIMPLE))


def _images(b=6, h=8, w=8, c=3, seed=0, lo=0.0, hi=1.0):
  rng = np.random.default_rng(seed)
  return rng.uniform(lo, hi, (b, h, w, c)).astype(np.float32)


def _key(i=0):
  return jax.random.key(i)


def _run(fn, x, key, *args, **kwargs):
  """fn(x, key, *args, **kwargs) under jit (compiling beats eager dispatch)."""
  return jax.jit(lambda a, k: fn(a, k, *args, **kwargs))(x, key)


def _luma(x):
  return 0.299 * x[..., 0] + 0.587 * x[..., 1] + 0.114 * x[..., 2]


def test_grayscale_is_bt601_luma():
  x = _images()
  out = np.asarray(_run(view_ops.grayscale, x, _key(), 1.0))
  for c in range(3):
    np.testing.assert_allclose(out[..., c], _luma(x), atol=1e-6)
  np.testing.assert_array_equal(_run(view_ops.grayscale, x, _key(), 0.0), x)
  one = _images(c=1)
  np.testing.assert_array_equal(
      _run(view_ops.grayscale, one, _key(), 1.0), one)


def test_hsv_round_trip_and_hue_shift():
  x = _images(lo=0.05)
  np.testing.assert_allclose(pix.hsv_to_rgb(pix.rgb_to_hsv(x)), x, atol=1e-5)
  # Saturated colours: one channel 1, one 0, one in between.
  rng = np.random.default_rng(1)
  sat = np.zeros((6, 4, 4, 3), np.float32)
  for idx in np.ndindex(6, 4, 4):
    sat[idx] = rng.permutation([1.0, 0.0, rng.uniform()])
  shift = jnp.linspace(-0.5, 0.5, 6)
  shift_hue = jax.jit(view_ops._shift_hue)  # pylint: disable=protected-access
  back = shift_hue(shift_hue(sat, shift), -shift)
  np.testing.assert_allclose(back, sat, atol=1e-5)
  red = np.zeros((1, 2, 2, 3), np.float32)
  red[..., 0] = 1.0
  green = shift_hue(red, jnp.asarray([1 / 3]))
  np.testing.assert_allclose(green, np.broadcast_to([0, 1, 0], red.shape),
                             atol=1e-5)


def test_hue_jitter_shifts_each_row_by_one_amount_within_range():
  x = _images(b=64, lo=0.1)
  h = 0.1
  out = _run(view_ops.color_jitter, x, _key(3), prob=1.0, hue=h)
  hsv_in, hsv_out = pix.rgb_to_hsv(x), pix.rgb_to_hsv(out)
  # Saturation and value are unchanged; the hue moves by one shift per row.
  np.testing.assert_allclose(hsv_out[..., 1:], hsv_in[..., 1:], atol=1e-5)
  delta = np.asarray((hsv_out[..., 0] - hsv_in[..., 0] + 0.5) % 1.0 - 0.5)
  per_row = delta.reshape(64, -1)
  np.testing.assert_allclose(per_row - per_row[:, :1], 0.0, atol=1e-4)
  assert np.all(np.abs(per_row[:, 0]) <= h + 1e-5)
  assert per_row[:, 0].max() > h / 2 and per_row[:, 0].min() < -h / 2


def test_brightness_scales_each_row_by_a_factor_in_range():
  x = _images(b=200, lo=0.05, hi=0.5)  # no clipping for factors <= 1.9
  b = 0.9
  out = np.asarray(_run(view_ops.color_jitter, x, _key(1), prob=1.0,
                        brightness=b))
  f = (out / x).reshape(200, -1)
  np.testing.assert_allclose(f / f[:, :1], 1.0, rtol=1e-5)
  assert f.min() >= 1 - b - 1e-6 and f.max() <= 1 + b + 1e-6
  assert f.min() < 1 - b / 2 and f.max() > 1 + b / 2


def test_contrast_preserves_the_luma_mean_and_scales_deviations():
  x = _images(b=100, lo=0.4, hi=0.6)  # no clipping for factors <= 1.5
  c = 0.5
  out = np.asarray(_run(view_ops.color_jitter, x, _key(2), prob=1.0,
                        contrast=c))
  mean_in = _luma(x).mean(axis=(1, 2))
  np.testing.assert_allclose(_luma(out).mean(axis=(1, 2)), mean_in, atol=1e-5)
  dev_in = (x - mean_in[:, None, None, None]).reshape(100, -1)
  dev_out = (out - mean_in[:, None, None, None]).reshape(100, -1)
  f = (dev_out * dev_in).sum(1) / (dev_in * dev_in).sum(1)
  np.testing.assert_allclose(dev_out, f[:, None] * dev_in, atol=1e-5)
  assert f.min() >= 1 - c - 1e-5 and f.max() <= 1 + c + 1e-5


def test_saturation_blends_with_luma_and_keeps_luma():
  x = _images(b=100, lo=0.3, hi=0.7)
  s = 0.5
  out = np.asarray(_run(view_ops.color_jitter, x, _key(4), prob=1.0,
                        saturation=s))
  np.testing.assert_allclose(_luma(out), _luma(x), atol=1e-5)
  dev_in = (x - _luma(x)[..., None]).reshape(100, -1)
  dev_out = (out - _luma(x)[..., None]).reshape(100, -1)
  f = (dev_out * dev_in).sum(1) / (dev_in * dev_in).sum(1)
  np.testing.assert_allclose(dev_out, f[:, None] * dev_in, atol=1e-5)
  assert f.min() >= 1 - s - 1e-5 and f.max() <= 1 + s + 1e-5
  assert f.max() - f.min() > s


def test_factor_zero_saturation_gives_grayscale_and_clipping():
  # saturation = 1 allows factor 0 (luma) up to 2 (clipped to [0, 1]).
  x = _images(b=300)
  out = np.asarray(_run(view_ops.color_jitter, x, _key(5), prob=1.0,
                        saturation=1.0, brightness=1.0))
  assert out.min() >= 0.0 and out.max() <= 1.0


def test_saturation_and_hue_are_identity_for_one_channel():
  x = _images(c=1)
  out = _run(view_ops.color_jitter, x, _key(), prob=1.0, saturation=0.5,
             hue=0.3)
  np.testing.assert_array_equal(out, x)


def test_solarize_threshold():
  x = np.asarray([0.5 - 1e-4, 0.5, 0.7, 0.2, 1.0], np.float32)
  x = np.broadcast_to(x[None, None, :, None], (2, 1, 5, 3))
  out = np.asarray(_run(view_ops.solarize, x, _key(), 1.0, threshold=0.5))
  np.testing.assert_allclose(out[0, 0, :, 0],
                             [0.5 - 1e-4, 0.5, 0.3, 0.2, 0.0], atol=1e-7)
  np.testing.assert_array_equal(_run(view_ops.solarize, x, _key(), 0.0), x)


def test_blur_kernel_of_a_delta_has_variance_sigma_squared():
  size = 41
  delta = np.zeros((2, size, size, 1), np.float32)
  delta[:, size // 2, size // 2] = 1.0
  sigma = 1.5
  out = np.asarray(_run(view_ops.gaussian_blur, delta, _key(), prob=1.0,
                        sigma=(sigma, sigma), kernel_fraction=0.5))
  assert view_ops.blur_kernel_size(size, 0.5) == 21
  np.testing.assert_allclose(out.sum(axis=(1, 2, 3)), 1.0, atol=1e-5)
  kernel = out[0, :, :, 0]
  np.testing.assert_allclose(kernel, kernel[::-1], atol=1e-7)
  np.testing.assert_allclose(kernel, kernel.T, atol=1e-7)
  profile = kernel.sum(axis=1)
  t = np.arange(size) - size // 2
  assert abs((profile * t**2).sum() / sigma**2 - 1) < 0.03
  assert np.count_nonzero(profile > 0) == 21


def test_blur_kernel_size_and_reflect_padding():
  assert view_ops.blur_kernel_size(224, 0.1) == 23  # BYOL's 23 px
  assert view_ops.blur_kernel_size(32, 0.1) == 3
  const = np.full((2, 16, 16, 3), 0.3, np.float32)
  out = _run(view_ops.gaussian_blur, const, _key(), prob=1.0)
  np.testing.assert_allclose(out, const, atol=1e-6)  # no dark borders


@pytest.mark.parametrize("prob", [0.2, 0.8])
@pytest.mark.parametrize("op", ["flip", "jitter", "grayscale", "blur",
                                "solarize", "erase"])
def test_fraction_of_changed_rows_matches_prob(op, prob):
  n = 4000
  x = _images(b=n, h=16, w=16, lo=0.1, hi=0.9, seed=7)
  key = _key(11)
  fn = {
      "flip": lambda: _run(view_ops.flip, x, key, prob),
      "jitter": lambda: _run(view_ops.color_jitter, x, key, prob=prob,
                                              brightness=0.4),
      "grayscale": lambda: _run(view_ops.grayscale, x, key, prob),
      "blur": lambda: _run(view_ops.gaussian_blur, x, key, prob=prob,
                                              sigma=(1.0, 2.0)),
      "solarize": lambda: _run(view_ops.solarize, x, key, prob),
      "erase": lambda: _run(view_ops.random_erase, x, key, prob=prob),
  }[op]
  out = np.asarray(fn())
  changed = np.any(np.abs(out - x) > 1e-6, axis=(1, 2, 3)).mean()
  assert abs(changed - prob) < 4 * np.sqrt(prob * (1 - prob) / n)


def test_erase_boxes_have_the_area_fraction_in_scale():
  x = _images(b=500, h=32, w=32, lo=0.1)
  out = np.asarray(_run(view_ops.random_erase, x, _key(), prob=1.0,
                                         scale=(0.05, 0.2)))
  frac = (out == 0).all(axis=3).mean(axis=(1, 2))
  assert frac.min() > 0.01 and frac.max() < 0.26
  assert 0.08 < frac.mean() < 0.15  # box clipping lowers the 0.125 mean


def test_gaussian_noise_moments():
  x = np.full((8, 32, 32, 3), 0.5, np.float32)
  np.testing.assert_array_equal(
      _run(view_ops.gaussian_noise, x, _key(), 0.0), x)
  out = np.asarray(_run(view_ops.gaussian_noise, x, _key(), 0.05))
  assert abs(out.mean() - 0.5) < 0.002 and abs(out.std() - 0.05) < 0.002


def test_normalize_and_to_float():
  x = _images()
  out = view_ops.normalize(x, (0.1, 0.2, 0.3), (0.5, 0.25, 2.0))
  np.testing.assert_allclose(out[..., 1], (x[..., 1] - 0.2) / 0.25, rtol=1e-6)
  u8 = (x * 255).astype(np.uint8)
  np.testing.assert_allclose(view_ops.to_float(u8), u8 / 255.0, atol=1e-7)
  assert view_ops.to_float(x.astype(np.float16)).dtype == jnp.float32


def test_uint8_input_equals_float_path():
  u8 = (_images(b=16, h=16, w=16, seed=3) * 255).astype(np.uint8)
  np.testing.assert_allclose(_SIMPLE_VIEW(u8, _key(2)),
                             _SIMPLE_VIEW(u8.astype(np.float32) / 255, _key(2)),
                             atol=1e-6)


def test_apply_view_is_deterministic_and_jit_agrees():
  x = _images(b=16, h=16, w=16, seed=4)
  a, b = _BYOL_VIEW(x, _key(1)), _BYOL_VIEW(x, _key(1))
  c = _BYOL_VIEW(x, _key(2))
  np.testing.assert_array_equal(a, b)
  assert np.abs(np.asarray(a) - np.asarray(c)).max() > 0.1
  assert np.asarray(a).min() >= 0.0 and np.asarray(a).max() <= 1.0
  # Eager (op-by-op) agrees with jit; a recipe without hue and blur keeps the
  # eager dispatch fast.
  np.testing.assert_allclose(view_ops.apply_view(x, _key(1), **SIMPLE),
                             _SIMPLE_VIEW(x, _key(1)), atol=1e-6)


def test_apply_view_ops_have_independent_keys():
  """Enabling solarize (op 4) leaves the other ops' draws unchanged."""
  x = _images(b=16, h=16, w=16, seed=5)
  key = _key(9)
  base = view_ops.apply_view(x, key, grayscale_prob=0.5)
  more = view_ops.apply_view(x, key, grayscale_prob=0.5, solarize_prob=1.0)
  expected = _run(view_ops.solarize, base, jax.random.fold_in(key, 4), 1.0)
  np.testing.assert_allclose(more, expected, atol=1e-6)


def test_view_op_options_are_apply_view_defaults():
  assert view_ops.VIEW_OP_OPTIONS["flip_prob"] == 0.5
  assert view_ops.VIEW_OP_OPTIONS["blur_sigma"] == (0.1, 2.0)
  assert len(view_ops.VIEW_OP_OPTIONS) == 15
  x = _images()
  np.testing.assert_array_equal(
      view_ops.apply_view(x, _key(), **view_ops.VIEW_OP_OPTIONS),
      _run(view_ops.flip, x, jax.random.fold_in(_key(), 0), 0.5))


@pytest.mark.parametrize("call, name", [
    (lambda x: view_ops.flip(x, _key(), 1.5), "prob"),
    (lambda x: view_ops.color_jitter(x, _key(), prob=0.5, hue=0.7), "hue"),
    (lambda x: view_ops.color_jitter(x, _key(), prob=0.5, contrast=-0.1),
     "contrast"),
    (lambda x: view_ops.color_jitter(x, _key(), prob=-0.1), "prob"),
    (lambda x: view_ops.grayscale(x, _key(), 2.0), "prob"),
    (lambda x: view_ops.gaussian_blur(x, _key(), prob=0.5, sigma=(2.0, 1.0)),
     "sigma"),
    (lambda x: view_ops.gaussian_blur(x, _key(), prob=0.5, sigma=(0.0, 1.0)),
     "sigma"),
    (lambda x: view_ops.gaussian_blur(x, _key(), prob=0.5,
                                      kernel_fraction=0.0), "kernel_fraction"),
    (lambda x: view_ops.solarize(x, _key(), 0.5, threshold=1.5), "threshold"),
    (lambda x: view_ops.random_erase(x, _key(), prob=0.5, scale=(0.3, 0.1)),
     "scale"),
    (lambda x: view_ops.random_erase(x, _key(), prob=0.5, ratio=(0.0, 1.0)),
     "ratio"),
    (lambda x: view_ops.gaussian_noise(x, _key(), -1.0), "std"),
    (lambda x: view_ops.normalize(x, (0.5,), (0.5,)), "mean"),
    (lambda x: view_ops.normalize(x, (0.5,) * 3, (0.5, 0.0, 1.0)), "std"),
    (lambda x: view_ops.apply_view(x, _key(), hue=0.6, jitter_prob=0.5),
     "hue"),
    (lambda x: view_ops.flip(x[0], _key()), "images"),
    (lambda x: view_ops.grayscale(x[..., :2], _key(), 0.5), "images"),
    (lambda x: view_ops.to_float(x.astype(np.int32)), "images"),
])
def test_bad_arguments_raise_value_error_naming_them(call, name):
  with pytest.raises(ValueError, match=f"^{name} "):
    call(_images())
