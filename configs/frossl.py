"""FroSSL (Skean et al. 2023, arXiv 2310.02903) on Fashion-MNIST, as vicreg.py.

    python -m ssljax.main --config configs/frossl.py --workdir runs/frossl

Variants as in configs/common.py (``:smoke``, ``:long``). FroSSL takes V >= 2
views natively (``loss.form = "multi_view"``); V = 2 keeps the step cost equal
to the other methods' for the comparison table.
"""

from ml_collections import config_dict

from configs import common

VARIANTS = common.VARIANTS


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  c = common.get_config(arg)
  c.method = "frossl"
  # Projector widths (Dense-BN-ReLU per hidden layer, a plain last Dense);
  # the last is the embedding dimension K (as configs/vicreg.py).
  c.model.projector = (16, 16) if arg == "smoke" else (512, 512)
  c.loss = config_dict.ConfigDict()
  c.loss.form = "multi_view"  # the authors' V-view loss
  # Weight of the MSE invariance term; 1.0 as in the authors' released code.
  c.loss.invariance_weight = 1.0
  common.add_graph(c)  # G of the "graph" form (configs/common.py)
  return c
