"""Batched, stateless TF image augmentation (crops, flip, jitter, erasing, noise).

Rows are samples: a batch is float32 (B, H, W, C) in [0, 1]. Every random
draw is keyed by a stateless seed, so a view is a pure function of (images,
key) and a resumed or multi-process run reproduces a single run's views.
SimCLR's augmentations (Chen et al. 2020, "A Simple Framework for
Contrastive Learning of Visual Representations", arXiv 2002.05709, App. A),
in grey levels; random erasing after Zhong et al. 2020 (arXiv 1708.04896).
"""

import inspect
import math

import tensorflow as tf

__all__ = ["CROP_MODES", "VIEW_STREAM", "augment", "augment_options",
           "augment_rows"]

CROP_MODES = ("random_resized", "pad_and_crop", "none")
# Folded into the view keys so they never reuse the (seed, epoch) shuffle seed.
VIEW_STREAM = 0x5EED


def augment(images, key, *, crop: str = "random_resized",
            crop_scale=(0.2, 1.0), crop_ratio=(3 / 4, 4 / 3), pad: int = 4,
            flip: bool = True, noise_std: float = 0.0, brightness: float = 0.0,
            contrast: float = 0.0, jitter_prob: float = 0.8,
            erase_prob: float = 0.0, erase_scale=(0.02, 0.2)) -> tf.Tensor:
  """Augments a whole batch with vectorised, stateless TF ops.

  Order: crop, flip, intensity jitter, erasing, noise.

  The output is a pure function of (images, key).

  Args:
    images: float32 (B, H, W, C) in [0, 1].
    key: int32/int64 tensor of shape (2,), the stateless seed.
    crop: "random_resized" (random box with area fraction in ``crop_scale`` and
      log-uniform aspect ratio w/h in ``crop_ratio``, clipped to the image,
      resized back bilinearly), "pad_and_crop" (zero-pad by ``pad`` and take a
      random H x W window) or "none".
    crop_scale: (min, max) area fraction, 0 < min <= max <= 1.
    crop_ratio: (min, max) aspect ratio, 0 < min <= max.
    pad: padding in pixels for "pad_and_crop", int >= 0.
    flip: horizontal flip with probability 1/2 per image.
    noise_std: std of additive Gaussian noise (result clipped to [0, 1]).
    brightness: grey-level version of SimCLR's colour jitter: with
      probability ``jitter_prob`` an image is scaled by a factor uniform in
      [1 − brightness, 1 + brightness], in [0, 1).
    contrast: ... and its deviation from its own mean grey level by a factor
      uniform in [1 − contrast, 1 + contrast], in [0, 1); the result is
      clipped to [0, 1].
    jitter_prob: probability of the brightness/contrast jitter, in [0, 1].
    erase_prob: probability of random erasing (Zhong et al. 2020): a box of
      area fraction uniform in ``erase_scale`` and log-uniform aspect ratio
      in [0.3, 3.3] set to 0, in [0, 1].
    erase_scale: (min, max) erased area fraction, 0 < min <= max <= 1.

  Returns:
    float32 (B, H, W, C) tf.Tensor.

  Raises:
    ValueError: unknown crop mode, bad ranges, negative pad or noise_std,
      jitter strengths outside [0, 1), probabilities outside [0, 1], images
      not of rank 4.
  """
  images = tf.convert_to_tensor(images, tf.float32)
  return augment_rows(images, key, 0, tf.shape(images)[0], crop=crop,
                       crop_scale=crop_scale, crop_ratio=crop_ratio, pad=pad,
                       flip=flip, noise_std=noise_std, brightness=brightness,
                       contrast=contrast, jitter_prob=jitter_prob,
                       erase_prob=erase_prob, erase_scale=erase_scale)


