"""Command line of the PAL annotation service.

    python -m ssljax.pal.serve --config configs/pal_human.py --workdir DIR
    python -m ssljax.pal.serve add-annotator --workdir DIR NAME
    python -m ssljax.pal.serve export --workdir DIR --out FILE.npz
    python -m ssljax.pal.serve train --workdir DIR [--answers FILE.npz]

No sub-command serves: the page and API on ``server.host:server.port``
(127.0.0.1:8000 by default; port 0 picks a free one), with the database
``server.db`` (SQLite ``DIR/pal.sqlite`` if empty). The config is saved as
``DIR/config.json``; the other sub-commands read it from there (or from
``--config``). ``add-annotator`` prints the new bearer token as its last
line of stdout. ``export`` writes the answers as arrays ``i``, ``j``,
``answer``, ``annotator``, ``time`` (and ``query_id``). ``train`` runs one
training round: on the exported answers of ``--answers`` offline, or on
the database of DIR (what the service's background worker runs).
SIGTERM: in-flight requests finish, the process exits 0 (within 5 s).
"""

import contextlib
import json
import os
import pathlib
import signal
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from ssljax import extras  # noqa: E402

# Before the first third-party import: a missing extra is one line.
if __name__ == "__main__":
  extras.exit_if_missing("serve", "python -m ssljax.pal.serve")

from absl import app, flags  # noqa: E402
from ml_collections import config_dict, config_flags  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "configs/pal_human.py[:variant]", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "campaign directory")
_OUT = flags.DEFINE_string("out", None, "export: output .npz file")
_ANSWERS = flags.DEFINE_string("answers", None,
                               "train: exported answers (.npz) to train on")
_ROUND = flags.DEFINE_integer("round", 0, "train: round number (0: next)")
_PARENT = flags.DEFINE_integer("parent_pid", 0,
                               "train: exit when this process is gone")
flags.mark_flag_as_required("workdir")

COMMANDS = ("serve", "add-annotator", "export", "train")


def _fail(message: str):
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(2)


def _config(workdir: pathlib.Path):
  """--config (then saved as DIR/config.json), else DIR/config.json."""
  saved = workdir / "config.json"
  if _CONFIG.value is not None:
    cfg = _CONFIG.value
    saved.write_text(cfg.to_json(indent=1))
    return cfg
  if saved.exists():
    return config_dict.ConfigDict(json.loads(saved.read_text()))
  _fail(f"no --config and no {saved}: serve once or pass --config")


def _engine(cfg, workdir):
  from ssljax.pal.serve import db  # pylint: disable=import-outside-toplevel
  return db.connect(db.database_url(cfg.server.db, workdir))


def serve(cfg, workdir: pathlib.Path):
  """Runs the service until SIGTERM / SIGINT."""
  import socket  # pylint: disable=import-outside-toplevel
  import uvicorn  # pylint: disable=import-outside-toplevel
  from ssljax.pal.serve.app import create_app  # pylint: disable=import-outside-toplevel
  from ssljax.pal.serve.pool import load_pool, prepare_pool  # pylint: disable=import-outside-toplevel
  from ssljax.pal.serve.service import Service  # pylint: disable=import-outside-toplevel
  prepare_pool(cfg, workdir)
  service = Service(cfg, workdir, _engine(cfg, workdir), load_pool(workdir))
  sock = socket.socket(socket.AF_INET6 if ":" in cfg.server.host
                       else socket.AF_INET)
  sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  sock.bind((cfg.server.host, cfg.server.port))
  port = sock.getsockname()[1]
  (workdir / "port").write_text(str(port))
  print(f"serving http://{cfg.server.host}:{port}/ (pool {service.n}, "
        f"{service.num_answers} answers, round {service.round})", flush=True)
  server = _server_class()(uvicorn.Config(
      create_app(service), log_level="warning", access_log=False,
      timeout_graceful_shutdown=5, lifespan="off"))
  def stop(*_):  # a second signal stops without waiting for requests
    server.force_exit = server.should_exit
    server.should_exit = True

  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, stop)
  service.start_worker()
  try:
    server.run(sockets=[sock])
  finally:
    service.stop_worker()
    service.engine.dispose()


def _server_class():
  import uvicorn  # pylint: disable=import-outside-toplevel

  class Server(uvicorn.Server):
    """uvicorn's server without its signal capture: uvicorn re-raises a
    captured SIGTERM after shutdown (exit status -15); ours only asks the
    server to stop, so a clean shutdown exits 0."""

    @contextlib.contextmanager
    def capture_signals(self):
      yield

  return Server


def _watch_parent(pid: int):
  def watch():
    while True:
      if os.getppid() != pid:
        os._exit(3)  # the service is gone: no orphan round
      time.sleep(1.0)
  threading.Thread(target=watch, daemon=True).start()


def train(cfg, workdir: pathlib.Path):
  """One round: offline on --answers, or on DIR's database."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from ssljax.pal.serve import db, rounds  # pylint: disable=import-outside-toplevel
  from ssljax.pal.serve.pool import prepare_pool  # pylint: disable=import-outside-toplevel
  if _PARENT.value:
    _watch_parent(_PARENT.value)
  prepare_pool(cfg, workdir)
  if _ANSWERS.value:
    with np.load(_ANSWERS.value) as f:
      answers = {k: f[k] for k in ("i", "j", "answer")}
    engine = None
  else:
    engine = _engine(cfg, workdir)
    answers = db.export_answers(engine)
  round_id = _ROUND.value
  if not round_id:
    round_id = 1
    while rounds.round_files(workdir, round_id)[0].exists():
      round_id += 1
  metrics = rounds.run_round(cfg, workdir, engine, round_id, answers)
  print(json.dumps(metrics), flush=True)


def main(argv):
  args = argv[1:]
  command = args.pop(0) if args and args[0] in COMMANDS else "serve"
  workdir = pathlib.Path(_WORKDIR.value).resolve()
  workdir.mkdir(parents=True, exist_ok=True)
  if command == "serve":
    if args:
      _fail(f"unexpected arguments {args}")
    serve(_config(workdir), workdir)
    return
  if command == "add-annotator":
    if len(args) != 1:
      _fail("add-annotator takes one NAME")
    from ssljax.pal.serve import db  # pylint: disable=import-outside-toplevel
    try:
      token = db.add_annotator(_engine(_config(workdir), workdir),
                               args[0])
    except ValueError as e:
      _fail(str(e))
    print(f"annotator {args[0]!r} added; its bearer token (shown once):")
    print(token, flush=True)
    return
  if command == "export":
    if not _OUT.value:
      _fail("export needs --out FILE.npz")
    import numpy as np  # pylint: disable=import-outside-toplevel
    from ssljax.pal.serve import db  # pylint: disable=import-outside-toplevel
    arrays = db.export_answers(_engine(_config(workdir), workdir))
    np.savez(_OUT.value, **arrays)
    print(f"{len(arrays['answer'])} answers -> {_OUT.value}", flush=True)
    return
  train(_config(workdir), workdir)


if __name__ == "__main__":
  flags.FLAGS.set_gnu_getopt(True)
  app.run(main)
