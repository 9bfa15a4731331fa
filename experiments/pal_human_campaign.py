"""A simulated PAL campaign through the annotation service: active vs passive, 10 % noise.

  .venv/bin/python experiments/pal_human_campaign.py --out runs/pal_human_campaign
  .venv/bin/python experiments/pal_human_campaign.py --out /tmp/phc --fast
  .venv/bin/python experiments/pal_human_campaign.py --out runs/pal_human_campaign --ssl_only

Question (Cabannes et al. 2023, arXiv 2303.15256, Fig. 3 and §4.3): with
people who sometimes answer wrongly, do the active pair queries still buy
more accuracy per answer than random pairs?

Service runs ("http_*"). For each strategy (active: Algorithm 3 asked one
pair at a time, classifier-guided; passive: uniform random pairs) a fresh
service (`python -m ssljax.pal.serve`, default config unless --fast: a
Fashion-MNIST pool of `--pool` train images, MLP 256-256, K = 16) is
answered over HTTP by `--annotators` simulated people who answer from the
true labels and flip each answer with probability `--noise`. The people
pause at every budget (multiples of `--every` answers) until the service's
own background round on exactly that many answers has finished; the
round's linear-probe and 20-NN test accuracies (on 2,000 test images) are
the curve.

Simulated-oracle runs ("oracle_*"): the same pool, strategies, graph and
training rounds (`ssljax.pal.serve.strategy`, `ssljax.pal.serve.rounds`)
in-process, with a noise-free oracle: the curve the noisy campaign is
compared with, as Fig. 3 compares active and passive with a perfect
oracle (our kernel reproduction of Fig. 3 is on docs/reproducing_pal.md).

The rounds train on the service's default graph, the answers mixed with
the augmentation graph (``train.graph = "mixed"``, weight ``train.alpha``);
``--graph answers`` runs the campaign with the answers-only rounds.
``--ssl_only`` (after a campaign in the same --out): the same rounds with
α = 0, the augmentation graph alone and no answers ("ssl_only"), added to
the JSON and the figure: what the answers add to the augmentations.

Writes pal_human_campaign.json (config, curves, wall time) and
pal_human_campaign.png.
"""

import os
import pathlib
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
from ml_collections import config_dict  # noqa: E402
from ssljax import pal  # noqa: E402
from ssljax.pal.serve import db, rounds, strategy  # noqa: E402
from ssljax.pal.serve.pool import load_pool  # noqa: E402
from ssljax.pal.serve.simulate import Annotator, Server, labels_of  # noqa: E402

STRATEGIES = ("active", "passive")


def parse_args(argv=None):
  """--out, --fast, --noise, --pool, --every, --rounds, --annotators."""
  import argparse  # pylint: disable=import-outside-toplevel
  pre = argparse.ArgumentParser(add_help=False)
  pre.add_argument("--noise", type=float, default=0.1)
  pre.add_argument("--pool", type=int, default=1000)
  pre.add_argument("--every", type=int, default=250)
  pre.add_argument("--rounds", type=int, default=4)
  pre.add_argument("--annotators", type=int, default=4)
  pre.add_argument("--graph", default="mixed", choices=("mixed", "answers"))
  pre.add_argument("--ssl_only", action="store_true")
  known, rest = pre.parse_known_args(argv)
  args = _common.parse_args(__doc__.splitlines()[0], rest)
  for k, v in vars(known).items():
    setattr(args, k, v)
  if args.fast:
    args.pool, args.every, args.rounds, args.annotators = 200, 40, 2, 2
  return args


def _overrides(args, kind):
  return [f"--config.strategy={kind}", f"--config.data.pool={args.pool}",
          f"--config.server.train_every={args.every}",
          f"--config.train.graph={args.graph}"]


