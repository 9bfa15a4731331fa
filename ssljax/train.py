"""Pretraining and evaluation loop.

One top-to-bottom ``train_and_evaluate``: data → mesh → model and optimiser →
restore → sharded jit train step → checkpoints and metrics → linear probe.
Parameters are replicated and the batch is sharded over a 1-D device mesh
("data"); because the step is a single ``jax.jit`` over global arrays, the loss
and BatchNorm see statistics of the whole global batch, not of one device.
"""

import functools
import json
import os
import sys
import time
from typing import Any

from flax.training import train_state
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding, PartitionSpec as P
import tqdm

from ssljax import (checkpoints, config_validation, data, evaluate, inputs,
                    methods, models, monitor)
# Re-exported (train.__all__): the data side of a config.
from ssljax.inputs import (dataset_graph, known_labels, source_labels,
                           uses_edges, uses_labels)
from ssljax.evaluate import extract_features  # re-exported (train.__all__)

__all__ = ["TrainState", "create_learning_rate_fn", "create_optimizer",
           "create_network", "create_train_state", "train_step",
           "sharded_train_step", "uses_labels", "uses_edges", "dataset_graph",
           "known_labels", "make_mesh",
           "extract_features", "train_and_evaluate"]


class TrainState(train_state.TrainState):
  """Flax TrainState plus BatchNorm running statistics."""
  batch_stats: Any


# ---------------------------------------------------------------- optimiser --
def create_learning_rate_fn(optim: ml_collections.ConfigDict, batch_size: int,
                            steps_per_epoch: int, total_steps: int):
  """Linear warm-up then cosine decay; peak lr = learning_rate · batch/256."""
  peak = optim.learning_rate * batch_size / 256
  warmup = min(int(optim.warmup_epochs * steps_per_epoch), total_steps - 1)
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=peak, warmup_steps=max(warmup, 0),
      decay_steps=total_steps, end_value=peak * optim.end_lr_factor)


def _decay_mask(params):
  # Weight decay and LARS trust ratios on kernels only, as in VICReg/BYOL.
  return jax.tree.map(lambda p: p.ndim > 1, params)


def create_optimizer(optim: ml_collections.ConfigDict, learning_rate_fn):
  """optax AdamW or LARS from the config. Raises ValueError on other names."""
  if optim.name == "adamw":
    return optax.adamw(learning_rate_fn, weight_decay=optim.weight_decay,
                       mask=_decay_mask)
  if optim.name == "lars":
    return optax.lars(learning_rate_fn, weight_decay=optim.weight_decay,
                      weight_decay_mask=_decay_mask, trust_ratio_mask=_decay_mask,
                      trust_coefficient=optim.trust_coefficient,
                      momentum=optim.momentum)
  raise ValueError(f"unknown optimiser {optim.name!r}; expected 'adamw' or 'lars'")


# -------------------------------------------------------------------- model --
def create_network(config: ml_collections.ConfigDict) -> models.SSLNetwork:
  dtypes = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
  if config.model.dtype not in dtypes:
    raise ValueError(f"model.dtype must be one of {sorted(dtypes)}, got "
                     f"{config.model.dtype!r}")
  return models.make_network(config.model.encoder,
                             config.model.encoder_kwargs.to_dict(),
                             config.model.projector, dtypes[config.model.dtype])


def create_train_state(network, tx, key, image_shape) -> TrainState:
  """Initialises parameters and optimiser state from ``key``."""
  variables = network.init(key, jnp.zeros((2, *image_shape), jnp.float32),
                           train=False)
  return TrainState.create(apply_fn=network.apply, params=variables["params"],
                           batch_stats=variables.get("batch_stats", {}), tx=tx)


