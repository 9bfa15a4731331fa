"""benchmarks/startup.py: its "sources" form really finds no bytecode."""

import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from benchmarks import startup  # noqa: E402


def test_sources_form_reads_and_writes_no_bytecode(tmp_path):
  envs = startup.environments(str(tmp_path))
  probe = ("import importlib.util, json, os; "
           "c = importlib.util.cache_from_source(json.__file__); "
           "print(c, os.path.exists(c))")
  out = subprocess.run([sys.executable, "-c", probe], env=envs["sources"],
                       capture_output=True, text=True, check=True).stdout
  cached, exists = out.split()
  assert cached.startswith(str(tmp_path)) and exists == "False"
  assert not any(tmp_path.iterdir())  # nothing was written there either
  plain = subprocess.run([sys.executable, "-c", probe], env=envs["bytecode"],
                         capture_output=True, text=True, check=True).stdout
  assert not plain.split()[0].startswith(str(tmp_path))


def test_main_reports_both_forms(tmp_path):
  out = startup.main(["--rounds", "1", "--imports", "import json",
                      "--out", str(tmp_path / "s.json")])
  assert set(out["median_s"]) == {"bytecode", "sources"}
  assert all(v > 0 for v in out["median_s"].values())
  assert os.path.exists(tmp_path / "s.json")