def augment_rows(images, key, first_row, total_rows, *, crop, crop_scale,
                  crop_ratio, pad, flip, noise_std, brightness, contrast,
                  jitter_prob, erase_prob, erase_scale) -> tf.Tensor:
  """``augment`` of rows [first_row, first_row + B) of a batch of total_rows.

  Random draws are made for all ``total_rows`` and sliced, so a process that
  holds a slice of the global batch gets exactly the rows a single process
  would compute for it.

  Args:
    images: float32 (B, H, W, C) tf.Tensor in [0, 1], rows
      [first_row, first_row + B) of the global batch.
    key: the stateless seed, int tensor of shape (2,).
    first_row, total_rows: position of ``images`` in the global batch. crop,
      ..., erase_scale: as in ``augment`` (all required; see
      ``augment_options``).

  Returns:
    float32 (B, H, W, C) tf.Tensor.

  Raises:
    ValueError: as ``augment``.
  """
  _check_augment_args(images, crop, crop_scale, crop_ratio, pad, noise_std)
  _check_intensity_args(brightness, contrast, jitter_prob, erase_prob,
                        erase_scale)
  crop_key, flip_key, noise_key = tf.unstack(
      tf.random.experimental.stateless_split(key, 3))
  # Keys of the later-added ops come from a fold-in, so that the crop, flip
  # and noise draws (and runs measured before they existed) are unchanged.
  jitter_key, erase_key = tf.unstack(tf.random.experimental.stateless_split(
      tf.random.experimental.stateless_fold_in(key, 1), 2))

  def uniform(k, num=1):  # (B, num) per-row uniforms in [0, 1).
    u = tf.random.stateless_uniform([total_rows, num], seed=k)
    return u[first_row:first_row + tf.shape(images)[0]]

  if crop == "random_resized":
    images = _random_resized_crop(images, uniform(crop_key, 4), crop_scale,
                                  crop_ratio)
  elif crop == "pad_and_crop":
    images = _pad_and_crop(images, uniform(crop_key, 2), pad)
  if flip:
    mirrored = uniform(flip_key)[:, :, None, None] < 0.5
    images = tf.where(mirrored, tf.reverse(images, axis=[2]), images)
  if brightness > 0 or contrast > 0:
    images = _intensity_jitter(images, uniform(jitter_key, 3), brightness,
                               contrast, jitter_prob)
  if erase_prob > 0:
    images = _random_erase(images, uniform(erase_key, 5), erase_prob,
                           erase_scale)
  if noise_std > 0:
    shape = tf.concat([[total_rows], tf.shape(images)[1:]], 0)
    noise = tf.random.stateless_normal(shape, seed=noise_key)
    noise = noise[first_row:first_row + tf.shape(images)[0]]
    images = tf.clip_by_value(images + noise_std * noise, 0.0, 1.0)
  return images


def _check_augment_args(images, crop, crop_scale, crop_ratio, pad, noise_std):
  """Raises ValueError on arguments ``augment`` documents as invalid."""
  if images.shape.rank != 4:
    raise ValueError(f"images must be (B, H, W, C), got shape {images.shape}")
  if crop not in CROP_MODES:
    raise ValueError(f"crop must be one of {CROP_MODES}, got {crop!r}")
  lo, hi = crop_scale
  if not 0 < lo <= hi <= 1:
    raise ValueError(f"crop_scale must satisfy 0 < min <= max <= 1, got {crop_scale}")
  lo, hi = crop_ratio
  if not 0 < lo <= hi:
    raise ValueError(f"crop_ratio must satisfy 0 < min <= max, got {crop_ratio}")
  if pad < 0:
    raise ValueError(f"pad must be >= 0, got {pad}")
  if noise_std < 0:
    raise ValueError(f"noise_std must be >= 0, got {noise_std}")


def _check_intensity_args(brightness, contrast, jitter_prob, erase_prob,
                          erase_scale):
  """Raises ValueError on jitter/erasing arguments ``augment`` rejects."""
  for name, value in (("brightness", brightness), ("contrast", contrast)):
    if not 0 <= value < 1:
      raise ValueError(f"{name} must be in [0, 1), got {value}")
  for name, value in (("jitter_prob", jitter_prob), ("erase_prob", erase_prob)):
    if not 0 <= value <= 1:
      raise ValueError(f"{name} must be in [0, 1], got {value}")
  lo, hi = erase_scale
  if not 0 < lo <= hi <= 1:
    raise ValueError(
        f"erase_scale must satisfy 0 < min <= max <= 1, got {erase_scale}")


def _intensity_jitter(images, u, brightness, contrast, prob) -> tf.Tensor:
  """Random brightness then contrast, per image, with probability ``prob``.

  Args:
    images: float32 (B, H, W, C) in [0, 1].
    u: float32 (B, 3)
    uniforms: apply?, brightness and contrast factors.
  """
  apply = (u[:, 0] < prob)[:, None, None, None]
  scale = (1.0 + brightness * (2.0 * u[:, 1] - 1.0))[:, None, None, None]
  factor = (1.0 + contrast * (2.0 * u[:, 2] - 1.0))[:, None, None, None]
  bright = images * scale
  mean = tf.reduce_mean(bright, axis=[1, 2, 3], keepdims=True)
  jittered = tf.clip_by_value(mean + factor * (bright - mean), 0.0, 1.0)
  return tf.where(apply, jittered, images)


