"""Missing entries (Cabannes et al. 2023, arXiv 2303.15256, Fig. 9), kernel PAL.

Test error and number of connected components when a fraction p of the
entries of the supervised graph is unknown (set to 0). One uniform matrix
U per mask: an entry (i < j) is dropped where U_ij < p and mirrored to
(j, i); with `drop_diagonal` the diagonal entry (i, i) is dropped too where
U_ii < p. Components are those of the positive entries that remain.
Error = 1 − accuracy of a least-squares readout without bias on the 5
kernel features, fitted on the test set ("oracle", the authors' readout)
or on the training labels ("train").

Set-ups (`--setup`):

* `paper_notebook` (default), the authors' released set-up: circles
  without input noise (noise = 0), N = 100, 1000 test points, Laplacian
  kernel σ = 0.2, λ = 1e-3, p_grid = linspace(0.5, 1, 20), only the 0/1
  label graph 1{y_i = y_j} (graphs = ("non_contrastive",)), diagonal
  entries dropped too (drop_diagonal = True) and a fresh U for every p
  (mask_per_p = True).
* `ssljax_v1`, our former set-up: noise = 0.1, p_grid = (0.5, 0.6, 0.7,
  0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 1), graphs = both the
  contrastive 2·1{y_i = y_j} − 1 and the 0/1 graph, drop_diagonal = False
  (p = 1 gives G = I) and mask_per_p = False (one U per trial shared by
  all p: nested masks).

  .venv/bin/python experiments/pal_fig9.py --out runs/pal_fig9 [--trials 100]
  .venv/bin/python experiments/pal_fig9.py --out runs/pal_fig9_v1 --setup ssljax_v1
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

P_GRID_V1 = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 1.0)
GRAPHS = ("contrastive", "non_contrastive")
_BASE = dict(dataset="circles", n=100, n_test=1000, sigma=0.2, ridge=1e-3)
SETUPS = {
    "paper_notebook": dict(_BASE, noise=0.0,
                           p_grid=tuple(np.linspace(0.5, 1.0, 20).tolist()),
                           graphs=("non_contrastive",), drop_diagonal=True,
                           mask_per_p=True),
    "ssljax_v1": dict(_BASE, noise=0.1, p_grid=P_GRID_V1, graphs=GRAPHS,
                      drop_diagonal=False, mask_per_p=False),
}
# The fields in which the set-ups differ (documented above, tested).
VARIANT_FIELDS = ("noise", "p_grid", "graphs", "drop_diagonal", "mask_per_p")


def keep_mask(u, p: float, drop_diagonal: bool) -> np.ndarray:
  """Entries of the graph that stay known, from one uniform matrix U.

  Args:
    u: (N, N) float matrix of uniforms in [0, 1) (only i ≤ j is read).
    p: fraction of missing entries, in [0, 1].
    drop_diagonal: also drop (i, i) where U_ii < p (the authors' choice);
      False keeps the whole diagonal.

  Returns:
    (N, N) bool symmetric matrix: False where (i < j) U_ij < p, at (j, i)
    too, and (if drop_diagonal) on the diagonal where U_ii < p.

  Raises:
    ValueError: if u is not square or p is outside [0, 1].

  References:
    Cabannes et al. (2023), arXiv 2303.15256, Fig. 9 and App. C.2.
  """
  u = np.asarray(u, np.float64)
  if u.ndim != 2 or u.shape[0] != u.shape[1]:
    raise ValueError(f"u must be (N, N), got {u.shape}")
  if not 0.0 <= p <= 1.0:
    raise ValueError(f"p must be in [0, 1], got {p!r}")
  drop = np.triu(u < p, 1)
  drop = drop | drop.T
  if drop_diagonal:
    drop |= np.diag(np.diag(u) < p)
  return ~drop


def _graph(same, kind: str) -> np.ndarray:
  return (2.0 * same - 1.0) if kind == "contrastive" else same.astype(float)


def _trial(seed: int, cfg: dict) -> dict:
  rng = np.random.default_rng(seed)
  x, y, xt, yt = _pal.make_data(cfg["dataset"], rng, cfg["n"], cfg["n_test"],
                                cfg["noise"])
  kp = pal.KernelPAL(x, xt, sigma=cfg["sigma"], ridge=cfg["ridge"], k=5)
  same = y[:, None] == y[None, :]
  shape = (cfg["n"], cfg["n"])
  u = rng.random(shape)
  out = {f"{v}_{r}": [] for v in cfg["graphs"] for r in ("oracle", "train")}
  out["components"] = []
  for p in cfg["p_grid"]:
    if cfg["mask_per_p"]:
      u = rng.random(shape)
    keep = keep_mask(u, p, cfg["drop_diagonal"])
    for v in cfg["graphs"]:
      err = kp.errors(np.where(keep, _graph(same, v), 0.0), y, yt,
                      _pal.NUM_CLASSES)
      for r in ("oracle", "train"):
        out[f"{v}_{r}"].append(err[r])
    out["components"].append(pal.connected_components(keep & same))
  return out


def config(setup: str = "paper_notebook", fast: bool = False,
           trials: int = 100, dataset: str = "circles") -> dict:
  """The run configuration of a named set-up (`fast`: tiny sizes, 2 trials)."""
  cfg = _pal.setup_config(SETUPS, setup)
  cfg.update(dataset=dataset, trials=2 if fast else trials)
  if dataset == "mixture":
    cfg.update(noise=0.3, sigma=0.5)  # the data's noise; σ is our choice
  if fast:
    cfg.update(n=40, n_test=100, p_grid=(0.5, 0.9, 1.0))
  return cfg


def run(cfg: dict) -> dict:
  """Mean ± std curves over cfg["trials"] seeds (0, 1, ...)."""
  t0 = time.time()
  runs = [_trial(s, cfg) for s in range(cfg["trials"])]
  curves = {k: _pal.mean_std([r[k] for r in runs]) for k in runs[0]}
  grid = np.asarray(cfg["p_grid"])
  idx = np.unique(np.linspace(0, len(grid) - 1, 4).round().astype(int))
  points = grid[idx]
  return {"config": cfg, "trials": cfg["trials"], "missing_fraction": grid,
          "curves": curves,
          "table": {k: _pal.table(grid, v, points) for k, v in curves.items()},
          "seconds": time.time() - t0}


def plot(result: dict, out, name: str = "pal_fig9") -> None:
  """Error (oracle readout) and components vs p, to out/name.png."""
  fig, ax = _common.plt.subplots(figsize=(6, 4))
  grid, curves, cfg = result["missing_fraction"], result["curves"], (
      result["config"])
  for v in cfg["graphs"]:
    _pal.plot_band(ax, grid, curves[f"{v}_oracle"], f"error, {v}")
  ax.set(xlabel="fraction of missing entries p", ylabel="test error",
         title=f"{cfg['dataset']}, setup {cfg['setup']}")
  ax2 = ax.twinx()
  ax2.plot(grid, curves["components"]["mean"], "r--", label="components")
  ax2.set_ylabel("connected components", color="r")
  ax.legend(loc="upper left")
  _common.save_figure(fig, out, f"{name}.png")


def main(argv=None) -> dict:
  return _pal.run_figure(__doc__, "pal_fig9", config, run, plot, argv,
                         setups=tuple(SETUPS))


if __name__ == "__main__":
  res = main()
  for k, tab in res["table"].items():
    print(k, {f"{p:.3f}": f"{m:.4f} ± {s:.4f}" for p, (m, s) in tab.items()})
