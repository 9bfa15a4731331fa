"""Start-up cost of the main job's imports, with and without bytecode.

    python benchmarks/startup.py                 # 5 interleaved rounds
    python benchmarks/startup.py --rounds 9 --out runs/startup.json

Each round starts two fresh interpreters that import what
``python -m ssljax.main`` imports before its first step (``ssljax.train``,
the evaluators, the report's matplotlib), one after the other:

* **bytecode**: the environment as it is (the ``.pyc`` files that
  ``make setup`` has uv write with ``--compile-bytecode``, and those of the
  project's modules that ``make run`` / ``make test`` compile);
* **sources**: ``PYTHONPYCACHEPREFIX`` pointed at an empty folder and
  ``PYTHONDONTWRITEBYTECODE=1``, so Python finds no ``.pyc`` and compiles
  every imported module from its source, as it did in every process before
  (uv writes no bytecode by default, and where ``PYTHONDONTWRITEBYTECODE``
  is set Python never writes it either).

Printed: the median wall seconds of each and their ratio, measured in the
same run; the number of ``.pyc`` files under the environment's
site-packages says whether the first form really had bytecode.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

IMPORTS = ("import ssljax.train, ssljax.evaluators, ssljax.report, "
           "ssljax.checkpoints, matplotlib.pyplot")


def one_start(env, imports: str = IMPORTS) -> float:
  """Wall seconds of a fresh interpreter that runs ``imports``."""
  start = time.perf_counter()
  subprocess.run([sys.executable, "-c", imports], env=env, check=True)
  return time.perf_counter() - start


def environments(empty: str) -> dict:
  """{"bytecode": this environment, "sources": the same with no bytecode
  to read or write} (``empty``: an empty folder for PYTHONPYCACHEPREFIX)."""
  return {"bytecode": dict(os.environ),
          "sources": dict(os.environ, PYTHONPYCACHEPREFIX=empty,
                          PYTHONDONTWRITEBYTECODE="1")}


def count_pyc(folder: str) -> int:
  return sum(name.endswith(".pyc") for _, _, names in os.walk(folder)
             for name in names)


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--out", default=None, help="write the JSON here")
  parser.add_argument("--imports", default=IMPORTS,
                      help="the statement each interpreter runs")
  args = parser.parse_args(argv)
  if args.rounds < 1:
    parser.error("--rounds must be >= 1")
  site = sysconfig.get_paths()["purelib"]
  times = {"bytecode": [], "sources": []}
  with tempfile.TemporaryDirectory(prefix="ssljax_startup_") as empty:
    envs = environments(empty)
    one_start(envs["bytecode"], args.imports)  # page the files in first
    for _ in range(args.rounds):
      for name, env in envs.items():
        times[name].append(one_start(env, args.imports))
  out = {
      "imports": args.imports,
      "rounds": args.rounds,
      "pyc_files_in_site_packages": count_pyc(site),
      "median_s": {k: statistics.median(v) for k, v in times.items()},
      "seconds": times,
      "load_average": os.getloadavg(),
  }
  out["sources_over_bytecode"] = (out["median_s"]["sources"]
                                  / out["median_s"]["bytecode"])
  print(f".pyc files in {site}: {out['pyc_files_in_site_packages']}")
  for k, v in out["median_s"].items():
    print(f"{k:>9}: {v:.2f} s (median of {args.rounds})")
  print(f"sources / bytecode: {out['sources_over_bytecode']:.2f}")
  if args.out:
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
      json.dump(out, f, indent=1)
  return out


if __name__ == "__main__":
  main()
