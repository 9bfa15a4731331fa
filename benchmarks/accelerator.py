"""Accelerator benchmark: images/s of the recipes' train steps, one command.

    python benchmarks/accelerator.py --out DIR            # full sizes
    python benchmarks/accelerator.py --out DIR --smoke    # toy sizes (CPU)
    python benchmarks/accelerator.py --out DIR --models r50_in1k --steps 50

Measures, on whatever devices JAX sees (the batch is split over all of
them, parameters replicated: the main job's mesh), for each model of
``--models`` (default: every case of CASES but the Fashion-MNIST ones):

* **host input**: who prepares the host batches, as the recipe's
  ``dataset.workers`` / ``dataset.threads`` resolve on this host
  (`ssljax.data.host_workers`; ``--workers`` / ``--threads`` override them):
  worker processes × threads each, or threads of the model's process;
* **step img/s**: images (samples, each with all its views) per second of
  the recipe's jitted train step (`ssljax.train.sharded_train_step`, the
  main job's step: views made on the devices, loss, optimiser, teacher,
  online probe) on one host batch that is already on the devices, reused
  every step;
* **end-to-end img/s**: the same step fed by the real host pipeline
  (`ssljax.inputs.train_iterator` -> `ssljax.inputs.to_device_batch`, the
  main job's loop, with the recipe's host input and prefetch) reading a
  generated dataset: a folder of JPEGs written by
  `ssljax.data.synthetic.write_image_folder` for the 224 px recipes (the
  host decodes and crops every view, as for ImageNet), an in-memory uint8
  split for the CIFAR and Fashion-MNIST recipes (``dataset.in_memory =
  "auto"`` holds them in memory: the host only gathers rows);
* **stall %**: the fraction of the end-to-end step time the devices wait
  for input, ``1 - t_step / t_end_to_end`` (0 when the pipeline keeps up);
  the JSON also holds the host's own wait in ``next(batches)``;
* **compile s**: trace + lower + XLA compile of the step (``jit.lower(...)
  .compile()``; a persistent compilation cache, if on, makes this a load:
  ``--compilation_cache DIR``, and the row's ``compile_cache`` says hit,
  miss or off);
* **peak device memory**: ``device.memory_stats()["peak_bytes_in_use"]``
  of the first device where the backend reports it ("n/a" on CPU); at full
  size each model runs in its own child process (``--isolate``), so the
  peak is that model's (``--smoke`` runs them all in this process). The
  JSON also holds XLA's own estimate of the step's buffers
  (``compiled.memory_analysis()``: arguments + outputs + temporaries −
  aliased), which every backend gives.
* with ``torch`` and CUDA importable (and torchvision), the ResNet-50
  two-view step in PyTorch on the same GPU (channels_last, autocast
  bfloat16, torchvision's ResNet-50, the recipe's 8192-8192-8192 projector
  and VICReg loss, SGD with momentum: torch has no LARS; views given
  ready, no augmentation on the device; ``--torch_compile`` adds
  torch.compile), and the ratio of the JAX step's img/s to it.

Each model: ``--warmup`` steps, then ``--steps`` timed steps (median over
``--repeats`` windows of ``--steps`` steps for the device-resident step),
then the end-to-end loop: ``--warmup`` + ``prefetch`` steps to drain the
pipeline's read-ahead, then ``--steps`` timed steps.

Writes ``DIR/accelerator.json`` (machine, devices, jax version, one row
per model, the PyTorch row) and ``DIR/accelerator.md`` (the table).
Speed depends on the machine and its load: compare numbers of one run.
"""

import argparse
import dataclasses
import datetime
import importlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

# jax and ssljax are imported inside the functions that use them: the
# PyTorch step runs this file in a process (maybe another environment's
# Python) that never imports them.
# pylint: disable=import-outside-toplevel
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


@dataclasses.dataclass(frozen=True)
class Case:
  """One model: a recipe config (module, argument) and its benchmark sizes."""
  title: str
  module: str  # configs/<module>.py
  arg: str | None  # the config argument (None: default)
  smoke_arg: str | None  # the argument of its smoke variant
  data: str  # "folder" (JPEG folder, host crops) | "array" (in memory)
  batch_per_device: int  # full-size batch per device
  num_local: int = -1  # override views.num_local (-1: the recipe's)
  default: bool = True  # in the default --models list