def http_campaign(args, kind, config) -> list:
  """Per round: answers, probe, knn of the service's own rounds."""
  work = pathlib.Path(args.out) / f"http_{kind}"
  server = Server(work, *_overrides(args, kind), config=config).start()
  engine = db.connect(db.database_url("", work))
  labels = labels_of(work)
  people = [Annotator(server.url, db.add_annotator(engine, f"{kind}{k}"),
                      labels, noise=args.noise, seed=k)
            for k in range(args.annotators)]
  monitor = server.client(db.add_annotator(engine, "monitor"))
  permits = threading.Semaphore(0)
  stop = threading.Event()

  def person(a):
    while not stop.is_set():
      if not permits.acquire(timeout=0.2):
        continue
      before = len(a.acked)
      if not a.step() or len(a.acked) == before:
        permits.release()
        time.sleep(0.1)

  threads = [threading.Thread(target=person, args=(a,), daemon=True)
             for a in people]
  for t in threads:
    t.start()
  for r in range(1, args.rounds + 1):
    for _ in range(args.every):
      permits.release()
    while True:  # the service trains round r on exactly r * every answers
      st = monitor.get("/api/status").json()
      if st["round"] >= r:
        break
      time.sleep(0.5)
    print(kind, "http", st["last_round"], flush=True)
  stop.set()
  for t in threads:
    t.join()
  server.stop()
  errors = sum(len(a.errors) for a in people)
  flipped = None
  curve = [_read(m) for m in _metrics(work)]
  return {"curve": curve, "errors": errors, "flipped": flipped}


def _metrics(work):
  import json  # pylint: disable=import-outside-toplevel
  return [json.loads(l) for l in (work / "metrics.jsonl").read_text()
          .splitlines()]


def _read(m):
  return {k: m[k] for k in ("round", "answers", "probe", "knn",
                            "resolved_pairs", "graph_conflicts", "seconds")}


def oracle_campaign(args, kind, work) -> list:
  """The same rounds in-process with a noise-free simulated oracle."""
  cfg = config_dict.ConfigDict(
      __import__("json").loads((work / "config.json").read_text()))
  pool = load_pool(work)
  y, n = pool["labels"], pool["images"].shape[0]
  rng = np.random.default_rng(1)
  votes, z, variables, curve = {}, None, None, []
  for r in range(1, args.rounds + 1):
    graph = strategy.graph_from_votes(n, votes)
    _common.ask_pairs(votes, graph, r * args.every, kind=kind, rng=rng, n=n,
                      num_classes=cfg.data.num_classes, embeddings=z,
                      same=lambda p: y[p[0]] == y[p[1]])
    t0 = time.time()
    variables, z, m = rounds.train_round(cfg, pool, votes, round_id=r,
                                         variables=variables)
    m.update(round=r, answers=len(votes), seconds=time.time() - t0)
    curve.append(_read(m))
    print(kind, "oracle", curve[-1], flush=True)
  return {"curve": curve}


def ssl_only_campaign(args, work) -> dict:
  """The rounds with alpha = 0: augmentation graph only, no answers."""
  cfg = config_dict.ConfigDict(
      __import__("json").loads((work / "config.json").read_text()))
  cfg.train.graph, cfg.train.alpha = "mixed", 0.0
  pool = load_pool(work)
  variables, curve = None, []
  for r in range(1, args.rounds + 1):
    t0 = time.time()
    variables, _, m = rounds.train_round(cfg, pool, {}, round_id=r,
                                         variables=variables)
    m.update(round=r, answers=r * args.every, seconds=time.time() - t0)
    curve.append(_read(m))
    print("ssl_only", curve[-1], flush=True)
  return {"curve": curve}


def add_ssl_only(args) -> dict:
  """Adds the "ssl_only" run to an existing campaign's JSON and figure."""
  import json  # pylint: disable=import-outside-toplevel
  path = pathlib.Path(args.out) / "pal_human_campaign.json"
  result = json.loads(path.read_text())
  service = json.loads((pathlib.Path(args.out) / "http_active" / "config.json")
                       .read_text())
  result["config"].setdefault("graph", service["train"].get("graph",
                                                            "answers"))
  result["runs"]["ssl_only"] = ssl_only_campaign(
      args, pathlib.Path(args.out) / "http_active")
  _common.save_json(args.out, "pal_human_campaign.json", result)
  plot(result, args.out)
  return result


