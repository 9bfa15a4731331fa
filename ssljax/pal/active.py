"""Active human oracles: captcha (Alg. 3), data pruning (Alg. 5), hierarchy (Alg. 6).

All three label samples by comparing them with class templates μ_c (one
known member per class) and record the answers in a `PairGraph`, so a
positive answer x ~ μ_c also yields x !~ (every known member of every
other class) by completion (Cabannes et al. 2023, arXiv 2303.15256, Fig. 6: "a
positive observation is turned into many negative observations").

`CaptchaOracle` implements Algorithm 3 with the improvements listed after
it in Cabannes et al. 2023 §4.3:

1. templates discovered from negative answers when not given: a sample
   negative to every known template becomes the next template;
2. class choice argmin_c (known members of c) / p_c with a class prior p
   (uniform prior = Algorithm 3's "least known examples");
3. classifier-guided batches (`guided=True`): with the current embeddings,
   a nearest-centroid classifier on the known members picks the items most
   likely to belong to the chosen class, instead of a uniform batch.

References:
  Cabannes et al. 2023 Algorithm 3 and the paragraph after it, Algorithm 5
  (after Sorscher et al. 2022, ref. [44]), Algorithm 6, Fig. 1, Fig. 6, App. A.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ssljax import checks, extras
from ssljax.pal.labeler import Labeler
from ssljax.pal.oracles import GraphOracle

__all__ = ["CaptchaOracle", "PruningOracle", "HierarchicalOracle"]


class _TemplateOracle(GraphOracle):
  """Templates μ_1..μ_k and labelling of single samples against them."""

  def __init__(self, labeler: Labeler, num_classes: int, *, templates=None,
               level: str = "fine", signed: bool = True,
               extra_negative: Callable | None = None):
    super().__init__(labeler, signed=signed, complete=True)
    self.num_classes = checks.as_positive_int(num_classes, "num_classes")
    self.level = level
    self.extra_negative = extra_negative
    self.templates: list[int] = []
    if templates is not None:
      t = np.asarray(templates, np.int64).reshape(-1)
      if t.shape[0] > self.num_classes or np.unique(t).shape[0] != t.shape[0]:
        raise ValueError(f"templates must be at most num_classes="
                         f"{self.num_classes} distinct indices, got {t}")
      if t.size and (t.min() < 0 or t.max() >= self.n):
        raise ValueError(f"templates must index [0, {self.n}), got {t}")
      self.templates = t.tolist()
      for a in range(len(self.templates)):  # known to be of distinct classes
        for b in range(a):
          self.graph.add_negative(self.templates[a], self.templates[b])

  def _relation(self, t: int, items: np.ndarray) -> np.ndarray:
    """+1 / -1 / 0 knowledge of items versus template t."""
    rel = self.graph.block(np.array([t]), items, signed=True)[0]
    if self.extra_negative is not None:
      rel = np.where((rel == 0) & self.extra_negative(t, items), -1.0, rel)
    return rel

  def labelled(self) -> np.ndarray:
    """(N,) bool: samples known to belong to some template's class."""
    if not self.templates:
      return np.zeros(self.n, bool)
    comp = self.graph.component_ids()
    return np.isin(comp, comp[np.array(self.templates)])

  def class_counts(self) -> np.ndarray:
    comp = self.graph.component_ids()
    sizes = np.bincount(comp)
    return sizes[comp[np.array(self.templates, np.int64)]]

  def _centroids(self, z_unit: np.ndarray) -> np.ndarray:
    comp = self.graph.component_ids()
    cents = np.stack([z_unit[comp == comp[t]].mean(0) for t in self.templates])
    return checks.unit_rows(cents)

  def _assign(self, x: int, budget: int, z_unit=None) -> int:
    """Pair-queries x against templates until a positive; returns answers."""
    order = np.arange(len(self.templates))
    if z_unit is not None and self.templates:
      order = np.argsort(-(self._centroids(z_unit) @ z_unit[x]))
    spent = 0
    for c in order:
      t = self.templates[c]
      rel = self._relation(t, np.array([x]))[0]
      if rel > 0:
        return spent
      if rel < 0:
        continue
      if spent >= budget:
        return spent
      ans = self.labeler.pair(x, t, level=self.level)
      self.graph.add(x, t, ans)
      spent += 1
      if ans:
        return spent
    if len(self.templates) < self.num_classes and all(
        self._relation(t, np.array([x]))[0] < 0 for t in self.templates):
      self.templates.append(int(x))  # negative to every template: new class
    return spent


