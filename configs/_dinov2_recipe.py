"""DINOv2's recipe fields, shared by configs/imagenette_vit_small.py and
configs/imagenet_vit.py (not a config itself).

Every value is DINOv2's official ``dinov2/configs/ssl_default_config.yaml``
(the ``train/vitl16_short.yaml`` recipe changes only the per-GPU batch, 64,
and block chunking) unless its comment says otherwise (Oquab et al. 2023,
arXiv 2304.07193).
"""

import math

from ml_collections import config_dict

OFFICIAL_BASE_LR = 4e-3  # optim.base_lr, for a batch of 1024
OFFICIAL_BASE_BATCH = 1024  # optim.scaling_rule: sqrt_wrt_1024


def official_lr_per_256(batch_size: int) -> float:
  """ssljax's ``optim.learning_rate`` (per 256 samples, scaled linearly) that
  gives the official lr at ``batch_size``: base_lr · sqrt(batch/1024)."""
  lr = OFFICIAL_BASE_LR * math.sqrt(batch_size / OFFICIAL_BASE_BATCH)
  return lr * 256 / batch_size


def set_dinov2(c, *, batch_size: int, num_local: int = 8,
               local_size: int = 96):
  """Sets method, loss, heads, masks, teacher, optimiser and views of the
  DINOv2 recipe on ``c`` (a common config with its encoder set)."""
  c.method = "dinov2"
  c.loss = config_dict.ConfigDict(dict(
      form="dinov2", version="dinov2",
      centering="centering",  # train.centering
      student_temperature=0.1,  # DINOLoss / iBOTPatchLoss default
      teacher_temperature=0.07,  # teacher.teacher_temp
      warmup_teacher_temperature=0.04,  # teacher.warmup_teacher_temp
      teacher_temperature_warmup_epochs=30.0,  # warmup_teacher_temp_epochs
      center_momentum=0.9,  # DINOLoss / iBOTPatchLoss default
      dino_weight=1.0,  # dino.loss_weight
      ibot_weight=1.0,  # ibot.loss_weight
      koleo_weight=0.1,  # dino.koleo_loss_weight
      gram_weight=0.0))  # DINOv2 has no Gram anchoring
  # dino.head_{n_prototypes, bottleneck_dim, nlayers, hidden_dim}
  c.model.dino_head = config_dict.ConfigDict(dict(
      hidden_dim=2048, bottleneck_dim=256, out_dim=65536, num_layers=3,
      use_bn=False,
      # DINOHead: weight_norm(Linear) with weight_g filled with 1 and
      # trainable (DINOv2 has no norm_last_layer option)
      norm_last_layer=False))
  c.model.ibot_separate_head = False  # ibot.separate_head
  c.masks = config_dict.ConfigDict(dict(
      mask_ratio_min_max=(0.1, 0.5),  # ibot.mask_ratio_min_max
      mask_sample_probability=0.5))  # ibot.mask_sample_probability
  c.teacher = config_dict.ConfigDict(dict(
      momentum=0.992,  # teacher.momentum_teacher
      final_momentum=1.0,  # teacher.final_momentum_teacher
      schedule="cosine"))
  c.optim.name = "adamw"  # adamw_beta1 0.9, adamw_beta2 0.999
  c.optim.learning_rate = official_lr_per_256(batch_size)
  c.optim.weight_decay = 0.04  # optim.weight_decay
  c.optim.weight_decay_schedule = "cosine"
  c.optim.final_weight_decay = 0.4  # optim.weight_decay_end
  c.optim.warmup_epochs = 10.0  # optim.warmup_epochs
  c.optim.end_lr_factor = 1e-6 / (
      OFFICIAL_BASE_LR * math.sqrt(batch_size / OFFICIAL_BASE_BATCH))
  c.optim.clip_grad_norm = 3.0  # optim.clip_grad
  # train.py: v.clip_grad_norm_(clip_grad) for v in model.student.values():
  # the backbone's and each head's gradient clipped on its own
  c.optim.clip_mode = "per_module"
  c.optim.freeze_last_layer_epochs = 1.0  # optim.freeze_last_layer_epochs
  # by a zero last_layer_lr_schedule: AdamW still sees the gradient
  c.optim.freeze_last_layer_by = "learning_rate"
  c.optim.frozen_adam_count = "advance"
  # get_params_groups_with_decay: wd_multiplier 0 for ".bias" and "norm"
  c.optim.weight_decay_mask = "no_bias_norm"
  # get_params_groups_with_decay: block i of L learns at 0.9^(L - i) of the
  # rate, the embeddings at 0.9^(L + 1), the patch embedding 0.2 x that
  # (optim.layerwise_decay 0.9, optim.patch_embed_lr_mult 0.2)
  c.optim.layerwise_decay = 0.9
  c.optim.patch_embed_lr_mult = 0.2
  c.batch_size = batch_size
  c.epochs = 100  # optim.epochs (of OFFICIAL_EPOCH_LENGTH 1250 iterations
  # there; data passes here)
  v = c.views
  v.num_global, v.num_local = 2, num_local  # crops.local_crops_number 8
  v.local_size = local_size  # crops.local_crops_size 96
  v.crop_scale = (0.32, 1.0)  # crops.global_crops_scale
  v.local_crop_scale = (0.05, 0.32)  # crops.local_crops_scale
  # DataAugmentationDINO (as DINO): flip, colour jitter 0.8 (0.4, 0.4, 0.2,
  # 0.1), grey 0.2, blur 1.0 / 0.1 / 0.5, solarisation 0.2 on crop 2.
  v.flip_prob, v.jitter_prob = 0.5, 0.8
  v.brightness, v.contrast, v.saturation, v.hue = 0.4, 0.4, 0.2, 0.1
  v.grayscale_prob = 0.2
  with v.ignore_type():  # per view: global 1.0 / 0.1, locals 0.5
    v.blur_prob = (1.0, 0.1) + (0.5,) * num_local
    v.solarize_prob = (0.0, 0.2) + (0.0,) * num_local
  v.erase_prob = 0.0


def set_smoke(c):
  """A 2-block ViT with 8-px patches and tiny heads on 64-px views."""
  c.model.encoder_kwargs = config_dict.ConfigDict(dict(
      patch_size=8, hidden_dim=32, depth=2, num_heads=2))
  c.model.dino_head.update(dict(hidden_dim=16, bottleneck_dim=8, out_dim=32))
  c.views.num_local, c.views.local_size = 2, 32
  with c.views.ignore_type():
    c.views.blur_prob = (1.0, 0.1, 0.5, 0.5)
    c.views.solarize_prob = (0.0, 0.2, 0.0, 0.0)
