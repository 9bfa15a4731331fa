"""Batched, keyed image view ops in jax.numpy, to run inside the jitted step.

Rows are samples: a batch is float32 (B, H, W, C) in [0, 1] with C = 1 or 3.
Every op is vectorised over the batch and every random draw is keyed by an
explicit ``jax.random`` key, with the batch axis leading the draw's shape
(``jax.random.uniform(key, (B, n))``), so that under a sharded jit on a
global array a row's draws do not depend on the number of devices. A view
is a pure function of (images, key). Argument checks run at trace time on
Python values and raise ValueError naming the argument.

Ops and order after SimCLR (Chen et al. 2020, arXiv 2002.05709, App. A),
BYOL (Grill et al. 2020, arXiv 2006.07733, Table 6) and VICReg (Bardes et
al. 2022, arXiv 2105.04906); colour jitter with torchvision's ColorJitter
definitions; luma after ITU-R BT.601; random erasing after Zhong et al. 2020
(arXiv 1708.04896).
"""

import inspect
import math

import dm_pix as pix
import jax
import jax.numpy as jnp

__all__ = ["VIEW_OP_OPTIONS", "apply_view", "blur_kernel_size",
           "color_jitter", "flip", "gaussian_blur", "gaussian_noise",
           "grayscale", "normalize", "random_erase", "solarize", "to_float"]

LUMA_WEIGHTS = (0.299, 0.587, 0.114)  # ITU-R BT.601 luma of R, G, B.


def _check(images, probs=(), nonnegative=()):
  """ValueError on a bad image shape, probability or negative strength."""
  shape = jnp.shape(images)
  if len(shape) != 4 or shape[-1] not in (1, 3):
    raise ValueError(
        f"images must be (B, H, W, C) with C in (1, 3), got shape {shape}")
  for name, value in probs:
    if not 0 <= value <= 1:
      raise ValueError(f"{name} must be in [0, 1], got {value}")
  for name, value in nonnegative:
    if not value >= 0:
      raise ValueError(f"{name} must be >= 0, got {value}")


def _check_range(name, value, upper=None):
  lo, hi = value
  if not (0 < lo <= hi and (upper is None or hi <= upper)):
    bound = "" if upper is None else f" <= {upper}"
    raise ValueError(f"{name} must satisfy 0 < min <= max{bound}, got {value}")


def _rows(mask):
  """(B,) boolean -> (B, 1, 1, 1), to select whole rows with jnp.where."""
  return mask[:, None, None, None]


def _luma(images):
  """(B, H, W, 1) ITU-R BT.601 luma of RGB rows; C = 1 rows unchanged."""
  if images.shape[-1] == 1:
    return images
  return jnp.tensordot(images, jnp.asarray(LUMA_WEIGHTS, images.dtype),
                       axes=1)[..., None]


def to_float(images):
  """Images as float32 in [0, 1].

  Args:
    images: (B, H, W, C) uint8 in [0, 255] (divided by 255) or floating (cast
      to float32, values unchanged).

  Returns:
    float32 array of the same shape.

  Raises:
    ValueError: images of another dtype, not of rank 4 or C not in (1, 3).
  """
  _check(images)
  images = jnp.asarray(images)
  if images.dtype == jnp.uint8:
    return images.astype(jnp.float32) / 255.0
  if not jnp.issubdtype(images.dtype, jnp.floating):
    raise ValueError(f"images must be uint8 or floating, got {images.dtype}")
  return images.astype(jnp.float32)


def flip(images, key, prob=0.5):
  """Mirrors each row left-right with probability ``prob``.

  SimCLR (Chen et al. 2020, arXiv 2002.05709, App. A) and BYOL (Grill et al.
  2020, arXiv 2006.07733, Table 6) flip with probability 1/2.

  Args:
    images: float (B, H, W, C), C in (1, 3).
    key: jax.random key.
    prob: flip probability, in [0, 1].

  Returns:
    float32 (B, H, W, C), values unchanged (permuted within rows).

  Raises:
    ValueError: prob outside [0, 1], bad image shape.
  """
  _check(images, [("prob", prob)])
  images = jnp.asarray(images, jnp.float32)
  if prob == 0:
    return images
  mirrored = jax.random.uniform(key, (images.shape[0],)) < prob
  return jnp.where(_rows(mirrored), images[:, :, ::-1], images)


