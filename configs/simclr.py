"""SimCLR (Chen et al. 2020, NT-Xent) on Fashion-MNIST; same pipeline as vicreg.py.

    python -m ssljax.main --config configs/simclr.py --workdir runs/simclr

Variants as in configs/common.py (``:smoke``, ``:long``). ``loss.form =
"graph"`` trains InfoNCE on the batch graph (``ssljax.losses.simclr``), which
equals NT-Xent on the two-view graph.
"""

from ml_collections import config_dict

from configs import common

VARIANTS = common.VARIANTS


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  c = common.get_config(arg)
  c.method = "simclr"
  # Projector widths (Dense-BN-ReLU per hidden layer, a plain last Dense);
  # the last is the embedding dimension K (as configs/vicreg.py).
  c.model.projector = (16, 16) if arg == "smoke" else (512, 512)
  c.loss = config_dict.ConfigDict()
  c.loss.form = "two_view"  # "two_view" (NT-Xent) | "graph" (InfoNCE on G)
  # τ = 0.5: the CIFAR-10 setting of Chen et al. 2020 (their App. B.9).
  c.loss.temperature = 0.5
  # Rows per block of the streaming softmax; None = the dense N x N matrix.
  c.loss.block_size = config_dict.placeholder(int)
  common.add_graph(c)  # G of the "graph" form (configs/common.py)
  return c
