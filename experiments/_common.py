"""Shared helpers for the experiment scripts: CLI, outputs, small data sets.

Every script takes `--out DIR` (created if needed) and `--fast` (a
seconds-long smoke run), writes PNG figures with matplotlib's Agg backend
and one JSON file holding the plotted numbers.
"""

from __future__ import annotations

import argparse
import gzip
import json
import pathlib
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
import numpy as np  # noqa: E402


def parse_args(description: str, argv=None) -> argparse.Namespace:
  """`--out DIR` (required) and `--fast`; creates DIR."""
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument("--out", required=True, help="output directory")
  parser.add_argument("--fast", action="store_true",
                      help="tiny sizes: a smoke run of a few seconds")
  args = parser.parse_args(argv)
  args.out = pathlib.Path(args.out)
  args.out.mkdir(parents=True, exist_ok=True)
  return args


def _jsonable(x):
  if isinstance(x, dict):
    return {str(k): _jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_jsonable(v) for v in x]
  if hasattr(x, "tolist"):  # numpy / jax arrays and scalars
    return _jsonable(np.asarray(x).tolist())
  if isinstance(x, float) and not np.isfinite(x):
    return None if np.isnan(x) else (1e308 if x > 0 else -1e308)
  return x


def save_json(out: pathlib.Path, name: str, obj) -> pathlib.Path:
  """Writes obj (arrays become lists, NaN becomes null) to out/name."""
  path = pathlib.Path(out) / name
  path.write_text(json.dumps(_jsonable(obj), indent=1))
  return path


def run_experiment(doc: str, name: str, run, plot, argv=None) -> dict:
  """The main() of an experiment: parse --out/--fast, run, plot, save JSON.

  Args:
    doc: the script's docstring (its first line describes the command).
    name: base name of the JSON file written under --out.
    run: run(args) -> result dict.
    plot: plot(result, out) writes the figures.
    argv: command-line arguments (None: sys.argv[1:]).

  Returns:
    The result dict (also written to <out>/<name>.json).
  """
  args = parse_args(doc.splitlines()[0], argv)
  result = run(args)
  plot(result, args.out)
  save_json(args.out, f"{name}.json", result)
  return result


def save_figure(fig, out: pathlib.Path, name: str) -> pathlib.Path:
  path = pathlib.Path(out) / name
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


def median_time(fn, *args, reps: int = 20) -> float:
  """Median wall time (s) of fn(*args) after one warm-up (compile) call."""
  import jax  # local: keeps this module importable without jax
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - t0)
  return float(np.median(times))


def load_fashion_mnist(n: int, *, classes=None, seed: int = 0):
  """(x, y): n train images as float64 (n, 784) in [0, 1], or None if missing.

  Reads Debian's IDX files found by
  `ssljax.data.fashion_mnist.find_fashion_mnist_files`; `classes` keeps only
  those labels; the n images are a seeded random subset.
  """
  from ssljax.data.fashion_mnist import find_fashion_mnist_files
  root = find_fashion_mnist_files()
  if root is None:
    return None
  with gzip.open(root / "train-images-idx3-ubyte.gz", "rb") as f:
    images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
  with gzip.open(root / "train-labels-idx1-ubyte.gz", "rb") as f:
    labels = np.frombuffer(f.read(), np.uint8, offset=8)
  keep = np.arange(len(labels)) if classes is None else np.flatnonzero(
      np.isin(labels, classes))
  idx = np.random.default_rng(seed).choice(keep, size=n, replace=False)
  return images[idx].astype(np.float64) / 255.0, labels[idx].astype(np.int64)


def augmented_subset(cfg: dict, data_dir, seed: int, augment: dict):
  """A seeded subset of Fashion-MNIST train images with V augmented views.

  The views are made by the training engine (`ssljax.data.device_views`),
  keyed by ``jax.random.key(seed)``.

  Args:
    cfg: "train_split" (tfds split), "n" (images drawn without replacement),
      "views" (V), "test" (first rows of the test split).
    data_dir: tfds data dir (None: default).
    seed: seeds the subset and the views.
    augment: ``config.views`` fields (`ssljax.data.view_spec`), e.g.
      {"crop": "pad_and_crop", "pad": 2, "flip_prob": 0.5}; ops not named
      are off (the `ssljax.data.view_ops.apply_view` defaults).

  Returns:
    (clean (n, 28, 28, 1) float32 in [0, 1], labels (n,) int64, views: list
    of V such arrays, test images (M, 28, 28, 1) uint8, test labels int64).
  """
  import jax  # local: the experiments' numpy-only parts stay light
  from ssljax import data
  images, labels = data.load_split("fashion_mnist_local", cfg["train_split"],
                                   data_dir=data_dir)
  idx = np.random.default_rng(seed).choice(len(labels), cfg["n"],
                                           replace=False)
  clean = images[idx].astype(np.float32) / 255.0
  spec = data.view_spec({**augment, "num_global": cfg["views"]})
  views = [np.asarray(v) for v in data.device_views(
      {"images": images[idx]}, jax.random.key(seed), spec)]
  test_images, test_labels = data.load_split(
      "fashion_mnist_local", f"test[:{cfg['test']}]", data_dir=data_dir)
  return (clean, labels[idx].astype(np.int64), views, test_images,
          test_labels.astype(np.int64))


def subspace_angle_deg(a, b) -> float:
  """Largest principal angle (degrees) between the row spaces of a and b."""
  qa = np.linalg.qr(np.asarray(a, np.float64).T)[0]
  qb = np.linalg.qr(np.asarray(b, np.float64).T)[0]
  cos = np.clip(np.linalg.svd(qa.T @ qb, compute_uv=False), -1.0, 1.0)
  return float(np.degrees(np.arccos(cos.min())))


def ask_pairs(votes: dict, graph, target: int, *, kind: str, rng, n: int,
              num_classes: int, embeddings, same,
              passive_first: int = 0, partner: str = "template") -> None:
  """PAL's in-process queries: asks pairs until ``votes`` holds ``target``
  answers (or no pair is left), one at a time, as the service asks them.

  Args:
    votes: {pair: [same votes, different votes]}, filled in place.
    graph: the `ssljax.pal.serve.strategy` answer graph of ``votes``,
      updated in place.
    target: answers to reach.
    kind: "active" (`strategy.active_pair`, guided by ``embeddings``) or
      "passive" (`strategy.passive_pair`, uniform).
    rng: numpy Generator drawing the pairs.
    n, num_classes: the pool's size and classes.
    embeddings: the last round's (n, K) pool embeddings, or None.
    same: pair -> bool, the oracle's answer.
    passive_first: with "active", the first answers asked uniformly
      (``config.passive_first``: the random start of the service).
    partner: with "active", `strategy.active_pair`'s ``partner``
      (``config.active_partner``).
  """
  from ssljax.pal.serve import strategy  # pylint: disable=import-outside-toplevel
  while len(votes) < target:
    if kind == "active" and len(votes) >= passive_first:
      pair = strategy.active_pair(rng, graph, num_classes,
                                  embeddings=embeddings, excluded=set(votes),
                                  partner=partner)
    else:
      pair = strategy.passive_pair(rng, n, excluded=set(votes))
    if pair is None:
      return
    answer = bool(same(pair))
    votes[pair] = [1, 0] if answer else [0, 1]
    graph.add(pair[0], pair[1], answer)
