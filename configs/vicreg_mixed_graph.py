"""VICReg on the α-mixed graph (1 − α)·G_ssl + α·G_sup with a fraction of the
train labels known (Cabannes et al. 2023, arXiv 2303.15256, §3, semi-supervised
learning as a graph).

    python -m ssljax.main --config configs/vicreg_mixed_graph.py --workdir runs/vicreg_mixed

Unknown labels give empty rows of G_sup, so those samples are tied only to
their own views. Variants as in configs/vicreg.py (``:smoke``, ``:long``).
"""

from ml_collections import config_dict

from configs import vicreg

VARIANTS = vicreg.VARIANTS


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  c = vicreg.get_config(arg)
  c.loss.form = "graph"
  c.graph.kind = "mixed"
  c.graph.alpha = 0.5  # weight of the label graph
  c.graph.label_fraction = 0.1  # 10% of the train labels known (6,000)
  return c