CASES = {
    # solo-learn's CIFAR VICReg: ResNet-18 (CIFAR stem), 2 x 32 px, float32.
    "r18_cifar": Case("ResNet-18 CIFAR VICReg", "cifar_resnet18",
                      "vicreg,cifar10", "vicreg,cifar10,smoke", "array", 256),
    # VICReg ImageNet: ResNet-50, 2 x 224 px, bfloat16, 8192^3 projector.
    "r50_in1k": Case("ResNet-50 ImageNet VICReg", "vicreg_imagenet_resnet50",
                     None, "smoke", "folder", 256),
    # DINO ViT-S/16 with 2 x 224 + 6 x 96 px crops (the recipe has 10 local).
    "vits16_dino": Case("ViT-S/16 DINO", "imagenette_vit_small", "dino",
                        "dino,smoke", "folder", 128, num_local=6),
    "vitb16_ijepa": Case("ViT-B/16 I-JEPA", "imagenet_vit", "ijepa",
                         "ijepa,smoke", "folder", 128),
    "vitb16_mae": Case("ViT-B/16 MAE", "imagenet_vit", "mae", "mae,smoke",
                       "folder", 256),
    "vits16_ijepa": Case("ViT-S/16 I-JEPA", "imagenette_vit_small", "ijepa",
                         "ijepa,smoke", "folder", 256, default=False),
    "vits16_mae": Case("ViT-S/16 MAE", "imagenette_vit_small", "mae",
                       "mae,smoke", "folder", 256, default=False),
    # The Fashion-MNIST ViT-Tiny recipes (28 px, patch 4).
    "vitt4_ijepa_fmnist": Case("ViT-Ti/4 I-JEPA F-MNIST", "ijepa", None,
                               "smoke", "array", 256, default=False),
    "vitt4_mae_fmnist": Case("ViT-Ti/4 MAE F-MNIST", "mae", None, "smoke",
                             "array", 256, default=False),
}
DEFAULT_MODELS = [k for k, c in CASES.items() if c.default]
SMOKE_SIZES = dict(batch_per_device=8, warmup=1, steps=2, repeats=1,
                   image_size=48, image_jitter=8, num_images=32)
FULL_SIZES = dict(warmup=3, steps=20, repeats=3, image_size=384,
                  image_jitter=64, num_images=1024)


# ------------------------------------------------------------------ data --
def folder_path(args) -> str:
  """The generated JPEG folder's root (written once per size, then reused)."""
  return os.path.join(args.data_dir, f"ssljax_accel_{args.image_size}_"
                      f"{args.image_jitter}_{args.num_images}")


def write_folder(args) -> str:
  """Writes the JPEG folder (``--num_images`` train images, 4 classes) if it
  is not there yet; returns its train split directory."""
  from ssljax.data import synthetic
  root = folder_path(args)
  train_dir = os.path.join(root, "train")
  if not os.path.isdir(train_dir):
    start = time.perf_counter()
    synthetic.write_image_folder(root + ".tmp", num_train=args.num_images,
                                 num_test=4, size=args.image_size,
                                 size_jitter=args.image_jitter)
    os.replace(root + ".tmp", root)
    print(f"wrote {args.num_images} JPEGs of {args.image_size} ± "
          f"{args.image_jitter} px to {root} in "
          f"{time.perf_counter() - start:.1f} s", flush=True)
  return train_dir


def open_source(case: Case, config, args):
  """The model's train source: the JPEG folder or an in-memory split of
  random uint8 images of the recipe's shape (10 classes)."""
  import numpy as np
  from ssljax import data
  if case.data == "folder":
    return data.ImageFolderSource(write_folder(args),
                                  channels=config.dataset.channels)
  size = 28 if case.module in ("ijepa", "mae") else 32  # F-MNIST | CIFAR
  channels = 1 if size == 28 else 3
  count = max(args.num_images, config.batch_size)
  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, (count, size, size, channels), np.uint8)
  return data.ArraySource(images, np.arange(count) % 10, 10)


