"""The I-JEPA and MAE parts of the ViT recipes (configs/imagenette_vit_small.py,
configs/imagenet_vit.py): heads, masks, views and optimiser of each method,
from the papers and their official code.

Sources: I-JEPA (Assran et al. 2023, arXiv 2301.08243, §4 and App. A;
facebookresearch/ijepa configs/in1k_vith14_ep300.yaml and src/masks/
multiblock.py); MAE (He et al. 2022, arXiv 2111.06377, App. A.1 Table 8;
facebookresearch/mae PRETRAIN.md, models_mae.py).
I-JEPA as the official code: the target-encoder momentum on a line from
0.996 to 1, the weight decay 0.04 -> 0.4 on a cosine (ipe_scale 1.0, as
in every official config), the warm-up from start_lr = 0.2 x lr, and both
schedules read one step ahead (its schedulers step before the update). MAE
as the official code: AdamW's β2 0.95.
"""

from ml_collections import config_dict

METHODS = ("ijepa", "mae")


def vit_kwargs(method: str, *, patch_size: int, **size) -> config_dict.ConfigDict:
  """encoder_kwargs of a ViT for ``method``: I-JEPA's encoder has no class
  token; both use fixed sine-cosine positions and are probed on
  average-pooled tokens (I-JEPA App. A; MAE App. A.1 reports pooling as good as
  its class token)."""
  kw = dict(patch_size=patch_size, representation="avg_tokens",
            pos_embedding="sincos", **size)
  if method == "ijepa":
    kw["class_token"] = False
  return config_dict.ConfigDict(kw)


def set_method(c: config_dict.ConfigDict, method: str, *,
               warmup_epochs: float) -> None:
  """Loss, heads, masks, views and AdamW of ``method`` on ``c`` (in place);
  the caller sets the encoder, batch and epochs."""
  c.method = method
  c.loss = config_dict.ConfigDict()
  v = c.views
  v.num_global, v.num_local = 1, 0
  for name in ("lidar", "theory"):  # need several views per image: one here
    if name in c.evals:
      del c.evals[name]
  v.jitter_prob = v.grayscale_prob = v.blur_prob = 0.0
  v.solarize_prob = v.erase_prob = 0.0
  if method == "ijepa":
    c.loss.form = "smooth_l1"
    # pred_depth 12, pred_emb_dim 384 (in1k_vith14_ep300.yaml); the
    # predictor's heads as the encoder's default (12).
    c.model.jepa_predictor = config_dict.ConfigDict(dict(
        width=384, depth=12, num_heads=12))
    # multiblock.py with the yaml's values: 4 targets of scale 0.15-0.2,
    # aspect 0.75-1.5; context 0.85-1.0; min_keep 10.
    c.masks = config_dict.ConfigDict(dict(
        num_targets=4, target_scale=(0.15, 0.2), target_aspect=(0.75, 1.5),
        context_scale=(0.85, 1.0), min_keep=10))
    c.teacher = config_dict.ConfigDict(dict(
        momentum=0.996, final_momentum=1.0, schedule="linear"))  # ema
    v.crop_scale = (0.3, 1.0)  # crop_scale [0.3, 1.0]
    v.flip_prob = 0.0  # use_horizontal_flip: false
    c.optim.learning_rate = 1e-3 * 256 / 2048  # lr 0.001 at batch 2048
    c.optim.weight_decay = 0.04  # weight_decay 0.04
    c.optim.weight_decay_schedule = "cosine"
    c.optim.final_weight_decay = 0.4  # final_weight_decay 0.4
    c.optim.schedule_scale = 1.0  # ipe_scale 1.0
    c.optim.end_lr_factor = 1e-6 / 1e-3  # final_lr 1e-6
    c.optim.warmup_start_factor = 2e-4 / 1e-3  # start_lr 0.0002
    c.optim.schedule_offset = 1  # the schedulers step before the update
    c.optim.adam_bias_correction = "accurate"  # torch.optim.AdamW's
  else:
    c.loss.form = "mse"
    c.loss.norm_pix_loss = True  # --norm_pix_loss (PRETRAIN.md)
    # mae_vit_*_dec512d8b: decoder 512 wide, 8 blocks, 16 heads.
    c.model.mae_decoder = config_dict.ConfigDict(dict(
        width=512, depth=8, num_heads=16))
    c.masks = config_dict.ConfigDict(dict(mask_ratio=0.75))  # --mask_ratio
    v.crop_scale = (0.2, 1.0)  # RandomResizedCrop(scale=(0.2, 1.0))
    v.flip_prob = 0.5  # RandomHorizontalFlip
    c.optim.learning_rate = 1.5e-4  # --blr 1.5e-4 per 256
    c.optim.weight_decay = 0.05  # --weight_decay 0.05
    c.optim.end_lr_factor = 0.0  # min_lr 0
    c.optim.b2 = 0.95  # AdamW(betas=(0.9, 0.95))
  c.optim.name = "adamw"
  c.optim.warmup_epochs = warmup_epochs


