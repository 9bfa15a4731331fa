"""MoCo v3 (Chen, Xie & He 2021, arXiv 2104.02057) on Fashion-MNIST: queries of
the online predictor against momentum keys; the main job's pipeline.

    python -m ssljax.main --config configs/mocov3.py --workdir runs/mocov3

Variants as in configs/common.py.
"""

from ml_collections import config_dict

from configs import common

VARIANTS = common.VARIANTS


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  c = common.get_config(arg)
  c.method = "mocov3"
  c.loss = config_dict.ConfigDict()
  c.loss.form = "two_view"
  # τ = 0.2 (the paper's ViT value; its ResNet-50 recipe uses 1.0), the loss
  # scaled by 2τ as in the official code.
  c.loss.temperature = 0.2
  # Official (ResNet-50): projector 4096-256 and predictor 4096-256;
  # hidden width 2048 here.
  if arg != "smoke":
    c.model.projector = (2048, 256)
    c.model.predictor = (2048, 256)
  else:
    c.model.projector = (16, 16)
    c.model.predictor = (32, 16)
  # The official heads (moco/builder.py, ResNet recipe): no bias in any
  # Linear, the projector ends with BatchNorm1d(affine=False), the
  # predictor with a Linear (its ViT recipe's predictor ends with the
  # BatchNorm too).
  c.model.head_last_bias = False
  c.model.projector_last_bn = True
  c.model.predictor_last_bn = False
  # Momentum 0.99 -> 1 on a cosine (ResNet-50 recipe: 0.99; ViT: 0.99). The
  # key encoder moves at the start of each step with that step's momentum
  # (builder.py's forward): after step k, τ_{k+1}.
  c.teacher = config_dict.ConfigDict()
  c.teacher.momentum = 0.99
  c.teacher.final_momentum = 1.0
  c.teacher.schedule = "cosine"
  c.teacher.momentum_step = "next"
  # The official schedule (main_moco.py adjust_learning_rate): linear
  # warm-up, then a half cosine to 0; its AdamW (the ViT recipe's optimiser)
  # decays every parameter. With optim.name = "lars" (its ResNet recipe)
  # set optim.weight_decay_mask = "kernels" and optim.lars.momentum_buffer =
  # "gradients" (moco/optimizer.py's LARS).
  c.optim.end_lr_factor = 0.0
  c.optim.weight_decay_mask = "all"
  return c
