"""What the evaluators cost a run: the online probe's share of the train step,
and the evaluators' share of a finished run's wall time.

    python benchmarks/evaluator_overhead.py --run runs/vicreg

1. Times the main job's train step (configs/vicreg.py, one device) with and
   without the online probe, interleaved: each round runs both variants
   ``--steps`` times in turn; the medians over ``--rounds`` rounds and their
   ratio are printed (a change of machine load hits both alike).
2. With ``--run``: from that run's ``results.json``, the seconds of every
   evaluator (``seconds["eval/<name>"]``, periodic runs included) and their
   sum as a fraction of ``wall_seconds``, split into the evaluators the main
   job already had before ``config.evals`` (offline probe, k-NN, the two
   baselines) and the new ones.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from configs import vicreg as vicreg_config  # noqa: E402
from ssljax import (methods, online_probe, optimizers, train,  # noqa: E402
                    train_state)

BEFORE = ("probe", "knn", "raw_pixel_probe", "random_init_probe")


def step_seconds(rounds: int, steps: int) -> dict:
  """Median seconds per train step, with and without the online probe."""
  config = vicreg_config.get_config()
  mesh = train.make_mesh(jax.devices()[:1])
  images = np.random.default_rng(0).integers(
      0, 256, (config.batch_size, 28, 28, 1), dtype=np.uint8)
  labels = np.arange(config.batch_size, dtype=np.int32) % 10
  method = methods.build(config)
  tx = optimizers.create_optimizer(config.optim, lambda step: 1e-3)
  spec = train.batch_spec(config, images.shape[1:])
  variants = {}
  for name, classes in (("with online probe", 10), ("without", 0)):
    state = train_state.create_train_state(
        method, tx, jax.random.key(0), spec, num_classes=classes,
        probe_tx=online_probe.create_optimizer(config))
    batch = {"images": images}
    if classes:
      batch["labels"] = labels
    step = train.sharded_train_step(config, mesh, total_steps=1000)
    state, _ = step(state, jax.device_put(batch))  # compile
    variants[name] = [state, step, jax.device_put(batch), []]
  for _ in range(rounds):
    for name, v in variants.items():
      start = time.perf_counter()
      for _ in range(steps):
        v[0], metrics = v[1](v[0], v[2])
      jax.block_until_ready(metrics)
      v[3].append((time.perf_counter() - start) / steps)
  return {name: float(np.median(v[3])) for name, v in variants.items()}


def run_overhead(workdir: str) -> dict:
  with open(os.path.join(workdir, "results.json")) as f:
    results = json.load(f)
  seconds = {k.split("/", 1)[1]: v for k, v in results["seconds"].items()
             if k.startswith("eval/")}
  wall = results["wall_seconds"]
  before = sum(v for k, v in seconds.items() if k in BEFORE)
  new = sum(v for k, v in seconds.items() if k not in BEFORE)
  return {"wall_seconds": wall, "evaluator_seconds": seconds,
          "before_seconds": before, "new_seconds": new,
          "new_fraction_of_wall": new / wall,
          "all_fraction_of_wall": (before + new) / wall}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--run", default=None, help="a finished run's workdir")
  args = parser.parse_args()
  print(f"load before: {os.getloadavg()}")
  times = step_seconds(args.rounds, args.steps)
  for name, t in times.items():
    print(f"train step {name}: {t * 1e3:.1f} ms")
  ratio = times["with online probe"] / times["without"]
  print(f"ratio with/without online probe: {ratio:.3f}")
  print(f"load after: {os.getloadavg()}")
  if args.run:
    print(json.dumps(run_overhead(args.run), indent=2))


if __name__ == "__main__":
  main()
