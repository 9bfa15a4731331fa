"""The annotation service's database and strategy, without a server.

Schema migration (a version-1 database is upgraded in place, rows kept),
token hashing, the graph of majority votes (ties left out), the round's
mixed graph (augmentation views + answers, weights 1 − α and α), and the active
strategy (pair form of Algorithm 3 of Cabannes et al. 2023) against a
noise-free simulated annotator.
"""

import hashlib

import numpy as np
import pytest
import sqlalchemy as sa

from ssljax.pal.serve import db, strategy

V1_DDL = [
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    "INSERT INTO schema_version VALUES (1)",
    "CREATE TABLE annotators (id INTEGER PRIMARY KEY, name VARCHAR(200) NOT "
    "NULL UNIQUE, token_hash VARCHAR(64) NOT NULL UNIQUE, created_at FLOAT "
    "NOT NULL)",
    "CREATE TABLE queries (id VARCHAR(32) PRIMARY KEY, i INTEGER NOT NULL, "
    "j INTEGER NOT NULL, round INTEGER NOT NULL, annotator_id INTEGER "
    "REFERENCES annotators(id), issued_at FLOAT NOT NULL, state VARCHAR(16) "
    "NOT NULL, created_at FLOAT NOT NULL)",
    "CREATE TABLE answers (id INTEGER PRIMARY KEY, annotator_id INTEGER NOT "
    "NULL REFERENCES annotators(id), query_id VARCHAR(32) NOT NULL "
    "REFERENCES queries(id), i INTEGER NOT NULL, j INTEGER NOT NULL, answer "
    "VARCHAR(16) NOT NULL, time FLOAT NOT NULL, CONSTRAINT uq_answer_once "
    "UNIQUE (annotator_id, query_id))",
    "INSERT INTO annotators VALUES (1, 'ann', 'h', 0.0)",
    "INSERT INTO queries VALUES ('q1', 3, 5, 0, 1, 0.0, 'answered', 0.0)",
    "INSERT INTO answers VALUES (1, 1, 'q1', 3, 5, 'same', 1.0)",
]


def test_migration_from_version_1_keeps_rows(tmp_path):
  url = f"sqlite:///{tmp_path}/old.sqlite"
  raw = sa.create_engine(url)
  with raw.begin() as conn:
    for stmt in V1_DDL:
      conn.execute(sa.text(stmt))
  raw.dispose()
  engine = db.connect(url)  # migrates
  with engine.connect() as conn:
    assert conn.execute(sa.select(db.schema_version.c.version)).scalar_one() \
        == db.SCHEMA_VERSION == 2
    q = conn.execute(sa.select(db.queries)).one()
    assert (q.id, q.i, q.j, q.strategy) == ("q1", 3, 5, "unknown")
    assert conn.execute(sa.select(db.answers.c.answer)).scalar_one() == "same"
    assert conn.execute(sa.select(sa.func.count()).select_from(
        db.rounds)).scalar_one() == 0
  token = db.add_annotator(engine, "new")  # the v2 tables work
  with engine.begin() as conn:
    conn.execute(db.rounds.insert().values(id=1, status="done", answers=1,
                                           started_at=0.0))
  assert db.migrate(engine) == 2  # idempotent
  assert db.export_answers(engine)["annotator"].tolist() == ["ann"]
  with engine.connect() as conn:
    assert db.annotator_for_token(conn, token)[1] == "new"
  with engine.begin() as conn:
    conn.execute(db.schema_version.update().values(version=3))
  with pytest.raises(RuntimeError, match="newer"):
    db.migrate(engine)


