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

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding, PartitionSpec as P
import tqdm

from ssljax import (checkpoints, compilation_cache, config_validation, data,
                    deprecation, distributed, evaluators, faults, inputs,
                    methods, monitor, online_probe, optimizers, preemption,
                    report, train_state)
from ssljax.evaluators import context as eval_context

__all__ = ["batch_spec", "train_step", "sharded_train_step", "make_mesh",
           "train_and_evaluate"]

# Names this module re-exported from their home modules: they still work,
# with a DeprecationWarning naming the home.
__getattr__ = deprecation.moved_names(__name__, {
    "TrainState": "ssljax.train_state.TrainState",
    "create_train_state": "ssljax.train_state.create_train_state",
    "create_learning_rate_fn": "ssljax.optimizers.create_learning_rate_fn",
    "create_optimizer": "ssljax.optimizers.create_optimizer",
    "create_probe_optimizer": "ssljax.online_probe.create_optimizer",
    "uses_labels": "ssljax.inputs.uses_labels",
    "uses_edges": "ssljax.inputs.uses_edges",
    "dataset_graph": "ssljax.inputs.dataset_graph",
    "known_labels": "ssljax.inputs.known_labels",
    "extract_features": "ssljax.probes.extract_features"})


# --------------------------------------------------------------- train step --
def train_step(state: train_state.TrainState, batch: dict, *,
               spec: data.ViewSpec, seed: int = 0, total_steps: int = 1,
               steps_per_epoch: int = 1, probe_tx=None,
               probe_features: str = "inference",
               probe_views: str = "clean", probe_ema_decay: float = 0.9,
               eval_crop_fraction: float = 0.875,
               on_nonfinite: str = "stop"):
  """One optimiser step of ``state.method`` on a batch; the same for every
  method.

  The views are made here (`ssljax.data.device_views`), keyed by (seed,
  state.step), so they are the same after a resume and on any mesh. Then
  the gradient of ``method.loss`` (its forward passes, its loss, its new
  state), the optimiser, ``method.after_update`` (e.g. the EMA teacher), and,
  if the state has one, one step of the online probe on the stop-gradient
  representation of the batch, with its own optimiser: no gradient reaches
  the encoder. That representation is, by ``probe_features``, the
  evaluated one (``state.representation`` before this step's update,
  BatchNorm in inference mode: one more forward pass) of, by
  ``probe_views``, the clean images (`clean_images`) or the first global
  view, or the training forward pass's of the first global view
  (`ssljax.online_probe`).

  Args:
    state: `ssljax.train_state.TrainState` (replicated).
    batch: dict from `ssljax.inputs.to_device_batch`: the images, "images"
      uint8 (B, H, W, C) or "views" (host crops, uint8) or "ready_views"
      float32 (V, B, H, W, C) (edge batches of a dataset graph); "labels"
      (B,) int32 the rows' true labels (−1: unknown), which the online
      probe reads; "graph_labels" (B,) int32 when the loss graph reads
      labels, handed to the method as its batch's "labels"
      (`ssljax.inputs.train_iterator`); "edge_info" (3, 2, B) float32 for
      the VIC² estimate on a dataset graph.
    spec: the run's `ssljax.data.ViewSpec`.
    seed: the run's seed.
    total_steps, steps_per_epoch: the run's length (the methods'
      schedules).
    probe_tx: optax optimiser of the online probe
      (`ssljax.online_probe.create_optimizer`).
    probe_features: "inference" | "train_forward", what the online probe
      trains on (`ssljax.online_probe.FEATURES`).
    probe_views: "clean" | "augmented", the images it trains on with
      "inference" (`ssljax.online_probe.VIEWS`).
    probe_ema_decay: the decay of the probe's weight average.
    eval_crop_fraction: the evaluation centre crop's fraction
      (``config.eval_inputs.crop_fraction``), for clean images whose size
      is not the view size.
    on_nonfinite: "stop" (the host stops the run) | "skip": a step whose
      loss terms or gradients are not all finite keeps the old state
      (`ssljax.faults.skip_nonfinite`) and reports "skipped" = 1.

  Returns:
    (new state, dict of scalar metrics: the method's loss terms and
    schedules, "grad_norm", the online probe's loss and accuracy when it
    trains, and "skipped" under "skip").
  """
  key = jax.random.fold_in(jax.random.key(seed), state.step)
  views = data.device_views(batch, key, spec)
  method_batch = {"views": tuple(views)}
  if "graph_labels" in batch:  # what the loss graph may read of the labels
    method_batch["labels"] = batch["graph_labels"]
  if "edge_info" in batch:
    method_batch["edge_info"] = batch["edge_info"]
  schedule = {"step": state.step, "total_steps": total_steps,
              "steps_per_epoch": steps_per_epoch}
  loss_key = jax.random.fold_in(key, 1 << 20)  # apart from the views' keys

  grads, aux = jax.grad(state.method.loss, has_aux=True)(
      state.params, state.method_state, method_batch, loss_key, schedule)
  new = state.apply_gradients(grads=grads)
  method_state, schedule_metrics = state.method.after_update(
      aux.state, new.params, schedule)
  new = new.replace(method_state=method_state)
  metrics = {**aux.metrics, **schedule_metrics,
             "grad_norm": optax.tree.norm(grads)}
  if state.probe and "labels" in batch:
    if probe_features == "train_forward":
      h = aux.representation
    else:
      clean = (clean_images(batch, views[0].shape[1], eval_crop_fraction)
               if probe_views == "clean" else None)
      h = state.representation(jax.lax.stop_gradient(
          views[0] if clean is None else clean))
    probe, probe_metrics = online_probe.update(
        state.probe, h, batch["labels"], probe_tx, probe_ema_decay)
    new = new.replace(probe=probe)
    metrics.update(probe_metrics)
  if on_nonfinite == "skip":
    new, metrics = faults.skip_nonfinite(state, new, metrics, grads)
  return new, metrics


