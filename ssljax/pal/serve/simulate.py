"""Simulated campaigns: a service process and annotators answering it.

Used by the tests, `benchmarks/pal_serve_load.py` and
`experiments/pal_human_campaign.py`. `Server` runs ``python -m
ssljax.pal.serve`` in a subprocess on 127.0.0.1 (a free port unless one is
given) and waits for ``/healthz``; `Annotator` is a person simulated from
the true labels, with a fraction of its answers flipped (the noisy oracle
of Cabannes et al. 2023, §4.3), and records latencies and acknowledged
answers. Needs the ``serve`` extra (httpx).
"""

import os
import pathlib
import signal
import subprocess
import sys
import time

import httpx
import numpy as np

__all__ = ["Server", "Annotator", "labels_of", "serve_command"]

_REPO = pathlib.Path(__file__).resolve().parents[3]


def serve_command(workdir, *overrides, config="configs/pal_human.py:smoke",
                  port=0) -> list:
  """The argv of ``python -m ssljax.pal.serve`` for a campaign directory."""
  return [sys.executable, "-m", "ssljax.pal.serve", "--config", config,
          "--workdir", str(workdir), f"--config.server.port={port}",
          *overrides]


def _env():
  path = os.environ.get("PYTHONPATH", "")
  return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
          "PYTHONPATH": str(_REPO) + (os.pathsep + path if path else "")}


class Server:
  """A `python -m ssljax.pal.serve` process; `url` once it answers /healthz.

  `Server.live` holds the processes started and not yet stopped (a test
  harness kills what a failed test left running).
  """

  live: set = set()

  def __init__(self, workdir, *overrides, config="configs/pal_human.py:smoke",
               port=0):
    self.workdir = pathlib.Path(workdir)
    self.cmd = serve_command(workdir, *overrides, config=config, port=port)
    self.proc = None
    self.url = None

  def start(self, timeout=120):
    port_file = self.workdir / "port"
    if port_file.exists():
      port_file.unlink()
    self.workdir.mkdir(parents=True, exist_ok=True)
    log = open(self.workdir / "serve.log", "ab")  # pylint: disable=consider-using-with
    self.proc = subprocess.Popen(self.cmd, cwd=_REPO, env=_env(), stdout=log,
                                 stderr=log)
    Server.live.add(self.proc)
    deadline = time.time() + timeout
    while time.time() < deadline:
      if self.proc.poll() is not None:
        raise AssertionError("server exited:\n" + (
            self.workdir / "serve.log").read_text()[-4000:])
      if port_file.exists() and port_file.read_text().strip():
        url = f"http://127.0.0.1:{port_file.read_text().strip()}"
        try:
          if httpx.get(url + "/healthz", timeout=2).status_code == 200:
            self.url = url
            return self
        except httpx.HTTPError:
          pass
      time.sleep(0.1)
    raise AssertionError("server did not start in time")

  def client(self, token=None) -> httpx.Client:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=self.url, headers=headers, timeout=30)

  def stop(self, sig=signal.SIGTERM, timeout=15) -> tuple[int, float]:
    """Sends sig; returns (exit status, seconds until exit)."""
    t0 = time.time()
    self.proc.send_signal(sig)
    rc = self.proc.wait(timeout)
    Server.live.discard(self.proc)
    return rc, time.time() - t0


class Annotator:
  """A simulated person: answers from the true labels, a fraction flipped.

  `think` seconds pass between a query and its answer (a person looks at
  the images). Records the latency of every request ("query" / "answer") and every
  acknowledged (200) answer as (query_id, answer).
  """

  def __init__(self, url, token, labels_of: dict, *, noise=0.0, seed=0,
               think=0.0):
    self.client = httpx.Client(base_url=url, timeout=60,
                               headers={"Authorization": f"Bearer {token}"})
    self.labels_of, self.noise, self.think = labels_of, noise, think
    self.rng = np.random.default_rng(seed)
    self.latency = {"query": [], "answer": []}  # seconds per request
    self.started = {"query": [], "answer": []}  # time.time() at its start
    self.acked, self.errors = [], []

  def step(self) -> bool:
    """One query and its answer; False when no pair is left."""
    self.started["query"].append(time.time())
    t0 = time.perf_counter()
    r = self.client.get("/api/query")
    self.latency["query"].append(time.perf_counter() - t0)
    if r.status_code == 204:
      return False
    if r.status_code != 200:
      self.errors.append(("query", r.status_code))
      return True
    q = r.json()
    i, j = q["items"]
    same = self.labels_of[i] == self.labels_of[j]
    if self.rng.random() < self.noise:
      same = not same
    ans = "same" if same else "different"
    time.sleep(self.think)  # looking at the two images
    self.started["answer"].append(time.time())
    t0 = time.perf_counter()
    a = self.client.post("/api/answer", json={"query_id": q["query_id"],
                                              "answer": ans})
    self.latency["answer"].append(time.perf_counter() - t0)
    if a.status_code == 200:
      self.acked.append((q["query_id"], ans))
    else:
      self.errors.append(("answer", a.status_code))
    return True


def labels_of(workdir) -> dict:
  """{train-split index: label} of the pool of a campaign directory."""
  with np.load(pathlib.Path(workdir) / "pool.npz") as f:
    return dict(zip(f["index"].tolist(), f["labels"].tolist()))
