"""What every evaluator sees: the run's context, and the small base class.

An evaluator is one module ``ssljax/evaluators/<type>.py`` holding one class
``Evaluator`` (big_vision style). ``config.evals.<name>`` names an instance:
``type`` (the module), ``every_steps`` (None: once, after the last step) and
the type's options. The train loop only calls ``due(step)`` and
``run(state)``; it knows no evaluator by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

__all__ = ["EvalContext", "Evaluator", "check_option"]


@dataclasses.dataclass
class EvalContext:
  """The run as the evaluators see it (built once by the train loop).

  Attributes:
    config: the run's ``ml_collections.ConfigDict``.
    mesh: the 1-D ``jax.sharding.Mesh`` ("data",) the run uses.
    total_steps: the run's number of train steps.
    num_classes: classes of the labelled splits (0: no labels).
    features: ``features(state, split) -> (F, y)``: float32 (N, D) encoder
      representations h (centre crops, BatchNorm in inference mode) and int32
      (N,) labels of the probe's "train" (fit) or "test" rows; cached per
      (state.step, split, state identity), so evaluators due at the same
      step share one extraction (only the latest state's are kept; the
      arrays are shared: never change them). None when no split is
      labelled.
    view_embeddings: ``view_embeddings(state) -> (h, z, sources)``: a fixed
      sample of train images (same images and same augmentations at every
      call), V views each: h float32 (V, B, D) representations, z float32
      (V, B, K) projector outputs, sources int32 (B,) their image indices;
      computed once per state and shared like ``features``.
    raw_pixels: ``raw_pixels(split) -> (X, y)``: uint8 (N, H·W·C) pixels
      of in-memory splits (0–255; the probe standardises them), or None
      when a split streams.
    initial_state: ``initial_state()`` -> the train state at its random
      initialisation (a fresh copy each call).
    shown: whether this process prints progress (process 0).
    view_labels: optional; ``view_labels(state) -> (B,)`` int32 labels
      (−1: unknown) of the images of ``view_embeddings``.
    labelled_images: optional; ``labelled_images(split, rows) -> (X, y)``:
      uint8 (n, S, S, C) images of the probe's "train" or "test" rows, at the
      evaluation size (the centre crops ``features`` sees), and their int32
      (n,) labels. ``rows``: int indices into the same rows, in the same
      order, as the labels ``features(state, split)`` returns; None: all of
      them. Read by `ssljax.evaluators.fine_tune`; None: not available.
  """
  config: Any
  mesh: Any
  total_steps: int
  num_classes: int
  features: Callable[..., tuple[np.ndarray, np.ndarray]] | None
  view_embeddings: Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]
  raw_pixels: Callable[[str], tuple[np.ndarray, np.ndarray] | None]
  initial_state: Callable[[], Any]
  shown: bool = True
  labelled_images: Callable[..., tuple[np.ndarray, np.ndarray]] | None = None
  view_labels: Callable[..., np.ndarray] | None = None


def check_option(name: str, option: str, value, ok: bool, what: str) -> None:
  """The one-line error an evaluator gives for a bad option.

  Args:
    name: the entry's key in ``config.evals``.
    option: the option's keyword (e.g. "learning_rate").
    value: the value given (any type; shown with ``repr``).
    ok: whether the value is allowed.
    what: what is allowed, after "must be" (e.g. "a number > 0").

  Raises:
    ValueError: ``"evals.<name>.<option>=<value!r>: must be <what>"`` unless
      ``ok``.
  """
  if not ok:
    raise ValueError(f"evals.{name}.{option}={value!r}: must be {what}")


class Evaluator:
  """Base class: ``run(state)`` yields (metric name, value) pairs.

  Subclasses take their options as keyword arguments of ``__init__`` (after
  ``name``, ``ctx`` and ``every_steps``), check them there and raise
  ValueError naming the option, so bad options fail before training starts.

  Attributes:
    name: the entry's key in ``config.evals``; metric names are
      ``"<name>/<metric>"``.
    ctx: the `EvalContext`.
    every_steps: run every that many steps (an int > 0), and always after
      the last step; None runs only after the last step.
  """

  # A baseline (raw pixels, random init): skipped when the run's
  # ``config.eval_inputs.baselines`` is False.
  baseline = False
  # Whether its metrics are scores against labels (accuracies); False: a
  # label-free metric of the representation (the run report draws the two
  # kinds in separate panels, `ssljax.report`).
  uses_labels = False
  # The fewest augmented views per image (``config.views.num_global``) it
  # needs: 2 for the metrics that compare the views of one image (LiDAR,
  # the theory diagnostics); `ssljax.config_validation` refuses the entry
  # on a config with fewer, before any data loads.
  min_global_views = 1

  def __init__(self, name: str, ctx: EvalContext, *,
               every_steps: int | None = None):
    if every_steps is not None and (
        isinstance(every_steps, bool) or not isinstance(every_steps, int)
        or every_steps <= 0):
      raise ValueError(f"evals.{name}.every_steps must be an integer > 0 "
                       f"(or None: only after the last step), got "
                       f"{every_steps!r}")
    self.name, self.ctx, self.every_steps = name, ctx, every_steps

  def due(self, step: int) -> bool:
    """Whether to run after train step ``step`` (1-based count of steps)."""
    if step == self.ctx.total_steps:
      return True
    return self.every_steps is not None and step % self.every_steps == 0

  def run(self, state) -> Iterator[tuple[str, float | np.ndarray]]:
    """Yields ("<name>/<metric>", value): a float, or a 1-D array (a
    spectrum) that the writer keeps out of the scalar summaries."""
    raise NotImplementedError
