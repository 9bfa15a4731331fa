"""The main job against the same job written in PyTorch, whole process.

    python benchmarks/vs_pytorch.py torch --epochs 1 [--out-json FILE]
    python benchmarks/vs_pytorch.py compare --torch-python PY \\
        --epochs 1 4 --pairs 3 --out DIR

``torch`` runs the PyTorch job alone (it needs torch, torchvision and
lightly: the ``bench`` extra, never the default environment). ``compare``
needs only the standard library (and psutil for the process-tree memory, if
importable): it runs A B A B ... interleaved, each as a child process, where
A is the main job (``python -m ssljax.main --config configs/vicreg.py
--config.epochs=E --workdir <fresh dir>``) and B is the PyTorch job in the
bench interpreter, so that a change of machine load hits both alike.

The PyTorch job is the main job (configs/vicreg.py on configs/common.py)
written the way a PyTorch user writes it, not the way ssljax does:
Fashion-MNIST from the IDX files read with NumPy; a ``Dataset`` whose
``__getitem__`` makes two views per image with ``torchvision.transforms.v2``
(``VIEWS``, the main job's values: random resized crop of area (0.4, 1) and
aspect (3/4, 4/3), horizontal flip 0.5, brightness and contrast 0.4 with
probability 0.8, random erasing 0.5 of area (0.02, 0.2)), a ``DataLoader``
with 2 workers; the CNN 16-32-64-512
(3x3 conv, BatchNorm, ReLU, 2x2 average pooling between stages, global
average), the projector 512-512 (Linear-BN-ReLU, plain last Linear), both
with PyTorch's default initialisation; lightly's ``VICRegLoss`` (λ = 25,
μ = 25, ν = 1); AdamW at 4e-3 × batch/256, weight decay 1e-4 on weights of
ndim > 1 only, linear warm-up for 1 epoch from 0 then cosine to 0.01 × peak,
per step (``OPTIM``, the main job's values; ``--learning-rate`` etc. change
them, and ``compare --torch-arg`` passes such options on); batch 256 × 2
views, full batches only. Then the main job's evaluation protocol on the
frozen 512-d encoder features of train -> test: the linear probe
(standardised features; L2 on ½‖W‖² chosen from (1e-2 ... 1e-6, strong
to weak, warm-started) by accuracy on a seeded 10 %
validation split of train, searched on at most 20,000 of the other rows,
refit on all train rows; multinomial logistic regression by full-batch
L-BFGS, 100 iterations, strong Wolfe line search) and the 20-NN vote
weighted by exp(cos / 0.07). ``torch.set_num_threads`` is left at its
default.

Memory of a child: three numbers per run. ``peak_rss_bytes``: ``ru_maxrss``
from ``os.wait4``, the largest single process of the tree (the child or a
descendant it waited for; DataLoader workers are not added to it).
``peak_tree_pss_bytes`` / ``peak_tree_rss_bytes``: the largest sum over the
live process tree, sampled with psutil (None without psutil): RSS every
``--sample-seconds``, PSS at most every ``--pss-seconds`` (reading it costs
~25 ms of CPU per 2 GB process). PSS counts a page shared by k processes as 1/k in each, so
its sum is what the tree holds of the machine; the RSS sum counts the pages
that forked workers share with their parent once per process. The table
shows the tree PSS when psutil is there, else ``ru_maxrss``, and says which.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IDX_DIR = "/usr/share/datasets/fashion-mnist"
L2_GRID = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2)
# The main job's optimiser (configs/vicreg.py's ``optim``; a test keeps the
# two equal): peak lr per 256 samples, AdamW's decoupled weight decay on
# weights of ndim > 1, warm-up epochs, final lr / peak lr.
OPTIM = {"learning_rate": 4e-3, "weight_decay": 1e-4, "warmup_epochs": 1.0,
         "end_lr_factor": 0.01}
# The main job's views (configs/vicreg.py's ``views``; a test keeps the two
# equal): the torchvision v2 transform below is built from these values.
VIEWS = {"crop_scale": (0.4, 1.0), "crop_ratio": (3 / 4, 4 / 3),
         "flip_prob": 0.5, "jitter_prob": 0.8, "brightness": 0.4,
         "contrast": 0.4, "erase_prob": 0.5, "erase_scale": (0.02, 0.2)}
FRAMEWORKS = ("ssljax", "pytorch")
GIB = 2.0 ** 30


# --------------------------------------------------------------------------
# The PyTorch job (torch, torchvision and lightly imported inside).


def read_idx(path):
  """uint8 array of an IDX file (gzip): images (N, 28, 28) or labels (N,)."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  with gzip.open(path, "rb") as f:
    data = f.read()
  ndim = data[3]
  shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big")
           for i in range(ndim)]
  return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def fashion_mnist(split, idx_dir=IDX_DIR):
  """(images uint8 (N, 1, 28, 28), labels int64 (N,)) of "train" or "test"."""
  prefix = {"train": "train", "test": "t10k"}[split]
  images = read_idx(os.path.join(idx_dir, f"{prefix}-images-idx3-ubyte.gz"))
  labels = read_idx(os.path.join(idx_dir, f"{prefix}-labels-idx1-ubyte.gz"))
  return images[:, None].copy(), labels.astype("int64")


