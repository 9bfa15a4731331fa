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

from ssljax import (checkpoints, config_validation, data, evaluate, graphs,
                    methods, models, monitor)
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
               graph_kwargs: dict | None = None):
  """One SGD step on a batch of views.

  Each view goes through the network on its own, as in the official VICReg
  code: BatchNorm normalises per view, and the batch axis stays sharded (a
  view-major reshape of the sharded images would make XLA gather them).

  Args:
    state: TrainState (replicated).
    batch: views (V, B, H, W, C) float32 sharded along B, or a pair (views,
      labels (B,) int32) when the loss graph comes from labels, or (views,
      edge info (3, 2, B) float32) for the VIC² estimate on a dataset graph
      (``ssljax.data.edge_batches``; views are then the edge endpoints).
    method, loss_kwargs: the loss, as in ``ssljax.methods.loss_terms``.
    graph_kwargs: ``batch_graph`` options ("kind", "alpha", "normalize");
      None means the V-view SSL graph.

  Returns:
    (new state, dict of scalar metrics: the loss terms, "grad_norm").
  """
  views, extra = batch if isinstance(batch, (tuple, list)) else (batch, None)
  on_edges = (graph_kwargs or {}).get("kind") in methods.DATASET_GRAPH_KINDS
  labels, edge_info = (None, extra) if on_edges else (extra, None)

  def loss_fn(params):
    batch_stats, z_views = state.batch_stats, []
    for x in views:  # V is static: unrolled
      (_, z), updates = state.apply_fn(
          {"params": params, "batch_stats": batch_stats}, x, train=True,
          mutable=["batch_stats"])
      batch_stats = updates["batch_stats"]
      z_views.append(z)
    terms = methods.loss_terms(method, jnp.stack(z_views), labels=labels,
                               graph=graph_kwargs, edge_info=edge_info,
                               **loss_kwargs)
    return terms["loss"], (terms, batch_stats)

  grads, (terms, batch_stats) = jax.grad(loss_fn, has_aux=True)(state.params)
  state = state.apply_gradients(grads=grads, batch_stats=batch_stats)
  return state, {**terms, "grad_norm": optax.tree.norm(grads)}


def uses_labels(config: ml_collections.ConfigDict) -> bool:
  """Whether the loss graph is built from the batch labels."""
  return config.graph.kind in ("supervised", "mixed")


def uses_edges(config: ml_collections.ConfigDict) -> bool:
  """Whether batches are edges of a whole-dataset graph (edge_batches)."""
  return config.graph.kind in methods.DATASET_GRAPH_KINDS


def _uses_edge_info(config: ml_collections.ConfigDict) -> bool:
  # Only the VIC² edge estimate needs the per-row weights; the two-view
  # losses see the edge endpoints as ordinary views.
  return uses_edges(config) and config.loss.form == "graph"


def dataset_graph(config: ml_collections.ConfigDict, images: np.ndarray,
                  labels: np.ndarray) -> graphs.EdgeGraph:
  """The whole-train-set graph of ``config.graph`` as an edge list.

  Args:
    config: run config; graph.kind in methods.DATASET_GRAPH_KINDS.
    images: uint8 (N, H, W, C) train images (k-NN features).
    labels: int (N,) train labels (supervised graph; −1 hides a label).

  Returns:
    ssljax.graphs.EdgeGraph over the N train rows.

  Raises:
    ValueError: unknown kind or knn_features, bad k / per_node / file.
  """
  g = config.graph
  if g.kind == "dataset_knn":
    if g.knn_features not in ("pixels", "pca"):
      raise ValueError(f"graph.knn_features must be 'pixels' or 'pca', got "
                       f"{g.knn_features!r}")
    pca_dim = g.knn_pca_dim if g.knn_features == "pca" else 0
    features = graphs.pixel_features(images, pca_dim=pca_dim, seed=config.seed)
    return graphs.knn_edges(features, g.knn_k)
  if g.kind == "dataset_supervised":
    return graphs.supervised_edges(known_labels(labels, config),
                                   g.supervised_per_node, seed=config.seed)
  if g.kind == "edge_list":
    if not g.edge_list_path:
      raise ValueError("graph.kind='edge_list' needs graph.edge_list_path")
    return graphs.load_edge_list(g.edge_list_path, len(images))
  raise ValueError(f"graph.kind {g.kind!r} is not a dataset graph; expected "
                   f"one of {methods.DATASET_GRAPH_KINDS}")


