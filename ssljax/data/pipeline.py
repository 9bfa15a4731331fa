"""Input pipeline: tfds splits as numpy, batched TF augmentation, view batches.

Rows are samples everywhere. ``view_batches`` yields (V, B, H, W, C) arrays;
the view-major concatenation ``views.reshape(V * B, H, W, C)`` (row v*B + i is
view v of sample i) matches ``ssljax.graphs.views_graph(B, V, order="view_major")``.
All randomness is stateless and keyed by (seed, step, view), so a run resumed
at any step sees exactly the batches of an uninterrupted run.
"""

from collections.abc import Iterator
import inspect
import math

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from ssljax.data import fashion_mnist

__all__ = ["DatasetUnavailableError", "augment", "load_split",
           "steps_per_epoch", "view_batches"]

_CROP_MODES = ("random_resized", "pad_and_crop", "none")
# Folded into the view keys so they never reuse the (seed, epoch) shuffle seed.
_VIEW_STREAM = 0x5EED


class DatasetUnavailableError(ValueError):
  """The dataset is unknown, not prepared offline, or has no image/label."""



def load_split(name: str, split: str, *, data_dir: str | None = None,
               download: bool = False) -> tuple[np.ndarray, np.ndarray]:
  """Loads a whole tfds split into memory.

  Args:
    name: tfds dataset name, e.g. "fashion_mnist_local" (prepared offline from
      the IDX files) or "fashion_mnist".
    split: tfds split string, e.g. "train", "test" or "train[:512]".
    data_dir: tfds data dir; None uses tfds's default (~/tensorflow_datasets).
    download: allow tfds to download and prepare a missing dataset (needs
      internet). Ignored for "fashion_mnist_local", which never downloads.

  Returns:
    images: uint8 (N, H, W, C); labels: int32 (N,).

  Raises:
    DatasetUnavailableError: unknown name; dataset not prepared and
      ``download`` is False; fashion_mnist_local IDX files missing; no
      image/label features.
  """
  try:
    builder = tfds.builder(name, data_dir=data_dir)
  except tfds.core.DatasetNotFoundError as e:
    raise DatasetUnavailableError(
        f"{name!r} is not a registered tfds dataset (check the spelling; "
        f"'fashion_mnist_local' needs `import ssljax.data`).") from e
  # is_prepared() only stats <data_dir>/<name>/<version>/dataset_info.json etc.
  if not builder.is_prepared():
    _prepare(builder, download)
  image_key, label_key = _image_label_keys(builder)
  data = tfds.as_numpy(builder.as_dataset(split=split, batch_size=-1))
  images, labels = data[image_key], data[label_key].astype(np.int32)
  if images.dtype != np.uint8 or images.ndim != 4:
    raise DatasetUnavailableError(
        f"{name!r}: expected uint8 images (N, H, W, C), got {images.dtype} "
        f"{images.shape}")
  return images, labels


def _prepare(builder, download: bool) -> None:
  """Prepares ``builder`` offline (fashion_mnist_local) or, if allowed, online."""
  root = builder.data_dir_root
  if builder.name == "fashion_mnist_local":
    manual_dir = root / "downloads" / "manual"  # tfds's default manual dir.
    if fashion_mnist.find_fashion_mnist_files(manual_dir) is None:
      raise DatasetUnavailableError(
          "fashion_mnist_local: the Fashion-MNIST IDX files were not found in "
          f"{manual_dir}, ${fashion_mnist.FASHION_MNIST_ENV_VAR} or "
          f"{fashion_mnist.DEFAULT_FASHION_MNIST_DIR}. Run `sudo apt-get install"
          " -y dataset-fashion-mnist` or set "
          f"{fashion_mnist.FASHION_MNIST_ENV_VAR} to a directory with them.")
  elif not download:
    # Fail now: offline, tfds would retry the download for minutes.
    raise DatasetUnavailableError(
        f"Dataset {builder.name!r} is not prepared in data_dir {root} (looked "
        f"for {builder.data_dir}) and downloading is disabled. Either prepare "
        f"it with `tfds build {builder.name} --data_dir {root}`, copy a "
        "prepared copy there, or pass --config.dataset.download=True on a "
        "machine with internet access.")
  builder.download_and_prepare()