def _blend(images, target, factor):
  """torchvision's _blend: clip(f * img + (1 - f) * target, 0, 1)."""
  factor = _rows(factor)
  return jnp.clip(factor * images + (1.0 - factor) * target, 0.0, 1.0)


def _shift_hue(images, shift):
  """Adds ``shift`` (B,) to the HSV hue (mod 1) of RGB rows."""
  hsv = pix.rgb_to_hsv(images)
  hue = jnp.mod(hsv[..., 0] + shift[:, None, None], 1.0)
  rgb = pix.hsv_to_rgb(jnp.concatenate([hue[..., None], hsv[..., 1:]], -1))
  return jnp.clip(rgb, 0.0, 1.0)


def color_jitter(images, key, *, prob, brightness=0.0, contrast=0.0,
                 saturation=0.0, hue=0.0):
  """torchvision's ColorJitter, per row, in a random order per row.

  With probability ``prob`` a row gets the enabled adjustments (strength >
  0) in an order drawn per row, each clipped to [0, 1] (torchvision's
  ``_blend``): brightness ``f * img`` with f uniform in [max(0, 1 - b),
  1 + b]; contrast ``f * img + (1 - f) * mean(luma(img))`` with f in
  [max(0, 1 - c), 1 + c]; saturation ``f * img + (1 - f) * luma(img)`` with
  f in [max(0, 1 - s), 1 + s]; hue: a shift uniform in [-h, h] added to the
  HSV hue, mod 1 (in turns). Luma after ITU-R BT.601. For C = 1, saturation
  and hue are the identity. SimCLR (Chen et al. 2020, arXiv 2002.05709,
  App. A) uses p = 0.8 with (0.8 s, 0.8 s, 0.8 s, 0.2 s); BYOL (Grill et al.
  2020, arXiv 2006.07733, Table 6) p = 0.8 with (0.4, 0.4, 0.2, 0.1).

  Args:
    images: float (B, H, W, C) in [0, 1], C in (1, 3).
    key: jax.random key.
    prob: probability of jittering a row, in [0, 1].
    brightness, contrast, saturation: strengths, >= 0 (0 skips the op).
    hue: strength in [0, 0.5] (0 skips the op).

  Returns:
    float32 (B, H, W, C) in [0, 1].

  Raises:
    ValueError: prob outside [0, 1], negative strengths, hue outside
      [0, 0.5], bad image shape.
  """
  _check(images, [("prob", prob)], [("brightness", brightness),
                   ("contrast", contrast), ("saturation", saturation)])
  if not 0 <= hue <= 0.5:
    raise ValueError(f"hue must be in [0, 0.5], got {hue}")
  images = jnp.asarray(images, jnp.float32)
  rgb = images.shape[-1] == 3  # Saturation and hue: identity for C = 1.
  strengths = (brightness, contrast, saturation * rgb, hue * rgb)
  enabled = [i for i, s in enumerate(strengths) if s > 0]
  if prob == 0 or not enabled:
    return images
  u = jax.random.uniform(key, (images.shape[0], 9))
  apply = u[:, 0] < prob
  lows = jnp.asarray([max(0.0, 1.0 - s) for s in strengths[:3]])
  factors = lows + (1.0 + jnp.asarray(strengths[:3]) - lows) * u[:, 1:4]
  shift = hue * (2.0 * u[:, 4] - 1.0)  # (B,)
  # A random order of the enabled ops per row, as op ids (B, n).
  op_ids = jnp.asarray(enabled)[jnp.argsort(u[:, 5:9][:, enabled], axis=1)]
  out = images
  for step in range(len(enabled)):
    op = op_ids[:, step]
    new = out  # Blend ops 0-2 share one computation, selected by target.
    if any(i < 3 for i in enabled):
      luma = _luma(out)
      mean = jnp.mean(luma, axis=(1, 2, 3), keepdims=True)
      target = jnp.where(_rows(op == 0), 0.0,
                         jnp.where(_rows(op == 1), mean, luma))
      factor = jnp.take_along_axis(factors, jnp.minimum(op, 2)[:, None],
                                   axis=1)[:, 0]
      new = _blend(out, target, factor)
    if 3 in enabled:
      new = jnp.where(_rows(op == 3), _shift_hue(out, shift), new)
    out = new
  return jnp.where(_rows(apply), out, images)


