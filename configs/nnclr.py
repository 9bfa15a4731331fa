"""NNCLR (Dwibedi et al. 2021, arXiv 2104.14548) on Fashion-MNIST: InfoNCE with
nearest neighbours from a support queue as positives; the main job's pipeline.

    python -m ssljax.main --config configs/nnclr.py --workdir runs/nnclr

Variants as in configs/common.py.
"""

from ml_collections import config_dict

from configs import common

VARIANTS = common.VARIANTS


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  c = common.get_config(arg)
  c.method = "nnclr"
  c.loss = config_dict.ConfigDict()
  c.loss.form = "two_view"
  c.loss.temperature = 0.1  # τ of the paper
  # Support set: 98,304 rows for batch 4096 in the paper (24 batches);
  # 8,192 here (32 batches of 256, 14 % of Fashion-MNIST's train split).
  c.loss.queue_size = 8192
  # Official: projector 2048-2048-256, predictor 4096-256.
  if arg != "smoke":
    c.model.projector = (2048, 256)
    c.model.predictor = (2048, 256)
  else:
    c.model.projector = (16, 16)
    c.model.predictor = (32, 16)
    c.loss.queue_size = 256
  return c
