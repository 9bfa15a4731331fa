"""The SSL graph mixed with a labeler's answers.

Cabannes et al. 2023, arXiv 2303.15256, App. C.2.3.

Cabannes et al. 2023 mixes the augmentation graph with the few known labels,

    G = (1 − α)·G_ssl + α·G_lab,

where G_lab is what a labeler revealed (Cabannes et al. 2023 uses ŶŶᵀ, the
supervised graph of the known labels; here any human oracle of `ssljax.pal`:
passive random pairs or the captcha screens, so G_lab may be signed). α weighs
the labels: Cabannes et al. 2023 observes that with few labels a small α is
better, since label blocks fold the input space "globally and brutally" while
SSL relations are local.

`MixedOracle` draws the SSL minibatch (whole groups of V views, with the
group inclusion weights) and evaluates the mixed graph on it. The
Horvitz–Thompson weights of a sampling design are unbiased for ANY graph
on the drawn pairs, so `pal_minibatch_loss` stays unbiased for the mixed
graph as long as the degrees are the mixed full-graph degrees, which they
are: d = (1 − α)·d_ssl + α·d_lab.

With `share_positives=True` the SSL positives (the views of one source
sample) are written into the label oracle's `PairGraph` at no labeler cost,
so its transitive completion spreads every answer to all views of both
samples (Cabannes et al. 2023 Fig. 6 deduction) and the label oracle never asks
about a relation already implied by the views.

References:
  Cabannes et al. 2023 App. C.2.3 (eq. of the mixed graph, Fig. 4), Algorithm 1,
  Fig. 6; the unbiased minibatch loss is the degree-corrected form of
  `ssljax.pal.minibatch`.
"""

from __future__ import annotations

import numpy as np

from ssljax.pal.oracles import Minibatch, SSLOracle

__all__ = ["MixedOracle"]


class MixedOracle:
  """SSL positives plus a label oracle's answers: (1 − α)G_ssl + α·G_lab.

  Each `query` round is delegated to the label oracle until it has spent
  `budget` pair answers (its return values summed; a screen of M items
  counts M, as in `Labeler.cost.answers`); then rounds ask nothing and
  return 0. The check is made before a round, so the last round may
  overshoot the budget by less than one round's answers.

  Args:
    groups: (N,) int source-sample id of each row, V >= 2 rows per id (as
      `SSLOracle`).
    label_oracle: a human oracle over the same N rows, with
      `query(rng, embed_all)`, `block(rows, cols)`, `degree()` and `graph`
      (`SupervisedOracle`, `CaptchaOracle`, `PruningOracle`).
    alpha: mixing weight α in [0, 1] of the label graph.
    budget: most pair answers to spend (None: no cap).
    share_positives: record the SSL positives in the label oracle's graph.

  Raises:
    ValueError: if alpha is outside [0, 1], budget is negative, or the
      label oracle has a different N than groups.

  Example:
    >>> from ssljax.pal.labeler import Labeler
    >>> from ssljax.pal.oracles import SupervisedOracle
    >>> y, groups = np.array([0, 1, 0, 1]), np.array([0, 1, 0, 1])
    >>> inner = SupervisedOracle(Labeler(y), 1, complete=True)
    >>> mix = MixedOracle(groups, inner, alpha=0.5, budget=1)
    >>> mix.query(np.random.default_rng(0)), mix.query(np.random.default_rng(0))
    (1, 0)
  """

  def __init__(self, groups, label_oracle, *, alpha: float,
               budget: int | None = None, share_positives: bool = True):
    self.ssl = SSLOracle(groups)
    self.labels = label_oracle
    self.n = self.ssl.n
    if getattr(label_oracle, "n", None) != self.n:
      raise ValueError(f"label_oracle must cover the N={self.n} rows of"
                       f" groups, got n={getattr(label_oracle, 'n', None)}")
    if not 0.0 <= float(alpha) <= 1.0:
      raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    if budget is not None and (int(budget) != budget or budget < 0):
      raise ValueError(f"budget must be a non-negative integer or None, got"
                       f" {budget!r}")
    self.alpha, self.budget, self.spent = float(alpha), budget, 0
    if share_positives:
      self._share_positives()

  def _share_positives(self) -> None:
    # Chain each group's views: v0 ~ v1 ~ ... (free, known by construction).
    members = self.ssl.members  # (num_groups, V), rows of each group
    for a, b in zip(members[:, :-1].reshape(-1), members[:, 1:].reshape(-1)):
      self.labels.graph.add_positive(int(a), int(b))

  def query(self, rng, embed_all=None) -> int:
    """One label round while under budget; returns its pair answers."""
    if self.budget is not None and self.spent >= self.budget:
      return 0
    spent = int(self.labels.query(rng, embed_all))
    self.spent += spent
    return spent

  def target(self) -> np.ndarray:
    """(N, N) mixed graph (1 − α)G_ssl + α·G_lab."""
    return ((1.0 - self.alpha) * self.ssl.target()
            + self.alpha * self.labels.target())

  def minibatch(self, rng, batch_size, embed=None) -> Minibatch:
    """SSL group minibatch with the mixed graph block and degrees."""
    del embed
    mb = self.ssl.minibatch(rng, batch_size)
    a = self.alpha
    g = (1.0 - a) * mb.g + a * self.labels.block(mb.idx, mb.idx)
    degree = (1.0 - a) * mb.degree + a * self.labels.degree()[mb.idx]
    return Minibatch(mb.idx, g, degree, mb.n, mb.pair_weights)
