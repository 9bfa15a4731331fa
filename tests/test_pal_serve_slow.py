"""The annotation service under people, load, crashes and training (slow).

* browser: headless Chromium (playwright, Debian's /usr/bin/chromium) opens
  the page, answers 20 pairs with the keyboard (S, D, space); the database
  holds the 20 answers; a screenshot is saved (tmp_path, or
  $SSLJAX_SCREENSHOT_DIR when set).
* load: 8 simulated annotators answer from the true labels while a training
  round runs in the background: no error response, every acknowledged
  answer stored; p50/p99 latencies printed (not asserted).
* kill -9: annotators keep answering, the server is killed with SIGKILL and
  restarted on the same port: every acknowledged answer is in the export,
  a query pending at the kill is handed out again, a round running at the
  kill is marked aborted and a round finishes after the restart.
* offline: `export` then `train --answers` in a fresh directory.

All on 127.0.0.1, free ports, Fashion-MNIST pool of 200 images (smoke).
"""

import json
import os
import signal
import threading
import time

import numpy as np
import pytest
import sqlalchemy as sa

import pal_serve_util as util
from ssljax.pal.serve import db

pytestmark = pytest.mark.slow
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(autouse=True)
def _no_server_left():
  """Kills (SIGKILL) any service a failed test left running."""
  yield
  for proc in list(util.Server.live):
    if proc.poll() is None:
      proc.kill()
      proc.wait(10)
    util.Server.live.discard(proc)


def _engine(workdir):
  return db.connect(db.database_url("", workdir))


def _count(engine, table="answers"):
  with engine.connect() as conn:
    return conn.execute(sa.select(sa.func.count()).select_from(
        db.metadata.tables[table])).scalar_one()


def test_browser_answers_twenty_pairs_with_the_keyboard(tmp_path):
  from playwright.sync_api import sync_playwright  # pylint: disable=import-outside-toplevel
  if not os.path.exists(CHROMIUM):
    pytest.fail(f"{CHROMIUM} missing: `make browser` installs chromium")
  server = util.Server(tmp_path, "--config.server.train_every=0").start()
  token = util.add_annotator(tmp_path, "browser")
  shots = os.environ.get("SSLJAX_SCREENSHOT_DIR") or str(tmp_path)
  keys = ["s", "d", " "] * 7
  try:
    with sync_playwright() as pw:
      browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                   args=["--no-sandbox", "--disable-gpu"])
      page = browser.new_page(viewport={"width": 1100, "height": 640})
      errors = []
      page.on("pageerror", lambda e: errors.append(str(e)))
      page.goto(f"{server.url}/#token={token}")
      page.wait_for_function("document.getElementById('left').complete && "
                             "document.getElementById('left').naturalWidth > 0")
      for k, key in enumerate(keys[:20]):
        before = page.eval_on_selector("#left", "e => e.src") + \
            page.eval_on_selector("#right", "e => e.src")
        page.keyboard.press("Space" if key == " " else key)
        page.wait_for_function(
            f"document.getElementById('count').textContent === '{k + 1}'")
        if k < 19:
          page.wait_for_function(
              "(document.getElementById('left').src + "
              f"document.getElementById('right').src) !== {json.dumps(before)}")
      assert page.text_content("#count") == "20"
      page.wait_for_function("document.getElementById('left').complete && "
                             "document.getElementById('right').complete")
      page.screenshot(path=os.path.join(shots, "pal_serve_page.png"))
      assert errors == []
      browser.close()
    engine = _engine(tmp_path)
    with engine.connect() as conn:
      rows = conn.execute(sa.select(db.answers.c.answer)).scalars().all()
    assert len(rows) == 20
    assert rows == [{"s": "same", "d": "different", " ": "skip"}[k]
                    for k in keys[:20]]
  finally:
    assert server.stop()[0] == 0


def _run(annotators, stop: threading.Event, failures: list):
  def loop(a):
    while not stop.is_set():
      try:
        if not a.step():
          time.sleep(0.2)
      except Exception as e:  # pylint: disable=broad-except
        failures.append(repr(e))
        time.sleep(0.2)
  threads = [threading.Thread(target=loop, args=(a,)) for a in annotators]
  for t in threads:
    t.start()
  return threads


