"""Active vs passive PAL queries with a simulated oracle, over seeds (issue 48).

  .venv/bin/python experiments/pal_active_vs_passive.py --out runs/pal_avp
  .venv/bin/python experiments/pal_active_vs_passive.py --out /tmp/avp --fast
  .venv/bin/python experiments/pal_active_vs_passive.py --out runs/pal_avp_w1 \
      --set train.complete_weight=1.0

Question (Cabannes et al. 2023, arXiv 2303.15256, Fig. 3 and §4.3): do the
service's active pair queries (`ssljax.pal.serve.strategy.active_pair`)
buy more test accuracy per answer than uniform random pairs
(`passive_pair`), with a perfect oracle and with a fraction of flipped
answers, on the service's own rounds (`ssljax.pal.serve.rounds`)?

Set-up: the service config (`configs/pal_human.py`, default variant, plus
``--set key=value`` overrides) on a pool of ``--pool`` Fashion-MNIST train
images (the pool of config seed 0 for every seed). Per seed s, noise p and
strategy: the pairs are chosen in-process one at a time (the active
strategy with the last round's pool embeddings), answered from the true
labels, each answer flipped with probability p (a `numpy` Generator seeded
by s), and a round (`rounds.train_round`, warm-started, its seed
``config.seed = 1000 * s``) trains every ``--every`` answers; its linear
probe / 20-NN test accuracy (2,000 test images) is the curve. The same
rounds with α = 0 (the augmentation graph alone, no answers) are the
"augmentations only" curve, per seed.

Per round it also records what the answers built (`graph_stats`): the
component sizes of the completed graph, the fraction of true pairs among
the completed positive and negative pairs, the vote margins, the signed
degrees and the share of the answers in ‖G‖² of the mixed graph.

Writes pal_active_vs_passive.json (config, per-seed curves and stats,
mean ± standard error), pal_active_vs_passive.png and
pal_active_vs_passive.md (the table).
"""

import json
import os
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
from ssljax.pal.serve import rounds, strategy  # noqa: E402
from ssljax.pal.serve.pool import load_pool, prepare_pool  # noqa: E402

STRATEGIES = ("active", "passive")
ROOT = pathlib.Path(__file__).resolve().parents[1]


def parse_args(argv=None):
  """--out, --fast, --seeds, --noise, --pool, --every, --rounds, --set."""
  import argparse  # pylint: disable=import-outside-toplevel
  pre = argparse.ArgumentParser(add_help=False)
  pre.add_argument("--seeds", type=int, default=3)
  pre.add_argument("--noise", default="0,0.1",
                   help="comma-separated flip probabilities")
  pre.add_argument("--pool", type=int, default=1000)
  pre.add_argument("--every", type=int, default=250)
  pre.add_argument("--rounds", type=int, default=4)
  pre.add_argument("--strategies", default=",".join(STRATEGIES))
  pre.add_argument("--no_ssl_only", action="store_true")
  pre.add_argument("--set", action="append", default=[],
                   help="config override key=value (JSON value), repeatable")
  pre.add_argument("--before", default="",
                   help="--out of an earlier run: its curves are drawn too")
  pre.add_argument("--replot", action="store_true",
                   help="redraw figure and table from --out's JSON")
  pre.add_argument("--ssl_from", default="",
                   help="with --replot: draw the ssl_only curve of this --out")
  pre.add_argument("--note", default="",
                   help="a line drawn above the figure (what it shows)")
  known, rest = pre.parse_known_args(argv)
  args = _common.parse_args(__doc__.splitlines()[0], rest)
  for k, v in vars(known).items():
    setattr(args, k, v)
  args.noise = [float(p) for p in str(args.noise).split(",")]
  args.strategies = [s for s in args.strategies.split(",") if s]
  for s in args.strategies:
    if s not in STRATEGIES:
      raise ValueError(f"--strategies: unknown {s!r}; expected {STRATEGIES}")
  for p in args.noise:
    if not 0.0 <= p <= 0.5:
      raise ValueError(f"--noise must be in [0, 0.5], got {p}")
  if args.seeds < 1:
    raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
  if args.fast:
    args.pool, args.every, args.rounds = 200, 40, 2
  return args