def _graph_kwargs(config: ml_collections.ConfigDict) -> dict:
  return {"kind": config.graph.kind, "alpha": config.graph.alpha,
          "normalize": config.graph.normalize}


def sharded_train_step(config: ml_collections.ConfigDict, mesh):
  """``train_step`` jitted over ``mesh``: state replicated, batch sharded on B.

  The input state is donated (its buffers are reused for the output).
  """
  replicated = NamedSharding(mesh, P())
  batch_sharding = NamedSharding(mesh, P(None, "data"))
  if uses_labels(config):
    batch_sharding = (batch_sharding, NamedSharding(mesh, P("data")))
  if _uses_edge_info(config):
    batch_sharding = (batch_sharding, NamedSharding(mesh, P(None, None, "data")))
  return jax.jit(
      functools.partial(train_step, method=config.method,
                        loss_kwargs=config.loss.to_dict(),
                        graph_kwargs=_graph_kwargs(config)),
      in_shardings=(replicated, batch_sharding),
      out_shardings=(replicated, replicated), donate_argnums=0)


def make_mesh(devices=None):
  """1-D mesh ("data",) over ``devices`` (default: all), with Auto axes so XLA
  propagates the batch sharding through reshapes and reductions."""
  devices = jax.devices() if devices is None else devices
  return jax.sharding.Mesh(np.asarray(devices), ("data",),
                           axis_types=(jax.sharding.AxisType.Auto,))


