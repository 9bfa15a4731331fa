"""Random-access image sources: a split in memory, a tfds ArrayRecord split, a folder.

A source is what the input pipeline reads records from. Every source has

* ``len(source)``: the number of examples N;
* ``image_shape``: (H, W, C) when every image has that shape, else None (the
  images of a folder or of ImageNet differ in size and are cropped to a
  fixed size on the host, as they are decoded);
* ``num_classes``: the number of classes, or None for unlabeled data;
* ``read(indices) -> (images, labels)``: uint8 images, an (n, H, W, C) array
  when ``image_shape`` is set and a list of (H_i, W_i, C) arrays otherwise,
  and int32 labels (n,) (−1 where unknown). Reads are thread-safe.

`ArraySource` holds a split that fits in memory (decoded once);
`TfdsSource` reads a prepared tfds split lazily from its ArrayRecord files
(tfds's random-access data source), so host memory does not grow with the
dataset; `ImageFolderSource` decodes ``DIR/<class>/*.{jpg,jpeg,png}`` (or
``DIR/*.{jpg,...}`` without labels) with Pillow.
"""

import os
import pathlib
import threading

import numpy as np

__all__ = ["ArraySource", "DatasetUnavailableError", "ImageFolderSource",
           "TfdsSource", "IMAGE_SUFFIXES", "source_labels"]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


class DatasetUnavailableError(ValueError):
  """The dataset is unknown, not prepared offline, or has no image/label."""


class ArraySource:
  """A split held in memory as one uint8 array (small datasets).

  Args:
    images: uint8 (N, H, W, C).
    labels: integer (N,) or None (unlabeled: every label −1).
    num_classes: number of classes (default: max label + 1; None if unlabeled).

  Raises:
    ValueError: images not uint8 rank 4, or labels of another length.
  """

  def __init__(self, images: np.ndarray, labels: np.ndarray | None = None,
               num_classes: int | None = None):
    if not (isinstance(images, np.ndarray) and images.dtype == np.uint8
            and images.ndim == 4):
      raise ValueError("images must be a uint8 numpy array (N, H, W, C), got "
                       f"{type(images).__name__} "
                       f"{getattr(images, 'dtype', None)} "
                       f"{getattr(images, 'shape', None)}")
    if labels is not None and np.shape(labels) != images.shape[:1]:
      raise ValueError(f"labels must have shape ({len(images)},), got "
                       f"{np.shape(labels)}")
    self.images = images
    self.labels = (np.full(len(images), -1, np.int32) if labels is None
                   else np.asarray(labels, np.int32))
    self.image_shape = tuple(images.shape[1:])
    if num_classes is None and labels is not None and len(images):
      num_classes = int(self.labels.max()) + 1
    self.num_classes = num_classes

  def __len__(self) -> int:
    return len(self.images)

  def read(self, indices):
    """uint8 (n, H, W, C) images and int32 (n,) labels of ``indices``."""
    indices = np.asarray(indices)
    return self.images[indices], self.labels[indices]


class TfdsSource:
  """A prepared tfds split read lazily, record by record, from ArrayRecord.

  Args:
    builder: a ``tfds.core.DatasetBuilder`` prepared with
      ``file_format="array_record"``.
    split: tfds split string ("train", "train[:10%]", ...).
    image_key, label_key: feature names (label_key None: unlabeled).

  Raises:
    ssljax.data.DatasetUnavailableError: the split is stored as TFRecord
      (no random access) or the builder has no such split.
  """

  def __init__(self, builder, split: str, image_key: str = "image",
               label_key: str | None = "label"):
    try:
      self._data = builder.as_data_source(split=split)
    except NotImplementedError as e:
      raise DatasetUnavailableError(
          f"{builder.name!r} is prepared in {builder.data_dir} as "
          f"{builder.info.file_format.value}, which has no random access; the"
          " streaming pipeline reads ArrayRecord. Prepare it with `tfds build "
          f"{builder.name} --file_format=array_record --data_dir "
          f"{builder.data_dir_root}` (or set dataset.in_memory=True if it "
          "fits in memory).") from e
    self._image_key, self._label_key = image_key, label_key
    feature = builder.info.features[image_key]
    shape = tuple(feature.shape)
    self.image_shape = shape if None not in shape else None
    self.num_classes = (builder.info.features[label_key].num_classes
                        if label_key else None)

  def __len__(self) -> int:
    return len(self._data)

  def read(self, indices):
    """Images (array if fixed-shape, else list) and int32 labels of ``indices``."""
    records = self._data.__getitems__([int(i) for i in indices])
    images = [np.asarray(r[self._image_key], np.uint8) for r in records]
    labels = np.asarray([r[self._label_key] if self._label_key else -1
                         for r in records], np.int32)
    return (np.stack(images) if self.image_shape else images), labels


