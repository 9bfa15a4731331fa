"""Accelerator benchmark: images/s of the recipes' train steps, one command.

    python benchmarks/accelerator.py --out DIR            # full sizes
    python benchmarks/accelerator.py --out DIR --smoke    # toy sizes (CPU)
    python benchmarks/accelerator.py --out DIR --models r50_in1k --steps 50
    python benchmarks/accelerator.py --out DIR --parts fair --models r50_in1k \\
        --profile DIR/profile                # same work as PyTorch, traced

Two parts (``--parts``, default both).

**recipe**: on whatever devices JAX sees (the batch is split over all of
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

**fair** (the same work on both sides), for the models of FAIR_TWINS in
``--models`` (r50_in1k, vitb16_mae; vitt4_mae_fmnist, ssljax only):

* **peak**: the device's bf16 matrix rate measured in the same run: a
  ``--peak_size``³ (8192) bfloat16 product in jax, median of 3 windows;
* **ssljax, views given ready**: the recipe's step, unchanged, on a
  ``{"ready_views": float32 (V, B, S, S, C)}`` batch (the step makes no
  views) without labels (so no online probe, which the PyTorch step has
  not);
* **ssljax, views made on the GPU**: the same step on ``{"images": uint8
  (B, N, N, C)}`` of ``--source_size`` N = 256: it cuts and augments every
  view on the device (`ssljax.data.device_views`);
* **PyTorch** (benchmarks/accelerator_torch.py, its own process, the
  Python of ``--torch_python``), in each of ``--torch_modes`` (default
  torch.compile, then eager; ``--smoke``: eager), on the same two inputs:
  torchvision's ResNet-50 with the recipe's projector, VICReg loss and
  LARS (optax.lars's order), channels_last and bf16 autocast; its views
  made on the GPU by the same crop and colour operations as
  `ssljax.data.device_views` for the recipe's view spec, per-sample random
  parameters (that module's docstring says how). ``--smoke`` shrinks it to
  one bottleneck block per stage at a quarter width. For vitb16_mae: MAE
  (``MaskedAutoencoder``: torchvision's ViT-B/16 blocks as the encoder of
  the visible 25 % of the patches, a decoder 512 wide with 8 blocks, the
  normalised-pixel loss in float32) with AdamW (kernels decayed), bf16
  autocast; ``--smoke`` gives it the recipe's smoke sizes. The first of
  ``--torch_modes`` runs after each model's ssljax rows, the others after
  every model's first (a run cut short loses those rows first);
* each row: img/s, step ms, **FLOPs per image**, the standard count
  (matrix products and convolutions, 2 per multiply-add, forward and
  backward; the view ops' products too): ssljax's from the lowered step
  (``stablehlo_matmul_flops``; XLA's own cost analysis is in the JSON only:
  ``xla_flops`` says why), PyTorch's by ``torch.utils.flop_counter`` of one
  eager step (attention by the math backend while counting). The two
  counts agree with views given ready: 51.19 GFLOP per image on
  ResNet-50's step, 58.46 on ViT-B/16 MAE's; ``--flops_only`` prints the
  count alone (and the products not in bf16, `wide_products`). Then
  achieved TFLOP/s and **MFU** = FLOPs per image × img/s ÷ devices ÷ the
  measured peak; compile s (ssljax) or first-call s (PyTorch:
  torch.compile's compilation); peak device memory (ssljax: the process's
  running maximum, ready row first; PyTorch: per row). Then the ratio
  ssljax / PyTorch per device for each view mode and torch mode.
* ``--profile DIR``: after each row's timing, a trace of
  ``--profile_steps`` more steps (``jax.profiler.trace`` with a perfetto
  trace; ``torch.profiler`` with its Chrome trace, for the modes of
  ``--profile_torch_modes``), each row's top
  ``--profile_top`` ops by device time as text (DIR/*_top.txt) and all of
  them in DIR/profile_summary.txt, readable on a machine without a GPU.

Each model: ``--warmup`` steps, then ``--steps`` timed steps (median over
``--repeats`` windows of ``--steps`` steps for the device-resident step),
then (recipe part) the end-to-end loop: ``--warmup`` + ``prefetch`` steps
to drain the pipeline's read-ahead, then ``--steps`` timed steps.

Writes ``DIR/accelerator.json`` (machine, devices, jax version, one row per
model, the same-work rows and peak) and ``DIR/accelerator.md`` (the
tables). Speed depends on the machine and its load: compare numbers of one
run. ``benchmarks/gpu_session.sh`` runs the same-work part on a lent GPU in
one call.
"""

import argparse
import dataclasses
import datetime
import importlib
import json
import math
import os
import platform
import re
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


def timed_steps(compiled, state, batch, args):
  """``args.warmup`` steps, then the median over ``args.repeats`` windows
  of ``args.steps`` steps of the seconds per step, the same batch every
  step; (state, last metrics, the windows' seconds per step).
  """
  import jax
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
  return state, metrics, windows


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

  state, metrics, windows = timed_steps(compiled, state, batch, args)
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


# -------------------------------------------------------------- same work --
# Models with same-work rows (--parts fair), and the PyTorch twin of each
# (benchmarks/accelerator_torch.py; None: no twin built yet).
FAIR_TWINS = {"r50_in1k": "resnet50_vicreg", "vitb16_mae": "vit_mae",
              "vitt4_mae_fmnist": None}
SOURCE_SIZES = {"smoke": 80, "full": 256}  # side of the uint8 source images
PEAK_SIZES = {"smoke": 256, "full": 8192}  # n of the n x n x n bf16 matmul


