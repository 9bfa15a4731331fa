"""Contrastive vs non-contrastive graphs (Cabannes et al. 2023, arXiv 2303.15256, Fig. 7).

Set-up `paper_notebook` (the only one, the default), the authors' released
set-up: as Fig. 3 (captcha oracle, Algorithm 3, Laplacian kernel σ = 0.2,
λ = 1e-3, 1000 test points, 10 queries per step for 80 steps) with circles
without input noise (noise = 0) and N = 300: the target graph is the
completed signed graph (+1 / −1 / 0, eq. (15) of the paper) or its 1/0
version.

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
SETUPS = {
    "paper_notebook": dict(dataset="circles", n=300, n_test=1000, noise=0.0,
                           sigma=0.2, ridge=1e-3, steps=80, per_step=10),
}


def config(setup: str = "paper_notebook", fast: bool = False,
           trials: int = 100) -> dict:
  """The run configuration of a named set-up (`fast`: tiny sizes, 2 trials)."""
  cfg = _pal.setup_config(SETUPS, setup)
  cfg.update(trials=2 if fast else trials)
  if fast:
    cfg.update(n=40, n_test=100, steps=6)
  return cfg


def run(cfg: dict) -> dict:
  """Mean ± std curves of both graphs over cfg["trials"] seeds."""
  t0 = time.time()
  curve_cfg = {k: v for k, v in cfg.items() if k not in ("setup", "trials")}
  curves = _pal.query_curves(KINDS, trials=cfg["trials"], **curve_cfg)
  queries = np.arange(cfg["steps"]) * cfg["per_step"]
  points = [0, 100, 400, 790] if cfg["steps"] == 80 else list(queries[:4])
  return {"config": cfg, "trials": cfg["trials"], "queries": queries,
          "curves": curves, "seconds": time.time() - t0,
          "table": {k: {r: _pal.table(queries, curves[k][r], points)
                        for r in ("oracle", "train")} for k in KINDS}}


def plot(result: dict, out, name: str = "pal_fig7") -> None:
  """Error vs queries, one panel per readout, to out/name.png."""
  fig, axes = _common.plt.subplots(1, 2, figsize=(10, 4))
  queries, curves = result["queries"], result["curves"]
  for ax, readout in zip(axes, ("oracle", "train")):
    for k in KINDS:
      _pal.plot_band(ax, queries, curves[k][readout], k)
    ax.set(xlabel="queries", ylabel="test error",
           title=f"readout fitted on {readout}")
    ax.legend()
  _common.save_figure(fig, out, f"{name}.png")


def main(argv=None) -> dict:
  return _pal.run_figure(__doc__, "pal_fig7", config, run, plot, argv,
                         setups=tuple(SETUPS))


if __name__ == "__main__":
  res = main()
  for k, v in res["table"].items():
    for r, tab in v.items():
      print(k, r, {int(q): f"{m:.4f} ± {s:.4f}" for q, (m, s) in tab.items()})
