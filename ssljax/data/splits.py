"""Opening a split: tfds datasets (in memory or streamed) and image folders.

`open_split` returns the random-access source (`ssljax.data.sources`) that
`ssljax.data.batches` reads; `load_split` decodes a whole tfds split into
memory (small datasets, the whole-dataset graphs); `steps_per_epoch` is the
drop-remainder epoch length every loader uses.
"""

import os
import re

import numpy as np
import tensorflow_datasets as tfds

from ssljax.data import fashion_mnist, sources
from ssljax.data.sources import DatasetUnavailableError

__all__ = ["IN_MEMORY_MODES", "load_split", "open_split", "steps_per_epoch"]


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
  builder = _builder(name, data_dir)
  # is_prepared() only stats <data_dir>/<name>/<version>/dataset_info.json etc.
  if not builder.is_prepared():
    _prepare(builder, download)
  image_key, label_key = _image_label_keys(builder)
  if builder.info.file_format == tfds.core.FileFormat.ARRAY_RECORD:
    # No tf.data reader for ArrayRecord: decode through the data source.
    source = sources.TfdsSource(builder, split, image_key, label_key)
    parts = [source.read(range(i, min(i + 4096, len(source))))
             for i in range(0, len(source), 4096)]
    images = np.concatenate([np.asarray(p[0]) for p in parts])
    labels = np.concatenate([p[1] for p in parts])
  else:
    data = tfds.as_numpy(builder.as_dataset(split=split, batch_size=-1))
    images, labels = data[image_key], data[label_key].astype(np.int32)
  if images.dtype != np.uint8 or images.ndim != 4:
    raise DatasetUnavailableError(
        f"{name!r}: expected uint8 images (N, H, W, C), got {images.dtype} "
        f"{images.shape}")
  return images, labels


IN_MEMORY_MODES = ("auto", "yes", "no")
# "auto" keeps a split in memory below this many decoded bytes.
IN_MEMORY_LIMIT_BYTES = 2 << 30


def open_split(name: str, split: str, *, data_dir: str | None = None,
               download: bool = False, in_memory: str = "auto",
               channels: int = 3):
  """A random-access source (`ssljax.data.sources`) of one split.

  Args:
    name: "image_folder" (images under ``data_dir/<split>``) or a tfds name.
    split: tfds split string, or the sub-folder of an image folder.
    data_dir: the tfds data dir (None: tfds's default), or the image folder.
    download: let tfds download and prepare a missing dataset (internet).
    in_memory: tfds datasets only. "yes": decode the split into memory once
      (`ArraySource`); "no": read it lazily from ArrayRecord files
      (`TfdsSource`; host memory independent of the dataset size); "auto":
      "yes" for images of one fixed shape totalling at most
      IN_MEMORY_LIMIT_BYTES (2 GiB) decoded, else "no".
    channels: image-folder images are converted to 1 or 3 channels.
      An image folder's split may be sliced as a tfds split: "train[:512]"
      is the first 512 files of DIR/train in sorted order
      (`folder_split`).

  Returns:
    an `ArraySource`, `TfdsSource` or `ImageFolderSource`.

  Raises:
    DatasetUnavailableError: as `load_split`; an image folder without the
      split's sub-folder or images; "no" for a split stored as TFRecord.
    ValueError: in_memory not one of IN_MEMORY_MODES.
  """
  if in_memory not in IN_MEMORY_MODES:
    raise ValueError(f"in_memory must be one of {IN_MEMORY_MODES}, got "
                     f"{in_memory!r}")
  if name == "image_folder":
    if not data_dir:
      raise DatasetUnavailableError(
          "dataset 'image_folder' needs dataset.data_dir=DIR with the images "
          "in DIR/train/<class>/*.jpg (class folders optional)")
    folder, rows = folder_split(split)
    return sources.ImageFolderSource(os.path.join(data_dir, folder), channels,
                                     rows)
  builder = _builder(name, data_dir)
  if not builder.is_prepared():
    _prepare(builder, download)
  image_key, label_key = _image_label_keys(builder)
  shape = tuple(builder.info.features[image_key].shape)
  if in_memory == "auto":
    fixed = None not in shape
    num = builder.info.splits[split].num_examples if fixed else 0
    in_memory = ("yes" if fixed and num * int(np.prod(shape))
                 <= IN_MEMORY_LIMIT_BYTES else "no")
  if in_memory == "yes":
    images, labels = load_split(name, split, data_dir=data_dir,
                                download=download)
    num_classes = getattr(builder.info.features[label_key], "num_classes",
                          None)
    return sources.ArraySource(images, labels, num_classes)
  return sources.TfdsSource(builder, split, image_key, label_key)


_FOLDER_SPLIT = re.compile(r"^([^\[\]]+)(?:\[(-?\d*)(%?):(-?\d*)(%?)\])?$")


def folder_split(split: str):
  """(sub-folder, rows) of an image folder's split in tfds slice syntax.

  "train" -> ("train", None); "train[:512]" -> ("train", slice(None, 512)),
  the first 512 files in sorted order; "train[100:200]"; "train[:10%]" ->
  a function of the file count N giving slice(None, round(0.1·N)). Stable:
  the files are sorted.

  Returns:
    (str, None | slice | function int -> slice), the ``rows`` of
    `ssljax.data.ImageFolderSource`.

  Raises:
    DatasetUnavailableError: a split that is not NAME or NAME[a:b] with
      integers or percentages (e.g. "train+test" or "train[::2]").
  """
  match = _FOLDER_SPLIT.match(split)
  if not match:
    raise DatasetUnavailableError(
        f"image folder split {split!r}: expected a sub-folder name, "
        "optionally sliced as NAME[a:b] or NAME[:N%]")
  folder, start, start_pct, stop, stop_pct = match.groups()
  if start is None:
    return folder, None
  bound = lambda v, pct, n: (None if not v else
                             round(int(v) * n / 100) if pct else int(v))
  if start_pct or stop_pct:
    return folder, lambda n: slice(bound(start, start_pct, n),
                                   bound(stop, stop_pct, n))
  return folder, slice(bound(start, "", 0), bound(stop, "", 0))


def _builder(name: str, data_dir):
  try:
    return tfds.builder(name, data_dir=data_dir)
  except tfds.core.DatasetNotFoundError as e:
    raise DatasetUnavailableError(
        f"{name!r} is not a registered tfds dataset (check the spelling; "
        f"'fashion_mnist_local' needs `import ssljax.data`).") from e


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



def steps_per_epoch(num_examples: int, batch_size: int) -> int:
  """Number of full batches per epoch (the remainder is dropped).

  Raises:
    ValueError: if batch_size < 1 or batch_size > num_examples.
  """
  if not 1 <= batch_size <= num_examples:
    raise ValueError(f"batch_size must be in [1, num_examples={num_examples}], "
                     f"got {batch_size}")
  return num_examples // batch_size
