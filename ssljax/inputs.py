"""What a run's config asks of the data: sources, batches, labels, graphs.

The glue between a main-job config and `ssljax.data`: which splits to open
(`open_sources`), the iterator of host batches for the train loop
(`train_iterator`), how each part of a batch is sharded (`batch_shardings`),
and the label and whole-dataset graphs some losses need.
"""

import os

import jax
import ml_collections
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from ssljax import data, deprecation, graphs
from ssljax.data import synthetic

__all__ = ["uses_labels", "uses_edges", "uses_edge_info", "dataset_graph",
           "known_labels", "open_sources", "train_iterator",
           "batch_shardings", "to_device_batch", "skipped_images_warning"]

__getattr__ = deprecation.moved_names(
    __name__, {"source_labels": "ssljax.data.source_labels"})


def _graph_kind(config: ml_collections.ConfigDict) -> str:
  """``config.graph.kind``; "views" for a method without a graph group."""
  return config.graph.kind if "graph" in config else "views"


def uses_labels(config: ml_collections.ConfigDict) -> bool:
  """Whether the loss graph is built from the batch labels."""
  return _graph_kind(config) in ("supervised", "mixed")


def uses_edges(config: ml_collections.ConfigDict) -> bool:
  """Whether batches are edges of a whole-dataset graph (edge_batches)."""
  return _graph_kind(config) in graphs.DATASET_GRAPH_KINDS


def uses_edge_info(config: ml_collections.ConfigDict) -> bool:
  """Whether the loss needs the per-row weights of the edge batches.

  Only the VIC² edge estimate needs the per-row weights; the two-view
  losses see the edge endpoints as ordinary views."""
  return uses_edges(config) and config.loss.form == "graph"


def dataset_graph(config: ml_collections.ConfigDict, images: np.ndarray,
                  labels: np.ndarray) -> graphs.EdgeGraph:
  """The whole-train-set graph of ``config.graph`` as an edge list.

  Args:
    config: run config; graph.kind in graphs.DATASET_GRAPH_KINDS.
    images: uint8 (N, H, W, C) train images (k-NN features).
    labels: int (N,) train labels (supervised graph; −1 hides a label).

  Returns:
    ssljax.graphs.EdgeGraph over the N train rows.

  Raises:
    ValueError: unknown kind or knn_features, bad k / per_node / file.
  """
  g = config.graph
  if g.kind == "dataset_knn":
    if g.knn_features not in ("pixels", "pca"):
      raise ValueError(f"graph.knn_features must be 'pixels' or 'pca', got "
                       f"{g.knn_features!r}")
    pca_dim = g.knn_pca_dim if g.knn_features == "pca" else 0
    features = graphs.pixel_features(images, pca_dim=pca_dim, seed=config.seed)
    return graphs.knn_edges(features, g.knn_k)
  if g.kind == "dataset_supervised":
    return graphs.supervised_edges(known_labels(labels, config),
                                   g.supervised_per_node, seed=config.seed)
  if g.kind == "edge_list":
    if not g.edge_list_path:
      raise ValueError("graph.kind='edge_list' needs graph.edge_list_path")
    return graphs.load_edge_list(g.edge_list_path, len(images))
  raise ValueError(f"graph.kind {g.kind!r} is not a dataset graph; expected "
                   f"one of {graphs.DATASET_GRAPH_KINDS}")


def known_labels(labels: np.ndarray, config: ml_collections.ConfigDict) -> np.ndarray:
  """Train labels with all but a ``config.graph.label_fraction`` of them set to
  −1 (unknown); which ones are kept is a function of ``config.seed`` only."""
  fraction = config.graph.label_fraction
  if not 0.0 <= fraction <= 1.0:
    raise ValueError(f"graph.label_fraction must be in [0, 1], got {fraction}")
  rng = np.random.default_rng([config.seed, 1])  # own stream: not the shuffle's
  hidden = rng.permutation(len(labels))[int(round(fraction * len(labels))):]
  out = np.asarray(labels, np.int32).copy()
  out[hidden] = -1
  return out





def open_sources(config: ml_collections.ConfigDict):
  """The (train, test) sources of ``config.dataset`` (`ssljax.data.open_split`).

  The test source is None for an image folder without a ``test`` folder.
  With ``dataset.generate`` an image folder that does not exist yet is
  first written by `ssljax.data.synthetic.write_image_folder` (smoke runs).

  Raises:
    ssljax.data.DatasetUnavailableError: as `ssljax.data.open_split`.
  """
  d = config.dataset
  if d.name == "image_folder" and d.generate and d.data_dir and (
      jax.process_index() == 0) and not os.path.isdir(
          os.path.join(d.data_dir, data.folder_split(d.train_split)[0])):
    synthetic.write_image_folder(d.data_dir, seed=config.seed,
                                 **dict(d.generate_kwargs))
  open_ = lambda split: data.open_split(
      d.name, split, data_dir=d.data_dir, download=d.download,
      in_memory=d.in_memory, channels=d.channels)
  train = open_(d.train_split)
  try:
    test = open_(d.test_split)
  except data.DatasetUnavailableError:
    if d.name != "image_folder":
      raise
    test = None
  return train, test


