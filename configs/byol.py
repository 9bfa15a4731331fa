"""BYOL (Grill et al. 2020, arXiv 2006.07733) on Fashion-MNIST; the main job's
pipeline (configs/common.py) with a predictor and a momentum teacher.

    python -m ssljax.main --config configs/byol.py --workdir runs/byol

Variants as in configs/common.py (``:smoke``, ``:long``). ``loss.form =
"graph"`` trains the same loss written over the crop graph
(``ssljax.methods.student.crops_graph``), which also takes local crops.
"""

from ml_collections import config_dict

from configs import common

VARIANTS = common.VARIANTS


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  c = common.get_config(arg)
  c.method = "byol"
  c.loss = config_dict.ConfigDict()
  c.loss.form = "two_view"  # "two_view" (symmetrised, official) | "graph"
  # Official heads: projector 4096-256 and predictor 4096-256 (Grill et al.
  # 2020, §3.3); hidden width 2048 here (a 512-d CNN representation).
  if arg != "smoke":
    c.model.projector = (2048, 256)
    c.model.predictor = (2048, 256)
  else:
    c.model.projector = (16, 16)
    c.model.predictor = (32, 16)
  # The official MLP (byol/utils/networks.py) ends with a Linear without
  # bias; its hidden Linear's bias, before BatchNorm, stays near 0.
  c.model.head_last_bias = False
  # Target momentum 0.996 -> 1 on a cosine (Grill et al. 2020, §3.2).
  c.teacher = config_dict.ConfigDict()
  c.teacher.momentum = 0.996
  c.teacher.final_momentum = 1.0
  c.teacher.schedule = "cosine"
  # Official: LARS, lr 0.2 x batch/256, weight decay 1.5e-6, 1000 epochs;
  # the main job keeps AdamW and its 4-epoch budget (configs/common.py).
  # With optim.name = "lars" set optim.lars.momentum_buffer = "gradients"
  # (byol/utils/optimizers.py: the momentum of trust-scaled gradients,
  # times -lr). The official learning rate ends at 0 after its cosine.
  c.optim.end_lr_factor = 0.0
  return c
