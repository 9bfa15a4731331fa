"""Helpers of the PAL annotation service tests: a server process, a pool,
PostgreSQL in a temporary directory.

`tiny_pool` writes an .npz pool (8x8 images whose class is visible), so a
server starts in about two seconds without Fashion-MNIST. `Server` and
`Annotator` are `ssljax.pal.serve.simulate`'s.
`postgres_server` starts a throw-away PostgreSQL cluster (initdb + pg_ctl
on a free port, as the ``postgres`` or ``nobody`` user when run as root).
"""

import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile

import numpy as np

from ssljax.pal.serve.simulate import Annotator, Server, labels_of  # noqa: F401  pylint: disable=unused-import

ROOT = pathlib.Path(__file__).resolve().parents[1]


def tiny_pool(path, n=60, num_classes=4, n_test=40, seed=0):
  """Writes an npz pool: class c has a bright band at rows 2c..2c+1."""
  rng = np.random.default_rng(seed)

  def make(m):
    y = np.arange(m) % num_classes
    x = rng.integers(0, 60, (m, 8, 8, 1))
    for k, c in enumerate(y):
      x[k, 2 * c:2 * c + 2] += 180
    return x.astype(np.uint8), y.astype(np.int64)

  images, labels = make(n)
  test_images, test_labels = make(n_test)
  np.savez(path, images=images, labels=labels, test_images=test_images,
           test_labels=test_labels)
  return path


def cli(*args, check=True) -> subprocess.CompletedProcess:
  """Runs ``python -m ssljax.pal.serve ARGS`` and returns the result."""
  proc = subprocess.run([sys.executable, "-m", "ssljax.pal.serve", *args],
                        cwd=ROOT, capture_output=True, text=True, timeout=300,
                        env=_env())
  if check and proc.returncode != 0:
    raise AssertionError(f"{args} failed:\n{proc.stdout}\n{proc.stderr}")
  return proc


def _env():
  return {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}


def add_annotator(workdir, name) -> str:
  """The token `add-annotator` prints as its last stdout line."""
  out = cli("add-annotator", "--workdir", str(workdir), name).stdout
  return out.strip().splitlines()[-1]


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def postgres_bin():
  """Folder holding initdb and pg_ctl, or None."""
  found = shutil.which("pg_ctl")
  if found and shutil.which("initdb"):
    return pathlib.Path(found).parent
  for folder in sorted(pathlib.Path("/usr/lib/postgresql").glob("*/bin")):
    if (folder / "pg_ctl").exists() and (folder / "initdb").exists():
      return folder
  return None


class Postgres:
  """A throw-away PostgreSQL cluster; `url` is its postgresql:// URL."""

  def __init__(self):
    self.bin = postgres_bin()
    self.dir = pathlib.Path(tempfile.mkdtemp(prefix="ssljax_pg_"))
    self.data = self.dir / "data"
    self.port = free_port()
    self.user = None
    if os.geteuid() == 0:  # postgres refuses to run as root
      self.user = "postgres" if _has_user("postgres") else "nobody"
      os.chmod(self.dir, 0o777)

  def _run(self, *args):
    cmd = [str(self.bin / args[0]), *args[1:]]
    if self.user:
      cmd = ["runuser", "-u", self.user, "--", *cmd]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120,
                   cwd=self.dir)

  def start(self):
    self._run("initdb", "-D", str(self.data), "-U", "pal", "-A", "trust")
    self._run("pg_ctl", "-D", str(self.data), "-l", str(self.dir / "pg.log"),
              "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1",
              "-w", "start")
    self.url = f"postgresql://pal@127.0.0.1:{self.port}/postgres"
    return self

  def stop(self):
    try:
      self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
    finally:
      shutil.rmtree(self.dir, ignore_errors=True)


def _has_user(name) -> bool:
  import pwd  # pylint: disable=import-outside-toplevel
  try:
    pwd.getpwnam(name)
    return True
  except KeyError:
    return False
