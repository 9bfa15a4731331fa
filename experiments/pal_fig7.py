"""002 Fig. 7: contrastive (+1/−1/0) vs non-contrastive (1/0) graphs, active queries.

Same setting as Fig. 3 (captcha oracle, Algorithm 3) with noise 0 and
N = 300: the target graph is the completed signed graph of 002 eq. (15)
or its 1/0 version.

  .venv/bin/python experiments/pal_fig7.py --out runs/pal_fig7 [--trials 100]
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
import _pal  # noqa: E402

KINDS = ("active_contrastive", "active_non_contrastive")


def run(args) -> dict:
  trials = 2 if args.fast else args.trials
  cfg = dict(dataset="circles", n=300, n_test=1000, noise=0.0, sigma=0.2,
             ridge=1e-3, steps=80, per_step=10)
  if args.fast:
    cfg.update(n=40, n_test=100, steps=6)
  t0 = time.time()
  curves = _pal.query_curves(KINDS, trials=trials, **cfg)
  queries = np.arange(cfg["steps"]) * cfg["per_step"]
  points = [0, 100, 200, 400, 790] if not args.fast else [0, 20, 50]
  result = {"config": cfg, "trials": trials, "queries": queries,
            "curves": curves, "seconds": time.time() - t0,
            "at": {k: {r: _pal.at(queries, curves[k][r]["mean"], points)
                       for r in ("oracle", "train")} for k in KINDS}}
  _common.save_json(args.out, "pal_fig7.json", result)
  fig, axes = _common.plt.subplots(1, 2, figsize=(10, 4))
  for ax, readout in zip(axes, ("oracle", "train")):
    for k in KINDS:
      _pal.plot_band(ax, queries, curves[k][readout], k)
    ax.set(xlabel="queries", ylabel="test error",
           title=f"readout fitted on {readout}")
    ax.legend()
  _common.save_figure(fig, args.out, "pal_fig7.png")
  return result


if __name__ == "__main__":
  res = run(_pal.parse_args(__doc__.splitlines()[0]))
  for k, v in res["at"].items():
    print(k, v)
