"""The `EvalContext` of a run: features, view embeddings and pixels on demand.

Built once by the train loop (`RunContext`); the evaluators call its
functions. Features are extracted once per (state, split) and shared by every
evaluator due at the same step; only the latest state's are kept.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from ssljax import data, deprecation, probes
from ssljax.data import crops
from ssljax.evaluators.base import EvalContext

__all__ = ["RunContext", "state_fingerprint"]

__getattr__ = deprecation.moved_names(
    __name__, {"make_context": "ssljax.evaluators.context.RunContext"})

# Rows read from a source at a time by ``labelled_images``.
_READ_CHUNK = 4096


def state_fingerprint(state) -> tuple:
  """(step, a few parameter values): tells apart the states the evaluators
  see (the trained state at each step, the random initialisation)."""
  leaf = np.asarray(jax.device_get(jax.tree.leaves(state.params)[0])).ravel()
  return (int(jax.device_get(state.step)),) + tuple(
      float(x) for x in leaf[:4])


class RunContext(EvalContext):
  """The run's `EvalContext`: its functions are this object's methods.

  The evaluators see the fields of `ssljax.evaluators.base.EvalContext`
  (``ctx.features(state, split)``, ``ctx.view_embeddings(state)``, ...);
  each is a bound method of this object, which holds what they share: the
  probe splits, the fixed view-embedding sample, the caches of the latest
  state's features and embeddings, and the jitted view program.

  Args:
    config: the run's ConfigDict (``eval_inputs.batch_size``,
      ``eval_inputs.crop_fraction``, ``eval_inputs.view_samples``,
      ``views``).
    mesh: the run's mesh.
    train_source, test_source: the run's sources (`ssljax.data.sources`).
    total_steps: train steps of the run.
    initial_state: callable returning the random-initialisation state.
    view_size: side of the global views (and of the evaluation crops).
    seed: the run's seed (fixes the view-embedding sample and its views).
    spec: the run's `ssljax.data.ViewSpec` (None: built from
      ``config.views``).
    shown: process 0 (progress bars).
    announce: prints one line (e.g. when the probe splits are unusual).

  ``features`` is None when no split is labelled. The constructor reads the
  split sizes (`ssljax.probes.probe_splits`) but no image.
  """

  def __init__(self, config, mesh, *, train_source, test_source,
               total_steps: int, initial_state, view_size: int, seed: int,
               spec: data.ViewSpec | None = None, shown: bool = True,
               announce=print):
    self._splits = probes.probe_splits(train_source, test_source, seed=seed,
                                       announce=announce)
    self._train_source, self._view_size, self._seed = (train_source,
                                                       view_size, seed)
    spec = data.view_spec(config.views) if spec is None else spec
    self._spec_global = dataclasses.replace(spec, num_local=0)
    num = min(config.eval_inputs.view_samples, len(train_source))
    num -= num % mesh.size
    self._view_rows = np.sort(np.random.default_rng([seed, 3]).choice(
        len(train_source), num, replace=False))
    self._features_cache = {}  # the latest state's (F, y) per split
    self._views_cache = {}  # the latest state's (h, z, rows)
    self._view_labels = None  # read on first use: only the sampled rows
    self._view_program = None  # jitted on first use
    num_classes = 0
    if self._splits is not None:
      num_classes = int(getattr(self._splits[0], "num_classes", 0) or 0)
    super().__init__(
        config=config, mesh=mesh, total_steps=total_steps,
        num_classes=num_classes,
        features=self._features if self._splits is not None else None,
        view_embeddings=self._view_embeddings, raw_pixels=self._raw_pixels,
        initial_state=initial_state, shown=shown,
        labelled_images=self._labelled_images,
        view_labels=self._labels_of_views)

  def __repr__(self) -> str:
    return (f"RunContext(total_steps={self.total_steps}, "
            f"num_classes={self.num_classes}, "
            f"view_samples={len(self._view_rows)})")

  def _split(self, split: str):
    """(source, rows or None) of the probe's "train" or "test" split."""
    return self._splits[:2] if split == "train" else self._splits[2:]

  def _features(self, state, split):
    if self._splits is None:
      raise ValueError("no labelled split: features are unavailable")
    if split not in ("train", "test"):
      raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    key = (state_fingerprint(state), split)
    cache = self._features_cache
    if key not in cache:
      # Only the latest state's features are kept (its two splits): the
      # train loop runs every evaluator of one state before the next state,
      # so an older state's (N, D) arrays would only hold memory.
      for old in [k for k in cache if k[0] != key[0]]:
        del cache[old]
      cache[key] = self._extract_features(state, split)
    return cache[key]

  def _extract_features(self, state, split):
    """(F, y) of ``split``: one pass of the encoder over its centre crops."""
    source, rows = self._split(split)
    f, y = probes.source_features(
        state, source, batch_size=self.config.eval_inputs.batch_size,
        size=self._view_size,
        crop_fraction=self.config.eval_inputs.crop_fraction, mesh=self.mesh,
        desc=(f"features ({split}, step {int(state.step)})" if self.shown
              else None))
    return (f, y) if rows is None else (f[rows], y[rows])

  def _labels_of_views(self, state):
    del state  # the sample is fixed
    if self._view_labels is None:
      self._view_labels = np.asarray(
          self._train_source.read(self._view_rows)[1], np.int32)
    return self._view_labels

  def _view_embeddings(self, state):
    key = state_fingerprint(state)
    if key not in self._views_cache:
      self._views_cache.clear()
      self._views_cache[key] = self._compute_view_embeddings(state)
    return self._views_cache[key]

  def _views_of(self, s, images, key):
    """(h, z) stacked over the global views of ``images`` (jitted once by
    `_compute_view_embeddings`)."""
    views = data.device_views({"images": images}, key, self._spec_global)
    outs = [s.method.embedding(s.params, s.method_state, x) for x in views]
    stack = lambda i: jax.numpy.stack([o[i] for o in outs])
    return stack(0), stack(1)

  def _compute_view_embeddings(self, state):
    if self._view_program is None:
      self._view_program = jax.jit(
          self._views_of, out_shardings=NamedSharding(self.mesh, P()))
    images = self._center_crops(self._train_source,
                                self._train_source.read(self._view_rows)[0])
    images = jax.device_put(np.asarray(images),
                            NamedSharding(self.mesh, P("data")))
    h, z = self._view_program(state, images, jax.random.key(self._seed + 7))
    return (np.asarray(jax.device_get(h), np.float32),
            np.asarray(jax.device_get(z), np.float32),
            self._view_rows.astype(np.int32))

  def _center_crops(self, source, images):
    """``images`` of ``source`` at the evaluation size: unchanged when the
    source's images already have it, else centre-cropped (a stacked array)."""
    shape = source.image_shape
    if shape is None or self._view_size not in (0, shape[0]):
      return np.stack([crops.center_crop(
          x, self._view_size, self.config.eval_inputs.crop_fraction)
                       for x in images])
    return images

  def _raw_pixels(self, split):
    if self._splits is None:
      return None
    source, rows = self._split(split)
    if not hasattr(source, "images"):
      return None
    images = source.images if rows is None else source.images[rows]
    # uint8, a view of the split: the probe standardises it on the device.
    x = images.reshape(len(images), -1)
    y = data.source_labels(source)
    return (x, y) if rows is None else (x, y[rows])

  def _labelled_images(self, split, rows=None):
    if self._splits is None:
      raise ValueError("no labelled split: images are unavailable")
    source, split_rows = self._split(split)
    index = np.arange(len(source)) if split_rows is None else split_rows
    index = index if rows is None else index[np.asarray(rows)]
    images, labels = [], []
    for start in range(0, len(index), _READ_CHUNK):
      x, y = source.read(index[start:start + _READ_CHUNK])
      images.append(np.asarray(self._center_crops(source, x), np.uint8))
      labels.append(np.asarray(y, np.int32))
    return np.concatenate(images), np.concatenate(labels)
