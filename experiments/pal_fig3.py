"""Active vs passive queries (Cabannes et al. 2023, arXiv 2303.15256, Fig. 3), kernel PAL.

Set-up `paper_notebook` (the only one, the default), the authors' released
set-up: circles data (4 rings) with input noise 0.1, Laplacian kernel
σ = 0.2, λ = 1e-3, N = 150, 1000 test points, 10 queries per step for 80
steps, 4 initially known points (first of each class, known to be of
distinct classes), contrastive graph (+1 / −1 / 0). Curves: "active"
(Algorithm 3 with transitive completion), "passive" (random pairs, only
the answered entries: the paper's baseline), "passive_completed" (random
pairs + completion, extra).
Error = 1 − accuracy of a least-squares readout without bias on the 5
kernel features, fitted on the test set ("oracle", the authors' choice) or
on the training labels ("train"). One difference from the authors' run:
the noisy test set is drawn per trial (theirs once for all trials).

  .venv/bin/python experiments/pal_fig3.py --out runs/pal_fig3 [--trials 100]
  .venv/bin/python experiments/pal_fig3.py --out /tmp/f3 --fast
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # small eighs: 1 thread

import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
import _pal  # noqa: E402

KINDS = ("active", "passive", "passive_completed")
SETUPS = {
    "paper_notebook": dict(dataset="circles", n=150, n_test=1000, noise=0.1,
                           sigma=0.2, ridge=1e-3, steps=80, per_step=10),
}


def config(setup: str = "paper_notebook", fast: bool = False,
           trials: int = 100, dataset: str = "circles") -> dict:
  """The run configuration of a named set-up (`fast`: tiny sizes, 2 trials)."""
  cfg = _pal.setup_config(SETUPS, setup)
  cfg.update(dataset=dataset, trials=2 if fast else trials)
  if dataset == "mixture":
    cfg.update(noise=0.3, sigma=0.5)  # σ not given by the paper: our choice
  if fast:
    cfg.update(n=40, n_test=100, steps=6)
  return cfg


def run(cfg: dict) -> dict:
  """Mean ± std curves of each oracle kind over cfg["trials"] seeds."""
  t0 = time.time()
  curve_cfg = {k: v for k, v in cfg.items() if k not in ("setup", "trials")}
  curves = _pal.query_curves(KINDS, trials=cfg["trials"], **curve_cfg)
  queries = np.arange(cfg["steps"]) * cfg["per_step"]
  points = [0, 200, 400, 790] if cfg["steps"] == 80 else list(queries[:4])
  return {"config": cfg, "trials": cfg["trials"], "queries": queries,
          "curves": curves, "seconds": time.time() - t0,
          "table": {k: {r: _pal.table(queries, curves[k][r], points)
                        for r in ("oracle", "train")} for k in KINDS}}


def plot(result: dict, out, name: str = "pal_fig3") -> None:
  """Error vs queries, one panel per readout, to out/name.png."""
  fig, axes = _common.plt.subplots(1, 2, figsize=(10, 4))
  queries, curves = result["queries"], result["curves"]
  for ax, readout in zip(axes, ("oracle", "train")):
    for k in KINDS:
      _pal.plot_band(ax, queries, curves[k][readout], k)
    ax.set(xlabel="queries (pair answers)", ylabel="test error",
           title=f"{result['config']['dataset']}: readout fitted on"
           f" {readout}")
    ax.legend()
  _common.save_figure(fig, out, f"{name}.png")


def main(argv=None) -> dict:
  return _pal.run_figure(__doc__, "pal_fig3", config, run, plot, argv,
                         setups=tuple(SETUPS))


if __name__ == "__main__":
  res = main()
  for k, v in res["table"].items():
    for r, tab in v.items():
      print(k, r, {int(q): f"{m:.4f} ± {s:.4f}" for q, (m, s) in tab.items()})
