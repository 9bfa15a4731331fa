"""002 Fig. 4: mixing the SSL graph with a few labels (kernel PAL).

200 base circles points (noise 0.1), 2 augmentations each (copies +
0.1·N(0, I₂)), N = 400; G_ssl = augmentation pairs (1 for two views of the
same base point, diagonal included); labels revealed one at a time in a
random order, Ŷ one-hot with zero rows for unrevealed labels; target
T = (1 − α)G_ssl + αŶŶᵀ for α ∈ {0.5, 1e-3, 1e-6}; Laplacian kernel σ = 1,
λ = 1e-3 (so the embedding solves T − λK⁺).

  .venv/bin/python experiments/pal_fig4.py --out runs/pal_fig4 [--trials 100]
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

ALPHAS = (0.5, 1e-3, 1e-6)


def _trial(seed: int, cfg: dict, revealed) -> dict:
  rng = np.random.default_rng(seed)
  xb, yb = _pal.circles_train(rng, cfg["base"], cfg["noise"])
  xt, yt = _pal.circles_test(rng, cfg["n_test"], cfg["noise"])
  views = cfg["views"]
  x = np.repeat(xb, views, axis=0) + cfg["aug"] * rng.standard_normal(
      (cfg["base"] * views, 2))
  y = np.repeat(yb, views)
  grp = np.repeat(np.arange(cfg["base"]), views)
  g_ssl = (grp[:, None] == grp[None, :]).astype(float)
  kp = pal.KernelPAL(x, xt, sigma=cfg["sigma"], ridge=cfg["ridge"], k=5)
  order = rng.permutation(y.shape[0])
  out = {f"{a}_{r}": [] for a in ALPHAS for r in ("oracle", "train")}
  for m in revealed:
    yhat = np.zeros((y.shape[0], _pal.NUM_CLASSES))
    yhat[order[:m], y[order[:m]]] = 1.0
    for a in ALPHAS:
      err = kp.errors((1 - a) * g_ssl + a * yhat @ yhat.T, y, yt,
                      _pal.NUM_CLASSES)
      for r in ("oracle", "train"):
        out[f"{a}_{r}"].append(err[r])
  return out


def run(args) -> dict:
  trials = 2 if args.fast else args.trials
  cfg = dict(base=200, views=2, aug=0.1, n_test=1000, noise=0.1, sigma=1.0,
             ridge=1e-3)
  revealed = list(range(0, 401, 20))
  if args.fast:
    cfg.update(base=30, n_test=100)
    revealed = [0, 10, 60]
  t0 = time.time()
  runs = [_trial(s, cfg, revealed) for s in range(trials)]
  curves = {k: _pal.mean_std([r[k] for r in runs]) for k in runs[0]}
  result = {"config": cfg, "trials": trials, "alphas": ALPHAS,
            "labels_revealed": revealed, "curves": curves,
            "seconds": time.time() - t0}
  _common.save_json(args.out, "pal_fig4.json", result)
  fig, axes = _common.plt.subplots(1, 2, figsize=(10, 4))
  for ax, r in zip(axes, ("oracle", "train")):
    for a in ALPHAS:
      _pal.plot_band(ax, revealed, curves[f"{a}_{r}"], f"α = {a:g}")
    ax.set(xlabel="labels revealed", ylabel="test error",
           title=f"readout fitted on {r}")
    ax.legend()
  _common.save_figure(fig, args.out, "pal_fig4.png")
  return result


if __name__ == "__main__":
  res = run(_pal.parse_args(__doc__.splitlines()[0], trials=100))
  c = res["curves"]
  for i, m in enumerate(res["labels_revealed"]):
    if i % 5 == 0 or i == len(res["labels_revealed"]) - 1:
      print(m, {k: round(float(v["mean"][i]), 4) for k, v in c.items()})
