"""Train-step time of LeJEPA next to VICReg, and the SIGReg evaluator's cost.

    python benchmarks/lejepa_step.py --rounds 3 --steps 5

Builds the jitted train step (`ssljax.train.sharded_train_step`) of each
config on random Fashion-MNIST-shaped images (batch 256, each config's own
views), and times ``--steps`` steps per round, the configs alternating
round by round so that a change of the machine's load hits all of them;
prints the median seconds per step and the ratio to VICReg. Then times the
SIGReg evaluator's statistic (`ssljax.evaluators.sigreg.sigreg_of_views`) on
(2, 512, K) embeddings with 256 directions, after its compile. Speed is
machine- and load-dependent: compare numbers from one invocation only.
"""

import argparse
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from configs import lejepa, vicreg  # noqa: E402
from ssljax import (losses, methods, optimizers, train,  # noqa: E402
                    train_state)
from ssljax.evaluators.sigreg import sigreg_of_views  # noqa: E402

CONFIGS = {"vicreg": lambda: vicreg.get_config(),
           "lejepa:cnn": lambda: lejepa.get_config("cnn"),
           "lejepa (ViT-Tiny/7)": lambda: lejepa.get_config()}


def _step_fn(config, mesh):
  """(jitted step, initial state, batch) of ``config`` on ``mesh``."""
  config.dataset.channels = 1
  shapes = train.batch_spec(config, (28, 28, 1))
  method = methods.build(config)
  lr_fn = optimizers.create_learning_rate_fn(config.optim, config.batch_size,
                                             100, 1000)
  tx = optimizers.create_optimizer(config.optim, lr_fn, total_steps=1000)
  state = jax.device_put(train_state.create_train_state(
      method, tx, jax.random.key(0), shapes), NamedSharding(mesh, P()))
  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, (config.batch_size, 28, 28, 1), np.uint8)
  batch = {"images": jax.device_put(images, NamedSharding(mesh, P("data")))}
  step = train.sharded_train_step(config, mesh, total_steps=1000,
                                  steps_per_epoch=100)
  return step, state, batch


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--configs", nargs="*", default=list(CONFIGS))
  args = parser.parse_args()
  mesh = train.make_mesh()
  built, times = {}, {name: [] for name in args.configs}
  for name in args.configs:
    step, state, batch = _step_fn(CONFIGS[name](), mesh)
    state, _ = step(state, batch)  # compile
    jax.block_until_ready(state)
    built[name] = [step, state, batch]
  for _ in range(args.rounds):
    for name in args.configs:
      step, state, batch = built[name]
      start = time.perf_counter()
      for _ in range(args.steps):
        state, metrics = step(state, batch)
      jax.block_until_ready(metrics)
      times[name].append((time.perf_counter() - start) / args.steps)
      built[name][1] = state
  base = statistics.median(times[args.configs[0]])
  for name in args.configs:
    med = statistics.median(times[name])
    print(f"{name:22s} {med:.3f} s/step  (x{med / base:.2f} of "
          f"{args.configs[0]}; rounds: "
          + ", ".join(f"{t:.3f}" for t in times[name]) + ")")
  for k in (64, 512):
    z = jax.random.normal(jax.random.key(1), (2, 512, k))
    a = losses.sigreg_directions(jax.random.key(2), k, 256)
    jax.block_until_ready(sigreg_of_views(z, a))
    runs = []
    for _ in range(20):
      start = time.perf_counter()
      jax.block_until_ready(sigreg_of_views(z, a))
      runs.append(time.perf_counter() - start)
    print(f"sigreg evaluator statistic, z (2, 512, {k}), M = 256: "
          f"{1e3 * statistics.median(runs):.1f} ms (median of 20)")


if __name__ == "__main__":
  main()