def _image_label_keys(builder) -> tuple[str, str]:
  """Returns the (image, label) feature names, preferring supervised keys."""
  keys = builder.info.supervised_keys
  if not (isinstance(keys, tuple) and len(keys) == 2
          and all(isinstance(k, str) for k in keys)):
    keys = ("image", "label")
  missing = [k for k in keys if k not in builder.info.features]
  if missing:
    raise DatasetUnavailableError(
        f"{builder.name!r} has no {missing} feature(s); features are "
        f"{list(builder.info.features)}")
  return keys



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
  return _augment_rows(images, key, 0, tf.shape(images)[0], crop=crop,
                       crop_scale=crop_scale, crop_ratio=crop_ratio, pad=pad,
                       flip=flip, noise_std=noise_std, brightness=brightness,
                       contrast=contrast, jitter_prob=jitter_prob,
                       erase_prob=erase_prob, erase_scale=erase_scale)


def _augment_rows(images, key, first_row, total_rows, *, crop, crop_scale,
                  crop_ratio, pad, flip, noise_std, brightness, contrast,
                  jitter_prob, erase_prob, erase_scale) -> tf.Tensor:
  """``augment`` of rows [first_row, first_row + B) of a batch of total_rows.

  Random draws are made for all ``total_rows`` and sliced, so a process that
  holds a slice of the global batch gets exactly the rows a single process
  would compute for it.
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
  if crop not in _CROP_MODES:
    raise ValueError(f"crop must be one of {_CROP_MODES}, got {crop!r}")
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
    u: float32 (B, 3) uniforms: apply?, brightness and contrast factors.
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
    u: float32 (B, 5) uniforms: apply?, area, log-ratio, y and x offsets.
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



def steps_per_epoch(num_examples: int, batch_size: int) -> int:
  """Number of full batches per epoch (the remainder is dropped).

  Raises:
    ValueError: if batch_size < 1 or batch_size > num_examples.
  """
  if not 1 <= batch_size <= num_examples:
    raise ValueError(f"batch_size must be in [1, num_examples={num_examples}], "
                     f"got {batch_size}")
  return num_examples // batch_size


def view_batches(images: np.ndarray, *, batch_size: int, num_views: int = 2,
                 seed: int, start_step: int = 0, num_steps: int,
                 augment_kwargs: dict | None = None, process_index: int = 0,
                 process_count: int = 1, prefetch: int = 2,
                 labels: np.ndarray | None = None) -> Iterator:
  """Yields augmented views of the batches for steps [start_step, start_step + num_steps).

  The global batch at step s is a pure function of (seed, s): epoch
  e = s // steps_per_epoch, permutation stateless_shuffle(range(N), [seed, e]),
  rows perm[i*B:(i+1)*B] with i = s % steps_per_epoch; view v uses a stateless
  key derived from (seed, s, v). Resuming at ``start_step`` therefore yields
  exactly the batches of an uninterrupted run, and process p of P gets rows
  [p*B/P, (p+1)*B/P) of the global batch with the random draws a single
  process would use for them (equal up to float rounding in crop_and_resize).
  Rows are samples: with b = B / P, ``views.reshape(V * b, H, W, C)`` is
  view-major (row v*b + i is view v of sample i), matching
  ``ssljax.graphs.views_graph(b, V, order="view_major")``.

  Args:
    images: uint8 (N, H, W, C) numpy array, held once in memory as a tf constant.
    batch_size: global batch size B, 2 <= B <= N, divisible by process_count.
    num_views: views per sample V >= 1.
    seed: int seed of the shuffle and of the augmentation.
    start_step: first global step, >= 0.
    num_steps: number of batches to yield, >= 0.
    augment_kwargs: keyword arguments of ``augment`` (None: its defaults).
    process_index: this process p, 0 <= p < process_count.
    process_count: number of processes P.
    prefetch: batches prepared ahead by tf.data.
    labels: optional integer (N,) labels (−1 = unknown), for losses whose graph
      G comes from labels (supervised / mixed graphs). When given, each item
      is a pair (views, labels of the same rows (B / P,) int32).

  Returns:
    An iterator of float32 numpy arrays (V, B / P, H, W, C) in [0, 1], or of
    (views, labels) pairs when ``labels`` is given.

  Raises:
    ValueError: naming the argument on invalid arguments.
  """
  _check_view_args(images, batch_size, num_views, start_step, num_steps,
                   process_index, process_count)
  if labels is not None:
    labels = np.asarray(labels)
    if labels.shape != images.shape[:1] or not np.issubdtype(labels.dtype,
                                                              np.integer):
      raise ValueError(f"labels must be integers of shape ({images.shape[0]},),"
                       f" got {labels.dtype} {labels.shape}")
    label_table = tf.constant(labels.astype(np.int32))
  num_examples = images.shape[0]
  per_epoch = steps_per_epoch(num_examples, batch_size)
  local = batch_size // process_count
  first = process_index * local
  data = tf.constant(images)
  aug = _augment_options(augment_kwargs or {})

  def make_batch(step):
    epoch, position = step // per_epoch, step % per_epoch
    perm = tf.random.experimental.stateless_shuffle(
        tf.range(num_examples, dtype=tf.int64),
        seed=tf.stack([tf.constant(seed, tf.int64), epoch]))
    start = position * batch_size + first
    rows = perm[start:start + local]
    batch = tf.cast(tf.gather(data, rows), tf.float32) / 255
    base = tf.random.experimental.stateless_fold_in(
        tf.constant([seed, _VIEW_STREAM], tf.int64), step)
    keys = tf.random.experimental.stateless_split(base, num_views)
    views = tf.stack([_augment_rows(batch, keys[v], first, batch_size, **aug)
                      for v in range(num_views)])
    return views if labels is None else (views, tf.gather(label_table, rows))

  dataset = tf.data.Dataset.range(start_step, start_step + num_steps)
  dataset = dataset.map(make_batch, num_parallel_calls=tf.data.AUTOTUNE,
                        deterministic=True)
  return dataset.prefetch(prefetch).as_numpy_iterator()


def _augment_options(overrides: dict) -> dict:
  """``augment``'s keyword defaults updated with ``overrides``.

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


