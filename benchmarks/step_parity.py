"""ssljax's whole training step against the authors' own step.

    PY benchmarks/step_parity.py --method dino --peer PATH/TO/dino \\
        [--steps 20] [--local 0] [--out runs/step_parity]

PY is an interpreter with torch and ssljax (``make setup-bench``). The
official checkout is given by path (the repository contains none of its
code); the command prints its commit.

For ``dino`` (Caron et al. 2021, arXiv 2104.14294; facebookresearch/dino):
a small ViT (patch 7, width 48, 2 blocks, 3 heads) and DINO head (hidden
64, bottleneck 32, 128 prototypes) on 28 x 28 Fashion-MNIST images, batch
16, from ``configs/dino.py``'s options (per-tensor clipping at 3.0, the
last layer frozen for its first epoch with its Adam count held, weight
decay 0.04 -> 0.4 on a cosine, teacher momentum 0.996 -> 1 on a cosine,
teacher temperature 0.04, centre momentum 0.9), an epoch being 5 steps so
that the freeze ends within the run.

1. ssljax's side: `ssljax.train.train_step` from its initial state, fed the
   views of each step (``ready_views``: V crops made once by
   `ssljax.data.device_views`).
2. The authors' side, from the same weights (every leaf converted) and the
   same views: the official ``train_one_epoch`` of main_dino.py itself, with
   its ``MultiCropWrapper``, ``VisionTransformer``, ``DINOHead``,
   ``DINOLoss``, ``clip_gradients``, ``cancel_gradients_last_layer``,
   ``get_params_groups`` and ``torch.optim.AdamW``, given ssljax's learning
   rate, weight decay and momentum at each step as its schedules. To run on
   a CPU without torch.distributed, ``Tensor.cuda`` returns the tensor,
   ``torch.cuda.synchronize`` and ``dist.all_reduce`` (of one process) do
   nothing.
3. The same official run again on one thread instead of torch's default:
   the rounding reference, how far float32 rounding alone moves the step.

It prints, per step, both losses and their relative difference; after K
steps, the worst relative difference (largest difference over the largest
value) of every student and teacher tensor and of the centre, against the
rounding reference's. ``--local L`` adds L local crops of 14 px: their
position embeddings are interpolated, bicubically in both but with
another kernel (jax's a = -0.5, torch's a = -0.75) and DINO's +0.1 offset,
which is a documented deviation; the command measures it. ``--float64`` runs
both sides in float64. ``--set
key=value`` changes an option on ssljax's side only, to measure what one
difference does (e.g. ``optim.frozen_adam_count=advance``, optax's one Adam
count). Writes ``step_parity_<method>[...].json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

STEPS_PER_EPOCH = 5
BATCH = 16


def _commit(path: str) -> str:
  try:
    return subprocess.run(["git", "-C", path, "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True
                          ).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "unknown (not a git checkout)"


def _drift(ours: dict, theirs: dict, start: dict, keys) -> dict:
  """The worst tensor after K steps: ‖ours − theirs‖₂ / ‖theirs − start‖₂,
  the disagreement over how far the official step moved that tensor (a
  tensor's own scale would make small, barely moved tensors look far
  apart: Adam turns the rounding noise of a near-zero gradient into ±lr
  steps). Also the largest |ours − theirs| over all tensors."""
  ratios = {}
  for k in keys:
    moved = np.linalg.norm(np.asarray(theirs[k], np.float64)
                           - np.asarray(start[k], np.float64))
    diff = np.linalg.norm(np.asarray(ours[k], np.float64)
                          - np.asarray(theirs[k], np.float64))
    ratios[k] = float(diff / moved) if moved > 0 else (
        0.0 if diff == 0 else float("inf"))
  name = max(ratios, key=ratios.get)
  largest = max(float(np.abs(np.asarray(ours[k], np.float64)
                             - np.asarray(theirs[k], np.float64)).max())
                for k in keys)
  return {"worst_over_update": ratios[name], "tensor": name,
          "largest_abs_difference": largest}


def _worst(a, b) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  scale = max(np.abs(b).max(), 1e-30)
  return float(np.abs(a - b).max() / scale)


# --------------------------------------------------------------------- dino --
def dino_config(num_local: int):
  """configs/dino.py with a ViT small enough for a CPU."""
  from configs import dino  # pylint: disable=import-outside-toplevel
  c = dino.get_config()
  c.model.encoder = "vit_tiny16"
  c.model.encoder_kwargs = dict(patch_size=7, hidden_dim=48, depth=2,
                                num_heads=3)
  c.model.dino_head.update(dict(hidden_dim=64, bottleneck_dim=32,
                                out_dim=128))
  c.views.num_local = num_local
  c.views.local_size = 14
  c.views.size = 28
  c.batch_size = BATCH
  c.loss.teacher_temperature = 0.04
  c.loss.warmup_teacher_temperature = 0.04
  c.loss.teacher_temperature_warmup_epochs = 0.0
  c.optim.learning_rate = 5e-4
  c.optim.weight_decay = 0.04
  c.optim.weight_decay_schedule = "cosine"
  c.optim.final_weight_decay = 0.4
  c.optim.warmup_epochs = 1.0
  c.evals = {}
  return c


def ssljax_dino(config, steps: int, seed: int = 0, float64: bool = False):
  """(initial params and state, views per step, losses, schedules, final
  params and state) of ssljax's train_step (in float64 throughout with
  ``float64``: parameters, state, views and computation)."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from ssljax import data, methods, optimizers, train, train_state  # pylint: disable=import-outside-toplevel
  spec = data.view_spec(config.views)
  method = methods.build(config)
  total = steps
  lr_fn = optimizers.create_learning_rate_fn(
      config.optim, config.batch_size, STEPS_PER_EPOCH, total)
  tx = optimizers.create_optimizer(config.optim, lr_fn, STEPS_PER_EPOCH,
                                   total)
  shapes = train.batch_spec(config, (28, 28, 1), spec=spec)
  state = train_state.create_train_state(method, tx, jax.random.key(seed),
                                         shapes)
  if float64:
    wide = lambda tree: jax.tree.map(
        lambda a: a.astype(jnp.float64)
        if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)
    params = wide(state.params)
    state = state.replace(params=params, opt_state=tx.init(params),
                          method_state=wide(state.method_state))
  initial = jax.device_get((state.params, state.method_state))
  dtype = np.float64 if float64 else np.float32
  source = data.open_split("fashion_mnist_local", f"train[:{steps * BATCH}]",
                           download=False)
  images = np.asarray(source.images)
  step = jax.jit(lambda s, b: train.train_step(
      s, b, spec=spec, seed=seed, total_steps=total,
      steps_per_epoch=STEPS_PER_EPOCH))
  make_views = jax.jit(lambda b, k: data.device_views(b, k, spec))
  views, losses, momenta = [], [], []
  for k in range(steps):
    batch = {"images": images[k * BATCH:(k + 1) * BATCH]}
    v = make_views(batch, jax.random.fold_in(jax.random.key(seed + 1), k))
    v = tuple(np.asarray(x, dtype) for x in v)  # global, then local
    views.append(v)
    state, metrics = step(state, {"ready_views": v})
    losses.append(float(metrics["loss"]))
    momenta.append(float(metrics["teacher_momentum"]))
  wd = optimizers.cosine_schedule(config.optim.weight_decay,
                                  config.optim.final_weight_decay,
                                  optimizers.schedule_steps(config.optim,
                                                            total))
  # The values the jitted step used: its count is int32 (optax's schedules
  # return float32 for an int32 count, also with x64 on).
  count = lambda k: jnp.asarray(k, jnp.int32)
  schedules = {"lr": [float(lr_fn(count(k))) for k in range(steps)],
               "wd": [float(wd(count(k))) for k in range(steps)],
               "momentum": momenta}
  final = jax.device_get((state.params, state.method_state))
  return initial, views, losses, schedules, final