def model_config(case: Case, args):
  """The recipe config with the benchmark's batch, threads and views."""
  import jax
  module = importlib.import_module(f"configs.{case.module}")
  config = module.get_config(case.smoke_arg if args.smoke else case.arg)
  per_device = args.batch_per_device or (
      SMOKE_SIZES["batch_per_device"] if args.smoke else case.batch_per_device)
  config.batch_size = per_device * jax.device_count()
  if args.threads:
    config.dataset.threads = args.threads
  if args.workers is not None:
    config.dataset.workers = args.workers
  v = config.views
  if case.num_local >= 0 and not args.smoke:
    with v.ignore_type():  # the per-view tuples follow V
      for name in ("blur_prob", "solarize_prob"):
        value = v[name]
        if isinstance(value, tuple):
          v[name] = value[:v.num_global + case.num_local]
    v.num_local = case.num_local
  return config


def describe_views(spec) -> str:
  text = f"{spec.num_global}×{spec.size}"
  if spec.num_local:
    text += f" + {spec.num_local}×{spec.local_size}"
  return text


# -------------------------------------------------------------- one model --
def _memory_analysis_bytes(compiled) -> float:
  """XLA's estimate of the step's device buffers (NaN if unknown)."""
  try:
    m = compiled.memory_analysis()
    return float(m.argument_size_in_bytes + m.output_size_in_bytes
                 + m.temp_size_in_bytes - m.alias_size_in_bytes)
  except Exception:  # pylint: disable=broad-except  # backend without it
    return float("nan")


def _peak_device_bytes():
  """peak_bytes_in_use of the first local device, or None (CPU)."""
  import jax
  stats = jax.local_devices()[0].memory_stats() or {}
  peak = stats.get("peak_bytes_in_use")
  return None if peak is None else int(peak)