def train_iterator(config: ml_collections.ConfigDict, source, spec, *,
                   start_step: int, num_steps: int, process_index: int,
                   process_count: int, graph=None, probe_labels=None):
  """Host batches (dicts, `to_device_batch`) of steps [start, start + num).

  Label keys of every batch:

  * "labels": int32 (B / P,) the true labels of its rows (−1: unlabeled),
    as `ssljax.data` reads them, whatever part of them the loss graph may
    see; the online probe trains on them (`ssljax.train.train_step`).
  * "graph_labels": int32 (B / P,) the labels the loss graph may read
    (`known_labels`: all but ``graph.label_fraction`` of them −1), present
    only when the loss graph is built from labels (`uses_labels`); the
    train step hands them to the method as its batch's "labels" (the batch
    contract of `ssljax.methods.base`).

  Batches of view samples come from `ssljax.data.train_batches`; with a
  whole-dataset graph (``graph`` given) they are edge batches of
  `ssljax.data.edge_batches`: the uint8 endpoint images ("edge_images",
  the views are made from them on the devices by the same engine and keys
  as every other path) and "edge_info" for the VIC² estimate; their
  "labels" are the labels of the first endpoints (view 0).

  ``probe_labels`` is deprecated and ignored (a DeprecationWarning): the
  batches always carry "labels".
  """
  if probe_labels is not None:
    deprecation.warn_moved("ssljax.inputs.train_iterator(probe_labels=...)",
                           "the batches' \"labels\", always present")
  if graph is not None:
    return data.edge_batches(
        source, graph, batch_size=config.batch_size, seed=config.seed,
        start_step=start_step, num_steps=num_steps,
        sampling=config.graph.edge_sampling,
        with_info=uses_edge_info(config), process_index=process_index,
        process_count=process_count, threads=config.dataset.threads,
        prefetch=config.dataset.prefetch, workers=config.dataset.workers)
  batches = data.train_batches(
      source, batch_size=config.batch_size, seed=config.seed, spec=spec,
      start_step=start_step, num_steps=num_steps, process_index=process_index,
      process_count=process_count, threads=config.dataset.threads,
      prefetch=config.dataset.prefetch, workers=config.dataset.workers)
  if not uses_labels(config):
    return batches
  return _with_graph_labels(
      batches, known_labels(data.source_labels(source), config))


def _with_graph_labels(batches, graph_labels):
  """``batches`` with "graph_labels" = ``graph_labels`` (int32 (N,)) of each
  batch's "indices"."""
  for batch in batches:
    batch["graph_labels"] = graph_labels[batch["indices"]]
    yield batch


# The batch axis of each part of a batch.
_BATCH_AXIS = {"images": 0, "labels": 0, "graph_labels": 0, "views": 1,
               "edge_images": 1, "ready_views": 1, "edge_info": 2}


def batch_shardings(batch: dict, mesh) -> dict:
  """NamedShardings of a batch dict: every part sharded on its batch axis."""
  spec = lambda key: NamedSharding(
      mesh, P(*(None,) * _BATCH_AXIS[key], "data"))
  return {k: (tuple(spec(k) for _ in v) if isinstance(v, tuple) else spec(k))
          for k, v in batch.items() if k in _BATCH_AXIS}


def to_device_batch(batch: dict, mesh) -> dict:
  """Global arrays of this process's part of a batch
  (``jax.make_array_from_process_local_data``); "indices" stays behind."""
  batch = {k: v for k, v in batch.items() if k in _BATCH_AXIS}
  return jax.tree.map(jax.make_array_from_process_local_data,
                      batch_shardings(batch, mesh), batch)


def skipped_images_warning(source, reported: int) -> tuple[str | None, int]:
  """A warning line when the source skipped more unreadable images.

  Args:
    source: a source; only `ssljax.data.ImageFolderSource` skips images.
    reported: how many were counted in the last warning.

  Returns:
    (line or None when no new image was skipped, the count now).
  """
  skipped = dict(getattr(source, "skipped", {}))
  if len(skipped) <= reported:
    return None, reported
  first = skipped[min(skipped)]
  return (f"warning: {len(skipped)} unreadable image(s) skipped so far, each "
          f"replaced by the next readable one (first: {first})", len(skipped))
