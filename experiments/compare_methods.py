"""Every method config on Fashion-MNIST with one training budget and seed.

    python experiments/compare_methods.py --out runs/compare --epochs 2

Runs ``python -m ssljax.main --config configs/<name>.py --config.epochs=E``
for each config in CONFIGS (sequentially, one workdir each under --out; a run
whose results.json exists is not repeated, and an interrupted one resumes from
its checkpoint), then writes ``table.md`` and ``table.json``: the probe,
k-NN and online-probe accuracy, RankMe and the times of every config with a results.json under
--out, next to the raw-pixel and random-init baselines (and ``evals.md``:
every evaluator's final value per run), which are measured once by the vicreg
run (they do not depend on the loss). ``--configs wmse`` runs one config and
keeps the others' rows:

    python experiments/compare_methods.py --out runs/compare --epochs 1 --configs wmse
"""

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = ("vicreg", "simclr", "barlow_twins", "spectral_contrastive",
           "frossl", "wmse", "byol", "simsiam", "mocov3", "dino", "nnclr",
           "vicreg_supervised_graph", "vicreg_mixed_graph",
           # "<config>:<variant>": LeJEPA on the same small CNN as the others.
           "lejepa:cnn")
BASELINE_RUN = "vicreg"  # the run that also probes the two baselines


def run_config(name: str, out: str, epochs: int, variant: str | None,
               extra: list[str]) -> dict:
  """Runs main for one config unless its results.json exists; returns it."""
  workdir = os.path.join(out, run_name(name))
  results_path = os.path.join(workdir, "results.json")
  if not os.path.exists(results_path):
    file, _, own = name.partition(":")
    config = os.path.join(REPO, "configs", f"{file}.py")
    words = ",".join(w for w in (own, variant) if w)
    cmd = [sys.executable, "-m", "ssljax.main",
           f"--config={config}{':' + words if words else ''}",
           f"--workdir={workdir}", f"--config.epochs={epochs}",
           f"--config.eval_inputs.baselines={name == BASELINE_RUN}", *extra]
    print(" ".join(cmd), flush=True)
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(out, f"{run_name(name)}.log"), "w") as log:
      subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                     check=True)
  with open(results_path) as f:
    return json.load(f)


def run_name(name: str) -> str:
  """Workdir name of a CONFIGS entry ("lejepa:cnn" -> "lejepa_cnn")."""
  return name.replace(":", "_")


def finished_runs(out: str) -> dict:
  """results.json of every config in CONFIGS that has one under out."""
  results = {}
  for name in CONFIGS:
    path = os.path.join(out, run_name(name), "results.json")
    if os.path.exists(path):
      with open(path) as f:
        results[name] = json.load(f)
  return results


def _cell(r: dict, key: str, fmt: str = ".4f") -> str:
  """``r["evals"][key]`` ("<evaluator>/<metric>") formatted, or "" if the
  run has no such value."""
  value = r.get("evals", {}).get(key)
  return "" if value is None else format(value, fmt)


def step_seconds(r: dict) -> float:
  """Seconds per train step (the steps alone, without evaluators and
  checkpoint saves, when results.json times them)."""
  return r.get("seconds", {}).get("train_steps", r["train_seconds"]) / max(
      r["steps"], 1)


def table(results: dict) -> str:
  lines = ["| config | method | loss form | graph | probe | k-NN | online "
           "probe | RankMe | train s | wall s |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for name, r in results.items():
    lines.append(
        f"| {name} | {r['method']} | {r.get('loss_form', '')} | "
        f"{r.get('graph', '')} | {_cell(r, 'probe/test_accuracy')} | "
        f"{_cell(r, 'knn/test_accuracy')} | "
        f"{_cell(r, 'online_probe/test_accuracy')} | "
        f"{_cell(r, 'rankme/rankme', '.1f')} | "
        f"{_cell(r, 'sigreg/sigreg_z', '.1f')} | "
        f"{step_seconds(r):.2f} | "
        f"{r['train_seconds']:.0f} | {r['wall_seconds']:.0f} |")
  base = results.get(BASELINE_RUN)
  if base is None:
    lines.append(f"(no baselines: run --configs {BASELINE_RUN} to probe them)")
    return "\n".join(lines) + "\n"
  lines.append(f"| raw pixels (baseline) | | | | "
               f"{_cell(base, 'raw_pixel_probe/test_accuracy')} | | | | | | | |")
  lines.append(f"| random-init encoder (baseline) | | | | "
               f"{_cell(base, 'random_init_probe/test_accuracy')} | | | | | | | |")
  return "\n".join(lines) + "\n"


def run(cfg) -> dict:
  """Trains each config of `cfg.configs` and collects the finished runs.

  Args:
    cfg: namespace with out, epochs, configs, variant, extra (see main).

  Returns:
    {name: final metrics} of every finished run under cfg.out.
  """
  os.makedirs(cfg.out, exist_ok=True)
  for name in cfg.configs:
    run_config(name, cfg.out, cfg.epochs, cfg.variant, cfg.extra)
  return finished_runs(cfg.out)


def evals_table(results: dict) -> str:
  """Every scalar evaluator value (rows) of every run (columns)."""
  names = sorted({k for r in results.values() for k, v in r.get(
      "evals", {}).items() if not isinstance(v, list)})
  lines = ["| evaluator / metric | " + " | ".join(results) + " |",
           "|---|" + "---|" * len(results)]
  for name in names:
    cells = [_cell(r, name) for r in results.values()]
    lines.append(f"| {name} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def plot(result: dict, out) -> None:
  """Writes table.json, table.md (the comparison table) and evals.md (every
  evaluator's final value per run) under `out`."""
  with open(os.path.join(out, "table.json"), "w") as f:
    json.dump(result, f, indent=2)
  text = table(result)
  with open(os.path.join(out, "table.md"), "w") as f:
    f.write(text)
  with open(os.path.join(out, "evals.md"), "w") as f:
    f.write(evals_table(result))
  print(text)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", required=True, help="output directory")
  parser.add_argument("--epochs", type=int, default=2)
  parser.add_argument("--configs", nargs="*", default=list(CONFIGS),
                      help="configs to run (default: all); e.g. --configs wmse")
  parser.add_argument("--variant", default=None, help="e.g. smoke")
  parser.add_argument("--extra", action="append", default=[],
                      help="one more --config.x=y override for every run;"
                      " repeat as --extra=--config.x=y --extra=--config.z=w")
  args = parser.parse_args()
  unknown = sorted(set(args.configs) - set(CONFIGS))
  if unknown:
    parser.error(f"unknown configs {unknown}; expected some of {CONFIGS}")
  plot(run(args), args.out)


if __name__ == "__main__":
  main()
