"""PAL with a network on Fashion-MNIST: probe accuracy against pair answers.

  .venv/bin/python experiments/pal_neural.py --out runs/pal_neural [--seeds 2] [--data-dir DIR]
  .venv/bin/python experiments/pal_neural.py --out /tmp/pal_neural --fast

Question (issue 5, "neural version"): how many cheap pair answers buy how
much accuracy? Algorithm 1 (`ssljax.pal.run_pal`) trains one network per
(oracle, seed) on the unbiased degree-corrected minibatch loss of
‖ZZᵀ − G‖² (`pal_minibatch_loss`), the oracle revealing entries of G as
training goes; the frozen K-dim embedding is probed at checkpoints.

Data. n Fashion-MNIST train images (seeded subset, `ssljax.data.load_split`
of "fashion_mnist_local"), V = 2 views each by `ssljax.data.device_views`
(random resized crop, area 0.3–1, and flip; seeded), stacked view-major
(row v·n + i): N = nV training rows, all oracles see the same rows. The
labeler knows the row labels (the source image's label). Probe and k-NN:
trained on the embeddings of the n clean train images, scored on the first
`test` test images.

Oracles (one query round per SGD step, `per_step` answers a round):
* ssl: `SSLOracle`, positives = the views of one image; no labeler.
* passive: `SupervisedOracle`, `per_step` uniform random pairs a round,
  signed graph of the answered entries only (002 Fig. 3's passive baseline).
* captcha: `CaptchaOracle` (Algorithm 3): templates discovered from negative
  answers, the least-known class (uniform prior) screened against M =
  `per_step` uniformly drawn rows of unknown relation, transitive
  completion, signed graph. Not classifier-guided: with 10 classes a
  uniform screen still finds ~10% positives (002 §4.3), and guiding costs an
  embedding of all N rows every round.
* mixed: `MixedOracle`, (1 − α)G_ssl + α·G_lab with G_lab the captcha's
  graph (views shared as free positives) on a budget of `mix_budget`
  answers, then SSL only (002 App. C.2.3).

Counting. x = pair answers of the labeler, a screen of M items counting M
answers (`Labeler.cost.answers`), plus, for ssl and mixed, the SSL pairs
revealed: each SSL minibatch shows (B/V)·V(V−1)/2 positive pairs, counted at
every step even when repeated (no human cost). With B = 2·per_step and
V = 2 every oracle reveals `per_step` pairs a step, so the checkpoints sit
at the same steps (budget / per_step) for every oracle: the network has
trained as long at a given x, whatever the oracle. The 0 point is the
initial network (identical for every oracle of a seed: same key).

Network (`ssljax.pal.ScaledMLP`). `MLPEncoder` (BatchNorm, ReLU) then a linear K-dim output times a
learned scalar exp(s), s initialised at −½·log N and trained with its own
Adam step (`scale_lr`); the rest Adam(`lr`). Why the scalar: the optimum
scale of Z depends on the graph's spectrum (‖z_i‖² ~ 2K/N for G_ssl, ~1 for
a labelled class block), a span that per-weight Adam steps cannot cover in
a few hundred steps. Probes are scale-invariant (standardised features,
cosine k-NN). Baselines: the initial network (x = 0) and raw pixels.

Writes pal_neural.json (config, seeds, per-seed and mean ± std curves, the
table at the budgets, baselines, wall time) and pal_neural.png.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import numpy as np
import optax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
from ssljax import pal  # noqa: E402
from ssljax.probes import knn_accuracy, linear_probe  # noqa: E402

KINDS = ("ssl", "passive", "captcha", "mixed")
NUM_CLASSES = 10
_FULL = dict(n=5000, views=2, test=2000, hidden=(256, 256), k=16, batch=200,
             per_step=100, budgets=(1000, 5000, 20000, 50000),
             mix_budget=1000, alpha=0.1, lr=1e-3, scale_lr=0.05,
             train_split="train")
_FAST = dict(n=200, views=2, test=200, hidden=(32,), k=8, batch=40,
             per_step=20, budgets=(40, 100, 200), mix_budget=40, alpha=0.1,
             lr=1e-3, scale_lr=0.05, train_split="train[:1000]")
_AUGMENT = dict(crop="random_resized", crop_scale=(0.3, 1.0), flip_prob=0.5)
_PROBE = dict(l2_grid=(1e-4, 1e-2), max_iter=300)


def parse_args(description: str, argv=None) -> argparse.Namespace:
  """`--out`, `--fast` (as `_common.parse_args`), `--seeds`, `--data-dir`."""
  pre = argparse.ArgumentParser(add_help=False)
  pre.add_argument("--seeds", type=int, default=2,
                   help="number of seeds (0..seeds-1)")
  pre.add_argument("--data-dir", default=None,
                   help="tfds data dir holding fashion_mnist_local")
  known, rest = pre.parse_known_args(argv)
  args = _common.parse_args(description, rest)
  args.seeds, args.data_dir = known.seeds, known.data_dir
  return args


# ---------------------------------------------------------------------------
# Data and network.
# ---------------------------------------------------------------------------


def load(cfg: dict, data_dir, seed: int = 0) -> dict:
  """Rows (N, 28, 28, 1) float32 views, their labels and groups; clean
  train images (n, 28, 28, 1) and test images, with int64 labels."""
  clean, y, views, test, y_test = _common.augmented_subset(cfg, data_dir, seed,
                                                          _AUGMENT)
  return {"rows": np.concatenate(views), "y_rows": np.tile(y, cfg["views"]),
          "groups": np.tile(np.arange(cfg["n"]), cfg["views"]),
          "clean": clean, "y": y, "test": test.astype(np.float32) / 255.0,
          "y_test": y_test}


def optimizer(cfg: dict) -> optax.GradientTransformation:
  """Adam(lr) on the network, Adam(scale_lr) on the scalar log_scale."""
  def labels(params):
    return {name: ("scale" if name == "log_scale" else
                   jax.tree.map(lambda _: "net", sub))
            for name, sub in params.items()}
  return optax.multi_transform({"net": optax.adam(cfg["lr"]),
                                "scale": optax.adam(cfg["scale_lr"])}, labels)


# ---------------------------------------------------------------------------
# Oracles, evaluation, one run.
# ---------------------------------------------------------------------------


def make_oracle(kind: str, d: dict, cfg: dict, seed: int):
  """The oracle of `kind` over the N rows (labeler noise-free, seeded)."""
  if kind == "ssl":
    return pal.SSLOracle(d["groups"])
  lab = pal.Labeler(d["y_rows"], seed=seed)
  if kind == "passive":
    return pal.SupervisedOracle(lab, cfg["per_step"], signed=True,
                                complete=False)
  captcha = pal.CaptchaOracle(lab, NUM_CLASSES, screen_size=cfg["per_step"])
  if kind == "captcha":
    return captcha
  if kind == "mixed":
    return pal.MixedOracle(d["groups"], captcha, alpha=cfg["alpha"],
                           budget=cfg["mix_budget"])
  raise ValueError(f"unknown oracle kind {kind!r}")


def ssl_pairs_per_step(cfg: dict) -> int:
  """Positive pairs an SSL minibatch shows: (B/V)·V(V−1)/2."""
  v = cfg["views"]
  return cfg["batch"] // v * v * (v - 1) // 2


def evaluate(model, variables, d: dict) -> dict:
  """Probe and k-NN test accuracy of the frozen embedding."""
  f_train = pal.embed(model, variables, d["clean"])
  f_test = pal.embed(model, variables, d["test"])
  probe = linear_probe(f_train, d["y"], f_test, d["y_test"], **_PROBE)
  return {"probe": float(probe["test_accuracy"]),
          "knn": float(knn_accuracy(f_train, d["y"], f_test, d["y_test"]))}


def run_one(kind: str, d: dict, cfg: dict, seed: int, *,
            at_start: bool) -> list[dict]:
  """Checkpoints of one run: step, answers, ssl_pairs, x, probe, knn."""
  model = pal.ScaledMLP(tuple(cfg["hidden"]), cfg["k"], len(d["y_rows"]))
  checkpoints = {b // cfg["per_step"] for b in cfg["budgets"]}

  def eval_fn(variables, step):
    return evaluate(model, variables, d) if step in checkpoints | {0} else {}

  res = pal.run_pal(d["rows"], make_oracle(kind, d, cfg, seed), model,
                    key=jax.random.key(seed), steps=max(checkpoints),
                    batch_size=cfg["batch"], optimizer=optimizer(cfg),
                    eval_fn=eval_fn, eval_every=1, log_every=10**9,
                    eval_at_start=at_start)
  uses_ssl = kind in ("ssl", "mixed")
  out = []
  for h in res.history:
    if "probe" in h:
      ssl_pairs = h["step"] * ssl_pairs_per_step(cfg) if uses_ssl else 0
      out.append({"step": h["step"], "answers": h["answers"],
                  "ssl_pairs": ssl_pairs, "x": h["answers"] + ssl_pairs,
                  "probe": h["probe"], "knn": h["knn"], "loss": h["loss"]})
  return out


# ---------------------------------------------------------------------------
# Main.
# ---------------------------------------------------------------------------


def _stats(values) -> dict:
  arr = np.asarray(values, np.float64)
  return {"mean": arr.mean(0), "std": arr.std(0)}


def _curves(per_seed: dict) -> dict:
  """Mean ± std over seeds, init (x = 0) point first for every kind."""
  curves = {}
  for kind, runs in per_seed.items():
    rows = [runs_init + run for runs_init, run in runs]
    curves[kind] = {key: _stats([[c[key] for c in r] for r in rows])
                    for key in ("x", "answers", "ssl_pairs", "step", "probe",
                                "knn")}
  return curves


def _table(curves: dict) -> dict:
  """{kind: {step: {x, answers, probe, knn}}} (means and stds)."""
  out = {}
  for kind, c in curves.items():
    out[kind] = {}
    for i, step in enumerate(c["step"]["mean"]):
      out[kind][int(step)] = {
          "x": float(c["x"]["mean"][i]),
          "answers": float(c["answers"]["mean"][i]),
          "probe": f"{c['probe']['mean'][i]:.4f} ± {c['probe']['std'][i]:.4f}",
          "knn": f"{c['knn']['mean'][i]:.4f} ± {c['knn']['std'][i]:.4f}"}
  return out


def _plot(out, curves: dict, baselines: dict, linthresh: float) -> None:
  fig, axes = _common.plt.subplots(1, 2, figsize=(11, 4.2))
  for ax, metric in zip(axes, ("probe", "knn")):
    for kind, c in curves.items():
      x = np.asarray(c["x"]["mean"])
      m, s = np.asarray(c[metric]["mean"]), np.asarray(c[metric]["std"])
      ax.errorbar(x, m, yerr=s, marker="o", capsize=3, label=kind)
    ax.axhline(baselines["raw_pixels"][metric], color="grey", ls="--",
               label="raw pixels")
    ax.set_xscale("symlog", linthresh=linthresh)  # linear up to 1st budget
    ax.set_xlim(left=0)
    ax.set(xlabel="pairs revealed (labeler answers; + SSL pairs for ssl/"
                  "mixed)",
           ylabel=f"{metric} test accuracy",
           title=f"Fashion-MNIST, K-dim embedding: {metric}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  _common.save_figure(fig, out, "pal_neural.png")


def run(args) -> dict:
  cfg = dict(_FAST if args.fast else _FULL)
  assert ssl_pairs_per_step(cfg) == cfg["per_step"], "align the x axes"
  t0 = time.time()
  d = load(cfg, args.data_dir)
  raw = {"probe": float(linear_probe(
      d["clean"].reshape(cfg["n"], -1), d["y"],
      d["test"].reshape(len(d["y_test"]), -1), d["y_test"],
      **_PROBE)["test_accuracy"]),
         "knn": float(knn_accuracy(d["clean"].reshape(cfg["n"], -1), d["y"],
                                   d["test"].reshape(len(d["y_test"]), -1),
                                   d["y_test"]))}
  per_seed = {kind: [] for kind in KINDS}
  for seed in range(args.seeds):
    init = None  # same key, same initial network for every oracle
    for kind in KINDS:
      ck = run_one(kind, d, cfg, seed, at_start=init is None)
      if init is None:
        init = [dict(ck[0], x=0, answers=0, ssl_pairs=0)]
        ck = ck[1:]
      per_seed[kind].append((init, ck))
      print(f"seed {seed} {kind}: " + ", ".join(
          f"x={c['x']} probe={c['probe']:.3f} knn={c['knn']:.3f}"
          for c in ck), flush=True)
  curves = _curves(per_seed)
  result = {"config": cfg, "seeds": args.seeds, "trials": args.seeds,
            "baselines": {"raw_pixels": raw}, "curves": curves,
            "per_seed": {k: [i + r for i, r in v]
                         for k, v in per_seed.items()},
            "table": _table(curves), "seconds": time.time() - t0}
  _common.save_json(args.out, "pal_neural.json", result)
  _plot(args.out, curves, result["baselines"], cfg["budgets"][0])
  return result


if __name__ == "__main__":
  res = run(parse_args(__doc__.splitlines()[0]))
  print("raw pixels", res["baselines"]["raw_pixels"])
  for kind, rows in res["table"].items():
    for step, row in rows.items():
      print(kind, step, row)
  print(f"{res['seconds']:.0f} s")
