"""Data: the offline ``fashion_mnist_local`` tfds builder and the input pipeline.

Importing this package registers the ``fashion_mnist_local`` tfds builder.
"""

from ssljax.data.augment import augment
from ssljax.data.edges import edge_batches
from ssljax.data.edges import edge_tables
from ssljax.data.edges import sample_edges
from ssljax.data.fashion_mnist import DEFAULT_FASHION_MNIST_DIR
from ssljax.data.fashion_mnist import FashionMnistLocal
from ssljax.data.fashion_mnist import find_fashion_mnist_files
from ssljax.data.pipeline import DatasetUnavailableError
from ssljax.data.pipeline import load_split
from ssljax.data.pipeline import steps_per_epoch
from ssljax.data.pipeline import view_batches

__all__ = [
    "DEFAULT_FASHION_MNIST_DIR",
    "DatasetUnavailableError",
    "FashionMnistLocal",
    "augment",
    "edge_batches",
    "edge_tables",
    "find_fashion_mnist_files",
    "load_split",
    "sample_edges",
    "steps_per_epoch",
    "view_batches",
]
