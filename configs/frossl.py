"""FroSSL (Skean et al. 2023, arXiv 2310.02903) on Fashion-MNIST, as vicreg.py.

    python -m ssljax.main --config configs/frossl.py --workdir runs/frossl

Variants as in configs/vicreg.py (``:smoke``, ``:long``). FroSSL takes V >= 2
views natively (``loss.form = "multi_view"``); V = 2 keeps the step cost equal
to the other methods' for the comparison table.
"""

from ml_collections import config_dict

from configs import vicreg

VARIANTS = vicreg.VARIANTS


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  c = vicreg.get_config(arg)
  c.method = "frossl"
  c.loss = config_dict.ConfigDict()
  c.loss.form = "multi_view"  # the authors' V-view loss
  # Weight of the MSE invariance term; 1.0 as in the authors' released code.
  c.loss.invariance_weight = 1.0
  return c