def grayscale(images, key, prob):
  """Replaces rows by their luma with probability ``prob``.

  L = 0.299 R + 0.587 G + 0.114 B (ITU-R BT.601), replicated over the three
  channels; C = 1 images are returned unchanged. SimCLR (Chen et al. 2020,
  arXiv 2002.05709, App. A) and BYOL (Grill et al. 2020, arXiv 2006.07733,
  Table 6) use p = 0.2.

  Args:
    images: float (B, H, W, C) in [0, 1], C in (1, 3).
    key: jax.random key.
    prob: probability per row, in [0, 1].

  Returns:
    float32 (B, H, W, C) in [0, 1].

  Raises:
    ValueError: prob outside [0, 1], bad image shape.
  """
  _check(images, [("prob", prob)])
  images = jnp.asarray(images, jnp.float32)
  if prob == 0 or images.shape[-1] == 1:
    return images
  gray = jax.random.uniform(key, (images.shape[0],)) < prob
  luma = jnp.broadcast_to(_luma(images), images.shape)
  return jnp.where(_rows(gray), luma, images)


def blur_kernel_size(height, kernel_fraction):
  """The odd integer nearest ``kernel_fraction * height``, at least 3."""
  return max(3, 2 * math.floor((kernel_fraction * height - 1) / 2 + 0.5) + 1)


def _blur_axis(images, weights, axis):
  """Per-row 1-D convolution along ``axis`` (1 or 2), reflect padding."""
  size = weights.shape[1]
  radius, length = size // 2, images.shape[axis]
  pad = [(radius, radius) if a == axis else (0, 0) for a in range(4)]
  padded = jnp.pad(images, pad, mode="reflect")
  return sum(weights[:, i, None, None, None]
             * jax.lax.slice_in_dim(padded, i, i + length, axis=axis)
             for i in range(size))


def gaussian_blur(images, key, *, prob, sigma=(0.1, 2.0),
                  kernel_fraction=0.1):
  """Separable Gaussian blur of each row with probability ``prob``.

  σ is uniform in ``sigma`` per row; the kernel has the odd size nearest
  ``kernel_fraction * H`` (at least 3), taps exp(-t² / 2σ²) at integer
  offsets t normalised to sum 1, and reflect padding (torchvision's
  GaussianBlur). SimCLR (Chen et al. 2020, arXiv 2002.05709, App. A): 10 %
  kernel, σ in [0.1, 2.0], p = 0.5; BYOL (Grill et al. 2020, arXiv
  2006.07733, Table 6): 23 px at 224, p = 1.0 and 0.1 for the two views.

  Args:
    images: float (B, H, W, C) in [0, 1], C in (1, 3).
    key: jax.random key.
    prob: probability per row, in [0, 1].
    sigma: (min, max) standard deviation in pixels, 0 < min <= max.
    kernel_fraction: kernel size as a fraction of H, > 0.

  Returns:
    float32 (B, H, W, C) in [0, 1].

  Raises:
    ValueError: prob outside [0, 1], bad sigma range, kernel_fraction <= 0,
      bad image shape.
  """
  _check(images, [("prob", prob)])
  _check_range("sigma", sigma)
  if not kernel_fraction > 0:
    raise ValueError(f"kernel_fraction must be > 0, got {kernel_fraction}")
  images = jnp.asarray(images, jnp.float32)
  if prob == 0:
    return images
  size = blur_kernel_size(images.shape[1], kernel_fraction)
  u = jax.random.uniform(key, (images.shape[0], 2))
  blur = u[:, 0] < prob
  sig = sigma[0] + (sigma[1] - sigma[0]) * u[:, 1]
  taps = jnp.arange(size, dtype=jnp.float32) - size // 2
  weights = jnp.exp(-0.5 * (taps[None, :] / sig[:, None]) ** 2)
  weights = weights / jnp.sum(weights, axis=1, keepdims=True)  # (B, size)
  blurred = _blur_axis(_blur_axis(images, weights, 1), weights, 2)
  return jnp.where(_rows(blur), blurred, images)