def xla_flops(stage) -> float:
  """FLOPs of one call of a jax program by XLA's cost analysis
  (``stage.cost_analysis()["flops"]``: 2 per multiply-add of matrix
  products and convolutions, 1 per element of elementwise ops; one device's
  program); NaN when the backend gives none.

  ``stage`` is a ``jax.stages.Lowered`` (the program before XLA's passes:
  every convolution and matrix product is still an HLO op, the count the
  MFU column uses) or a ``Compiled``: after the GPU passes, convolutions
  and most matrix products are cuDNN/cuBLAS custom calls that the count
  leaves out (ResNet-50's step: 0.82 GFLOP per image compiled on an H200,
  against about 51 by the standard count), so the compiled count is kept
  in the JSON only.
  """
  try:
    cost = stage.cost_analysis()
  except Exception:  # pylint: disable=broad-except  # backend without it
    return float("nan")
  if isinstance(cost, (list, tuple)):  # older jax: one dict per program
    cost = cost[0] if cost else {}
  return float((cost or {}).get("flops", float("nan")))


_SYMBOL = r"@(\"[^\"]+\"|[\w$.-]+)"  # MLIR symbol, bare or quoted
_FUNC = re.compile(r"func\.func (?:public |private )?" + _SYMBOL + r"\(")
_CALL = re.compile(r"call " + _SYMBOL + r"\(")
_OPERANDS = re.compile(r": \((tensor<[^>]*>), (tensor<[^>]*>)\) -> "
                       r"(tensor<[^>]*>)")


def _dims(tensor_type: str) -> list:
  """[d0, d1, ...] of an MLIR ``tensor<d0xd1x...xdtype>``."""
  return [int(d) for d in tensor_type[len("tensor<"):-1].split("x")[:-1]]


def _op_flops(line: str) -> float:
  """2 x multiply-adds of one StableHLO dot_general or convolution line."""
  m = _OPERANDS.search(line)
  if not m:
    raise ValueError(f"no operand types in {line.strip()[:200]!r}")
  lhs, rhs, out = (_dims(t) for t in m.groups())
  if "stablehlo.dot_general" in line:
    contracting = re.search(r"contracting_dims = \[([\d, ]*)\] x", line)
    dims = [int(d) for d in contracting.group(1).split(",") if d.strip()]
    return 2.0 * math.prod(out) * math.prod(lhs[d] for d in dims)
  layout = [x.strip() for x in re.search(
      r"\]x\[([^\]]*)\]->", line).group(1).split(",")]
  dilate = re.search(r"lhs_dilate = \[([\d, ]*)\]", line)
  if dilate and any(int(d) > 1 for d in dilate.group(1).split(",")):
    # The input gradient of a strided convolution (zeros between the
    # input's pixels): each real input element meets each tap once, the
    # forward convolution's cost (torch.utils.flop_counter's rule).
    return 2.0 * math.prod(lhs) * math.prod(rhs) / rhs[layout.index("i")]
  return 2.0 * math.prod(out) * math.prod(rhs) / rhs[layout.index("o")]


def stablehlo_matmul_flops(text: str) -> float:
  """FLOPs of the matrix products and convolutions of a lowered jax program
  (``lowered.as_text()``, StableHLO): 2 per multiply-add, each function's
  ops counted once per call from ``main`` (the standard count, as
  ``torch.utils.flop_counter``'s: elementwise ops, reductions and data
  movement are not counted). A convolution costs 2 · |output| · |kernel|
  ÷ kernel output features (2 · |input| · |kernel| ÷ kernel input
  features when its input is dilated: a strided convolution's input
  gradient); a dot_general 2 · |output| · the product of the contracted
  sides. Loop bodies (``stablehlo.while``) count once. On ResNet-50's
  VICReg step this gives torch.utils.flop_counter's count of the same
  network to the FLOP.

  Raises:
    ValueError: a dot_general or convolution line without its types.
  """
  funcs, current = {}, None
  for line in text.splitlines():
    m = _FUNC.search(line)
    if m:
      current = funcs.setdefault(m.group(1), {"flops": 0.0, "calls": []})
      continue
    if current is None:
      continue
    current["calls"] += _CALL.findall(line)
    if "stablehlo.dot_general" in line or "stablehlo.convolution" in line:
      current["flops"] += _op_flops(line)
  memo = {}

  def total(name):
    if name not in memo:
      f = funcs.get(name, {"flops": 0.0, "calls": []})
      memo[name] = f["flops"] + sum(total(c) for c in f["calls"])
    return memo[name]

  return total("main")


_LOC_DEF = re.compile(r"^#(loc\d*) = loc\((.*)\)\s*$")
_OP_LOC = re.compile(r"loc\(#(loc\d*)\)\s*$")


def _frames(ref: str, locs: dict) -> list:
  """[(name or None, "file:line" or None)] of an MLIR location, innermost
  frame first (a jax op's name, then its call stack)."""
  body = locs.get(ref, "unknown")
  m = re.match(r"callsite\(#(loc\d*) at #(loc\d*)\)$", body)
  if m:
    return _frames(m.group(1), locs) + _frames(m.group(2), locs)
  m = re.match(r'"([^"]*)"\(#(loc\d*)\)$', body)
  if m:
    inner = _frames(m.group(2), locs)
    if inner and inner[0][0] is None:
      return [(m.group(1), inner[0][1])] + inner[1:]
    return [(m.group(1), None)] + inner
  m = re.match(r'"([^"]*)":(\d+)', body)
  return [(None, f"{m.group(1)}:{m.group(2)}")] if m else []


