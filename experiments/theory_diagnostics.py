"""How far the learned batch embedding is from the theory's optimum, during
training: VICReg on the SSL (views) graph against VICReg on the supervised
graph.

    python experiments/theory_diagnostics.py --out runs/theory_diag --epochs 1

Trains ``configs/vicreg.py`` (two-view VICReg: the views graph) and
``configs/vicreg_supervised_graph.py`` (the VICReg graph loss on the
same-label batch graph) with the ``theory`` evaluator every ``--every``
steps (`ssljax.evaluators.theory`: each run against its own graph), unless
``DIR/<config>/results.json`` exists, then plots the Gram gap, the largest
principal angle and the share of ‖Z‖² in G's top eigenspace against the
step (``theory_diagnostics.png``) and writes every plotted number
(``theory_diagnostics.json``). ``--fast`` runs the smoke variants.
"""

import argparse
import json
import os
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = {"vicreg": "SSL graph (views)",
        "vicreg_supervised_graph": "supervised graph"}
METRICS = {"theory/gram_gap": "relative Gram gap ‖ZZᵀ − Z*Z*ᵀ‖/‖Z*Z*ᵀ‖",
           "theory/principal_angle_max": "largest principal angle (rad)",
           "theory/top_eigenspace_fraction": "share of ‖Z‖² in G's top "
                                             "eigenspace"}


def train(name: str, out: str, epochs: float, every: int, fast: bool) -> str:
  """Runs main for one config unless its results.json exists; its workdir."""
  workdir = os.path.join(out, name)
  if os.path.exists(os.path.join(workdir, "results.json")):
    return workdir
  config = os.path.join(REPO, "configs", f"{name}.py") + (":smoke" if fast
                                                          else "")
  cmd = [sys.executable, "-m", "ssljax.main", f"--config={config}",
         f"--workdir={workdir}", f"--config.evals.theory.every_steps={every}"]
  if not fast:
    cmd += [f"--config.epochs={epochs}", "--config.eval_inputs.baselines=False"]
  print(" ".join(cmd), flush=True)
  subprocess.run(cmd, cwd=REPO, check=True)
  return workdir


def curves(workdir: str) -> dict:
  """{metric: [[step, value], ...]} of the theory evaluator's lines."""
  out = {m: [] for m in METRICS}
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    for line in f:
      row = json.loads(line)
      for m in METRICS:
        if m in row and [row["step"], row[m]] not in out[m]:
          out[m].append([row["step"], row[m]])
  return out


def plot(result: dict, out: str) -> str:
  """One panel per metric, one line per run; returns the PNG path."""
  fig, axes = plt.subplots(1, len(METRICS), figsize=(5 * len(METRICS), 3.6))
  for ax, (metric, label) in zip(axes, METRICS.items()):
    for name, title in RUNS.items():
      points = result[name][metric]
      if points:
        ax.plot(*zip(*points), marker=".", label=title)
    ax.set_title(label, fontsize=9)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
  axes[0].legend(fontsize=8)
  fig.tight_layout()
  path = os.path.join(out, "theory_diagnostics.png")
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", required=True)
  parser.add_argument("--epochs", type=float, default=1.0)
  parser.add_argument("--every", type=int, default=25,
                      help="steps between two theory diagnostics")
  parser.add_argument("--fast", action="store_true", help="smoke variants")
  args = parser.parse_args()
  os.makedirs(args.out, exist_ok=True)
  every = 3 if args.fast else args.every
  result = {name: curves(train(name, args.out, args.epochs, every, args.fast))
            for name in RUNS}
  with open(os.path.join(args.out, "theory_diagnostics.json"), "w") as f:
    json.dump(result, f, indent=2)
  print(plot(result, args.out))
  for name, title in RUNS.items():
    last = {m.split("/")[1]: round(v[-1][1], 4)
            for m, v in result[name].items() if v}
    print(f"{title}: {last}")


if __name__ == "__main__":
  main()