def solarize(images, key, prob, threshold=0.5):
  """Inverts pixels >= ``threshold`` (x -> 1 - x) with probability ``prob``.

  BYOL (Grill et al. 2020, arXiv 2006.07733, Table 6): p = 0 and 0.2 for the
  two views, threshold 0.5.

  Args:
    images: float (B, H, W, C) in [0, 1], C in (1, 3).
    key: jax.random key.
    prob: probability per row, in [0, 1].
    threshold: in [0, 1].

  Returns:
    float32 (B, H, W, C) in [0, 1].

  Raises:
    ValueError: prob or threshold outside [0, 1], bad image shape.
  """
  _check(images, [("prob", prob), ("threshold", threshold)])
  images = jnp.asarray(images, jnp.float32)
  if prob == 0:
    return images
  apply = jax.random.uniform(key, (images.shape[0],)) < prob
  inverted = jnp.where(images >= threshold, 1.0 - images, images)
  return jnp.where(_rows(apply), inverted, images)


def random_erase(images, key, *, prob, scale=(0.02, 0.2), ratio=(0.3, 3.3)):
  """Sets a random box of each row to 0 with probability ``prob``.

  Random erasing (Zhong et al. 2020, arXiv 1708.04896): the box has area
  fraction uniform in ``scale``, aspect ratio h / w log-uniform in
  ``ratio``, sides clipped to the image, and a uniform position; a pixel is
  erased when its centre lies in the box.

  Args:
    images: float (B, H, W, C), C in (1, 3).
    key: jax.random key.
    prob: probability per row, in [0, 1].
    scale: (min, max) area fraction, 0 < min <= max <= 1.
    ratio: (min, max) aspect ratio, 0 < min <= max.

  Returns:
    float32 (B, H, W, C).

  Raises:
    ValueError: prob outside [0, 1], bad scale or ratio, bad image shape.
  """
  _check(images, [("prob", prob)])
  _check_range("scale", scale, upper=1)
  _check_range("ratio", ratio)
  images = jnp.asarray(images, jnp.float32)
  if prob == 0:
    return images
  height, width = images.shape[1:3]
  u = jax.random.uniform(key, (images.shape[0], 5))
  area = (scale[0] + (scale[1] - scale[0]) * u[:, 1]) * height * width
  log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
  aspect = jnp.exp(log_lo + (log_hi - log_lo) * u[:, 2])  # height / width
  box_h = jnp.minimum(jnp.sqrt(area * aspect), height)
  box_w = jnp.minimum(jnp.sqrt(area / aspect), width)
  y0 = (height - box_h) * u[:, 3]
  x0 = (width - box_w) * u[:, 4]
  ys = jnp.arange(height)[None, :] + 0.5  # pixel centres, (1, H)
  xs = jnp.arange(width)[None, :] + 0.5
  in_y = (ys >= y0[:, None]) & (ys < (y0 + box_h)[:, None])  # (B, H)
  in_x = (xs >= x0[:, None]) & (xs < (x0 + box_w)[:, None])  # (B, W)
  box = in_y[:, :, None, None] & in_x[:, None, :, None] & _rows(u[:, 0] < prob)
  return jnp.where(box, 0.0, images)