def clean_images(batch: dict, size: int, crop_fraction: float = 0.875):
  """The batch's un-augmented images as the evaluators see them, on the
  devices (jit-able): ``images`` / 255 when they are S x S; else the
  evaluation centre crop (the shorter side resized to round(S /
  crop_fraction), the central S x S; `ssljax.data.crops.center_crop`, here
  with ``jax.image.resize``'s bilinear instead of PIL's).

  Args:
    batch: as `train_step`'s; "images" uint8 (B, H, W, C) or, for edge
      batches, "edge_images" uint8 (2, B, H, W, C) (the first endpoints).
    size: S, the first global view's side.
    crop_fraction: in (0, 1].

  Returns:
    float32 (B, S, S, C) in [0, 1], or None for a batch without whole
    images ("views" host crops, "ready_views").
  """
  if "images" in batch:
    images = batch["images"]
  elif "edge_images" in batch:
    images = batch["edge_images"][0]
  else:
    return None
  if "ready_views" in batch:
    return None
  _, height, width, channels = images.shape
  x = images.astype(jnp.float32) / 255.0
  if height == width == size:
    return x
  short = max(size, round(size / crop_fraction))
  scale = short / min(height, width)
  new_h = max(size, round(height * scale))
  new_w = max(size, round(width * scale))
  x = jax.image.resize(x, (x.shape[0], new_h, new_w, channels), "bilinear")
  top, left = (new_h - size) // 2, (new_w - size) // 2
  return x[:, top:top + size, left:left + size]


def sharded_train_step(config: ml_collections.ConfigDict, mesh, *,
                       total_steps: int = 1, steps_per_epoch: int = 1,
                       spec: data.ViewSpec | None = None, probe_tx=None):
  """``train_step`` jitted: state replicated on ``mesh``, the batch as placed.

  ``total_steps`` and ``steps_per_epoch`` set the methods' schedules (EMA
  momentum, temperatures). ``spec`` is the run's view spec (None:
  `ssljax.data.view_spec` of ``config.views``). ``probe_tx`` is the online
  probe's optimiser (None: `ssljax.online_probe.create_optimizer` of
  ``config``, itself None for a run without an online probe).

  The batch arrays keep the shardings they come with (global arrays sharded
  on their batch axis, `ssljax.inputs.to_device_batch`). The input state is
  donated (its buffers are reused for the output).
  """
  spec = data.view_spec(config.views) if spec is None else spec
  if probe_tx is None:
    probe_tx = online_probe.create_optimizer(config)
  probe_options = online_probe.options(config) or online_probe.DEFAULTS
  replicated = NamedSharding(mesh, P())
  return jax.jit(
      functools.partial(train_step, spec=spec, seed=config.seed,
                        total_steps=total_steps,
                        steps_per_epoch=steps_per_epoch, probe_tx=probe_tx,
                        probe_features=probe_options["features"],
                        probe_views=probe_options["views"],
                        probe_ema_decay=probe_options["ema_decay"],
                        eval_crop_fraction=config.get("eval_inputs", {}).get(
                            "crop_fraction", 0.875),
                        on_nonfinite=config.train.on_nonfinite),
      out_shardings=(replicated, replicated), donate_argnums=0)


