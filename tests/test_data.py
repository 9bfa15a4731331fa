"""Tests of ssljax.data: the offline Fashion-MNIST builder and the pipeline."""

import gzip
import time

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from ssljax import data
from ssljax.data import fashion_mnist

NUM_TRAIN, NUM_TEST = 12, 5


def _write_idx(path, array, magic=None):
  """Writes a uint8 array as a gzipped IDX file (magic 0x08 << 8 | rank)."""
  magic = (0x0800 | array.ndim) if magic is None else magic
  header = np.array([magic, *array.shape], ">u4").tobytes()
  with gzip.open(path, "wb") as f:
    f.write(header + np.ascontiguousarray(array, np.uint8).tobytes())


def _synthetic(num, offset):
  """Distinct images (num, 28, 28) with known pixels, labels (num,)."""
  pixels = np.arange(28 * 28)[None] + 37 * (np.arange(num)[:, None] + offset)
  images = (pixels % 256).astype(np.uint8).reshape(num, 28, 28)
  labels = ((np.arange(num) + offset) % 10).astype(np.uint8)
  return images, labels


@pytest.fixture
def idx_dir(tmp_path):
  """A directory with tiny synthetic IDX files; returns (dir, {split: arrays})."""
  source = tmp_path / "idx"
  source.mkdir()
  splits = {"train": _synthetic(NUM_TRAIN, 0), "test": _synthetic(NUM_TEST, 100)}
  for split, (images, labels) in splits.items():
    images_name, labels_name = fashion_mnist.FASHION_MNIST_FILES[split]
    _write_idx(source / images_name, images)
    _write_idx(source / labels_name, labels)
  return source, splits


def _sorted_pairs(images, labels):
  """(image bytes, label) pairs sorted: tfds reorders examples by key hash."""
  return sorted((im.tobytes(), int(lab)) for im, lab in zip(images, labels))


# ------------------------------------------------------------------ builder


def test_builder_round_trips_every_pixel_from_manual_dir(idx_dir, tmp_path):
  source, splits = idx_dir
  builder = data.FashionMnistLocal(data_dir=str(tmp_path / "tfds"))
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(manual_dir=str(source)))
  assert builder.info.features["label"].num_classes == 10
  assert builder.info.supervised_keys == ("image", "label")
  for split, (images, labels) in splits.items():
    assert builder.info.splits[split].num_examples == len(images)
    ds = tfds.as_numpy(builder.as_dataset(split=split, batch_size=-1))
    assert ds["image"].shape == (len(images), 28, 28, 1)
    assert ds["image"].dtype == np.uint8
    assert (_sorted_pairs(ds["image"][..., 0], ds["label"])
            == _sorted_pairs(images, labels))


def test_load_split_prepares_offline_from_env_dir(idx_dir, tmp_path, monkeypatch):
  source, splits = idx_dir
  monkeypatch.setenv(fashion_mnist.FASHION_MNIST_ENV_VAR, str(source))
  images, labels = data.load_split("fashion_mnist_local", "train",
                                   data_dir=str(tmp_path / "tfds"))
  assert images.shape == (NUM_TRAIN, 28, 28, 1) and images.dtype == np.uint8
  assert labels.shape == (NUM_TRAIN,) and labels.dtype == np.int32
  assert _sorted_pairs(images[..., 0], labels) == _sorted_pairs(*splits["train"])
  # Second call reuses the prepared data; sub-split strings work.
  head, _ = data.load_split("fashion_mnist_local", "test[:3]",
                            data_dir=str(tmp_path / "tfds"))
  assert head.shape == (3, 28, 28, 1)


def test_corrupt_magic_names_the_file(idx_dir, tmp_path):
  source, splits = idx_dir
  bad = source / fashion_mnist.FASHION_MNIST_FILES["train"][0]
  _write_idx(bad, splits["train"][0], magic=0x0000_0801)
  builder = data.FashionMnistLocal(data_dir=str(tmp_path / "tfds"))
  with pytest.raises(ValueError, match="magic") as info:
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=str(source)))
  assert str(bad) in str(info.value)


def test_truncated_payload_names_the_file(idx_dir):
  source, splits = idx_dir
  bad = source / fashion_mnist.FASHION_MNIST_FILES["test"][1]
  header = np.array([0x0801, NUM_TEST + 1], ">u4").tobytes()
  with gzip.open(bad, "wb") as f:
    f.write(header + splits["test"][1].tobytes())
  with pytest.raises(ValueError, match="payload") as info:
    fashion_mnist.read_split(source, "test")
  assert str(bad) in str(info.value)