def initial_point(work) -> dict:
  """Probe and 20-NN of the untrained network (0 answers), same pool."""
  import jax  # pylint: disable=import-outside-toplevel
  from ssljax.probes import knn_accuracy, linear_probe  # pylint: disable=import-outside-toplevel
  from ssljax.pal.loop import embed  # pylint: disable=import-outside-toplevel
  cfg = config_dict.ConfigDict(
      __import__("json").loads((work / "config.json").read_text()))
  pool = load_pool(work)
  x = pool["images"].astype(np.float32) / 255.0
  model = pal.ScaledMLP(tuple(cfg.model.hidden), cfg.model.k, x.shape[0])
  variables = model.init(jax.random.key(cfg.seed + 1), x[:2], train=False)
  z = embed(model, variables, x)
  z_test = embed(model, variables,
                 pool["test_images"].astype(np.float32) / 255.0)
  probe = linear_probe(z, pool["labels"], z_test, pool["test_labels"],
                       l2_grid=(1e-4, 1e-2), max_iter=300)
  return {"round": 0, "answers": 0, "probe": float(probe["test_accuracy"]),
          "knn": float(knn_accuracy(z, pool["labels"], z_test,
                                    pool["test_labels"]))}


def run(args) -> dict:
  t0 = time.time()
  config = "configs/pal_human.py" + (":smoke" if args.fast else "")
  result = {"config": {k: getattr(args, k) for k in
                       ("noise", "pool", "every", "rounds", "annotators",
                        "fast", "graph")}, "service_config": config, "runs": {}}
  for kind in STRATEGIES:
    result["runs"][f"http_{kind}"] = http_campaign(args, kind, config)
  for kind in STRATEGIES:
    result["runs"][f"oracle_{kind}"] = oracle_campaign(
        args, kind, pathlib.Path(args.out) / f"http_{kind}")
  result["initial"] = initial_point(pathlib.Path(args.out) / "http_active")
  result["seconds"] = time.time() - t0
  _common.save_json(args.out, "pal_human_campaign.json", result)
  plot(result, args.out)
  return result


def plot(result, out):
  fig, axes = _common.plt.subplots(1, 2, figsize=(11, 4.2))
  styles = {"http_active": ("C0", "-"), "http_passive": ("C1", "-"),
            "oracle_active": ("C0", ":"), "oracle_passive": ("C1", ":"),
            "ssl_only": ("C2", "-.")}
  noise = result["config"]["noise"]
  for ax, metric in zip(axes, ("probe", "knn")):
    if "initial" in result:
      ax.axhline(result["initial"][metric], color="grey", ls="--",
                 label="untrained network (0 answers)")
    for name, run_ in result["runs"].items():
      c = run_["curve"]
      colour, ls = styles[name]
      label = (f"{name[5:]}, people via HTTP, {noise:.0%} flipped"
               if name.startswith("http") else
               f"{name[7:]}, noise-free oracle" if name.startswith("oracle")
               else "augmentations only (alpha = 0, answers unused)")
      ax.plot([p["answers"] for p in c], [p[metric] for p in c], marker="o",
              color=colour, ls=ls, label=label)
    graph = result["config"].get("graph", "answers")
    ax.set(xlabel="pair answers", ylabel=f"{metric} test accuracy",
           title=f"pool of {result['config']['pool']}, {graph} graph: {metric}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  _common.save_figure(fig, out, "pal_human_campaign.png")


if __name__ == "__main__":
  cli = parse_args()
  res = add_ssl_only(cli) if cli.ssl_only else run(cli)
  for name, r in res["runs"].items():
    print(name, [(p["answers"], round(p["probe"], 4), round(p["knn"], 4))
                 for p in r["curve"]])
  print(f"{res['seconds']:.0f} s (the campaign)")