# --------------------------------------------------------------- train step --
def train_step(state: TrainState, batch, *, method: str, loss_kwargs: dict,
               graph_kwargs: dict | None = None,
               spec: data.ViewSpec | None = None, seed: int = 0):
  """One SGD step on a batch: views made on the devices, then the loss.

  The views are made here (`ssljax.data.device_views`), keyed by (seed,
  state.step), so they are the same after a resume and on any mesh. Each
  view goes through the network on its own, as in the official VICReg
  code: BatchNorm normalises per view (global and local crops differ in
  size), and the batch axis stays sharded.

  Args:
    state: TrainState (replicated).
    batch: dict from `ssljax.inputs.to_device_batch`: "images" or "views"
      (uint8, cropped or to crop) or "ready_views" (float32 (V, B, H, W, C)),
      with "labels" (B,) int32 when the loss graph comes from labels and
      "edge_info" (3, 2, B) float32 for the VIC² estimate on a dataset graph.
      An array (V, B, H, W, C) of ready views, or a pair (views, labels or
      edge info), is accepted too.
    method, loss_kwargs: the loss, as in ``ssljax.methods.loss_terms``.
    graph_kwargs: ``batch_graph`` options ("kind", "alpha", "normalize");
      None means the V-view SSL graph.
    spec: the run's `ssljax.data.ViewSpec` (None: ready views only).
    seed: the run's seed.

  Returns:
    (new state, dict of scalar metrics: the loss terms, "grad_norm").
  """
  on_edges = (graph_kwargs or {}).get("kind") in methods.DATASET_GRAPH_KINDS
  if not isinstance(batch, dict):
    views, extra = batch if isinstance(batch, (tuple, list)) else (batch, None)
    batch = {"ready_views": views}
    if extra is not None:
      batch["edge_info" if on_edges else "labels"] = extra
  key = jax.random.fold_in(jax.random.key(seed), state.step)
  views = data.device_views(batch, key, spec or data.ViewSpec())

  def loss_fn(params):
    batch_stats, z_views = state.batch_stats, []
    for x in views:  # V is static: unrolled
      (_, z), updates = state.apply_fn(
          {"params": params, "batch_stats": batch_stats}, x, train=True,
          mutable=["batch_stats"])
      batch_stats = updates["batch_stats"]
      z_views.append(z)
    terms = methods.loss_terms(method, jnp.stack(z_views),
                               labels=batch.get("labels"),
                               graph=graph_kwargs,
                               edge_info=batch.get("edge_info"), **loss_kwargs)
    return terms["loss"], (terms, batch_stats)

  grads, (terms, batch_stats) = jax.grad(loss_fn, has_aux=True)(state.params)
  state = state.apply_gradients(grads=grads, batch_stats=batch_stats)
  return state, {**terms, "grad_norm": optax.tree.norm(grads)}


def _graph_kwargs(config: ml_collections.ConfigDict) -> dict:
  return {"kind": config.graph.kind, "alpha": config.graph.alpha,
          "normalize": config.graph.normalize}


def sharded_train_step(config: ml_collections.ConfigDict, mesh):
  """``train_step`` jitted: state replicated on ``mesh``, the batch as placed.

  The batch arrays keep the shardings they come with (global arrays sharded
  on their batch axis, `ssljax.inputs.to_device_batch`). The input state is
  donated (its buffers are reused for the output).
  """
  replicated = NamedSharding(mesh, P())
  return jax.jit(
      functools.partial(train_step, method=config.method,
                        loss_kwargs=config.loss.to_dict(),
                        graph_kwargs=_graph_kwargs(config),
                        spec=data.view_spec(config.views), seed=config.seed),
      out_shardings=(replicated, replicated), donate_argnums=0)


def make_mesh(devices=None):
  """1-D mesh ("data",) over ``devices`` (default: all), with Auto axes so XLA
  propagates the batch sharding through reshapes and reductions."""
  devices = jax.devices() if devices is None else devices
  return jax.sharding.Mesh(np.asarray(devices), ("data",),
                           axis_types=(jax.sharding.AxisType.Auto,))


