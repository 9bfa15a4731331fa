"""The main job's first epoch against the PyTorch job's, one piece at a time.

    python benchmarks/first_epoch.py parity --torch-python PY [--steps 20]
    python benchmarks/first_epoch.py crossed --torch-python PY \\
        --seeds 0 1 2 3 4 --out DIR
    PY benchmarks/first_epoch.py dump --seed S --out FILE.npz [--steps K]
        [--train]

The PyTorch job is ``benchmarks/vs_pytorch.py``'s (the main job written the
way a PyTorch user writes it). ``dump`` runs in the interpreter with torch,
torchvision and lightly (the ``bench`` extra): with ``torch.manual_seed(S)``
it builds the PyTorch job's model and DataLoader in the job's order, so it
saves the job's initial weights and, exactly, the two uint8 views of each of
its first K batches (one epoch by default) as ``vs_pytorch.py torch --seed
S`` draws them; with ``--train`` it also trains those K steps as the job
does and saves each step's loss and the final weights.

``parity`` (in the ssljax interpreter) starts ssljax's ``train_step`` from
the PyTorch job's initial weights and feeds it the PyTorch job's views: if
the two training steps (forward pass, per-view BatchNorm, VICReg loss,
gradient, AdamW with its mask, lr schedule, running statistics) are the
same, the losses agree to float32 rounding step by step. The size of that
rounding is measured alongside: the PyTorch job against itself on one
thread instead of torch's default. It prints the step-by-step table and
writes ``parity.json`` under ``--out`` (default runs/parity).

``crossed`` trains one epoch with ssljax's ``train_step`` in the four
combinations of views (ssljax's on-device views, or the PyTorch job's
torchvision views) and initial weights (ssljax's for ``key(S)``, the main
job's, or the PyTorch job's for ``manual_seed(S)``), for each seed, and
scores each with the main job's probe and 20-NN (``configs/vicreg.py``'s
options). The ssljax-views arm draws its batches from a NumPy permutation
of the train split; its views are keyed by (seed, step) as in the main job.
With "views" and "init" crossed and paired by seed, the effect of each
piece is the mean difference over seeds and the other piece, with its
standard error. Each run is appended to ``runs.jsonl`` under ``--out``
(default runs/crossed), so a rerun goes on where it stopped; the tables are
printed and written to ``results.md``. Each (seed, arm) is ~2 minutes on 2
CPU cores. Both commands read Fashion-MNIST's IDX files from
``vs_pytorch.IDX_DIR``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import vs_pytorch  # noqa: E402  pylint: disable=wrong-import-position

ARMS = (("ssljax", "ssljax"), ("pytorch", "ssljax"), ("ssljax", "pytorch"),
        ("pytorch", "pytorch"))  # (views, initial weights)
STEPS_PER_EPOCH = 234  # 60,000 // 256, full batches


# --------------------------------------------------------------------------
# The PyTorch side (run in the torch interpreter).


def dump(seed, out, steps=None, train=False, num_workers=2, threads=None,
         idx_dir=vs_pytorch.IDX_DIR):
  """Saves the PyTorch job's initial weights and views (and, with
  ``train``, its losses and final weights) of seed ``seed`` to ``out``;
  ``threads`` sets torch's intra-op threads (None: torch's default)."""
  # pylint: disable=import-outside-toplevel
  import numpy as np
  import torch
  # pylint: enable=import-outside-toplevel
  if threads:
    torch.set_num_threads(threads)
  torch.manual_seed(seed)  # the PyTorch job's order: seed, model, loader
  train_x, _ = vs_pytorch.fashion_mnist("train", idx_dir)
  _, _, model = vs_pytorch.torch_model()
  loader = vs_pytorch.torch_loader(train_x, 256, num_workers)
  steps = steps or len(loader)
  arrays = {"init/" + k: v.detach().numpy().copy()
            for k, v in model.state_dict().items()}
  if train:
    criterion = vs_pytorch.torch_criterion()
    optimizer, scheduler = vs_pytorch.torch_optimizer(
        model, vs_pytorch.OPTIM, len(loader), len(loader))
    model.train()
  views = np.zeros((steps, 2, 256, 28, 28), np.uint8)
  losses = []
  for k, (x0, x1) in enumerate(loader):
    if k == steps:
      break
    for v, x in enumerate((x0, x1)):
      pixels = x[:, 0].numpy() * 255  # uint8 ops, then scaled: k / 255
      if np.abs(pixels - pixels.round()).max() > 1e-3:
        raise RuntimeError("a torchvision view is not a uint8 image / 255")
      views[k, v] = pixels.round().astype(np.uint8)
    if train:
      losses.append(vs_pytorch.torch_step(model, criterion, optimizer,
                                          scheduler, x0, x1))
  if train:
    arrays.update({"final/" + k: v.detach().numpy().copy()
                   for k, v in model.state_dict().items()})
  np.savez(out, views=views, losses=np.asarray(losses), **arrays)


def run_dump(torch_python, seed, out, steps=None, train=False, threads=None):
  """``dump`` in the torch interpreter, as a child process."""
  cmd = [torch_python, os.path.abspath(__file__), "dump", "--seed",
         str(seed), "--out", out]
  cmd += ["--steps", str(steps)] if steps else []
  cmd += ["--train"] if train else []
  cmd += ["--threads", str(threads)] if threads else []
  subprocess.run(cmd, check=True)
  return out


# --------------------------------------------------------------------------
# The ssljax side.


def flax_variables(arrays, prefix):
  """(params, method_state) of the main job's VICReg network from the
  PyTorch job's ``state_dict`` arrays saved under ``prefix`` ("init" or
  "final"): conv kernels OIHW -> HWIO, Linear weights transposed."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  get = lambda name: jnp.asarray(arrays[f"{prefix}/{name}"])
  params = {"encoder": {}, "projector": {}}
  stats = {"encoder": {}, "projector": {}}
  for i, (conv, bn) in enumerate(((0, 1), (4, 5), (8, 9), (12, 13))):
    params["encoder"][f"Conv_{i}"] = {
        "kernel": get(f"0.{conv}.weight").transpose(2, 3, 1, 0)}
    params["encoder"][f"BatchNorm_{i}"] = {"scale": get(f"0.{bn}.weight"),
                                           "bias": get(f"0.{bn}.bias")}
    stats["encoder"][f"BatchNorm_{i}"] = {"mean": get(f"0.{bn}.running_mean"),
                                          "var": get(f"0.{bn}.running_var")}
  params["projector"]["Dense_0"] = {"kernel": get("1.0.weight").T}
  params["projector"]["BatchNorm_0"] = {"scale": get("1.1.weight"),
                                        "bias": get("1.1.bias")}
  stats["projector"]["BatchNorm_0"] = {"mean": get("1.1.running_mean"),
                                       "var": get("1.1.running_var")}
  params["projector"]["Dense_1"] = {"kernel": get("1.3.weight").T,
                                    "bias": get("1.3.bias")}
  return params, {"batch_stats": stats}


