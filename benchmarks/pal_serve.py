"""The PAL annotation service under load, kill -9 and bad input.

  .venv/bin/python benchmarks/pal_serve.py load --out runs/pal_serve [--annotators 8 16 50]
  .venv/bin/python benchmarks/pal_serve.py kill --out runs/pal_serve [--kills 3]
  .venv/bin/python benchmarks/pal_serve.py bad-inputs --out runs/pal_serve

load: for each count of simulated annotators (answers from the true
labels, `--think` seconds between seeing a pair and answering), a service
on the default config (Fashion-MNIST pool of 2,000, MLP 256-256, K = 16,
300 steps a round) with ``server.train_every`` set so that a round starts
within the first seconds; latencies are kept only for requests that began
while a round was training (`/api/status` polled every 0.2 s), for
`--seconds` of training or until the round ends. Prints p50 / p99 per
endpoint and the count of error responses.

kill: 8 annotators answer; every `--every` seconds the service gets SIGKILL
and is restarted on the same port; at the end the export is compared with
every answer acknowledged (HTTP 200) before each kill.

bad-inputs: each malformed request of the API tests against a fresh
service; the status and the rows written (answers, queries) per request.

Writes JSON under --out. Latencies are wall-clock on the machine that runs
it; the client threads share its cores with the service and the round.
"""

import argparse
import json
import os
import pathlib
import shutil
import signal
import socket
import sys
import threading
import time

import numpy as np
import sqlalchemy as sa

from ssljax.pal.serve import db
from ssljax.pal.serve.simulate import Annotator, Server, labels_of


def _pool(out: pathlib.Path, config: str) -> pathlib.Path:
  """A campaign dir whose pool.npz later runs copy (skips the dataset read)."""
  base = out / "pool_base"
  if not (base / "pool.npz").exists():
    s = Server(base, "--config.server.train_every=0", config=config).start()
    s.stop()
  return base / "pool.npz"


def _fresh(out, name, pool) -> pathlib.Path:
  work = out / name
  shutil.rmtree(work, ignore_errors=True)
  work.mkdir(parents=True)
  shutil.copy(pool, work / "pool.npz")
  return work


def _people(server, work, count, **kw):
  engine = db.connect(db.database_url("", work))
  labels = labels_of(work)
  people = [Annotator(server.url, db.add_annotator(engine, f"p{k}"), labels,
                      seed=k, **kw) for k in range(count)]
  return people, engine, db.add_annotator(engine, "monitor")


def _run(people, stop):
  def loop(a):
    while not stop.is_set():
      try:
        if not a.step():
          time.sleep(0.2)
      except Exception as e:  # pylint: disable=broad-except  # a killed server
        a.errors.append(("exception", type(e).__name__))
        time.sleep(0.2)
  threads = [threading.Thread(target=loop, args=(a,), daemon=True)
             for a in people]
  for t in threads:
    t.start()
  return threads


def load(args):
  pool = _pool(args.out, args.config)
  rows = []
  for count in args.annotators:
    work = _fresh(args.out, f"load_{count}", pool)
    server = Server(work, f"--config.server.train_every={args.train_after}",
                    config=args.config).start()
    people, _, token = _people(server, work, count, think=args.think)
    stop = threading.Event()
    threads = _run(people, stop)
    monitor = server.client(token)
    spans, t_start, deadline = [], None, time.time() + 600
    while time.time() < deadline:
      training = monitor.get("/api/status").json()["training"]
      now = time.time()
      if training and t_start is None:
        t_start = now
      if t_start is not None and (not training or now - t_start > args.seconds):
        spans.append((t_start, now))
        break
      time.sleep(0.2)
    stop.set()
    for t in threads:
      t.join()
    row = {"annotators": count, "think_s": args.think,
           "training_window_s": round(spans[0][1] - spans[0][0], 1) if spans
           else 0.0,
           "errors": sum(len(p.errors) for p in people)}
    for kind in ("query", "answer"):
      lat = np.concatenate([p.latency[kind][:len(p.started[kind])]
                            for p in people])
      start = np.concatenate([p.started[kind][:len(lat)] for p in people])
      inside = np.zeros(len(lat), bool)
      for a, b in spans:
        inside |= (start >= a) & (start <= b)
      sel = lat[inside] * 1e3
      row[kind] = {"n": int(sel.size),
                   "p50_ms": round(float(np.percentile(sel, 50)), 1),
                   "p99_ms": round(float(np.percentile(sel, 99)), 1)}
    rc, seconds = server.stop()
    row["sigterm_exit"], row["sigterm_seconds"] = rc, round(seconds, 2)
    print(json.dumps(row), flush=True)
    rows.append(row)
  return rows