def _check_view_args(images, batch_size, num_views, start_step, num_steps,
                     process_index, process_count):
  """Raises ValueError naming the first invalid ``view_batches`` argument."""
  if not (isinstance(images, np.ndarray) and images.dtype == np.uint8
          and images.ndim == 4):
    raise ValueError("images must be a uint8 numpy array (N, H, W, C), got "
                     f"{type(images).__name__} {getattr(images, 'dtype', None)} "
                     f"{getattr(images, 'shape', None)}")
  _raise_first_invalid([
      ("batch_size", batch_size, 2 <= batch_size <= images.shape[0],
       f"in [2, N={images.shape[0]}]"),
      ("num_views", num_views, num_views >= 1, ">= 1"),
      *_step_checks(batch_size, start_step, num_steps, process_index,
                    process_count)])


def _step_checks(batch_size, start_step, num_steps, process_index,
                 process_count) -> list:
  """(name, value, ok, requirement) checks shared by the batch iterators."""
  return [
      ("start_step", start_step, start_step >= 0, ">= 0"),
      ("num_steps", num_steps, num_steps >= 0, ">= 0"),
      ("process_count", process_count, process_count >= 1
       and batch_size % process_count == 0,
       f">= 1 and divide batch_size={batch_size}"),
      ("process_index", process_index, 0 <= process_index < process_count,
       f"in [0, process_count={process_count})"),
  ]


def _raise_first_invalid(checks) -> None:
  """Raises ValueError naming the first (name, value, ok, requirement) not ok."""
  for name, value, ok, requirement in checks:
    if not ok:
      raise ValueError(f"{name} must be {requirement}, got {value}")