def _dino_head_tensors(head: dict) -> dict:
  """ssljax's DINOHead params -> the official DINOHead's state_dict."""
  out, i = {}, 0
  while f"Dense_{i}" in head:
    out[f"mlp.{2 * i}.weight"] = np.asarray(head[f"Dense_{i}"]["kernel"]).T
    out[f"mlp.{2 * i}.bias"] = np.asarray(head[f"Dense_{i}"]["bias"])
    i += 1
  if i == 1:  # one layer: the official head has a bare Linear, no Sequential
    out = {"mlp.weight": out["mlp.0.weight"], "mlp.bias": out["mlp.0.bias"]}
  v = np.asarray(head["last_layer_v"]).T  # (out_dim, bottleneck)
  out["last_layer.weight_v"] = v
  out["last_layer.weight_g"] = np.ones((v.shape[0], 1), np.float32)
  return out


def _torch_state(config, params: dict) -> dict:
  """ssljax's student (or teacher) params -> MultiCropWrapper's state_dict."""
  from ssljax import export  # pylint: disable=import-outside-toplevel
  from ssljax.methods import networks  # pylint: disable=import-outside-toplevel
  encoder = networks.encoder_of(config)
  backbone, _ = export.torch_tensors(encoder, {"params": params["encoder"]},
                                     image_size=28, channels=1)
  state = {f"backbone.{k}": v for k, v in backbone.items()}
  state.update({f"head.{k}": v for k, v in
                _dino_head_tensors(params["projector"]).items()})
  return state


