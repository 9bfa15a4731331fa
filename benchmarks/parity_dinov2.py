"""DINOv2's whole step against facebookresearch/dinov2's ``SSLMetaArch``
(Oquab et al. 2023, arXiv 2304.07193), for ``benchmarks/step_parity.py
--method dinov2``: a small ViT (patch 7, width 48, 2 blocks, 3 heads) and a
shared DINO/iBOT head (hidden 64, bottleneck 32, 128 prototypes) on 28 x 28
Fashion-MNIST images, batch 16, from ``configs/dinov2.py``'s options
(centring, KoLeo 0.1, iBOT masks of 0.1-0.5 on half the global crops,
per-module clipping at 3.0, the last layer frozen for the first epoch by a
zero learning rate, weight decay 0.04 -> 0.4 on a cosine, teacher momentum
0.992 -> 1), an epoch being 5 steps.

1. ssljax's side: `ssljax.train.train_step` from its initial state, fed the
   views of each step; the masks of each step are drawn again outside it
   with the step's key (checked against the step's count of masked
   patches) and handed to the official side in its collate's form
   (``collated_masks``, ``mask_indices_list``, ``masks_weight``,
   ``n_masked_patches``, ``upperbound``).
2. The authors' side, from the same weights (every leaf converted) and the
   same views and masks: ``SSLMetaArch.forward_backward`` and
   ``update_teacher`` themselves, with their ``DinoVisionTransformer``,
   ``DINOHead``, ``DINOLoss``, ``iBOTPatchLoss``, ``KoLeoLoss`` and
   ``get_params_groups_with_decay`` (the config's layer-wise decay and
   patch-embedding multiplier); the
   loop body of ``train.py``'s ``do_train`` written out: its
   ``apply_optim_scheduler``, ``clip_grad_norm_`` on each student module,
   ``torch.optim.AdamW`` and the teacher update, given ssljax's learning
   rate, weight decay, momentum and teacher temperature at each step as
   its schedules (the last-layer learning rate 0 for the first epoch).
   Replaced, for one CPU process: FSDP (``dinov2.fsdp``: the teacher
   update reads each module's parameters, resharding and the streams'
   synchronisation do nothing),
   xFormers (its block-diagonal ``fmha`` mask concatenates and splits the
   head's inputs, and a list of crops goes through each block one crop at
   a time, as the block-diagonal attention does), ``Tensor.cuda`` (returns
   the tensor), and ``build_model_from_cfg`` (the small ViT here: no
   LayerScale, stochastic depth or registers, ``interpolate_offset`` 0.1,
   no antialiasing: the official defaults).
3. The same official run on one thread: the rounding reference.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import time
import types

import numpy as np

from parity_common import (BATCH, STEPS_PER_EPOCH, commit, drift, override,
                           ssljax_setup)
from parity_ijepa import mask_key


def dinov2_config(num_local: int):
  """configs/dinov2.py with a ViT small enough for a CPU."""
  from configs import dinov2  # pylint: disable=import-outside-toplevel
  c = dinov2.get_config()
  c.model.encoder_kwargs.update(dict(patch_size=7, hidden_dim=48, depth=2,
                                     num_heads=3))
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
  c.optim.warmup_epochs = 1.0
  c.optim.freeze_last_layer_epochs = 1.0
  c.teacher.momentum = 0.992
  c.evals = {}
  return c


def ssljax_dinov2(config, steps: int, seed: int = 0, float64: bool = False):
  """(initial params and state, views and masks per step, losses,
  schedules, final params and state) of ssljax's train_step."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from ssljax import optimizers  # pylint: disable=import-outside-toplevel
  from ssljax.methods import masks as ssl_masks  # pylint: disable=import-outside-toplevel
  run = ssljax_setup(config, steps, seed=seed, float64=float64,
                     image_shape=(28, 28, 1))
  state, step, make_views = run.state, run.step, run.make_views
  grid = (28 // config.model.encoder_kwargs.patch_size) ** 2
  mask_kwargs = dict(ratio_min_max=tuple(config.masks.mask_ratio_min_max),
                     sample_probability=config.masks.mask_sample_probability)
  views, masks, losses, momenta, temps, parts = [], [], [], [], [], []
  for k in range(steps):
    batch = {"images": run.images[k * BATCH:(k + 1) * BATCH]}
    v = make_views(batch, jax.random.fold_in(jax.random.key(seed + 1), k))
    v = tuple(np.asarray(x, run.dtype) for x in v)  # global, then local
    m = np.asarray(ssl_masks.dinov2_masks(mask_key(seed, k), 2 * BATCH,
                                          grid, **mask_kwargs))
    views.append(v)
    masks.append(m)
    state, metrics = step(state, {"ready_views": v})
    if int(metrics["masked_patches"]) != int(m.sum()):
      raise RuntimeError("the masks drawn again are not the step's "
                         "(train_step's loss key changed?)")
    losses.append(float(metrics["loss"]))
    momenta.append(float(metrics["teacher_momentum"]))
    temps.append(float(metrics["teacher_temperature"]))
    parts.append({name: float(metrics[name]) for name in
                  ("dino_global", "dino_local", "koleo", "ibot")})
  wd = optimizers.cosine_schedule(config.optim.weight_decay,
                                  config.optim.final_weight_decay,
                                  optimizers.schedule_steps(config.optim,
                                                            steps))
  count = lambda k: jnp.asarray(k, jnp.int32)
  frozen = int(round(config.optim.freeze_last_layer_epochs
                     * STEPS_PER_EPOCH))
  lr = [float(run.lr_fn(count(k))) for k in range(steps)]
  schedules = {"lr": lr, "wd": [float(wd(count(k))) for k in range(steps)],
               "momentum": momenta, "teacher_temperature": temps,
               "last_layer_lr": [0.0 if k < frozen else lr[k]
                                 for k in range(steps)]}
  final = jax.device_get((state.params, state.method_state))
  return run.initial, views, masks, losses, parts, schedules, final


def _head_tensors(head: dict) -> dict:
  """ssljax's DINOHead params -> the official DINOHead's state_dict (its
  weight-normalised last layer with a trainable g)."""
  out, i = {}, 0
  while f"Dense_{i}" in head:
    out[f"mlp.{2 * i}.weight"] = np.asarray(head[f"Dense_{i}"]["kernel"]).T
    out[f"mlp.{2 * i}.bias"] = np.asarray(head[f"Dense_{i}"]["bias"])
    i += 1
  v = np.asarray(head["last_layer_v"]).T  # (out_dim, bottleneck)
  out["last_layer.weight_v"] = v
  out["last_layer.weight_g"] = np.asarray(head["last_layer_g"]).reshape(-1, 1)
  return out


def _torch_state(config, params: dict) -> dict:
  """ssljax's student (or teacher) params -> {module: state_dict} of the
  official student (backbone, dino_head)."""
  from ssljax import export  # pylint: disable=import-outside-toplevel
  from ssljax.methods import networks  # pylint: disable=import-outside-toplevel
  encoder = networks.encoder_of(config)
  backbone, _ = export.torch_tensors(encoder, {"params": params["encoder"]},
                                     image_size=28, channels=1)
  backbone = dict(backbone)
  backbone["mask_token"] = np.asarray(
      params["encoder"]["mask_token"]).reshape(1, -1)
  return {"backbone": backbone,
          "dino_head": _head_tensors(params["projector"])}


def _import_official(peer: str):
  """The official ``ssl_meta_arch`` module and ``vision_transformer``,
  with the one-process stand-ins of the module docstring."""
  import torch  # pylint: disable=import-outside-toplevel
  os.environ["XFORMERS_DISABLED"] = "1"
  sys.path.insert(0, peer)

  class BlockDiagonalMask:  # xformers.ops.fmha's, for (1, n_i, D) inputs
    def __init__(self, sizes):
      self.sizes = sizes

    @classmethod
    def from_tensor_list(cls, tensors):
      return cls([t.shape[1] for t in tensors]), torch.cat(tensors, dim=1)

    def split(self, x):
      return list(torch.split(x, self.sizes, dim=1))

  xformers = types.ModuleType("xformers")
  ops = types.ModuleType("xformers.ops")
  ops.fmha = types.SimpleNamespace(BlockDiagonalMask=BlockDiagonalMask)
  xformers.ops = ops
  sys.modules.setdefault("xformers", xformers)
  sys.modules.setdefault("xformers.ops", ops)
  fsdp = types.ModuleType("dinov2.fsdp")
  fsdp.get_fsdp_modules = lambda m: [types.SimpleNamespace(
      params=list(m.parameters()))]
  fsdp.reshard_fsdp_model = lambda m: None
  fsdp.get_fsdp_wrapper = None
  fsdp.ShardedGradScaler = None
  sys.modules["dinov2.fsdp"] = fsdp
  train_pkg = types.ModuleType("dinov2.train")  # not its train.py
  train_pkg.__path__ = [os.path.join(peer, "dinov2", "train")]
  sys.modules["dinov2.train"] = train_pkg
  spec = importlib.util.spec_from_file_location(
      "dinov2.train.ssl_meta_arch",
      os.path.join(peer, "dinov2", "train", "ssl_meta_arch.py"))
  arch = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = arch
  spec.loader.exec_module(arch)
  from dinov2.layers import block  # pylint: disable=import-outside-toplevel,import-error
  from dinov2.models import vision_transformer as vits  # pylint: disable=import-outside-toplevel,import-error
  plain = block.Block.forward

  def forward(self, x_or_x_list):  # one crop size at a time
    if isinstance(x_or_x_list, list):
      return [plain(self, x) for x in x_or_x_list]
    return plain(self, x_or_x_list)

  block.NestedTensorBlock.forward = forward
  torch.Tensor.cuda = lambda self, *a, **k: self
  return arch, vits


def _official_cfg(peer: str, config):
  from omegaconf import OmegaConf  # pylint: disable=import-outside-toplevel
  cfg = OmegaConf.load(os.path.join(peer, "dinov2", "configs",
                                    "ssl_default_config.yaml"))
  head, loss = config.model.dino_head, config.loss
  cfg.compute_precision.grad_scaler = False
  cfg.student.pretrained_weights = ""
  cfg.dino.update(dict(head_n_prototypes=head.out_dim,
                       head_bottleneck_dim=head.bottleneck_dim,
                       head_hidden_dim=head.hidden_dim,
                       head_nlayers=head.num_layers,
                       loss_weight=loss.dino_weight,
                       koleo_loss_weight=loss.koleo_weight))
  cfg.ibot.update(dict(loss_weight=loss.ibot_weight, separate_head=False,
                       mask_ratio_min_max=list(
                           config.masks.mask_ratio_min_max),
                       mask_sample_probability=(
                           config.masks.mask_sample_probability)))
  cfg.crops.local_crops_number = config.views.num_local
  cfg.train.centering = loss.centering
  cfg.optim.layerwise_decay = config.optim.get("layerwise_decay", 1.0)
  cfg.optim.patch_embed_lr_mult = config.optim.get("patch_embed_lr_mult",
                                                   1.0)
  return cfg


def official_dinov2(peer: str, config, initial, views, masks, schedules,
                    threads: int | None, float64: bool = False):
  """The official step, step after step, from ssljax's initial weights on
  the same views, masks and schedules; (losses per step, loss parts per
  step, student {name: array}, teacher {name: array})."""
  import torch  # pylint: disable=import-outside-toplevel
  if threads:
    torch.set_num_threads(threads)
  arch, vits = _import_official(peer)
  kw = config.model.encoder_kwargs

  def backbone():
    return vits.DinoVisionTransformer(
        img_size=28, patch_size=kw.patch_size, in_chans=1,
        embed_dim=kw.hidden_dim, depth=kw.depth, num_heads=kw.num_heads,
        mlp_ratio=4, init_values=None, ffn_layer="mlp", block_chunks=0,
        num_register_tokens=0, interpolate_antialias=False,
        interpolate_offset=0.1,
        block_fn=functools.partial(vits.Block,
                                   attn_class=vits.MemEffAttention))

  arch.build_model_from_cfg = lambda cfg: (backbone(), backbone(),
                                           kw.hidden_dim)
  loss = config.loss
  if (loss.dino_weight, loss.ibot_weight) != (1.0, 1.0):
    raise ValueError("the comparison reads the loss from the official "
                     "loss_dict, which it can only do at weights 1")
  model = arch.SSLMetaArch(_official_cfg(peer, config))
  model.need_to_synchronize_fsdp_streams = False  # FSDP's CUDA streams
  if float64:
    model.double()
  params, state = initial
  for net, tree in ((model.student, params),
                    (model.teacher, state["teacher"]["params"])):
    for name, tensors in _torch_state(config, tree).items():
      net[name].load_state_dict({k: torch.from_numpy(np.array(v)) for k, v
                                 in tensors.items()}, strict=True)
  for p in model.teacher.parameters():
    p.requires_grad = False
  model.train()
  optimizer = torch.optim.AdamW(model.get_params_groups(),
                                betas=(0.9, 0.999))
  losses, parts = [], []
  dtype = torch.float64 if float64 else torch.float32
  nchw = lambda a: torch.from_numpy(np.ascontiguousarray(
      np.concatenate(a).transpose(0, 3, 1, 2))).to(dtype)
  g = config.views.num_global
  for k, (v, m) in enumerate(zip(views, masks)):
    collated = torch.from_numpy(m)
    index = collated.flatten().nonzero().flatten()
    local = (nchw(v[g:]) if len(v) > g else
             torch.zeros((0, 1, config.views.local_size,
                          config.views.local_size), dtype=dtype))
    images = {
        "collated_global_crops": nchw(v[:g]),
        "collated_local_crops": local,
        "collated_masks": collated,
        "mask_indices_list": index,
        "n_masked_patches": torch.tensor([index.shape[0]]),
        "upperbound": int(collated.numel()),
        "masks_weight": (1 / collated.sum(-1).to(dtype).clamp(min=1.0)
                         ).unsqueeze(-1).expand_as(collated)[collated]}
    # train.py's do_train, one iteration.
    for group in optimizer.param_groups:  # apply_optim_scheduler
      group["weight_decay"] = schedules["wd"][k] * group["wd_multiplier"]
      group["lr"] = (schedules["last_layer_lr"][k] if group["is_last_layer"]
                     else schedules["lr"][k]) * group["lr_multiplier"]
    optimizer.zero_grad(set_to_none=True)
    loss_dict = model.forward_backward(
        images, teacher_temp=schedules["teacher_temperature"][k])
    for module in model.student.values():
      torch.nn.utils.clip_grad_norm_(module.parameters(),
                                     config.optim.clip_grad_norm)
    optimizer.step()
    model.update_teacher(schedules["momentum"][k])
    # loss_accumulator, from what forward_backward reports (weights 1:
    # it stores KoLeo and iBOT halved, "to display the same losses").
    total = (float(loss_dict.get("dino_local_crops_loss", 0.0))
             + float(loss_dict["dino_global_crops_loss"])
             + 2 * float(loss_dict["koleo_loss"])
             + 2 * float(loss_dict["ibot_loss"]))
    losses.append(total)
    parts.append({name: float(x) for name, x in loss_dict.items()})
  to_np = lambda net: {f"{m}.{k}": t.detach().numpy().copy()
                       for m in net for k, t in net[m].state_dict().items()}
  return losses, parts, to_np(model.student), to_np(model.teacher)


def compare(args):
  from ssljax import __version__  # pylint: disable=import-outside-toplevel
  config = dinov2_config(args.local)
  official_config = dinov2_config(args.local)
  override(config, args.set)
  if args.float64:
    import jax  # pylint: disable=import-outside-toplevel
    jax.config.update("jax_enable_x64", True)
    config.model.dtype = "float64"
  started = time.time()
  initial, views, masks, ours, our_parts, schedules, final = ssljax_dinov2(
      config, args.steps, float64=args.float64)
  theirs, their_parts, student, teacher = official_dinov2(
      args.peer, official_config, initial, views, masks, schedules,
      threads=None, float64=args.float64)
  ref, _, ref_student, ref_teacher = official_dinov2(
      args.peer, official_config, initial, views, masks, schedules,
      threads=1, float64=args.float64)
  params, state = final
  flat = lambda tree: {f"{m}.{k}": v for m, t in
                       _torch_state(official_config, tree).items()
                       for k, v in t.items()}
  start_student = flat(initial[0])
  start_teacher = flat(initial[1]["teacher"]["params"])
  rows = [{"step": k, "ssljax": ours[k], "official": theirs[k],
           "official_1_thread": ref[k],
           "relative": abs(ours[k] - theirs[k]) / abs(theirs[k]),
           "rounding": abs(ref[k] - theirs[k]) / abs(theirs[k])}
          for k in range(args.steps)]
  keys = sorted(student)
  return {
      "method": "dinov2", "peer": args.peer, "peer_commit": commit(args.peer),
      "ssljax": __version__, "steps": args.steps,
      "local_crops": args.local, "ssljax_overrides": args.set or [],
      "float64": args.float64, "losses": rows,
      "loss_parts": {"ssljax": our_parts, "official": their_parts},
      "after_K_steps": {
          "student": drift(flat(params), student, start_student, keys),
          "teacher": drift(flat(state["teacher"]["params"]), teacher,
                           start_teacher, keys)},
      "rounding_after_K_steps": {
          "student": drift(ref_student, student, start_student, keys),
          "teacher": drift(ref_teacher, teacher, start_teacher, keys)},
      "wall_s": time.time() - started}