def matrix_products(text: str) -> list:
  """Every matrix product and convolution of a lowered jax program, with
  where it comes from.

  Args:
    text: ``lowered.as_text(debug_info=True)`` (StableHLO with jax's
      location metadata: each op's name and Python call stack).

  Returns:
    one dict per op (in program order; an op in a function called k times
    from ``main`` once, with ``calls`` k): "kind" ("dot_general" |
    "convolution"), "types" (lhs, rhs, result MLIR tensor types), "dtypes"
    (their element types), "precision" (the dot_general's operand
    precisions, "" for a convolution), "flops" (2 per multiply-add, times
    ``calls``: `stablehlo_matmul_flops`'s count), "calls", "op_name" (jax's
    name stack, e.g. ".../projector/Dense_0/dot_general") and "source"
    (the innermost frame in an ``ssljax/`` file: "function path:line", or
    "?").

  Raises:
    ValueError: a product line without its operand types.
  """
  locs = {}
  for line in text.splitlines():
    m = _LOC_DEF.match(line)
    if m:
      locs[m.group(1)] = m.group(2)
  funcs, current = {}, None
  for line in text.splitlines():
    m = _FUNC.search(line)
    if m:
      current = funcs.setdefault(m.group(1), {"ops": [], "calls": []})
      continue
    if current is None:
      continue
    current["calls"] += _CALL.findall(line)
    if "stablehlo.dot_general" in line or "stablehlo.convolution" in line:
      current["ops"].append(line)
  order, seen = [], set()

  def visit(name):  # callers before callees (reverse post-order)
    if name in seen or name not in funcs:
      return
    seen.add(name)
    for callee in funcs[name]["calls"]:
      visit(callee)
    order.append(name)

  visit("main")
  calls = {name: 0 for name in funcs}
  calls["main"] = 1
  for name in reversed(order):
    for callee in funcs[name]["calls"]:
      calls[callee] += calls[name]
  out = []
  for name in reversed(order):
    for line in funcs[name]["ops"]:
      types = _OPERANDS.search(line).groups()
      ref = _OP_LOC.search(line)
      frames = _frames(ref.group(1), locs) if ref else []
      precision = re.search(r"precision = \[([^\]]*)\]", line)
      out.append({
          "kind": ("dot_general" if "stablehlo.dot_general" in line
                   else "convolution"),
          "types": list(types),
          "dtypes": [t[len("tensor<"):-1].split("x")[-1] for t in types],
          "precision": precision.group(1) if precision else "",
          "flops": _op_flops(line) * calls[name], "calls": calls[name],
          "op_name": next((n for n, _ in frames if n and "/" in n),
                          frames[0][0] if frames else "?"),
          "source": next((f"{n} {f}" for n, f in frames
                          if f and "/ssljax/" in f), "?")})
  return out


def wide_products(text: str, batch: int) -> dict:
  """The matrix products of a lowered step (``matrix_products``) whose
  operands are not both bfloat16: {"flops_per_image": their FLOPs per
  image, "share": their share of all products' FLOPs, "ops": one dict per
  op (kind, shapes, precision, GFLOP per image, op name, source), largest
  first}."""
  ops = matrix_products(text)
  total = sum(o["flops"] for o in ops) or 1.0
  wide = [o for o in ops if o["dtypes"][:2] != ["bf16", "bf16"]]
  return {"flops_per_image": sum(o["flops"] for o in wide) / batch,
          "share": sum(o["flops"] for o in wide) / total,
          "ops": [{"kind": o["kind"], "types": o["types"],
                   "precision": o["precision"],
                   "flops_per_image": o["flops"] / batch,
                   "op_name": o["op_name"], "source": o["source"]}
                  for o in sorted(wide, key=lambda o: -o["flops"])]}


def mfu(flops_per_image: float, images_per_s: float, devices: int,
        peak_flop_per_s: float) -> float:
  """Model FLOPs utilisation: achieved model FLOP/s per device over the
  measured peak, ``flops_per_image * images_per_s / devices / peak``."""
  return flops_per_image * images_per_s / devices / peak_flop_per_s


def run_peak(args) -> dict:
  """The device's bf16 matrix peak as measured here: an n x n x n bfloat16
  product (float32 accumulation) in jax, 3 warm-up calls, then the median
  of 3 windows of ``reps`` calls; 2 n^3 FLOPs per call."""
  import jax
  import jax.numpy as jnp
  n = args.peak_size
  reps = 3 if args.smoke else 20
  ka, kb = jax.random.split(jax.random.key(0))
  a = jax.random.normal(ka, (n, n), jnp.bfloat16)
  b = jax.random.normal(kb, (n, n), jnp.bfloat16)
  f = jax.jit(lambda a, b: a @ b)
  for _ in range(3):
    out = f(a, b)
  out.block_until_ready()
  windows = []
  for _ in range(3):
    start = time.perf_counter()
    for _ in range(reps):
      out = f(a, b)
    out.block_until_ready()
    windows.append((time.perf_counter() - start) / reps)
  seconds = statistics.median(windows)
  return {"size": n, "dtype": "bfloat16", "reps": reps,
          "windows_s": windows, "flop_per_s": 2 * n**3 / seconds,
          "device_kind": jax.devices()[0].device_kind,
          "backend": jax.default_backend()}


def source_side(case: Case, args) -> int:
  """Side of the uint8 images the "views made on the GPU" rows crop: the
  dataset's own for in-memory cases (28 F-MNIST, 32 CIFAR), else
  ``--source_size``."""
  if case.data == "array":
    return 28 if case.module in ("ijepa", "mae") else 32
  return args.source_size


def fair_views(spec, source_size: int) -> dict:
  """The view recipe of the PyTorch twin: sizes, crop ranges, per-view ops
  (plain JSON of an `ssljax.data.ViewSpec`)."""
  return {"sizes": list(spec.sizes((source_size, source_size, 3))),
          "crop_scale": [list(spec.crop_args(v)["crop_scale"])
                         for v in range(spec.num_views)],
          "crop_ratio": list(spec.crop_ratio),
          "crop": spec.crop,
          "ops": [{k: (list(x) if isinstance(x, tuple) else x)
                   for k, x in spec.ops[v]} for v in range(spec.num_views)]}


