"""DINO (Caron et al. 2021, arXiv 2104.14294) on Fashion-MNIST: self-distillation
with a centred, sharpened momentum teacher and multi-crop.

    python -m ssljax.main --config configs/dino.py --workdir runs/dino

Variants as in configs/vicreg.py. Two global crops and four local crops of
14 px; the teacher sees the global crops, the student all of them.
``loss.form = "graph"`` is the same loss over the crop graph.
"""

from ml_collections import config_dict

from configs import vicreg

VARIANTS = vicreg.VARIANTS


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  c = vicreg.get_config(arg)
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
  c.model.head = "dino"
  c.model.head_kwargs = config_dict.ConfigDict(
      {"hidden_dim": 2048, "bottleneck_dim": 256, "out_dim": 4096})
  # Teacher momentum 0.996 -> 1 on a cosine (official default).
  c.teacher.momentum = 0.996
  c.teacher.final_momentum = 1.0
  # Multi-crop: official 2 x 224 px (scale 0.4-1) + 10 x 96 px (0.05-0.4).
  c.views.num_local_views = 4
  c.views.local_size = 14
  c.views.crop_scale = (0.4, 1.0)
  c.views.local_crop_scale = (0.05, 0.4)
  if arg == "smoke":
    c.model.head_kwargs = config_dict.ConfigDict(
        {"hidden_dim": 16, "bottleneck_dim": 8, "out_dim": 32})
    c.views.num_local_views = 2
  return c