def gaussian_noise(images, key, std):
  """Adds N(0, std²) noise per pixel and clips to [0, 1].

  Args:
    images: float (B, H, W, C) in [0, 1], C in (1, 3).
    key: jax.random key.
    std: noise standard deviation, >= 0 (0 returns the images).

  Returns:
    float32 (B, H, W, C) in [0, 1].

  Raises:
    ValueError: negative std, bad image shape.
  """
  _check(images, nonnegative=[("std", std)])
  images = jnp.asarray(images, jnp.float32)
  if std == 0:
    return images
  return jnp.clip(images + std * jax.random.normal(key, images.shape), 0.0, 1.0)


def normalize(images, mean, std):
  """Per-channel standardisation (x - mean) / std.

  Args:
    images: float (B, H, W, C), C in (1, 3).
    mean: sequence of C floats.
    std: sequence of C floats, each > 0.

  Returns:
    float32 (B, H, W, C).

  Raises:
    ValueError: mean or std not of length C, std <= 0, bad image shape.
  """
  _check(images)
  channels = jnp.shape(images)[-1]
  for name, value in (("mean", mean), ("std", std)):
    if len(value) != channels:
      raise ValueError(f"{name} must have length C = {channels}, got {value}")
  if not all(s > 0 for s in std):
    raise ValueError(f"std must be > 0, got {std}")
  return ((jnp.asarray(images, jnp.float32) - jnp.asarray(mean, jnp.float32))
          / jnp.asarray(std, jnp.float32))


def apply_view(images, key, *, flip_prob=0.5, jitter_prob=0.0,
               brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0,
               grayscale_prob=0.0, blur_prob=0.0, blur_sigma=(0.1, 2.0),
               blur_kernel_fraction=0.1, solarize_prob=0.0,
               solarize_threshold=0.5, erase_prob=0.0,
               erase_scale=(0.02, 0.2), noise_std=0.0):
  """One view of a batch: the SimCLR/BYOL/VICReg ops after the crop.

  Order: to_float, flip, color_jitter, grayscale, gaussian_blur, solarize,
  random_erase, gaussian_noise (SimCLR, Chen et al. 2020, arXiv 2002.05709,
  App. A; BYOL, Grill et al. 2020, arXiv 2006.07733, Table 6). Op i draws
  with ``jax.random.fold_in(key, i)`` (i = 0 for flip ... 6 for noise), so
  adding an op later leaves the others' draws unchanged. Ops whose
  probability or strength is 0 are skipped (no compute). The options are
  Python values, static under jit (e.g. ``jax.jit(functools.partial(
  apply_view, **options))``); the output is a pure function of (images,
  key).

  Args:
    images: (B, H, W, C) uint8 in [0, 255] or float in [0, 1], C in (1, 3).
    key: jax.random key.
    flip_prob: see ``flip``.
    jitter_prob, brightness, contrast, saturation, hue: see
      ``color_jitter``.
    grayscale_prob: see ``grayscale``.
    blur_prob, blur_sigma, blur_kernel_fraction: see ``gaussian_blur``.
    solarize_prob, solarize_threshold: see ``solarize``.
    erase_prob, erase_scale: see ``random_erase`` (ratio (0.3, 3.3)).
    noise_std: see ``gaussian_noise``.

  Returns:
    float32 (B, H, W, C) in [0, 1].

  Raises:
    ValueError: as the ops.
  """
  keys = [jax.random.fold_in(key, i) for i in range(7)]
  images = to_float(images)
  images = flip(images, keys[0], flip_prob)
  images = color_jitter(images, keys[1], prob=jitter_prob,
                        brightness=brightness, contrast=contrast,
                        saturation=saturation, hue=hue)
  images = grayscale(images, keys[2], grayscale_prob)
  images = gaussian_blur(images, keys[3], prob=blur_prob, sigma=blur_sigma,
                         kernel_fraction=blur_kernel_fraction)
  images = solarize(images, keys[4], solarize_prob, solarize_threshold)
  images = random_erase(images, keys[5], prob=erase_prob, scale=erase_scale)
  return gaussian_noise(images, keys[6], noise_std)


# Option name -> default, for config validation.
VIEW_OP_OPTIONS = {
    name: p.default
    for name, p in inspect.signature(apply_view).parameters.items()
    if p.kind is p.KEYWORD_ONLY
}