def batch_spec(config: ml_collections.ConfigDict, image_shape=None, *,
               spec: data.ViewSpec | None = None) -> methods.BatchSpec:
  """The `ssljax.methods.BatchSpec` of a run whose images are
  ``image_shape`` (H, W, C) (None: ``dataset.channels`` channels at
  ``views.size``); ``spec`` is the run's view spec (None:
  `ssljax.data.view_spec` of ``config.views``)."""
  spec = data.view_spec(config.views) if spec is None else spec
  channels = image_shape[2] if image_shape else config.dataset.channels
  size = spec.sizes(image_shape)[0] if image_shape else config.views.size
  return methods.BatchSpec(view_shape=(size, size, channels),
                           num_global=spec.num_global,
                           num_local=spec.num_local)


def make_mesh(devices=None):
  """1-D mesh ("data",) over ``devices`` (default: all), with Auto axes so XLA
  propagates the batch sharding through reshapes and reductions."""
  devices = jax.devices() if devices is None else devices
  return jax.sharding.Mesh(np.asarray(devices), ("data",),
                           axis_types=(jax.sharding.AxisType.Auto,))


# --------------------------------------------------------------------- main --
def _check_batch_size(config: ml_collections.ConfigDict, num_train: int,
                     num_devices: int) -> None:
  """Refuses a ``config.batch_size`` the opened train split cannot serve.

  Called once the train source is open (its length known) and before any
  JAX work: a batch larger than the split gives no full batch per epoch,
  and a batch not divisible by the devices cannot be sharded.

  Args:
    config: the run's ConfigDict (``batch_size``, ``dataset``).
    num_train: the number of images in the train split (>= 0).
    num_devices: ``jax.device_count()``.

  Raises:
    ssljax.config_validation.ConfigError: one line naming
      ``config.batch_size``, the split's size and what to change
      (`ssljax.main` prints it as one line, exit status 2).
  """
  d, batch = config.dataset, config.batch_size
  if batch > num_train:
    where = f" in {d.data_dir!r}" if d.get("data_dir") else ""
    raise config_validation.ConfigError(
        f"config.batch_size={batch}: larger than the {num_train} images of "
        f"split {d.train_split!r} of dataset {d.name!r}{where}; give "
        f"--config.batch_size <= {num_train} or more images")
  if batch % num_devices:
    raise config_validation.ConfigError(
        f"config.batch_size={batch}: must be divisible by the {num_devices} "
        "devices")


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *,
                       defaults: ml_collections.ConfigDict | None = None,
                       validated: bool = False) -> dict:
  """Pretrains ``config.method`` and runs its evaluators; writes under workdir.

  The config is checked first, before anything is loaded or written
  (`ssljax.config_validation.validate`; ``defaults``, optional, is the
  config file's config before overrides, as it takes it), unless
  ``validated`` says the caller did so already: ``python -m ssljax.main``
  checks it at its entry, before it joins a multi-process run.

  Writes ``checkpoints/`` (orbax; a rerun with the same workdir resumes from
  the latest), ``metrics.jsonl``, ``tensorboard/``, ``config.json``,
  ``report.png`` and ``results.json`` (returned as a dict; ``evals`` holds
  every evaluator's final values, ``seconds`` the wall time of each phase:
  setup, train_steps, checkpoint_save and ``eval/<name>`` per evaluator).

  Raises:
    ssljax.config_validation.ConfigError: a config field has a bad type,
      range or name (a ValueError; one line naming each field), or a
      batch_size the train split cannot serve (`_check_batch_size`).
    ssljax.data.DatasetUnavailableError: the dataset is not available.
    FloatingPointError: the loss or a gradient became non-finite.
    ssljax.checkpoints.CheckpointRestoreError: checkpoints exist under
      workdir but none restores (each step and its reason in the message).
    ssljax.checkpoints.CheckpointSaveError: a checkpoint could not be
      written (disk full, directory unwritable); the earlier one is intact.
    OSError: metrics.jsonl or TensorBoard could not be written.
    ssljax.preemption.Preempted: a signal of
      ``config.train.preemption_signals`` arrived; the checkpoint of the
      step it stopped at is written (`ssljax.preemption`).

  An evaluator that raises does not raise here: its error is in
  ``results["evals"][name]`` and ``results["failed_evaluators"]``
  (`ssljax.faults.EvaluatorRunner`).
  """
  start_time = time.time()
  seconds = {}  # wall time of each phase, results.json "seconds"
  # Every field, before anything is loaded or written (one-line ConfigError).
  if not validated:
    config_validation.validate(config, defaults=defaults)
  compilation_cache.enable(config.get("compilation_cache_dir", "auto"))
  compilation_cache.use_threefry_gpu_kernel()
  # Data, and the batch size against it, before anything is written.
  train_source, test_source = inputs.open_sources(config)
  _check_batch_size(config, len(train_source), jax.device_count())
  spec = data.view_spec(config.views)  # the views, once for the whole run
  os.makedirs(workdir, exist_ok=True)
  if jax.process_index() == 0:
    with open(os.path.join(workdir, "config.json"), "w") as f:
      f.write(config.to_json(indent=2))
  steps_per_epoch = data.steps_per_epoch(len(train_source), config.batch_size)
  total_steps = (config.num_steps if config.num_steps > 0
                 else int(config.epochs * steps_per_epoch))

  # Mesh: batch sharded over every device, parameters replicated.
  mesh = make_mesh()
  replicated = NamedSharding(mesh, P())

  # Method, optimiser, state; the networks are initialised at the global
  # view size.
  shapes = batch_spec(config, train_source.image_shape, spec=spec)
  view_shape = shapes.view_shape
  method = methods.build(config)
  lr_fn = optimizers.create_learning_rate_fn(config.optim, config.batch_size,
                                             steps_per_epoch, total_steps)
  tx = optimizers.create_optimizer(config.optim, lr_fn, steps_per_epoch,
                                   total_steps)
  # Once per run: the initial state and the train step share it.
  probe_tx = online_probe.create_optimizer(config)  # None: no online probe
  num_classes = (int(train_source.num_classes or 0)
                 if probe_tx is not None else 0)
  # A pure function of the seed: rebuilt for the random-init baseline because
  # the train step donates (frees) the state it is given.
  initial_state = lambda: jax.device_put(train_state.create_train_state(
      method, tx, jax.random.key(config.seed), shapes,
      num_classes=num_classes, probe_tx=probe_tx), replicated)

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

  step_fn = sharded_train_step(config, mesh, total_steps=total_steps,
                               steps_per_epoch=steps_per_epoch, spec=spec,
                               probe_tx=probe_tx)
  # Evaluators (config.evals): each runs at its steps and after the last.
  shown = jax.process_index() == 0
  ctx = eval_context.RunContext(
      config, mesh, train_source=train_source, test_source=test_source,
      total_steps=total_steps, initial_state=initial_state,
      view_size=view_shape[0], seed=config.seed, spec=spec, shown=shown,
      announce=lambda line: print(line, flush=True) if shown else None)
  # Baselines last: every other evaluator reads the trained state's
  # features, extracted once; the random-init baseline replaces them.
  evals = sorted(evaluators.build(config.evals, ctx,
                                  baselines=config.eval_inputs.baselines),
                 key=lambda ev: ev.baseline)

  # Training loop.
  graph, graph_info = None, {}
  if inputs.uses_edges(config):
    # A graph over the whole train set, O(edges) memory; each step draws
    # batch_size edges, whose endpoints are the two views.
    graph_start = time.time()
    graph = inputs.dataset_graph(config, train_source.images,
                                 data.source_labels(train_source))
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
  # Every step's NaN/Inf flag is read one step late (config.train.
  # on_nonfinite; ssljax.faults): the check of step s is queued behind step
  # s + 1, so the host never idles waiting for the device. Log, checkpoint
  # and evaluation steps are settled before anything is written.
  guard = faults.NonfiniteGuard(config.train.on_nonfinite,
                                config.train.max_skipped, ckpt)
  saver = faults.CheckpointSaver(ckpt)
  runner = faults.EvaluatorRunner(workdir, seconds, total_steps,
                                  resumed_final=start_step == total_steps,
                                  entries=config.evals)
  watch = preemption.PreemptionWatch(config.train.preemption_signals,
                                     config.train.preempted_exit_status)
  skipped = 0  # unreadable images already reported
  preempted_last = False  # the signal's agreed step is the last step
  error = None  # the exception leaving the loop, if any
  try:
    with watch:
      for step in bar:
        batch = inputs.to_device_batch(next(batches), mesh)
        state, metrics = step_fn(state, batch)
        if step == start_step:  # compiled: the compiler's memory is free
          monitor.release_free_memory()
        done = step + 1
        guard.after_step(done, metrics)
        log = done % config.log_every_steps == 0 or done == total_steps
        save = done % config.checkpoint_every_steps == 0 or done == total_steps
        # Preempted: finish this step, checkpoint it, close the metric
        # writers (their lines are those of an uninterrupted run), stop; on
        # several processes all stop at the same step.
        # The sync point needs every step id, the last one included.
        stop = watch.requested(done)
        preempted_last, stop = stop and done == total_steps, stop and done < total_steps
        if log or save or stop:  # the last step is all: nothing unsettled
          values = guard.values(done, metrics)
        # Periodic evaluators (the last step's run after the loop), on the
        # state before its checkpoint: a resume never repeats them.
        measured = {}
        due = [ev for ev in evals if done < total_steps and ev.due(done)]
        if due:
          guard.values(done, metrics)  # never evaluate a non-finite step
        for ev in due:
          measured.update(runner.run(ev, state, final=False))
        if measured and not log:
          writer.write(done, measured)
        if log:
          values.update(measured)
          line, skipped = inputs.skipped_images_warning(train_source, skipped)
          if line and jax.process_index() == 0:
            tqdm.tqdm.write(line, file=sys.stderr)
          values["learning_rate"] = float(lr_fn(step))
          values["host_peak_rss_mib"] = monitor.peak_rss_mib()
          writer.write(done, values)
          bar.set_postfix(loss=f"{values['loss']:.4g}"
                          if "loss" in values else "skipped")
        if save or stop:
          with monitor.timed(seconds, "checkpoint_save"):
            monitor.check_state_finite(state, done, ckpt)
            saver.save(done, state)
        if stop:
          with monitor.timed(seconds, "checkpoint_save"):
            saver.finish()  # sealed before the process exits
          writer.close()
          raise watch.preempted(done)
  except BaseException as e:
    error = e
    raise
  finally:
    # Also on errors: let an in-flight save finish rather than die half-done.
    with monitor.timed(seconds, "checkpoint_save"):
      try:
        saver.finish()
      except checkpoints.CheckpointSaveError:
        # A failed write (e.g. a full disk) is the cause to report, also
        # when another write (metrics) failed first for the same reason.
        if error is None or isinstance(error, OSError):
          raise
  if preempted_last:
    writer.close()
    ckpt.close()
    raise watch.preempted(total_steps)
  train_seconds = time.time() - train_start
  # Train steps (incl. compile, input pipeline, logging): the loop's time
  # minus that spent blocked in checkpoint saves (orbax writes asynchronously)
  # and in periodic evaluators.
  seconds["train_steps"] = train_seconds - seconds["checkpoint_save"] - sum(
      v for k, v in seconds.items() if k.startswith("eval/"))

  # Evaluation after the last step: every evaluator, on the final state
  # (offline probe, k-NN, baselines, label-free metrics; config.evals),
  # written at the last step (rewritten, not repeated, when a finished run
  # is run again: monitor.MetricWriter). An evaluator that raises is
  # recorded and the others still run; each result is kept as soon as it
  # exists (final_evals.json), so a preempted or failed evaluation is
  # rerun for the missing evaluators only.
  final = {}
  with watch:
    for i, ev in enumerate(evals):
      if watch.requested(total_steps + 1 + i):
        if final:
          writer.write(total_steps, final)
        writer.close()
        ckpt.close()
        raise watch.preempted(total_steps, "evaluation")
      final.update(runner.run(ev, state, final=True))
  if final:
    writer.write(total_steps, final)
  writer.close()
  results = {
      "dataset": config.dataset.name,
      "method": config.method,
      "loss_form": config.loss.form,
      **({"graph": config.graph.kind} if "graph" in config else {}),
      **graph_info,
      "epochs": total_steps / steps_per_epoch,
      "steps": total_steps,
      "resumed_from_step": start_step,
      "train_seconds": train_seconds,
      "num_devices": jax.device_count(),
      "evals": {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                for k, v in runner.results().items()},
      "failed_evaluators": sorted(runner.errors),
  }
  if config.train.on_nonfinite == "skip":
    results["skipped_steps"] = guard.skipped
  results["wall_seconds"] = time.time() - start_time
  results["seconds"] = seconds
  if jax.process_index() == 0:
    monitor.atomic_write(os.path.join(workdir, "results.json"),
                         json.dumps(results, indent=2))
    report.write_report(workdir)
  ckpt.close()
  return results
