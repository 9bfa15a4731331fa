"""Where the default CNN VICReg train step spends its time, per XLA op.

    python benchmarks/profile_step.py                 # the model as it is
    python benchmarks/profile_step.py --reshape_pool  # avg_pool as reshape-mean

Traces a few compiled steps with ``jax.profiler.trace`` (a perfetto trace
under --out), sums the duration of every XLA op (fusion / thunk) and prints
the largest ones with the ops inside each fusion, then the shares of op
kinds (convolution, dot, reduce_window, reduce, transpose/copy, the rest).
Op durations overlap when XLA runs ops in parallel, so compare shares.
"""

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_step as bench  # noqa: E402  (sets sys.path for configs/)

import jax  # noqa: E402
import numpy as np  # noqa: E402

KINDS = ("convolution", "dot", "reduce-window", "reduce", "transpose", "copy")


def _op_kinds(hlo: str, name: str) -> collections.Counter:
  """HLO opcodes inside the computation that op ``name`` calls (or its own)."""
  line = re.search(rf"^\s*(?:ROOT )?%?{re.escape(name)} = \S+ ([\w-]+)\(.*$",
                   hlo, re.M)
  if not line:
    return collections.Counter()
  called = re.search(r"calls=%?([\w.\-]+)", line.group(0))
  if not called:
    return collections.Counter([line.group(1)])
  body = re.search(rf"^%?{re.escape(called.group(1))} .*?\{{\n(.*?)\n\}}", hlo,
                   re.M | re.S)
  return collections.Counter(re.findall(r"= \S+ ([a-z][\w-]*)\(",
                                        body.group(1) if body else ""))


def _kind(ops: collections.Counter) -> str:
  return next((k for k in KINDS if ops.get(k)), "elementwise/other")


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--reshape_pool", action="store_true")
  parser.add_argument("--conv_chunk", type=int, default=None,
                      help="SmallCNN.conv_chunk (default: the model's)")
  parser.add_argument("--steps", type=int, default=3)
  parser.add_argument("--out", default="/tmp/ssljax_profile")
  args = parser.parse_args()
  config = bench._config("vicreg", "cnn", "float32")
  if args.conv_chunk is not None:
    config.model.encoder_kwargs.conv_chunk = args.conv_chunk
  views = np.random.default_rng(0).random((2, 256, 28, 28, 1), np.float32)
  make = bench.jax_step_reshape_pool if args.reshape_pool else bench.jax_step
  run, _ = make(config, views)
  hlo = run.compiled.as_text()
  run()
  with jax.profiler.trace(args.out, create_perfetto_trace=True):
    for _ in range(args.steps):
      run()
  path = sorted(glob.glob(f"{args.out}/**/perfetto_trace.json.gz",
                          recursive=True), key=os.path.getmtime)[-1]
  events = json.load(gzip.open(path))
  events = events["traceEvents"] if isinstance(events, dict) else events
  per_op = collections.Counter()
  for e in events:  # "$..." are Python frames, ThunkExecutor the whole step
    if e.get("ph") == "X" and not e["name"].startswith(("$", "ThunkExecutor")):
      per_op[e["name"]] += e.get("dur", 0) / 1e3 / args.steps  # ms per step
  total = sum(per_op.values())
  print(f"{path}\nsum of op times {total:.0f} ms/step")
  kinds = collections.Counter()
  for name, ms in per_op.items():
    kinds[_kind(_op_kinds(hlo, name))] += ms
  for name, ms in per_op.most_common(20):
    ops = {k: v for k, v in _op_kinds(hlo, name).items()
           if k not in ("parameter", "constant", "bitcast", "broadcast")}
    print(f"{ms:8.1f} ms {100 * ms / total:5.1f}%  {name:28s} {ops}")
  for kind, ms in kinds.most_common():
    print(f"{kind:20s} {ms:8.1f} ms {100 * ms / total:5.1f}%")


if __name__ == "__main__":
  main()
