"""Tests of ssljax.data: the offline Fashion-MNIST builder and the pipeline."""

import gzip
import socket
import tempfile

import numpy as np
import pytest
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


def test_unprepared_dataset_fails_without_trying_a_download(tmp_path,
                                                           monkeypatch):
  # "Fails fast" means: no download is tried (offline, tfds retries one for
  # minutes). Both the tfds entry point and any network connection are
  # spied on and refused.
  tried = []

  def refuse(what):
    def spy(*args, **kwargs):
      tried.append(what)
      raise RuntimeError(f"{what} attempted")
    return spy

  monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare",
                      refuse("download_and_prepare"))
  monkeypatch.setattr(socket.socket, "connect", refuse("socket.connect"))
  monkeypatch.setattr(socket.socket, "connect_ex", refuse("socket.connect_ex"))
  with pytest.raises(data.DatasetUnavailableError) as info:
    data.load_split("mnist", "train", data_dir=str(tmp_path))
  assert tried == []
  message = str(info.value)
  assert "'mnist'" in message and str(tmp_path) in message
  assert "tfds build mnist" in message


def test_unknown_dataset_name(tmp_path):
  with pytest.raises(data.DatasetUnavailableError, match="not a registered"):
    data.load_split("no_such_dataset_xyz", "train", data_dir=str(tmp_path))


def test_steps_per_epoch():
  assert data.steps_per_epoch(60_000, 256) == 234
  assert data.steps_per_epoch(8, 8) == 1
  with pytest.raises(ValueError):
    data.steps_per_epoch(7, 8)


def test_image_folder_splits_slice_the_sorted_files(tmp_path):
  from PIL import Image  # pylint: disable=import-outside-toplevel
  for i in range(10):
    folder = tmp_path / "train" / f"c{i % 2}"
    folder.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((5, 5), i * 20, np.uint8)).save(folder / f"{i}.png")
  whole = data.open_split("image_folder", "train", data_dir=str(tmp_path))
  first = data.open_split("image_folder", "train[:4]", data_dir=str(tmp_path))
  assert len(whole) == 10 and first.files == whole.files[:4]
  np.testing.assert_array_equal(first.labels, whole.labels[:4])
  middle = data.open_split("image_folder", "train[3:7]", data_dir=str(tmp_path))
  assert middle.files == whole.files[3:7]
  half = data.open_split("image_folder", "train[:50%]", data_dir=str(tmp_path))
  assert half.files == whole.files[:5]
  for split, match in (("train[::2]", "NAME"), ("train[20:]", "keeps no")):
    with pytest.raises(data.DatasetUnavailableError, match=match):
      data.open_split("image_folder", split, data_dir=str(tmp_path))


def test_builder_leaves_no_temporary_folder(tmp_path, monkeypatch):
  # tfds looks for a builder's metadata in its GCS bucket when the data is
  # not prepared yet, copying into a fresh tempfile.mkdtemp("tfds") folder
  # that it never removes; offline, and for a local builder, the folder
  # stays empty. The builder skips that lookup.
  temp = tmp_path / "temp"
  temp.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(temp))
  builder = data.FashionMnistLocal(data_dir=str(tmp_path / "tfds"))
  assert builder.info.features["label"].num_classes == 10
  assert sorted(p.name for p in temp.iterdir()) == []
