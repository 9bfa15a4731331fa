"""PAL oracles: a sampler and a labeler each (Cabannes et al. 2023, Alg. 1–6).

Every oracle exposes the same two calls used by `run_pal` and the kernel
experiments:

* `query(rng, embed_all=None) -> int`: one round of questions to the
  labeler (or none, for the label-free oracles); returns the number of pair
  answers spent. `embed_all()` returns the current (N, K) embeddings for the
  oracles that look at them (guided captcha, data pruning, hierarchical).
* `minibatch(rng, batch_size, embed=None) -> Minibatch`: the rows J_t of an
  SGD step with the graph entries I_t known among them, the full-graph
  degrees of those rows and the inverse inclusion probabilities that make
  `pal_minibatch_loss` unbiased for the oracle's current graph.

Human oracles keep their knowledge in a `PairGraph` (`oracle.graph`) and
train on its completed signed (+1/-1/0) or non-contrastive (1/0) view;
`target()` gives that (N, N) view for closed-form solvers.

Departure from the paper, stated: Algorithm 2's supervised sampler uses the
queried pair itself as the minibatch (I_t = J_t = {(i_t, j_t)}); here the
queries and the minibatch are decoupled (J_t uniform over [N], I_t every
known entry inside it), which keeps the loss unbiased for the known graph
and lets the same loop serve every oracle.

The active human oracles (Algorithms 3, 5, 6) are in `ssljax.pal.active`.

References:
  Cabannes et al. 2023 Algorithm 1 (framework), 2 (SSL and supervised oracles),
  4 (NNCLR); App. A.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from ssljax import checks
from ssljax.pal.bookkeeping import PairGraph
from ssljax.pal.labeler import Labeler
from ssljax.pal.weights import group_pair_weights, uniform_pair_weights

__all__ = ["Minibatch", "SSLOracle", "NNCLROracle", "SupervisedOracle"]


class Minibatch(NamedTuple):
  """One SGD step's data: rows, their graph block, degrees and weights.

  Attributes:
    idx: (B,) int sample indices (J_t).
    g: (B, B) float64 graph entries among them (I_t: the known ones).
    degree: (B,) full-graph degrees of the rows.
    n: number of samples of the graph the loss refers to.
    pair_weights: (B, B) inverse inclusion probabilities.
  """
  idx: np.ndarray
  g: np.ndarray
  degree: np.ndarray
  n: int
  pair_weights: np.ndarray


def check_batch_size(batch_size, n: int) -> int:
  """batch_size as an int in [2, N] (a minibatch needs a pair of rows).

  Raises:
    ValueError: if batch_size is not an integer in [2, n].
  """
  if int(batch_size) != batch_size or not 2 <= batch_size <= n:
    raise ValueError(f"batch_size must be an integer in [2, N={n}], got"
                     f" {batch_size!r}")
  return int(batch_size)


# ---------------------------------------------------------------------------
# Label-free oracles.
# ---------------------------------------------------------------------------


class SSLOracle:
  """SSL oracle (Algorithm 2): positives are the views of one source sample.

  G_ij = 1{groups_i = groups_j} is known by construction (no labeler, no
  cost). The minibatch draws `batch_size // V` groups uniformly and keeps
  all their V views (J_t), with `group_pair_weights`.

  Args:
    groups: (N,) int source-sample id of each row; every group must have
      the same size V >= 2.

  Attributes:
    members: (num_groups, V) int array, the rows of each group.

  Raises:
    ValueError: if groups is not (N,) int or group sizes differ or are < 2.
  """

  def __init__(self, groups):
    g = np.asarray(groups)
    if g.ndim != 1 or not np.issubdtype(g.dtype, np.integer):
      raise ValueError(f"groups must be an (N,) int array, got shape {g.shape}"
                       f" dtype {g.dtype}")
    self.ids, inverse, sizes = np.unique(g, return_inverse=True,
                                         return_counts=True)
    if sizes.min() != sizes.max() or sizes.min() < 2:
      raise ValueError(f"every group must have the same size V >= 2, got"
                       f" sizes in [{sizes.min()}, {sizes.max()}]")
    self.groups, self.n, self.views = inverse, g.shape[0], int(sizes[0])
    self.members = np.argsort(inverse, kind="stable").reshape(-1, self.views)

  def query(self, rng, embed_all=None) -> int:
    del rng, embed_all
    return 0

  def target(self) -> np.ndarray:
    """(N, N) G_ssl, diagonal included."""
    return (self.groups[:, None] == self.groups[None, :]).astype(np.float64)

  def minibatch(self, rng, batch_size, embed=None) -> Minibatch:
    del embed
    m = check_batch_size(batch_size, self.n) // self.views
    num_groups = self.members.shape[0]
    if m < 1:
      raise ValueError(f"batch_size must be >= V = {self.views}")
    chosen = rng.choice(num_groups, size=m, replace=False)
    idx = self.members[chosen].reshape(-1)
    grp = self.groups[idx]
    g = (grp[:, None] == grp[None, :]).astype(np.float64)
    return Minibatch(idx, g, np.full(idx.shape[0], float(self.views)), self.n,
                     group_pair_weights(grp, num_groups, m))


class NNCLROracle:
  """NNCLR oracle (Algorithm 4): nearest neighbours in embedding space.

  For a minibatch I_t (uniform rows, or whole groups of views if `groups`
  is given), G^(t)_ij = 1 if z_j is the nearest neighbour of z_i in the
  batch (or i ~ j by construction of the views), symmetrised, diagonal 1.
  G^(t) lives on the batch only, so the loss is the full loss of that batch
  graph (n = B, weights 1, degrees = its row sums). No labeler, no cost.

  Args:
    n: number of samples N.
    groups: optional (N,) int view groups (as in `SSLOracle`).
  """

  def __init__(self, n: int, groups=None):
    self.n = int(n)
    self._ssl = None if groups is None else SSLOracle(groups)

  def query(self, rng, embed_all=None) -> int:
    del rng, embed_all
    return 0

  def minibatch(self, rng, batch_size, embed=None) -> Minibatch:
    if embed is None:
      raise ValueError("NNCLROracle.minibatch needs embed(idx) -> (B, K)")
    if self._ssl is None:
      idx = rng.choice(self.n, size=check_batch_size(batch_size, self.n),
                       replace=False)
      same = np.eye(idx.shape[0], dtype=bool)
    else:
      idx = self._ssl.minibatch(rng, batch_size).idx
      grp = self._ssl.groups[idx]
      same = grp[:, None] == grp[None, :]
    z = checks.unit_rows(np.asarray(embed(idx), np.float64))
    dist = -z @ z.T
    dist[same] = np.inf  # a neighbour is another sample (another group)
    nn = np.argmin(dist, axis=1)
    g = same.astype(np.float64)
    g[np.arange(idx.shape[0]), nn] = 1.0
    g = np.maximum(g, g.T)
    b = idx.shape[0]
    return Minibatch(idx, g, g.sum(1), b, np.ones((b, b)))


# ---------------------------------------------------------------------------
# Human oracles sharing a PairGraph.
# ---------------------------------------------------------------------------


class GraphOracle:
  """Base class of the labeler-backed oracles (PAL, Cabannes et al. 2023,
  arXiv 2303.15256, Algorithms 1-2): a `Labeler`, the `PairGraph` of the answers
  so far, and the graph the loss fits, completed (transitive closure of the
  positives) or raw.

  Subclasses implement `query(rng, embed_all=None) -> int` (pair answers bought
  this round); `block`, `degree`, `target` and `minibatch` are shared.

  Args:
    labeler: the `Labeler` that answers pair queries (it holds N).
    signed: if True, negative answers enter the graph as −1.
    complete: if True, the loss sees the completed graph.

  Raises:
    ValueError: if labeler is not a `Labeler`.
  """

  def __init__(self, labeler: Labeler, *, signed: bool, complete: bool):
    if not isinstance(labeler, Labeler):
      raise ValueError(f"labeler must be a Labeler, got {type(labeler)}")
    self.labeler, self.n = labeler, labeler.n
    self.signed, self.complete = bool(signed), bool(complete)
    self.graph = PairGraph(self.n)

  def block(self, rows, cols) -> np.ndarray:
    if self.complete:
      return self.graph.block(rows, cols, signed=self.signed)
    return self.graph.raw_block(rows, cols, signed=self.signed)

  def degree(self) -> np.ndarray:
    if self.complete:
      return self.graph.degree(signed=self.signed)
    return self.graph.raw_degree(signed=self.signed)

  def target(self) -> np.ndarray:
    """(N, N) current graph view (what the loss fits)."""
    idx = np.arange(self.n)
    return self.block(idx, idx)

  def minibatch(self, rng, batch_size, embed=None) -> Minibatch:
    del embed
    b = check_batch_size(batch_size, self.n)
    idx = rng.choice(self.n, size=b, replace=False)
    return Minibatch(idx, self.block(idx, idx), self.degree()[idx], self.n,
                     uniform_pair_weights(b, self.n))


class SupervisedOracle(GraphOracle):
  """Passive supervised oracle (Algorithm 2): random pairs in [N]².

  Each `query` asks `pairs_per_round` uniformly random pairs (i ≠ j).

  Args:
    labeler: the `Labeler`.
    pairs_per_round: pairs asked per round.
    signed: train on the ±1/0 view (else 1/0).
    complete: deduce by transitivity (else only the answered entries, the
      naive passive baseline of Cabannes et al. 2023 Fig. 6).
  """

  def __init__(self, labeler: Labeler, pairs_per_round: int = 10, *,
               signed: bool = True, complete: bool = False):
    super().__init__(labeler, signed=signed, complete=complete)
    if int(pairs_per_round) != pairs_per_round or pairs_per_round < 1:
      raise ValueError(f"pairs_per_round must be a positive integer, got"
                       f" {pairs_per_round!r}")
    self.pairs_per_round = int(pairs_per_round)

  def query(self, rng, embed_all=None) -> int:
    del embed_all
    i = rng.integers(0, self.n, self.pairs_per_round)
    j = (i + rng.integers(1, self.n, self.pairs_per_round)) % self.n  # j != i
    self.graph.add_many(i, j, self.labeler.pairs(i, j))
    return self.pairs_per_round
