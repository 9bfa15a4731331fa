"""Use what you trained: load a run's encoder and embed images.

``load(workdir)`` reads a finished (or interrupted) run of
``python -m ssljax.main``: its ``config.json`` and, from its newest intact
checkpoint, only the parameters and the method state (BatchNorm statistics,
EMA teacher, ...) that ``Method.representation`` needs; the optimiser state
and the online probe are not read. The returned `Pretrained` embeds uint8
images into the representation the evaluators probe, with the evaluators'
preprocessing (`ssljax.data.eval_batches`: the evaluation centre crop at the
run's view size, then scaling to [0, 1] in `ssljax.probes.extract_features`).

Loading never writes into the run: a damaged checkpoint step is skipped with
a warning, not moved aside as a resume of the run would
(`ssljax.checkpoints.restore_latest`).

Example::

    from ssljax import pretrained
    model = pretrained.load("runs/vicreg")
    features = model.embed(images)  # uint8 (N, H, W, C) -> float32 (N, D)
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any
import warnings

import jax
from jax.sharding import NamedSharding, PartitionSpec as P
import ml_collections
import numpy as np
import orbax.checkpoint as ocp

from ssljax import checkpoints, data, methods, probes, train_state

__all__ = ["Pretrained", "PretrainedLoadError", "load", "checkpoint_steps"]

# The fields of the saved state that the representation needs.
_NEEDED = ("params", "method_state")


class PretrainedLoadError(ValueError):
  """A run cannot be loaded: the folder is not a run (no ``config.json``),
  has no checkpoint, or no checkpoint step of it can be read. The message
  is one line naming the folder and, for checkpoints, each step tried and
  why it failed."""


@dataclasses.dataclass(frozen=True)
class Pretrained:
  """A run's trained encoder, restored from one checkpoint step.

  Attributes:
    workdir: the run's folder.
    config: the run's config (``config.json``), a ConfigDict.
    method: the run's `ssljax.methods.Method` (``methods.build(config)``).
    params: the method's trainable parameters (a pytree of float32
      ``jax.Array`` replicated over the default backend's devices).
    method_state: the method's non-trainable state (BatchNorm statistics,
      and by method the EMA teacher, queue, centre), placed as ``params``.
    step: the checkpoint step restored (optimiser steps taken).
    view_size: side in pixels of the images the encoder sees in
      evaluation: the run's ``views.size``, or when that is 0 the height of
      its train images; 0 when neither is known (the train data is not on
      this machine), in which case images are used at their own size.
    channels: the image channels the encoder was trained on, or None when
      unknown.
  """
  workdir: str
  config: ml_collections.ConfigDict
  method: Any
  params: Any
  method_state: Any
  step: int
  view_size: int
  channels: int | None

  @property
  def train_state(self) -> train_state.TrainState:
    """A `ssljax.train_state.TrainState` of the restored parameters and
    method state, without optimiser state or online probe (what
    `ssljax.probes.extract_features` reads)."""
    return train_state.TrainState(
        step=np.int32(self.step), params=self.params, opt_state=None,
        method_state=self.method_state, probe={}, method=self.method,
        tx=None)

  def representation(self, images_BxSxSxC) -> jax.Array:
    """h (B, D) float32 of float32 images (B, S, S, C) in [0, 1] at
    ``view_size``: ``Method.representation``, BatchNorm in inference mode,
    without any preprocessing (see `embed` for uint8 images)."""
    return self.method.representation(self.params, self.method_state,
                                      images_BxSxSxC)

  def embed(self, images_BxHxWxC: np.ndarray, *, batch_size: int = 256,
            desc: str | None = None) -> np.ndarray:
    """Representations of uint8 images, as the evaluators compute them.

    The images go through the evaluators' preprocessing
    (`ssljax.data.eval_batches`: kept as they are when they already are
    ``view_size`` x ``view_size``, else the evaluation centre crop of
    ``config.eval_inputs.crop_fraction`` resized to ``view_size``), are
    scaled to [0, 1] and encoded in batches by
    `ssljax.probes.extract_features`, the function the evaluators call.

    Args:
      images_BxHxWxC: uint8 numpy array (N, H, W, C), N >= 1, C the
        channels the encoder was trained on (``channels``).
      batch_size: images per forward pass (rounded down to a multiple of
        the device count; >= the device count).
      desc: if given, a progress bar with this label.

    Returns:
      float32 numpy array (N, D): the representation h (before the
      projector), row i of image i.

    Raises:
      ValueError: images that are not a non-empty uint8 (N, H, W, C) array,
        of other channels than ``channels``, of another size than
        ``view_size`` with ``view_size`` 0, or a batch_size below the
        device count.
    """
    source = data.ArraySource(images_BxHxWxC)  # checks uint8 (N, H, W, C)
    return self.embed_source(source, batch_size=batch_size, desc=desc)[0]

  def embed_source(self, source, *, batch_size: int = 256,
                   desc: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Representations of every image of a source, streamed in batches.

    Only one batch of images is in memory at a time; the (N, D) features
    are accumulated. The preprocessing is `embed`'s.

    Args:
      source: a source of `ssljax.data.sources` (``len``, ``image_shape``,
        ``read``), e.g. from `ssljax.data.open_split` or an
        `ssljax.data.ImageFolderSource`, N >= 1.
      batch_size, desc: as `embed`.

    Returns:
      (float32 (N, D) features, int32 (N,) labels, −1 where unknown), in
      the source's index order.

    Raises:
      ValueError: as `embed`.
    """
    if len(source) == 0:
      raise ValueError("no image to embed")
    shape = source.image_shape
    if self.channels and shape and shape[-1] != self.channels:
      raise ValueError(f"images have {shape[-1]} channels; the encoder of "
                       f"{self.workdir} was trained on {self.channels}")
    return probes.source_features(
        self.train_state, source, batch_size=batch_size, size=self.view_size,
        crop_fraction=self.config.eval_inputs.crop_fraction, mesh=_mesh(),
        desc=desc)