def test_tokens_hashed_unique_and_checked(tmp_path):
  engine = db.connect(f"sqlite:///{tmp_path}/t.sqlite")
  t1, t2 = db.add_annotator(engine, "a"), db.add_annotator(engine, "b")
  assert t1 != t2 and len(t1) >= 43
  with engine.connect() as conn:
    stored = conn.execute(sa.select(db.annotators.c.token_hash)).scalars().all()
    assert sorted(stored) == sorted(hashlib.sha256(t.encode()).hexdigest()
                                    for t in (t1, t2))
    assert db.annotator_for_token(conn, t1) == (1, "a")
    assert db.annotator_for_token(conn, t1 + "x") is None
    assert db.annotator_for_token(conn, db.hash_token(t1)) is None
  for bad in ("a", "", " " * 3, "x" * 201):
    with pytest.raises(ValueError):
      db.add_annotator(engine, bad)


def test_majority_votes_ties_left_out():
  votes = {(0, 1): [2, 1], (1, 2): [0, 3], (2, 3): [1, 1], (3, 4): [1, 0]}
  g = strategy.graph_from_votes(5, votes)
  s = g.signed()
  assert s[0, 1] == 1 and s[1, 2] == -1 and s[0, 2] == -1  # deduced
  assert s[2, 3] == 0 and s[3, 4] == 1  # the tie is unknown
  assert s[0, 3] == 0


def test_votes_from_answers_skips_and_pool():
  from ssljax.pal.serve import rounds  # pylint: disable=import-outside-toplevel
  index = np.array([10, 20, 30])
  votes = rounds.votes_from_answers(
      index, [10, 20, 30, 20], [20, 10, 10, 30],
      np.array(["same", "different", "skip", "same"]))
  assert votes == {(0, 1): [1, 1], (1, 2): [1, 0]}
  with pytest.raises(ValueError, match="not in the pool"):
    rounds.votes_from_answers(index, [10], [11], np.array(["same"]))



def test_round_graph_mixes_augmentations_and_answers():
  """The mixed round graph (1 − α)G_ssl + α·G_answers over N·V view rows
  (Cabannes et al. 2023 App. C.2.3): views of one image 1, answered pairs
  ±α on every view pair (completion included), ties and unknown pairs 0;
  the minibatch block and degrees are those of that graph."""
  from configs import pal_human  # pylint: disable=import-outside-toplevel
  from ssljax.pal.serve import rounds  # pylint: disable=import-outside-toplevel
  config = pal_human.get_config()
  assert config.train.graph == "mixed" and config.train.alpha == 0.1
  config.train.alpha, config.train.views = 0.25, 3
  config.train.complete_weight = 1.0  # the completed graph as is
  n, a = 5, 0.25
  votes = {(0, 1): [1, 0], (1, 2): [0, 2], (3, 4): [1, 1]}
  oracle, views = rounds.round_oracle(config, n, votes)
  assert views == 3 and oracle.n == n * views
  t = oracle.target()
  image = np.tile(np.arange(n), views)  # row v·N + p is view v of image p
  expected = np.zeros((n, n))
  expected[0, 1] = expected[1, 0] = a  # answered same
  expected[[1, 0, 2, 2], [2, 2, 1, 0]] = -a  # answered / deduced different
  want = expected[image[:, None], image[None, :]]
  want[image[:, None] == image[None, :]] = 1.0  # (1 − α)·1 + α·1
  np.testing.assert_allclose(t, want, atol=1e-12)
  mb = oracle.minibatch(np.random.default_rng(0), 6)
  np.testing.assert_allclose(mb.g, t[np.ix_(mb.idx, mb.idx)], atol=1e-12)
  np.testing.assert_allclose(mb.degree, t.sum(1)[mb.idx], atol=1e-12)
  # The answers-only round: G_answers on the N clean images, no views.
  config.train.graph = "answers"
  oracle, views = rounds.round_oracle(config, n, votes)
  assert views == 1
  np.testing.assert_array_equal(oracle.target(),
                                strategy.graph_from_votes(n, votes).signed())
  config.train.graph = "labels"
  with pytest.raises(ValueError, match="train.graph"):
    rounds.round_oracle(config, n, votes)
  config.train.graph, config.train.views = "mixed", 1
  with pytest.raises(ValueError, match="views"):
    rounds.round_oracle(config, n, votes)