class CaptchaOracle(_TemplateOracle):
  """Captcha oracle (Algorithm 3) with the paper's improvements.

  Each `query` round spends at most `screen_size` answers: while fewer than
  `num_classes` templates are known, it labels random unlabelled samples
  one by one with pair queries against the templates (improvement 1);
  afterwards it picks the class c minimising known_c / prior_c among
  classes with samples of unknown relation (improvement 2), selects M =
  `screen_size` such samples (uniformly, or classifier-guided with
  `guided=True` and `embed_all`: improvement 3) and asks one screen
  "which of these belong with μ_c?".

  Args:
    labeler: the `Labeler`.
    num_classes: C.
    templates: optional initial templates, one per class (assumed of
      distinct classes, recorded as mutual negatives at no cost).
    screen_size: M, items per screen (answers per round).
    class_prior: optional (C,) class probabilities (uniform if None).
    guided: classifier-guided batch selection.
    level: "fine" or "coarse" labeler answers.
    signed: train on the ±1/0 view (else 1/0).
    extra_negative: optional f(template, items) -> (M,) bool of relations
      known negative from elsewhere (used by `HierarchicalOracle`).

  Raises:
    ValueError: on bad num_classes, templates, screen_size or class_prior.
  """

  def __init__(self, labeler: Labeler, num_classes: int, *, templates=None,
               screen_size: int = 10, class_prior=None, guided: bool = False,
               level: str = "fine", signed: bool = True,
               extra_negative: Callable | None = None):
    super().__init__(labeler, num_classes, templates=templates, level=level,
                     signed=signed, extra_negative=extra_negative)
    self.screen_size = checks.as_positive_int(screen_size, "screen_size")
    prior = (np.full(self.num_classes, 1.0 / self.num_classes)
             if class_prior is None else np.asarray(class_prior, np.float64))
    if prior.shape != (self.num_classes,) or not np.all(prior > 0):
      raise ValueError(f"class_prior must be ({self.num_classes},) positive,"
                       f" got {prior}")
    self.class_prior = prior
    self.guided = bool(guided)

  def _discover(self, rng, z_unit) -> int:
    spent = 0
    while spent < self.screen_size and len(self.templates) < self.num_classes:
      pool = np.flatnonzero(~self.labelled())
      if pool.size == 0:
        break
      spent += self._assign(int(rng.choice(pool)), self.screen_size - spent,
                            z_unit)
    return spent

  def query(self, rng, embed_all=None) -> int:
    z_unit = None
    if self.guided and embed_all is not None:
      z_unit = checks.unit_rows(np.asarray(embed_all(), np.float64))
    if len(self.templates) < self.num_classes:
      return self._discover(rng, z_unit)
    score = self.class_counts() / self.class_prior
    all_idx = np.arange(self.n)
    for c in np.argsort(score, kind="stable"):
      cand = np.flatnonzero(self._relation(self.templates[c], all_idx) == 0)
      if cand.size:
        break
    else:
      return 0  # every relation to every template is known
    m = min(self.screen_size, cand.size)
    if z_unit is not None:
      sims = z_unit[cand] @ self._centroids(z_unit).T  # (cand, C)
      others = np.delete(sims, c, axis=1)
      margin = sims[:, c] - (others.max(1) if others.size else 0.0)
      items = cand[np.argsort(-margin, kind="stable")[:m]]
    else:
      items = rng.choice(cand, size=m, replace=False)
    t = self.templates[c]
    ans = self.labeler.screen(t, items, level=self.level)
    self.graph.add_many(np.full(m, t), items, ans)
    return m


