"""Helpers shared by the PAL experiment scripts (experiments/pal_*.py).

Data of the controlled experiments of Cabannes et al. (2023), "Active
Self-Supervised Learning: A Few Low-Cost Relationships Are All You Need",
arXiv 2303.15256, App. C.2 (circles and Gaussian mixture), the kernel-curve
runner used by several figures, named set-ups (`--setup`), the mean ± std
tables and plotting. Generic CLI / JSON / PNG helpers are in `_common.py`.
See docs/reproducing_pal.md for the set-ups of each figure.
"""

from __future__ import annotations

import numpy as np

import _common

from ssljax import pal

NUM_CLASSES = 4


def circles_train(rng: np.random.Generator, n: int, noise: float):
  """Training circles: rings r ∈ {1..4} (label r − 1), uniform angle.

  Args:
    rng: numpy Generator.
    n: number of points.
    noise: std of the Gaussian input noise noise·N(0, I₂) (0: on the rings).

  Returns:
    (x (n, 2) float64, y (n,) int64 in [0, 4)); labels are resampled
    until every class appears (needed for the templates).

  References:
    Cabannes et al. (2023), arXiv 2303.15256, App. C.2 (the circles data
    of Figs. 3, 4, 7, 8, 9).
  """
  while True:
    y = rng.integers(0, NUM_CLASSES, n)
    if np.unique(y).size == NUM_CLASSES:
      break
  theta = rng.uniform(0.0, 2 * np.pi, n)
  x = (y + 1.0)[:, None] * np.stack([np.cos(theta), np.sin(theta)], 1)
  return x + noise * rng.standard_normal((n, 2)), y


def circles_test(rng: np.random.Generator, n_test: int, noise: float):
  """Test circles: n_test // 4 equally spaced angles per ring.

  Args:
    rng: numpy Generator (used only when noise > 0).
    n_test: number of test points (rounded down to a multiple of 4).
    noise: std of the Gaussian input noise, as for the training points.

  Returns:
    (x (4·(n_test // 4), 2) float64, y int64 in [0, 4), ring by ring).

  References:
    Cabannes et al. (2023), arXiv 2303.15256, App. C.2.
  """
  m = n_test // NUM_CLASSES
  theta = np.tile(np.linspace(0.0, 2 * np.pi, m, endpoint=False), NUM_CLASSES)
  y = np.repeat(np.arange(NUM_CLASSES), m)
  x = (y + 1.0)[:, None] * np.stack([np.cos(theta), np.sin(theta)], 1)
  return x + noise * rng.standard_normal((x.shape[0], 2)), y


def mixture(rng: np.random.Generator, n: int, noise: float = 0.3):
  """Gaussian mixture X = Y + noise·E in R⁴ (Y one-hot, E standard normal).

  Returns:
    (x (n, 4) float64, y (n,) int64 in [0, 4)); every class appears.

  References:
    Cabannes et al. (2023), arXiv 2303.15256, App. C.2.6 (Fig. 10).
  """
  while True:
    y = rng.integers(0, NUM_CLASSES, n)
    if np.unique(y).size == NUM_CLASSES:
      break
  return np.eye(NUM_CLASSES)[y] + noise * rng.standard_normal(
      (n, NUM_CLASSES)), y


def make_data(dataset: str, rng, n: int, n_test: int, noise: float):
  """(x (n, D), y (n,), x_test (M, D), y_test (M,)) for "circles" (D = 2)
  or "mixture" (D = 4); float64 inputs, int64 labels.

  Raises:
    ValueError: on an unknown dataset.
  """
  if dataset == "circles":
    x, y = circles_train(rng, n, noise)
    xt, yt = circles_test(rng, n_test, noise)
  elif dataset == "mixture":
    x, y = mixture(rng, n, noise)
    xt, yt = mixture(rng, n_test, noise)
  else:
    raise ValueError(f"unknown dataset {dataset!r}")
  return x, y, xt, yt


def first_of_each_class(y) -> list[int]:
  """Index of the first point of each class 0..3 of y ((N,) int)."""
  return [int(np.flatnonzero(y == c)[0]) for c in range(NUM_CLASSES)]


def make_oracle(kind: str, y, seed: int, per_step: int):
  """Oracle for the kernel curves; templates: first point of each class.

  Args:
    kind: "active" / "active_contrastive" (captcha oracle, signed graph),
      "active_non_contrastive" (captcha, 1/0 graph), "passive" (random
      pairs, answered entries only) or "passive_completed" (random pairs +
      transitive completion).
    y: (N,) int labels.
    seed: seeds the labeler.
    per_step: answers per query round.

  Returns:
    A `ssljax.pal` oracle with `.target()` and `.query(rng)`.

  Raises:
    ValueError: on an unknown kind.

  References:
    Cabannes et al. (2023), arXiv 2303.15256, Algorithm 3, Figs. 3 and 7.
  """
  lab = pal.Labeler(y, seed=seed)
  templates = first_of_each_class(y)
  if kind in ("active", "active_contrastive"):
    return pal.CaptchaOracle(lab, NUM_CLASSES, templates=templates,
                             screen_size=per_step, signed=True)
  if kind == "active_non_contrastive":
    return pal.CaptchaOracle(lab, NUM_CLASSES, templates=templates,
                             screen_size=per_step, signed=False)
  if kind in ("passive", "passive_completed"):
    oracle = pal.SupervisedOracle(lab, per_step, signed=True,
                                  complete=kind == "passive_completed")
    for a in range(len(templates)):  # same initial knowledge as active
      for b in range(a):
        oracle.graph.add_negative(templates[a], templates[b])
    return oracle
  raise ValueError(f"unknown oracle kind {kind!r}")


