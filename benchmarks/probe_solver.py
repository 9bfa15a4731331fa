"""The linear probe's L-BFGS fit with features as rows against as columns.

    python benchmarks/probe_solver.py                  # 20,000 x 512, 10 classes
    python benchmarks/probe_solver.py --rows 60000 --dim 1024

`ssljax.probes.linear_probe` minimises the mean cross-entropy plus
½ l2 ‖W‖² with optax's L-BFGS (`ssljax.probes.fit_logistic_regression`),
whose objective reads the features as a (D, N) matrix (the logits as
(C, N)); the "rows" variant below is the same objective on the (N, D)
matrix, the form it had before (logits X W). Both
fits run from the same start on the same synthetic problem (a linear
teacher plus noise, so L-BFGS takes its iterations), interleaved for
--rounds rounds in one process; the script prints the median seconds per
fit, the iterations, the ratio and the largest difference of the fitted W.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from ssljax import probes  # noqa: E402


def _rows_objective(params, x_NxD, y, l2):
  logits = x_NxD @ params["w"] + params["b"]
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
  return ce + 0.5 * l2 * jnp.sum(params["w"] ** 2)


@jax.jit
def _fit_rows(params, x, y, l2, max_iter, tol):
  """The fit of `ssljax.probes.linear_probe` on the (N, D) features: the
  library's solver loop (`ssljax.probes.lbfgs_minimize`) on the rows
  objective."""
  return probes.lbfgs_minimize(lambda p: _rows_objective(p, x, y, l2),
                               params, max_iter, tol)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", type=int, default=20000)
  parser.add_argument("--dim", type=int, default=512)
  parser.add_argument("--classes", type=int, default=10)
  parser.add_argument("--max_iter", type=int, default=100)
  parser.add_argument("--l2", type=float, default=1e-4)
  parser.add_argument("--rounds", type=int, default=3)
  args = parser.parse_args()

  rng = np.random.default_rng(0)
  teacher = rng.standard_normal((args.dim, args.classes)).astype(np.float32)
  x = rng.standard_normal((args.rows, args.dim)).astype(np.float32)
  noise = 3 * rng.standard_normal((args.rows, args.classes))
  y = np.argmax(x @ teacher + noise, 1).astype(np.int32)
  x, y = jnp.asarray(x), jnp.asarray(y)
  start = {"w": jnp.zeros((args.dim, args.classes), jnp.float32),
           "b": jnp.zeros((args.classes,), jnp.float32)}
  rows_args = (x, y, jnp.float32(args.l2), args.max_iter, jnp.float32(1e-5))

  def columns(start):  # the library's solver, as linear_probe calls it
    out = probes.fit_logistic_regression(x, y, l2=args.l2, init=start,
                                           max_iter=args.max_iter, tol=1e-5)
    return {"w": out["w"], "b": out["b"]}, out["iterations"]

  def rows(start):
    return _fit_rows(start, *rows_args)

  fits = {"rows (N, D)": rows, "columns (D, N), ssljax": columns}
  results, seconds = {}, {name: [] for name in fits}
  for name, fit in fits.items():  # compile
    results[name] = jax.block_until_ready(fit(start))
  for _ in range(args.rounds):
    for name, fit in fits.items():
      t = time.perf_counter()
      jax.block_until_ready(fit(start))
      seconds[name].append(time.perf_counter() - t)
  print(f"{args.rows} x {args.dim} features, {args.classes} classes, l2 "
        f"{args.l2}, median of {args.rounds} rounds, load "
        f"{' '.join(f'{v:.1f}' for v in __import__('os').getloadavg())}")
  base = statistics.median(seconds["rows (N, D)"])
  for name in fits:
    med = statistics.median(seconds[name])
    iters = int(results[name][1])
    print(f"  {name:24s} {med:7.3f} s/fit  {iters:4d} iterations  "
          f"{1e3 * med / max(iters, 1):6.2f} ms/iteration  speed x{base / med:.2f}")
  w_rows, w_cols = (np.asarray(results[n][0]["w"]) for n in fits)
  print(f"  largest |W_rows - W_columns| {np.abs(w_rows - w_cols).max():.2e} "
        f"(largest |W| {np.abs(w_rows).max():.2e})")


if __name__ == "__main__":
  main()
