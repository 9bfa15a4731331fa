"""The state of the annotation service: who holds which query, the votes.

`Service` loads everything it needs from the database at start (answers,
pending queries, rounds), keeps it in memory behind one lock, and writes
every change to the database before it changes memory or answers a
request: the database is the truth, memory a cache of it.

Queries. `next_query(annotator)` returns, in this order: the annotator's
own pending query (a reloaded page gets the same pair); a pending query
whose holder timed out (``server.query_timeout_s``), re-issued; a pair
that still needs votes (``server.votes_per_pair`` > 1); a new pair from the
strategy (`ssljax.pal.serve.strategy`, over the last round's embeddings;
the active strategy asks uniform pairs until ``passive_first`` pairs are
answered).
A pair already issued to or answered by an annotator never goes to that
annotator again, and a pending pair goes to one annotator at a time. At
start every pending query is released (its holder may be gone), so a
restart re-issues them.

Rounds. A background thread starts a round every ``server.train_every``
answers (skips included), as a child process ``python -m ssljax.pal.serve
train --workdir DIR --round R`` at low priority, never on the request
path; when it finishes the strategy switches to its embeddings. Rounds
left "running" by a killed server are marked "aborted" at start; the next
round then starts at once (if the answers since the last finished round
reach ``server.train_every``), from the last finished round's weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import sqlalchemy as sa

from ssljax.pal.serve import db, strategy
from ssljax.pal.serve.pool import round_files

__all__ = ["Service", "NotFound"]


class NotFound(Exception):
  """An unknown query id."""


class Service:
  """Queries, answers and rounds of one campaign (see the module doc).

  Args:
    config: the service config (`configs/pal_human.py`).
    workdir: the campaign directory (pool.npz, rounds/, metrics.jsonl).
    engine: SQLAlchemy engine (schema already migrated).
    pool: `pool.load_pool` arrays.
  """

  def __init__(self, config, workdir, engine, pool: dict):
    self.config, self.workdir, self.engine, self.pool = (config, str(workdir),
                                                         engine, pool)
    self.n = int(pool["images"].shape[0])
    self.index = pool["index"]
    self.pos = {int(t): p for p, t in enumerate(self.index.tolist())}
    self.lock = threading.Lock()
    self.rng = np.random.default_rng(config.seed + int(time.time()))
    self._tokens: dict = {}
    self.votes: dict = {}  # (p, q) -> [same, different]
    self.seen: dict = {}  # annotator id -> set of (p, q) issued or answered
    self.pending: dict = {}  # query id -> [p, q, annotator id, issued_at]
    self.num_answers = 0
    self.embeddings = None
    self.last_round = None  # metrics of the last finished round
    self.round = 0  # id of the last finished round
    self._graph = None
    self._child = None
    self._child_round = None
    self._stop = threading.Event()
    self._thread = None
    self._load()

  # -- start-up ---------------------------------------------------------------
  def _load(self):
    with self.engine.begin() as conn:
      conn.execute(db.queries.update().where(db.queries.c.state == "pending")
                   .values(issued_at=0.0))  # release: re-issued to anyone
      conn.execute(db.rounds.update().where(db.rounds.c.status == "running")
                   .values(status="aborted"))
      for q in conn.execute(sa.select(db.queries)):
        key = strategy.pair_key(self.pos[q.i], self.pos[q.j])
        if q.annotator_id is not None:
          self.seen.setdefault(q.annotator_id, set()).add(key)
        if q.state == "pending":
          self.pending[q.id] = [key[0], key[1], q.annotator_id, 0.0]
      for a in conn.execute(sa.select(db.answers).order_by(db.answers.c.id)):
        self._count(a.annotator_id, self.pos[a.i], self.pos[a.j], a.answer)
      done = conn.execute(sa.select(db.rounds).where(
          db.rounds.c.status == "done").order_by(db.rounds.c.id.desc())).first()
    if done is not None:
      self._adopt_round(done.id, db.round_metrics(done))

  def _count(self, annotator_id, p, q, answer):
    key = strategy.pair_key(p, q)
    self.seen.setdefault(annotator_id, set()).add(key)
    self.num_answers += 1
    if answer != "skip":
      first = key not in self.votes
      self.votes.setdefault(key, [0, 0])[0 if answer == "same" else 1] += 1
      if first and self._graph is not None:  # a new pair: add it in place
        self._graph.add(key[0], key[1], answer == "same")
      else:  # a second vote may flip or tie the majority: rebuild
        self._graph = None

  def _adopt_round(self, round_id: int, metrics):
    z_path = round_files(self.workdir, round_id)[1]
    if z_path.exists():
      self.embeddings = np.load(z_path)
    self.round, self.last_round = int(round_id), metrics

  # -- authentication -----------------------------------------------------------
  def annotator(self, token: str):
    """(id, name) for a bearer token, or None (cached after the first hit)."""
    if token in self._tokens:
      return self._tokens[token]
    with self.engine.connect() as conn:
      who = db.annotator_for_token(conn, token)
    if who is not None:
      self._tokens[token] = who
    return who

  # -- queries ----------------------------------------------------------------
  def _query_payload(self, qid, p, q):
    i, j = int(self.index[p]), int(self.index[q])
    return {"query_id": qid, "items": [i, j],
            "images": [f"/images/{i}.png", f"/images/{j}.png"]}

  def _new_pair(self, annotator_id):
    seen = self.seen.get(annotator_id, set())
    pending_pairs = {(v[0], v[1]) for v in self.pending.values()}
    excluded = seen | pending_pairs
    want = self.config.server.votes_per_pair
    if want > 1:
      for key, (same, diff) in self.votes.items():
        if same + diff < want and key not in excluded:
          return key, "revote"
    if (self.config.strategy == "passive"
        or len(self.votes) < self.config.get("passive_first", 0)):
      resolved = {k for k, (s, d) in self.votes.items() if s + d >= want}
      return strategy.passive_pair(self.rng, self.n, excluded=excluded,
                                   resolved=resolved), "passive"
    if self._graph is None:
      self._graph = strategy.graph_from_votes(self.n, self.votes)
    busy = {p for v in self.pending.values() for p in v[:2]}
    return strategy.active_pair(
        self.rng, self._graph, self.config.data.num_classes,
        embeddings=self.embeddings, busy=busy, excluded=excluded,
        partner=self.config.get("active_partner", "template")), "active"

  def next_query(self, annotator_id: int):
    """The query payload for this annotator, or None if no pair is left."""
    now = time.time()
    timeout = self.config.server.query_timeout_s
    with self.lock:
      for qid, (p, q, holder, issued) in self.pending.items():
        if holder == annotator_id and issued + timeout > now:
          return self._query_payload(qid, p, q)
      seen = self.seen.get(annotator_id, set())
      for qid, (p, q, holder, issued) in self.pending.items():
        if issued + timeout <= now and (p, q) not in seen:
          with self.engine.begin() as conn:
            conn.execute(db.queries.update().where(db.queries.c.id == qid)
                         .values(annotator_id=annotator_id, issued_at=now))
          self.pending[qid] = [p, q, annotator_id, now]
          self.seen.setdefault(annotator_id, set()).add((p, q))
          return self._query_payload(qid, p, q)
      pair, how = self._new_pair(annotator_id)
      if pair is None:
        return None
      p, q = pair
      qid = uuid.uuid4().hex
      with self.engine.begin() as conn:
        conn.execute(db.queries.insert().values(
            id=qid, i=int(self.index[p]), j=int(self.index[q]),
            round=self.round, strategy=how, annotator_id=annotator_id,
            issued_at=now, state="pending", created_at=now))
      self.pending[qid] = [p, q, annotator_id, now]
      self.seen.setdefault(annotator_id, set()).add((p, q))
      return self._query_payload(qid, p, q)

  # -- answers ----------------------------------------------------------------
  def answer(self, annotator_id: int, query_id: str, answer: str) -> dict:
    """Stores an answer (committed before return); idempotent per annotator.

    Raises:
      NotFound: no query has this id.
    """
    now = time.time()
    with self.engine.connect() as conn:
      q = conn.execute(sa.select(db.queries).where(
          db.queries.c.id == query_id)).first()
      if q is None:
        raise NotFound(query_id)
      old = conn.execute(sa.select(db.answers.c.answer).where(
          (db.answers.c.annotator_id == annotator_id)
          & (db.answers.c.query_id == query_id))).first()
    if old is not None:
      return {"query_id": query_id, "answer": old.answer, "stored": False}
    try:
      with self.engine.begin() as conn:
        conn.execute(db.answers.insert().values(
            annotator_id=annotator_id, query_id=query_id, i=q.i, j=q.j,
            answer=answer, time=now))
        conn.execute(db.queries.update().where(db.queries.c.id == query_id)
                     .values(state="answered"))
    except sa.exc.IntegrityError:  # the same POST raced itself
      with self.engine.connect() as conn:
        old = conn.execute(sa.select(db.answers.c.answer).where(
            (db.answers.c.annotator_id == annotator_id)
            & (db.answers.c.query_id == query_id))).first()
      return {"query_id": query_id, "answer": old.answer, "stored": False}
    with self.lock:
      self.pending.pop(query_id, None)
      self._count(annotator_id, self.pos[q.i], self.pos[q.j], answer)
    return {"query_id": query_id, "answer": answer, "stored": True}

  def status(self, annotator_id: int) -> dict:
    """Counts, the round, the last round's metrics."""
    with self.lock:
      mine = len(self.seen.get(annotator_id, ()))
      return {"answers": self.num_answers, "pending": len(self.pending),
              "round": self.round, "training": self._child is not None,
              "strategy": self.config.strategy, "pool": self.n,
              "resolved_pairs": sum(s != d for s, d in self.votes.values()),
              "pairs_seen_by_you": mine, "last_round": self.last_round}

  # -- background rounds -------------------------------------------------------
  def start_worker(self):
    """Starts the thread that launches and collects training rounds."""
    self._thread = threading.Thread(target=self._work, daemon=True,
                                    name="pal-rounds")
    self._thread.start()

  def stop_worker(self, timeout: float = 3.0):
    """Stops the thread; a running round's child is terminated."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join(timeout)
    child = self._child
    if child is not None and child.poll() is None:
      child.terminate()
      try:
        child.wait(timeout)
      except subprocess.TimeoutExpired:
        child.kill()

  def _work(self):
    every = self.config.server.train_every
    while not self._stop.wait(0.5):
      if self._child is not None:
        if self._child.poll() is None:
          continue
        self._finish_round(self._child.returncode)
        continue
      # A round a kill aborted does not count: the next one starts at once
      # (from the last finished round's weights) if its answers are there.
      with self.engine.connect() as conn:
        last_id = conn.execute(sa.select(sa.func.max(db.rounds.c.id))
                               ).scalar_one()
        last_answers = conn.execute(
            sa.select(sa.func.max(db.rounds.c.answers)).where(
                db.rounds.c.status != "aborted")).scalar_one()
      if every > 0 and self.num_answers >= (last_answers or 0) + every:
        self._launch((last_id or 0) + 1)

  def _launch(self, round_id: int):
    with self.engine.begin() as conn:
      conn.execute(db.rounds.insert().values(
          id=round_id, status="running", answers=self.num_answers,
          started_at=time.time()))
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    log = open(os.path.join(self.workdir, "rounds.log"), "ab")  # pylint: disable=consider-using-with
    self._child = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-m", "ssljax.pal.serve", "train", "--workdir",
         self.workdir, "--round", str(round_id), "--parent_pid",
         str(os.getpid())], env=env, stdout=log, stderr=log,
        preexec_fn=lambda: os.nice(10))
    self._child_round = round_id

  def _finish_round(self, returncode: int):
    round_id, self._child = self._child_round, None
    with self.engine.begin() as conn:
      row = conn.execute(sa.select(db.rounds).where(
          db.rounds.c.id == round_id)).first()
      if returncode != 0 or row.status != "done":
        conn.execute(db.rounds.update().where(db.rounds.c.id == round_id)
                     .values(status="failed", finished_at=time.time(),
                             metrics=json.dumps({"returncode": returncode})))
        return
    with self.lock:
      self._adopt_round(round_id, db.round_metrics(row))