def torch_twin(name: str, args) -> dict | None:
  """The spec of the PyTorch step that does the work of ``name``'s ssljax
  step (None: no twin): its model, loss, optimiser (LARS for the
  ResNet-50 VICReg twin, AdamW for the ViT MAE twin), batch and views."""
  from ssljax import data
  kind = FAIR_TWINS.get(name)
  if kind is None:
    return None
  config = model_config(CASES[name], args)
  spec = data.view_spec(config.views)
  common = {"kind": kind, "model": name,
            "batch": config.batch_size // _device_count(),
            "source_size": source_side(CASES[name], args),
            "views": fair_views(spec, source_side(CASES[name], args))}
  if kind == "vit_mae":
    kw, dec, o = (config.model.encoder_kwargs, config.model.mae_decoder,
                  config.optim)
    return dict(common,
                encoder={"patch_size": kw.patch_size,
                         "hidden_dim": kw.hidden_dim, "depth": kw.depth,
                         "num_heads": kw.num_heads,
                         "mlp_ratio": kw.get("mlp_ratio", 4.0)},
                decoder={"width": dec.width, "depth": dec.depth,
                         "num_heads": dec.num_heads},
                mask_ratio=config.masks.mask_ratio,
                norm_pix_loss=bool(config.loss.norm_pix_loss),
                optim={"lr": o.learning_rate * config.batch_size / 256,
                       "b1": o.get("b1", 0.9), "b2": o.get("b2", 0.999),
                       "eps": 1e-8, "weight_decay": o.weight_decay})
  loss, lars = config.loss, config.optim.lars
  return dict(common,
              projector=list(config.model.projector),
              # --smoke: a one-block-per-stage, quarter-width ResNet-50 (the
              # recipe's smoke encoder is a narrow ResNet-50 too).
              layers=[1, 1, 1, 1] if args.smoke else [3, 4, 6, 3],
              width_per_group=16 if args.smoke else 64,
              loss={"inv": loss.inv_weight, "var": loss.var_weight,
                    "cov": loss.cov_weight, "eps": loss.eps},
              optim={"lr": config.optim.learning_rate * config.batch_size
                           / 256,
                     "momentum": lars.momentum,
                     "weight_decay": config.optim.weight_decay,
                     "eta": lars.trust_coefficient})


def _device_count() -> int:
  import jax
  return jax.device_count()


def summarize_jax_trace(log_dir: str, top: int) -> str:
  """Top-``top`` ops of the newest perfetto trace under ``log_dir``
  (``jax.profiler.trace(..., create_perfetto_trace=True)``), by total
  time: the device's ops where the trace has a device ("/device:..."
  processes), else every complete event. Text, readable without tools."""
  import glob
  import gzip
  paths = sorted(glob.glob(os.path.join(log_dir, "**",
                                        "perfetto_trace.json.gz"),
                           recursive=True), key=os.path.getmtime)
  if not paths:
    return f"no perfetto trace under {log_dir}\n"
  with gzip.open(paths[-1], "rt") as f:
    trace = json.load(f)
  events = trace.get("traceEvents", trace) if isinstance(trace, dict) \
      else trace
  names = {e.get("pid"): e.get("args", {}).get("name", "") for e in events
           if e.get("ph") == "M" and e.get("name") == "process_name"}
  device = {pid for pid, n in names.items()
            if "/device:" in n and "/device:CPU" not in n}
  totals, counts = {}, {}
  for e in events:
    if e.get("ph") != "X" or (device and e.get("pid") not in device):
      continue
    if not device and e.get("name", "").startswith("$"):
      continue  # the Python tracer's frames (host-only traces)
    key = e.get("name", "?")
    totals[key] = totals.get(key, 0.0) + float(e.get("dur", 0.0))
    counts[key] = counts.get(key, 0) + 1
  whole = sum(totals.values()) or 1.0
  where = ("device ops (" + ", ".join(sorted(names[p] for p in device)) + ")"
           if device else "host events, Python frames left out (no device "
           "process in the trace)")
  lines = [f"jax.profiler trace {paths[-1]}", f"{where}: {len(totals)} names, "
           f"{whole / 1e3:.3f} ms in all", "",
           f"{'total ms':>10} {'%':>6} {'calls':>6}  name"]
  for key in sorted(totals, key=totals.get, reverse=True)[:top]:
    lines.append(f"{totals[key] / 1e3:10.3f} {100 * totals[key] / whole:6.2f}"
                 f" {counts[key]:6d}  {key[:150]}")
  return "\n".join(lines) + "\n"