def run_model(name: str, args) -> dict:
  """Builds the recipe's state, step and pipeline; times them (one row)."""
  import jax
  import numpy as np
  from jax.sharding import NamedSharding, PartitionSpec as P
  from ssljax import (compilation_cache, config_validation, data, inputs,
                      methods, online_probe, optimizers, train, train_state)

  phases = {}  # seconds of each set-up phase, in order
  mark = time.perf_counter()

  def phase(key):
    nonlocal mark
    now = time.perf_counter()
    phases[key] = now - mark
    mark = now
    # On stderr as it happens: a model stopped by its time limit still
    # shows how far it got.
    print(f"{name}: {key} {phases[key]:.1f} s", file=sys.stderr, flush=True)

  compilation_cache.use_threefry_gpu_kernel()  # as the main job
  if args.compilation_cache:  # else: as the process is (JAX_* variables)
    compilation_cache.enable(args.compilation_cache)
  case = CASES[name]
  config = model_config(case, args)
  config_validation.validate(config)
  source = open_source(case, config, args)
  phase("config_and_source")
  spec = data.view_spec(config.views)
  mesh = train.make_mesh()
  steps_per_epoch = data.steps_per_epoch(len(source), config.batch_size)
  total_steps = 100 * steps_per_epoch  # schedules' length: no effect on speed
  shapes = train.batch_spec(config, source.image_shape, spec=spec)
  method = methods.build(config)
  lr_fn = optimizers.create_learning_rate_fn(config.optim, config.batch_size,
                                             steps_per_epoch, total_steps)
  tx = optimizers.create_optimizer(config.optim, lr_fn, steps_per_epoch,
                                   total_steps)
  probe_tx = online_probe.create_optimizer(config)
  num_classes = int(source.num_classes or 0) if probe_tx is not None else 0
  state = jax.device_put(train_state.create_train_state(
      method, tx, jax.random.key(config.seed), shapes,
      num_classes=num_classes, probe_tx=probe_tx), NamedSharding(mesh, P()))
  jax.block_until_ready(state)
  phase("state_init")
  step_fn = train.sharded_train_step(config, mesh, total_steps=total_steps,
                                     steps_per_epoch=steps_per_epoch,
                                     spec=spec, probe_tx=probe_tx)
  prefetch = config.dataset.prefetch
  workers, host_threads = data.host_workers(  # what the pipeline runs
      config.dataset.workers, config.dataset.threads, source)

  def batches(start, count):
    return inputs.train_iterator(
        config, source, spec, start_step=start, num_steps=count,
        process_index=jax.process_index(),
        process_count=jax.process_count())

  # One host batch, placed once: the device-resident "synthetic" batch.
  batch = inputs.to_device_batch(next(batches(0, 1)), mesh)
  jax.block_until_ready(batch)
  phase("first_batch")
  events = []  # the persistent cache's hit/miss events of this compile
  jax.monitoring.register_event_listener(on_event := (
      lambda event, **_: events.append(event)))
  try:
    start = time.perf_counter()
    lowered = step_fn.lower(state, batch)
    lower_s = time.perf_counter() - start
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
  finally:
    jax.monitoring.unregister_event_listener(on_event)
  cache = ("hit" if "/jax/compilation_cache/cache_hits" in events else
           "miss" if "/jax/compilation_cache/cache_misses" in events else
           "off")
  phase("compile")
  if args.compile_only:
    text = lowered.as_text()
    return {"model": name, "title": case.title, "views": describe_views(spec),
            "batch": config.batch_size, "devices": jax.device_count(),
            "trace_and_lower_s": lower_s, "compile_s": compile_s,
            "compile_cache": cache,
            "stablehlo_lines": text.count("\n"),
            "matrix_products": text.count("stablehlo.dot_general"),
            "phases_s": phases}

  for _ in range(args.warmup):
    state, metrics = compiled(state, batch)
  jax.block_until_ready(state)
  windows = []
  for _ in range(args.repeats):
    start = time.perf_counter()
    for _ in range(args.steps):
      state, metrics = compiled(state, batch)
    jax.block_until_ready(metrics)
    windows.append((time.perf_counter() - start) / args.steps)
  step_s = float(np.median(windows))
  del batch
  phase("step_timing")

  # End to end: the main job's loop (ssljax.train.train_and_evaluate): host
  # batch -> device arrays -> step; each step's metrics are waited for one
  # step late, as its non-finite guard does.
  drain = args.warmup + prefetch
  it = batches(1, drain + args.steps)
  previous = None
  wait = put = 0.0
  for i in range(drain + args.steps):
    if i == drain:
      jax.block_until_ready(previous)
      start, wait, put = time.perf_counter(), 0.0, 0.0
    t = time.perf_counter()
    host_batch = next(it)
    t_put = time.perf_counter()
    device_batch = inputs.to_device_batch(host_batch, mesh)
    wait += time.perf_counter() - t
    put += time.perf_counter() - t_put
    state, metrics = compiled(state, device_batch)
    if previous is not None:
      jax.block_until_ready(previous)
    previous = metrics
  jax.block_until_ready(previous)
  e2e_s = (time.perf_counter() - start) / args.steps
  finite = all(math.isfinite(float(v)) for v in jax.device_get(
      previous).values() if np.ndim(v) == 0)
  phase("end_to_end")

  b = config.batch_size
  views = spec.num_global + spec.num_local
  return {
      "model": name, "title": case.title,
      "config": f"configs/{case.module}.py"
                + (f":{case.smoke_arg if args.smoke else case.arg}"
                   if (case.smoke_arg if args.smoke else case.arg) else ""),
      "method": config.method, "encoder": config.model.encoder,
      "views": describe_views(spec), "num_views": views,
      "dtype": config.model.dtype, "batch": b,
      "devices": jax.device_count(),
      "data": ("JPEG folder, host crops" if case.data == "folder"
               else "in-memory uint8, device crops"),
      "threads": host_threads, "prefetch": prefetch, "workers": workers,
      "workers_setting": config.dataset.workers,
      "step_s": step_s, "step_windows_s": windows,
      "step_images_per_s": b / step_s, "step_views_per_s": b * views / step_s,
      "e2e_s": e2e_s, "e2e_images_per_s": b / e2e_s,
      "stall_fraction": max(0.0, 1.0 - step_s / e2e_s),
      "host_wait_fraction": wait / (e2e_s * args.steps),
      # of which: placing the host batch on the devices (to_device_batch)
      "host_put_fraction": put / (e2e_s * args.steps),
      "phases_s": phases,
      "compile_s": compile_s, "compile_cache": cache,
      "peak_device_bytes": _peak_device_bytes(),
      "xla_step_bytes": _memory_analysis_bytes(compiled),
      "metrics_finite": finite,
      "warmup": args.warmup, "steps": args.steps, "repeats": args.repeats,
  }


