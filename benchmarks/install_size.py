"""Installed size and `import ssljax.losses` time of each install of ssljax.

    python benchmarks/install_size.py [--uv .uv/bin/uv] [--repeats 3]

Builds the wheel once, then for each install (the core, core + `train`,
core + `train` + `tfds` = the environment `make run` installed before the
extras existed, where TensorFlow was a dependency, core + `serve`, and the
environment of `make test`) creates a clean virtual
environment with uv, installs the wheel with those extras at the lock's
versions (`uv export` as constraints, so the packages are the ones
`make run` installs), and reports the number of distributions, the size of
site-packages (`du`, MB = 10^6 bytes) and the wall time of
`import ssljax.losses` in a fresh interpreter (median of --repeats, run from
a scratch folder so the installed wheel is imported, not the checkout).
Prints a Markdown table.
"""

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
INSTALLS = [("core", ""), ("core + train (`make run`)", "[train]"),
            ("core + train + tfds (the default before the extras)",
             "[train,tfds]"),
            ("core + serve (brings train)", "[serve]"),
            ("`make test`", "[train,tfds,test,docs,serve]")]
IMPORT_TIME = ("import time; t = time.perf_counter(); import ssljax.losses; "
               "print(time.perf_counter() - t)")


def run(*args, **kwargs) -> str:
  return subprocess.run(args, check=True, capture_output=True, text=True,
                        **kwargs).stdout


def measure(uv: str, wheel: str, constraints: str, extras: str,
            env: pathlib.Path, repeats: int) -> tuple[int, float, float]:
  """(distributions, site-packages MB, median import seconds) of one env."""
  python = str(env / "bin" / "python")
  run(uv, "venv", "--quiet", "--python", sys.executable, str(env))
  run(uv, "pip", "install", "--quiet", "--python", python,
      "--constraints", constraints, wheel + extras)
  site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()"
             "['purelib'])").strip()
  size_mb = int(run("du", "-s", "--block-size=1", site).split()[0]) / 1e6
  dists = len([p for p in os.listdir(site) if p.endswith(".dist-info")])
  times = [float(run(python, "-c", IMPORT_TIME, cwd=env.parent))
           for _ in range(repeats)]
  return dists, size_mb, statistics.median(times)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--uv", default=str(ROOT / ".uv" / "bin" / "uv"))
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  with tempfile.TemporaryDirectory(prefix="ssljax_install_size_") as tmp:
    scratch = pathlib.Path(tmp)
    run(args.uv, "build", "--quiet", "--out-dir",
        str(scratch / "dist"), str(ROOT))
    wheel = str(next((scratch / "dist").glob("ssljax-*.whl")))
    constraints = str(scratch / "constraints.txt")
    run(args.uv, "export", "--frozen", "--quiet", "--no-hashes",
        "--no-emit-project", "--all-extras", "--format", "requirements-txt",
        "--output-file", constraints, cwd=ROOT)
    print("| install | distributions | site-packages (MB) "
          "| `import ssljax.losses` (s) |")
    print("|---|---|---|---|")
    for i, (name, extras) in enumerate(INSTALLS):
      dists, size_mb, seconds = measure(args.uv, wheel, constraints, extras,
                                        scratch / f"env{i}", args.repeats)
      print(f"| {name} (`ssljax{extras}`) | {dists} | {size_mb:.0f} "
            f"| {seconds:.2f} |", flush=True)


if __name__ == "__main__":
  main()
