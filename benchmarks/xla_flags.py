"""Does an XLA:CPU option speed up the default CNN VICReg train step?

    python benchmarks/xla_flags.py                  # the flag sets of FLAG_SETS
    python benchmarks/xla_flags.py --rounds 7 --steps 3

XLA reads ``XLA_FLAGS`` once, when the backend starts, so every flag set gets
its own worker process (this file with ``--worker``). All workers compile
first; then the parent lets one worker at a time run ``--steps`` steps, in
turn, for ``--rounds`` rounds (interleaved, so a change of machine load hits
every flag set alike), and prints the median seconds per step and its ratio
to the run without flags. Only one worker computes at any time.
"""

import argparse
import os
import subprocess
import sys

import numpy as np

# Options of jaxlib 0.10.2's XLA:CPU that hand convolutions / dots to other
# kernel libraries (oneDNN, XNNPACK, YNNPACK) instead of XLA's own ones.
FLAG_SETS = {
    "none": "",
    "onednn": "--xla_cpu_use_onednn=true",
    "onednn+custom_call": ("--xla_cpu_use_onednn=true "
                           "--xla_cpu_experimental_onednn_custom_call=true"),
    "xnnpack": "--xla_cpu_use_xnnpack=true",
    # Which ops XLA:CPU hands to YNNPACK fusions (jaxlib 0.10.2 also fuses
    # reduce_window there, fed a materialised broadcast of the ReLU's 0).
    "ynn_conv_dot": ("--xla_cpu_experimental_ynn_fusion_type="
                     "individual_convolution,individual_dot"),
    "ynn_conv": "--xla_cpu_experimental_ynn_fusion_type=individual_convolution",
}


def _worker(steps: int) -> None:
  """Compiles the step, then times ``steps`` steps per line read on stdin."""
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  import train_step as bench  # pylint: disable=import-outside-toplevel
  config = bench._config("vicreg", "cnn", "float32")  # pylint: disable=protected-access
  views = np.random.default_rng(0).uniform(
      size=(2, config.batch_size, 28, 28, 1)).astype(np.float32)
  run, _ = bench.jax_step(config, views)
  run()  # warm-up
  print("ready", flush=True)
  for _ in sys.stdin:
    print(bench._time_calls(run, steps), flush=True)  # pylint: disable=protected-access


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--steps", type=int, default=3, help="steps per turn")
  parser.add_argument("--sets", nargs="+", choices=sorted(FLAG_SETS),
                      default=None, help="flag sets to time (default: all; "
                      "'none' is always added)")
  parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.worker:
    return _worker(args.steps)

  chosen = ["none"] + [n for n in (args.sets or FLAG_SETS) if n != "none"]
  workers = {}
  for name in chosen:
    flags = FLAG_SETS[name]
    env = dict(os.environ, XLA_FLAGS=flags, OPENBLAS_NUM_THREADS="1",
               TF_CPP_MIN_LOG_LEVEL="2")
    workers[name] = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--worker",
         "--steps", str(args.steps)], env=env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
  for name, proc in workers.items():  # compiles run concurrently
    line = proc.stdout.readline().strip()
    if line != "ready":
      raise RuntimeError(f"worker {name!r} failed to start (exit "
                         f"{proc.wait()}); see its stderr above")
  times = {name: [] for name in workers}
  for r in range(args.rounds):
    for name, proc in workers.items():
      proc.stdin.write("go\n")
      proc.stdin.flush()
      times[name].append(float(proc.stdout.readline()))
    load = os.getloadavg()
    print(f"round {r + 1}/{args.rounds}  load {load[0]:.1f}", flush=True)
  for proc in workers.values():
    proc.stdin.close()
    proc.wait()

  base = np.median(times["none"])
  print(f"\nCNN VICReg step, batch 2x256, median of {args.rounds} rounds x "
        f"{args.steps} steps")
  print(f"{'flags':22s} {'s/step':>8s} {'speed vs none':>14s}")
  for name, t in times.items():
    med = np.median(t)
    print(f"{name:22s} {med:8.3f} {base / med:14.2f}")


if __name__ == "__main__":
  main()