def schedule_factor(step, optim, steps_per_epoch, total):
  """lr / peak lr at ``step``: linear warm-up from 0, then cosine decay to
  ``end_lr_factor``, as ssljax.optimizers.create_learning_rate_fn (optax's
  warmup_cosine_decay_schedule) for the PyTorch job's LambdaLR."""
  warmup = max(min(int(optim["warmup_epochs"] * steps_per_epoch), total - 1),
               0)
  if step < warmup:
    return step / warmup
  end = optim["end_lr_factor"]
  t = min(step - warmup, total - warmup) / max(total - warmup, 1)
  return end + (1 - end) * 0.5 * (1 + math.cos(math.pi * t))


def torch_transform(views=None):
  """The PyTorch job's torchvision v2 transform of one uint8 (1, H, W)
  image into one float32 view in [0, 1], built from ``views`` (default
  VIEWS, the main job's)."""
  # pylint: disable=import-outside-toplevel
  import torch
  from torchvision.transforms import v2
  # pylint: enable=import-outside-toplevel
  views = VIEWS if views is None else views
  return v2.Compose([
      v2.RandomResizedCrop(28, scale=views["crop_scale"],
                           ratio=views["crop_ratio"], antialias=True),
      v2.RandomHorizontalFlip(views["flip_prob"]),
      v2.RandomApply([v2.ColorJitter(brightness=views["brightness"],
                                     contrast=views["contrast"])],
                     p=views["jitter_prob"]),
      v2.ToDtype(torch.float32, scale=True),
      v2.RandomErasing(p=views["erase_prob"], scale=views["erase_scale"],
                       ratio=(0.3, 3.3), value=0),
  ])


def torch_loader(images, batch_size=256, num_workers=2, views=None):
  """The PyTorch job's DataLoader: shuffled full batches of two views
  (``torch_transform(views)`` twice) of uint8 (N, 1, H, W) ``images``."""
  # pylint: disable=import-outside-toplevel
  import torch
  from torch.utils.data import DataLoader, Dataset
  # pylint: enable=import-outside-toplevel
  transform = torch_transform(views)

  class TwoViews(Dataset):
    def __init__(self, images):
      self.images = torch.from_numpy(images)

    def __len__(self):
      return len(self.images)

    def __getitem__(self, i):
      image = self.images[i]
      return transform(image), transform(image)

  return DataLoader(TwoViews(images), batch_size=batch_size, shuffle=True,
                    drop_last=True, num_workers=num_workers)


def torch_model():
  """(encoder, projector, model = Sequential(encoder, projector)) of the
  PyTorch job, freshly initialised by PyTorch's defaults from torch's
  global generator."""
  from torch import nn  # pylint: disable=import-outside-toplevel

  def stage(cin, cout):
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout), nn.ReLU()]

  encoder = nn.Sequential(
      *stage(1, 16), nn.AvgPool2d(2), *stage(16, 32), nn.AvgPool2d(2),
      *stage(32, 64), nn.AvgPool2d(2), *stage(64, 512),
      nn.AdaptiveAvgPool2d(1), nn.Flatten())
  projector = nn.Sequential(
      nn.Linear(512, 512, bias=False), nn.BatchNorm1d(512), nn.ReLU(),
      nn.Linear(512, 512))
  return encoder, projector, nn.Sequential(encoder, projector)