def ssljax_job(seed):
  """(config, method, initial state, jitted train step) of the main job's
  first epoch (configs/vicreg.py, epochs=1) for ``seed``."""
  # pylint: disable=import-outside-toplevel
  import jax
  from configs import vicreg
  from ssljax import data, methods, optimizers, train, train_state
  # pylint: enable=import-outside-toplevel
  config = vicreg.get_config()
  config.seed = seed
  method = methods.build(config)
  lr_fn = optimizers.create_learning_rate_fn(
      config.optim, config.batch_size, STEPS_PER_EPOCH, STEPS_PER_EPOCH)
  tx = optimizers.create_optimizer(config.optim, lr_fn, STEPS_PER_EPOCH)
  state = train_state.create_train_state(
      method, tx, jax.random.key(seed), train.batch_spec(config, (28, 28, 1)))
  step = jax.jit(functools.partial(
      train.train_step, spec=data.view_spec(config.views), seed=seed,
      total_steps=STEPS_PER_EPOCH, steps_per_epoch=STEPS_PER_EPOCH))
  return config, method, state, step


def with_weights(state, arrays, prefix="init"):
  """``state`` with the PyTorch job's weights and a fresh optimiser."""
  params, method_state = flax_variables(arrays, prefix)
  return state.replace(params=params, opt_state=state.tx.init(params),
                       method_state=method_state)


