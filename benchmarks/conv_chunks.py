"""SmallCNN's train step with its convolutions on chunks of the batch.

    python benchmarks/conv_chunks.py                 # the default step, 5 rounds
    python benchmarks/conv_chunks.py --rounds 3 --method simclr
    python benchmarks/conv_chunks.py --chunks none 0 32,32,32,0 64,64,64,0

In training, `ssljax.models.SmallCNN` runs each convolution on consecutive
chunks of ``conv_chunk`` samples (the same numbers up to the float rounding
of the kernel gradient's sum). Each variant below is the train step of the
default config (`benchmarks/train_step.py`'s ``jax_step``: views already
on the device, AdamW) with a different ``conv_chunk`` per stage:

* ``none``: the model's default (on one CPU device: 32 samples for the
  stages with at least 7x7 output maps, the whole batch for the 3x3 one);
* ``0``: every convolution on the whole batch (the form before the chunks);
* ``a,b,c,d``: one value per stage (``conv_chunk`` takes a sequence).

All variants run interleaved in one process, ``--steps`` steps each per
round; the table gives the median ms per step over ``--rounds`` rounds and
the speed against the first variant. Only the ratios are meant to be
compared; ``uptime`` is printed before and after.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_step as bench  # noqa: E402  (sets sys.path for configs/)

import numpy as np  # noqa: E402


def _parse(arg: str):
  """"none" -> None, "32" -> 32, "32,32,32,0" -> (32, 32, 32, 0)."""
  if arg == "none":
    return None
  return tuple(int(a) for a in arg.split(",")) if "," in arg else int(arg)


def _step(method: str, chunk, views):
  """One step of the default ``method`` config with ``conv_chunk=chunk``."""
  config = bench._config(method, "cnn", "float32")
  config.model.encoder_kwargs.conv_chunk = chunk
  return bench.jax_step(config, views)[0]


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--method", default="vicreg", choices=("vicreg", "simclr"))
  parser.add_argument("--chunks", nargs="+",
                      default=["0", "none", "32", "16,16,16,0", "64,64,64,0"])
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--steps", type=int, default=5)
  args = parser.parse_args()
  print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
  views = np.random.default_rng(0).random((2, 256, 28, 28, 1), np.float32)
  runs = {arg: _step(args.method, _parse(arg), views) for arg in args.chunks}
  for run in runs.values():
    run()
  times = {arg: [] for arg in runs}
  for _ in range(args.rounds):
    for arg, run in runs.items():
      start = time.perf_counter()
      for _ in range(args.steps):
        run()
      times[arg].append(1e3 * (time.perf_counter() - start) / args.steps)
  first = statistics.median(times[args.chunks[0]])
  print(f"| conv_chunk ({args.method}) | ms/step | speed vs {args.chunks[0]} |")
  print("|---|---:|---:|")
  for arg, ms in times.items():
    print(f"| {arg} | {statistics.median(ms):.1f} | "
          f"{first / statistics.median(ms):.2f} |")
  print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
  main()
