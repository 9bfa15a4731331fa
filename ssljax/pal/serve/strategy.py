"""Which pair to ask next, and the graph the answers build (NumPy only).

Positions 0..N-1 index the pool (the train images people see); the service
maps them to train-split indices.

Graph (`graph_from_votes`): per unordered pair, the "same" and "different"
answers are counted (skips ignored); the majority decides, a tie leaves the
pair out. Resolved pairs enter a `ssljax.pal.PairGraph`, which completes
them by transitivity (i ~ j, j ~ k => i ~ k; i ~ j, j !~ k => i !~ k) and
gives the contrastive target of Cabannes et al. 2023 eq. (15): +1 same,
-1 different, 0 unknown. A noisy answer that contradicts what the
completion already knows is dropped (``PairGraph(on_conflict="ignore")``,
earlier knowledge wins), the "check answers against deductions" remedy of
the paper's noisy-oracle discussion (§4.3); the majority vote over several
annotators of one pair is the other.

Active strategy (`active_pair`): Algorithm 3 of the paper (the captcha
oracle) asked one pair at a time, with its improvements 1-3:

1. templates (one known member per class) found from negative answers: the
   template set is a greedy maximal set of components known to be
   pairwise different (largest first); while it has fewer than C members, a
   sample of unknown relation is compared with the templates, most similar
   first, until it joins one or is different from all (a new template);
2. then the class c with the fewest known members is chosen;
3. among the samples of unknown relation to c's template, the current
   model picks the one most likely in c (largest margin of cosine
   similarity to c's centroid over the other centroids); without a model
   (before the first round), a uniform draw.

Passive strategy (`passive_pair`): a uniform random pair i != j.

References:
  Cabannes et al. 2023, "Active Self-Supervised Learning: A Few Low-Cost
  Relationships Are All You Need", arXiv 2303.15256, Algorithm 3 and the
  improvements after it, eq. (15), Fig. 6 (deductions), §4.3 (noisy
  oracles).
"""

from __future__ import annotations

import numpy as np

from ssljax import checks
from ssljax.pal.bookkeeping import PairGraph

__all__ = ["graph_from_votes", "templates", "active_pair", "passive_pair",
           "pair_key"]


PARTNERS = ("template", "member")


def pair_key(i: int, j: int) -> tuple[int, int]:
  """The unordered pair (min, max)."""
  return (int(i), int(j)) if i <= j else (int(j), int(i))


def graph_from_votes(n: int, votes: dict) -> PairGraph:
  """The `PairGraph` of the majority answers.

  Args:
    n: pool size N.
    votes: {(i, j): [same_count, different_count]} over pool positions,
      in the order pairs were first answered (dict order).

  Returns:
    A `PairGraph` (on_conflict="ignore") holding every pair whose majority
    is strict; ties are left out.

  Raises:
    ValueError: a position outside [0, n).
  """
  graph = PairGraph(n)
  for (i, j), (same, diff) in votes.items():
    if same != diff:
      graph.add(i, j, same > diff)
  return graph


def templates(graph: PairGraph, num_classes: int) -> list[int]:
  """One sample per class found so far: components pairwise known different.

  Greedy over the components with at least one known negative (largest
  first, then smallest sample index); a component joins when it is known
  different from every chosen one. Returns at most num_classes samples
  (the smallest index of each chosen component).
  """
  comp = graph.component_ids()
  counts = graph.counts()
  if counts["negative"] == 0:
    # No "different" yet: the largest component (if any pair is known) is
    # the only class found.
    sizes = np.bincount(comp)
    if sizes.max() < 2:
      return []
    return [int(np.flatnonzero(comp == int(np.argmax(sizes)))[0])]
  sizes = np.bincount(comp)
  first = np.full(sizes.shape[0], graph.n)
  np.minimum.at(first, comp, np.arange(graph.n))
  # A component has a known negative iff its signed degree is below its
  # size (the signed degree subtracts the sizes of its negative components).
  has_neg = graph.degree(signed=True) < graph.degree(signed=False)
  candidates = [int(first[c]) for c in np.unique(comp) if has_neg[first[c]]]
  candidates.sort(key=lambda s: (-sizes[comp[s]], s))
  cand = np.asarray(candidates, np.int64)
  ok = np.ones(cand.size, bool)  # known different from every chosen one
  chosen: list[int] = []
  while len(chosen) < num_classes:
    left = np.flatnonzero(ok)
    if left.size == 0:
      break
    s = int(cand[left[0]])
    chosen.append(s)
    ok &= graph.block(cand, np.array([s]))[:, 0] < 0
  return chosen