def make_config(args):
  """The service config with the run's overrides (``--set``, --fast)."""
  sys.path.insert(0, str(ROOT / "configs"))
  import pal_human  # pylint: disable=import-outside-toplevel
  cfg = pal_human.get_config("smoke" if args.fast else None)
  cfg.data.pool = args.pool
  for item in args.set:
    key, _, value = item.partition("=")
    node, *path = key.split(".")
    target = cfg
    for name in [node, *path][:-1]:
      target = target[name]
    last = [node, *path][-1]
    if last not in target:
      raise ValueError(f"--set: unknown config field {key!r}")
    target[last] = json.loads(value)
  return cfg


def graph_stats(graph, votes: dict, y: np.ndarray, *, alpha: float,
                signed: bool = True, complete_weight: float = 1.0) -> dict:
  """What the answers built, on the N pool images.

  Args:
    graph: the completed `PairGraph` of the votes (`graph_from_votes`).
    votes: {(i, j): [same, different]} over pool positions.
    y: (N,) int true labels.
    alpha: the mixing weight of the round (share of ‖G‖² below).
    signed: whether the known negatives enter G (as −1).
    complete_weight: w, the weight of the pairs known only by completion.

  Returns:
    dict: "sizes" (non-singleton component sizes, descending), "largest",
    "components" (non-singleton count), "pos_pairs" / "neg_pairs"
    (completed unordered pairs known same / different), "answered_pos"
    (pairs answered same by their majority), "known_frac" (known pairs
    over all N(N − 1)/2), "tp_pos" / "tp_neg" (fraction
    of those completed pairs that are truly same / different; NaN if none),
    "margin_mean" and "margin_low" (mean of |same − diff| / votes over the
    voted pairs, fraction of pairs with margin < 1), "answer_acc" (fraction
    of resolved pairs whose majority is the truth), "deg_min" /
    "deg_mean" (signed degree of the completed graph, per image),
    "answer_share" (α²‖G_ans‖² / ((1−α)²‖G_ssl‖² + α²‖G_ans‖²) per view
    pair, deduced entries at ±w).
  """
  comp = graph.component_ids()
  sizes = np.bincount(comp)
  k = int(y.max()) + 1
  table = np.zeros((sizes.size, k), np.int64)
  np.add.at(table, (comp, y), 1)
  pos = int(np.sum(sizes * (sizes - 1)) // 2)
  pos_true = int(np.sum(table * (table - 1)) // 2)
  first = np.full(sizes.size, y.size)
  np.minimum.at(first, comp, np.arange(y.size))  # one sample per component
  a, b = np.nonzero(np.triu(graph.block(first, first) < 0))
  neg = int(np.sum(sizes[a] * sizes[b]))
  neg_false = int(np.sum(table[a] * table[b]))
  margins = np.array([abs(s - d) / max(s + d, 1) for s, d in votes.values()])
  resolved = [(i, j, s > d) for (i, j), (s, d) in votes.items() if s != d]
  correct = [(y[i] == y[j]) == same for i, j, same in resolved]
  deg = graph.degree(signed=True)
  n = y.size
  # ‖G_ans‖² per view pair: the diagonal, the answered pairs at 1, the
  # pairs known only by completion at w² (ordered pairs, both signs).
  answered = sum(1 for same in (r[2] for r in resolved) if same or signed)
  deduced = pos + neg * signed - answered
  g_ans = n + 2 * answered + 2 * deduced * complete_weight**2
  share = alpha**2 * g_ans / ((1 - alpha)**2 * n + alpha**2 * g_ans)
  big = np.sort(sizes[sizes > 1])[::-1]
  return {"sizes": big.tolist(), "largest": int(sizes.max()),
          "components": int(big.size), "pos_pairs": pos, "neg_pairs": neg,
          "answered_pos": int(sum(s for *_, s in resolved)),
          "known_frac": (pos + neg) / (n * (n - 1) / 2),
          "tp_pos": pos_true / pos if pos else float("nan"),
          "tp_neg": 1 - neg_false / neg if neg else float("nan"),
          "margin_mean": float(margins.mean()) if margins.size else 1.0,
          "margin_low": float(np.mean(margins < 1)) if margins.size else 0.0,
          "answer_acc": float(np.mean(correct)) if correct else float("nan"),
          "deg_min": float(deg.min()), "deg_mean": float(deg.mean()),
          "answer_share": float(share)}


def kernel_stats(seeds: int, budgets=(200, 400, 790)) -> dict:
  """`graph_stats` of the kernel Fig. 3 set-up (where active beats passive).

  The oracles of experiments/pal_fig3.py (`_pal.make_oracle`: circles,
  N = 150, 4 classes, 10 answers per step, noise-free): "active" (captcha,
  completed graph) and "passive" (random pairs, answered entries only, the
  paper's baseline). There G is the whole target (no augmentation graph),
  so "answer_share" is 1.

  Returns:
    {kind: {budget: [graph_stats per seed]}}.
  """
  import _pal  # pylint: disable=import-outside-toplevel
  cfg = {"n": 150, "noise": 0.1}  # pal_fig3.SETUPS["paper_notebook"]
  out = {}
  for kind in ("active", "passive"):
    out[kind] = {b: [] for b in budgets}
    for seed in range(seeds):
      rng = np.random.default_rng(seed)
      _, y, _, _ = _pal.make_data("circles", rng, cfg["n"], 10, cfg["noise"])
      oracle = _pal.make_oracle(kind, y, seed, 10)
      spent = 0
      for b in budgets:
        while spent < b:
          got = oracle.query(rng)
          if not got:  # every relation to every template is known
            break
          spent += got
        g = oracle.graph
        raw = np.triu(g.raw_signed(), 1)
        votes = {(int(i), int(j)): ([1, 0] if raw[i, j] > 0 else [0, 1])
                 for i, j in zip(*np.nonzero(raw))}
        stats = graph_stats(g, votes, y, alpha=1.0)
        if kind == "passive":  # trains on the answered entries only
          stats["pos_pairs_trained"] = stats["answered_pos"]
        out[kind][b].append(stats)
  return out


def campaign(args, cfg, pool, kind: str, noise: float, seed: int) -> list:
  """One in-process campaign; per round the metrics and `graph_stats`."""
  cfg = cfg.copy_and_resolve_references()
  cfg.seed = 1000 * seed
  y, n = pool["labels"], pool["images"].shape[0]
  rng = np.random.default_rng(seed)
  flips = np.random.default_rng([seed, int(noise * 1000)])
  votes, z, variables, curve = {}, None, None, []
  for r in range(1, args.rounds + 1):
    graph = strategy.graph_from_votes(n, votes)
    _common.ask_pairs(
        votes, graph, r * args.every, kind=kind, rng=rng, n=n,
        num_classes=cfg.data.num_classes, embeddings=z,
        passive_first=cfg.get("passive_first", 0),
        partner=cfg.get("active_partner", "template"),
        same=lambda p: bool(y[p[0]] == y[p[1]]) ^ bool(flips.random() < noise))
    t0 = time.time()
    variables, z, m = rounds.train_round(cfg, pool, votes, round_id=r,
                                         variables=variables)
    point = {"round": r, "answers": len(votes), "probe": m["probe"],
             "knn": m["knn"], "seconds": time.time() - t0,
             **graph_stats(graph, votes, y, alpha=cfg.train.alpha,
                          signed=cfg.train.signed,
                          complete_weight=cfg.train.complete_weight)}
    curve.append(point)
    print(kind, f"noise={noise}", f"seed={seed}",
          {k: (round(v, 4) if isinstance(v, float) else v)
           for k, v in point.items() if k != "sizes"},
          "sizes", point["sizes"][:6], flush=True)
  return curve


def ssl_only(args, cfg, pool, seed: int) -> list:
  """The same rounds with α = 0 (augmentations alone), one seed."""
  cfg = cfg.copy_and_resolve_references()
  cfg.seed = 1000 * seed
  cfg.train.graph, cfg.train.alpha = "mixed", 0.0
  variables, curve = None, []
  for r in range(1, args.rounds + 1):
    variables, _, m = rounds.train_round(cfg, pool, {}, round_id=r,
                                         variables=variables)
    curve.append({"round": r, "answers": r * args.every, "probe": m["probe"],
                  "knn": m["knn"]})
    print("ssl_only", f"seed={seed}", curve[-1], flush=True)
  return curve


def mean_se(values) -> tuple[float, float]:
  """(mean, standard error of the mean) of a list; SE 0 for one value."""
  v = np.asarray(values, np.float64)
  se = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else 0.0
  return float(v.mean()), se


def summarise(result) -> dict:
  """{run: {metric: [(answers, mean, se), ...]}} over the seeds."""
  out = {}
  for name, per_seed in result["runs"].items():
    curves = list(per_seed.values())
    out[name] = {}
    for metric in ("probe", "knn", "largest", "tp_pos", "tp_neg",
                   "answer_share", "deg_min"):
      if metric not in curves[0][0]:
        continue
      rows = []
      for r in range(len(curves[0])):
        m, se = mean_se([c[r][metric] for c in curves])
        rows.append((curves[0][r]["answers"], m, se))
      out[name][metric] = rows
  return out


def markdown(result) -> str:
  """The Markdown table: probe and 20-NN, mean ± SE over the seeds."""
  s = result["summary"]
  names = list(s)
  head = "| answers | " + " | ".join(names) + " |"
  lines = [head, "|" + "---|" * (len(names) + 1)]
  for r, (answers, *_) in enumerate(s[names[0]]["probe"]):
    cells = []
    for name in names:
      p = s[name]["probe"][r]
      k = s[name]["knn"][r]
      cells.append(f"{p[1]:.3f} ± {p[2]:.3f} / {k[1]:.3f} ± {k[2]:.3f}")
    lines.append(f"| {answers} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


DIAG = ("largest", "components", "pos_pairs", "neg_pairs", "answered_pos",
        "known_frac", "tp_pos", "tp_neg", "margin_mean", "answer_acc",
        "deg_mean", "answer_share")
COUNTS = ("largest", "components", "pos_pairs", "neg_pairs", "answered_pos")


def diagnostics_markdown(result) -> str:
  """Graph statistics per run and budget (mean over seeds), and the kernel
  Fig. 3 set-up's (`kernel_stats`) when present."""
  lines = ["| run | answers | " + " | ".join(DIAG) + " |",
           "|" + "---|" * (len(DIAG) + 2)]

  def row(name, answers, stats):
    cells = []
    for key in DIAG:
      vals = [x.get(key) for x in stats]
      v = np.nanmean([float("nan") if x is None else x for x in vals])
      cells.append(f"{v:.0f}" if key in COUNTS else
                   f"{v:.1f}" if key == "deg_mean" else f"{v:.3f}")
    lines.append(f"| {name} | {answers} | " + " | ".join(cells) + " |")

  for name, per_seed in result["runs"].items():
    if name == "ssl_only":
      continue
    curves = list(per_seed.values())
    for r in range(len(curves[0])):
      row(name, curves[0][r]["answers"], [c[r] for c in curves])
  for kind, budgets in result.get("kernel", {}).items():
    for b, stats in budgets.items():
      row(f"kernel Fig. 3, {kind}", b, stats)
  return "\n".join(lines) + "\n"


def plot(result, out, before=None, note: str = ""):
  """Probe and 20-NN curves (mean ± SE over seeds), one column per metric;
  a second row for `before` (an earlier run's result) if given."""
  panels = [(result, result.get("title", ""))]
  if before is not None:
    panels.append((before, "before: " + before.get("title", "")))
  fig, axes = _common.plt.subplots(len(panels), 2, squeeze=False,
                                   figsize=(11, 4.2 * len(panels)))
  for row, (res, title) in zip(axes, panels):
    for ax, metric in zip(row, ("probe", "knn")):
      for name, stats in res["summary"].items():
        rows = np.asarray(stats[metric])
        ls = "-." if name == "ssl_only" else (":" if "noise=0.0" in name
                                               else "-")
        colour = ("C2" if name == "ssl_only" else
                  "C0" if name.startswith("active") else "C1")
        ax.errorbar(rows[:, 0], rows[:, 1], yerr=rows[:, 2], marker="o",
                    color=colour, ls=ls, capsize=3, label=name)
      ax.set(xlabel="pair answers", ylabel=f"{metric} test accuracy",
             title=f"{title}\n{metric}, {res['config']['seeds']} seeds "
                   "(mean ± SE)")
      ax.title.set_fontsize(8)
      ax.grid(alpha=0.3)
      ax.legend(fontsize=7)
  if note:
    import textwrap  # pylint: disable=import-outside-toplevel
    fig.suptitle("\n".join(textwrap.wrap(note, 140)), fontsize=9)
  _common.save_figure(fig, out, "pal_active_vs_passive.png")


def replot(args) -> dict:
  """Figure and table again from --out's JSON (and --before's)."""
  result = json.loads((pathlib.Path(args.out) / "pal_active_vs_passive.json")
                      .read_text())
  before = None
  if args.before:
    before = json.loads((pathlib.Path(args.before) /
                         "pal_active_vs_passive.json").read_text())
  if args.ssl_from:  # α = 0 uses no answers: the same curve for any w
    other = json.loads((pathlib.Path(args.ssl_from) /
                        "pal_active_vs_passive.json").read_text())
    result["summary"]["ssl_only"] = other["summary"]["ssl_only"]
  write_outputs(result, args.out, before, args.note)
  return result


def write_outputs(result, out, before=None, note: str = "") -> None:
  """Markdown table (with `before`'s columns, if given) and figure."""
  text = markdown(result) + "\n" + diagnostics_markdown(result)
  if before is not None:
    text += ("\nbefore (" + before.get("title", "") + "):\n\n"
             + markdown(before) + "\n" + diagnostics_markdown(before))
  (pathlib.Path(out) / "pal_active_vs_passive.md").write_text(text)
  plot(result, out, before, note)


def run(args) -> dict:
  """All campaigns of the run; writes JSON, figure and Markdown."""
  t0 = time.time()
  cfg = make_config(args)
  work = pathlib.Path(args.out) / "pool"
  work.mkdir(parents=True, exist_ok=True)
  prepare_pool(cfg, work)
  pool = load_pool(work)
  result = {"config": {"seeds": args.seeds, "noise": args.noise,
                       "pool": args.pool, "every": args.every,
                       "rounds": args.rounds, "set": args.set,
                       "fast": args.fast},
            "service_config": cfg.to_dict(), "runs": {}}
  for noise in args.noise:
    for kind in args.strategies:
      result["runs"][f"{kind}, noise={noise}"] = {
          seed: campaign(args, cfg, pool, kind, noise, seed)
          for seed in range(args.seeds)}
  if not args.no_ssl_only:
    result["runs"]["ssl_only"] = {seed: ssl_only(args, cfg, pool, seed)
                                  for seed in range(args.seeds)}
  result["summary"] = summarise(result)
  result["kernel"] = kernel_stats(2 if args.fast else args.seeds)
  result["seconds"] = time.time() - t0
  result["title"] = (f"alpha = {cfg.train.alpha}, complete_weight = "
                     f"{cfg.train.get('complete_weight', 1.0)}, "
                     f"signed = {cfg.train.signed}")
  _common.save_json(args.out, "pal_active_vs_passive.json", result)
  before = None
  if args.before:
    before = json.loads((pathlib.Path(args.before) /
                         "pal_active_vs_passive.json").read_text())
  write_outputs(result, args.out, before, args.note)
  return result


def main(argv=None) -> dict:
  """Runs the command line (argv: None for sys.argv[1:]); returns the result."""
  args = parse_args(argv)
  res = replot(args) if args.replot else run(args)
  print(markdown(res))
  print(f"{res['seconds']:.0f} s (the run)")
  return res


if __name__ == "__main__":
  main()