def torch_optimizer(model, optim, steps_per_epoch, total, batch_size=256):
  """(AdamW, LambdaLR) of the PyTorch job: peak lr ``learning_rate`` ×
  batch/256, weight decay on parameters of ndim > 1 only, the per-step
  factor of ``schedule_factor``."""
  import torch  # pylint: disable=import-outside-toplevel
  peak = optim["learning_rate"] * batch_size / 256
  decay = [p for p in model.parameters() if p.ndim > 1]
  no_decay = [p for p in model.parameters() if p.ndim <= 1]
  optimizer = torch.optim.AdamW([
      {"params": decay, "weight_decay": optim["weight_decay"]},
      {"params": no_decay, "weight_decay": 0.0}], lr=peak)
  scheduler = torch.optim.lr_scheduler.LambdaLR(
      optimizer, lambda step: schedule_factor(step, optim, steps_per_epoch,
                                              total))
  return optimizer, scheduler


def torch_criterion():
  """lightly's VICRegLoss with the main job's weights (λ = 25, μ = 25,
  ν = 1)."""
  from lightly.loss import VICRegLoss  # pylint: disable=import-outside-toplevel
  return VICRegLoss(lambda_param=25.0, mu_param=25.0, nu_param=1.0)


def torch_step(model, criterion, optimizer, scheduler, x0, x1):
  """One training step of the PyTorch job on the views x0, x1; the loss."""
  loss = criterion(model(x0), model(x1))
  optimizer.zero_grad()
  loss.backward()
  optimizer.step()
  scheduler.step()
  return loss.item()


def torch_job(epochs, batch_size=256, num_workers=2, seed=0,
              idx_dir=IDX_DIR, optim=None):
  """Trains and evaluates the PyTorch job; returns its summary dict.

  ``optim`` overrides entries of OPTIM (the main job's optimiser).
  """
  optim = {**OPTIM, **(optim or {})}
  start = time.time()
  # pylint: disable=import-outside-toplevel
  import numpy as np
  import torch
  # pylint: enable=import-outside-toplevel

  torch.manual_seed(seed)
  seconds = {}
  train_x, train_y = fashion_mnist("train", idx_dir)
  test_x, test_y = fashion_mnist("test", idx_dir)

  encoder, _, model = torch_model()
  criterion = torch_criterion()
  loader = torch_loader(train_x, batch_size, num_workers)
  steps_per_epoch = len(loader)
  total = epochs * steps_per_epoch

  optimizer, scheduler = torch_optimizer(model, optim, steps_per_epoch,
                                         total, batch_size)
  seconds["setup"] = time.time() - start

  t0 = time.time()
  model.train()
  losses = []
  for epoch in range(epochs):
    for x0, x1 in loader:
      losses.append(torch_step(model, criterion, optimizer, scheduler, x0,
                               x1))
      if len(losses) % 50 == 0:
        print(f"step {len(losses)}/{total}: loss {losses[-1]:.4f} "
              f"({time.time() - t0:.1f} s)", file=sys.stderr, flush=True)
    print(f"epoch {epoch + 1}/{epochs}: loss {np.mean(losses[-50:]):.4f} "
          f"({time.time() - t0:.1f} s)", file=sys.stderr, flush=True)
  seconds["train_steps"] = time.time() - t0

  evals, eval_seconds = torch_evaluate(encoder, (train_x, train_y),
                                       (test_x, test_y), seed=seed)
  seconds.update(eval_seconds)
  return torch_record("pytorch", num_workers=num_workers, epochs=epochs,
                      steps=total, losses=losses, seconds=seconds,
                      start=start, evals=evals, optim=optim)


