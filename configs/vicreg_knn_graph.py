"""VICReg on edges of a k-NN graph over the whole Fashion-MNIST train set.

G is the symmetrised 16-NN graph of the 60,000 train images in the space of
their top 50 pixel principal components (ssljax.graphs.knn_edges): about
1.3·10⁶ directed entries, stored as an edge list (memory O(edges), never
60,000²). Each step draws ``batch_size`` entries (i, j) ∝ G_ij; view 0 is cut
from image i, view 1 from image j, on the devices, with the ``config.views``
fields and (seed, step) keys of every other config; the original VICReg loss
treats them as the positive pair (the other batch rows are the negatives of
its variance/covariance terms). Same model, optimiser and probe as
configs/vicreg.py.

    python -m ssljax.main --config configs/vicreg_knn_graph.py --workdir runs/knn_graph

Variants: ``:smoke`` (a 512-image subset, seconds), ``:default``. Other
dataset graphs: ``--config.graph.kind=dataset_supervised`` (random same-label
partners) or ``--config.graph.kind=edge_list
--config.graph.edge_list_path=edges.npy``; the unbiased VIC² estimate is
configs/spectral_contrastive.py with ``--config.loss.form=graph`` and one of
these kinds.
"""

from ml_collections import config_dict

from configs import vicreg

VARIANTS = ("default", "smoke")


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  variant = arg or "default"
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
  c = vicreg.get_config(variant)
  c.graph.kind = "dataset_knn"
  c.graph.knn_k = 16  # 60,000 × 16 directed neighbours before symmetrising
  c.graph.knn_features = "pca"  # PCA-50 of pixels: the k-NN costs seconds
  c.graph.knn_pca_dim = 50
  c.graph.edge_sampling = "weighted"
  # A fixed budget that fits ~10 min on the shared 2-core machine (a step
  # sees 2 × 256 images; 234 steps ≈ one pass over the images' count).
  c.num_steps = 234
  if variant == "smoke":
    c.graph.knn_k = 4
    c.graph.knn_pca_dim = 8
    c.num_steps = 6
  return c
