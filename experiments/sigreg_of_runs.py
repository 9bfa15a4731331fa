"""The SIGReg evaluator on the final checkpoints of finished runs.

    python experiments/sigreg_of_runs.py --runs runs/compare1 --out runs/compare1_sigreg

For every run under ``--runs`` (a folder with ``config.json``, a
``results.json`` and ``checkpoints/``, e.g. the workdirs of
experiments/compare_methods.py), copies its config and latest checkpoint to
``--out/<run>`` and evaluates there with only the ``sigreg`` evaluator
(`ssljax.evaluators.sigreg`, the defaults of configs/common.py; and the
run's online probe, whose state the checkpoint holds), so runs
made before the evaluator existed get the same number as new ones. The
run's own files are left as they are. Writes ``--out/sigreg.md``: one row
per run, the statistic of z raw and standardised.
"""

import argparse
import json
import os
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import ml_collections  # noqa: E402

from configs import common  # noqa: E402
from ssljax import train  # noqa: E402

# Fields that JSON turns from tuples into lists.
_TUPLES = ("views.crop_scale", "views.local_crop_scale", "views.crop_ratio",
           "views.blur_sigma", "views.erase_scale", "model.projector",
           "model.predictor", "model.encoder_kwargs.channels")


def _config_of(run: str) -> ml_collections.ConfigDict:
  with open(os.path.join(run, "config.json")) as f:
    config = ml_collections.ConfigDict(json.load(f))
  for path in _TUPLES:
    *parents, leaf = path.split(".")
    node = config
    for part in parents:
      node = node[part] if part in node else None
      if node is None:
        break
    if node is not None and leaf in node and isinstance(node[leaf], list):
      node[leaf] = tuple(node[leaf])
  return config


def sigreg_of_run(run: str, out: str) -> dict:
  """{"sigreg/sigreg_z": ..., "sigreg/sigreg_z_standardized": ...} of the
  latest checkpoint of ``run`` (evaluated under ``out``)."""
  config = _config_of(run)
  ckpts = os.path.join(run, "checkpoints")
  latest = max(int(d) for d in os.listdir(ckpts) if d.isdigit())
  target = os.path.join(out, "checkpoints", str(latest))
  if not os.path.exists(target):
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copytree(os.path.join(ckpts, str(latest)), target)
  entries = {"sigreg": common.get_config().evals.sigreg}
  # The online probe's state is part of the checkpoint: keep its entry so
  # the restored state has the saved structure.
  for name, entry in config.evals.items():
    if entry is not None and entry.get("type") == "online_probe":
      entries[name] = entry
  config.evals = ml_collections.ConfigDict(entries)
  config.eval_inputs.baselines = False
  return train.train_and_evaluate(config, out)["evals"]


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--runs", required=True, help="folder of run workdirs")
  parser.add_argument("--out", required=True)
  args = parser.parse_args()
  rows = ["| run | method | sigreg_z | sigreg_z_standardized |",
          "|---|---|---|---|"]
  for name in sorted(os.listdir(args.runs)):
    run = os.path.join(args.runs, name)
    if not os.path.exists(os.path.join(run, "results.json")):
      continue
    evals = sigreg_of_run(run, os.path.join(args.out, name))
    method = _config_of(run).method
    rows.append(f"| {name} | {method} | {evals['sigreg/sigreg_z']:.1f} | "
                f"{evals['sigreg/sigreg_z_standardized']:.1f} |")
    print(rows[-1], flush=True)
  with open(os.path.join(args.out, "sigreg.md"), "w") as f:
    f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
  main()
