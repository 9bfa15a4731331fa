"""DINO (Caron et al. 2021, arXiv 2104.14294) on Fashion-MNIST: self-distillation
with a centred, sharpened momentum teacher and multi-crop.

    python -m ssljax.main --config configs/dino.py --workdir runs/dino

Variants as in configs/common.py. Two global crops and four local crops of
14 px; the teacher sees the global crops, the student all of them.
``loss.form = "graph"`` is the same loss over the crop graph.
"""

from ml_collections import config_dict

from configs import common

VARIANTS = common.VARIANTS


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  c = common.get_config(arg)
  c.method = "dino"
  c.loss = config_dict.ConfigDict()
  c.loss.form = "multi_view"  # official pairing | "graph" (crop graph)
  # Official: student τ 0.1; teacher τ warmed up 0.04 -> 0.07 over 30 of
  # 100 epochs (the ViT-S recipe); centre momentum 0.9.
  c.loss.student_temperature = 0.1
  c.loss.teacher_temperature = 0.07
  c.loss.warmup_teacher_temperature = 0.04
  c.loss.teacher_temperature_warmup_epochs = 0.3 * c.epochs
  c.loss.center_momentum = 0.9
  # Head: 3-layer MLP (hidden 2048, GELU), 256-d bottleneck, L2-normalised,
  # weight-normalised last layer; official out_dim 65536, 4096 here.
  # The DINO head replaces the projector (ssljax.models.DINOHead).
  c.model.dino_head = config_dict.ConfigDict()
  c.model.dino_head.hidden_dim = 2048  # width of the MLP's hidden layers
  c.model.dino_head.bottleneck_dim = 256  # L2-normalised bottleneck
  c.model.dino_head.out_dim = 4096  # prototypes (softmax dimension)
  c.model.dino_head.num_layers = 3  # MLP layers before the bottleneck
  c.model.dino_head.use_bn = False  # BatchNorm in the MLP's hidden layers
  c.model.dino_head.norm_last_layer = True  # weight-normalised, fixed norm
  # Official recipe: each tensor's gradient clipped at norm 3.0
  # (utils.clip_gradients) and the last layer frozen during the first epoch,
  # its Adam step count starting when it thaws (its grad is None there, which
  # torch's AdamW skips).
  c.optim.clip_grad_norm = 3.0
  c.optim.clip_mode = "per_tensor"
  c.optim.freeze_last_layer_epochs = 1.0
  c.optim.frozen_adam_count = "hold"
  # Teacher momentum 0.996 -> 1 on a cosine (official default).
  c.teacher = config_dict.ConfigDict()
  c.teacher.momentum = 0.996
  c.teacher.final_momentum = 1.0
  c.teacher.schedule = "cosine"
  # The official MultiCropWrapper: the encoder's BatchNorm over the crops of
  # one resolution together, the head's over all crops (ssljax.methods.dino).
  c.dino = config_dict.ConfigDict(dict(batch_norm_views="multi_crop"))
  # Multi-crop: official 2 x 224 px (scale 0.4-1) + 10 x 96 px (0.05-0.4).
  c.views.num_local = 4
  c.views.local_size = 14
  c.views.crop_scale = (0.4, 1.0)
  c.views.local_crop_scale = (0.05, 0.4)
  if arg == "smoke":
    c.model.dino_head.hidden_dim = 16
    c.model.dino_head.bottleneck_dim = 8
    c.model.dino_head.out_dim = 32
    c.views.num_local = 2
  return c
