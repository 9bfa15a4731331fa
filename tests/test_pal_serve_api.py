"""The HTTP API of the PAL annotation service, against a running server.

One server process per database on 127.0.0.1 (a free port): SQLite in the
default suite, PostgreSQL (a throw-away cluster started by the test; skipped
when no server binaries exist) with ``-m slow``. The same tests run against
both: every status code of the API, nothing written on an error,
idempotent answers, tokens stored hashed, injection-shaped strings stored
literally or refused, images only by index, no pair twice to one
annotator, a pending query held by one annotator at a time, export.
Training rounds are off (``server.train_every=0``): rounds are tested in
tests/test_pal_serve_slow.py.
"""

import hashlib
import json

import numpy as np
import pytest
import sqlalchemy as sa

import pal_serve_util as util
from ssljax.pal.serve import db

ANNOTATORS = ("alice", "bob", "carol'); DROP TABLE answers;--")


@pytest.fixture(scope="module", params=[
    "sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def campaign(request, tmp_path_factory):
  """(server, {name: token}, engine) of one campaign on the tiny pool."""
  work = tmp_path_factory.mktemp(f"serve_{request.param}")
  pool = util.tiny_pool(work / "pool_source.npz")
  pg = None
  overrides = [f"--config.data.name=npz", f"--config.data.path={pool}",
               "--config.data.num_classes=4", "--config.server.train_every=0"]
  if request.param == "postgresql":
    if util.postgres_bin() is None:
      pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or"
                  " in /usr/lib/postgresql/*/bin: `make postgres` installs "
                  "Debian's postgresql package")
    pg = util.Postgres().start()
    overrides.append(f"--config.server.db={pg.url}")
  server = util.Server(work, *overrides).start()
  request.addfinalizer(lambda: server.proc.poll() is None and server.proc.kill())
  cfg = json.loads((work / "config.json").read_text())
  engine = db.connect(db.database_url(cfg["server"]["db"], work))
  # The command line once (its last stdout line is the token), then the
  # same function in-process.
  tokens = {ANNOTATORS[0]: util.add_annotator(work, ANNOTATORS[0])}
  tokens.update({name: db.add_annotator(engine, name)
                 for name in ANNOTATORS[1:]})
  yield server, tokens, engine
  engine.dispose()
  # SIGTERM: a clean exit (status 0) without uvicorn cancelling requests at
  # its graceful-shutdown timeout. The wait's 120 s only guards against a
  # hang (proc.wait raises TimeoutExpired); how fast it stops is not tested.
  rc, _ = server.stop(timeout=120)
  log = (server.workdir / "serve.log").read_text()
  assert rc == 0, (rc, log[-4000:])
  assert "timeout graceful shutdown exceeded" not in log, log[-4000:]
  if pg is not None:
    pg.stop()


def _rows(engine) -> dict:
  with engine.connect() as conn:
    return {t: conn.execute(sa.select(sa.func.count()).select_from(
        db.metadata.tables[t])).scalar_one()
            for t in ("annotators", "queries", "answers")}


def test_health_and_page_need_no_token(campaign):
  server, _, _ = campaign
  c = server.client()
  assert c.get("/healthz").status_code == 200
  page = c.get("/")
  assert page.status_code == 200 and "/api/query" in page.text


@pytest.mark.parametrize("header", [None, "Bearer nope", "Basic abc", "Token x",
                                    "bearer"])
def test_api_needs_a_known_token(campaign, header):
  server, _, engine = campaign
  before = _rows(engine)
  c = server.client()
  h = {} if header is None else {"Authorization": header}
  assert c.get("/api/query", headers=h).status_code == 401
  assert c.get("/api/status", headers=h).status_code == 401
  assert c.post("/api/answer", headers=h,
                json={"query_id": "x", "answer": "same"}).status_code == 401
  assert _rows(engine) == before


def test_tokens_are_stored_hashed(campaign):
  server, tokens, engine = campaign
  with engine.connect() as conn:
    rows = dict(conn.execute(sa.select(db.annotators.c.name,
                                       db.annotators.c.token_hash)).all())
  for name, token in tokens.items():
    assert rows[name] == hashlib.sha256(token.encode()).hexdigest()
    assert token not in json.dumps(rows)
  sqlite = server.workdir / "pal.sqlite"
  if sqlite.exists():
    raw = b"".join(p.read_bytes() for p in server.workdir.glob("pal.sqlite*"))
    assert all(t.encode() not in raw for t in tokens.values())
  # The injection-shaped name is stored literally, and the answers table it
  # names is intact: that annotator's answer lands there, exactly one row.
  assert ANNOTATORS[2] in rows
  before = _rows(engine)
  c = server.client(tokens[ANNOTATORS[2]])
  qid = c.get("/api/query").json()["query_id"]
  assert c.post("/api/answer", json={"query_id": qid,
                                     "answer": "skip"}).status_code == 200
  assert _rows(engine)["answers"] == before["answers"] + 1
  with engine.connect() as conn:
    name = conn.execute(
        sa.select(db.annotators.c.name).join(
            db.answers, db.answers.c.annotator_id == db.annotators.c.id)
        .where(db.answers.c.query_id == qid)).scalar_one()
  assert name == ANNOTATORS[2]


def test_query_answer_and_idempotency(campaign):
  server, tokens, engine = campaign
  c = server.client(tokens["alice"])
  q = c.get("/api/query")
  assert q.status_code == 200
  body = q.json()
  assert set(body) == {"query_id", "items", "images"}
  i, j = body["items"]
  assert i != j and body["images"] == [f"/images/{i}.png", f"/images/{j}.png"]
  img = c.get(body["images"][0])
  assert img.status_code == 200 and img.content[:8] == b"\x89PNG\r\n\x1a\n"
  before = _rows(engine)
  r = c.post("/api/answer", json={"query_id": body["query_id"],
                                   "answer": "same"})
  assert r.status_code == 200 and r.json()["stored"] is True
  after = _rows(engine)
  assert after["answers"] == before["answers"] + 1
  again = c.post("/api/answer", json={"query_id": body["query_id"],
                                       "answer": "different"})
  assert again.status_code == 200
  assert again.json() == {"query_id": body["query_id"], "answer": "same",
                          "stored": False}
  assert _rows(engine) == after
  with engine.connect() as conn:
    row = conn.execute(sa.select(db.answers).where(
        db.answers.c.query_id == body["query_id"])).one()
  assert (row.i, row.j, row.answer) == (i, j, "same")


def _bad_requests(qid):
  big = json.dumps({"query_id": qid, "answer": "same", "pad": "x" * 70000})
  return [
      ("unknown query", {"json": {"query_id": "0" * 32, "answer": "same"}}, 404),
      ("injection-shaped query id",
       {"json": {"query_id": "x' OR '1'='1'; DROP TABLE answers;--",
                 "answer": "same"}}, 404),
      ("malformed JSON", {"content": b'{"query_id": '}, 400),
      ("JSON not an object", {"content": b'["same"]'}, 400),
      ("not UTF-8", {"content": b"\xff\xfe\x00"}, 400),
      ("answer outside the three", {"json": {"query_id": qid,
                                              "answer": "maybe"}}, 422),
      ("answer of another type", {"json": {"query_id": qid, "answer": 1}},
       422),
      ("query_id not a string", {"json": {"query_id": 7, "answer": "same"}},
       422),
      ("body over 64 KiB", {"content": big.encode()}, 413),
  ]


def test_bad_inputs_write_nothing(campaign):
  server, tokens, engine = campaign
  c = server.client(tokens["bob"])
  qid = c.get("/api/query").json()["query_id"]
  for name, kwargs, status in _bad_requests(qid):
    before = _rows(engine)
    r = c.post("/api/answer", **kwargs)
    assert r.status_code == status, (name, r.status_code, r.text)
    assert _rows(engine) == before, name
  with engine.connect() as conn:  # the pending query is still unanswered
    state = conn.execute(sa.select(db.queries.c.state).where(
        db.queries.c.id == qid)).scalar_one()
  assert state == "pending"


@pytest.mark.parametrize("path", [
    "/images/..%2f..%2fetc%2fpasswd", "/images/../../etc/passwd",
    "/images/%2e%2e/pal.sqlite", "/images/1.png/../../config.json",
    "/images/-1.png", "/images/99999999.png", "/images/1.jpg",
    "/images/config.json", "/images/0x1.png", "/images/ 1.png"])
def test_images_only_by_pool_index(campaign, path):
  server, _, _ = campaign
  pool = np.load(server.workdir / "pool.npz")
  assert 99999999 not in pool["index"]
  r = server.client().get(path)
  assert r.status_code == 404, (path, r.status_code)


def test_pending_query_held_by_one_annotator(campaign):
  server, tokens, _ = campaign
  a, b = server.client(tokens["alice"]), server.client(tokens["carol'); DROP"
                                                              " TABLE answers;--"])
  qa = a.get("/api/query").json()
  assert a.get("/api/query").json() == qa  # a reload gets the same pair
  qb = b.get("/api/query").json()
  assert qb["query_id"] != qa["query_id"]
  assert sorted(qb["items"]) != sorted(qa["items"])
  for c, q in ((a, qa), (b, qb)):
    assert c.post("/api/answer", json={"query_id": q["query_id"],
                                       "answer": "skip"}).status_code == 200


def test_no_pair_twice_to_one_annotator(campaign):
  server, tokens, engine = campaign
  c = server.client(tokens["bob"])
  for k in range(25):
    q = c.get("/api/query").json()
    ans = ("same", "different", "skip")[k % 3]
    assert c.post("/api/answer", json={"query_id": q["query_id"],
                                       "answer": ans}).status_code == 200
  with engine.connect() as conn:
    bob = conn.execute(sa.select(db.annotators.c.id).where(
        db.annotators.c.name == "bob")).scalar_one()
    pairs = conn.execute(sa.select(db.queries.c.i, db.queries.c.j).where(
        db.queries.c.annotator_id == bob)).all()
  keys = [tuple(sorted(p)) for p in pairs]
  assert len(keys) >= 25 and len(set(keys)) == len(keys)


def test_status_and_export(campaign):
  server, tokens, engine = campaign
  st = server.client(tokens["alice"]).get("/api/status")
  assert st.status_code == 200
  body = st.json()
  for key in ("answers", "pending", "round", "last_round", "training"):
    assert key in body
  rows = _rows(engine)
  assert body["answers"] == rows["answers"] and body["round"] == 0
  out = server.workdir / "export.npz"
  util.cli("export", "--workdir", str(server.workdir), "--out", str(out))
  with np.load(out) as f:
    assert len(f["answer"]) == rows["answers"]
    assert set(f["answer"].tolist()) <= {"same", "different", "skip"}
    assert set(f["annotator"].tolist()) <= set(ANNOTATORS)
    assert np.all(np.diff(f["time"]) >= 0) and f["i"].shape == f["j"].shape