# ----------------------------------------------------------------- torch --
def run_torch(args) -> dict:
  """The ResNet-50 two-view VICReg step in PyTorch (a row), or
  {"skipped": reason}: on the GPU (``--torch_device cuda``, the default)
  or, to check this code without one, on the CPU."""
  try:
    import torch
    import torchvision
  except ImportError as e:
    return {"skipped": f"torch/torchvision not importable ({e})"}
  if args.torch_device == "cuda" and not torch.cuda.is_available():
    return {"skipped": f"torch {torch.__version__} sees no CUDA device"}
  from torch import nn
  torch.manual_seed(0)
  dev = torch.device(args.torch_device)
  cuda = dev.type == "cuda"
  if cuda:
    torch.backends.cudnn.benchmark = True
  sync = torch.cuda.synchronize if cuda else (lambda: None)
  b = args.batch_per_device or (SMOKE_SIZES["batch_per_device"] if args.smoke
                                else CASES["r50_in1k"].batch_per_device)
  size = 64 if args.smoke else 224
  width = 64 if args.smoke else 8192  # the recipe's projector (smoke: tiny)
  net = torchvision.models.resnet50()
  net.fc = nn.Identity()
  layers, features = [], 2048
  for _ in range(2):
    layers += [nn.Linear(features, width, bias=False), nn.BatchNorm1d(width),
               nn.ReLU(inplace=True)]
    features = width
  model = nn.Sequential(net, *layers, nn.Linear(features, width))
  model = model.to(dev, memory_format=torch.channels_last)
  opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9,
                        weight_decay=1e-6)

  def vicreg(z1, z2):  # facebookresearch/vicreg's VICReg.forward (25, 25, 1)
    z1, z2 = z1.float(), z2.float()
    n, k = z1.shape
    inv = nn.functional.mse_loss(z1, z2)
    z1, z2 = z1 - z1.mean(0), z2 - z2.mean(0)
    std = lambda z: torch.sqrt(z.var(0) + 1e-4)
    var = (torch.relu(1 - std(z1)).mean() + torch.relu(1 - std(z2)).mean()) / 2
    off = lambda c: (c.pow(2).sum() - c.diagonal().pow(2).sum()) / k
    cov = off(z1.T @ z1 / (n - 1)) + off(z2.T @ z2 / (n - 1))
    return 25 * inv + 25 * var + cov

  def step(x1, x2):
    with torch.autocast(dev.type, dtype=torch.bfloat16):
      loss = vicreg(model(x1), model(x2))  # BatchNorm per view
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()

  fn = torch.compile(step) if args.torch_compile else step
  x1, x2 = (torch.randn(b, 3, size, size, device=dev).contiguous(
      memory_format=torch.channels_last) for _ in range(2))
  if cuda:
    torch.cuda.reset_peak_memory_stats()
  start = time.perf_counter()
  loss = fn(x1, x2)
  sync()
  first_s = time.perf_counter() - start
  for _ in range(args.warmup):
    loss = fn(x1, x2)
  sync()
  windows = []
  for _ in range(args.repeats):
    start = time.perf_counter()
    for _ in range(args.steps):
      loss = fn(x1, x2)
    sync()
    windows.append((time.perf_counter() - start) / args.steps)
  step_s = statistics.median(windows)  # as the JAX rows (np.median)
  return {"model": "torch_r50", "title": "PyTorch ResNet-50 VICReg",
          "views": f"2×{size}", "num_views": 2, "dtype": "bfloat16 autocast",
          "batch": b, "devices": 1, "torch": torch.__version__,
          "torchvision": torchvision.__version__,
          "torch_compile": bool(args.torch_compile),
          "device": (torch.cuda.get_device_name(0) if cuda
                     else f"{dev} ({os.cpu_count()} CPUs)"),
          "step_s": step_s, "step_windows_s": windows,
          "step_images_per_s": b / step_s, "step_views_per_s": 2 * b / step_s,
          "first_step_s": first_s, "loss_finite": math.isfinite(loss.item()),
          "peak_device_bytes": (int(torch.cuda.max_memory_allocated()) if cuda
                                else None)}