def run_fair_jax(name: str, args) -> list:
  """ssljax's train step on the same work as the PyTorch twin: two rows.

  The recipe's jitted step (`ssljax.train.sharded_train_step`, unchanged)
  on a batch without labels (so no online probe, which PyTorch's step has
  not): "ready", ``{"ready_views": float32 (V, B, S, S, C)}`` (views given,
  the step makes none); "gpu", ``{"images": uint8 (B, N, N, C)}`` of
  ``--source_size`` N (the step crops and augments every view on the
  device, `ssljax.data.device_views`). Each: compile, XLA's FLOPs, warm-up,
  median of windows; with ``--profile`` a jax.profiler trace of a few steps.
  """
  import jax
  import numpy as np
  from ssljax import (compilation_cache, config_validation, data, inputs,
                      methods, optimizers, train, train_state)
  compilation_cache.use_threefry_gpu_kernel()
  if args.compilation_cache:
    compilation_cache.enable(args.compilation_cache)
  case = CASES[name]
  config = model_config(case, args)
  config_validation.validate(config)
  spec = data.view_spec(config.views)
  mesh = train.make_mesh()
  steps_per_epoch, total_steps = 100, 10000  # schedules: no effect on speed
  channels = config.dataset.channels
  side = source_side(case, args)
  source = (side, side, channels)
  shapes = train.batch_spec(config, source, spec=spec)
  method = methods.build(config)
  lr_fn = optimizers.create_learning_rate_fn(config.optim, config.batch_size,
                                             steps_per_epoch, total_steps)
  tx = optimizers.create_optimizer(config.optim, lr_fn, steps_per_epoch,
                                   total_steps)
  from jax.sharding import NamedSharding, PartitionSpec as P
  state = jax.device_put(train_state.create_train_state(
      method, tx, jax.random.key(config.seed), shapes),
      NamedSharding(mesh, P()))
  step_fn = train.sharded_train_step(config, mesh, total_steps=total_steps,
                                     steps_per_epoch=steps_per_epoch,
                                     spec=spec)
  b = config.batch_size
  rng = np.random.default_rng(0)
  sizes = spec.sizes(source)
  if len(set(sizes)) != 1:
    raise ValueError(f"{name}: ready views of several sizes {sizes}")
  host = {"ready": {"ready_views": rng.random(
              (len(sizes), b, sizes[0], sizes[0], channels), np.float32)},
          "gpu": {"images": rng.integers(0, 256, (b, *source), np.uint8)}}
  rows = []
  for view_mode, host_batch in host.items():
    batch = inputs.to_device_batch(host_batch, mesh)
    start = time.perf_counter()
    lowered = step_fn.lower(state, batch)
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
    flops = stablehlo_matmul_flops(lowered.as_text())
    state, metrics, windows = timed_steps(compiled, state, batch, args)
    step_s = float(np.median(windows))
    finite = all(math.isfinite(float(v)) for v in jax.device_get(
        metrics).values() if np.ndim(v) == 0)
    row = {"side": "ssljax", "model": name, "title": case.title,
           "view_mode": view_mode, "torch_mode": None,
           "views": describe_views(spec), "dtype": config.model.dtype,
           "batch": b, "devices": jax.device_count(),
           "source": f"{side}×{side}" if view_mode == "gpu" else None,
           "step_s": step_s, "step_windows_s": windows,
           "images_per_s": b / step_s, "compile_s": compile_s,
           # The lowered program is the whole batch's (before partitioning).
           "flops_per_image": flops / b,
           "flops_count": "matrix products and convolutions of the "
                          "lowered step (stablehlo_matmul_flops)",
           # XLA's own counts, for reference (module docstring):
           "xla_flops_per_image_lowered": xla_flops(lowered) / b,
           # the compiled program is one device's: B / devices images
           "xla_flops_per_image_compiled": xla_flops(compiled)
                                           * jax.device_count() / b,
           "loss_finite": finite,
           "peak_device_bytes": _peak_device_bytes(),
           "jax": jax.__version__}
    if args.profile:
      trace_dir = os.path.join(args.profile, f"ssljax_{name}_{view_mode}")
      with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        for _ in range(args.profile_steps):
          state, metrics = compiled(state, batch)
        jax.block_until_ready(metrics)
      text = (f"ssljax {name}, {view_mode} views, {args.profile_steps} "
              f"steps\n" + summarize_jax_trace(trace_dir, args.profile_top))
      row["profile"] = trace_dir + "_top.txt"
      with open(row["profile"], "w") as f:
        f.write(text)
    rows.append(row)
    del batch
  return rows


def count_fair_flops(name: str, args) -> list:
  """FLOPs per image of ``name``'s step in both view modes, lowered only
  (no parameters made, nothing compiled or run): the standard count
  (`stablehlo_matmul_flops`) that the same-work rows use, on any machine;
  and the products whose operands are not both bfloat16, with their
  source lines (`wide_products`), one dict per view mode."""
  import jax
  import jax.numpy as jnp
  from ssljax import data, methods, optimizers, train, train_state
  case = CASES[name]
  config = model_config(case, args)
  spec = data.view_spec(config.views)
  mesh = train.make_mesh()
  side = source_side(case, args)
  source = (side, side, config.dataset.channels)
  method = methods.build(config)
  lr_fn = optimizers.create_learning_rate_fn(config.optim, config.batch_size,
                                             100, 10000)
  tx = optimizers.create_optimizer(config.optim, lr_fn, 100, 10000)
  shapes = train.batch_spec(config, source, spec=spec)
  state = jax.eval_shape(lambda: train_state.create_train_state(
      method, tx, jax.random.key(0), shapes))
  step_fn = train.sharded_train_step(config, mesh, total_steps=10000,
                                     steps_per_epoch=100, spec=spec)
  b, sizes = config.batch_size, spec.sizes(source)
  batches = {"ready": {"ready_views": jax.ShapeDtypeStruct(
                 (len(sizes), b, sizes[0], sizes[0], source[2]), jnp.float32)},
             "gpu": {"images": jax.ShapeDtypeStruct((b, *source), jnp.uint8)}}
  rows = []
  for mode, batch in batches.items():
    text = step_fn.lower(state, batch).as_text(debug_info=True)
    rows.append({"model": name, "view_mode": mode, "batch": b,
                 "dtype": config.model.dtype,
                 "flops_per_image": stablehlo_matmul_flops(text) / b,
                 "wide_products": wide_products(text, b)})
  return rows


def run_fair_torch(name: str, mode: str, args) -> list:
  """The PyTorch twin's rows (benchmarks/accelerator_torch.py), or one
  {"skipped": reason} row; runs in the Python of ``--torch_python``."""
  base = {"side": "pytorch", "model": name, "torch_mode": mode}
  twin = json.loads(args.twin) if args.twin else None
  if twin is None:
    return [dict(base, skipped="no PyTorch twin of this recipe yet")]
  try:
    import torch
    from benchmarks import accelerator_torch
  except ImportError as e:
    return [dict(base, skipped=f"torch/torchvision not importable ({e})")]
  if args.torch_device == "cuda" and not torch.cuda.is_available():
    return [dict(base, skipped=f"torch {torch.__version__} sees no CUDA")]
  if args.profile:
    os.makedirs(args.profile, exist_ok=True)
  rows = accelerator_torch.run(
      twin, device=args.torch_device, mode=mode, warmup=args.warmup,
      steps=args.steps, repeats=args.repeats,
      profile_dir=args.profile if mode in args.profile_torch_modes else None,
      profile_steps=args.profile_steps, profile_top=args.profile_top)
  title = CASES[name].title
  return [dict(base, title=title, **r) for r in rows]


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