def torch_views(views_u8):
  """uint8 (2, B, H, W) -> the train step's ``ready_views`` batch."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  return {"ready_views": jnp.asarray(views_u8[..., None], jnp.float32) / 255}


def score(config, method, state, train_xy, test_xy):
  """The main job's probe and 20-NN on the encoder's features."""
  # pylint: disable=import-outside-toplevel
  import jax
  import numpy as np
  from ssljax import probes
  # pylint: enable=import-outside-toplevel
  rep = jax.jit(lambda x: method.representation(state.params,
                                                state.method_state, x))

  def features(images):
    return np.concatenate([
        np.asarray(rep(images[i:i + 1000, 0, :, :, None] / np.float32(255)))
        for i in range(0, len(images), 1000)])

  h_train, h_test = features(train_xy[0]), features(test_xy[0])
  p, k = config.evals.probe, config.evals.knn
  probe = probes.linear_probe(
      h_train, train_xy[1], h_test, test_xy[1], l2_grid=tuple(p.l2_grid),
      val_fraction=p.val_fraction, max_iter=p.max_iter,
      max_search_rows=p.search_rows, seed=config.seed)
  knn = probes.knn_accuracy(h_train, train_xy[1], h_test, test_xy[1],
                              k=k.k, temperature=k.temperature)
  return {"probe": probe["test_accuracy"], "knn": knn}


def relative_drift(params, reference):
  """{parameter path: ‖a − b‖ / ‖b‖} between two trees of the same layout."""
  # pylint: disable=import-outside-toplevel
  import jax
  import numpy as np
  # pylint: enable=import-outside-toplevel
  return {jax.tree_util.keystr(path): float(
      np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))
          for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(params),
                                  jax.tree.leaves(reference))}


def parity(args):
  """ssljax's train step from the PyTorch job's weights on its views, and,
  for the size of float32 rounding, the PyTorch job against itself on one
  thread instead of torch's default."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  os.makedirs(args.out, exist_ok=True)
  arrays = np.load(run_dump(
      args.torch_python, args.seed,
      os.path.join(args.out, f"parity_s{args.seed}.npz"), steps=args.steps,
      train=True))
  alone = np.load(run_dump(
      args.torch_python, args.seed,
      os.path.join(args.out, f"parity_s{args.seed}_1thread.npz"),
      steps=args.steps, train=True, threads=1))
  if not np.array_equal(alone["views"], arrays["views"]):
    raise RuntimeError("the PyTorch job's views changed with its threads")
  _, _, state, step = ssljax_job(args.seed)
  state = with_weights(state, arrays)
  ours = []
  for views in arrays["views"]:
    state, metrics = step(state, torch_views(views))
    ours.append(float(metrics["loss"]))
  theirs, one_thread = arrays["losses"].tolist(), alone["losses"].tolist()
  rel = lambda xs: [abs(a - b) / abs(b) for a, b in zip(xs, theirs)]
  final = flax_variables(arrays, "final")[0]
  result = {
      "seed": args.seed, "steps": args.steps, "ssljax_loss": ours,
      "pytorch_loss": theirs, "pytorch_1thread_loss": one_thread,
      "relative_difference": rel(ours),
      "pytorch_1thread_relative_difference": rel(one_thread),
      "final_weights_relative_difference": relative_drift(state.params,
                                                           final),
      "pytorch_1thread_final_weights_relative_difference": relative_drift(
          flax_variables(alone, "final")[0], final)}
  with open(os.path.join(args.out, "parity.json"), "w") as f:
    json.dump(result, f, indent=1)
  print("| step | PyTorch loss | ssljax loss | relative difference | "
        "PyTorch on 1 thread: relative difference |")
  print("|---:|---:|---:|---:|---:|")
  for i, (a, b, r, r1) in enumerate(zip(
      ours, theirs, result["relative_difference"],
      result["pytorch_1thread_relative_difference"])):
    print(f"| {i} | {b:.6f} | {a:.6f} | {r:.1e} | {r1:.1e} |")
  for name, key in (("ssljax", "final_weights_relative_difference"),
                    ("PyTorch on 1 thread",
                     "pytorch_1thread_final_weights_relative_difference")):
    drift = result[key]
    worst = max(drift, key=drift.get)
    kernels = max(v for k, v in drift.items() if "kernel" in k)
    print(f"{name}: final weights, largest relative difference "
          f"{drift[worst]:.1e} ({worst}), of a kernel {kernels:.1e}")


