"""002 Fig. 9: test error and connected components vs missing entries of G_sup.

N = 100 circles points (noise 0.1, σ 0.2, λ 1e-3 as Fig. 3); a fraction p
of the off-diagonal pairs of the supervised graph is dropped (set to 0,
"unknown"); the diagonal is kept, so p = 1 gives G = I. Both the
contrastive (2·1{y_i=y_j} − 1) and non-contrastive (1{y_i=y_j}) graphs;
components are those of the positive entries.

  .venv/bin/python experiments/pal_fig9.py --out runs/pal_fig9 [--trials 100]
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
import _pal  # noqa: E402

from ssljax import pal  # noqa: E402

P_GRID = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 1.0)
VARIANTS = ("contrastive", "non_contrastive")


def _trial(seed: int, cfg: dict, grid) -> dict:
  rng = np.random.default_rng(seed)
  x, y, xt, yt = _pal.make_data(cfg["dataset"], rng, cfg["n"], cfg["n_test"],
                                cfg["noise"])
  kp = pal.KernelPAL(x, xt, sigma=cfg["sigma"], ridge=cfg["ridge"], k=5)
  same = y[:, None] == y[None, :]
  u = np.triu(rng.random(same.shape), 1)
  u = u + u.T  # one uniform number per unordered pair
  out = {f"{v}_{r}": [] for v in VARIANTS for r in ("oracle", "train")}
  out["components"] = []
  for p in grid:
    keep = (u >= p) | np.eye(cfg["n"], dtype=bool)  # drop a fraction p
    for v in VARIANTS:
      g = (2.0 * same - 1.0) if v == "contrastive" else same.astype(float)
      err = kp.errors(np.where(keep, g, 0.0), y, yt, _pal.NUM_CLASSES)
      for r in ("oracle", "train"):
        out[f"{v}_{r}"].append(err[r])
    out["components"].append(pal.connected_components(keep & same))
  return out


def run(args, dataset: str = "circles", name: str = "pal_fig9") -> dict:
  trials = 2 if args.fast else args.trials
  cfg = dict(dataset=dataset, n=100, n_test=1000, noise=0.1, sigma=0.2,
             ridge=1e-3)
  if dataset == "mixture":
    cfg.update(noise=0.3, sigma=0.5)
  grid = P_GRID if not args.fast else (0.5, 0.9, 1.0)
  if args.fast:
    cfg.update(n=40, n_test=100)
  t0 = time.time()
  runs = [_trial(s, cfg, grid) for s in range(trials)]
  curves = {k: _pal.mean_std([r[k] for r in runs]) for k in runs[0]}
  result = {"config": cfg, "trials": trials, "missing_fraction": grid,
            "curves": curves, "seconds": time.time() - t0}
  _common.save_json(args.out, f"{name}.json", result)
  fig, ax = _common.plt.subplots(figsize=(6, 4))
  for v in VARIANTS:
    _pal.plot_band(ax, grid, curves[f"{v}_oracle"], f"error, {v}")
  ax.set(xlabel="fraction of missing entries", ylabel="test error")
  ax2 = ax.twinx()
  ax2.plot(grid, curves["components"]["mean"], "r--", label="components")
  ax2.set_ylabel("connected components", color="r")
  ax.legend(loc="upper left")
  _common.save_figure(fig, args.out, f"{name}.png")
  return result


if __name__ == "__main__":
  res = run(_pal.parse_args(__doc__.splitlines()[0]))
  c = res["curves"]
  for i, p in enumerate(res["missing_fraction"]):
    print(p, {k: round(float(v["mean"][i]), 4) for k, v in c.items()})