def test_find_files_order_and_env_var(idx_dir, tmp_path, monkeypatch):
  source, _ = idx_dir
  empty = tmp_path / "empty"
  empty.mkdir()
  monkeypatch.setenv(fashion_mnist.FASHION_MNIST_ENV_VAR, str(empty))
  assert data.find_fashion_mnist_files(source) == source
  # A set variable is authoritative: no fallback to the default directory.
  assert data.find_fashion_mnist_files() is None
  assert data.find_fashion_mnist_files(empty) is None
  monkeypatch.setenv(fashion_mnist.FASHION_MNIST_ENV_VAR, str(source))
  assert data.find_fashion_mnist_files(empty) == source


def test_load_split_missing_idx_files(tmp_path, monkeypatch):
  monkeypatch.setenv(fashion_mnist.FASHION_MNIST_ENV_VAR, str(tmp_path))
  with pytest.raises(data.DatasetUnavailableError, match="dataset-fashion-mnist"):
    data.load_split("fashion_mnist_local", "train", data_dir=str(tmp_path))


@pytest.mark.slow
@pytest.mark.skipif(
    fashion_mnist.find_fashion_mnist_files(fashion_mnist.DEFAULT_FASHION_MNIST_DIR)
    is None, reason="Fashion-MNIST IDX files not installed")