def crossed(args):
  """The 2 × 2 of views and initial weights, one epoch each, per seed."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  os.makedirs(args.out, exist_ok=True)
  log = os.path.join(args.out, "runs.jsonl")
  done = set()
  if os.path.exists(log):  # a rerun goes on where it stopped
    with open(log) as f:
      done = {(r["seed"], r["views"], r["init"]) for r in map(json.loads, f)}
  train_xy = vs_pytorch.fashion_mnist("train")
  test_xy = vs_pytorch.fashion_mnist("test")
  for seed in args.seeds:
    todo = [arm for arm in ARMS if (seed, *arm) not in done]
    if not todo:
      continue
    path = os.path.join(args.out, f"pytorch_views_s{seed}.npz")
    if not os.path.exists(path):
      run_dump(args.torch_python, seed, path)
    arrays = np.load(path)
    order = np.random.default_rng(seed).permutation(len(train_xy[0]))
    config, method, initial, step = ssljax_job(seed)  # one trace per seed
    for views, init in todo:
      start = time.time()
      state = with_weights(initial, arrays) if init == "pytorch" else initial
      for k in range(STEPS_PER_EPOCH):
        if views == "pytorch":
          batch = torch_views(arrays["views"][k])
        else:
          rows = order[k * 256:(k + 1) * 256]
          batch = {"images": train_xy[0][rows].transpose(0, 2, 3, 1)}
        state, metrics = step(state, batch)
      record = {"seed": seed, "views": views, "init": init,
                "final_loss": float(metrics["loss"]),
                **score(config, method, state, train_xy, test_xy),
                "seconds": time.time() - start}
      print(json.dumps(record), flush=True)
      with open(log, "a") as f:
        f.write(json.dumps(record) + "\n")
  with open(log) as f:
    records = [json.loads(line) for line in f]
  table = crossed_table(records)
  with open(os.path.join(args.out, "results.md"), "w") as f:
    f.write(table)
  print(table)


def crossed_table(records):
  """Markdown: each arm per seed and its mean, then each piece's effect
  (PyTorch's − ssljax's) paired by seed and the other piece, with the
  standard error over those pairs."""
  by = {(r["seed"], r["views"], r["init"]): r for r in records}
  seeds = sorted({r["seed"] for r in records})
  lines = []
  for metric in ("probe", "knn"):
    lines += [f"{metric}: views / initial weights",
              "", "| seed | " + " | ".join(f"{v} / {i}" for v, i in ARMS)
              + " |", "|---" * (len(ARMS) + 1) + "|"]
    for seed in seeds:
      lines.append(f"| {seed} | " + " | ".join(
          f"{by[(seed, *arm)][metric]:.4f}" if (seed, *arm) in by else ""
          for arm in ARMS) + " |")
    means = [[by[(s, *arm)][metric] for s in seeds if (s, *arm) in by]
             for arm in ARMS]
    lines.append("| mean | " + " | ".join(
        f"{statistics.mean(m):.4f}" if m else "" for m in means) + " |")
    lines.append("")
    for piece, index in (("views", 0), ("initial weights", 1)):
      diffs = []
      for seed in seeds:
        for other in ("ssljax", "pytorch"):
          arm = lambda side: ((side, other) if index == 0 else (other, side))
          a, b = (seed, *arm("pytorch")), (seed, *arm("ssljax"))
          if a in by and b in by:
            diffs.append(by[a][metric] - by[b][metric])
      if len(diffs) > 1:
        se = statistics.stdev(diffs) / len(diffs) ** 0.5
        lines.append(f"- {metric}, PyTorch's {piece} − ssljax's: "
                     f"{statistics.mean(diffs):+.4f} (standard error "
                     f"{se:.4f}, {len(diffs)} pairs)")
    lines.append("")
  return "\n".join(lines) + "\n"


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  d = sub.add_parser("dump", help="(torch interpreter) weights and views")
  d.add_argument("--seed", type=int, default=0)
  d.add_argument("--out", required=True)
  d.add_argument("--steps", type=int, default=None,
                 help="batches to save (default: one epoch)")
  d.add_argument("--train", action="store_true",
                 help="also train those steps; save losses, final weights")
  d.add_argument("--num-workers", type=int, default=2)
  d.add_argument("--threads", type=int, default=None,
                 help="torch.set_num_threads (default: torch's)")
  for name, help_ in (("parity", "ssljax's step on the PyTorch job's input"),
                      ("crossed", "views x initial weights, one epoch")):
    p = sub.add_parser(name, help=help_)
    p.add_argument("--torch-python", required=True,
                   help="interpreter with torch, torchvision, lightly")
    p.add_argument("--out", default=os.path.join(ROOT, "runs", name))
    if name == "parity":
      p.add_argument("--steps", type=int, default=20)
      p.add_argument("--seed", type=int, default=0)
    else:
      p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
  args = parser.parse_args(argv)
  if args.command == "dump":
    dump(args.seed, args.out, args.steps, args.train, args.num_workers,
         args.threads)
  elif args.command == "parity":
    parity(args)
  else:
    crossed(args)


if __name__ == "__main__":
  main()
