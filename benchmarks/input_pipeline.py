"""Input pipeline: host images/s per core, device view ops, host memory, resume.

    python benchmarks/input_pipeline.py              # everything (~15 min here)
    python benchmarks/input_pipeline.py --parts throughput,resume

Parts (every ratio is between numbers measured in the same run):

* ``throughput``: images/s of the host part of the pipeline on ONE thread
  (grain's threads = 1: per host core) and of the device part (the jitted
  view ops of the recipe, on this machine's JAX backend), at 32² (a
  CIFAR-shaped in-memory split: the host only gathers rows, every crop is
  cut on the devices) and 224² (a folder of 224² JPEGs: the host decodes
  and crops), each with the two-view BYOL recipe and with multi-crop
  (2×32 + 4×16; 2×224 + 6×96), against the train step's images/s for the
  same views (ResNet-18, CIFAR stem at 32², ImageNet stem at 224²).
* ``rss``: peak resident memory (ru_maxrss) of a short run of
  ``python -m ssljax.main`` (30 steps, then the probe) on generated folders
  of 2,000 and 20,000 224² JPEGs, each in its own process: at the end of
  training (metrics.jsonl's ``host_peak_rss_mib``) and over the whole run.
  Training memory must not grow with the dataset.
* ``resume``: seconds from building the iterator to the first batch when
  starting at step 10, 10⁴ and 10⁵.
* ``host`` (not in the default parts): host images/s on one thread of the
  two-view and multi-crop views (2×224; 2×224 + 6×96) cut from 256 JPEGs
  of 384 ± 64 px (as benchmarks/accelerator.py writes), median of 5
  passes of 4 batches of 64. Run it at two commits to compare them.
* ``workers`` (not in the default parts): host images/s of the ResNet-50
  recipe's views (2×224 from JPEGs of 384 ± 64 px, as
  benchmarks/accelerator.py writes) with T threads in this process against
  T worker processes of one thread each (``dataset.workers``), T = the
  CPU count; the first batches (worker start-up) are not timed.
  ``--workers_batch 256 --workers_procs W --workers_modes workers``: the
  recipe's batch from W workers alone, to hold against W times the
  one-thread rate of ``host`` (what the hand-off of whole batches to the
  main process costs).

Prints one JSON line per measurement and a summary table.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import jax
import ml_collections
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from ssljax import (data, methods, optimizers, train,  # noqa: E402
                    train_state)
from ssljax.data import synthetic  # noqa: E402

# BYOL's view recipe (Grill et al. 2020, arXiv 2006.07733, Table 6).
BYOL_OPS = {"jitter_prob": 0.8, "brightness": 0.4, "contrast": 0.4,
            "saturation": 0.2, "hue": 0.1, "grayscale_prob": 0.2,
            "blur_prob": (1.0, 0.1), "solarize_prob": (0.0, 0.2)}
FOLDER = os.path.join(tempfile.gettempdir(), "ssljax_bench_images_{}")


def _views(size, local_size=0, num_local=0):
  """The config ``views`` of the BYOL recipe at ``size`` (+ local crops)."""
  ops = dict(BYOL_OPS)
  if num_local:
    ops = {k: (tuple(v) + (v[1],) * num_local if isinstance(v, tuple) else v)
           for k, v in ops.items()}
  return {"num_global": 2, "size": size, "crop_scale": (0.08, 1.0),
          "num_local": num_local, "local_size": local_size, **ops}


def _spec(*args):
  return data.view_spec(_views(*args))


def _median_rate(fn, images, repeats=5):
  fn()  # warm-up (compile)
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return images / float(np.median(times))


def _host_rate(source, spec, batch, steps=6):
  """Host images/s with one grain thread (one core)."""
  start = time.perf_counter()
  it = data.train_batches(source, batch_size=batch, seed=0, spec=spec,
                          num_steps=steps, threads=1, prefetch=1)
  for _ in it:
    pass
  return steps * batch / (time.perf_counter() - start)


def _device_rate(host_batch, spec, batch):
  device = {k: v for k, v in host_batch.items() if k in ("images", "views")}
  fn = jax.jit(lambda b, k: data.device_views(b, k, spec))
  run = lambda: jax.block_until_ready(fn(device, jax.random.key(0)))
  return _median_rate(run, batch)


def _step_rate(host_batch, views, encoder_kwargs, batch):
  """Train-step images/s of VICReg with a ResNet-18 (``encoder_kwargs``)
  and the 512-512 projector on these views."""
  config = _config(views)
  config.model.encoder = "resnet18"
  config.model.encoder_kwargs = ml_collections.ConfigDict(encoder_kwargs)
  config.model.projector = (512, 512)
  method = methods.build(config)
  tx = optimizers.create_optimizer(config.optim, lambda _: 1e-3)
  size = views["size"]  # RGB images; the config's dataset is Fashion-MNIST
  state = train_state.create_train_state(
      method, tx, jax.random.key(0), train.batch_spec(config, (size, size, 3)))
  mesh = train.make_mesh(jax.devices()[:1])
  step = train.sharded_train_step(config, mesh)
  device = {k: v for k, v in host_batch.items() if k in ("images", "views")}
  holder = {"state": state}

  def run():
    holder["state"], metrics = step(holder["state"], device)
    jax.block_until_ready(metrics)

  return _median_rate(run, batch, repeats=3)


def _config(views):
  from configs import vicreg  # pylint: disable=import-outside-toplevel
  config = vicreg.get_config()
  config.loss.form = "graph" if views["num_local"] else "two_view"
  with config.views.ignore_type():
    for key, value in views.items():
      config.views[key] = value
  return config


def throughput():
  rows = []
  rng = np.random.default_rng(0)
  small = data.ArraySource(rng.integers(0, 256, (4096, 32, 32, 3), np.uint8),
                           np.zeros(4096, np.int32))
  root = FOLDER.format("224_512")
  if not os.path.isdir(os.path.join(root, "train")):
    synthetic.write_image_folder(root, num_train=512, num_test=8, size=224,
                                 size_jitter=32)
  folder = data.ImageFolderSource(os.path.join(root, "train"))
  cases = [("32², 2 views", small, _views(32), 256, {}),
           ("32², 2×32 + 4×16", small, _views(32, 16, 4), 256, {}),
           ("224², 2 views", folder, _views(224), 32, {"stem": "imagenet"}),
           ("224², 2×224 + 6×96", folder, _views(224, 96, 6), 32,
            {"stem": "imagenet"})]
  for name, source, views, batch, kwargs in cases:
    spec = data.view_spec(views)
    host = _host_rate(source, spec, batch)
    first = next(data.train_batches(source, batch_size=batch, seed=0,
                                     spec=spec, num_steps=1, threads=1))
    device = _device_rate(first, spec, batch)
    step_batch = 8 if source is folder else 64
    step_first = next(data.train_batches(source, batch_size=step_batch,
                                          seed=0, spec=spec, num_steps=1))
    step = _step_rate(step_first, views, kwargs, step_batch)
    row = {"part": "throughput", "case": name,
           "host_images_per_s_per_core": host,
           "device_view_ops_images_per_s": device,
           "train_step_images_per_s": step,
           "host_over_step": host / step}
    print(json.dumps(row), flush=True)
    rows.append(row)
  return rows


def _rss_run(num_images):
  root = FOLDER.format(f"224_{num_images}")
  if not os.path.isdir(os.path.join(root, "train")):
    print(f"writing {num_images} 224² JPEGs to {root} ...", flush=True)
    synthetic.write_image_folder(root, num_train=num_images, num_test=64,
                                 size=224, size_jitter=32)
  workdir = tempfile.mkdtemp(prefix="ssljax_rss_")
  args = [f"--config={REPO}/configs/vicreg.py:smoke", f"--workdir={workdir}",
          "--config.dataset.name=image_folder",
          f"--config.dataset.data_dir={root}", "--config.views.size=64",
          "--config.dataset.train_split=train",
          "--config.dataset.test_split=test",
          "--config.batch_size=32", "--config.num_steps=30",
          "--config.eval_inputs.baselines=False",
          "--config.eval_inputs.batch_size=256",
          "--config.checkpoint_every_steps=1000"]
  code = ("import resource, subprocess, sys; "
          "r = subprocess.run([sys.executable, '-m', 'ssljax.main'] + "
          "sys.argv[1:], capture_output=True, text=True); "
          "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN)"
          ".ru_maxrss); sys.stderr.write(r.stderr[-2000:])")
  start = time.perf_counter()
  out = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO,
                       capture_output=True, text=True, check=True)
  code_, rss_kib = map(int, out.stdout.split()[-2:])
  if code_:
    raise RuntimeError(out.stderr)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    train_peak = json.loads(f.read().splitlines()[-1])["host_peak_rss_mib"]
  shutil.rmtree(workdir, ignore_errors=True)
  return {"part": "rss", "images": num_images,
          "train_peak_rss_mib": train_peak, "run_peak_rss_mib": rss_kib / 1024,
          "wall_s": time.perf_counter() - start}


def rss():
  rows = [_rss_run(2000), _rss_run(20000)]
  rows.append({"part": "rss", "ratio_20000_over_2000": {
      k: rows[1][k] / rows[0][k] for k in ("train_peak_rss_mib",
                                           "run_peak_rss_mib")}})
  for row in rows:
    print(json.dumps(row), flush=True)
  return rows


def resume():
  root = FOLDER.format("224_512")
  if not os.path.isdir(os.path.join(root, "train")):
    synthetic.write_image_folder(root, num_train=512, num_test=8, size=224,
                                 size_jitter=32)
  source = data.ImageFolderSource(os.path.join(root, "train"))
  rows = []
  for step in (10, 10_000, 100_000):
    times = []
    for _ in range(3):
      start = time.perf_counter()
      next(data.train_batches(source, batch_size=32, seed=0, spec=_spec(224),
                              start_step=step, num_steps=1, threads=1))
      times.append(time.perf_counter() - start)
    rows.append({"part": "resume", "start_step": step,
                 "first_batch_s": float(np.median(times))})
    print(json.dumps(rows[-1]), flush=True)
  return rows


def _folder_384():
  """256 generated JPEGs of 384 ± 64 px (as benchmarks/accelerator.py)."""
  root = os.path.join(tempfile.gettempdir(), "ssljax_bench_workers_384")
  if not os.path.isdir(root):
    synthetic.write_image_folder(root + ".tmp", num_train=256, num_test=4,
                                 size=384, size_jitter=64)
    os.replace(root + ".tmp", root)
  return data.ImageFolderSource(os.path.join(root, "train"))


def host(batch=64, steps=4):
  """Host images/s on one thread (decode + crops of 384 px JPEGs)."""
  source = _folder_384()
  for name, spec in (("2x224", _spec(224)), ("2x224+6x96", _spec(224, 96, 6))):
    def one_pass(spec=spec):
      for _ in data.train_batches(source, batch_size=batch, seed=0, spec=spec,
                                  num_steps=steps, threads=1, prefetch=1):
        pass
    rate = _median_rate(one_pass, batch * steps)
    print(json.dumps({"part": "host", "views": name, "threads": 1,
                      "images_per_s": rate}), flush=True)


def workers(batch=32, steps=64, skip=8, procs=None, modes=("threads",
                                                          "workers")):
  """Host images/s: T threads in one process vs T one-thread workers (T =
  ``procs``, default the CPU count), each mode of ``modes``."""
  source = _folder_384()
  spec = _spec(224)
  procs = procs or os.cpu_count()
  rows = {}
  settings = {"threads": (procs, 0), "workers": (1, procs)}
  for name in modes:
    threads, workers_ = settings[name]
    it = data.train_batches(source, batch_size=batch, seed=0, spec=spec,
                            num_steps=steps, threads=threads, prefetch=procs,
                            workers=workers_)
    for _ in range(skip):
      next(it)
    start = time.perf_counter()
    count = sum(1 for _ in it)
    rows[name] = count * batch / (time.perf_counter() - start)
    print(json.dumps({"part": "workers", "mode": name, "threads": threads,
                      "workers": workers_, "batch": batch, "batches": count,
                      "images_per_s": rows[name]}), flush=True)
  if len(rows) == 2:
    print(f"host images/s, 2×224 crops of 384 px JPEGs, batch {batch}: "
          f"{procs} threads {rows['threads']:.0f}, {procs} workers "
          f"{rows['workers']:.0f} "
          f"(ratio {rows['workers'] / rows['threads']:.2f})")


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--parts", default="throughput,rss,resume")
  parser.add_argument("--workers_batch", type=int, default=32,
                      help="the workers part's batch (256: the ResNet-50 "
                      "recipe's)")
  parser.add_argument("--workers_procs", type=int, default=0,
                      help="the workers part's T (0: the CPU count)")
  parser.add_argument("--workers_modes", default="threads,workers")
  parser.add_argument("--workers_steps", type=int, default=64)
  args = parser.parse_args()
  parts = {"throughput": throughput, "rss": rss, "resume": resume,
           "host": host,
           "workers": lambda: workers(
               args.workers_batch, args.workers_steps, procs=args.workers_procs,
               modes=args.workers_modes.split(","))}
  print(json.dumps({"machine": os.uname().machine, "cpus": os.cpu_count(),
                    "backend": jax.default_backend(),
                    "ru_maxrss_self_mib": resource.getrusage(
                        resource.RUSAGE_SELF).ru_maxrss / 1024}))
  for name in args.parts.split(","):
    parts[name]()


if __name__ == "__main__":
  main()