def kill(args):
  pool = _pool(args.out, args.config)
  work = _fresh(args.out, "kill", pool)
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  server = Server(work, "--config.server.train_every=100", config=args.config,
                  port=port).start()
  people, engine, _ = _people(server, work, 8)
  stop = threading.Event()
  threads = _run(people, stop)
  rows = []
  for k in range(args.kills):
    time.sleep(args.every)
    acked = {(q, a) for p in people for q, a in list(p.acked)}
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(10)
    with engine.connect() as conn:
      stored = set(conn.execute(sa.select(db.answers.c.query_id,
                                          db.answers.c.answer)).all())
      rounds = conn.execute(sa.select(db.rounds.c.id, db.rounds.c.status)
                            ).all()
    rows.append({"kill": k + 1, "acknowledged_before_kill": len(acked),
                 "stored_after_kill": len(stored),
                 "acknowledged_missing": len(acked - set(map(tuple, stored))),
                 "rounds": [tuple(r) for r in rounds]})
    print(json.dumps(rows[-1]), flush=True)
    server.start()
  time.sleep(args.every)
  stop.set()
  for t in threads:
    t.join()
  server.stop()
  with engine.connect() as conn:
    statuses = conn.execute(sa.select(db.rounds.c.id, db.rounds.c.status)
                            ).all()
  return {"kills": rows, "rounds_at_end": [tuple(r) for r in statuses]}


BAD = [
    ("unknown query_id", {"json": {"query_id": "0" * 32, "answer": "same"}}),
    ("injection-shaped query_id",
     {"json": {"query_id": "x' OR '1'='1'; DROP TABLE answers;--",
               "answer": "same"}}),
    ("malformed JSON", {"content": b'{"query_id": '}),
    ("JSON array, not an object", {"content": b'["same"]'}),
    ("not UTF-8", {"content": b"\xff\xfe\x00"}),
    ("answer 'maybe'", {"json": {"query_id": "QID", "answer": "maybe"}}),
    ("answer 1 (a number)", {"json": {"query_id": "QID", "answer": 1}}),
    ("query_id 7 (a number)", {"json": {"query_id": 7, "answer": "same"}}),
    ("body of 70 KB", {"content": json.dumps(
        {"query_id": "QID", "answer": "same", "pad": "x" * 70000}).encode()}),
    ("no token", {"json": {"query_id": "QID", "answer": "same"},
                  "headers": {"Authorization": ""}}),
    ("wrong token", {"json": {"query_id": "QID", "answer": "same"},
                     "headers": {"Authorization": "Bearer wrong"}}),
    ("valid answer (control)", {"json": {"query_id": "QID",
                                         "answer": "same"}}),
    ("same answer again (idempotent)", {"json": {"query_id": "QID",
                                                 "answer": "different"}}),
]


def bad_inputs(args):
  pool = _pool(args.out, args.config)
  work = _fresh(args.out, "bad_inputs", pool)
  server = Server(work, "--config.server.train_every=0",
                  config=args.config).start()
  _, engine, token = _people(server, work, 0)
  c = server.client(token)
  qid = c.get("/api/query").json()["query_id"]

  def counts():
    with engine.connect() as conn:
      return [conn.execute(sa.select(sa.func.count()).select_from(t)
                           ).scalar_one() for t in (db.answers, db.queries)]

  rows = []
  for name, kw in BAD:
    kw = json.loads(json.dumps(kw, default=lambda b: b.decode("latin-1")))
    if "json" in kw and kw["json"].get("query_id") == "QID":
      kw["json"]["query_id"] = qid
    if "content" in kw:
      kw["content"] = kw["content"].encode("latin-1").replace(b"QID",
                                                             qid.encode())
    before = counts()
    r = c.post("/api/answer", **kw)
    after = counts()
    rows.append({"request": name, "status": r.status_code,
                 "answers_written": after[0] - before[0],
                 "queries_written": after[1] - before[1]})
    print(json.dumps(rows[-1]), flush=True)
  server.stop()
  return rows


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("mode", choices=("load", "kill", "bad-inputs"))
  p.add_argument("--out", required=True, type=pathlib.Path)
  p.add_argument("--config", default="configs/pal_human.py")
  p.add_argument("--annotators", type=int, nargs="+", default=[8, 16, 50])
  p.add_argument("--think", type=float, default=0.5)
  p.add_argument("--seconds", type=float, default=30.0)
  p.add_argument("--train-after", type=int, default=20)
  p.add_argument("--kills", type=int, default=3)
  p.add_argument("--every", type=float, default=8.0)
  args = p.parse_args(argv)
  args.out.mkdir(parents=True, exist_ok=True)
  t0 = time.time()
  result = {"load": load, "kill": kill, "bad-inputs": bad_inputs}[args.mode](
      args)
  meta = {"mode": args.mode, "argv": sys.argv[1:], "seconds": time.time() - t0,
          "cpus": os.cpu_count(), "result": result}
  (args.out / f"{args.mode}.json").write_text(json.dumps(meta, indent=1))


if __name__ == "__main__":
  main()