def test_round_graph_weights_deduced_pairs():
  """``train.complete_weight`` w: an answered pair keeps ±α on every view
  pair, a pair known only by transitive completion gets ±w·α; the
  minibatch degrees are the row sums of that graph; w outside [0, 1] is
  refused."""
  from configs import pal_human  # pylint: disable=import-outside-toplevel
  from ssljax.pal.serve import rounds  # pylint: disable=import-outside-toplevel
  config = pal_human.get_config()
  config.train.alpha, config.train.views = 0.5, 2
  config.train.complete_weight = 0.25
  n, a, w = 4, 0.5, 0.25
  votes = {(0, 1): [1, 0], (1, 2): [1, 0], (2, 3): [0, 1]}
  oracle, views = rounds.round_oracle(config, n, votes)
  t = oracle.target()
  expected = np.eye(n)
  expected[[0, 1, 1, 2], [1, 0, 2, 1]] = 1.0  # answered same
  expected[[2, 3], [3, 2]] = -1.0  # answered different
  expected[[0, 2], [2, 0]] = w  # 0 ~ 1 ~ 2: deduced same
  expected[[0, 1, 3, 3], [3, 3, 0, 1]] = -w  # deduced different
  image = np.tile(np.arange(n), views)
  want = a * expected[image[:, None], image[None, :]]
  want += (1 - a) * (image[:, None] == image[None, :])
  np.testing.assert_allclose(t, want, atol=1e-12)
  mb = oracle.minibatch(np.random.default_rng(0), 4)
  np.testing.assert_allclose(mb.degree, t.sum(1)[mb.idx], atol=1e-12)
  config.train.graph = "answers"  # the clean images only, same weights
  oracle, _ = rounds.round_oracle(config, n, votes)
  np.testing.assert_allclose(oracle.target(), expected, atol=1e-12)
  np.testing.assert_allclose(oracle.degree(), expected.sum(1), atol=1e-12)
  config.train.complete_weight = 1.5
  with pytest.raises(ValueError, match="complete_weight"):
    rounds.round_oracle(config, n, votes)


def test_round_rows_are_views_of_the_pool():
  from configs import pal_human  # pylint: disable=import-outside-toplevel
  from ssljax.pal.serve import rounds  # pylint: disable=import-outside-toplevel
  config = pal_human.get_config()
  images = np.random.default_rng(0).integers(0, 256, (4, 12, 12, 1),
                                             dtype=np.uint8)
  np.testing.assert_allclose(rounds.round_rows(config, images, 1, 1),
                             images / 255.0, rtol=1e-6)
  rows = rounds.round_rows(config, images, 2, 1)
  assert rows.shape == (8, 12, 12, 1) and rows.dtype == np.float32
  assert 0.0 <= rows.min() and rows.max() <= 1.0
  assert not np.allclose(rows[:4], rows[4:])  # two different views

def _simulate(pair_fn, y, answers):
  votes = {}
  for _ in range(answers):
    pair = pair_fn(votes)
    if pair is None:
      break
    votes[pair] = [1, 0] if y[pair[0]] == y[pair[1]] else [0, 1]
  return votes


