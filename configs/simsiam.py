"""SimSiam (Chen & He 2021, arXiv 2011.10566) on Fashion-MNIST: predictor and
stop-gradient, no teacher; the main job's pipeline (configs/common.py).

    python -m ssljax.main --config configs/simsiam.py --workdir runs/simsiam

Variants as in configs/common.py. ``loss.form = "graph"`` is the same loss
over the crop graph (``ssljax.methods.student.crops_graph``).
"""

from ml_collections import config_dict

from configs import common

VARIANTS = common.VARIANTS


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  c = common.get_config(arg)
  c.method = "simsiam"
  c.loss = config_dict.ConfigDict()
  c.loss.form = "two_view"  # "two_view" (symmetrised, official) | "graph"
  # Official (ImageNet): projector 3 x 2048, predictor bottleneck 512 -> 2048
  # (Chen & He 2021, §4); CIFAR: a 2-layer projector. 2 layers here.
  if arg != "smoke":
    c.model.projector = (2048, 2048)
    c.model.predictor = (512, 2048)
  else:
    c.model.projector = (16, 16)
    c.model.predictor = (32, 16)
  # Official: SGD lr 0.05 x batch/256, weight decay 1e-4, 100 epochs, the
  # predictor at a fixed lr; the main job keeps AdamW (configs/common.py).
  return c