def test_load_split_real_fashion_mnist(tmp_path, monkeypatch):
  monkeypatch.setenv(fashion_mnist.FASHION_MNIST_ENV_VAR,
                     fashion_mnist.DEFAULT_FASHION_MNIST_DIR)
  for split, num in (("train", 60_000), ("test", 10_000)):
    images, labels = data.load_split("fashion_mnist_local", split,
                                     data_dir=str(tmp_path))
    assert images.shape == (num, 28, 28, 1) and images.dtype == np.uint8
    assert np.array_equal(np.bincount(labels, minlength=10),
                          np.full(10, num // 10))


# ------------------------------------------------------------------- loader


def test_unprepared_dataset_fails_fast_without_download(tmp_path):
  start = time.monotonic()
  with pytest.raises(data.DatasetUnavailableError) as info:
    data.load_split("mnist", "train", data_dir=str(tmp_path))
  assert time.monotonic() - start < 10
  message = str(info.value)
  assert "'mnist'" in message and str(tmp_path) in message
  assert "tfds build mnist" in message


def test_unknown_dataset_name(tmp_path):
  with pytest.raises(data.DatasetUnavailableError, match="not a registered"):
    data.load_split("no_such_dataset_xyz", "train", data_dir=str(tmp_path))


# ------------------------------------------------------------- augmentation


@pytest.fixture(scope="module")
def batch():
  """float32 (8, 12, 10, 3) random images in [0, 1] (non-square on purpose)."""
  return tf.constant(np.random.default_rng(0).random((8, 12, 10, 3)), tf.float32)


KEY = tf.constant([3, 4], tf.int32)


@pytest.mark.parametrize("crop", ["random_resized", "pad_and_crop", "none"])
def test_augment_shape_range_and_determinism(batch, crop):
  out = data.augment(batch, KEY, crop=crop, noise_std=0.1)
  assert out.shape == batch.shape and out.dtype == tf.float32
  assert 0 <= tf.reduce_min(out) and tf.reduce_max(out) <= 1
  np.testing.assert_array_equal(out, data.augment(batch, KEY, crop=crop,
                                                  noise_std=0.1))
  other = data.augment(batch, tf.constant([3, 5]), crop=crop, noise_std=0.1)
  assert not np.allclose(out, other)


def test_augment_off_is_identity(batch):
  out = data.augment(batch, KEY, crop="none", flip=False, noise_std=0.0)
  np.testing.assert_array_equal(out, batch)


def test_random_resized_crop_full_box_is_identity(batch):
  # scale = ratio-compatible full area forces the box to the whole image.
  out = data.augment(batch, KEY, crop="random_resized", crop_scale=(1.0, 1.0),
                     crop_ratio=(10 / 12, 10 / 12), flip=False)
  np.testing.assert_allclose(out, batch, atol=1e-5)


def test_flip_gives_image_or_mirror(batch):
  out = data.augment(batch, KEY, crop="none", flip=True).numpy()
  x = batch.numpy()
  same = [np.array_equal(o, i) for o, i in zip(out, x)]
  mirrored = [np.array_equal(o, i[:, ::-1]) for o, i in zip(out, x)]
  assert all(s or m for s, m in zip(same, mirrored))
  assert any(same) and any(mirrored)  # 8 fair coins: fails w.p. 2^-7.


def test_pad_and_crop_is_integer_shift_of_padded_image(batch):
  pad = 3
  out = data.augment(batch, KEY, crop="pad_and_crop", pad=pad, flip=False).numpy()
  padded = np.pad(batch.numpy(), [(0, 0), (pad, pad), (pad, pad), (0, 0)])
  h, w = batch.shape[1:3]
  shifts = set()
  for o, p in zip(out, padded):
    matches = [(dy, dx) for dy in range(2 * pad + 1) for dx in range(2 * pad + 1)
               if np.array_equal(o, p[dy:dy + h, dx:dx + w])]
    assert matches, "output is not a shifted window of the padded image"
    shifts.add(matches[0])
  assert len(shifts) > 1  # offsets vary per image


def test_brightness_scales_each_image_within_its_range(batch):
  out = data.augment(batch, KEY, crop="none", flip=False, brightness=0.4,
                     jitter_prob=1.0).numpy()
  x = batch.numpy()
  unclipped = out < 1.0  # clipping at 1 hides the factor
  factors = [np.median(o[u] / i[u]) for o, i, u in zip(out, x, unclipped)]
  for o, i, u, f in zip(out, x, unclipped, factors):
    np.testing.assert_allclose(o[u], f * i[u], rtol=1e-5, atol=1e-6)
  assert all(0.6 <= f <= 1.4 for f in factors) and np.ptp(factors) > 0


def test_contrast_keeps_the_mean_when_nothing_clips(batch):
  # Images in [0.4, 0.6]: a contrast factor <= 1.5 never leaves [0, 1].
  x = 0.4 + 0.2 * batch
  out = data.augment(x, KEY, crop="none", flip=False, contrast=0.5,
                     jitter_prob=1.0).numpy()
  np.testing.assert_allclose(out.mean(axis=(1, 2, 3)),
                             x.numpy().mean(axis=(1, 2, 3)), atol=1e-6)
  spread = out.std(axis=(1, 2, 3)) / x.numpy().std(axis=(1, 2, 3))
  assert np.all((0.5 - 1e-5 <= spread) & (spread <= 1.5 + 1e-5))
  assert np.ptp(spread) > 0


def test_jitter_probability_zero_is_identity(batch):
  out = data.augment(batch, KEY, crop="none", flip=False, brightness=0.5,
                     contrast=0.5, jitter_prob=0.0)
  np.testing.assert_array_equal(out, batch)


def test_random_erase_zeroes_one_box_of_the_requested_area(batch):
  x = 0.1 + 0.9 * batch  # no zero pixels before erasing
  out = data.augment(x, KEY, crop="none", flip=False, erase_prob=1.0,
                     erase_scale=(0.1, 0.3)).numpy()
  h, w = batch.shape[1:3]
  for o, i in zip(out, x.numpy()):
    erased = np.all(o == 0, axis=-1)  # (H, W)
    np.testing.assert_array_equal(o[~erased], i[~erased])  # rest untouched
    rows, cols = np.nonzero(erased)
    assert rows.size > 0
    box = erased[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
    assert box.all(), "erased pixels do not form one rectangle"
    # Pixel-centre rounding moves each side by < 1 pixel.
    assert 0.1 * h * w - (h + w) <= rows.size <= 0.3 * h * w + (h + w) + 1


@pytest.mark.parametrize("kwargs", [
    {"crop": "center"}, {"crop_scale": (0.0, 1.0)}, {"crop_scale": (0.5, 0.2)},
    {"crop_ratio": (2.0, 1.0)}, {"pad": -1}, {"noise_std": -0.1},
    {"brightness": 1.0}, {"contrast": -0.1}, {"jitter_prob": 1.5},
    {"erase_prob": -0.5}, {"erase_scale": (0.0, 0.2)}])
def test_augment_rejects_bad_arguments(batch, kwargs):
  with pytest.raises(ValueError):
    data.augment(batch, KEY, **kwargs)


def test_steps_per_epoch():
  assert data.steps_per_epoch(60_000, 256) == 234
  assert data.steps_per_epoch(8, 8) == 1
  with pytest.raises(ValueError):
    data.steps_per_epoch(7, 8)