def _compile_cell(row: dict) -> str:
  """Compile seconds; "(cache hit)" when the persistent cache served it."""
  cell = _fmt(row["compile_s"], 1)
  return cell + " (cache hit)" if row.get("compile_cache") == "hit" else cell


def _fair_label(r: dict) -> str:
  side = ("ssljax" if r["side"] == "ssljax" else
          f"PyTorch {'torch.compile' if r['torch_mode'] == 'compile' else 'eager'}")
  return side


VIEW_MODES = {"ready": "views given ready", "gpu": "views made on the GPU"}


def _flops_lines(r: dict) -> list:
  """``--flops_only``'s text of one count: the FLOPs per image, then the
  products whose operands are not both bfloat16 (a table)."""
  lines = ["", f"FLOPs per image (matrix products and convolutions), "
           f"{r['model']}, {VIEW_MODES[r['view_mode']]}, batch "
           f"{r['batch']}: {r['flops_per_image'] / 1e9:.4f} GFLOP."]
  wide = r.get("wide_products")
  if not wide:
    return lines
  lines.append(f"Of which products with an operand not in bfloat16 (the "
               f"step's dtype: {r.get('dtype', '?')}): {len(wide['ops'])}, "
               f"{wide['flops_per_image'] / 1e9:.4f} GFLOP per image, "
               f"{100 * wide['share']:.2f} %.")
  if wide["ops"]:
    lines += ["", "| GFLOP/img | op | lhs, rhs -> result | precision | "
              "op name | source |", "|---:|---|---|---|---|---|"]
  for o in wide["ops"]:
    shapes = (f"{o['types'][0][7:-1]}, {o['types'][1][7:-1]} -> "
              f"{o['types'][2][7:-1]}")
    source = re.sub(r"^(\S+) .*/(ssljax/)", r"\1 \2", o["source"])
    lines.append(f"| {o['flops_per_image'] / 1e9:.4f} | {o['kind']} | "
                 f"{shapes} | {o['precision'] or '-'} | "
                 f"{o['op_name'][-70:]} | {source} |")
  return lines


