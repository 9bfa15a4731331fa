"""Semi-supervised fine-tuning of a finished run's encoder (1 % and 10 % labels).

    python experiments/fine_tune.py --run runs/vicreg --out runs/vicreg_ft

Copies the run's config and latest checkpoint to ``--out`` and evaluates the
encoder there with only the ``fine_tune`` evaluator
(`ssljax.evaluators.fine_tune`: the encoder and a linear head trained on a
class-balanced fraction of the labelled train rows, Nesterov SGD), so the
run's own files are left as they are. Writes ``--out/results.json``
(``evals`` holds ``fine_tune/<pct>pct_test_accuracy``) and prints the
accuracies. ``--fast`` runs 20 steps (a smoke check).
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


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--run", required=True, help="a finished run's workdir")
  parser.add_argument("--out", required=True)
  parser.add_argument("--steps", type=int, default=1000)
  parser.add_argument("--fractions", type=float, nargs="+",
                      default=[0.01, 0.1])
  parser.add_argument("--learning_rate", type=float, default=0.05)
  parser.add_argument("--fast", action="store_true")
  args = parser.parse_args()
  with open(os.path.join(args.run, "config.json")) as f:
    config = ml_collections.ConfigDict(json.load(f))
  ckpts = os.path.join(args.run, "checkpoints")
  latest = max(int(d) for d in os.listdir(ckpts) if d.isdigit())
  os.makedirs(os.path.join(args.out, "checkpoints"), exist_ok=True)
  target = os.path.join(args.out, "checkpoints", str(latest))
  if not os.path.exists(target):
    shutil.copytree(os.path.join(ckpts, str(latest)), target)
  # Tuples come back from JSON as lists.
  for path in ("views.crop_scale", "views.local_crop_scale", "views.crop_ratio",
               "model.projector", "model.predictor"):
    parent, leaf = path.split(".")
    if leaf in config[parent]:  # predictor: BYOL, SimSiam, MoCo v3, NNCLR
      config[parent][leaf] = tuple(config[parent][leaf])
  config.evals = ml_collections.ConfigDict()
  config.evals.fine_tune = common.evals_entry(
      "fine_tune", fractions=tuple(args.fractions),
      steps=20 if args.fast else args.steps,
      learning_rate=args.learning_rate)
  config.eval_inputs.baselines = False
  results = train.train_and_evaluate(config, args.out)
  print(json.dumps({k: v for k, v in results["evals"].items()}, indent=2))


if __name__ == "__main__":
  main()
