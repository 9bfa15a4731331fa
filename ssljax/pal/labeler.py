"""A labeler that answers PAL queries from ground-truth labels.

Two query types (Cabannes et al. 2023, arXiv 2303.15256, Fig. 1 and footnote 2):

* a pair query "is x_i like x_j?" answers 1{y_i = y_j};
* a batch screen "which of these M items belong with this template?"
  answers 1{y_m = y_template} for each of the M items (the captcha /
  spot-the-outliers interface, I_t = {(template, m) | m in batch}).

Each answer is flipped independently with probability `noise_rate` (from a
numpy Generator seeded by the `seed` argument). The labeler keeps an account
of what was asked: single pair answers, screens, and items screened.
A two-level taxonomy (Cabannes et al. 2023 Algorithm 6) is supported through
`coarse_labels`: queries with `level="coarse"` compare the coarse labels
instead.

References:
  Cabannes et al. 2023 §4.3 ("Low-cost and efficient active learning", footnote
  2), Fig. 1, Algorithm 1 (labelers), Algorithm 6 (coarse / fine feedback).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Cost", "Labeler"]


class Cost(NamedTuple):
  """Account of the answers a labeler gave.

  Attributes:
    pairs: number of single pair answers.
    screens: number of batch screens (one template, M items each).
    screened_items: total number of items over all screens.
    coarse: how many of the answers above (pairs + screened items) were
      coarse-level answers.
    flipped: how many answers the noise flipped.
  """
  pairs: int
  screens: int
  screened_items: int
  coarse: int
  flipped: int

  @property
  def answers(self) -> int:
    """Total pair answers, counting each screened item as one answer."""
    return self.pairs + self.screened_items


def _check_labels(labels, name: str) -> np.ndarray:
  arr = np.asarray(labels)
  if arr.ndim != 1 or arr.shape[0] == 0:
    raise ValueError(f"{name} must be a non-empty rank-1 (N,) array, got shape"
                     f" {arr.shape}")
  if not np.issubdtype(arr.dtype, np.integer):
    raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
  return arr.astype(np.int64)


class Labeler:
  """Answers pair queries and batch screens from labels, with noise.

  Args:
    labels: (N,) int ground-truth (fine) labels.
    noise_rate: probability in [0, 1] that any single answer is flipped.
    seed: seed of the numpy Generator that draws the noise.
    coarse_labels: optional (N,) int coarse labels for `level="coarse"`.

  Raises:
    ValueError: if labels / coarse_labels are not non-empty (N,) integer
      arrays of equal length, or noise_rate is outside [0, 1].

  Example:
    >>> lab = Labeler(np.array([0, 0, 1]))
    >>> bool(lab.pair(0, 1)), lab.screen(0, [1, 2]).tolist(), lab.cost.answers
    (True, [True, False], 3)
  """

  def __init__(self, labels, *, noise_rate: float = 0.0, seed: int = 0,
               coarse_labels=None):
    self.labels = _check_labels(labels, "labels")
    self.n = self.labels.shape[0]
    if coarse_labels is None:
      self.coarse_labels = None
    else:
      self.coarse_labels = _check_labels(coarse_labels, "coarse_labels")
      if self.coarse_labels.shape != self.labels.shape:
        raise ValueError(f"coarse_labels must have shape {self.labels.shape}"
                         f" like labels, got {self.coarse_labels.shape}")
    if not 0.0 <= float(noise_rate) <= 1.0:
      raise ValueError(f"noise_rate must be in [0, 1], got {noise_rate!r}")
    self.noise_rate = float(noise_rate)
    self._rng = np.random.default_rng(seed)
    self._pairs = self._screens = self._items = self._coarse = 0
    self._flipped = 0

  @property
  def cost(self) -> Cost:
    """The `Cost` account so far."""
    return Cost(self._pairs, self._screens, self._items, self._coarse,
                self._flipped)

  def _table(self, level: str) -> np.ndarray:
    if level == "fine":
      return self.labels
    if level == "coarse":
      if self.coarse_labels is None:
        raise ValueError("level='coarse' needs coarse_labels")
      return self.coarse_labels
    raise ValueError(f"level must be 'fine' or 'coarse', got {level!r}")

  def _index(self, idx, name: str) -> np.ndarray:
    arr = np.asarray(idx)
    if not np.issubdtype(arr.dtype, np.integer):
      raise ValueError(f"{name} must hold integer indices, got dtype"
                       f" {arr.dtype}")
    if arr.size and (arr.min() < 0 or arr.max() >= self.n):
      raise ValueError(f"{name} must index [0, {self.n}), got values in"
                       f" [{arr.min()}, {arr.max()}]")
    return arr.astype(np.int64)

  def _noisy(self, truth: np.ndarray) -> np.ndarray:
    if self.noise_rate == 0.0:
      return truth
    flip = self._rng.random(truth.shape) < self.noise_rate
    self._flipped += int(flip.sum())
    return truth ^ flip

  def pairs(self, i, j, *, level: str = "fine") -> np.ndarray:
    """Answers the pair queries 1{y_i[m] = y_j[m]} for each m.

    Args:
      i: (M,) int indices.
      j: (M,) int indices, same shape as i.
      level: "fine" (labels) or "coarse" (coarse_labels).

    Returns:
      (M,) bool answers (after noise). Each counts as one pair answer.

    Raises:
      ValueError: if i and j differ in shape or hold indices outside [0, N).
    """
    i = self._index(i, "i")
    j = self._index(j, "j")
    if i.shape != j.shape or i.ndim != 1:
      raise ValueError(f"i and j must be (M,) arrays of one shape, got"
                       f" {i.shape} and {j.shape}")
    table = self._table(level)
    self._pairs += i.shape[0]
    self._coarse += i.shape[0] if level == "coarse" else 0
    return self._noisy(table[i] == table[j])

  def pair(self, i: int, j: int, *, level: str = "fine") -> bool:
    """Answers the single pair query "is x_i like x_j?"."""
    return bool(self.pairs(np.array([i]), np.array([j]), level=level)[0])

  def screen(self, template: int, items, *, level: str = "fine") -> np.ndarray:
    """Answers a batch screen: which items belong with the template?

    Args:
      template: index of the template sample.
      items: (M,) int indices of the screened items.
      level: "fine" or "coarse".

    Returns:
      (M,) bool, item m belongs with the template (after noise). Counts as one
        screen and M screened items.

    Raises:
      ValueError: if template or items hold indices outside [0, N).
    """
    t = self._index(np.array([template]), "template")[0]
    items = self._index(np.atleast_1d(items), "items")
    table = self._table(level)
    self._screens += 1
    self._items += items.shape[0]
    self._coarse += items.shape[0] if level == "coarse" else 0
    return self._noisy(table[items] == table[t])
