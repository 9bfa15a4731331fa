"""The database of the PAL annotation service: schema, migration, tokens.

SQLAlchemy Core over SQLite (default, ``DIR/pal.sqlite`` in WAL mode with
``synchronous=FULL``: a commit is on disk before it returns) or PostgreSQL
(``postgresql://...``, psycopg driver). Tables:

* ``schema_version(version)``: one row, the layout version (`SCHEMA_VERSION`).
* ``annotators(id, name, token_hash, created_at)``: tokens are stored as
  their SHA-256 hex digest only. A token is 32 random bytes
  (``secrets.token_urlsafe``), so a fast hash is enough: there is no
  password to guess, only 256 bits.
* ``queries(id, i, j, round, strategy, annotator_id, issued_at, state,
  created_at)``: every pair handed out, the training round whose model
  chose it and the strategy ("active", "passive", "revote"); ``state`` is
  "pending" until answered; ``annotator_id`` is who holds it now.
* ``answers(id, annotator_id, query_id, i, j, answer, time)``: one row per
  (annotator, query), unique, so a repeated POST stores nothing new.
* ``rounds(id, status, answers, started_at, finished_at, metrics)``: the
  training rounds; ``metrics`` is JSON text.

Version 1 (the first layout) had no ``rounds`` table and no
``queries.strategy`` column; `migrate` brings a version-1 database to
version 2 in place, keeping its rows.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time

import sqlalchemy as sa

__all__ = ["SCHEMA_VERSION", "ANSWERS", "metadata", "connect", "migrate",
           "hash_token", "new_token", "add_annotator", "annotator_for_token",
           "export_answers", "database_url", "round_metrics"]

SCHEMA_VERSION = 2
ANSWERS = ("same", "different", "skip")

metadata = sa.MetaData()
schema_version = sa.Table(
    "schema_version", metadata, sa.Column("version", sa.Integer, nullable=False))
annotators = sa.Table(
    "annotators", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(200), nullable=False, unique=True),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", sa.Float, nullable=False))
queries = sa.Table(
    "queries", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("i", sa.Integer, nullable=False),
    sa.Column("j", sa.Integer, nullable=False),
    sa.Column("round", sa.Integer, nullable=False),
    sa.Column("strategy", sa.String(16), nullable=False),
    sa.Column("annotator_id", sa.Integer, sa.ForeignKey("annotators.id"),
              nullable=True),
    sa.Column("issued_at", sa.Float, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Index("ix_queries_state", "state"))
answers = sa.Table(
    "answers", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("annotator_id", sa.Integer, sa.ForeignKey("annotators.id"),
              nullable=False),
    sa.Column("query_id", sa.String(32), sa.ForeignKey("queries.id"),
              nullable=False),
    sa.Column("i", sa.Integer, nullable=False),
    sa.Column("j", sa.Integer, nullable=False),
    sa.Column("answer", sa.String(16), nullable=False),
    sa.Column("time", sa.Float, nullable=False),
    sa.UniqueConstraint("annotator_id", "query_id", name="uq_answer_once"))
rounds = sa.Table(
    "rounds", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("answers", sa.Integer, nullable=False),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("finished_at", sa.Float, nullable=True),
    sa.Column("metrics", sa.Text, nullable=True))

def database_url(db: str, workdir) -> str:
  """The SQLAlchemy URL: ``db``, or SQLite at ``workdir/pal.sqlite`` if empty.

  ``postgresql://`` URLs get the psycopg (version 3) driver.
  """
  if not db:
    return f"sqlite:///{workdir}/pal.sqlite"
  if db.startswith("postgresql://") or db.startswith("postgres://"):
    return "postgresql+psycopg://" + db.split("://", 1)[1]
  return db


def connect(url: str) -> sa.Engine:
  """An engine for ``url``; SQLite gets WAL, synchronous=FULL, busy timeout.

  The schema is created or migrated (`migrate`) before the engine returns.
  """
  if url.startswith("sqlite"):
    engine = sa.create_engine(url, connect_args={"timeout": 30,
                                                 "check_same_thread": False})

    @sa.event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _):
      cur = dbapi_conn.cursor()
      cur.execute("PRAGMA journal_mode=WAL")
      cur.execute("PRAGMA synchronous=FULL")
      cur.execute("PRAGMA foreign_keys=ON")
      cur.close()
  else:
    engine = sa.create_engine(url, pool_size=10, max_overflow=20,
                              pool_pre_ping=True)
  migrate(engine)
  return engine


def _version(conn) -> int | None:
  if not sa.inspect(conn).has_table("schema_version"):
    return None
  return conn.execute(sa.select(schema_version.c.version)).scalar_one()


def migrate(engine: sa.Engine) -> int:
  """Creates the schema, or upgrades it to `SCHEMA_VERSION`; returns it.

  Raises:
    RuntimeError: the database holds a newer version than this code knows.
  """
  with engine.begin() as conn:
    version = _version(conn)
    if version is None:
      metadata.create_all(conn)
      conn.execute(schema_version.insert().values(version=SCHEMA_VERSION))
      return SCHEMA_VERSION
    if version > SCHEMA_VERSION:
      raise RuntimeError(f"database schema version {version} is newer than "
                         f"this code's {SCHEMA_VERSION}")
    if version == 1:  # 1 -> 2: queries.strategy and the rounds table
      conn.execute(sa.text("ALTER TABLE queries ADD COLUMN strategy "
                           "VARCHAR(16) NOT NULL DEFAULT 'unknown'"))
      rounds.create(conn)
      conn.execute(schema_version.update().values(version=2))
  return SCHEMA_VERSION


def hash_token(token: str) -> str:
  """SHA-256 hex digest of a token (what the database stores)."""
  return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
  """A fresh bearer token: 32 random bytes, URL-safe base64 (43 characters)."""
  return secrets.token_urlsafe(32)


def add_annotator(engine: sa.Engine, name: str) -> str:
  """Adds annotator ``name``; returns its token (stored only hashed).

  Raises:
    ValueError: an empty name, or one already taken.
  """
  name = str(name).strip()
  if not name or len(name) > 200:
    raise ValueError(f"annotator name must have 1 to 200 characters, got "
                     f"{name!r}")
  token = new_token()
  try:
    with engine.begin() as conn:
      conn.execute(annotators.insert().values(
          name=name, token_hash=hash_token(token), created_at=time.time()))
  except sa.exc.IntegrityError as e:
    raise ValueError(f"annotator {name!r} already exists") from e
  return token


def annotator_for_token(conn, token: str):
  """(id, name) of the annotator holding ``token``, or None."""
  row = conn.execute(sa.select(annotators.c.id, annotators.c.name).where(
      annotators.c.token_hash == hash_token(token))).first()
  return None if row is None else (int(row.id), str(row.name))


def export_answers(engine: sa.Engine) -> dict:
  """Every stored answer as arrays, in commit order.

  Returns:
    dict of numpy arrays: ``i``, ``j`` (int64 indices into the train
    split), ``answer`` (str: same / different / skip), ``annotator`` (str
    name), ``time`` (float64 Unix seconds), ``query_id`` (str).
  """
  import numpy as np  # pylint: disable=import-outside-toplevel
  with engine.connect() as conn:
    rows = conn.execute(
        sa.select(answers.c.i, answers.c.j, answers.c.answer,
                  annotators.c.name, answers.c.time, answers.c.query_id)
        .join(annotators, annotators.c.id == answers.c.annotator_id)
        .order_by(answers.c.id)).all()
  cols = list(zip(*rows)) if rows else [[]] * 6
  return {"i": np.asarray(cols[0], np.int64), "j": np.asarray(cols[1], np.int64),
          "answer": np.asarray(cols[2], str), "annotator": np.asarray(cols[3], str),
          "time": np.asarray(cols[4], np.float64),
          "query_id": np.asarray(cols[5], str)}


def round_metrics(row) -> dict | None:
  """The metrics dict of a rounds row (None if unfinished)."""
  return None if row is None or row.metrics is None else json.loads(row.metrics)
