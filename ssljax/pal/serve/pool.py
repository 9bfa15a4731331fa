"""The images people see: the pool, cached once as ``DIR/pool.npz``.

The pool is a seeded subset of ``data.pool`` train images (all if 0) of
the configured dataset, with the first ``data.test`` test images for the
rounds' probe. Cached arrays: ``images`` (N, H, W, C) uint8, ``labels``
(N,) int64 (-1 where unknown: labels are used only to score rounds, never
shown), ``index`` (N,) int64 train-split index of each pool image (what the
API calls items), ``test_images``, ``test_labels``.

Sources: "fashion_mnist_local" (the IDX files of Debian's
dataset-fashion-mnist, read directly), "image_folder" (``data.path``, with
``train/`` and ``test/`` sub-folders or one folder; class sub-folders
optional), "npz" (``data.path``: ``images``, optional ``labels``,
``test_images``, ``test_labels``) or any tfds name `ssljax.data.load_split`
opens.
"""

from __future__ import annotations

import io
import os
import pathlib

import numpy as np

__all__ = ["prepare_pool", "load_pool", "png_bytes", "round_files"]


def _image_folder(root: pathlib.Path, size: int):
  from PIL import Image  # pylint: disable=import-outside-toplevel
  from ssljax.data.sources import ImageFolderSource  # pylint: disable=import-outside-toplevel
  src = ImageFolderSource(root, channels=3)
  images = []
  for k in range(len(src)):
    im = src.decode(k)
    if size:
      im = np.asarray(Image.fromarray(im).resize((size, size),
                                                 Image.BILINEAR))
    images.append(im)
  if len({im.shape for im in images}) != 1:
    raise ValueError(f"images of {root} differ in size; set data.image_size")
  return np.stack(images), np.asarray(src.labels, np.int64)


def _read(config):
  """(train images, labels, test images, test labels) of the dataset."""
  d = config.data
  if d.name == "npz":
    with np.load(d.path) as f:
      images = f["images"]
      labels = f["labels"] if "labels" in f else np.full(len(images), -1)
      test = (f["test_images"], f["test_labels"]) if "test_images" in f else (
          images[:0], labels[:0])
    return images, labels, test[0], test[1]
  if d.name == "image_folder":
    root = pathlib.Path(d.path)
    train_dir = root / "train" if (root / "train").is_dir() else root
    images, labels = _image_folder(train_dir, d.image_size)
    if (root / "test").is_dir():
      test_images, test_labels = _image_folder(root / "test", d.image_size)
    else:
      test_images, test_labels = images[:0], labels[:0]
    return images, labels, test_images, test_labels
  if d.name == "fashion_mnist_local":
    from ssljax.data import fashion_mnist  # pylint: disable=import-outside-toplevel
    folder = fashion_mnist.find_fashion_mnist_files(d.data_dir)
    if folder is None:
      raise FileNotFoundError("Fashion-MNIST IDX files not found: apt-get "
                              "install dataset-fashion-mnist (make data)")
    train, test = (fashion_mnist.read_split(folder, s) for s in ("train",
                                                                 "test"))
    return train[0][..., None], train[1], test[0][..., None], test[1]
  from ssljax.data import load_split  # pylint: disable=import-outside-toplevel
  train = load_split(d.name, "train", data_dir=d.data_dir)
  test = load_split(d.name, "test", data_dir=d.data_dir)
  return train[0], train[1], test[0], test[1]


def prepare_pool(config, workdir) -> pathlib.Path:
  """Writes ``workdir/pool.npz`` unless present; returns its path.

  Raises:
    FileNotFoundError / ValueError: the dataset cannot be read, or the pool
      would hold fewer than 2 images.
  """
  path = pathlib.Path(workdir) / "pool.npz"
  if path.exists():
    return path
  images, labels, test_images, test_labels = _read(config)
  if images.ndim == 3:
    images = images[..., None]
  if test_images.ndim == 3:
    test_images = test_images[..., None]
  n = len(images)
  rng = np.random.default_rng(config.seed)
  size = config.data.pool
  index = (np.arange(n) if not size or size >= n
           else np.sort(rng.choice(n, size, replace=False)))
  if index.size < 2:
    raise ValueError(f"the pool needs at least 2 images, got {index.size}")
  tmp = path.with_suffix(".tmp.npz")
  np.savez(tmp, images=np.asarray(images[index], np.uint8),
           labels=np.asarray(labels, np.int64)[index], index=index,
           test_images=np.asarray(test_images[:config.data.test], np.uint8),
           test_labels=np.asarray(test_labels[:config.data.test], np.int64))
  os.replace(tmp, path)
  return path


def load_pool(workdir) -> dict:
  """The cached pool arrays (see the module docstring)."""
  with np.load(pathlib.Path(workdir) / "pool.npz") as f:
    return {k: f[k] for k in f.files}


def png_bytes(image: np.ndarray) -> bytes:
  """PNG encoding of one uint8 (H, W, C) image (C = 1 or 3)."""
  from PIL import Image  # pylint: disable=import-outside-toplevel
  im = image[..., 0] if image.shape[-1] == 1 else image
  buf = io.BytesIO()
  Image.fromarray(np.asarray(im, np.uint8)).save(buf, format="PNG")
  return buf.getvalue()


def round_files(workdir, round_id: int) -> tuple[pathlib.Path, pathlib.Path]:
  """(variables .msgpack, embeddings .npy) paths of a round."""
  folder = pathlib.Path(workdir) / "rounds"
  return (folder / f"round_{round_id:05d}.msgpack",
          folder / f"round_{round_id:05d}_z.npy")
