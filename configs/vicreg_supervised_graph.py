"""VICReg whose graph G comes from the batch labels.

Cabannes et al. 2023 (arXiv 2303.15256): "SSL is a G away from supervised
learning"). Same pipeline, model and loss as vicreg.py; only G changes: rows of
the same class are positives, across views.

    python -m ssljax.main --config configs/vicreg_supervised_graph.py --workdir runs/vicreg_sup

Variants as in configs/vicreg.py (``:smoke``, ``:long``).
"""

from ml_collections import config_dict

from configs import vicreg

VARIANTS = vicreg.VARIANTS


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  c = vicreg.get_config(arg)
  c.loss.form = "graph"  # label graphs need the (Z, G) form of the loss
  c.graph.kind = "supervised"
  c.graph.label_fraction = 1.0  # every train label known
  return c
