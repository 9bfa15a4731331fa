"""Spectral contrastive loss (HaoChen et al. 2021; VIC²: Cabannes et al. 2023,
arXiv 2303.15256) on Fashion-MNIST; same pipeline as vicreg.py.

    python -m ssljax.main --config configs/spectral_contrastive.py --workdir runs/spectral

Variants as in configs/common.py (``:smoke``, ``:long``). ``loss.form =
"graph"`` minimises ‖ZZᵀ − G‖² on the batch graph; "two_view" is HaoChen et
al.'s estimator (arXiv 2106.04156), −(2/N)Σ z₁ᵢᵀz₂ᵢ +
(1/(N(N−1)))Σ_{i≠j}(z₁ᵢᵀz₂ⱼ)². The loss has no hyper-parameters.
"""

from ml_collections import config_dict

from configs import common

VARIANTS = common.VARIANTS


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  c = common.get_config(arg)
  c.method = "spectral_contrastive"
  # Projector widths (Dense-BN-ReLU per hidden layer, a plain last Dense);
  # the last is the embedding dimension K (as configs/vicreg.py).
  c.model.projector = (16, 16) if arg == "smoke" else (512, 512)
  c.loss = config_dict.ConfigDict()
  c.loss.form = "two_view"  # "two_view" (HaoChen et al.) | "graph" (‖ZZᵀ − G‖²)
  common.add_graph(c)  # G of the "graph" form (configs/common.py)
  return c