class ImageFolderSource:
  """Images under a directory, decoded with Pillow on every read.

  Layouts: ``root/<class>/<file>`` (labels are the sorted class folder names'
  indices) or ``root/<file>`` (unlabeled: labels −1). Files ending in .jpg,
  .jpeg or .png (any case) are images; others are ignored. The order is the
  sorted relative paths, so index i is the same image on every host.

  Conversion: every image is converted to ``channels`` channels with Pillow
  (3: grey is replicated and the alpha channel of RGBA/LA images is dropped;
  1: ITU-R 601 luma), so folders of mixed modes train as one dataset. Images
  keep their own size: the host crop resizes each crop to the view size, so
  an image smaller than a crop is upsampled.

  A file that cannot be decoded (corrupt or truncated) is replaced by the
  next readable image in index order and counted in ``skipped``; the loader
  warns with the count, and training never stops on it.

  Args:
    root: directory path.
    channels: 1 or 3.
    rows: a slice of the sorted files to keep (e.g. ``slice(0, 512)``: the
      first 512) or a function of the file count that returns one, None:
      all; class labels are those of the whole folder.

  Raises:
    ssljax.data.DatasetUnavailableError: root is missing, holds no image, or
      has images both in class folders and at the top level, or ``rows``
      selects none.
    ValueError: channels not 1 or 3.
  """

  reads_pil = True  # read(..., as_pil=True): the host crops' input

  def __init__(self, root, channels: int = 3, rows=None):
    if channels not in (1, 3):
      raise ValueError(f"channels must be 1 or 3, got {channels}")
    root = pathlib.Path(root)
    if not root.is_dir():
      raise DatasetUnavailableError(f"image folder {str(root)!r} does not exist")
    # Relative paths as plain strings (os.walk, not pathlib): the index is
    # the one thing held per image, ~100 bytes each.
    files = []
    for directory, _, names in os.walk(root):
      rel = os.path.relpath(directory, root)
      files.extend(name if rel == "." else os.path.join(rel, name)
                   for name in names
                   if os.path.splitext(name)[1].lower() in IMAGE_SUFFIXES)
    files.sort()
    if not files:
      raise DatasetUnavailableError(
          f"image folder {str(root)!r} has no {'/'.join(IMAGE_SUFFIXES)} files")
    tops = [f.split(os.sep, 1) for f in files]
    depths = {len(t) for t in tops}
    if depths == {1}:
      classes, labels = (), np.full(len(files), -1, np.int32)
    elif 1 not in depths:
      classes = tuple(sorted({t[0] for t in tops}))
      index = {c: i for i, c in enumerate(classes)}
      labels = np.asarray([index[t[0]] for t in tops], np.int32)
    else:
      raise DatasetUnavailableError(
          f"image folder {str(root)!r} mixes images in class folders with "
          "images at its top level; put every image in a class folder or none")
    if rows is not None:
      rows = rows(len(files)) if callable(rows) else rows
      files, labels = files[rows], labels[rows]
      if not files:
        raise DatasetUnavailableError(
            f"image folder {str(root)!r}: the slice {rows} keeps no image")
    self.root, self.files, self.labels = root, files, labels
    del tops
    self.classes = classes
    self.num_classes = len(classes) or None
    self.image_shape = None
    self.channels = channels
    self.skipped: dict[int, str] = {}  # index -> reason, of unreadable files
    self._lock = threading.Lock()

  def __len__(self) -> int:
    return len(self.files)

  def __getstate__(self) -> dict:
    """Everything but the lock (worker processes get a copy)."""
    state = dict(self.__dict__)
    del state["_lock"]
    return state

  def __setstate__(self, state: dict):
    self.__dict__.update(state)
    self._lock = threading.Lock()

  def decode(self, index: int, *, as_pil: bool = False):
    """Image of file ``index``: uint8 (H, W, channels), or with ``as_pil``
    the decoded Pillow image in mode "RGB" / "L" (no copy into numpy: the
    host crops read it as it is, `ssljax.data.crops.host_crop`).

    Raises:
      OSError / ValueError: Pillow cannot decode the file.
    """
    from PIL import Image  # pylint: disable=import-outside-toplevel
    mode = "RGB" if self.channels == 3 else "L"
    with Image.open(os.path.join(self.root, self.files[index])) as im:
      # convert() copies even an image already in ``mode``: 0.1 ms of a
      # 384 px JPEG's 0.9 ms decode.
      if im.mode != mode:
        im = im.convert(mode)
      else:
        im.load()
      if as_pil:
        return im
      array = np.asarray(im, np.uint8)
    return array if array.ndim == 3 else array[..., None]

  def read(self, indices, *, as_pil: bool = False):
    """List of images (uint8 arrays, or Pillow images with ``as_pil``) and
    int32 labels; unreadable files are replaced."""
    images, labels = [], []
    for i in indices:
      i = int(i)
      for _ in range(len(self.files)):
        try:
          images.append(self.decode(i, as_pil=as_pil))
          labels.append(self.labels[i])
          break
        except (OSError, ValueError, SyntaxError) as e:  # PIL's decode errors
          with self._lock:
            self.skipped.setdefault(i, f"{self.files[i]}: {e}")
          i = (i + 1) % len(self.files)
      else:
        raise DatasetUnavailableError(
            f"no image in {str(self.root)!r} could be decoded")
    return images, np.asarray(labels, np.int32)


def source_labels(source) -> np.ndarray:
  """int32 (N,) labels of every example of a source (−1: unlabeled).

  In-memory and folder sources hold them; a streamed tfds split is read
  once, in chunks of 4,096 examples.

  Args:
    source: a source of this module (``len`` and ``read(indices) ->
      (images, labels)``, or a ``labels`` attribute).
  """
  if hasattr(source, "labels"):
    return np.asarray(source.labels, np.int32)
  chunks = [source.read(range(i, min(i + 4096, len(source))))[1]
            for i in range(0, len(source), 4096)]
  return np.concatenate(chunks or [np.zeros(0, np.int32)])