def torch_record(framework, *, num_workers, epochs, steps, losses, seconds,
                 start, evals, **fields):
  """The summary dict of a PyTorch-side job (this module's and
  vs_lightly's): versions, threads, the schedule, the mean loss of the last
  20 steps, train and wall seconds (``start`` is the job's time.time() at
  its start), the per-phase ``seconds`` and ``evals``; ``fields`` (method,
  recipe, seed, optim) go in after "framework"."""
  # pylint: disable=import-outside-toplevel
  import lightly
  import numpy as np
  import torch
  import torchvision
  # pylint: enable=import-outside-toplevel
  return {
      "framework": framework,
      **fields,
      "versions": {"torch": torch.__version__,
                   "torchvision": torchvision.__version__,
                   "lightly": lightly.__version__,
                   "python": platform.python_version()},
      "torch_threads": torch.get_num_threads(),
      "num_workers": num_workers,
      "epochs": epochs,
      "steps": steps,
      "final_loss": float(np.mean(losses[-20:])),
      "train_seconds": seconds["train_steps"],
      "wall_seconds": time.time() - start,
      "seconds": seconds,
      "evals": evals,
  }


def torch_evaluate(encoder, train, test, seed=0):
  """The main job's evaluation of a trained PyTorch encoder: its frozen
  features of the train and test images (eval mode, batches of 1000,
  pixels / 255), the linear probe (`linear_probe`, validation split from
  ``seed``) and the 20-NN vote weighted by exp(cos / 0.07) (`knn_accuracy`;
  Wu et al. 2018, arXiv 1805.01978).

  Args:
    encoder: torch module, uint8-scaled float (B, 1, 28, 28) -> (B, D).
    train, test: (images uint8 (N, 1, 28, 28), labels int64 (N,)) NumPy
      arrays, as `fashion_mnist` returns them.
    seed: the probe's validation split.

  Returns:
    (evals, seconds): evals {"probe/test_accuracy", "probe/val_accuracy",
    "probe/l2", "probe/iterations", "knn/test_accuracy"}; seconds
    {"features", "probe", "knn"}.
  """
  import torch  # pylint: disable=import-outside-toplevel
  (train_x, train_y), (test_x, test_y) = train, test
  seconds = {}
  t0 = time.time()
  encoder.eval()

  @torch.no_grad()
  def features(images):
    return torch.cat([encoder(torch.from_numpy(images[i:i + 1000]).float()
                              / 255.0) for i in range(0, len(images), 1000)])

  h_train, h_test = features(train_x), features(test_x)
  seconds["features"] = time.time() - t0
  y_train, y_test = torch.from_numpy(train_y), torch.from_numpy(test_y)
  t0 = time.time()
  probe = linear_probe(h_train, y_train, h_test, y_test, seed=seed)
  seconds["probe"] = time.time() - t0
  t0 = time.time()
  knn = knn_accuracy(h_train, y_train, h_test, y_test)
  seconds["knn"] = time.time() - t0
  return ({"probe/test_accuracy": probe["test_accuracy"],
           "probe/val_accuracy": probe["val_accuracy"],
           "probe/l2": probe["l2"],
           "probe/iterations": probe["iterations"],
           "knn/test_accuracy": knn}, seconds)