class PruningOracle(_TemplateOracle):
  """Data-pruning oracle (Algorithm 5), with pair queries instead of labels.

  Each `query` runs k-means on the unit-normalised embeddings, takes the
  cosine distance of every unlabelled sample to its cluster centre, and
  selects `points_per_round` samples nearest to the centres while fewer
  than `near_until` samples are labelled, farthest afterwards. Each
  selected sample is labelled by pair queries against the templates, most
  similar class first, until a positive (a sample negative to all becomes a
  new template). Needs `embed_all`.

  Args:
    labeler: the `Labeler`.
    num_classes: C (templates discovered as in the captcha oracle).
    num_clusters: k of k-means (default C).
    points_per_round: samples selected per round.
    near_until: labelled-sample count below which "near" points are taken
      (default 2·C·points_per_round).
    signed: train on the ±1/0 view (else 1/0).
  """

  def __init__(self, labeler: Labeler, num_classes: int, *,
               num_clusters: int | None = None, points_per_round: int = 10,
               near_until: int | None = None, signed: bool = True):
    super().__init__(labeler, num_classes, signed=signed)
    self.num_clusters = checks.as_positive_int(num_clusters or num_classes,
                                               "num_clusters")
    self.points_per_round = checks.as_positive_int(points_per_round,
                                                   "points_per_round")
    self.near_until = (2 * self.num_classes * self.points_per_round
                       if near_until is None else int(near_until))

  def select(self, rng, z) -> np.ndarray:
    """Indices chosen by Algorithm 5 for embeddings z (N, K)."""
    z_unit = checks.unit_rows(np.asarray(z, np.float64))
    labelled = self.labelled()
    pool = np.flatnonzero(~labelled)
    if pool.size == 0:
      return pool
    cluster = extras.import_module("sklearn.cluster",
                                   "ssljax.pal.PruningOracle")
    km = cluster.KMeans(self.num_clusters, n_init=3,
                random_state=int(rng.integers(2**31 - 1))).fit(z_unit)
    cents = checks.unit_rows(km.cluster_centers_)
    dist = 1.0 - np.sum(z_unit[pool] * cents[km.labels_[pool]], axis=1)
    order = np.argsort(dist, kind="stable")
    if labelled.sum() >= self.near_until:
      order = order[::-1]
    return pool[order[:self.points_per_round]]

  def query(self, rng, embed_all=None) -> int:
    if embed_all is None:
      raise ValueError("PruningOracle.query needs embed_all() -> (N, K)")
    z = np.asarray(embed_all(), np.float64)
    z_unit = checks.unit_rows(z)
    return sum(self._assign(int(x), self.num_classes, z_unit)
               for x in self.select(rng, z))


class HierarchicalOracle:
  """Coarse-to-fine oracle (Algorithm 6) on a two-level taxonomy.

  For the first `coarse_rounds` rounds a captcha oracle asks coarse
  questions ("which of these share the template's coarse class?") and the
  network trains on the coarse graph. Afterwards a fine captcha oracle asks
  fine questions, skipping items already known to lie in another coarse
  class (a coarse negative is a fine negative), and the network trains on
  the fine graph completed with those coarse negatives. The switch rule
  stands for the paper's "f has not formed strong opinions on clusters".

  Args:
    labeler: a `Labeler` with coarse_labels.
    num_coarse: number of coarse classes.
    num_fine: number of fine classes.
    coarse_rounds: rounds of coarse questions before switching.
    screen_size: items per screen.
    signed: ±1/0 views (else 1/0).
    guided: classifier-guided screens (see `CaptchaOracle`).
  """

  def __init__(self, labeler: Labeler, num_coarse: int, num_fine: int, *,
               coarse_rounds: int, screen_size: int = 10, signed: bool = True,
               guided: bool = False):
    if labeler.coarse_labels is None:
      raise ValueError("HierarchicalOracle needs a Labeler with coarse_labels")
    self.labeler, self.n, self.signed = labeler, labeler.n, bool(signed)
    self.coarse_rounds = int(coarse_rounds)
    self.rounds = 0
    self.coarse = CaptchaOracle(labeler, num_coarse, screen_size=screen_size,
                                level="coarse", signed=signed, guided=guided)
    self.fine = CaptchaOracle(labeler, num_fine, screen_size=screen_size,
                              signed=signed, guided=guided,
                              extra_negative=self._coarse_negative)
    self._degree_cache = None

  def _coarse_negative(self, t: int, items: np.ndarray) -> np.ndarray:
    return self.coarse.graph.block(np.array([t]), items)[0] < 0

  @property
  def phase(self) -> str:
    return "coarse" if self.rounds < self.coarse_rounds else "fine"

  def query(self, rng, embed_all=None) -> int:
    oracle = self.coarse if self.phase == "coarse" else self.fine
    self.rounds += 1
    self._degree_cache = None
    return oracle.query(rng, embed_all)

  def block(self, rows, cols) -> np.ndarray:
    if self.phase == "coarse":
      return self.coarse.block(rows, cols)
    g = self.fine.block(rows, cols)
    if self.signed:
      g = np.where((g == 0) & (self.coarse.graph.block(rows, cols) < 0), -1.0,
                   g)
    return g

  # Same as GraphOracle's, over this oracle's own block and degree.
  target = GraphOracle.target
  minibatch = GraphOracle.minibatch

  def degree(self) -> np.ndarray:
    if self._degree_cache is None:
      self._degree_cache = self.target().sum(1)
    return self._degree_cache