def known_labels(labels: np.ndarray, config: ml_collections.ConfigDict) -> np.ndarray:
  """Train labels with all but a ``config.graph.label_fraction`` of them set to
  −1 (unknown); which ones are kept is a function of ``config.seed`` only."""
  fraction = config.graph.label_fraction
  if not 0.0 <= fraction <= 1.0:
    raise ValueError(f"graph.label_fraction must be in [0, 1], got {fraction}")
  rng = np.random.default_rng([config.seed, 1])  # own stream: not the shuffle's
  hidden = rng.permutation(len(labels))[int(round(fraction * len(labels))):]
  out = np.asarray(labels, np.int32).copy()
  out[hidden] = -1
  return out



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
  train_images, train_labels = data.load_split(
      config.dataset.name, config.dataset.train_split,
      data_dir=config.dataset.data_dir, download=config.dataset.download)
  test_images, test_labels = data.load_split(
      config.dataset.name, config.dataset.test_split,
      data_dir=config.dataset.data_dir, download=config.dataset.download)
  steps_per_epoch = data.steps_per_epoch(len(train_images), config.batch_size)
  total_steps = (config.num_steps if config.num_steps > 0
                 else int(config.epochs * steps_per_epoch))

  # Mesh: batch sharded over every device, parameters replicated.
  mesh = make_mesh()
  replicated = NamedSharding(mesh, P())
  views_sharding = NamedSharding(mesh, P(None, "data"))
  if config.batch_size % jax.device_count():
    raise ValueError(f"batch_size {config.batch_size} is not divisible by the "
                     f"{jax.device_count()} devices")

  # Model, optimiser, state.
  network = create_network(config)
  lr_fn = create_learning_rate_fn(config.optim, config.batch_size,
                                  steps_per_epoch, total_steps)
  tx = create_optimizer(config.optim, lr_fn)
  # A pure function of the seed: rebuilt for the random-init baseline because
  # the train step donates (frees) the state it is given.
  initial_state = lambda: jax.device_put(create_train_state(
      network, tx, jax.random.key(config.seed), train_images.shape[1:]), replicated)

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
  step_fn_shardings = views_sharding
  if uses_labels(config):
    step_fn_shardings = (views_sharding, NamedSharding(mesh, P("data")))
  if _uses_edge_info(config):
    step_fn_shardings = (views_sharding,
                         NamedSharding(mesh, P(None, None, "data")))

  # Training loop.
  augment_kwargs = {k: v for k, v in config.views.to_dict().items()
                    if k != "num_views"}
  if uses_edges(config):
    # A graph over the whole train set, O(edges) memory; each step draws
    # batch_size edges, whose endpoints are the two views.
    graph_start = time.time()
    graph = dataset_graph(config, train_images, train_labels)
    graph_info = {"graph_nodes": graph.n, "graph_entries": graph.num_entries,
                  "graph_edges": graph.num_edges,
                  "graph_seconds": time.time() - graph_start}
    if jax.process_index() == 0:
      print(f"dataset graph {config.graph.kind}: {graph_info}", flush=True)
    batches = data.edge_batches(
        train_images, graph, batch_size=config.batch_size, seed=config.seed,
        start_step=start_step, num_steps=total_steps - start_step,
        sampling=config.graph.edge_sampling,
        augment=config.graph.augment_edges, augment_kwargs=augment_kwargs,
        with_info=_uses_edge_info(config), process_index=jax.process_index(),
        process_count=jax.process_count())
  else:
    graph_info = {}
    batches = data.view_batches(
        train_images, batch_size=config.batch_size,
        num_views=config.views.num_views, seed=config.seed,
        start_step=start_step, num_steps=total_steps - start_step,
        augment_kwargs=augment_kwargs, process_index=jax.process_index(),
        process_count=jax.process_count(),
        labels=known_labels(train_labels, config) if uses_labels(config)
        else None)
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
  try:
    for step in bar:
      batch = jax.tree.map(jax.make_array_from_process_local_data,
                           step_fn_shardings, next(batches))
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
        values["learning_rate"] = float(lr_fn(step))
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
  features = lambda s, x, what: extract_features(
      s, x, config.eval.batch_size, mesh,
      desc=f"features ({what})" if shown else None)
  with monitor.timed(seconds, "features", announce=True):
    ftrain = features(state, train_images, "train")
    ftest = features(state, test_images, "test")
  with monitor.timed(seconds, "probe", announce=True):
    trained = probe(ftrain, train_labels, ftest, test_labels)
  with monitor.timed(seconds, "knn", announce=True):
    knn = evaluate.knn_accuracy(ftrain, train_labels, ftest, test_labels,
                                k=config.eval.knn_k,
                                temperature=config.eval.knn_temperature,
                                progress=shown)
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
      "probe_test_accuracy": trained["test_accuracy"],
      "probe": trained,
      "knn_test_accuracy": knn,
      "feature_dim": int(ftrain.shape[1]),
      "num_devices": jax.device_count(),
  }
  if config.eval.baselines:
    with monitor.timed(seconds, "baselines", announce=True):
      if shown:
        print("baselines: linear probe of raw pixels, then of the encoder at "
              "its random initialisation", flush=True)
      flat = lambda x: x.reshape(len(x), -1).astype(np.float32) / 255.0
      raw = probe(flat(train_images), train_labels, flat(test_images),
                  test_labels)
      init_state = initial_state()
      rand = probe(features(init_state, train_images, "random-init, train"),
                   train_labels,
                   features(init_state, test_images, "random-init, test"),
                   test_labels)
    results["raw_pixel_probe_test_accuracy"] = raw["test_accuracy"]
    results["random_init_probe_test_accuracy"] = rand["test_accuracy"]
  results["wall_seconds"] = time.time() - start_time
  results["seconds"] = seconds
  if jax.process_index() == 0:
    monitor.atomic_write(os.path.join(workdir, "results.json"),
                  json.dumps(results, indent=2))
  ckpt.close()
  return results