def linear_probe(h_train, y_train, h_test, y_test, *, l2_grid=L2_GRID,
                 val_fraction=0.1, max_iter=100, search_rows=20000, seed=0):
  """The main job's probe protocol (ssljax.probes.linear_probe) in torch."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  mean, std = h_train.mean(0), h_train.std(0, unbiased=False) + 1e-6
  x_train, x_test = (h_train - mean) / std, (h_test - mean) / std
  perm = torch.from_numpy(np.random.default_rng(seed).permutation(len(x_train)))
  n_val = max(1, int(round(val_fraction * len(x_train))))
  val, fit = perm[:n_val], perm[n_val:]
  search = fit[:search_rows]
  classes = int(max(y_train.max(), y_test.max())) + 1
  w = torch.zeros(x_train.shape[1], classes, requires_grad=True)
  b = torch.zeros(classes, requires_grad=True)

  def fit_lbfgs(x, y, l2):
    opt = torch.optim.LBFGS([w, b], lr=1, max_iter=max_iter,
                            tolerance_grad=1e-5, history_size=10,
                            line_search_fn="strong_wolfe")

    def closure():
      opt.zero_grad()
      loss = (torch.nn.functional.cross_entropy(x @ w + b, y)
              + 0.5 * l2 * (w ** 2).sum())
      loss.backward()
      return loss

    opt.step(closure)
    return opt.state[w].get("n_iter", 0)

  @torch.no_grad()
  def accuracy(x, y):
    return float(((x @ w + b).argmax(1) == y).float().mean())

  grid = sorted(l2_grid, reverse=True)  # strong -> weak, warm starts
  fitted, val_acc = [], []
  for l2 in grid:
    fit_lbfgs(x_train[search], y_train[search], l2)
    fitted.append((w.detach().clone(), b.detach().clone()))
    val_acc.append(accuracy(x_train[val], y_train[val]))
  best = int(np.argmax(val_acc))
  with torch.no_grad():
    w.copy_(fitted[best][0])
    b.copy_(fitted[best][1])
  iterations = fit_lbfgs(x_train, y_train, grid[best])
  return {"test_accuracy": accuracy(x_test, y_test),
          "val_accuracy": val_acc[best], "l2": grid[best],
          "iterations": int(iterations)}


def knn_accuracy(h_train, y_train, h_test, y_test, *, k=20,
                 temperature=0.07, block=1024):
  """Weighted k-NN on cosine similarity (Wu et al. 2018), votes exp(s/τ)."""
  import torch  # pylint: disable=import-outside-toplevel
  normalise = torch.nn.functional.normalize
  x_train, x_test = normalise(h_train, dim=1), normalise(h_test, dim=1)
  classes = int(max(y_train.max(), y_test.max())) + 1
  correct = 0
  with torch.no_grad():
    for i in range(0, len(x_test), block):
      sims, idx = (x_test[i:i + block] @ x_train.T).topk(k, dim=1)
      votes = torch.zeros(len(sims), classes).scatter_add_(
          1, y_train[idx], torch.exp(sims / temperature))
      correct += int((votes.argmax(1) == y_test[i:i + block]).sum())
  return correct / len(x_test)


# --------------------------------------------------------------------------
# The interleaved runner (standard library; psutil optional).


def _psutil():
  try:
    import psutil  # pylint: disable=import-outside-toplevel
    return psutil
  except ImportError:
    return None


class TreeSampler(threading.Thread):
  """Samples the peak RSS and PSS sums over a process and its descendants.

  RSS (``/proc/PID/statm``, microseconds) every ``interval`` seconds; PSS
  (``smaps_rollup``, ~25 ms of CPU for a 2 GB process) at most every
  ``pss_interval`` seconds, so that the sampler does not compete with the
  job on a 2-core machine.
  """

  def __init__(self, pid, interval, pss_interval):
    super().__init__(daemon=True)
    self.pid, self.interval, self.pss_interval = pid, interval, pss_interval
    self.peak_rss = self.peak_pss = None
    self.done = threading.Event()

  def run(self):
    psutil = _psutil()
    if psutil is None:
      return
    try:
      root = psutil.Process(self.pid)
    except psutil.Error:
      return
    last_pss = -math.inf
    while not self.done.is_set():
      try:
        procs = [root] + root.children(recursive=True)
      except psutil.Error:
        break
      with_pss = time.monotonic() - last_pss >= self.pss_interval
      rss = pss = 0
      for p in procs:
        try:
          if with_pss:
            info = p.memory_full_info()
            pss += getattr(info, "pss", info.rss)
          else:
            info = p.memory_info()
          rss += info.rss
        except psutil.Error:
          pass
      self.peak_rss = max(self.peak_rss or 0, rss)
      if with_pss:
        last_pss = time.monotonic()
        self.peak_pss = max(self.peak_pss or 0, pss)
      self.done.wait(self.interval)


def run_child(cmd, *, log_path, timeout, sample_seconds, pss_seconds=2.0,
              env=None):
  """Runs ``cmd`` in its own session; wall, CPU and memory of its tree.

  Returns a dict: returncode (None when killed at the timeout), timed_out,
  wall_seconds, cpu_seconds (user + sys of the child and the descendants it
  waited for, from os.wait4), peak_rss_bytes (ru_maxrss: the largest single
  process), peak_tree_rss_bytes and peak_tree_pss_bytes (sampled sums, None
  without psutil), load_before and load_after (1-minute load averages: was
  the machine quiet?).
  """
  load_before = os.getloadavg()[0]
  with open(log_path, "wb") as log:
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            cwd=ROOT, env=env, start_new_session=True)
    sampler = TreeSampler(proc.pid, sample_seconds, pss_seconds)
    sampler.start()
    timed_out = threading.Event()

    def kill():
      timed_out.set()
      try:
        os.killpg(proc.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.time() - start
    timer.cancel()
    sampler.done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
  try:  # leftover descendants (a killed job's workers)
    os.killpg(proc.pid, signal.SIGKILL)
  except (ProcessLookupError, PermissionError):
    pass
  return {"returncode": None if timed_out.is_set() else proc.returncode,
          "timed_out": timed_out.is_set(), "wall_seconds": wall,
          "cpu_seconds": usage.ru_utime + usage.ru_stime,
          "peak_rss_bytes": usage.ru_maxrss * 1024,
          "peak_tree_rss_bytes": sampler.peak_rss,
          "peak_tree_pss_bytes": sampler.peak_pss,
          "load_before": load_before, "load_after": os.getloadavg()[0]}


def job_command(framework, epochs, args, run_dir):
  """(argv, path of the job's JSON summary) of one run."""
  if framework == "ssljax":
    cmd = [args.python, "-m", "ssljax.main", "--config", args.config,
           f"--config.epochs={epochs}", "--workdir", run_dir]
    return cmd + list(args.ssljax_arg), os.path.join(run_dir, "results.json")
  out = os.path.join(run_dir, "results.json")
  return [args.torch_python, os.path.abspath(__file__), "torch", "--epochs",
          str(epochs), "--out-json", out] + list(args.torch_arg), out


def read_summary(path):
  """(probe, k-NN, train seconds, phases) from a job's JSON, or Nones."""
  try:
    with open(path) as f:
      summary = json.load(f)
  except (OSError, ValueError):
    return {"probe": None, "knn": None, "train_seconds": None, "phases": None}
  evals = summary.get("evals", {})
  return {"probe": evals.get("probe/test_accuracy"),
          "knn": evals.get("knn/test_accuracy"),
          "train_seconds": summary.get("train_seconds"),
          "phases": summary.get("seconds")}


def memory_of(record):
  """(bytes, kind) of a run record: tree PSS if sampled, else ru_maxrss."""
  if record.get("peak_tree_pss_bytes"):
    return record["peak_tree_pss_bytes"], "tree PSS"
  return record.get("peak_rss_bytes"), "ru_maxrss"


def _median(values):
  values = [v for v in values if v is not None]
  return statistics.median(values) if values else None


def aggregate(records):
  """Medians per (epochs, framework) and ssljax / pytorch ratios.

  Only successful runs (returncode 0) count. The wall ratio also gets its
  range over the pairs where both runs succeeded.

  Returns:
    {epochs (str): {"ssljax": {...}, "pytorch": {...}, "ratio": {...},
    "wall_ratio_range": [lo, hi] or None, "failed": n}}.
  """
  out = {}
  for epochs in sorted({r["epochs"] for r in records}):
    rows = [r for r in records if r["epochs"] == epochs]
    ok = [r for r in rows if r["returncode"] == 0]
    entry = {"failed": len(rows) - len(ok)}
    for fw in FRAMEWORKS:
      mine = [r for r in ok if r["framework"] == fw]
      entry[fw] = {
          "runs": len(mine),
          "wall_seconds": _median([r["wall_seconds"] for r in mine]),
          "cpu_seconds": _median([r["cpu_seconds"] for r in mine]),
          "train_seconds": _median([r["train_seconds"] for r in mine]),
          "memory_bytes": _median([memory_of(r)[0] for r in mine]),
          "memory_kind": sorted({memory_of(r)[1] for r in mine}),
          "peak_rss_bytes": _median([r["peak_rss_bytes"] for r in mine]),
          "probe": _median([r["probe"] for r in mine]),
          "knn": _median([r["knn"] for r in mine]),
          "load_before": _median([r.get("load_before") for r in mine])}
    ratio = {}
    for key in ("wall_seconds", "cpu_seconds", "train_seconds",
                "memory_bytes", "peak_rss_bytes"):
      a, b = entry["ssljax"][key], entry["pytorch"][key]
      ratio[key] = a / b if a is not None and b else None
    entry["ratio"] = ratio
    pairs = {}
    for r in ok:
      pairs.setdefault(r["pair"], {})[r["framework"]] = r["wall_seconds"]
    per_pair = [p["ssljax"] / p["pytorch"] for p in pairs.values()
                if len(p) == 2 and p["pytorch"]]
    entry["wall_ratio_range"] = ([min(per_pair), max(per_pair)]
                                 if per_pair else None)
    out[str(epochs)] = entry
  return out


def markdown_table(summary):
  """The medians and ratios of `aggregate` as markdown, one table per E."""

  def fmt(value, kind):
    if value is None:
      return "–"
    return {"s": f"{value:.1f} s", "gib": f"{value / GIB:.2f} GiB",
            "acc": f"{value:.4f}", "x": f"{value:.2f}"}[kind]

  lines = []
  for epochs, e in summary.items():
    s, p, r = e["ssljax"], e["pytorch"], e["ratio"]
    kinds = sorted(set(s["memory_kind"]) | set(p["memory_kind"])) or ["–"]
    wall_ratio = fmt(r["wall_seconds"], "x")
    if e["wall_ratio_range"]:
      lo, hi = e["wall_ratio_range"]
      wall_ratio += f" ({lo:.2f}–{hi:.2f})"
    lines += [f"### {epochs} epoch(s): {s['runs']} ssljax, {p['runs']} "
              f"PyTorch runs counted, {e['failed']} failed", "",
              "| | ssljax | PyTorch | ratio |", "|---|---|---|---|",
              f"| wall (median) | {fmt(s['wall_seconds'], 's')} | "
              f"{fmt(p['wall_seconds'], 's')} | {wall_ratio} |",
              f"| CPU time (user+sys) | {fmt(s['cpu_seconds'], 's')} | "
              f"{fmt(p['cpu_seconds'], 's')} | {fmt(r['cpu_seconds'], 'x')} |",
              f"| training phase | {fmt(s['train_seconds'], 's')} | "
              f"{fmt(p['train_seconds'], 's')} | "
              f"{fmt(r['train_seconds'], 'x')} |",
              f"| peak memory ({', '.join(kinds)}) | "
              f"{fmt(s['memory_bytes'], 'gib')} | "
              f"{fmt(p['memory_bytes'], 'gib')} | "
              f"{fmt(r['memory_bytes'], 'x')} |",
              f"| peak RSS, largest process | "
              f"{fmt(s['peak_rss_bytes'], 'gib')} | "
              f"{fmt(p['peak_rss_bytes'], 'gib')} | "
              f"{fmt(r['peak_rss_bytes'], 'x')} |",
              f"| probe | {fmt(s['probe'], 'acc')} | {fmt(p['probe'], 'acc')}"
              " | |",
              f"| 20-NN | {fmt(s['knn'], 'acc')} | {fmt(p['knn'], 'acc')} | |",
              f"| load average at start | {fmt(s['load_before'], 'x')} | "
              f"{fmt(p['load_before'], 'x')} | |",
              ""]
  return "\n".join(lines)


def compare(args):
  """Runs the interleaved pairs; writes results.json and results.md."""
  if os.path.exists(os.path.join(args.out, "runs")):
    sys.exit(f"{args.out} already holds runs/; give a fresh --out")
  os.makedirs(args.out, exist_ok=True)
  env = dict(os.environ)
  env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"]
                              if env.get("PYTHONPATH") else "")
  machine = {"platform": platform.platform(), "cpus": os.cpu_count(),
             "python": args.python, "torch_python": args.torch_python,
             "memory_sampling": ("psutil tree: RSS every "
                                 f"{args.sample_seconds} s, PSS every "
                                 f"{args.pss_seconds} s")
                                if _psutil() else "ru_maxrss only",
             "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
  records = []
  order = [fw for fw in FRAMEWORKS if fw in args.frameworks]
  if args.pytorch_first:
    order.reverse()
  for epochs in args.epochs:
    for pair in range(args.pairs):
      for framework in order:
        name = f"e{epochs}_p{pair}_{framework}"
        run_dir = os.path.join(args.out, "runs", name)
        os.makedirs(run_dir, exist_ok=False)
        cmd, summary_path = job_command(framework, epochs, args, run_dir)
        print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(cmd)}",
              flush=True)
        try:
          record = run_child(cmd, log_path=os.path.join(run_dir, "log.txt"),
                             timeout=args.timeout,
                             sample_seconds=args.sample_seconds,
                             pss_seconds=args.pss_seconds, env=env)
        except OSError as e:  # e.g. a missing interpreter: recorded, not fatal
          record = {"returncode": None, "timed_out": False, "error": str(e),
                    "wall_seconds": None, "cpu_seconds": None,
                    "peak_rss_bytes": None, "peak_tree_rss_bytes": None,
                    "peak_tree_pss_bytes": None, "load_before": None,
                    "load_after": None}
        record.update(framework=framework, epochs=epochs, pair=pair,
                      name=name, command=cmd, **read_summary(summary_path))
        records.append(record)
        print(f"  rc={record['returncode']} wall={record['wall_seconds']} "
              f"probe={record['probe']} knn={record['knn']}", flush=True)
        write_results(args.out, machine, records)
  summary = write_results(args.out, machine, records)
  print(markdown_table(summary))


