"""The `EvalContext` of a run: features, view embeddings and pixels on demand.

Built once by the train loop (`make_context`); the evaluators call its
functions. Features are extracted once per (state, split) and shared by every
evaluator due at the same step; only the latest state's are kept.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from ssljax import data, probes
from ssljax.data import crops
from ssljax.evaluators.base import EvalContext

__all__ = ["make_context", "state_fingerprint"]


def state_fingerprint(state) -> tuple:
  """(step, a few parameter values): tells apart the states the evaluators
  see (the trained state at each step, the random initialisation)."""
  leaf = np.asarray(jax.device_get(jax.tree.leaves(state.params)[0])).ravel()
  return (int(jax.device_get(state.step)),) + tuple(
      float(x) for x in leaf[:4])


def make_context(config, mesh, *, train_source, test_source, total_steps: int,
                 initial_state, view_size: int, seed: int,
                 shown: bool = True, announce=print) -> EvalContext:
  """The run's `EvalContext`.

  Args:
    config: the run's ConfigDict (``eval.batch_size``, ``eval.crop_fraction``,
      ``eval.view_samples``, ``views``).
    mesh: the run's mesh.
    train_source, test_source: the run's sources (`ssljax.data.sources`).
    total_steps: train steps of the run.
    initial_state: callable returning the random-initialisation state.
    view_size: side of the global views (and of the evaluation crops).
    seed: the run's seed (fixes the view-embedding sample and its views).
    shown: process 0 (progress bars).
    announce: prints one line (e.g. when the probe splits are unusual).

  Returns:
    the `EvalContext`; ``features`` is None when no split is labelled.
  """
  splits = probes.probe_splits(train_source, test_source, seed=seed,
                                 announce=announce)
  cache = {}

  def features(state, split):
    if splits is None:
      raise ValueError("no labelled split: features are unavailable")
    if split not in ("train", "test"):
      raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    key = (state_fingerprint(state), split)
    if key not in cache:
      # Only the latest state's features are kept (its two splits): the
      # train loop runs every evaluator of one state before the next state,
      # so an older state's (N, D) arrays would only hold memory.
      for old in [k for k in cache if k[0] != key[0]]:
        del cache[old]
      source, rows = splits[:2] if split == "train" else splits[2:]
      labels = []

      def chunks():
        for images, chunk_labels in data.eval_batches(
            source, batch_size=config.eval_inputs.batch_size, size=view_size,
            crop_fraction=config.eval_inputs.crop_fraction):
          labels.append(chunk_labels)
          yield images

      f = probes.extract_features(
          state, chunks(), config.eval_inputs.batch_size, mesh,
          desc=f"features ({split}, step {int(state.step)})" if shown else None,
          total=-(-len(source) // config.eval_inputs.batch_size))
      y = np.concatenate(labels).astype(np.int32)
      cache[key] = (f, y) if rows is None else (f[rows], y[rows])
    return cache[key]

  spec = data.view_spec(config.views)
  spec_global = dataclasses.replace(spec, num_local=0)
  num = min(config.eval_inputs.view_samples, len(train_source))
  num -= num % mesh.size
  rows = np.sort(np.random.default_rng([seed, 3]).choice(
      len(train_source), num, replace=False))
  view_fn = None
  view_labels = []  # read on first use: only the sampled rows

  def labels_of_views(state):
    del state  # the sample is fixed
    if not view_labels:
      view_labels.append(np.asarray(train_source.read(rows)[1], np.int32))
    return view_labels[0]

  views_cache = {}  # the latest state's (h, z, rows): one forward pass

  def view_embeddings(state):
    key = state_fingerprint(state)
    if key not in views_cache:
      views_cache.clear()
      views_cache[key] = compute_view_embeddings(state)
    return views_cache[key]

  def compute_view_embeddings(state):
    nonlocal view_fn
    if view_fn is None:
      def fn(s, images, key):
        views = data.device_views({"images": images}, key, spec_global)
        outs = [s.method.embedding(s.params, s.method_state, x)
                for x in views]
        stack = lambda i: jax.numpy.stack([o[i] for o in outs])
        return stack(0), stack(1)
      view_fn = jax.jit(fn, out_shardings=NamedSharding(mesh, P()))
    images, _ = train_source.read(rows)
    shape = train_source.image_shape
    if shape is None or view_size not in (0, shape[0]):
      images = np.stack([crops.center_crop(x, view_size,
                                           config.eval_inputs.crop_fraction)
                         for x in images])
    images = jax.device_put(np.asarray(images),
                            NamedSharding(mesh, P("data")))
    h, z = view_fn(state, images, jax.random.key(seed + 7))
    return (np.asarray(jax.device_get(h), np.float32),
            np.asarray(jax.device_get(z), np.float32), rows.astype(np.int32))

  def raw_pixels(split):
    if splits is None:
      return None
    source, rows = splits[:2] if split == "train" else splits[2:]
    if not hasattr(source, "images"):
      return None
    images = source.images if rows is None else source.images[rows]
    # uint8, a view of the split: the probe standardises it on the device.
    x = images.reshape(len(images), -1)
    y = data.source_labels(source)
    return (x, y) if rows is None else (x, y[rows])

  def labelled_images(split, rows=None):
    if splits is None:
      raise ValueError("no labelled split: images are unavailable")
    source, split_rows = splits[:2] if split == "train" else splits[2:]
    index = np.arange(len(source)) if split_rows is None else split_rows
    index = index if rows is None else index[np.asarray(rows)]
    images, labels = [], []
    for start in range(0, len(index), 4096):
      x, y = source.read(index[start:start + 4096])
      shape = source.image_shape
      if shape is None or view_size not in (0, shape[0]):
        x = np.stack([crops.center_crop(im, view_size,
                                        config.eval_inputs.crop_fraction)
                      for im in x])
      images.append(np.asarray(x, np.uint8))
      labels.append(np.asarray(y, np.int32))
    return np.concatenate(images), np.concatenate(labels)

  num_classes = 0
  if splits is not None:
    num_classes = int(getattr(splits[0], "num_classes", 0) or 0)
  return EvalContext(config=config, mesh=mesh, total_steps=total_steps,
                     num_classes=num_classes,
                     features=features if splits is not None else None,
                     view_embeddings=view_embeddings, raw_pixels=raw_pixels,
                     initial_state=initial_state, shown=shown,
                     labelled_images=labelled_images,
                     view_labels=labels_of_views)
