"""Barlow Twins (Zbontar et al. 2021) on Fashion-MNIST; same pipeline as vicreg.py.

    python -m ssljax.main --config configs/barlow_twins.py --workdir runs/barlow_twins

Variants as in configs/common.py (``:smoke``, ``:long``). ``loss.form =
"graph"`` uses the graph form of ``ssljax.losses.barlow_twins`` (Balestriero &
LeCun 2022, arXiv 2205.11508, §2).
"""

from ml_collections import config_dict

from configs import common

VARIANTS = common.VARIANTS


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  c = common.get_config(arg)
  c.method = "barlow_twins"
  # Projector widths (Dense-BN-ReLU per hidden layer, a plain last Dense);
  # the last is the embedding dimension K (as configs/vicreg.py).
  c.model.projector = (16, 16) if arg == "smoke" else (512, 512)
  c.loss = config_dict.ConfigDict()
  c.loss.form = "two_view"  # "two_view" (official) | "graph"
  # λ of the off-diagonal term: 0.0051 in the official code (Zbontar et al.
  # 2021, github.com/facebookresearch/barlowtwins).
  c.loss.lambda_offdiag = 0.0051
  common.add_graph(c)  # G of the "graph" form (configs/common.py)
  return c