def fair_markdown(result: dict) -> list:
  """The same-work table's lines (empty without --parts fair)."""
  fair = result.get("fair")
  if not fair:
    return []
  if "flops_only" in fair:
    return [line for r in fair["flops_only"] for line in _flops_lines(r)]
  peak = fair.get("peak") or {}
  lines = [""]
  if "flop_per_s" in peak:
    lines.append(f"Same work on both sides. Measured bf16 matrix peak: "
                 f"{peak['size']}×{peak['size']}×{peak['size']} bfloat16 "
                 f"product in jax, {_fmt(peak['flop_per_s'] / 1e12, 1)} "
                 f"TFLOP/s ({peak['device_kind']}). MFU = FLOPs per image × "
                 f"img/s ÷ devices ÷ that peak; each row counts its own "
                 f"FLOPs, matrix products and convolutions only (ssljax: "
                 f"counted in the lowered step; PyTorch: "
                 f"torch.utils.flop_counter of one eager step).")
  else:
    lines.append(f"Same work on both sides; peak not measured "
                 f"({peak.get('error', 'not run')}): no MFU.")
  lines += ["", "| model | side | views | batch | img/s | step ms | "
            "GFLOP/img | TFLOP/s | MFU % | compile or first step s | "
            "peak device memory |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for r in fair_order(fair["rows"]):
    title = r.get("title", r["model"])
    if "skipped" in r or "error" in r:
      why = r.get("skipped") or "failed: " + " ".join(r["error"].split())[
          -160:].replace("|", "/")
      lines.append(f"| {title} | {_fair_label(r)} | {why} |" + " |" * 8)
      continue
    achieved = r["flops_per_image"] * r["images_per_s"] / r["devices"]
    startup = r.get("compile_s", r.get("first_step_s"))
    lines.append(
        f"| {title} | {_fair_label(r)} | {VIEW_MODES[r['view_mode']]} | "
        f"{r['batch']} | {_fmt(r['images_per_s'], 1)} | "
        f"{_fmt(1e3 * r['step_s'], 1)} | "
        f"{_fmt(r['flops_per_image'] / 1e9, 2)} | "
        f"{_fmt(achieved / 1e12, 2)} | "
        f"{_fmt(100 * r['mfu'], 1) if r.get('mfu') is not None else 'n/a'} | "
        f"{_fmt(startup, 1)} | {_gib(r.get('peak_device_bytes'))} |")
  ratios = fair_ratios(fair["rows"])
  for (model, view_mode, mode), value in ratios.items():
    lines.append(f"ssljax / PyTorch {mode} img/s per device, {model}, "
                 f"{VIEW_MODES[view_mode]}: {value:.2f}.")
  return lines


def fair_order(rows: list) -> list:
  """The same-work rows in table order: by model (in the order they first
  appear), ssljax's rows first, then PyTorch's by mode in the order they
  ran; within those, as they ran (ready views, then views made on the
  GPU)."""
  models = list(dict.fromkeys(r["model"] for r in rows))
  modes = list(dict.fromkeys(r["torch_mode"] for r in rows
                             if r["side"] != "ssljax"))
  return sorted(rows, key=lambda r: (
      models.index(r["model"]),
      -1 if r["side"] == "ssljax" else modes.index(r["torch_mode"])))


def fair_ratios(rows: list) -> dict:
  """{(model, view mode, torch mode): ssljax img/s per device ÷ PyTorch's}
  for every pair of measured rows."""
  out = {}
  ok = [r for r in rows if "skipped" not in r and "error" not in r]
  for j in (r for r in ok if r["side"] == "ssljax"):
    for t in (r for r in ok if r["side"] == "pytorch"):
      if (t["model"], t["view_mode"]) == (j["model"], j["view_mode"]):
        out[(j["model"], j["view_mode"], t["torch_mode"])] = (
            j["images_per_s"] / j["devices"] / t["images_per_s"])
  return out


def markdown(result: dict) -> str:
  """The table of ``result`` (accelerator.json's content) as markdown."""
  m = result["machine"]
  lines = [f"Devices: {m['devices']} ({m['device_kind']}, backend "
           f"{m['backend']}); jax {m['jax']}, jaxlib {m['jaxlib']}; host "
           f"{m['cpus']} CPUs ({m['platform']}); {m['date']}; "
           f"{'--smoke sizes' if result['smoke'] else 'full sizes'}"
           f"{'' if result.get('complete', True) else ' (run incomplete)'}; load "
           f"average {result['load_average_before'][0]:.1f} before, "
           f"{result['load_average_after'][0]:.1f} after."]
  if result["rows"]:
    lines += ["", "| model | views | dtype | batch | devices | host input | "
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
  lines += fair_markdown(result)
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
  parser.add_argument("--parts", default="recipe,fair",
                      help="comma list of: recipe (each recipe's step on its "
                      "host pipeline, end to end), fair (the same-work rows: "
                      f"models {list(FAIR_TWINS)} on ready views and on views "
                      "made on the GPU, against PyTorch, with MFU)")
  parser.add_argument("--torch", choices=("auto", "off"), default="auto")
  parser.add_argument("--torch_modes", default=None,
                      help="comma list of compile (torch.compile), eager; "
                      "default compile,eager (--smoke: eager)")
  parser.add_argument("--torch_compile", action="store_true",
                      help=argparse.SUPPRESS)  # old flag: now the default
  parser.add_argument("--torch_device", default="cuda",
                      help="cuda; cpu only to check the PyTorch code")
  parser.add_argument("--source_size", type=int, default=None,
                      help="side of the uint8 images that the 'views made on "
                      "the GPU' rows crop (default 256; --smoke 80)")
  parser.add_argument("--peak_size", type=int, default=None,
                      help="n of the n×n×n bf16 product that measures the "
                      "peak (default 8192; --smoke 256)")
  parser.add_argument("--profile", default=None, metavar="DIR",
                      help="also trace --profile_steps steps of every "
                      "same-work row (jax.profiler / torch.profiler) into DIR "
                      "and write each row's top ops as text, and "
                      "DIR/profile_summary.txt with all of them")
  parser.add_argument("--flops_only", action="store_true",
                      help="--parts fair: only count each model's FLOPs per "
                      "image in both view modes (lowered, not compiled: "
                      "seconds on a CPU)")
  parser.add_argument("--profile_torch_modes", default=None,
                      help="with --profile: the PyTorch modes traced "
                      "(comma list; default: every mode of --torch_modes)")
  parser.add_argument("--profile_steps", type=int, default=3)
  parser.add_argument("--profile_top", type=int, default=25)
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
  parser.add_argument("--twin", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  sizes = SMOKE_SIZES if args.smoke else FULL_SIZES
  for key in ("warmup", "steps", "repeats", "image_size", "image_jitter",
              "num_images"):
    if getattr(args, key) is None:
      setattr(args, key, sizes[key])
  kind = "smoke" if args.smoke else "full"
  if args.source_size is None:
    args.source_size = SOURCE_SIZES[kind]
  if args.peak_size is None:
    args.peak_size = PEAK_SIZES[kind]
  args.parts = args.parts.split(",")
  if args.compile_only:  # compile figures are the recipe rows' alone
    args.parts = ["recipe"]
  if set(args.parts) - {"recipe", "fair"}:
    parser.error(f"--parts: expected recipe and/or fair, got {args.parts}")
  modes = args.torch_modes or ("eager" if args.smoke else "compile,eager")
  args.torch_modes = modes.split(",")
  if set(args.torch_modes) - {"compile", "eager"}:
    parser.error(f"--torch_modes: expected compile and/or eager, got {modes}")
  args.profile_torch_modes = (args.profile_torch_modes.split(",")
                              if args.profile_torch_modes
                              else list(args.torch_modes))
  if args.profile:
    args.profile = os.path.abspath(args.profile)
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
          "--torch_device", args.torch_device,
          "--source_size", str(args.source_size),
          "--peak_size", str(args.peak_size),
          "--profile_steps", str(args.profile_steps),
          "--profile_top", str(args.profile_top),
          "--profile_torch_modes", ",".join(args.profile_torch_modes),
          *(("--profile", args.profile) if args.profile else ()), *extra,
          *(("--compilation_cache", args.compilation_cache)
            if args.compilation_cache else ())]
  return argv + (["--smoke"] if args.smoke else []) + (
      ["--compile_only"] if args.compile_only else [])


def run_child(args):
  """One child's work (``--child``): a recipe model's row, "peak",
  "fair_jax:MODEL" or "fair_torch:MODEL:MODE" (a {"rows": [...]} dict)."""
  kind, _, rest = args.child.partition(":")
  if kind == "peak":
    return run_peak(args)
  if kind == "fair_jax":
    return {"rows": run_fair_jax(rest, args)}
  if kind == "fair_torch":
    name, mode = rest.split(":")
    return {"rows": run_fair_torch(name, mode, args)}
  return run_model(args.child, args)


def main(argv=None) -> dict:
  args = parse_args(argv)
  if args.child:  # one model, the peak or the PyTorch twin: one JSON line
    row = run_child(args)
    print(json.dumps(row), flush=True)
    return row
  os.makedirs(args.out, exist_ok=True)
  if args.profile:
    os.makedirs(args.profile, exist_ok=True)
  load_before = os.getloadavg()
  result = {"smoke": args.smoke, "complete": False, "machine": machine(),
            "rows": [], "argv": sys.argv[1:] if argv is None else argv,
            "load_average_before": load_before}
  if "recipe" in args.parts:
    run_recipe_rows(args, result)
  if "fair" in args.parts:
    run_fair_rows(args, result)
  result["complete"] = True
  table = write_result(args, result)
  print(table)
  return result


def run_recipe_rows(args, result: dict) -> None:
  """Each model's recipe row (its step on its host pipeline); the files
  are rewritten after every row, so a run stopped part way (a lease's time
  limit) keeps the rows it finished."""
  if any(CASES[m].data == "folder" for m in args.models):
    write_folder(args)
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
    write_result(args, result)


def _in_child_or_here(args, child: str, here, timeout: float,
                      python: str = sys.executable):
  """``here()`` in this process (--isolate no, the --smoke default) or this
  script with ``--child child`` in a fresh one (its JSON line)."""
  if args.in_process and python == sys.executable:
    return here()
  return _child(child_argv(args, ["--child", child]), timeout, python)


def run_fair_rows(args, result: dict) -> None:
  """The same-work rows: the measured peak, then for each model of
  FAIR_TWINS in --models, ssljax's step on ready views and on views made on
  the device and its PyTorch twin in the first of --torch_modes (its own
  process, ``--torch_python``); then the twins in the other modes, model
  after model (so that a run stopped by its time limit loses the eager
  rows first); MFU filled in for every row. The PyTorch twin's spec goes to
  its process as JSON."""
  fair = result["fair"] = {"peak": None, "rows": []}
  if args.flops_only:
    fair["flops_only"] = [r for m in args.models if m in FAIR_TWINS
                          for r in count_fair_flops(m, args)]
    return
  try:
    fair["peak"] = _in_child_or_here(args, "peak", lambda: run_peak(args),
                                     args.model_timeout)
  except Exception as e:  # pylint: disable=broad-except
    fair["peak"] = {"error": f"{type(e).__name__}: {e}"}
  print(json.dumps({"peak": fair["peak"]}), flush=True)
  write_result(args, result)
  names = [m for m in args.models if m in FAIR_TWINS]
  twins = {}
  for name in names:
    print(f"{name} (same work) ...", flush=True)
    try:
      rows = _in_child_or_here(
          args, f"fair_jax:{name}",
          lambda: {"rows": run_fair_jax(name, args)},  # pylint: disable=cell-var-from-loop
          args.model_timeout)["rows"]
    except Exception as e:  # pylint: disable=broad-except
      rows = [{"side": "ssljax", "model": name, "torch_mode": None,
               "error": f"{type(e).__name__}: {e}"}]
    add_fair_rows(result, rows)
    write_result(args, result)
    try:
      twin = torch_twin(name, args)
    except Exception as e:  # pylint: disable=broad-except  # rows say why
      twin = {"error": f"{type(e).__name__}: {e}"}
    if twin is not None and "error" not in twin:
      twin["views_text"] = next((r["views"] for r in rows if "views" in r),
                                "")
    twins[name] = twin
    for mode in args.torch_modes[:1]:
      add_fair_rows(result, run_twin_rows(name, mode, twin, args))
      write_result(args, result)
  for mode in args.torch_modes[1:]:
    for name in names:
      add_fair_rows(result, run_twin_rows(name, mode, twins[name], args))
      write_result(args, result)
  if args.profile:
    write_profile_summary(args.profile, result["fair"]["rows"])


def run_twin_rows(name: str, mode: str, twin, args) -> list:
  """The PyTorch twin's rows of ``name`` in ``mode`` (its own process), or
  one row saying why there are none (skipped, or the error)."""
  base = {"side": "pytorch", "model": name, "torch_mode": mode,
          "title": CASES[name].title}
  if args.torch == "off":
    return [dict(base, skipped="--torch off")]
  if twin is None:
    return [dict(base, skipped="no PyTorch twin of this recipe yet")]
  if "error" in twin:
    return [dict(base, error=twin["error"])]
  try:
    return _child(child_argv(args, [
        "--child", f"fair_torch:{name}:{mode}",
        "--twin", json.dumps(twin)]), args.model_timeout,
                  args.torch_python)["rows"]
  except Exception as e:  # pylint: disable=broad-except
    return [dict(base, error=f"{type(e).__name__}: {e}")]


def add_fair_rows(result: dict, rows: list) -> None:
  """Appends rows to result["fair"], each measured one with its MFU."""
  peak = (result["fair"].get("peak") or {}).get("flop_per_s")
  for r in rows:
    if "images_per_s" in r:
      r["mfu"] = (mfu(r["flops_per_image"], r["images_per_s"], r["devices"],
                      peak) if peak else None)
    print(json.dumps(r), flush=True)
    result["fair"]["rows"].append(r)


def write_profile_summary(profile_dir: str, rows: list) -> str:
  """DIR/profile_summary.txt: every profiled row's top-ops text, in order."""
  parts = []
  for r in fair_order(rows):
    path = r.get("profile")
    if path and os.path.exists(path):
      with open(path) as f:
        parts.append(f"=== {_fair_label(r)}, {r['model']}, "
                     f"{VIEW_MODES[r['view_mode']]} ===\n{f.read()}")
  out = os.path.join(profile_dir, "profile_summary.txt")
  with open(out, "w") as f:
    f.write("\n".join(parts))
  return out


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