def kernel_query_curve(kind: str, *, dataset: str, seed: int, n: int,
                       n_test: int, noise: float, sigma: float, ridge: float,
                       steps: int, per_step: int) -> dict:
  """Errors (oracle and train readouts) after 0, 1, ..., steps−1 rounds.

  Returns:
    {"oracle", "train", "answers", "components"}: lists of `steps` floats
    (errors in [0, 1]) or ints (answers spent, connected components).

  Raises:
    ValueError: on an unknown dataset or oracle kind.

  References:
    Cabannes et al. (2023), arXiv 2303.15256, Figs. 3 and 7, App. C.2.
  """
  rng = np.random.default_rng(seed)
  x, y, xt, yt = make_data(dataset, rng, n, n_test, noise)
  kp = pal.KernelPAL(x, xt, sigma=sigma, ridge=ridge, k=NUM_CLASSES + 1)
  oracle = make_oracle(kind, y, seed, per_step)
  out = {"oracle": [], "train": [], "answers": [], "components": []}
  answers = 0
  for _ in range(steps):
    err = kp.errors(oracle.target(), y, yt, NUM_CLASSES)
    out["oracle"].append(err["oracle"])
    out["train"].append(err["train"])
    out["answers"].append(answers)
    out["components"].append(oracle.graph.num_components())
    answers += oracle.query(rng)
  return out


def mean_std(curves: list[list[float]]) -> dict:
  """{"mean", "std"} (L,) float64 over the first axis of (trials, L) curves."""
  arr = np.asarray(curves, np.float64)
  return {"mean": arr.mean(0), "std": arr.std(0)}


def plot_band(ax, x, stats: dict, label: str) -> None:
  """A mean curve with a ± std band on the matplotlib axes ax."""
  m, s = np.asarray(stats["mean"]), np.asarray(stats["std"])
  ax.plot(x, m, label=label)
  ax.fill_between(x, m - s, m + s, alpha=0.2)


def table(xs, stats: dict, points) -> dict:
  """{x: [mean, std]} of a mean/std curve at the x positions `points`.

  Args:
    xs: (L,) x values of the curve.
    stats: {"mean": (L,), "std": (L,)} as from `mean_std`.
    points: x positions; each must be one of xs (up to 1e-9).

  Returns:
    {x (float): [mean, std]} (python floats).

  Raises:
    ValueError: if a point is not an x value of the curve.
  """
  xs = np.asarray(xs, np.float64)
  out = {}
  for p in points:
    i = int(np.argmin(np.abs(xs - p)))
    if abs(xs[i] - p) > 1e-9:
      raise ValueError(f"x = {p} is not on the curve (x values {xs})")
    out[float(p)] = [float(np.asarray(stats["mean"])[i]),
                     float(np.asarray(stats["std"])[i])]
  return out


def setup_config(setups: dict, name: str) -> dict:
  """A copy of the named set-up; ValueError naming the known ones."""
  if name not in setups:
    raise ValueError(f"unknown setup {name!r}; known: {sorted(setups)}")
  return dict(setups[name], setup=name)


def parse_args(description: str, argv=None, *, trials: int = 100,
               setups=("paper_notebook",)):
  """`--out DIR`, `--fast` (as `_common.parse_args`), `--trials`, `--setup`.

  Args:
    description: the CLI help text.
    argv: list of str (None: sys.argv[1:]).
    trials: default of `--trials`.
    setups: names accepted by `--setup`; the first is the default.

  Returns:
    argparse.Namespace with out (pathlib.Path, created), fast (bool),
    trials (int) and setup (str).

  Raises:
    SystemExit: (argparse) on unknown arguments or setup names.
  """
  import argparse
  import pathlib
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument("--setup", choices=tuple(setups), default=setups[0],
                      help="named set-up (default: %(default)s); see the"
                      " script docstring")
  parser.add_argument("--out", required=True, help="output directory")
  parser.add_argument("--fast", action="store_true",
                      help="tiny sizes: a smoke run of a few seconds")
  parser.add_argument("--trials", type=int, default=trials,
                      help="number of random trials (seeds 0..trials-1)")
  args = parser.parse_args(argv)
  args.out = pathlib.Path(args.out)
  args.out.mkdir(parents=True, exist_ok=True)
  return args


def query_curves(kinds, *, trials: int, **cfg) -> dict:
  """Mean/std over trials (seeds 0..trials−1) of `kernel_query_curve`.

  Returns:
    {kind: {"oracle" | "train" | "answers" | "components": {"mean", "std"}}}
    with (steps,) float64 arrays.
  """
  out = {}
  for kind in kinds:
    runs = [kernel_query_curve(kind, seed=s, **cfg) for s in range(trials)]
    out[kind] = {key: mean_std([r[key] for r in runs])
                 for key in ("oracle", "train", "answers", "components")}
  return out


def run_figure(doc: str, name: str, config, run, plot, argv=None, *,
               trials: int = 100, setups=("paper_notebook",)) -> dict:
  """The main() of a PAL figure script: parse, run, write JSON, plot.

  Args:
    doc: the script's docstring (its first line is the CLI description).
    name: base name of the JSON and PNG files written under --out.
    config: config(setup, fast, trials) -> cfg dict.
    run: run(cfg) -> result dict.
    plot: plot(result, out) writes <out>/<name>.png.
    argv: command-line arguments (None: sys.argv[1:]).
    trials: default of --trials.
    setups: names accepted by --setup; the first is the default.

  Returns:
    The result dict (also written to <out>/<name>.json).
  """
  args = parse_args(doc.splitlines()[0], argv, trials=trials, setups=setups)
  result = run(config(args.setup, args.fast, args.trials))
  _common.save_json(args.out, f"{name}.json", result)
  plot(result, args.out)
  return result
