"""The tfds builder ``fashion_mnist_local``: Fashion-MNIST from the IDX files.

Importing this module imports tensorflow-datasets (the ``tfds`` extra) and
registers the builder. Training does not need it: `ssljax.data.open_split`
reads ``fashion_mnist_local`` from the IDX files with NumPy when it is held
in memory. The builder is for a tfds copy of the data, e.g. ArrayRecord
files to stream (``dataset.in_memory="no"``), prepared offline from the
same files (`ssljax.data.fashion_mnist.find_fashion_mnist_files`).
Preparing it writes encoded images, which may need TensorFlow, depending on
the tensorflow-datasets version.
"""

import pathlib

import tensorflow_datasets as tfds

from ssljax.data import fashion_mnist

_ENV_VAR = fashion_mnist.FASHION_MNIST_ENV_VAR
_DEFAULT_DIR = fashion_mnist.DEFAULT_FASHION_MNIST_DIR

__all__ = ["FashionMnistLocal"]

_CITATION = """\
@article{xiao2017fashionmnist,
  author  = {Han Xiao and Kashif Rasul and Roland Vollgraf},
  title   = {Fashion-MNIST: a Novel Image Dataset for Benchmarking Machine
             Learning Algorithms},
  journal = {arXiv preprint arXiv:1708.07747},
  year    = {2017},
}
"""


class _LocalInfo(tfds.core.DatasetInfo):
  """The DatasetInfo of a builder that tfds's GCS bucket does not hold.

  Before the data is prepared, tfds looks for a builder's metadata in that
  bucket, copying into a new ``tempfile.mkdtemp("tfds")`` folder that it
  never removes; for this builder, and offline, the folder stayed empty, one
  per builder made. The lookup is skipped.
  """

  def initialize_from_bucket(self) -> None:
    pass


class FashionMnistLocal(tfds.core.GeneratorBasedBuilder):
  """Fashion-MNIST from the local IDX files; same features as ``fashion_mnist``."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release, read offline from IDX files."}
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "Install the IDX files with `sudo apt-get install -y dataset-fashion-mnist`"
      f" (into {_DEFAULT_DIR}), or set ${_ENV_VAR}, or"
      " copy the four *-ubyte.gz files into the manual dir.")

  def _info(self) -> tfds.core.DatasetInfo:
    return _LocalInfo(
        builder=self,
        description=(
            "Fashion-MNIST: 70,000 28x28 grayscale images of Zalando articles in"
            " 10 classes (60,000 train, 10,000 test), read offline from the"
            " original IDX files."),
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=fashion_mnist.IMAGE_SHAPE + (1,)),
            "label": tfds.features.ClassLabel(
                names=list(fashion_mnist.CLASS_NAMES)),
        }),
        supervised_keys=("image", "label"),
        homepage="https://github.com/zalandoresearch/fashion-mnist",
        citation=_CITATION,
    )

  def _split_generators(self, dl_manager):
    try:
      manual_dir = dl_manager.manual_dir
    except AssertionError:  # tfds' way of saying the manual dir is absent/empty.
      manual_dir = None
    directory = fashion_mnist.find_fashion_mnist_files(manual_dir)
    if directory is None:
      raise FileNotFoundError(
          "Fashion-MNIST IDX files not found in the manual dir, "
          f"${_ENV_VAR} or {_DEFAULT_DIR}. "
          + self.MANUAL_DOWNLOAD_INSTRUCTIONS)
    return {split: self._generate_examples(directory, split)
            for split in fashion_mnist.FASHION_MNIST_FILES}

  def _generate_examples(self, directory: pathlib.Path, split: str):
    images, labels = fashion_mnist.read_split(directory, split)
    # The index is the key: deterministic and equal to the file order.
    for index, (image, label) in enumerate(zip(images, labels)):
      yield index, {"image": image[..., None], "label": int(label)}