def _mesh() -> jax.sharding.Mesh:
  """1-D mesh ("data",) over the default backend's devices (the evaluators'
  layout: batches sharded, parameters replicated)."""
  return jax.sharding.Mesh(np.asarray(jax.devices()), ("data",))


def checkpoint_steps(workdir: str) -> list[int]:
  """The checkpoint steps of a run, ascending: the integer-named folders
  under ``<workdir>/checkpoints`` (steps moved aside as ``<step>.corrupt``
  and orbax's unfinished temporary folders are not steps)."""
  directory = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(directory):
    return []
  return sorted(int(name) for name in os.listdir(directory)
                if name.isdigit()
                and os.path.isdir(os.path.join(directory, name)))


def _read_config(workdir: str) -> ml_collections.ConfigDict:
  path = os.path.join(workdir, "config.json")
  if not os.path.isdir(workdir):
    raise PretrainedLoadError(f"{workdir!r} is not a run of ssljax: the "
                              "folder does not exist")
  if not os.path.isfile(path):
    raise PretrainedLoadError(
        f"{workdir!r} is not a run of ssljax: it has no config.json (give "
        "the --workdir of python -m ssljax.main)")
  try:
    with open(path) as f:
      return ml_collections.ConfigDict(json.load(f))
  except (OSError, ValueError) as e:
    raise PretrainedLoadError(
        f"{workdir!r}: config.json cannot be read ({type(e).__name__}: "
        f"{e})") from e


def _restore_step(step_dir: str, sharding) -> dict:
  """{"params", "method_state"} of one step, read without the rest
  (orbax's partial restore), placed with ``sharding``."""
  # Absolute: under a relative path orbax reads no tree metadata (None).
  item_dir = os.path.join(os.path.abspath(step_dir), "default")
  checkpointer = ocp.PyTreeCheckpointer()
  absl_logger = logging.getLogger("absl")
  level = absl_logger.level
  # orbax warns that the step's metadata file is not in the item folder
  # (it is one level up); the tree metadata it reads is there.
  absl_logger.setLevel(max(level, logging.ERROR))
  try:
    metadata = checkpointer.metadata(item_dir)
  finally:
    absl_logger.setLevel(level)
  tree = getattr(metadata, "item_metadata", metadata)
  tree = getattr(tree, "tree", tree)
  missing = [name for name in _NEEDED if name not in tree]
  if missing:
    raise ValueError(f"the saved state has no {', '.join(missing)}")
  item = jax.tree.map(
      lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=sharding),
      {name: tree[name] for name in _NEEDED})
  restore_args = jax.tree.map(
      lambda _: ocp.ArrayRestoreArgs(sharding=sharding), item)
  return checkpointer.restore(item_dir, args=ocp.args.PyTreeRestore(
      item=item, restore_args=restore_args, partial_restore=True))