def _random_erase(images, u, prob, scale) -> tf.Tensor:
  """Sets a random box to 0 in each image with probability ``prob``.

  Args:
    images: float32 (B, H, W, C).
    u: float32 (B, 5)
    uniforms: apply?, area, log-ratio, y and x offsets.
  """
  shape = tf.shape(images)
  height, width = tf.cast(shape[1], tf.float32), tf.cast(shape[2], tf.float32)
  area = (scale[0] + (scale[1] - scale[0]) * u[:, 1]) * height * width
  log_lo, log_hi = math.log(0.3), math.log(3.3)
  aspect = tf.exp(log_lo + (log_hi - log_lo) * u[:, 2])  # height / width
  box_h = tf.minimum(tf.sqrt(area * aspect), height)
  box_w = tf.minimum(tf.sqrt(area / aspect), width)
  y0 = (height - box_h) * u[:, 3]
  x0 = (width - box_w) * u[:, 4]
  ys = tf.range(height)[None, :] + 0.5  # pixel centres, (1, H)
  xs = tf.range(width)[None, :] + 0.5
  in_y = (ys >= y0[:, None]) & (ys < (y0 + box_h)[:, None])  # (B, H)
  in_x = (xs >= x0[:, None]) & (xs < (x0 + box_w)[:, None])  # (B, W)
  box = in_y[:, :, None] & in_x[:, None, :]  # (B, H, W)
  erase = box & (u[:, 0] < prob)[:, None, None]
  return tf.where(erase[..., None], tf.zeros_like(images), images)


def _random_resized_crop(images, u, scale, ratio) -> tf.Tensor:
  """Crops a random box per image and resizes it back to (H, W).

  Args:
    images: float32 (B, H, W, C).
    u: float32 (B, 4) uniforms in [0, 1): area, log-ratio, y and x offsets.
  """
  shape = tf.shape(images)
  height, width = tf.cast(shape[1], tf.float32), tf.cast(shape[2], tf.float32)
  area = scale[0] + (scale[1] - scale[0]) * u[:, 0]
  log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
  aspect = tf.exp(log_lo + (log_hi - log_lo) * u[:, 1])  # width / height
  # Box sides as fractions of the image side: w*h = area*H*W, w/h = aspect.
  box_h = tf.minimum(tf.sqrt(area * width / (aspect * height)), 1.0)
  box_w = tf.minimum(tf.sqrt(area * aspect * height / width), 1.0)
  y0 = (1.0 - box_h) * u[:, 2]
  x0 = (1.0 - box_w) * u[:, 3]
  boxes = tf.stack([y0, x0, y0 + box_h, x0 + box_w], axis=1)
  # A static crop size keeps the output shape static.
  size = images.shape[1:3] if images.shape[1:3].is_fully_defined() else shape[1:3]
  return tf.image.crop_and_resize(images, boxes, tf.range(shape[0]), size,
                                  method="bilinear")


def _pad_and_crop(images, u, pad: int) -> tf.Tensor:
  """Zero-pads by ``pad`` and takes a random integer-shifted (H, W) window.

  Args:
    images: float32 (B, H, W, C).
    u: float32 (B, 2) uniforms in [0, 1): y and x offsets.
  """
  shape = tf.shape(images)
  padded = tf.pad(images, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
  offsets = tf.cast(tf.floor(u * (2 * pad + 1)), tf.int32)  # in [0, 2*pad]
  rows = offsets[:, :1] + tf.range(shape[1])[None]  # (B, H)
  cols = offsets[:, 1:] + tf.range(shape[2])[None]  # (B, W)
  out = tf.gather(padded, rows, axis=1, batch_dims=1)  # (B, H, W + 2p, C)
  return tf.gather(out, cols, axis=2, batch_dims=1)



def augment_options(overrides: dict) -> dict:
  """``augment``'s keyword defaults updated with ``overrides``.

  Args:
    overrides: dict of ``augment`` keyword arguments (e.g. a config's
      ``augment_kwargs``).

  Returns:
    dict of every keyword argument of ``augment``, to pass to ``augment_rows``.


  Raises:
    ValueError: on a name that is not a keyword argument of ``augment``.
  """
  params = inspect.signature(augment).parameters
  options = {name: p.default for name, p in params.items()
             if p.kind is p.KEYWORD_ONLY}
  unknown = sorted(set(overrides) - set(options))
  if unknown:
    raise ValueError(f"augment_kwargs has unknown keys {unknown}; "
                     f"valid keys are {sorted(options)}")
  return {**options, **overrides}
