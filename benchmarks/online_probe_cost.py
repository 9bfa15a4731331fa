"""What the online probe's inference-mode features cost the main job's step.

    python benchmarks/online_probe_cost.py [--rounds 5] [--steps 5]

Builds the main job's train step (configs/vicreg.py, batch 256 x 2 views of
28 x 28 x 1, `ssljax.train.train_step`) twice: the online probe on the
training forward pass's h (``features="train_forward"``, free) and on the
evaluated representation (``"inference"``, the default: one more forward
pass of one view). Prints XLA's FLOP count of each compiled step
(``cost_analysis()["flops"]``, independent of the machine's load) and the
median seconds per step over ``--rounds`` interleaved rounds of ``--steps``
steps each (the load averages are printed with them: on a shared machine
only the ratio means anything).
"""

import argparse
import functools
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from configs import vicreg  # noqa: E402
from ssljax import data, methods, online_probe, train, train_state  # noqa: E402


def main(argv=None) -> int:
  """Compiles both steps, prints FLOPs and interleaved timings."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--steps", type=int, default=5)
  args = parser.parse_args(argv)
  config = vicreg.get_config()
  method, tx = methods.build(config), optax.adamw(1e-3)
  probe_tx = online_probe.create_optimizer(config)
  shapes = train.batch_spec(config, (28, 28, 1))
  spec = data.view_spec(config.views)
  state = train_state.create_train_state(method, tx, jax.random.key(0),
                                         shapes, num_classes=10,
                                         probe_tx=probe_tx)
  rng = np.random.default_rng(0)
  batch = {"images": jnp.asarray(rng.integers(0, 256, (256, 28, 28, 1),
                                              dtype=np.uint8)),
           "labels": jnp.asarray(rng.integers(0, 10, 256), jnp.int32)}
  compiled = {}
  for features in online_probe.FEATURES:
    step = jax.jit(functools.partial(train.train_step, spec=spec,
                                     probe_tx=probe_tx,
                                     probe_features=features))
    compiled[features] = step.lower(state, batch).compile()
    cost = compiled[features].cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    print(f"{features}: {cost['flops'] / 1e9:.2f} GFLOP per step", flush=True)
  print(f"load before: {os.getloadavg()[0]:.1f}", flush=True)
  times = {f: [] for f in compiled}
  for _ in range(args.rounds):
    for features, step in compiled.items():
      current = state
      start = time.perf_counter()
      for _ in range(args.steps):
        current, _ = step(current, batch)
      jax.block_until_ready(current.params)
      times[features].append((time.perf_counter() - start) / args.steps)
  for features, seconds in times.items():
    print(f"{features}: median {np.median(seconds):.3f} s/step over "
          f"{args.rounds} rounds", flush=True)
  print(f"load after: {os.getloadavg()[0]:.1f}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