def write_results(out, machine, records):
  """Writes results.json and results.md (after every run); the summary."""
  summary = aggregate(records)
  with open(os.path.join(out, "results.json"), "w") as f:
    json.dump({"machine": machine, "records": records, "summary": summary},
              f, indent=1)
  with open(os.path.join(out, "results.md"), "w") as f:
    f.write(f"Machine: {machine['platform']}, {machine['cpus']} CPUs; "
            f"started {machine['started']}; memory: "
            f"{machine['memory_sampling']}.\n\n" + markdown_table(summary))
  return summary


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  job = sub.add_parser("torch", help="the PyTorch job alone")
  job.add_argument("--epochs", type=int, default=4)
  job.add_argument("--num-workers", type=int, default=2)
  job.add_argument("--idx-dir", default=IDX_DIR)
  job.add_argument("--out-json", help="also write the summary here")
  job.add_argument("--seed", type=int, default=0,
                   help="torch.manual_seed and the probe's validation split "
                   "(compare with the main job's --config.seed)")
  for name, value in OPTIM.items():
    job.add_argument("--" + name.replace("_", "-"), type=float, default=value,
                     help=f"optimiser (default: the main job's, {value:g})")
  cmp_ = sub.add_parser("compare", help="A B A B ... interleaved")
  cmp_.add_argument("--torch-python", required=True,
                    help="interpreter with torch, torchvision, lightly")
  cmp_.add_argument("--python", default=sys.executable,
                    help="interpreter of the ssljax job")
  cmp_.add_argument("--config", default="configs/vicreg.py")
  cmp_.add_argument("--ssljax-arg", action="append", default=[],
                    help="extra argument of the ssljax job (repeatable)")
  cmp_.add_argument("--torch-arg", action="append", default=[],
                    help="extra argument of the PyTorch job (repeatable), "
                    "e.g. --torch-arg=--learning-rate=2e-3")
  cmp_.add_argument("--epochs", type=int, nargs="+", default=[1, 4])
  cmp_.add_argument("--pairs", type=int, default=3)
  cmp_.add_argument("--out", required=True)
  cmp_.add_argument("--timeout", type=float, default=3600.0,
                    help="seconds before a run is killed (recorded, not fatal)")
  cmp_.add_argument("--sample-seconds", type=float, default=0.5,
                    help="period of the tree RSS sampling")
  cmp_.add_argument("--pss-seconds", type=float, default=2.0,
                    help="least period of the (costlier) tree PSS sampling")
  cmp_.add_argument("--frameworks", nargs="+", choices=FRAMEWORKS,
                    default=list(FRAMEWORKS),
                    help="run only these (e.g. one side again)")
  cmp_.add_argument("--pytorch-first", action="store_true",
                    help="B A B A ... instead of A B A B ...")
  args = parser.parse_args(argv)
  if args.command == "torch":
    summary = torch_job(args.epochs, num_workers=args.num_workers,
                        seed=args.seed, idx_dir=args.idx_dir,
                        optim={name: getattr(args, name) for name in OPTIM})
    if args.out_json:
      with open(args.out_json, "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))
  else:
    compare(args)


if __name__ == "__main__":
  main()
