"""002 Fig. 8: label noise. Full access to G = ỸỸᵀ of corrupted labels ỹ.

N = 300 circles points (noise 0.1, σ 0.2, λ 1e-3 as Fig. 3); at each of
30 steps, 10 more labels (distinct samples, random order) are resampled
uniformly in [C] (so a resampled label stays correct with probability
1/C); target = contrastive graph 2·1{ỹ_i = ỹ_j} − 1. The "train" readout
is fitted on the corrupted training labels.

  .venv/bin/python experiments/pal_fig8.py --out runs/pal_fig8 [--trials 100]
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


def _trial(seed: int, cfg: dict) -> dict:
  rng = np.random.default_rng(seed)
  x, y, xt, yt = _pal.make_data(cfg["dataset"], rng, cfg["n"], cfg["n_test"],
                                cfg["noise"])
  kp = pal.KernelPAL(x, xt, sigma=cfg["sigma"], ridge=cfg["ridge"], k=5)
  order = rng.permutation(cfg["n"])
  noisy = y.copy()
  out = {"oracle": [], "train": [], "wrong_labels": []}
  for step in range(cfg["steps"] + 1):
    g = 2.0 * (noisy[:, None] == noisy[None, :]) - 1.0
    err = kp.errors(g, y, yt, _pal.NUM_CLASSES, y_fit=noisy)
    out["oracle"].append(err["oracle"])
    out["train"].append(err["train"])
    out["wrong_labels"].append(int(np.sum(noisy != y)))
    idx = order[step * cfg["per_step"]:(step + 1) * cfg["per_step"]]
    noisy[idx] = rng.integers(0, _pal.NUM_CLASSES, idx.size)
  return out


def run(args, dataset: str = "circles", name: str = "pal_fig8") -> dict:
  trials = 2 if args.fast else args.trials
  cfg = dict(dataset=dataset, n=300, n_test=1000, noise=0.1, sigma=0.2,
             ridge=1e-3, steps=30, per_step=10)
  if dataset == "mixture":
    cfg.update(noise=0.3, sigma=0.5)
  if args.fast:
    cfg.update(n=40, n_test=100, steps=3)
  t0 = time.time()
  runs = [_trial(s, cfg) for s in range(trials)]
  curves = {k: _pal.mean_std([r[k] for r in runs]) for k in runs[0]}
  resampled = np.arange(cfg["steps"] + 1) * cfg["per_step"]
  result = {"config": cfg, "trials": trials, "resampled_labels": resampled,
            "curves": curves, "seconds": time.time() - t0}
  _common.save_json(args.out, f"{name}.json", result)
  fig, ax = _common.plt.subplots(figsize=(6, 4))
  for r in ("oracle", "train"):
    _pal.plot_band(ax, resampled, curves[r], f"readout on {r}")
  ax.set(xlabel="labels resampled", ylabel="test error", title=dataset)
  ax.legend()
  _common.save_figure(fig, args.out, f"{name}.png")
  return result


if __name__ == "__main__":
  res = run(_pal.parse_args(__doc__.splitlines()[0]))
  c = res["curves"]
  for i in range(0, len(res["resampled_labels"]), 5):
    print(int(res["resampled_labels"][i]),
          {k: round(float(v["mean"][i]), 4) for k, v in c.items()})
