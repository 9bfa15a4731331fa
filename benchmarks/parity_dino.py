"""DINO's whole step against facebookresearch/dino's ``train_one_epoch``
(Caron et al. 2021, arXiv 2104.14294), for ``benchmarks/step_parity.py
--method dino``: a small ViT (patch 7, width 48, 2 blocks, 3 heads) and
DINO head (hidden 64, bottleneck 32, 128 prototypes) on 28 x 28
Fashion-MNIST images, batch 16, from ``configs/dino.py``'s options."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time

import numpy as np

from parity_common import (BATCH, STEPS_PER_EPOCH, commit, drift, override,
                           ssljax_setup, worst)
import parity_predictor as pp


def dino_config(num_local: int, encoder: str = "vit"):
  """configs/dino.py with a ViT small enough for a CPU, or (``encoder``
  "cnn") with the config's own CNN (the main job's, channels
  16-32-64-512)."""
  from configs import dino  # pylint: disable=import-outside-toplevel
  c = dino.get_config()
  if encoder == "vit":
    c.model.encoder = "vit_tiny16"
    c.model.encoder_kwargs = dict(patch_size=7, hidden_dim=48, depth=2,
                                  num_heads=3, pos_interpolation="dino")
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
  from ssljax import optimizers  # pylint: disable=import-outside-toplevel
  run = ssljax_setup(config, steps, seed=seed, float64=float64,
                     image_shape=(28, 28, 1))
  lr_fn, state = (run.lr_fn, run.state)
  initial, dtype, step, make_views = (run.initial, run.dtype, run.step,
                                      run.make_views)
  images = run.images
  total = steps
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


def _is_cnn(config) -> bool:
  return config.model.encoder == "cnn"


def _torch_state(config, params: dict, stats: dict | None = None) -> dict:
  """ssljax's student (or teacher) params (and, for the CNN, BatchNorm
  statistics) -> MultiCropWrapper's state_dict."""
  from ssljax import export  # pylint: disable=import-outside-toplevel
  from ssljax.methods import networks  # pylint: disable=import-outside-toplevel
  if _is_cnn(config):
    leaves = pp.Leaves(params, stats)
    state = pp.cnn_tensors(leaves, "backbone.features",
                           len(config.model.encoder_kwargs.channels))
  else:
    encoder = networks.encoder_of(config)
    backbone, _ = export.torch_tensors(encoder,
                                       {"params": params["encoder"]},
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
    if _is_cnn(config):
      width = kw.channels[-1]
      return utils.MultiCropWrapper(
          pp.torch_cnn_class()(tuple(kw.channels), 1, 1), vits.DINOHead(
              width, head.out_dim, use_bn=head.use_bn,
              norm_last_layer=head.norm_last_layer, nlayers=head.num_layers,
              hidden_dim=head.hidden_dim,
              bottleneck_dim=head.bottleneck_dim))
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
  load = lambda net, tree, stats: net.load_state_dict(
      {k: torch.from_numpy(np.array(v)) for k, v in
       _torch_state(config, tree, stats).items()}, strict=True)
  if float64:
    student.double()
    teacher.double()
  load(student, params, state["batch_stats"])
  load(teacher, state["teacher"]["params"], state["teacher"]["batch_stats"])
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


def compare(args):
  from ssljax import __version__  # pylint: disable=import-outside-toplevel
  encoder = getattr(args, "encoder", None) or "vit"
  config = dino_config(args.local, encoder)
  official_config = dino_config(args.local, encoder)
  override(config, args.set)
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
  our_student = _torch_state(config, params, state["batch_stats"])
  our_teacher = _torch_state(config, state["teacher"]["params"],
                             state["teacher"]["batch_stats"])
  rows = []
  for k in range(args.steps):
    rows.append({"step": k, "ssljax": ours[k], "official": theirs[k],
                 "official_1_thread": ref_losses[k],
                 "relative": abs(ours[k] - theirs[k]) / abs(theirs[k]),
                 "rounding": abs(ref_losses[k] - theirs[k]) / abs(theirs[k])})
  start = _torch_state(config, initial[0], initial[1]["batch_stats"])
  start_teacher = _torch_state(config, initial[1]["teacher"]["params"],
                               initial[1]["teacher"]["batch_stats"])
  groups = pp.split(student, [k for k in student
                              if not k.endswith("weight_g")])
  tensors, rounding = {}, {}
  for net, ours_net, theirs, ref, begin in (
      ("student", our_student, student, ref_student, start),
      ("teacher", our_teacher, teacher, ref_teacher, start_teacher)):
    for group, keys in groups.items():
      if not keys:
        continue
      # The ViT rows keep their old names: all of a network's tensors.
      name = net if group == "parameters" else f"{net} {group}"
      tensors[name] = drift(ours_net, theirs, begin, keys)
      rounding[name] = drift(ref, theirs, begin, keys)
    if groups["bn_vars"] and not args.local:
      # One BatchNorm update a step, of 2 global crops: ssljax's running
      # variances made unbiased, as PyTorch keeps them.
      counts = pp.cnn_counts("backbone.features",
                             config.model.encoder_kwargs.channels, 28,
                             config.views.num_global * BATCH)
      unbiased = pp.unbiased_running_vars(ours_net, begin, counts,
                                          args.steps)
      name = f"{net} bn_vars, ssljax's made unbiased"
      tensors[name] = drift(unbiased, theirs, begin, groups["bn_vars"])
      rounding[name] = rounding[f"{net} bn_vars"]
  tensors["center"] = worst(np.asarray(state["center"]).reshape(-1), center)
  rounding["center"] = worst(ref_center, center)
  result = {"method": "dino", "peer": os.path.abspath(args.peer),
            "peer_commit": commit(args.peer), "ssljax": __version__,
            "steps": args.steps, "local_crops": args.local,
            "encoder": encoder,
            "ssljax_overrides": list(args.set or ()),
            "float64": args.float64,
            "losses": rows, "after_K_steps": tensors,
            "rounding_after_K_steps": rounding,
            "wall_s": round(time.time() - started, 1)}
  return result