def set_smoke(c: config_dict.ConfigDict, method: str) -> None:
  """Tiny heads and an 8x8 patch grid (patch 8 on 64 px views) for the smoke
  variants; I-JEPA's min_keep 4 (10 would reject every target block of an
  8x8 grid, `ssljax.methods.masks.multiblock_problems`)."""
  c.model.encoder_kwargs = vit_kwargs(method, patch_size=8, hidden_dim=32,
                                      depth=2, num_heads=2)
  head = config_dict.ConfigDict(dict(width=16, depth=1, num_heads=2))
  if method == "ijepa":
    c.model.jepa_predictor = head
    c.masks.min_keep = 4
  else:
    c.model.mae_decoder = head


def set_lejepa(c: config_dict.ConfigDict, *, patch_size: int,
               local_size: int) -> None:
  """LeJEPA (Balestriero & LeCun 2025, arXiv 2511.08544) on a ViT, in place:
  the official README's "GOTO" settings (2 global crops of scale 0.3-1 and
  6 local of 0.05-0.3, AdamW lr 5e-4 per 256, weight decay 5e-2, cosine to
  lr/1000), lambda 0.05 and 1024 slices (the official library's defaults),
  MINIMAL.md's 3-layer BatchNorm MLP projector (2048-2048-16 there; the
  fields as configs/lejepa.py), probed on the last two blocks' class
  tokens (the paper's linear probe). ``local_size`` must be a multiple of
  ``patch_size`` (the official 98 px local crops for patch 14)."""
  c.method = "lejepa"
  c.loss = config_dict.ConfigDict(dict(form="multi_view"))
  c.lejepa = config_dict.ConfigDict(dict(lam=0.05, num_slices=1024))
  c.model.projector = (2048, 2048, 16)
  c.model.encoder_kwargs.update(dict(patch_size=patch_size,
                                     representation="cls_last2"))
  v = c.views
  v.num_global, v.num_local, v.local_size = 2, 6, local_size
  v.crop_scale, v.local_crop_scale = (0.3, 1.0), (0.05, 0.3)
  v.flip_prob, v.jitter_prob = 0.5, 0.8
  v.brightness, v.contrast, v.saturation, v.hue = 0.4, 0.4, 0.2, 0.1
  v.grayscale_prob = 0.2
  v.erase_prob = 0.0
  c.optim.name = "adamw"
  c.optim.learning_rate = 5e-4
  c.optim.weight_decay = 5e-2
  c.optim.end_lr_factor = 1e-3


def set_lejepa_smoke(c: config_dict.ConfigDict) -> None:
  """A 2-block, 32-wide ViT with 8-px patches, a 16-wide projector, 16
  slices, 2 local crops of 32 px."""
  c.model.encoder_kwargs = config_dict.ConfigDict(dict(
      patch_size=8, hidden_dim=32, depth=2, num_heads=2,
      representation="cls_last2"))
  c.model.projector = (16, 8)
  c.lejepa.num_slices = 16
  c.views.num_local, c.views.local_size = 2, 32