# ------------------------------------------------------------------ table --
def _fmt(x, digits=0, scale=1.0):
  if x is None or (isinstance(x, float) and not math.isfinite(x)):
    return "n/a"
  return f"{x / scale:,.{digits}f}"


def _gib(x) -> str:
  text = _fmt(x, 2, 2**30)
  return text if text == "n/a" else text + " GiB"


def _host_input(row: dict) -> str:
  """Who prepares the host batches: worker processes or threads."""
  workers, threads = row.get("workers"), row.get("threads")
  if workers is None or threads is None:
    return "n/a"
  if workers:
    return f"{workers} processes × {threads} thread{'s' * (threads != 1)}"
  return f"{threads} thread{'s' * (threads != 1)}"


def _torch_loss_note(t: dict) -> str:
  """Says so when the PyTorch step's loss ended non-finite (its SGD at lr
  0.1 on random views can diverge; a step costs the same either way)."""
  if t.get("loss_finite", True):
    return ""
  return ", loss non-finite after the timed steps"


def _compile_cell(row: dict) -> str:
  """Compile seconds; "(cache hit)" when the persistent cache served it."""
  cell = _fmt(row["compile_s"], 1)
  return cell + " (cache hit)" if row.get("compile_cache") == "hit" else cell


def markdown(result: dict) -> str:
  """The table of ``result`` (accelerator.json's content) as markdown."""
  m = result["machine"]
  lines = [f"Devices: {m['devices']} ({m['device_kind']}, backend "
           f"{m['backend']}); jax {m['jax']}, jaxlib {m['jaxlib']}; host "
           f"{m['cpus']} CPUs ({m['platform']}); {m['date']}; "
           f"{'--smoke sizes' if result['smoke'] else 'full sizes'}"
           f"{'' if result.get('complete', True) else ' (run incomplete)'}; load "
           f"average {result['load_average_before'][0]:.1f} before, "
           f"{result['load_average_after'][0]:.1f} after.", "",
           "| model | views | dtype | batch | devices | host input | "
           "step img/s | end-to-end img/s | stall % | compile s | "
           "peak device memory | XLA step buffers |",
           "|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
  for r in result["rows"]:
    if "error" in r:
      lines.append(f"| {r['model']} | failed: {r['error'][:120]} |"
                   + " |" * 10)
      continue
    if "matrix_products" in r:  # --compile_only
      lines.append(
          f"| {r['title']} | {r['views']} | | {r['batch']} | {r['devices']} "
          f"| compile only: trace + lower {r['trace_and_lower_s']:.1f} s, "
          f"{r['matrix_products']} matrix products | | | | "
          f"{_compile_cell(r)} | | |")
      continue
    lines.append(
        f"| {r['title']} | {r['views']} | {r['dtype']} | {r['batch']} | "
        f"{r['devices']} | {_host_input(r)} | "
        f"{_fmt(r['step_images_per_s'], 1)} | "
        f"{_fmt(r['e2e_images_per_s'], 1)} | "
        f"{_fmt(100 * r['stall_fraction'], 1)} | {_compile_cell(r)} | "
        f"{_gib(r['peak_device_bytes'])} | {_gib(r['xla_step_bytes'])} |")
  t = result["torch"]
  if "skipped" in t:
    lines += ["", f"PyTorch ResNet-50 step: not measured ({t['skipped']})."]
  else:
    lines += ["", f"PyTorch ResNet-50 two-view step ({t['device']}, torch "
              f"{t['torch']}, channels_last, bf16 autocast, torch.compile "
              f"{'on' if t['torch_compile'] else 'off'}): batch {t['batch']}, "
              f"{_fmt(t['step_images_per_s'], 1)} img/s, peak "
              f"{_gib(t['peak_device_bytes'])}{_torch_loss_note(t)}."]
    jax_row = next((r for r in result["rows"] if r["model"] == "r50_in1k"
                    and "error" not in r), None)
    if jax_row and jax_row["batch"] == t["batch"] * jax_row["devices"]:
      per_device = jax_row["step_images_per_s"] / jax_row["devices"]
      lines.append(f"JAX / PyTorch step img/s: "
                   f"{per_device / t['step_images_per_s']:.2f} (per device).")
  return "\n".join(lines) + "\n"


def machine() -> dict:
  import jax
  import jaxlib
  return {"devices": [str(d) for d in jax.devices()],
          "device_kind": jax.devices()[0].device_kind,
          "backend": jax.default_backend(), "jax": jax.__version__,
          "jaxlib": jaxlib.__version__, "cpus": os.cpu_count(),
          "platform": platform.platform(), "python": platform.python_version(),
          "xla_flags": os.environ.get("XLA_FLAGS", ""),
          "compilation_cache_dir": jax.config.jax_compilation_cache_dir,
          "date": datetime.datetime.now(datetime.timezone.utc).strftime(
              "%Y-%m-%d %H:%M UTC")}


# ------------------------------------------------------------------- main --
def _child(argv: list[str], timeout: float,
           python: str = sys.executable) -> dict:
  """Runs this script on one model in a fresh process; its JSON line."""
  out = subprocess.run([python, os.path.abspath(__file__), *argv],
                       capture_output=True, text=True, timeout=timeout,
                       check=False)
  lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
  if out.returncode or not lines:
    raise RuntimeError(f"exit {out.returncode}: {out.stderr.strip()[-600:]}")
  return json.loads(lines[-1])


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", required=True, help="output directory")
  parser.add_argument("--smoke", action="store_true",
                      help="toy sizes (the recipes' smoke variants): checks "
                      "the command on a CPU")
  parser.add_argument("--models", default=None,
                      help=f"comma list of {list(CASES)}; default "
                      f"{','.join(DEFAULT_MODELS)}")
  parser.add_argument("--batch_per_device", type=int, default=0,
                      help="0: each model's own (smoke: 8)")
  parser.add_argument("--warmup", type=int, default=None)
  parser.add_argument("--steps", type=int, default=None)
  parser.add_argument("--repeats", type=int, default=None)
  parser.add_argument("--threads", type=int, default=0,
                      help="grain threads (0: the recipe's)")
  parser.add_argument("--workers", type=int, default=None,
                      help="worker processes of the host pipeline, each with "
                      "--threads threads (0: the threads of one process; -1: "
                      "auto, ssljax.data.batches.host_workers; default: the "
                      "recipe's)")
  parser.add_argument("--image_size", type=int, default=None,
                      help="mean side of the generated JPEGs")
  parser.add_argument("--image_jitter", type=int, default=None)
  parser.add_argument("--num_images", type=int, default=None)
  parser.add_argument("--data_dir", default=tempfile.gettempdir(),
                      help="where the generated JPEG folder is kept")
  parser.add_argument("--torch", choices=("auto", "off"), default="auto")
  parser.add_argument("--torch_compile", action="store_true")
  parser.add_argument("--torch_device", default="cuda",
                      help="cuda; cpu only to check the PyTorch code")
  parser.add_argument("--torch_python", default=sys.executable,
                      help="the Python whose torch runs the PyTorch step")
  parser.add_argument("--isolate", choices=("auto", "yes", "no"),
                      default="auto",
                      help="each model in its own child process (yes) or all "
                      "in this one (no: one import and start-up, but peak "
                      "device memory is then the running maximum); auto: "
                      "no with --smoke, else yes")
  parser.add_argument("--model_timeout", type=float, default=600.0)
  parser.add_argument("--compilation_cache", default=None,
                      help="JAX's persistent compilation cache directory "
                      "(ssljax.compilation_cache.enable; 'auto': the main "
                      "job's default). Unset: as the process is. A run with "
                      "--compile_only fills it, so that a timed run after it "
                      "loads every step (its rows say compile cache hit)")
  parser.add_argument("--compile_only", action="store_true",
                      help="stop each model after compiling its step: "
                      "trace + lower and compile seconds, the lowered "
                      "program's lines and matrix products (no timings, "
                      "no table)")
  parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  sizes = SMOKE_SIZES if args.smoke else FULL_SIZES
  for key in ("warmup", "steps", "repeats", "image_size", "image_jitter",
              "num_images"):
    if getattr(args, key) is None:
      setattr(args, key, sizes[key])
  args.in_process = (args.isolate == "no"
                     or (args.isolate == "auto" and args.smoke))
  args.models = (args.models.split(",") if args.models else DEFAULT_MODELS)
  unknown = [m for m in args.models if m not in CASES]
  if unknown:
    parser.error(f"unknown model(s) {unknown}; expected some of {list(CASES)}")
  if args.steps < 1 or args.repeats < 1 or args.warmup < 0:
    parser.error("--steps and --repeats must be >= 1, --warmup >= 0")
  if args.workers is not None and args.workers < -1:
    parser.error("--workers must be >= 0, or -1 (auto)")
  return args


def child_argv(args, extra: list[str]) -> list[str]:
  argv = ["--out", args.out, "--warmup", str(args.warmup), "--steps",
          str(args.steps), "--repeats", str(args.repeats), "--threads",
          str(args.threads), *(() if args.workers is None else
                               ("--workers", str(args.workers))),
          "--image_size", str(args.image_size),
          "--image_jitter", str(args.image_jitter), "--num_images",
          str(args.num_images), "--data_dir", args.data_dir,
          "--batch_per_device", str(args.batch_per_device),
          "--torch_device", args.torch_device, *extra,
          *(("--compilation_cache", args.compilation_cache)
            if args.compilation_cache else ())]
  return argv + (["--smoke"] if args.smoke else []) + (
      ["--torch_compile"] if args.torch_compile else []) + (
          ["--compile_only"] if args.compile_only else [])


def main(argv=None) -> dict:
  args = parse_args(argv)
  if args.child:  # one model (or "torch"), one JSON line on stdout
    row = run_torch(args) if args.child == "torch" else run_model(
        args.child, args)
    print(json.dumps(row), flush=True)
    return row
  os.makedirs(args.out, exist_ok=True)
  load_before = os.getloadavg()
  result = {"smoke": args.smoke, "complete": False, "machine": machine(),
            "rows": [], "torch": {"skipped": "--torch off"},
            "argv": sys.argv[1:] if argv is None else argv,
            "load_average_before": load_before}
  if any(CASES[m].data == "folder" for m in args.models):
    write_folder(args)
  # The PyTorch row runs right after the ResNet-50 row it is compared with
  # (or first, without it); the files are rewritten after every row, so a
  # run stopped part way (a lease's time limit) keeps the rows it finished.
  torch_after = "r50_in1k" if "r50_in1k" in args.models else None
  if args.torch == "auto" and torch_after is None:
    result["torch"] = run_torch_child(args)
    write_result(args, result)
  for name in args.models:
    print(f"{name} ...", flush=True)
    start = time.perf_counter()
    try:
      row = (run_model(name, args) if args.in_process else _child(
          child_argv(args, ["--child", name]), args.model_timeout))
    except Exception as e:  # pylint: disable=broad-except  # next model
      row = {"model": name, "error": f"{type(e).__name__}: {e}"}
    # The whole model: with --isolate, its process's imports and backend
    # start-up too (the part of it before run_model is not in phases_s).
    row["model_wall_s"] = time.perf_counter() - start
    print(json.dumps(row), flush=True)
    result["rows"].append(row)
    if args.torch == "auto" and name == torch_after:
      result["torch"] = run_torch_child(args)
      print(json.dumps(result["torch"]), flush=True)
    write_result(args, result)
  result["complete"] = True
  table = write_result(args, result)
  print(table)
  return result


def run_torch_child(args) -> dict:
  """The PyTorch row in its own process (JAX holds most of the GPU's memory
  while it lives), or {"skipped": reason}."""
  try:
    return _child(child_argv(args, ["--child", "torch"]), args.model_timeout,
                  args.torch_python)
  except Exception as e:  # pylint: disable=broad-except
    return {"skipped": f"{type(e).__name__}: {e}"}


def write_result(args, result: dict) -> str:
  """Writes accelerator.json and accelerator.md (so far); returns the table."""
  result["load_average_after"] = os.getloadavg()
  with open(os.path.join(args.out, "accelerator.json"), "w") as f:
    json.dump(result, f, indent=2)
  table = markdown(result)
  with open(os.path.join(args.out, "accelerator.md"), "w") as f:
    f.write(table)
  return table

if __name__ == "__main__":
  main()