# --------------------------------------------------------------------- main --
def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Pretrains ``config.method`` and probes the encoder; writes under workdir.

  Writes ``checkpoints/`` (orbax; a rerun with the same workdir resumes from
  the latest), ``metrics.jsonl``, ``tensorboard/``, ``config.json`` and
  ``results.json`` (returned as a dict; ``seconds`` holds the wall time of
  each phase: setup, train_steps, checkpoint_save, features, probe, knn,
  baselines).

  Raises:
    ssljax.config_validation.ConfigError: a config field has a bad type,
      range or name (a ValueError; one line naming each field).
    ssljax.data.DatasetUnavailableError: the dataset is not available.
    FloatingPointError: the loss or a gradient became non-finite.
    ssljax.checkpoints.CheckpointRestoreError: checkpoints exist under
      workdir but none restores (each step and its reason in the message).
  """
  start_time = time.time()
  seconds = {}  # wall time of each phase, results.json "seconds"
  # Every field, before anything is loaded or written (one-line ConfigError).
  config_validation.validate(config)
  os.makedirs(workdir, exist_ok=True)
  if jax.process_index() == 0:
    with open(os.path.join(workdir, "config.json"), "w") as f:
      f.write(config.to_json(indent=2))

  # Data.
  train_source, test_source = inputs.open_sources(config)
  spec = data.view_spec(config.views)
  steps_per_epoch = data.steps_per_epoch(len(train_source), config.batch_size)
  total_steps = (config.num_steps if config.num_steps > 0
                 else int(config.epochs * steps_per_epoch))

  # Mesh: batch sharded over every device, parameters replicated.
  mesh = make_mesh()
  replicated = NamedSharding(mesh, P())
  if config.batch_size % jax.device_count():
    raise ValueError(f"batch_size {config.batch_size} is not divisible by the "
                     f"{jax.device_count()} devices")

  # Model, optimiser, state; the network is initialised at the global view size.
  channels = (train_source.image_shape[2] if train_source.image_shape
              else config.dataset.channels)
  view_shape = (spec.sizes(train_source.image_shape)[0],) * 2 + (channels,)
  network = create_network(config)
  lr_fn = create_learning_rate_fn(config.optim, config.batch_size,
                                  steps_per_epoch, total_steps)
  tx = create_optimizer(config.optim, lr_fn)
  # A pure function of the seed: rebuilt for the random-init baseline because
  # the train step donates (frees) the state it is given.
  initial_state = lambda: jax.device_put(create_train_state(
      network, tx, jax.random.key(config.seed), view_shape), replicated)

  # Checkpoints: resume from the latest if there is one.
  ckpt = ocp.CheckpointManager(
      os.path.abspath(os.path.join(workdir, "checkpoints")),
      # Orbax writes each step into "<step>.orbax-checkpoint-tmp" and renames
      # it when complete, so a kill never leaves a half-written "<step>";
      # latest_step() skips the leftovers and this option deletes them.
      options=ocp.CheckpointManagerOptions(max_to_keep=config.keep_checkpoints,
                                           cleanup_tmp_directories=True))
  # The newest intact step; damaged newer steps are moved aside with a
  # one-line warning each (ssljax.checkpoints).
  try:
    state, start_step, _ = checkpoints.restore_latest(
        ckpt, initial_state(), warn=lambda line: print(f"warning: {line}",
                                                       file=sys.stderr,
                                                       flush=True))
  except checkpoints.CheckpointRestoreError:
    ckpt.close()
    raise
  if start_step and jax.process_index() == 0:
    print(f"resuming {workdir} from step {start_step}", flush=True)
  writer = monitor.MetricWriter(workdir, start_step)

  step_fn = sharded_train_step(config, mesh)

  # Training loop.
  graph, graph_info = None, {}
  if inputs.uses_edges(config):
    # A graph over the whole train set, O(edges) memory; each step draws
    # batch_size edges, whose endpoints are the two views.
    graph_start = time.time()
    graph = inputs.dataset_graph(config, train_source.images,
                                 inputs.source_labels(train_source))
    graph_info = {"graph_nodes": graph.n, "graph_entries": graph.num_entries,
                  "graph_edges": graph.num_edges,
                  "graph_seconds": time.time() - graph_start}
    if jax.process_index() == 0:
      print(f"dataset graph {config.graph.kind}: {graph_info}", flush=True)
  batches = inputs.train_iterator(
      config, train_source, spec, start_step=start_step,
      num_steps=total_steps - start_step, process_index=jax.process_index(),
      process_count=jax.process_count(), graph=graph)
  train_start = time.time()
  seconds["setup"] = train_start - start_time  # data, graph, state, restore
  seconds["checkpoint_save"] = 0.0
  bar = tqdm.tqdm(range(start_step, total_steps), initial=start_step,
                  total=total_steps, desc=config.method, unit="step",
                  disable=jax.process_index() != 0)
  # Every step's metrics are checked for NaN/Inf, one step late: the check of
  # step s is queued behind step s + 1, so the host never idles waiting for
  # the device. Log and checkpoint steps are checked before anything is
  # written, so no file ever holds a non-finite step.
  unchecked = None  # (step, metrics, finite flag) not yet read by the host
  skipped = 0  # unreadable images already reported
  try:
    for step in bar:
      batch = inputs.to_device_batch(next(batches), mesh)
      state, metrics = step_fn(state, batch)
      done = step + 1
      if unchecked is not None and not bool(unchecked[2]):
        monitor.check_metrics_finite(unchecked[1], unchecked[0], ckpt)  # raises
      unchecked = (done, metrics, monitor.all_finite(metrics))
      log = done % config.log_every_steps == 0 or done == total_steps
      save = done % config.checkpoint_every_steps == 0 or done == total_steps
      if log or save:  # the last step is both: nothing stays unchecked
        values, unchecked = monitor.check_metrics_finite(metrics, done, ckpt), None
      if log:
        line, skipped = inputs.skipped_images_warning(train_source, skipped)
        if line and jax.process_index() == 0:
          tqdm.tqdm.write(line, file=sys.stderr)
        values["learning_rate"] = float(lr_fn(step))
        values["host_peak_rss_mib"] = monitor.peak_rss_mib()
        writer.write(done, values)
        bar.set_postfix(loss=f"{values['loss']:.4g}")
      if save:
        with monitor.timed(seconds, "checkpoint_save"):
          monitor.check_state_finite(state, done, ckpt)
          checkpoints.seal(ckpt)  # checksums of the finished earlier steps
          ckpt.save(done, args=ocp.args.StandardSave(state))
  finally:
    # Also on errors: let an in-flight save finish rather than die half-done.
    with monitor.timed(seconds, "checkpoint_save"):
      checkpoints.seal(ckpt)
  train_seconds = time.time() - train_start
  # Train steps (incl. compile, input pipeline, logging): the loop's time
  # minus that spent blocked in checkpoint saves (orbax writes asynchronously).
  seconds["train_steps"] = train_seconds - seconds["checkpoint_save"]

  # Evaluation: the trained encoder and, as baselines, raw pixels and the
  # encoder at its random initialisation, all with the same probe.
  # Each phase shows a progress bar and, when done, its duration.
  shown = jax.process_index() == 0
  probe = functools.partial(
      evaluate.linear_probe, l2_grid=tuple(config.eval.probe_l2_grid),
      val_fraction=config.eval.probe_val_fraction,
      max_iter=config.eval.probe_max_iter,
      max_search_rows=config.eval.probe_search_rows, seed=config.seed,
      progress=shown)
  eval_size = view_shape[0]

  def features(s, source, what):
    """(features (N, D), labels (N,)) of a split, streamed in batches."""
    labels = []

    def chunks():
      for images, chunk_labels in data.eval_batches(
          source, batch_size=config.eval.batch_size, size=eval_size,
          crop_fraction=config.eval.crop_fraction):
        labels.append(chunk_labels)
        yield images

    out = extract_features(
        s, chunks(), config.eval.batch_size, mesh,
        desc=f"features ({what})" if shown else None,
        total=-(-len(source) // config.eval.batch_size))
    return out, np.concatenate(labels)

  results = {
      "dataset": config.dataset.name,
      "method": config.method,
      "loss_form": config.loss.form,
      "graph": config.graph.kind,
      **graph_info,
      "epochs": total_steps / steps_per_epoch,
      "steps": total_steps,
      "resumed_from_step": start_step,
      "train_seconds": train_seconds,
      "num_devices": jax.device_count(),
  }
  splits = evaluate.probe_splits(
      train_source, test_source, seed=config.seed,
      announce=lambda line: print(line, flush=True) if shown else None)
  if splits is not None:
    fit_source, fit_rows, test_source, test_rows = splits
    pick = lambda pair, rows: (pair if rows is None else
                               (pair[0][rows], pair[1][rows]))
    with monitor.timed(seconds, "features", announce=True):
      ftrain, ytrain = pick(features(state, fit_source, "train"), fit_rows)
      ftest, ytest = pick(features(state, test_source, "test"), test_rows)
    with monitor.timed(seconds, "probe", announce=True):
      trained = probe(ftrain, ytrain, ftest, ytest)
    with monitor.timed(seconds, "knn", announce=True):
      knn = evaluate.knn_accuracy(ftrain, ytrain, ftest, ytest,
                                  k=config.eval.knn_k,
                                  temperature=config.eval.knn_temperature,
                                  progress=shown)
    results.update(probe_test_accuracy=trained["test_accuracy"],
                   probe=trained, knn_test_accuracy=knn,
                   feature_dim=int(ftrain.shape[1]))
  if splits is not None and config.eval.baselines:
    with monitor.timed(seconds, "baselines", announce=True):
      if shown:
        print("baselines: linear probe of raw pixels (in-memory splits "
              "only), then of the encoder at its random initialisation",
              flush=True)
      if hasattr(fit_source, "images") and hasattr(test_source, "images"):
        flat = lambda src, rows: pick(
            (src.images.reshape(len(src), -1).astype(np.float32) / 255.0,
             source_labels(src)), rows)
        results["raw_pixel_probe_test_accuracy"] = probe(
            *flat(fit_source, fit_rows),
            *flat(test_source, test_rows))["test_accuracy"]
      init_state = initial_state()
      rand = probe(
          *pick(features(init_state, fit_source, "random-init, train"),
                fit_rows),
          *pick(features(init_state, test_source, "random-init, test"),
                test_rows))
    results["random_init_probe_test_accuracy"] = rand["test_accuracy"]
  results["wall_seconds"] = time.time() - start_time
  results["seconds"] = seconds
  if jax.process_index() == 0:
    monitor.atomic_write(os.path.join(workdir, "results.json"),
                  json.dumps(results, indent=2))
  ckpt.close()
  return results