def test_load_while_a_round_trains(tmp_path):
  server = util.Server(tmp_path, "--config.server.train_every=40").start()
  labels = util.labels_of(tmp_path)
  people = [util.Annotator(server.url, util.add_annotator(tmp_path, f"a{k}"),
                           labels, seed=k, think=0.3) for k in range(8)]
  stop, failures = threading.Event(), []
  threads = _run(people, stop, failures)
  status = server.client(util.add_annotator(tmp_path, "watch"))
  deadline, trained = time.time() + 240, False
  while time.time() < deadline:
    st = status.get("/api/status").json()
    if st["round"] >= 1 and st["answers"] >= 200:
      trained = True
      break
    time.sleep(0.5)
  stop.set()
  for t in threads:
    t.join()
  assert trained, st
  assert failures == [] and all(p.errors == [] for p in people)
  acked = sum(len(p.acked) for p in people)
  assert _count(_engine(tmp_path)) == acked
  lat = {k: np.concatenate([p.latency[k] for p in people]) for k in
         ("query", "answer")}
  print({k: (round(float(np.percentile(v, 50)) * 1e3, 1),
             round(float(np.percentile(v, 99)) * 1e3, 1)) for k, v in
         lat.items()})
  assert server.stop()[0] == 0


def test_kill_9_keeps_every_acknowledged_answer(tmp_path):
  port = util.free_port()
  server = util.Server(tmp_path, "--config.server.train_every=60",
                       port=port).start()
  labels = util.labels_of(tmp_path)
  people = [util.Annotator(server.url, util.add_annotator(tmp_path, f"k{k}"),
                           labels, seed=k) for k in range(4)]
  holder = util.Annotator(server.url, util.add_annotator(tmp_path, "holder"),
                          labels)
  held = holder.client.get("/api/query").json()  # pending at the kill
  stop, failures = threading.Event(), []
  threads = _run(people, stop, failures)
  time.sleep(6)
  server.proc.send_signal(signal.SIGKILL)
  server.proc.wait(10)
  util.Server.live.discard(server.proc)
  time.sleep(1)
  server.start()
  time.sleep(6)
  stop.set()
  for t in threads:
    t.join()
  # The holder's query was released at restart and handed to another
  # annotator (the only ones asking after the restart).
  with _engine(tmp_path).connect() as conn:
    row = conn.execute(sa.select(db.queries, db.annotators.c.name).join(
        db.annotators, db.annotators.c.id == db.queries.c.annotator_id).where(
            db.queries.c.id == held["query_id"])).one()
  assert row.name != "holder", row
  # Training resumes: a round after the restart finishes (a round running
  # at the kill, if any, is marked aborted).
  watch = server.client(util.add_annotator(tmp_path, "watch"))
  deadline = time.time() + 240
  while watch.get("/api/status").json()["round"] == 0:
    assert time.time() < deadline, "no round finished after the restart"
    time.sleep(1)
  with _engine(tmp_path).connect() as conn:
    statuses = dict(conn.execute(sa.select(db.rounds.c.id,
                                           db.rounds.c.status)).all())
  assert "done" in statuses.values() and "running" not in list(
      statuses.values())[:-1], statuses
  acked = {(q, a) for p in people for q, a in p.acked}
  out = tmp_path / "export.npz"
  assert server.stop()[0] == 0
  util.cli("export", "--workdir", str(tmp_path), "--out", str(out))
  with np.load(out) as f:
    stored = set(zip(f["query_id"].tolist(), f["answer"].tolist()))
  assert acked and acked <= stored
  print({"acknowledged": len(acked), "stored": len(stored),
         "lost": len(acked - stored), "failed_requests": len(failures)})


def test_export_then_offline_round(tmp_path):
  work = tmp_path / "live"
  server = util.Server(work, "--config.server.train_every=0").start()
  a = util.Annotator(server.url, util.add_annotator(work, "x"),
                     util.labels_of(work))
  for _ in range(60):
    a.step()
  assert server.stop()[0] == 0
  out = tmp_path / "answers.npz"
  util.cli("export", "--workdir", str(work), "--out", str(out))
  off = tmp_path / "offline"
  res = util.cli("train", "--config", "configs/pal_human.py:smoke",
                 "--workdir", str(off), "--answers", str(out))
  metrics = json.loads(res.stdout.strip().splitlines()[-1])
  assert metrics["round"] == 1 and metrics["answers"] == 60
  assert metrics["resolved_pairs"] == 60 and 0.0 <= metrics["probe"] <= 1.0
  lines = (off / "metrics.jsonl").read_text().splitlines()
  assert json.loads(lines[-1])["round"] == 1
  assert (off / "rounds" / "round_00001.msgpack").exists()
