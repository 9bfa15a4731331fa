"""ssljax's whole training step against the authors' own step.

    PY benchmarks/step_parity.py --method METHOD --peer PATH/TO/checkout \\
        [--steps 20] [--float64] [--optimizer adamw|lars] [--set KEY=VALUE] \\
        [--out runs/step_parity]

PY is an interpreter with torch and ssljax (``make setup-bench``; for
``byol``, ssljax and dm-haiku instead: the authors' BYOL is JAX). The
official checkout is given by path (the repository contains none of its
code); the command prints its commit.

For ``vicreg`` (Bardes, Ponce & LeCun 2022, arXiv 2105.04906;
facebookresearch/vicreg): main_vicreg.py's ``VICReg`` loss module,
``Projector``, ``adjust_learning_rate`` and ``LARS`` (or, ``--optimizer
adamw``, the main job's AdamW) on the main job's CNN with a 128-64
projector, batch 16, over ``--steps 60`` or more (the official warm-up
lasts 10 epochs; benchmarks/parity_vicreg.py).

For ``barlow_twins`` (Zbontar et al. 2021, arXiv 2103.03230;
facebookresearch/barlowtwins): main.py's ``BarlowTwins``,
``adjust_learning_rate`` and ``LARS`` over its two parameter groups on the
main job's CNN ending in 2,048 channels with a 128-64 projector, batch 16,
over ``--steps 60`` or more (benchmarks/parity_barlow_twins.py).

For ``simsiam`` (Chen & He 2021, arXiv 2011.10566;
facebookresearch/simsiam): main_simsiam.py's ``train`` and
``adjust_learning_rate`` with ``torch.optim.SGD`` and the builder's
``SimSiam`` on the main job's CNN, batch 16 (benchmarks/parity_simsiam.py).

For ``dinov2`` (Oquab et al. 2023, arXiv 2304.07193; facebookresearch/
dinov2): the official ``SSLMetaArch`` step on the same views and masks from
the same weights, ``configs/dinov2.py``'s options on a small ViT
(benchmarks/parity_dinov2.py says what is replaced for one CPU process).

For ``dino`` (Caron et al. 2021, arXiv 2104.14294; facebookresearch/dino):
a small ViT (patch 7, width 48, 2 blocks, 3 heads) and DINO head (hidden
64, bottleneck 32, 128 prototypes) on 28 x 28 Fashion-MNIST images, batch
16, from ``configs/dino.py``'s options (per-tensor clipping at 3.0, the
last layer frozen for its first epoch with its Adam count held, weight
decay 0.04 -> 0.4 on a cosine, teacher momentum 0.996 -> 1 on a cosine,
teacher temperature 0.04, centre momentum 0.9), an epoch being 5 steps so
that the freeze ends within the run. ``--encoder cnn`` takes the config's
own CNN instead (16-32-64-512 channels with BatchNorm, in PyTorch
`parity_predictor.torch_cnn_class`): the official ``MultiCropWrapper``
decides which rows each BatchNorm sees, and the student's and teacher's
running statistics are compared too (their variances made unbiased when
every BatchNorm moves once a step, without local crops).

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

For ``lejepa`` (Balestriero & LeCun 2025, arXiv 2511.08544;
rbalestr-lab/lejepa): the authors' minimal training step, the Python code
of the checkout's MINIMAL.md read from the file and executed (its SIGReg,
ViTEncoder, loss, online probe, AdamW groups and LinearLR/cosine schedule
verbatim), with its launch command's values (λ 0.02, 4 views, proj_dim
16, lr 2e-3), a small ViT (patch 7, width 48, 2 blocks, 3 heads) with its
512-wide head and its 2048-2048-16 BatchNorm projector, batch 16. Around
it: ``timm.create_model`` builds that ViT (stochastic depth 0), the dataset
and loader hand out ssljax's views and labels, ``torch.randn`` (SIGReg's
directions) returns the Gaussian matrix ssljax's step drew from its loss
key, ``wandb`` records the losses; the network starts from ssljax's
weights. ssljax's side is ``configs/lejepa.py`` with those values
(`parity_lejepa.lejepa_config`). It needs ``--steps`` >= 10 (MINIMAL.md's
cosine starts after one epoch) and no local crops; it compares the
network's tensors (but the three whose gradient is 0 but for rounding,
listed in the JSON) and the BatchNorm running statistics, and records
both sides' learning rates.

For ``ijepa`` (Assran et al. 2023, arXiv 2301.08243; facebookresearch/
ijepa): a small ViT (patch 4 on 28 x 28 Fashion-MNIST images, a 7 x 7
grid, width 48, 2 blocks, 4 heads) and predictor (width 32, 2 blocks),
batch 16, from ``configs/ijepa.py``'s options (4 target blocks of scale
0.15-0.2 and aspect 0.75-1.5, a context block of scale 0.85-1 minus them,
min_keep 4; AdamW at the official peak rate 1e-3, warm-up from 0.2 x it
for an epoch of 5 steps, cosine to 1e-3 x it; weight decay 0.04 -> 0.4 on
a cosine; target momentum 0.996 -> 1 on a line).

1. ssljax's side: `ssljax.train.train_step`, fed the views of each step
   (as for DINO); the masks of each step are drawn again outside it with
   the step's key (checked against the step's patch counts) and written in
   the official collator's form (``masks_enc``: one (B, K_enc) index
   array, ``masks_pred``: M (B, K_pred) ones).
2. The authors' side: their ``src.train.main`` itself, from the same
   weights (every leaf of encoder and predictor converted to the official
   names) on the same views and masks: its ``init_model`` (then loaded),
   ``init_opt`` (its AdamW, parameter groups and schedulers, unchanged),
   ``apply_masks``, ``repeat_interleave_batch``, ViT, predictor, loss and
   EMA with its own ``momentum_scheduler``; replaced are only
   ``init_distributed``, ``DistributedDataParallel`` and ``AllReduce`` (one
   process), the ImageNet loader (ours), ``set_start_method``, and the log
   folder (a temporary one). AMP is off.
3. The rounding reference: in float64 the official run on one thread, in
   float32 the official run in float64.

Besides the losses and tensors it prints ssljax's learning rate, weight
decay and momentum against the values the official schedulers gave, and
with ``--mask-batches N`` compares ssljax's mask sampler with the official
``MaskCollator`` over N batches (block sizes at the same uniform draw;
distributions of the patch counts, of each patch's chance to be a target
or context patch, and of context-target overlap, against the official
sampler's own sampling noise).

It prints, per step, both losses and their relative difference; after K
steps, the worst relative difference (largest difference over the largest
value) of every student and teacher tensor and of the centre, against the
rounding reference's. ``--local L`` adds L local crops of 14 px: their
position embeddings are resized from the 4 x 4 grid to 2 x 2 as DINO's
``interpolate_pos_encoding`` does (the ViT's ``pos_interpolation="dino"``).

For ``mae`` (He et al. 2022, arXiv 2111.06377; facebookresearch/mae): a
small ViT (patch 4, width 48, 2 blocks, 3 heads) and decoder (width 32, 1
block, 2 heads) on 28 x 28 Fashion-MNIST images repeated on 3 channels
(the official ``patchify`` reads 3), batch 16, from ``configs/mae.py``'s
options (75 % of the 49 patches removed, normalised-pixel targets, AdamW
with beta2 0.95 and weight decay 0.05, base lr 1.5e-4 per 256 warmed up
over the first epoch, then a half-cycle cosine to 0).

1. ssljax's side: `ssljax.train.train_step`, fed each step's view
   (``ready_views``).
2. The authors' side, from the same weights (encoder, decoder, mask token
   and both sine-cosine tables converted) and the same views: the official
   ``train_one_epoch`` of engine_pretrain.py with ``MaskedAutoencoderViT``
   (mae_vit_*'s LayerNorm eps 1e-6), ``adjust_learning_rate`` computing its
   own learning rate from main_pretrain.py's arguments (blr x batch / 256,
   min_lr 0), timm's weight-decay groups, ``AdamW(betas=(0.9, 0.95))`` and
   ``NativeScalerWithGradNormCount``. Its ``random_masking`` draws its
   noise from ``torch.rand``; the noise given instead sorts into ssljax's
   shuffle of that step, so both remove the same patches. The shims for
   timm 1.0 and for a CPU (a null autocast, a disabled GradScaler) are
   listed in benchmarks/parity_mae.py.
3. The rounding reference, as for DINO.

It prints the losses; after K steps, the drift of every trained tensor of
the encoder and of the decoder and the worst relative difference of the
learning rates of all steps, against the rounding reference's; and how far
ssljax's sine-cosine tables are from the ones the official model builds.

For ``mocov3`` (Chen, Xie & He 2021, arXiv 2104.02057;
facebookresearch/moco-v3): the main job's small CNN (16-32-64-512) with
the official ResNet recipe's heads (projector 128-64 ending in a
BatchNorm without scale and offset, predictor 128-64, no biases) on the
same images, batch 16, from ``configs/mocov3.py`` (τ = 0.2, momentum 0.99
-> 1 on a cosine, 1 epoch of warm-up then a half cosine to 0), with the
config's AdamW or, ``--optimizer lars``, the ResNet recipe's LARS (lr 0.6
per 256, weight decay 1e-6) on both sides. The authors' side is
main_moco.py's ``train`` itself with ``MoCo_ResNet`` (its base encoder the
CNN written in PyTorch), ``moco.optimizer.LARS`` or ``torch.optim.AdamW``
and its own ``adjust_learning_rate`` and ``adjust_moco_momentum``; on a CPU
``Tensor.cuda`` returns the tensor, ``concat_all_gather`` gathers one
process (``get_world_size`` 1, ``all_gather`` a copy, ``get_rank`` 0), AMP
is off (``torch.cuda.amp.autocast`` turns itself off without CUDA, the
``GradScaler`` is built disabled) and the loss of each step is read from
the summary writer it is handed. The rounding reference is that run on 1
thread. Compared after K steps: the online network (encoder, projector,
predictor) and the momentum encoder, their parameters and BatchNorm running
means and variances, and the schedules each side used.

For ``swav`` (Caron et al. 2020, arXiv 2006.09882; facebookresearch/swav):
the main job's small CNN with SwAV's head (projector 128-64 with
BatchNorm, L2 normalisation, 100 prototypes), batch 16, ``--local L``
local crops of 14 px, from ``configs/swav.py`` (the official multi-crop
BatchNorm, prototypes frozen for the first epoch of 5 steps, AdamW
decaying every parameter on both sides). The authors' side is
main_swav.py's ``train`` itself with src/resnet50.py's ``forward`` and
``forward_head`` around the CNN (benchmarks/parity_swav.py says what is
replaced for one CPU process). Compared after K steps: every parameter
and BatchNorm running statistic.

For ``byol`` (Grill et al. 2020, arXiv 2006.07733;
google-deepmind/deepmind-research's byol): the same CNN (in haiku) with
BYOL's heads (128-64) from ``configs/byol.py`` with the official
1000-epoch optimiser (LARS, lr 0.2 per 256, weight decay 1.5e-6, target
momentum 0.996 -> 1). The authors' side is ``ByolExperiment.update_pmap``
(their ``_update_fn`` under ``jax.pmap`` on one device), from its own
initial state with every network leaf replaced by ssljax's; their GPU
augmentations (``augmentations.postprocess``) and ImageNet normalisation
are the identity (the views are ssljax's), ``jax.tree_map`` is
``jax.tree.map`` and dm-acme is stubbed. Their BatchNorm keeps a
zero-debiased running average, ssljax's (flax's) one from (0, 1): ssljax's
is turned into theirs before comparing. The rounding reference is the
official run on each batch in reverse sample order (the same maths, other
summation orders), the official side being XLA too.

``--float64`` runs both sides in float64. ``--set key=value`` changes an
option on ssljax's side only, to measure what one difference does (e.g.
``optim.frozen_adam_count=advance``, optax's one Adam count, for DINO;
``optim.b2=0.999``, optax's default beta2, for MAE). Writes
``step_parity_<method>[...].json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from parity_common import STEPS_PER_EPOCH, commit  # pylint: disable=wrong-import-position


def report(result) -> str:
  """The comparison as text: the loss at every step, then each compared
  part after K steps (a tensor drift, or one relative difference)."""
  lines = [f"{result['method']}: ssljax {result['ssljax']} against "
           f"{result['peer']} @ {result['peer_commit']}, "
           f"{result['steps']} steps"
           + (f", {result['local_crops']} local crops"
              if result.get("local_crops") else "")
           + (f", {result['encoder']}" if result.get("encoder") else "")
           + (f", {result['optimizer']}" if result.get("optimizer") else "")
           + f", {'float64' if result['float64'] else 'float32'}"
           + (f", ssljax with {', '.join(result['ssljax_overrides'])}"
              if result["ssljax_overrides"] else ""),
           "| step | ssljax loss | official loss | relative | "
           + result.get("rounding_reference", "official 1 thread vs default")
           + " (rounding) |", "|---|---|---|---|---|"]
  for r in result["losses"]:
    lines.append(f"| {r['step']} | {r['ssljax']:.7f} | {r['official']:.7f} "
                 f"| {r['relative']:.1e} | {r['rounding']:.1e} |")
  lines.append("after K steps, worst tensor: ||ssljax - official|| over "
               "||official - initial|| (how far the step moved it):")
  for part, ours in result["after_K_steps"].items():
    ref = result["rounding_after_K_steps"][part]
    if isinstance(ours, dict):
      lines.append(
          f"  {part}: {ours['worst_over_update']:.1e} ({ours['tensor']}"
          f"; largest |difference| {ours['largest_abs_difference']:.1e})"
          f"; rounding reference {ref['worst_over_update']:.1e} "
          f"({ref['tensor']}; {ref['largest_abs_difference']:.1e})")
    else:
      lines.append(f"  {part} (largest difference over largest value): "
                   f"{ours:.1e}; rounding reference {ref:.1e}")
  for name, value in result.get("checks", {}).items():
    lines.append(f"  {name}: {value:.1e}")
  if "schedules" in result:
    lines.append("schedules, ssljax's values against the official "
                 "schedulers' own (worst relative difference): " + ", ".join(
                     f"{k} {v:.1e}" for k, v in
                     result["schedules"]["worst_relative_difference"].items()))
  if "mask_distribution" in result:
    d = result["mask_distribution"]
    lines.append(f"masks over {d['batches']} batches, ssljax's sampler "
                 "against the official collator (the official against "
                 "itself on other seeds):")
    lines.append(f"  block sizes (h, w) at the same u: "
                 f"{d['block_size_mismatches']} of {2 * d['batches']} differ")
    for key, value in d["ssljax_vs_official"].items():
      noise = d["official_vs_official"][key]
      lines.append(f"  {key}: {value:.3f} ({noise:.3f})")
    for key in ("mean_context", "mean_target"):
      lines.append(f"  {key}: ssljax {d[key]['ssljax']:.3f}, official "
                   f"{d[key]['official']:.3f} (z = {d[key]['z']:.2f})")
    lines.append(f"  overlap: ssljax {d['overlap']['ssljax']:.4f}, official "
                 f"{d['overlap']['official']:.4f}")
  return "\n".join(lines)


# method -> the module (in benchmarks/) whose ``compare(args)`` runs it.
METHODS = {"dino": "parity_dino", "dinov2": "parity_dinov2",
           "ijepa": "parity_ijepa",
           "lejepa": "parity_lejepa", "mae": "parity_mae",
           "mocov3": "parity_mocov3", "byol": "parity_byol",
           "swav": "parity_swav", "vicreg": "parity_vicreg",
           "barlow_twins": "parity_barlow_twins",
           "simsiam": "parity_simsiam"}


def compare(args) -> dict:
  """Runs ``args.method``'s comparison; the result dict written as JSON."""
  return importlib.import_module(METHODS[args.method]).compare(args)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog="benchmarks/step_parity.py",
      description="ssljax's whole train step against the authors' code.")
  parser.add_argument("--method", required=True, choices=sorted(METHODS))
  parser.add_argument("--peer", required=True,
                      help="path of the official checkout")
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--local", type=int, default=0,
                      help="local crops (DINO; LeJEPA's MINIMAL.md has "
                           "none)")
  parser.add_argument("--encoder", choices=("vit", "cnn"),
                      help="DINO: a small ViT (default) or configs/dino.py's"
                           " own CNN (BatchNorm in the multi-crop forward)")
  parser.add_argument("--optimizer", choices=("adamw", "lars", "larc",
                                              "sgd"),
                      help="MoCo v3, BYOL (adamw | lars), SwAV (adamw | "
                           "larc: the official SGD in apex's LARC, needs "
                           "--apex): the optimiser of both sides (default: "
                           "the method's config's)")
  parser.add_argument("--queue", action="store_true",
                      help="SwAV: a queue of 2 batches from the second "
                           "epoch on both sides")
  parser.add_argument("--apex", default=None,
                      help="SwAV with --optimizer larc: an NVIDIA/apex "
                           "checkout holding apex/parallel/LARC.py (removed"
                           " from apex in commit cb65b8e; take its parent)")
  parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                      help="change an option on ssljax's side only (e.g. "
                           "optim.clip_mode=global): what that difference "
                           "does to the comparison")
  parser.add_argument("--float64", action="store_true",
                      help="both sides in float64 (parameters, views, "
                           "computation): differences of the step's maths "
                           "show above float64 rounding")
  parser.add_argument("--mask-batches", type=int, default=0,
                      help="I-JEPA: also compare ssljax's mask sampler with "
                           "the official MaskCollator over this many "
                           "batches")
  parser.add_argument("--out", default="runs/step_parity")
  args = parser.parse_args(argv)
  if args.steps % STEPS_PER_EPOCH or args.steps < STEPS_PER_EPOCH:
    parser.error(f"--steps must be a multiple of {STEPS_PER_EPOCH}")
  if not os.path.isdir(args.peer):
    parser.error(f"--peer {args.peer!r} is not a folder")
  if args.optimizer == "larc" and (args.method != "swav" or not args.apex):
    parser.error("--optimizer larc is SwAV's and needs --apex PATH")
  print(f"peer {args.peer} @ {commit(args.peer)}")
  result = compare(args)
  os.makedirs(args.out, exist_ok=True)
  tag = "".join(f"_{a.split('=')[0].split('.')[-1]}-{a.split('=')[1]}"
                for a in args.set or ())
  path = os.path.join(args.out, f"step_parity_{args.method}"
                      f"{'_local' if args.local else ''}"
                      f"{'_' + args.encoder if args.encoder else ''}"
                      f"{'_' + args.optimizer if args.optimizer else ''}"
                      f"{'_queue' if getattr(args, 'queue', False) else ''}"
                      f"{'_float64' if args.float64 else ''}{tag}.json")
  with open(path, "w") as f:
    json.dump(result, f, indent=1)
  print(report(result))
  print(f"wrote {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