def official_dino(peer: str, config, initial, views, schedules,
                  threads: int | None, float64: bool = False):
  """The official train_one_epoch, epoch after epoch, from ssljax's
  initial weights on the same views and schedules; (losses per step,
  student state_dict, teacher state_dict, centre)."""
  import torch  # pylint: disable=import-outside-toplevel
  import torch.distributed as dist  # pylint: disable=import-outside-toplevel
  from torch import nn  # pylint: disable=import-outside-toplevel
  if threads:
    torch.set_num_threads(threads)
  sys.path.insert(0, peer)
  import main_dino  # pylint: disable=import-outside-toplevel,import-error
  import utils  # pylint: disable=import-outside-toplevel,import-error
  import vision_transformer as vits  # pylint: disable=import-outside-toplevel,import-error
  # One CPU process: no CUDA, no process group.
  torch.Tensor.cuda = lambda self, *a, **k: self
  torch.cuda.synchronize = lambda *a, **k: None
  dist.all_reduce = lambda *a, **k: None
  dist.get_world_size = lambda *a, **k: 1

  kw = config.model.encoder_kwargs
  head = config.model.dino_head

  def network():
    from functools import partial  # pylint: disable=import-outside-toplevel
    backbone = vits.VisionTransformer(
        img_size=[28], patch_size=kw.patch_size, in_chans=1,
        embed_dim=kw.hidden_dim, depth=kw.depth, num_heads=kw.num_heads,
        mlp_ratio=4, qkv_bias=True,
        norm_layer=partial(nn.LayerNorm, eps=1e-6))
    return utils.MultiCropWrapper(backbone, vits.DINOHead(
        kw.hidden_dim, head.out_dim, use_bn=head.use_bn,
        norm_last_layer=head.norm_last_layer, nlayers=head.num_layers,
        hidden_dim=head.hidden_dim, bottleneck_dim=head.bottleneck_dim))

  student, teacher = network(), network()
  params, state = initial
  load = lambda net, tree: net.load_state_dict(
      {k: torch.from_numpy(np.array(v)) for k, v in
       _torch_state(config, tree).items()}, strict=True)
  if float64:
    student.double()
    teacher.double()
  load(student, params)
  load(teacher, state["teacher"]["params"])
  for p in teacher.parameters():
    p.requires_grad = False

  class DDP(nn.Module):  # the .module that train_one_epoch's EMA reads
    def __init__(self, module):
      super().__init__()
      self.module = module

    def forward(self, x):
      return self.module(x)

  wrapped = DDP(student)
  optimizer = torch.optim.AdamW(utils.get_params_groups(student))
  loss_fn = main_dino.DINOLoss(
      head.out_dim, config.views.num_global + config.views.num_local,
      config.loss.warmup_teacher_temperature, config.loss.teacher_temperature,
      0, len(views) // STEPS_PER_EPOCH + 1,
      student_temp=config.loss.student_temperature,
      center_momentum=config.loss.center_momentum)
  if float64:
    loss_fn.double()
  losses = []

  class Recorded(nn.Module):
    def __init__(self, inner):
      super().__init__()
      self.inner = inner

    def forward(self, *args):
      loss = self.inner(*args)
      losses.append(float(loss.item()))
      return loss

  recorded = Recorded(loss_fn)
  args = argparse.Namespace(clip_grad=config.optim.clip_grad_norm,
                             freeze_last_layer=int(
                                 config.optim.freeze_last_layer_epochs),
                             epochs=len(views) // STEPS_PER_EPOCH)
  lr = np.asarray(schedules["lr"])
  wd = np.asarray(schedules["wd"])
  momentum = np.asarray(schedules["momentum"])
  for epoch in range(len(views) // STEPS_PER_EPOCH):
    loader = [([torch.from_numpy(np.ascontiguousarray(
        v.transpose(0, 3, 1, 2))) for v in views[k]], None)
              for k in range(epoch * STEPS_PER_EPOCH,
                             (epoch + 1) * STEPS_PER_EPOCH)]
    with contextlib.redirect_stdout(io.StringIO()):
      main_dino.train_one_epoch(wrapped, teacher, teacher, recorded, loader,
                                optimizer, lr, wd, momentum, epoch, None,
                                args)
  to_np = lambda net: {k: v.detach().numpy().copy()
                       for k, v in net.state_dict().items()}
  return (losses, to_np(student), to_np(teacher),
          loss_fn.center.detach().numpy().reshape(-1).copy())


def _override(config, assignments):
  """``--set key=value`` on ssljax's side only (values parsed as JSON,
  else kept as str)."""
  for item in assignments or ():
    path, _, text = item.partition("=")
    try:
      value = json.loads(text)
    except ValueError:
      value = text
    node = config
    *parents, leaf = path.split(".")
    for part in parents:
      node = node[part]
    node[leaf] = value
  return config


def compare_dino(args):
  from ssljax import __version__  # pylint: disable=import-outside-toplevel
  config = dino_config(args.local)
  official_config = dino_config(args.local)
  _override(config, args.set)
  if args.float64:
    import jax  # pylint: disable=import-outside-toplevel
    jax.config.update("jax_enable_x64", True)
    config.model.dtype = "float64"
  started = time.time()
  initial, views, ours, schedules, final = ssljax_dino(
      config, args.steps, float64=args.float64)
  theirs, student, teacher, center = official_dino(
      args.peer, official_config, initial, views, schedules, threads=None,
      float64=args.float64)
  ref_losses, ref_student, ref_teacher, ref_center = official_dino(
      args.peer, official_config, initial, views, schedules, threads=1,
      float64=args.float64)
  params, state = final
  our_student = _torch_state(config, params)
  our_teacher = _torch_state(config, state["teacher"]["params"])
  rows = []
  for k in range(args.steps):
    rows.append({"step": k, "ssljax": ours[k], "official": theirs[k],
                 "official_1_thread": ref_losses[k],
                 "relative": abs(ours[k] - theirs[k]) / abs(theirs[k]),
                 "rounding": abs(ref_losses[k] - theirs[k]) / abs(theirs[k])})
  keys = [k for k in student if not k.endswith("weight_g")]
  start = _torch_state(config, initial[0])
  start_teacher = _torch_state(config, initial[1]["teacher"]["params"])
  tensors = {
      "student": _drift(our_student, student, start, keys),
      "teacher": _drift(our_teacher, teacher, start_teacher, keys),
      "center": _worst(np.asarray(state["center"]).reshape(-1), center)}
  rounding = {
      "student": _drift(ref_student, student, start, keys),
      "teacher": _drift(ref_teacher, teacher, start_teacher, keys),
      "center": _worst(ref_center, center)}
  result = {"method": "dino", "peer": os.path.abspath(args.peer),
            "peer_commit": _commit(args.peer), "ssljax": __version__,
            "steps": args.steps, "local_crops": args.local,
            "ssljax_overrides": list(args.set or ()),
            "float64": args.float64,
            "losses": rows, "after_K_steps": tensors,
            "rounding_after_K_steps": rounding,
            "wall_s": round(time.time() - started, 1)}
  return result


def report(result) -> str:
  lines = [f"{result['method']}: ssljax {result['ssljax']} against "
           f"{result['peer']} @ {result['peer_commit']}, "
           f"{result['steps']} steps, {result['local_crops']} local crops, "
           f"{'float64' if result['float64'] else 'float32'}"
           + (f", ssljax with {', '.join(result['ssljax_overrides'])}"
              if result["ssljax_overrides"] else ""),
           "| step | ssljax loss | official loss | relative | official 1 "
           "thread vs default (rounding) |", "|---|---|---|---|---|"]
  for r in result["losses"]:
    lines.append(f"| {r['step']} | {r['ssljax']:.7f} | {r['official']:.7f} "
                 f"| {r['relative']:.1e} | {r['rounding']:.1e} |")
  lines.append("after K steps, worst tensor: ||ssljax - official|| over "
               "||official - initial|| (how far the step moved it):")
  for part in ("student", "teacher"):
    ours, ref = (result["after_K_steps"][part],
                 result["rounding_after_K_steps"][part])
    lines.append(f"  {part}: {ours['worst_over_update']:.1e} ({ours['tensor']}"
                 f"; largest |difference| {ours['largest_abs_difference']:.1e})"
                 f"; rounding reference {ref['worst_over_update']:.1e} "
                 f"({ref['tensor']}; {ref['largest_abs_difference']:.1e})")
  lines.append(f"  center (largest difference over largest value): "
               f"{result['after_K_steps']['center']:.1e}; rounding reference "
               f"{result['rounding_after_K_steps']['center']:.1e}")
  return "\n".join(lines)


COMPARE = {"dino": compare_dino}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog="benchmarks/step_parity.py",
      description="ssljax's whole train step against the authors' code.")
  parser.add_argument("--method", required=True, choices=sorted(COMPARE))
  parser.add_argument("--peer", required=True,
                      help="path of the official checkout")
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--local", type=int, default=0,
                      help="local crops (DINO)")
  parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                      help="change an option on ssljax's side only (e.g. "
                           "optim.clip_mode=global): what that difference "
                           "does to the comparison")
  parser.add_argument("--float64", action="store_true",
                      help="both sides in float64 (parameters, views, "
                           "computation): differences of the step's maths "
                           "show above float64 rounding")
  parser.add_argument("--out", default="runs/step_parity")
  args = parser.parse_args(argv)
  if args.steps % STEPS_PER_EPOCH or args.steps < STEPS_PER_EPOCH:
    parser.error(f"--steps must be a multiple of {STEPS_PER_EPOCH}")
  if not os.path.isdir(args.peer):
    parser.error(f"--peer {args.peer!r} is not a folder")
  print(f"peer {args.peer} @ {_commit(args.peer)}")
  result = COMPARE[args.method](args)
  os.makedirs(args.out, exist_ok=True)
  tag = "".join(f"_{a.split('=')[0].split('.')[-1]}-{a.split('=')[1]}"
                for a in args.set or ())
  path = os.path.join(args.out, f"step_parity_{args.method}"
                      f"{'_local' if args.local else ''}"
                      f"{'_float64' if args.float64 else ''}{tag}.json")
  with open(path, "w") as f:
    json.dump(result, f, indent=1)
  print(report(result))
  print(f"wrote {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