def _unit(z):
  return None if z is None else checks.unit_rows(np.asarray(z, np.float64))


def active_pair(rng: np.random.Generator, graph: PairGraph, num_classes: int,
                *, embeddings=None, busy=(), excluded=frozenset(),
                tries: int = 64, partner: str = "template"):
  """The next pair of the active strategy (pair form of Algorithm 3).

  Args:
    rng: numpy Generator.
    graph: the `PairGraph` of the answers so far (`graph_from_votes`).
    num_classes: C, the classes to find.
    embeddings: optional (N, K) current model embeddings of the pool.
    busy: positions in pending queries (not asked again meanwhile).
    excluded: set of `pair_key` pairs not to ask (pending, or answered by
      this annotator).
    tries: candidates examined before giving up on a class.
    partner: whom a sample is compared with to learn its relation to a
      class: "template" (the class's template, Algorithm 3) or "member" (a
      member of the template's component drawn uniformly: the same
      relation by transitivity, but the answered pairs spread over the
      component instead of a star around its template).

  Returns:
    (i, j) pool positions, or None if every relation is known or excluded.
  """
  if partner not in PARTNERS:
    raise ValueError(f"partner must be one of {PARTNERS}, got {partner!r}")
  n = graph.n
  z = _unit(embeddings)
  temps = templates(graph, num_classes)
  comp_ids = graph.component_ids() if partner == "member" else None

  def mate(x, t):
    """The pair asking x's relation to template t's class."""
    if comp_ids is None:
      return pair_key(x, t)
    members = np.flatnonzero(comp_ids == comp_ids[t])
    return pair_key(x, int(members[rng.integers(members.size)]))

  busy_mask = np.zeros(n, bool)
  busy_mask[np.asarray(list(busy), np.int64)] = True
  everything = np.arange(n)
  rel = (graph.block(np.array(temps), everything) if temps
         else np.zeros((0, n)))
  if len(temps) < num_classes:  # improvement 1: discover templates
    free = np.flatnonzero(np.any(rel == 0, axis=0) & ~busy_mask
                          if temps else ~busy_mask)
    # Random order, but samples already under way first (known different
    # from some templates): Algorithm 3 places one sample before the next.
    free = rng.permutation(free)
    if temps:
      free = free[np.argsort(-(rel[:, free] < 0).sum(0), kind="stable")]
    for x in free[:tries]:
      if not temps:
        y = int(rng.integers(n - 1))
        y += y >= x
        if pair_key(x, y) not in excluded:
          return pair_key(x, y)
        continue
      order = np.arange(len(temps))
      if z is not None:
        order = np.argsort(-(z[np.array(temps)] @ z[x]), kind="stable")
      for c in order:
        if rel[c, x] == 0:
          pair = mate(x, temps[c])
          if pair not in excluded:
            return pair
    return None
  comp = graph.component_ids() if comp_ids is None else comp_ids
  known = np.bincount(comp)[comp[np.array(temps)]]
  cents = None
  if z is not None:
    cents = checks.unit_rows(np.stack([z[comp == comp[t]].mean(0)
                                       for t in temps]))
  for c in np.argsort(known, kind="stable"):  # improvement 2
    cand = np.flatnonzero((rel[c] == 0) & ~busy_mask)
    if cand.size == 0:
      continue
    if cents is not None:  # improvement 3: classifier-guided
      sims = z[cand] @ cents.T
      others = np.delete(sims, c, axis=1)
      margin = sims[:, c] - (others.max(1) if others.size else 0.0)
      cand = cand[np.argsort(-margin, kind="stable")]
    else:
      cand = rng.permutation(cand)
    for x in cand[:tries]:
      pair = mate(x, temps[c])
      if pair not in excluded:
        return pair
  return None


def passive_pair(rng: np.random.Generator, n: int, *, excluded=frozenset(),
                 resolved=frozenset(), tries: int = 256):
  """A uniform random pair i != j not excluded nor already resolved.

  Returns:
    (i, j) with i < j, or None after `tries` draws hit excluded pairs.
  """
  for _ in range(tries):
    i = int(rng.integers(n))
    j = int(rng.integers(n - 1))
    j += j >= i
    key = pair_key(i, j)
    if key not in excluded and key not in resolved:
      return key
  return None
