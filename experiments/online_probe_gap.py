"""Why a run's online probe is below its offline probe: a decomposition.

    python experiments/online_probe_gap.py runs/methods_benchmark/vicreg/seed0

Reads a finished run of ``python -m ssljax.main`` (its ``results.json`` and
its last checkpoint) and refits the online probe, with the run's own recipe
(`ssljax.online_probe`: AdamW of the run's options, batch standardisation,
one step per train batch, as many steps as the run took), on the *final*
encoder, which no longer moves:

* ``augmented``: on the representation the evaluators probe of the first
  global view of each train batch, the run's augmentation and batches
  replayed (`ssljax.inputs.train_iterator`, `ssljax.data.device_views`
  keyed by (seed, step), as in the train step);
* ``clean``: on the evaluated features of random train images (the
  evaluators' centre crops), the same number of steps and batch size.

Each is scored on the test features as the `online_probe` evaluator scores
the run's probe. Then, in accuracy: ``drift`` = augmented − online (what the
probe loses because the encoder moved under it), ``augmentation`` = clean −
augmented (training on augmented views, scoring on clean ones), and
``rest`` = offline − clean (a 1-layer AdamW fit of a few hundred steps
against the offline probe's L-BFGS fit with a chosen L2). Prints one JSON
object; ``--out FILE`` also writes it.

The refits score the probe's last weights, as the online probe was scored
when this decomposition was made; it now scores their moving average
(``ema_decay``) and trains on clean images by default
(`experiments/online_probe_recipes.py` measured why).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import jax
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from ssljax import data, inputs, online_probe, pretrained  # noqa: E402
from ssljax.evaluators import online_probe as online_eval  # noqa: E402


def _fit(tx, dim, num_classes, batches):
  """The online probe's state after one `online_probe.update` per (h, y)."""
  probe = online_probe.initial_state(dim, num_classes, tx)
  step = jax.jit(lambda p, h, y: online_probe.update(p, h, y, tx))
  for h, y in batches:
    probe, _ = step(probe, h, y)
  return probe


def decompose(workdir: str) -> dict:
  """The decomposition of the module docstring for one run.

  Args:
    workdir: a finished run's folder (results.json, config.json and a
      checkpoint; its config has an ``online_probe`` evals entry).

  Returns:
    {"online", "offline", "augmented", "clean", "drift", "augmentation",
    "rest", "steps", "batch_size"}: accuracies in [0, 1] and their
    differences, the steps and the batch the refits used.

  Raises:
    ValueError: the run has no online probe or no recorded accuracies.
    ssljax.pretrained.PretrainedLoadError: no readable checkpoint.
  """
  # Absolute: orbax reads no checkpoint metadata under a relative path.
  workdir = os.path.abspath(workdir)
  with open(os.path.join(workdir, "results.json")) as f:
    results = json.load(f)
  evals = results.get("evals", {})
  online = evals.get("online_probe/test_accuracy")
  offline = evals.get("probe/test_accuracy")
  if online is None or offline is None:
    raise ValueError(f"{workdir}: results.json has no online_probe and "
                     "probe test accuracy")
  model = pretrained.load(workdir)
  config = model.config
  options = online_probe.options(config)
  if options is None:
    raise ValueError(f"{workdir}: the run has no online probe")
  tx = online_probe.create_optimizer(config)
  train_source, test_source = inputs.open_sources(config)
  x_test, y_test = model.embed_source(test_source)
  dim, num_classes = x_test.shape[1], int(train_source.num_classes)
  steps, batch = int(results["steps"]), int(config.batch_size)
  spec = data.view_spec(config.views)
  represent = jax.jit(lambda x: model.method.representation(
      model.params, model.method_state, x))

  def augmented():
    host = inputs.train_iterator(config, train_source, spec, start_step=0,
                                 num_steps=steps, process_index=0,
                                 process_count=1)
    for step, host_batch in enumerate(host):
      device = {k: jax.numpy.asarray(v) for k, v in host_batch.items()
                if isinstance(v, np.ndarray)}
      key = jax.random.fold_in(jax.random.key(config.seed), step)
      views = data.device_views(device, key, spec)
      yield represent(views[0]), device["labels"]

  x_train, y_train = model.embed_source(train_source)
  rng = np.random.default_rng(config.seed)

  def clean():
    for _ in range(steps):
      rows = rng.integers(0, len(x_train), batch)
      yield x_train[rows], y_train[rows]

  score = lambda probe: online_eval.accuracy(probe["params"], x_test, y_test,
                                             probe["stats"])
  aug = score(_fit(tx, dim, num_classes, augmented()))
  cln = score(_fit(tx, dim, num_classes, clean()))
  return {"online": online, "offline": offline, "augmented": aug,
          "clean": cln, "drift": aug - online, "augmentation": cln - aug,
          "rest": offline - cln, "steps": steps, "batch_size": batch}


def main(argv=None) -> int:
  """Command line: one run's decomposition as JSON on stdout."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("workdir")
  parser.add_argument("--out", default=None)
  args = parser.parse_args(argv)
  found = decompose(args.workdir)
  text = json.dumps(found, indent=2)
  print(text)
  if args.out:
    with open(args.out, "w") as f:
      f.write(text + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