@pytest.mark.parametrize("partner", ["template", "member"])
@pytest.mark.parametrize("guided", [False, True])
def test_active_labels_every_sample_within_the_bound(guided, partner):
  # N samples of C classes, a noise-free annotator: every sample is asked
  # against the classes until it joins one, so at most C - 1 + ... answers
  # per sample; all relations are then known. Random pairs leave most
  # relations unknown with the same number of answers. With partner
  # "member" the same relations are learnt with the answers spread over
  # each class's component instead of a star around its template.
  rng = np.random.default_rng(0)
  n, c = 40, 4
  y = rng.permutation(np.arange(n) % c)
  z = np.eye(c)[y] + 0.1 * rng.standard_normal((n, c)) if guided else None
  bound = (n - c) * (c - 1) + c * (c - 1) // 2 + 1

  def active(votes):
    graph = strategy.graph_from_votes(n, votes)
    return strategy.active_pair(rng, graph, c, embeddings=z,
                                excluded=set(votes), partner=partner)

  votes = _simulate(active, y, bound + 50)
  graph = strategy.graph_from_votes(n, votes)
  assert len(votes) <= bound
  assert graph.counts()["unknown"] == 0
  assert graph.num_components() == c
  temps = strategy.templates(graph, c)
  assert sorted(y[temps].tolist()) == list(range(c))
  # Hubs: a template is answered "same" with most of its class (10 here);
  # spread over the component, no sample gets more than half of that.
  same_degree = np.bincount(np.array([p for p, v in votes.items() if v[0]]
                                     ).reshape(-1), minlength=n)
  if partner == "template":
    assert same_degree.max() >= 0.8 * (n // c) - 1
  else:
    assert same_degree.max() <= (n // c) // 2
  if guided:  # the classifier picks members of the class: mostly "same"
    same = sum(v[0] for v in votes.values())
    assert same >= n - c and len(votes) < 2 * n
  passive = _simulate(lambda v: strategy.passive_pair(
      rng, n, excluded=set(v)), y, len(votes))
  assert strategy.graph_from_votes(n, passive).counts()["unknown"] > 0


def test_active_avoids_busy_and_excluded():
  n, c = 12, 3
  rng = np.random.default_rng(1)
  votes = {}
  for a in range(c):  # templates 0, 1, 2 known pairwise different
    for b in range(a):
      votes[(b, a)] = [0, 1]
  graph = strategy.graph_from_votes(n, votes)
  assert strategy.templates(graph, c) == [0, 1, 2]
  busy = set(range(3, n - 1))
  i, j = strategy.active_pair(rng, graph, c, busy=busy, excluded=set())
  assert n - 1 in (i, j) and {i, j} - {n - 1} <= {0, 1, 2}
  excluded = {strategy.pair_key(n - 1, t) for t in range(c)}
  assert strategy.active_pair(rng, graph, c, busy=busy,
                              excluded=excluded) is None
  with pytest.raises(ValueError, match="partner must be one of"):
    strategy.active_pair(rng, graph, c, partner="anyone")


class _Clock:
  """A settable stand-in for the `time` module of the service."""

  def __init__(self, now=1000.0):
    self.now = now

  def time(self):
    return self.now


def test_timed_out_query_is_reissued_answered_one_is_not(tmp_path,
                                                         monkeypatch):
  """``server.query_timeout_s``: a query handed out and not answered
  within the timeout goes to the next annotator who asks (same query id,
  same pair, the database row now names the new holder); before the
  timeout nobody else gets it; one answered in time is never handed out
  again, however long one waits. Real SQLite database, in-process service
  with a controlled clock."""
  import pal_serve_util as util  # pylint: disable=import-outside-toplevel
  from configs import pal_human  # pylint: disable=import-outside-toplevel
  from ssljax.pal.serve import service as service_mod  # pylint: disable=import-outside-toplevel
  from ssljax.pal.serve.pool import load_pool, prepare_pool  # pylint: disable=import-outside-toplevel
  config = pal_human.get_config("smoke")
  config.data.name, config.data.num_classes = "npz", 4
  config.data.path = str(util.tiny_pool(tmp_path / "source.npz"))
  config.strategy, config.server.train_every = "passive", 0
  config.server.query_timeout_s = 10.0
  prepare_pool(config, tmp_path)
  engine = db.connect(db.database_url("", tmp_path))
  clock = _Clock()
  monkeypatch.setattr(service_mod, "time", clock)
  svc = service_mod.Service(config, tmp_path, engine, load_pool(tmp_path))
  ids = {name: svc.annotator(db.add_annotator(engine, name))[0]
         for name in ("ann", "bob", "cat", "dan", "eve", "fay", "gus")}

  def holder(qid):
    with engine.connect() as conn:
      row = conn.execute(sa.select(db.queries).where(
          db.queries.c.id == qid)).one()
    return row.annotator_id, row.issued_at, row.state

  qa = svc.next_query(ids["ann"])  # t = 0
  clock.now += 5.0
  qb = svc.next_query(ids["bob"])  # t = 5: ann's query is still hers
  assert qb["query_id"] != qa["query_id"]
  assert qb["items"] != qa["items"]
  clock.now += 4.9  # t = 9.9: not yet timed out
  assert svc.next_query(ids["cat"])["query_id"] not in (qa["query_id"],
                                                        qb["query_id"])
  svc.answer(ids["cat"], svc.next_query(ids["cat"])["query_id"], "same")
  clock.now += 0.2  # t = 10.1: ann's query timed out, bob's has not
  again = svc.next_query(ids["dan"])
  assert again == qa  # re-issued: same id, same pair, same images
  assert holder(qa["query_id"]) == (ids["dan"], clock.now, "pending")
  assert svc.next_query(ids["bob"]) == qb  # bob still holds his
  # Answered in time: never handed out again.
  qe = svc.next_query(ids["eve"])
  clock.now += 3.0
  assert svc.answer(ids["eve"], qe["query_id"], "different")["stored"]
  assert holder(qe["query_id"])[2] == "answered"
  clock.now += 100.0  # every pending query has timed out now
  handed = [svc.next_query(ids[name]) for name in ("fay", "gus")]
  assert [q["query_id"] for q in handed] == [qa["query_id"], qb["query_id"]]
  later = svc.next_query(ids["ann"])  # ann's own pair never comes back to her
  assert later["query_id"] not in (qa["query_id"], qe["query_id"])
  assert later["items"] != qe["items"] and later["items"] != qa["items"]
  with engine.connect() as conn:
    answered = conn.execute(sa.select(sa.func.count()).select_from(
        db.answers).where(db.answers.c.query_id == qe["query_id"])
                            ).scalar_one()
  assert answered == 1
  engine.dispose()


def test_active_strategy_starts_with_passive_first_uniform_pairs(tmp_path,
                                                               monkeypatch):
  """``passive_first``: the active service asks uniform pairs (database
  column "passive") until that many pairs are answered, then the active
  strategy's pairs (one of a new sample and a class template: "active")."""
  import pal_serve_util as util  # pylint: disable=import-outside-toplevel
  from configs import pal_human  # pylint: disable=import-outside-toplevel
  from ssljax.pal.serve import service as service_mod  # pylint: disable=import-outside-toplevel
  from ssljax.pal.serve.pool import load_pool, prepare_pool  # pylint: disable=import-outside-toplevel
  config = pal_human.get_config("smoke")
  config.data.name, config.data.num_classes = "npz", 4
  config.data.path = str(util.tiny_pool(tmp_path / "source.npz"))
  config.strategy, config.server.train_every = "active", 0
  config.passive_first = 5
  prepare_pool(config, tmp_path)
  engine = db.connect(db.database_url("", tmp_path))
  clock = _Clock()
  monkeypatch.setattr(service_mod, "time", clock)
  svc = service_mod.Service(config, tmp_path, engine, load_pool(tmp_path))
  ann = svc.annotator(db.add_annotator(engine, "ann"))[0]
  for _ in range(8):
    clock.now += 1.0
    q = svc.next_query(ann)
    svc.answer(ann, q["query_id"], "different")
  with engine.connect() as conn:
    used = [r.strategy for r in conn.execute(
        sa.select(db.queries).order_by(db.queries.c.issued_at,
                                       db.queries.c.id))]
  assert used == ["passive"] * 5 + ["active"] * 3
  engine.dispose()
