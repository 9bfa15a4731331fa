"""Label noise (Cabannes et al. 2023, arXiv 2303.15256, Fig. 8), kernel PAL.

Full access to the contrastive graph G = 2·1{ỹ_i = ỹ_j} − 1 of corrupted
labels ỹ. Per trial: one draw of the circles data, one permutation of the
N training points and one vector of replacement labels drawn uniformly over
the C = 4 classes (a replaced label stays correct with probability 1/C).
At measurement j the first r_j points of the permutation carry their
replacement label. Error = 1 − accuracy of a least-squares readout without
bias on the 5 kernel features, fitted on the test set ("oracle", the
authors' readout) or on the corrupted training labels ("train").

Set-ups (`--setup`):

* `paper_notebook` (default), the authors' released set-up: circles
  without input noise (noise = 0), N = 300, 1000 test points, Laplacian
  kernel σ = 0.2, λ = 1e-3, 30 measurements; at each, 10 more labels are
  replaced first, then the error is measured, so r_j = 10·(j + 1)
  (schedule = "replace_then_measure": 10, 20, ..., 300).
* `ssljax_v1`, our former set-up: the same except input noise = 0.1 on the
  train and test points and schedule = "measure_then_replace" (the error
  is measured before each replacement round: r_j = 10·j, 0, 10, ..., 300).

  .venv/bin/python experiments/pal_fig8.py --out runs/pal_fig8 [--trials 100]
  .venv/bin/python experiments/pal_fig8.py --out runs/pal_fig8_v1 --setup ssljax_v1
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

_BASE = dict(dataset="circles", n=300, n_test=1000, sigma=0.2, ridge=1e-3,
             steps=30, per_step=10)
SETUPS = {
    "paper_notebook": dict(_BASE, noise=0.0, schedule="replace_then_measure"),
    "ssljax_v1": dict(_BASE, noise=0.1, schedule="measure_then_replace"),
}
# The fields in which the set-ups differ (documented above, tested).
VARIANT_FIELDS = ("noise", "schedule")
SCHEDULES = ("replace_then_measure", "measure_then_replace")


def resampled_counts(steps: int, per_step: int, schedule: str) -> np.ndarray:
  """Number of replaced labels at each measurement.

  Args:
    steps: number of replacement rounds.
    per_step: labels replaced per round.
    schedule: "replace_then_measure" (the authors': r_j = per_step·(j + 1),
      j < steps) or "measure_then_replace" (r_j = per_step·j, j ≤ steps).

  Returns:
    (steps,) or (steps + 1,) int64 array r_j.

  Raises:
    ValueError: on an unknown schedule or negative sizes.

  References:
    Cabannes et al. (2023), arXiv 2303.15256, Fig. 8 and App. C.2.
  """
  if schedule not in SCHEDULES:
    raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
  if steps < 0 or per_step < 0:
    raise ValueError(f"steps and per_step must be >= 0, got {steps},"
                     f" {per_step}")
  if schedule == "replace_then_measure":
    return per_step * np.arange(1, steps + 1, dtype=np.int64)
  return per_step * np.arange(0, steps + 1, dtype=np.int64)


def corrupt_labels(y, order, replacement, count: int) -> np.ndarray:
  """ỹ: y with the first `count` points of `order` set to their replacement.

  Args:
    y: (N,) int true labels.
    order: (N,) int permutation of range(N).
    replacement: (N,) int replacement labels (uniform over the classes).
    count: number of replaced labels, 0 ≤ count ≤ N.

  Returns:
    (N,) int array ỹ (a copy): ỹ[order[:count]] =
    replacement[order[:count]], the other entries equal y.

  Raises:
    ValueError: on mismatched shapes or count outside [0, N].

  References:
    Cabannes et al. (2023), arXiv 2303.15256, Fig. 8.
  """
  y, order = np.asarray(y), np.asarray(order)
  replacement = np.asarray(replacement)
  if not y.ndim == 1 or order.shape != y.shape or replacement.shape != y.shape:
    raise ValueError(f"y, order, replacement must be (N,), got {y.shape},"
                     f" {order.shape}, {replacement.shape}")
  if not 0 <= count <= y.shape[0]:
    raise ValueError(f"count must be in [0, {y.shape[0]}], got {count}")
  noisy = y.copy()
  idx = order[:count]
  noisy[idx] = replacement[idx]
  return noisy


def _trial(seed: int, cfg: dict) -> dict:
  rng = np.random.default_rng(seed)
  x, y, xt, yt = _pal.make_data(cfg["dataset"], rng, cfg["n"], cfg["n_test"],
                                cfg["noise"])
  kp = pal.KernelPAL(x, xt, sigma=cfg["sigma"], ridge=cfg["ridge"], k=5)
  order = rng.permutation(cfg["n"])
  replacement = rng.integers(0, _pal.NUM_CLASSES, cfg["n"])
  out = {"oracle": [], "train": [], "wrong_labels": []}
  for count in resampled_counts(cfg["steps"], cfg["per_step"],
                                cfg["schedule"]):
    noisy = corrupt_labels(y, order, replacement, int(count))
    g = 2.0 * (noisy[:, None] == noisy[None, :]) - 1.0
    err = kp.errors(g, y, yt, _pal.NUM_CLASSES, y_fit=noisy)
    out["oracle"].append(err["oracle"])
    out["train"].append(err["train"])
    out["wrong_labels"].append(int(np.sum(noisy != y)))
  return out


def config(setup: str = "paper_notebook", fast: bool = False,
           trials: int = 100, dataset: str = "circles") -> dict:
  """The run configuration of a named set-up (`fast`: tiny sizes, 2 trials)."""
  cfg = _pal.setup_config(SETUPS, setup)
  cfg.update(dataset=dataset, trials=2 if fast else trials)
  if dataset == "mixture":
    cfg.update(noise=0.3, sigma=0.5)  # the data's noise; σ is our choice
  if fast:
    cfg.update(n=40, n_test=100, steps=3)
  return cfg


def run(cfg: dict) -> dict:
  """Mean ± std curves over cfg["trials"] seeds (0, 1, ...)."""
  t0 = time.time()
  runs = [_trial(s, cfg) for s in range(cfg["trials"])]
  curves = {k: _pal.mean_std([r[k] for r in runs]) for k in runs[0]}
  resampled = resampled_counts(cfg["steps"], cfg["per_step"], cfg["schedule"])
  last = int(resampled[-1])
  points = [10, 100, 200, last] if last >= 200 else list(resampled[:4])
  return {"config": cfg, "trials": cfg["trials"],
          "resampled_labels": resampled, "curves": curves,
          "table": {r: _pal.table(resampled, curves[r], points)
                    for r in ("oracle", "train")},
          "seconds": time.time() - t0}


def plot(result: dict, out, name: str = "pal_fig8") -> None:
  """Error vs number of resampled labels, both readouts, to out/name.png."""
  fig, ax = _common.plt.subplots(figsize=(6, 4))
  xs = result["resampled_labels"]
  for r in ("oracle", "train"):
    _pal.plot_band(ax, xs, result["curves"][r], f"readout on {r}")
  cfg = result["config"]
  ax.set(xlabel="labels resampled", ylabel="test error",
         title=f"{cfg['dataset']}, setup {cfg['setup']}")
  ax.legend()
  _common.save_figure(fig, out, f"{name}.png")


def main(argv=None) -> dict:
  return _pal.run_figure(__doc__, "pal_fig8", config, run, plot, argv,
                         setups=tuple(SETUPS))


if __name__ == "__main__":
  res = main()
  for r, tab in res["table"].items():
    print(r, {k: f"{m:.4f} ± {s:.4f}" for k, (m, s) in tab.items()})
