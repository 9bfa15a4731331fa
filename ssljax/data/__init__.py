"""Data: sources, the streaming input pipeline, the view recipe.

Importing this package imports neither TensorFlow nor tensorflow-datasets:
``fashion_mnist_local`` is read from its IDX files with NumPy, and tfds is
imported when a tfds dataset is opened (or ``FashionMnistLocal``, the tfds
builder of the same data, is used).
`ssljax.data.splits` opens a split as a source (`ssljax.data.sources`),
which gives random access to it; `ssljax.data.batches` turns one into host
batches keyed by (seed, step); the views (`ssljax.data.views`,
`ssljax.data.view_ops`, `ssljax.data.crops`) are made from them on the
devices.
"""

from ssljax.data.batches import epoch_permutation
from ssljax.data.batches import AUTO_WORKERS
from ssljax.data.batches import eval_batches
from ssljax.data.batches import host_workers
from ssljax.data.batches import read_options
from ssljax.data.batches import step_indices
from ssljax.data.batches import train_batches
from ssljax.data.edges import edge_batches
from ssljax.data.edges import edge_tables
from ssljax.data.edges import sample_edges
from ssljax.data.fashion_mnist import DEFAULT_FASHION_MNIST_DIR
from ssljax.data.fashion_mnist import find_fashion_mnist_files
from ssljax.data.sources import ArraySource
from ssljax.data.sources import DatasetUnavailableError
from ssljax.data.sources import ImageFolderSource
from ssljax.data.sources import TfdsSource
from ssljax.data.sources import source_labels
from ssljax.data.splits import IN_MEMORY_MODES
from ssljax.data.splits import folder_split
from ssljax.data.splits import load_split
from ssljax.data.splits import open_split
from ssljax.data.splits import steps_per_epoch
from ssljax.data.views import ViewSpec
from ssljax.data.views import device_views
from ssljax.data.views import view_spec

__all__ = [
    "AUTO_WORKERS",
    "ArraySource",
    "DEFAULT_FASHION_MNIST_DIR",
    "DatasetUnavailableError",
    "FashionMnistLocal",
    "IN_MEMORY_MODES",
    "ImageFolderSource",
    "TfdsSource",
    "ViewSpec",
    "device_views",
    "edge_batches",
    "edge_tables",
    "epoch_permutation",
    "eval_batches",
    "host_workers",
    "read_options",
    "find_fashion_mnist_files",
    "folder_split",
    "load_split",
    "open_split",
    "sample_edges",
    "source_labels",
    "step_indices",
    "steps_per_epoch",
    "train_batches",
    "view_spec",
]


def __getattr__(name):
  if name == "FashionMnistLocal":  # imports tensorflow-datasets
    from ssljax import extras  # pylint: disable=import-outside-toplevel
    return extras.import_module("ssljax.data.fashion_mnist_tfds",
                                "ssljax.data.FashionMnistLocal").FashionMnistLocal
  raise AttributeError(f"module 'ssljax.data' has no attribute {name!r}")