def _one_line(exc: BaseException, limit: int = 200) -> str:
  lines = str(exc).strip().splitlines()
  line = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
  return line if len(line) <= limit else line[:limit - 1] + "…"


def _train_image_shape(config) -> tuple | None:
  """(H, W, C) of the run's train images when they have one shape and
  their split can be opened here; None otherwise."""
  d = config.dataset
  try:
    source = data.open_split(d.name, d.train_split, data_dir=d.data_dir,
                             download=False, in_memory=d.in_memory,
                             channels=d.channels)
  except Exception:  # pylint: disable=broad-except
    return None  # not on this machine (or not prepared): sizes unknown
  return tuple(source.image_shape) if source.image_shape else None


def load(workdir: str, *, step: int | None = None) -> Pretrained:
  """Loads a run's encoder from its newest intact checkpoint (or ``step``).

  Reads ``<workdir>/config.json`` and, of the checkpoint, only the
  parameters and the method state (orbax partial restore), onto the default
  backend's devices (replicated). Checkpoint steps are checked against
  their checksum manifest (`ssljax.checkpoints.verify`) first. Without
  ``step``, a damaged newer step is skipped with a warning
  (``RuntimeWarning``) naming it, its reason and the step loaded instead;
  nothing in the run is written or moved. A run whose ``views.size`` is 0
  (the train images' own size) takes the view size from its train split;
  when that cannot be opened here it warns (``RuntimeWarning``) and
  `Pretrained.embed` uses images at their own size.

  Args:
    workdir: the ``--workdir`` of ``python -m ssljax.main``.
    step: the checkpoint step to load; None: the newest intact one.

  Returns:
    a `Pretrained`.

  Raises:
    PretrainedLoadError: ``workdir`` is not a run (no ``config.json``), has
      no checkpoint, has no step ``step``, ``step`` is damaged, or no step
      can be read (each step and its reason in the one-line message).
    ValueError: the config names an unknown method.
  """
  workdir = os.fspath(workdir)
  config = _read_config(workdir)
  steps = checkpoint_steps(workdir)
  if not steps:
    raise PretrainedLoadError(
        f"run {workdir!r} has no checkpoint (no step under "
        f"{os.path.join(workdir, 'checkpoints')}): train it first, or wait "
        "for its first checkpoint")
  if step is not None and step not in steps:
    raise PretrainedLoadError(
        f"run {workdir!r} has no checkpoint step {step}; its steps are "
        f"{', '.join(map(str, steps))}")
  method = methods.build(config)
  mesh = _mesh()
  sharding = NamedSharding(mesh, P())
  tried = [step] if step is not None else sorted(steps, reverse=True)
  failures = []
  for candidate in tried:
    step_dir = os.path.join(workdir, "checkpoints", str(candidate))
    reason = checkpoints.verify(step_dir)
    if reason is None:
      try:
        restored = _restore_step(step_dir, sharding)
      except Exception as e:  # pylint: disable=broad-except
        reason = _one_line(e)
    if reason is not None:
      failures.append((candidate, reason))
      continue
    for bad, why in failures:
      warnings.warn(f"checkpoint step {bad} of {workdir} is damaged ({why}); "
                    f"loading step {candidate} instead", RuntimeWarning,
                    stacklevel=2)
    shape = _train_image_shape(config)
    if not config.views.size and shape is None:
      warnings.warn(
          f"the train images of {workdir} ({config.dataset.name} "
          f"{config.dataset.train_split}) cannot be opened here, so the "
          "view size is unknown: images are embedded at their own size",
          RuntimeWarning, stacklevel=2)
    channels = (shape[-1] if shape else
                config.dataset.channels
                if config.dataset.name == "image_folder" else None)
    return Pretrained(
        workdir=workdir, config=config, method=method,
        params=restored["params"], method_state=restored["method_state"],
        step=candidate, view_size=int(config.views.size or
                                      (shape[0] if shape else 0)),
        channels=channels)
  if step is not None:
    raise PretrainedLoadError(f"checkpoint step {step} of run {workdir!r} "
                              f"cannot be read ({failures[0][1]})")
  listing = "; ".join(f"step {s}: {why}" for s, why in failures)
  raise PretrainedLoadError(
      f"no checkpoint of run {workdir!r} can be read ({listing})")
