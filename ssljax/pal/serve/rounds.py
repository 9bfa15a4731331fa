"""One training round on people's answers: graph, PAL loss, probe.

A round (`train_round`) turns the answers into votes per pair, the votes
into the contrastive graph (`strategy.graph_from_votes`: same -> +1,
different -> -1, majority per pair, ties left out; a pair known only by
transitive completion weighs ``train.complete_weight``, `AnswersOracle`:
0 by default, answered pairs only), and runs
Algorithm 1 of Cabannes et al. 2023 (`ssljax.pal.run_pal`) on the pool (or its
views) with that graph, Adam on the unbiased degree-corrected minibatch estimate of
‖ZZᵀ − G‖² − ‖G‖² (`ssljax.pal.pal_minibatch_loss`). It starts from the
previous finished round's variables (a warm start), so rounds continue one
model.

The graph (``train.graph``). "mixed" (default): the answers are few and
most pairs of the pool stay unknown, which the loss reads as G_ij = 0, so
the round mixes them with the SSL graph of augmentations, as Cabannes et
al. 2023 App. C.2.3 does with few labels: the rows are V augmented views
of every pool image (``train.views``, ``train.augment``; fresh views each
round), G = (1 − α)·G_ssl + α·G_ans with α = ``train.alpha``, through
`ssljax.pal.MixedOracle` (whole groups of views per minibatch; the views
of one image are free positives of G_ans, so an answer about two images
holds for all their views). "answers": G = G_ans on the clean pool images
with uniform minibatches (the round before the mix).

The network is an MLP (BatchNorm, ReLU) with a linear K-dim output times a
learned scalar exp(s) (s starts at −½·log N): the optimum scale of Z
depends on the graph's spectrum, which per-weight Adam steps cover slowly.

`run_round` is what the service's background worker runs in a child
process (``python -m ssljax.pal.serve train --workdir DIR --round R``):
answers from the database, variables and pool embeddings written to
``DIR/rounds/``, one line appended to ``DIR/metrics.jsonl``, the rounds row
marked done with the metrics (linear probe and 20-NN test accuracy of the
frozen embedding, trained on the pool images' labels).

References:
  Cabannes et al. 2023, arXiv 2303.15256, Algorithm 1, eqs. (9)-(11) in
  the degree-corrected form, eq. (15) (contrastive graph).
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import time

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ssljax import data as ssl_data
from ssljax.probes import knn_accuracy, linear_probe
from ssljax.pal.loop import ScaledMLP, embed, run_pal
from ssljax.pal.mixed import MixedOracle
from ssljax.pal.oracles import GraphOracle
from ssljax.pal.serve import strategy
from ssljax.pal.serve.pool import load_pool, round_files

__all__ = ["AnswersOracle", "votes_from_answers", "round_oracle",
           "train_round", "run_round"]

GRAPHS = ("mixed", "answers")


class AnswersOracle:
  """The fixed graph of a round as a `run_pal` oracle (asks nothing).

  Also the label oracle of `ssljax.pal.MixedOracle` (``block``,
  ``degree``, ``n``).

  The entries are w·(completed graph) + (1 − w)·(answered pairs only),
  w = `complete_weight`: an answered pair keeps its ±1 whatever w, a pair
  known only by transitive completion (i ~ j, j ~ k => i ~ k; i ~ j,
  j !~ k => i !~ k) gets ±w. w = 1 is the completed graph of Cabannes et
  al. 2023 Fig. 6 / Algorithm 3; w = 0 the answered entries alone (the
  passive baseline of their Fig. 3).

  Args:
    graph: the `ssljax.pal.PairGraph` of the answers over N images.
    signed: different -> -1 (True) or 0 (False).
    complete_weight: w in [0, 1].
    groups: optional (M,) int image of each row (rows are views of the
      images; every view of an image carries that image's relations, and
      two views of one image are 1). None: the rows are the N images.

  Raises:
    ValueError: w outside [0, 1], or groups not (M,) ints in [0, N).
  """

  def __init__(self, graph, *, signed: bool, complete_weight: float = 1.0,
               groups=None):
    if not 0.0 <= float(complete_weight) <= 1.0:
      raise ValueError(f"complete_weight must be in [0, 1], got"
                       f" {complete_weight!r}")
    self.graph, self.signed = graph, bool(signed)
    self.complete_weight = float(complete_weight)
    if groups is None:
      groups = np.arange(graph.n)
    groups = np.asarray(groups)
    if (groups.ndim != 1 or not np.issubdtype(groups.dtype, np.integer)
        or groups.size == 0 or groups.min() < 0 or groups.max() >= graph.n):
      raise ValueError(f"groups must be (M,) ints in [0, {graph.n}), got"
                       f" shape {groups.shape} dtype {groups.dtype}")
    self.groups = groups
    self.n = int(groups.size)
    self._views = np.bincount(groups, minlength=graph.n).astype(np.float64)

  def query(self, rng, embed_all=None) -> int:
    del rng, embed_all
    return 0

  def block(self, rows, cols) -> np.ndarray:
    """(R, S) float64 graph entries of the rows (views of one image: 1)."""
    r, c = self.groups[np.asarray(rows)], self.groups[np.asarray(cols)]
    w = self.complete_weight
    out = w * self.graph.block(r, c, signed=self.signed)
    if w < 1.0:
      out += (1.0 - w) * self.graph.raw_block(r, c, signed=self.signed)
    return out

  def degree(self) -> np.ndarray:
    """(M,) float64 row sums over all M rows, diagonal included."""
    w = self.complete_weight
    g, s = self.graph, self.signed
    if np.all(self._views == self._views[0]):  # V views of every image
      d = w * g.degree(signed=s)
      if w < 1.0:
        d = d + (1.0 - w) * g.raw_degree(signed=s)
      return (self._views[0] * d)[self.groups]
    idx = np.arange(self.n)  # uneven views: explicit row sums
    return self.block(idx, idx).sum(1)

  # Same as GraphOracle's (the graph above; uniform minibatches), over
  # this oracle's own block and degree.
  target = GraphOracle.target
  minibatch = GraphOracle.minibatch


def votes_from_answers(index: np.ndarray, i, j, answer) -> dict:
  """{(p, q): [same, different]} over pool positions, skips ignored.

  Args:
    index: (N,) train-split index of each pool position.
    i, j: (A,) train-split indices of the answered pairs.
    answer: (A,) str, "same" / "different" / "skip".

  Raises:
    ValueError: an item that is not in the pool.
  """
  pos = {int(t): p for p, t in enumerate(np.asarray(index).tolist())}
  votes: dict = {}
  for a, b, ans in zip(np.asarray(i).tolist(), np.asarray(j).tolist(),
                       np.asarray(answer).tolist()):
    if a not in pos or b not in pos:
      raise ValueError(f"answered pair ({a}, {b}) is not in the pool")
    if ans == "skip":
      continue
    v = votes.setdefault(strategy.pair_key(pos[a], pos[b]), [0, 0])
    v[0 if ans == "same" else 1] += 1
  return votes


def _optimizer(config):
  def labels(params):
    return {name: ("scale" if name == "log_scale" else
                   jax.tree.map(lambda _: "net", sub))
            for name, sub in params.items()}
  return optax.multi_transform({"net": optax.adam(config.train.lr),
                                "scale": optax.adam(config.train.scale_lr)},
                               labels)


def round_oracle(config, n: int, votes: dict):
  """The oracle of a round's graph (``config.train.graph``, module doc).

  Args:
    config: the service config (`configs/pal_human.py`); configs written
      before ``train.graph`` existed get "answers".
    n: pool size N.
    votes: `votes_from_answers` output (pool positions in [0, N)).

  Returns:
    (oracle, V): V = 1 and an `AnswersOracle` over the N images for
    "answers"; V = ``train.views`` and a `MixedOracle` over N·V rows
    (row v·N + p is view v of pool image p; every view carries its
    image's answers) for "mixed". The answers' entries are weighted by
    ``train.complete_weight`` (`AnswersOracle`; configs without it get 1).

  Raises:
    ValueError: an unknown ``train.graph``, fewer than 2 views, an alpha
      or a complete_weight outside [0, 1].
  """
  kind = config.train.get("graph", "answers")
  if kind not in GRAPHS:
    raise ValueError(f"train.graph must be one of {GRAPHS}, got {kind!r}")
  signed = config.train.signed
  weight = config.train.get("complete_weight", 1.0)
  if kind == "answers":
    return AnswersOracle(strategy.graph_from_votes(n, votes), signed=signed,
                         complete_weight=weight), 1
  v = int(config.train.views)
  if v < 2:
    raise ValueError(f"train.views must be >= 2 for the mixed graph, got {v}")
  groups = np.tile(np.arange(n), v)
  answers = AnswersOracle(strategy.graph_from_votes(n, votes), signed=signed,
                          complete_weight=weight, groups=groups)
  return MixedOracle(groups, answers, alpha=config.train.alpha,
                     share_positives=False), v


def round_rows(config, images: np.ndarray, views: int,
               round_id: int) -> np.ndarray:
  """(N·V, H, W, C) float32 training rows in [0, 1] of a round.

  V = 1: the pool images. V >= 2: V augmented views of each
  (`ssljax.data.device_views` with ``config.train.augment``, keyed by
  seed + round_id), view-major (row v·N + p).
  """
  if views == 1:
    return images.astype(np.float32) / 255.0
  spec = ssl_data.view_spec({**config.train.augment.to_dict(),
                             "num_global": views})
  out = ssl_data.device_views({"images": images},
                              jax.random.key(config.seed + round_id), spec)
  return np.concatenate([np.asarray(o, np.float32) for o in out])


def train_round(config, pool: dict, votes: dict, *, round_id: int,
                variables=None) -> tuple[dict, np.ndarray, dict]:
  """Trains one round on the graph of `votes`.

  Args:
    config: the service config (`configs/pal_human.py`).
    pool: `pool.load_pool` arrays.
    votes: `votes_from_answers` output.
    round_id: seeds the round (seed + round_id).
    variables: warm start (None: fresh initialisation).

  Returns:
    (variables, (N, K) float32 pool embeddings, metrics dict: "loss",
    "resolved_pairs", "components", "probe", "knn" (the last two only when
    the pool and test images have labels)).
  """
  x = pool["images"].astype(np.float32) / 255.0
  n = x.shape[0]
  graph = strategy.graph_from_votes(n, votes)
  oracle, views = round_oracle(config, n, votes)
  rows = round_rows(config, pool["images"], views, round_id)
  model = ScaledMLP(tuple(config.model.hidden), config.model.k, rows.shape[0])
  res = run_pal(rows, oracle, model,
                key=jax.random.key(config.seed + round_id),
                steps=config.train.steps,
                batch_size=min(config.train.batch, rows.shape[0]),
                optimizer=_optimizer(config), log_every=10**9,
                variables=variables)
  z = embed(model, res.variables, x)
  metrics = {"loss": float(res.history[-1]["loss"]),
             "resolved_pairs": int(sum(a != b for a, b in votes.values())),
             "components": graph.num_components(),
             "graph_conflicts": int(graph.conflicts)}
  y, y_test = pool["labels"], pool["test_labels"]
  if len(y_test) and np.all(y >= 0) and np.unique(y).size > 1:
    z_test = embed(model, res.variables,
                   pool["test_images"].astype(np.float32) / 255.0)
    probe = linear_probe(z, y, z_test, y_test, l2_grid=(1e-4, 1e-2),
                         max_iter=300)
    metrics["probe"] = float(probe["test_accuracy"])
    metrics["knn"] = float(knn_accuracy(z, y, z_test, y_test))
  return res.variables, np.asarray(z, np.float32), metrics


def _atomic_write(path: pathlib.Path, data: bytes) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(path.name + ".tmp")
  with open(tmp, "wb") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def run_round(config, workdir, engine, round_id: int, answers: dict) -> dict:
  """Trains round `round_id` on `answers` and records it (see module doc).

  Args:
    config: the service config.
    workdir: the service directory (pool.npz, rounds/, metrics.jsonl).
    engine: SQLAlchemy engine (its rounds row is updated), or None offline.
    round_id: the round number (warm start from the last finished earlier
      round whose files exist).
    answers: arrays "i", "j", "answer" (`db.export_answers` or an export).

  Returns:
    The metrics dict written to metrics.jsonl.
  """
  import sqlalchemy as sa  # pylint: disable=import-outside-toplevel
  from ssljax.pal.serve import db  # pylint: disable=import-outside-toplevel
  t0 = time.time()
  pool = load_pool(workdir)
  votes = votes_from_answers(pool["index"], answers["i"], answers["j"],
                             answers["answer"])
  n = pool["images"].shape[0]
  model = ScaledMLP(tuple(config.model.hidden), config.model.k, n)
  template = model.init(jax.random.key(0), jnp.zeros((2,) +
                                                     pool["images"].shape[1:]),
                        train=False)
  variables = None
  for r in range(round_id - 1, 0, -1):
    path = round_files(workdir, r)[0]
    if path.exists():
      variables = flax.serialization.from_bytes(template, path.read_bytes())
      break
  variables, z, metrics = train_round(config, pool, votes, round_id=round_id,
                                      variables=variables)
  var_path, z_path = round_files(workdir, round_id)
  _atomic_write(var_path, flax.serialization.to_bytes(variables))
  buf = io.BytesIO()
  np.save(buf, z)
  _atomic_write(z_path, buf.getvalue())
  metrics = {"round": round_id, "answers": int(len(answers["answer"])),
             **metrics, "seconds": round(time.time() - t0, 2),
             "time": time.time()}
  with open(pathlib.Path(workdir) / "metrics.jsonl", "a") as f:
    f.write(json.dumps(metrics) + "\n")
  if engine is not None:
    with engine.begin() as conn:
      conn.execute(sa.update(db.rounds).where(db.rounds.c.id == round_id)
                   .values(status="done", finished_at=time.time(),
                           metrics=json.dumps(metrics)))
  return metrics
