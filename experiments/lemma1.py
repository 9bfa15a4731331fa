"""Balestriero & LeCun 2024 Fig. 2, Thm 2: closed form vs optimiser vs trace.

Paper: Balestriero & LeCun 2024, "The Birth of Self Supervised Learning: A
Supervised Theory".

    .venv/bin/python experiments/lemma1.py --out runs/lemma1 [--fast]

For random features f (N, K) and C = 10 one-hot targets y, compares over
N ∈ {64, 256, 1024}, K ∈ {8, 32, 128}, ridge ∈ {0, 1e-3, 1e-1}:
  * "optimiser": min of eq. (1) over (W, b) found by L-BFGS (SciPy, jax
    gradients, float64);
  * "closed": eq. (1) at `ridge_head` (closed form);
  * "trace": `lemma1_objective` (Lemma 1, SVD of the centred features);
and, for ridge > 0, Theorem 2 (`sigma_gradient`) against autodiff of the
true minimum with respect to the singular values. Writes lemma1.png and
lemma1.json (every plotted number and the max relative gaps).
"""

from __future__ import annotations

import itertools
import sys

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import scipy.optimize  # noqa: E402

import _common  # noqa: E402
from ssljax.theory import supervised  # noqa: E402


def _lbfgs_min(f, y, ridge):
  k, c = f.shape[1], y.shape[1]

  def loss(t):
    return supervised.ridge_head_loss(f, y, t[:k * c].reshape(k, c),
                                      t[k * c:], ridge)

  vg = jax.jit(jax.value_and_grad(loss))
  res = scipy.optimize.minimize(
      lambda t: tuple(np.asarray(v, np.float64) for v in vg(jnp.asarray(t))),
      np.zeros(k * c + c), jac=True, method="L-BFGS-B",
      options={"maxiter": 20000, "ftol": 1e-15, "gtol": 1e-12, "maxcor": 30})
  return float(res.fun)


def _theorem2_gap(f, y, ridge):
  mean = f.mean(0)
  v, s, ut = jnp.linalg.svd(f - mean, full_matrices=False)

  def true_min(sig):
    ff = mean + (v * sig) @ ut
    w, b = supervised.ridge_head(ff, y, ridge)
    return supervised.ridge_head_loss(ff, y, w, b, ridge)

  auto = jax.grad(true_min)(s)
  closed = supervised.sigma_gradient(f, y @ y.T, ridge)
  return float(jnp.max(jnp.abs(auto - closed)) / jnp.max(jnp.abs(auto)))


def run(cfg) -> dict:
  """Closed form, trace objective and optimiser over a grid of (N, K, ridge).

  Args:
    cfg: namespace with `fast` (bool): the smaller grid.

  Returns:
    {"rows": one dict per (N, K, ridge), "summary": the largest gaps}.
  """
  sizes_n = (64,) if cfg.fast else (64, 256, 1024)
  sizes_k = (8, 32) if cfg.fast else (8, 32, 128)
  ridges = (0.0, 1e-1) if cfg.fast else (0.0, 1e-3, 1e-1)
  c = 10
  rows = []
  for n, k, ridge in itertools.product(sizes_n, sizes_k, ridges):
    rng = np.random.default_rng(n * 1000 + k)
    labels = rng.integers(0, c, n)
    y = jnp.asarray(np.eye(c)[labels])
    # Features weakly tied to the labels, with an offset (centring matters).
    f = jnp.asarray(rng.standard_normal((n, k)) + 2.0
                    + 0.5 * rng.standard_normal((c, k))[labels])
    w, b = supervised.ridge_head(f, y, ridge)
    closed = float(supervised.ridge_head_loss(f, y, w, b, ridge))
    trace = float(supervised.lemma1_objective(f, y @ y.T, ridge))
    opt = _lbfgs_min(f, y, ridge)
    scale = float(jnp.sum((y - y.mean(0))**2)) / n  # Tr(HGH)/N
    row = {"n": n, "k": k, "ridge": ridge, "closed": closed, "trace": trace,
           "optimiser": opt,
           # Relative to the constant Tr(HGH)/N (the value at f = const):
           # the minimum itself is 0 when K >= N (interpolation).
           "rel_gap_trace": abs(trace - closed) / scale,
           "rel_gap_optimiser": abs(opt - closed) / scale,
           "theorem2_rel_gap": (_theorem2_gap(f, y, ridge) if ridge > 0
                                else None)}
    rows.append(row)
    print(f"N={n:5d} K={k:4d} ridge={ridge:g}: closed {closed:.10f} trace"
          f" {trace:.10f} optimiser {opt:.10f}  thm2 gap"
          f" {row['theorem2_rel_gap']}")

  summary = {
      "max_rel_gap_trace": max(r["rel_gap_trace"] for r in rows),
      "max_rel_gap_optimiser": max(r["rel_gap_optimiser"] for r in rows),
      "max_theorem2_rel_gap": max(r["theorem2_rel_gap"] for r in rows
                                  if r["theorem2_rel_gap"] is not None),
  }
  print(summary)
  return {"rows": rows, "summary": summary}


def plot(result: dict, out) -> None:
  """Writes lemma1.png under `out` from the result of `run`."""
  rows = result["rows"]
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  closed = np.array([r["closed"] for r in rows])
  axes[0].plot(closed, [r["optimiser"] for r in rows], "o", label="L-BFGS min")
  axes[0].plot(closed, [r["trace"] for r in rows], "x", label="trace (Lemma 1)")
  lims = [closed.min() * 0.95, closed.max() * 1.05]
  axes[0].plot(lims, lims, "k:", lw=1)
  axes[0].set_xlabel("closed form eq. (1) at ridge_head")
  axes[0].set_ylabel("value")
  axes[0].legend()
  axes[0].set_title("Balestriero & LeCun 2024 Lemma 1 (all N, K, ridge)")
  labels = [f"{r['n']},{r['k']},{r['ridge']:g}" for r in rows]
  x = np.arange(len(rows))
  floor = 1e-17
  axes[1].semilogy(x, [max(r["rel_gap_trace"], floor) for r in rows], "x",
                   label="|trace − closed| / (Tr(HGH)/N)")
  axes[1].semilogy(x, [max(r["rel_gap_optimiser"], floor) for r in rows], "o",
                   label="|L-BFGS − closed| / (Tr(HGH)/N)")
  axes[1].semilogy(x, [max(r["theorem2_rel_gap"] or np.nan, floor)
                       for r in rows], "s", label="Thm 2 vs autodiff")
  axes[1].set_xticks(x, labels, rotation=90, fontsize=6)
  axes[1].set_xlabel("N, K, ridge")
  axes[1].legend(fontsize=7)
  _common.save_figure(fig, out, "lemma1.png")


def main(argv=None):
  return _common.run_experiment(__doc__, "lemma1", run, plot, argv)


if __name__ == "__main__":
  main(sys.argv[1:])
