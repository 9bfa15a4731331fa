"""Loss + gradient time of every loss, and the sparse-graph losses at scale.

    python benchmarks/losses.py            # dense table + sparse N = 10^6 run
    python benchmarks/losses.py --sparse_only

Part 1: for every loss in ssljax.losses, the jitted value-and-gradient with
respect to Z at (N, K) = (512, 128) and (4096, 1024), float32, on the V = 2
view graph (graph forms) or two views of N/2 rows (two-view forms). Times are
medians of repeated calls after compilation, and each row is also printed as a
ratio to the VICReg two-view time measured in the same run.

Part 2: `vicreg` and `spectral_contrastive` with a sparse BCOO graph over
N = 10^6 rows, K = 64, ~10^7 stored edges (a random symmetric edge list), each
in a fresh subprocess so its peak resident memory (ru_maxrss) is its own.
Targets from the issue: < 10 s per loss + gradient and < 8 GiB peak.
"""

import argparse
import json
import resource
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse as jsparse

from ssljax import graphs, losses

GRAPH_LOSSES = {
    "vicreg": losses.vicreg,
    "spectral_contrastive": losses.spectral_contrastive,
    "simclr": losses.simclr,
    "barlow_twins": losses.barlow_twins,
}
TWO_VIEW_LOSSES = {
    "vicreg_two_view": losses.vicreg_two_view,
    "spectral_contrastive_two_view": losses.spectral_contrastive_two_view,
    "simclr_two_view": losses.simclr_two_view,
    "barlow_twins_two_view": losses.barlow_twins_two_view,
    "wmse_two_view": losses.wmse_two_view,
    "frossl (2 views)": lambda z1, z2: losses.frossl(jnp.stack([z1, z2])),
}


def _median_seconds(fn, *args, repeats: int = 5) -> float:
  jax.block_until_ready(fn(*args))  # compile
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def dense_table() -> list[dict]:
  rows = []
  for n, k in ((512, 128), (4096, 1024)):
    z = jax.random.normal(jax.random.key(0), (n, k), jnp.float32)
    g = graphs.views_graph(n // 2, 2)
    z1, z2 = z[: n // 2], z[n // 2:]
    for name, fn in GRAPH_LOSSES.items():
      step = jax.jit(jax.value_and_grad(lambda z, g, fn=fn: fn(z, g)))
      rows.append({"loss": name, "N": n, "K": k,
                   "seconds": _median_seconds(step, z, g)})
    for name, fn in TWO_VIEW_LOSSES.items():
      step = jax.jit(jax.value_and_grad(lambda a, b, fn=fn: fn(a, b),
                                        argnums=(0, 1)))
      rows.append({"loss": name, "N": n, "K": k,
                   "seconds": _median_seconds(step, z1, z2)})
  return rows


def random_sparse_graph(n: int, num_edges: int, seed: int = 0):
  """Symmetric BCOO with about num_edges stored entries: num_edges/2 random
  pairs (i, j), i != j, each stored in both orders, weight 1; repeated pairs
  are merged on the host so the graph is flagged ``unique_indices``."""
  rng = np.random.default_rng(seed)
  half = num_edges // 2
  i = rng.integers(0, n, half, dtype=np.int64)
  j = (i + rng.integers(1, n, half, dtype=np.int64)) % n  # j != i
  keys = np.unique(np.concatenate([i * n + j, j * n + i]))  # sorted, unique
  indices = np.stack([keys // n, keys % n], axis=1).astype(np.int32)
  data = np.ones(len(keys), np.float32)
  return jsparse.BCOO((data, indices), shape=(n, n), indices_sorted=True,
                      unique_indices=True)


def sparse_one(name: str, n: int, k: int, num_edges: int) -> dict:
  """Runs in its own process: builds G, times validation and loss + grad."""
  g = random_sparse_graph(n, num_edges)
  z = jax.random.normal(jax.random.key(1), (n, k), jnp.float32) / np.sqrt(k)
  fn = GRAPH_LOSSES[name]
  start = time.perf_counter()
  value = fn(z, g)  # public call: validates G (symmetry, finiteness) too
  jax.block_until_ready(value)
  checked_seconds = time.perf_counter() - start
  step = jax.jit(jax.value_and_grad(lambda z, g: fn(z, g)))
  start = time.perf_counter()
  jax.block_until_ready(step(z, g))
  first_seconds = time.perf_counter() - start
  seconds = _median_seconds(step, z, g, repeats=3)
  peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
  return {"loss": name, "N": n, "K": k, "edges": num_edges,
          "seconds": seconds, "first_call_seconds": first_seconds,
          "validated_call_seconds": checked_seconds, "peak_rss_gib": peak_gib,
          "value": float(value)}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sparse_only", action="store_true")
  parser.add_argument("--sparse_one", help=argparse.SUPPRESS)
  parser.add_argument("--n", type=int, default=10**6)
  parser.add_argument("--k", type=int, default=64)
  parser.add_argument("--edges", type=int, default=10**7)
  args = parser.parse_args()
  if args.sparse_one:
    print(json.dumps(sparse_one(args.sparse_one, args.n, args.k, args.edges)))
    return

  print(f"devices: {jax.devices()}")
  if not args.sparse_only:
    rows = dense_table()
    base = {r["N"]: r["seconds"] for r in rows if r["loss"] == "vicreg_two_view"}
    print(f"\n{'loss':32s} {'N':>5s} {'K':>5s} {'ms':>9s} {'x vicreg_two_view':>18s}")
    for r in rows:
      print(f"{r['loss']:32s} {r['N']:5d} {r['K']:5d} {1e3 * r['seconds']:9.2f}"
            f" {r['seconds'] / base[r['N']]:18.2f}")

  print(f"\nsparse G: N = {args.n}, K = {args.k}, {args.edges} stored edges")
  print(f"{'loss':22s} {'s/step':>8s} {'1st call s':>10s} {'validated s':>11s}"
        f" {'peak GiB':>9s}")
  for name in ("vicreg", "spectral_contrastive"):
    proc = subprocess.run(
        [sys.executable, __file__, "--sparse_one", name, f"--n={args.n}",
         f"--k={args.k}", f"--edges={args.edges}"],
        capture_output=True, text=True, check=True)
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{name:22s} {r['seconds']:8.2f} {r['first_call_seconds']:10.2f}"
          f" {r['validated_call_seconds']:11.2f} {r['peak_rss_gib']:9.2f}")


if __name__ == "__main__":
  main()
