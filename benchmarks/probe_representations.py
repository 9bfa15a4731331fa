"""One run's ViT encoder probed on several representations, and its random init.

    python benchmarks/probe_representations.py runs/mae_cpu \\
        --representations cls cls_last4 cls_last4_avg --random-init

The representation (``model.encoder_kwargs.representation``,
`ssljax.models.vit.REPRESENTATIONS`) changes what the evaluators read, not
what a method trains, so one trained encoder can be probed on each of them
without training it again. For each representation this prints one JSON
line: the run's linear probe (`ssljax.probes.linear_probe`, the options of
the run's ``evals.probe``, and of its ``evals.random_init_probe`` for the
random init) on the train and test splits, with its
``--cv-folds``-fold cross-validated accuracy on the train split
(`ssljax.cross_validation.cross_validated_probe`), which is what a recipe
should be chosen by. The features are those the evaluators compute
(`ssljax.pretrained.Pretrained.embed_source`), so the run's own
representation reproduces its ``final_evals.json``'s probe. With
``--random-init`` the same for the run's encoder at step 0: the
initialisation of its seed, as the run's random-init probe draws it.

Exit status 2 with one line on stderr for a run that cannot be probed so
(not a ViT, an unknown representation, a split without labels).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import jax
import optax

from ssljax import cross_validation, data, methods, models, pretrained
from ssljax import probes
from ssljax import train, train_state
from ssljax.data import splits


def _with_representation(run: pretrained.Pretrained, representation: str,
                         random_init: bool) -> pretrained.Pretrained:
  """``run`` whose method reads ``representation`` (and, with
  ``random_init``, whose parameters are the run's step-0 ones)."""
  config = run.config.copy_and_resolve_references()
  config.model.encoder_kwargs.representation = representation
  method = methods.build(config)
  params, method_state, step = run.params, run.method_state, run.step
  if random_init:
    spec = train.batch_spec(config, (run.view_size, run.view_size,
                                     run.channels or config.dataset.channels))
    state = train_state.create_train_state(
        method, optax.identity(), jax.random.key(config.seed), spec)
    params, method_state, step = state.params, state.method_state, 0
  return dataclasses.replace(run, config=config, method=method, params=params,
                             method_state=method_state, step=step)


def probe_representations(workdir: str, representations, *,
                          random_init: bool = False, cv_folds: int = 5,
                          out=print) -> list[dict]:
  """Probes the encoder of ``workdir`` on each representation.

  Args:
    workdir: a run of ``python -m ssljax.main`` with a ViT encoder.
    representations: names of `ssljax.models.vit.REPRESENTATIONS`.
    random_init: also probe the run's step-0 encoder on each.
    cv_folds: k of the cross-validated probe (>= 2), 0 for none.
    out: called with each result's JSON line.

  Returns:
    one dict per (encoder, representation): ``representation``,
    ``encoder`` ("trained" at the loaded step, or "random_init"), ``dim``
    (D of the features), ``test_accuracy``, ``val_accuracy``, ``l2`` and,
    with ``cv_folds``, ``cv_accuracy`` and ``cv_std`` (fractions in
    [0, 1]), ``seconds``.

  Raises:
    ValueError: a run whose encoder is not a ViT, an unknown
      representation, a split without labels, cv_folds 1 or negative.
    ssljax.pretrained.PretrainedLoadError: as `ssljax.pretrained.load`.
  """
  unknown = [r for r in representations if r not in models.vit.REPRESENTATIONS]
  if unknown:
    raise ValueError(f"unknown representation(s) {unknown}; expected some of "
                     f"{models.vit.REPRESENTATIONS}")
  if cv_folds == 1 or cv_folds < 0:
    raise ValueError(f"cv_folds must be 0 (none) or >= 2, got {cv_folds}")
  run = pretrained.load(workdir)
  if not isinstance(run.encoder, models.VisionTransformer):
    raise ValueError(f"the encoder of {workdir} is a "
                     f"{type(run.encoder).__name__}, not a ViT: it has no "
                     "representation to choose")
  config = run.config
  open_ = lambda split: splits.open_split(
      config.dataset.name, split, data_dir=config.dataset.get("data_dir"),
      channels=run.channels or config.dataset.channels)
  train_source = open_(config.dataset.train_split)
  test_source = open_(config.dataset.test_split)
  for name, source in (("train", train_source), ("test", test_source)):
    if (data.source_labels(source) < 0).any():
      raise ValueError(f"the {name} split of {workdir} has images without "
                       "labels: the probe needs both splits labelled")
  results = []
  for random in ([False, True] if random_init else [False]):
    # The options of the run's evaluator of that encoder.
    options = config.evals.get(
        "random_init_probe" if random else "probe") or {}
    probe_options = dict(
        l2_grid=tuple(options.get("l2_grid", probes.DEFAULT_L2_GRID)),
        val_fraction=options.get("val_fraction", 0.1),
        max_iter=options.get("max_iter", 100),
        max_search_rows=options.get("search_rows", 20000), seed=config.seed)
    for representation in representations:
      start = time.time()
      encoder = _with_representation(run, representation, random)
      batch = config.eval_inputs.batch_size  # the evaluators' batches
      xtr, ytr = encoder.embed_source(train_source, batch_size=batch)
      xte, yte = encoder.embed_source(test_source, batch_size=batch)
      fit = probes.linear_probe(xtr, ytr, xte, yte, **probe_options)
      result = dict(representation=representation,
                    encoder="random_init" if random else "trained",
                    step=encoder.step, dim=int(xtr.shape[1]),
                    test_accuracy=fit["test_accuracy"],
                    val_accuracy=fit["val_accuracy"], l2=fit["l2"])
      if cv_folds:
        cv = cross_validation.cross_validated_probe(
            xtr, ytr, folds=cv_folds, **probe_options)
        result.update(cv_accuracy=cv["cv_accuracy"], cv_std=cv["cv_std"])
      result["seconds"] = round(time.time() - start, 1)
      out(json.dumps(result))
      results.append(result)
  return results


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("workdir")
  parser.add_argument("--representations", nargs="+", required=True)
  parser.add_argument("--random-init", action="store_true")
  parser.add_argument("--cv-folds", type=int, default=5)
  args = parser.parse_args(argv)
  try:
    probe_representations(args.workdir, args.representations,
                          random_init=args.random_init,
                          cv_folds=args.cv_folds)
  except (ValueError, pretrained.PretrainedLoadError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
