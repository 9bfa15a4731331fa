"""Opening a split: Fashion-MNIST, tfds datasets (in memory or streamed), image folders.

`open_split` returns the random-access source (`ssljax.data.sources`) that
`ssljax.data.batches` reads; `load_split` decodes a whole split into
memory (small datasets, the whole-dataset graphs); `steps_per_epoch` is the
drop-remainder epoch length every loader uses.

What each needs: "fashion_mnist_local" in memory is read from the IDX files
with NumPy and an image folder with Pillow; any other name is a tfds
dataset, which imports tensorflow-datasets (the ``tfds`` extra) at that
moment. Reading a prepared ArrayRecord split needs no TensorFlow; building
a tfds dataset or reading TFRecord files may, and then the error says so.
"""

import contextlib
import os
import re
import sys

import numpy as np

from ssljax import extras
from ssljax.data import fashion_mnist, sources
from ssljax.data.sources import DatasetUnavailableError

__all__ = ["IN_MEMORY_MODES", "hide_gpus_from_tensorflow", "load_split",
           "open_split", "steps_per_epoch"]


def load_split(name: str, split: str, *, data_dir: str | None = None,
               download: bool = False) -> tuple[np.ndarray, np.ndarray]:
  """Loads a whole split into memory.

  Args:
    name: "fashion_mnist_local" (read from the IDX files in file order, no
      tfds) or a tfds dataset name, e.g. "fashion_mnist".
    split: tfds split string, e.g. "train", "test" or "train[:512]".
    data_dir: tfds data dir; None uses tfds's default (~/tensorflow_datasets).
    download: allow tfds to download and prepare a missing dataset (needs
      internet). Ignored for "fashion_mnist_local", which never downloads.

  Returns:
    images: uint8 (N, H, W, C); labels: int32 (N,).

  Raises:
    DatasetUnavailableError: unknown name; dataset not prepared and
      ``download`` is False; fashion_mnist_local IDX files missing or
      invalid; no image/label features; TensorFlow needed and missing.
    ssljax.extras.MissingExtraError: a tfds name without tensorflow-datasets.
  """
  if name == "fashion_mnist_local":
    return _fashion_mnist(split, data_dir)
  builder = _builder(name, data_dir)
  # is_prepared() only stats <data_dir>/<name>/<version>/dataset_info.json etc.
  if not builder.is_prepared():
    _prepare(builder, download)
  image_key, label_key = _image_label_keys(builder)
  if builder.info.file_format.value == "array_record":
    # No tf.data reader for ArrayRecord: decode through the data source.
    source = sources.TfdsSource(builder, split, image_key, label_key)
    parts = [source.read(range(i, min(i + 4096, len(source))))
             for i in range(0, len(source), 4096)]
    images = np.concatenate([np.asarray(p[0]) for p in parts])
    labels = np.concatenate([p[1] for p in parts])
  else:
    with _tensorflow_needed(f"reading {name!r} (TFRecord files)"):
      tfds = extras.import_module("tensorflow_datasets", f"dataset {name!r}")
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
    name: "image_folder" (images under ``data_dir/<split>``),
      "fashion_mnist_local" (the IDX files) or a tfds name.
    split: tfds split string, or the sub-folder of an image folder.
    data_dir: the tfds data dir (None: tfds's default), or the image folder.
    download: let tfds download and prepare a missing dataset (internet).
    in_memory: tfds datasets (and fashion_mnist_local, whose "auto" and
      "yes" read the IDX files and "no" needs a tfds ArrayRecord copy
      built by `ssljax.data.fashion_mnist_tfds`). "yes": decode the split
      into memory once
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
  if name == "fashion_mnist_local" and in_memory != "no":
    images, labels = _fashion_mnist(split, data_dir)
    return sources.ArraySource(images, labels,
                               len(fashion_mnist.CLASS_NAMES))
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


def _fashion_mnist_files(manual_dir) -> str:
  """The directory holding the Fashion-MNIST IDX files; raises
  DatasetUnavailableError, naming where it looked, when there is none."""
  directory = fashion_mnist.find_fashion_mnist_files(manual_dir)
  if directory is None:
    raise DatasetUnavailableError(
        "fashion_mnist_local: the Fashion-MNIST IDX files were not found in "
        f"{manual_dir}, ${fashion_mnist.FASHION_MNIST_ENV_VAR} or "
        f"{fashion_mnist.DEFAULT_FASHION_MNIST_DIR}. Run `sudo apt-get install"
        " -y dataset-fashion-mnist` or set "
        f"{fashion_mnist.FASHION_MNIST_ENV_VAR} to a directory with them.")
  return directory


def _fashion_mnist(split: str, data_dir):
  """(uint8 (N, 28, 28, 1), int32 (N,)) of a fashion_mnist_local split."""
  match = _FOLDER_SPLIT.match(split)
  if not match or match.group(1) not in fashion_mnist.FASHION_MNIST_FILES:
    raise DatasetUnavailableError(
        f"fashion_mnist_local split {split!r}: expected 'train' or 'test', "
        "optionally sliced as NAME[a:b] or NAME[:N%]")
  folder, rows = folder_split(split)
  root = data_dir or os.environ.get("TFDS_DATA_DIR") or os.path.expanduser(
      "~/tensorflow_datasets")  # tfds's default data dir
  manual_dir = os.path.join(root, "downloads", "manual")
  directory = _fashion_mnist_files(manual_dir)
  try:
    images, labels = fashion_mnist.read_split(directory, folder)
  except ValueError as e:
    raise DatasetUnavailableError(f"fashion_mnist_local: {e}") from e
  if rows is not None:
    rows = rows(len(images)) if callable(rows) else rows
    images, labels = images[rows], labels[rows]
  return images[..., None], labels.astype(np.int32)


@contextlib.contextmanager
def _tensorflow_needed(what: str):
  """Around a tfds call that may use TensorFlow: imports TensorFlow (if
  installed) first and hides the GPUs from it, which JAX needs; turns a
  missing TensorFlow into one DatasetUnavailableError."""
  hide_gpus_from_tensorflow(import_it=True)
  try:
    yield
  except ImportError as e:
    if _tensorflow_missing(e):
      raise DatasetUnavailableError(
          f"{what} needs TensorFlow, which is not installed: pip install "
          "tensorflow-cpu (reading prepared ArrayRecord files does not)"
      ) from e
    raise


def _tensorflow_missing(exc: BaseException) -> bool:
  """Whether ``exc`` or an error in its chain is TensorFlow's absence (tfds
  re-raises it with another message and without the module's name)."""
  seen = set()
  while exc is not None and id(exc) not in seen:
    seen.add(id(exc))
    name = getattr(exc, "name", None) or ""
    if (name == "tensorflow" or name.startswith("tensorflow.")
        or re.search(r"No module named '?tensorflow[.']", str(exc))):
      return True
    exc = exc.__cause__ or exc.__context__
  return False


def hide_gpus_from_tensorflow(import_it: bool = False) -> bool:
  """Makes TensorFlow see no GPU (it only reads data; JAX needs the GPUs).

  Acts only if TensorFlow is already imported, or, with ``import_it``,
  installed; never fails (TensorFlow refuses once its devices are set up).

  Returns:
    whether TensorFlow is imported now.
  """
  if "tensorflow" not in sys.modules:
    if not import_it:
      return False
    try:
      import tensorflow  # pylint: disable=import-outside-toplevel,unused-import  # noqa: F401
    except ImportError:
      return False
  try:
    sys.modules["tensorflow"].config.set_visible_devices([], "GPU")
  except (RuntimeError, AttributeError):
    pass
  return True


def _builder(name: str, data_dir):
  tfds = extras.import_module("tensorflow_datasets", f"dataset {name!r}")
  if name == "fashion_mnist_local":  # registers the builder
    extras.import_module("ssljax.data.fashion_mnist_tfds", f"dataset {name!r}")
  try:
    return tfds.builder(name, data_dir=data_dir)
  except tfds.core.DatasetNotFoundError as e:
    raise DatasetUnavailableError(
        f"{name!r} is not a registered tfds dataset (check the spelling)."
    ) from e


def _prepare(builder, download: bool) -> None:
  """Prepares ``builder`` offline (fashion_mnist_local) or, if allowed, online."""
  root = builder.data_dir_root
  if builder.name == "fashion_mnist_local":
    manual_dir = root / "downloads" / "manual"  # tfds's default manual dir.
    _fashion_mnist_files(manual_dir)
  elif not download:
    # Fail now: offline, tfds would retry the download for minutes.
    raise DatasetUnavailableError(
        f"Dataset {builder.name!r} is not prepared in data_dir {root} (looked "
        f"for {builder.data_dir}) and downloading is disabled. Either prepare "
        f"it with `tfds build {builder.name} --data_dir {root}`, copy a "
        "prepared copy there, or pass --config.dataset.download=True on a "
        "machine with internet access.")
  with _tensorflow_needed(f"building the tfds dataset {builder.name!r}"):
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
