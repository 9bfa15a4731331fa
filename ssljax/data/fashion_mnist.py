"""Fashion-MNIST ``fashion_mnist_local``: the original IDX files read with NumPy.

Where the data comes from: Zalando's Fashion-MNIST (Xiao, Rasul & Vollgraf
2017) as the four original gzipped IDX files

    train-images-idx3-ubyte.gz  train-labels-idx1-ubyte.gz
    t10k-images-idx3-ubyte.gz   t10k-labels-idx1-ubyte.gz

On Debian/Ubuntu install them with

    sudo apt-get install -y dataset-fashion-mnist

which puts them in ``/usr/share/datasets/fashion-mnist`` (``DEFAULT_FASHION_MNIST_DIR``).
The files are looked for, in order, in ``<data_dir>/downloads/manual`` (the
tfds manual dir), then in ``$SSLJAX_FASHION_MNIST_DIR`` if that variable is
set, else in ``DEFAULT_FASHION_MNIST_DIR``; nothing touches the network.
`ssljax.data.open_split` reads a split into memory from them directly, in
file order, with neither TensorFlow nor tensorflow-datasets. The same data
as a tfds dataset (e.g. ArrayRecord files to stream) is the builder
`ssljax.data.fashion_mnist_tfds.FashionMnistLocal`, whose features, class
names and splits are those of tfds's official ``fashion_mnist``.
"""

import gzip
import os
import pathlib
import zlib

import numpy as np

__all__ = [
    "CLASS_NAMES",
    "DEFAULT_FASHION_MNIST_DIR",
    "FASHION_MNIST_ENV_VAR",
    "FASHION_MNIST_FILES",
    "find_fashion_mnist_files",
    "read_split",
]

DEFAULT_FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_ENV_VAR = "SSLJAX_FASHION_MNIST_DIR"
# split -> (images file, labels file)
FASHION_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
# Label names, index = label (Xiao, Rasul & Vollgraf 2017, arXiv 1708.07747).
CLASS_NAMES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)
IMAGE_SHAPE = (28, 28)
# IDX magic numbers: 0x0000 then dtype 0x08 (unsigned byte) then the rank.
_IMAGES_MAGIC = 0x00000803
_LABELS_MAGIC = 0x00000801

def find_fashion_mnist_files(directory=None) -> pathlib.Path | None:
  """Returns the first directory holding all four Fashion-MNIST IDX files.

  Candidates, in order: ``directory`` (if given), then ``$SSLJAX_FASHION_MNIST_DIR``
  if set, else ``DEFAULT_FASHION_MNIST_DIR``. A set environment variable is
  authoritative: the default is not tried behind its back, so a wrong setting
  fails loudly instead of silently reading other files.

  Args:
    directory: optional str or path-like searched first (e.g. a tfds manual dir).

  Returns:
    The directory as a ``pathlib.Path``, or None if no candidate has all files.
  """
  candidates = [] if directory is None else [pathlib.Path(directory)]
  candidates.append(pathlib.Path(
      os.environ.get(FASHION_MNIST_ENV_VAR) or DEFAULT_FASHION_MNIST_DIR))
  names = [name for pair in FASHION_MNIST_FILES.values() for name in pair]
  for candidate in candidates:
    if all((candidate / name).is_file() for name in names):
      return candidate
  return None


def _read_idx(path, expected_magic: int) -> np.ndarray:
  """Reads one gzipped IDX file of unsigned bytes.

  Args:
    path: str or path-like of a ``*.gz`` IDX file.
    expected_magic: ``_IMAGES_MAGIC`` (rank 3) or ``_LABELS_MAGIC`` (rank 1).

  Returns:
    uint8 array with the dims stored in the header, e.g. (N, 28, 28) or (N,).

  Raises:
    ValueError: naming the file if the magic number or the payload size does
      not match the header, or the file is not valid gzip.
  """
  try:
    with gzip.open(path, "rb") as f:
      raw = f.read()
  except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError.
    raise ValueError(f"{path}: not a readable gzip file ({e})") from e
  if len(raw) < 4:
    raise ValueError(f"{path}: too short for an IDX header ({len(raw)} bytes)")
  magic = int(np.frombuffer(raw, ">u4", count=1)[0])
  if magic != expected_magic:
    raise ValueError(
        f"{path}: bad IDX magic number {magic:#010x}, expected "
        f"{expected_magic:#010x}; the file is corrupt or not this kind of IDX")
  rank = magic & 0xFF
  header = 4 + 4 * rank
  if len(raw) < header:
    raise ValueError(f"{path}: truncated IDX header")
  dims = tuple(int(d) for d in np.frombuffer(raw, ">u4", count=rank, offset=4))
  if len(raw) - header != int(np.prod(dims)):
    raise ValueError(
        f"{path}: header says dims {dims} ({int(np.prod(dims))} bytes) but the "
        f"payload has {len(raw) - header} bytes")
  return np.frombuffer(raw, np.uint8, offset=header).reshape(dims)


def read_split(directory: pathlib.Path, split: str):
  """Reads one split of the IDX files, validated.

  Args:
    directory: folder holding the four Fashion-MNIST IDX .gz files.
    split: "train" or "test".

  Returns:
    (images uint8 (N, 28, 28), labels uint8 (N,)) as NumPy arrays.

  Raises:
    KeyError: for an unknown split. ValueError: a file is not a valid IDX
      file, image shape is not 28 × 28, counts differ or a label is >= 10.
  """
  images_name, labels_name = FASHION_MNIST_FILES[split]
  images = _read_idx(directory / images_name, _IMAGES_MAGIC)
  labels = _read_idx(directory / labels_name, _LABELS_MAGIC)
  if images.shape[1:] != IMAGE_SHAPE:
    raise ValueError(f"{directory / images_name}: images have shape "
                     f"{images.shape[1:]}, expected {IMAGE_SHAPE}")
  if len(images) != len(labels):
    raise ValueError(f"{directory / labels_name}: {len(labels)} labels for "
                     f"{len(images)} images in {images_name}")
  if labels.size and labels.max() >= len(CLASS_NAMES):
    raise ValueError(f"{directory / labels_name}: label {labels.max()} is out "
                     f"of range [0, {len(CLASS_NAMES)})")
  return images, labels
