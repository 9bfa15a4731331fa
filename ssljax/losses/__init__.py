"""SSL losses as pure functions of embeddings Z (N, K) and a graph G (N, N).

Rows are samples. Each loss comes in two forms:

* the graph form `loss(z, g, ...)` of Balestriero & LeCun 2022 (arXiv
  2205.11508), where G says which rows are positives (see `ssljax.graphs`);
* the two-view form `loss_two_view(z1, z2, ...)`, which reproduces the
  original paper and its official code exactly.

All functions are jit-able and differentiable, run in float32 and float64 and
return the dtype of the embeddings. Shape checks always run; value checks
(finite, symmetric G) run only on concrete arrays, never on tracers.
One module per method; this package re-exports the public names.

Matrix products run at full float32 precision by default, on every backend.
JAX's own default multiplies float32 matrices in TF32 (10-bit mantissa) on
NVIDIA GPUs since Ampere and in bfloat16 passes on TPUs; PyTorch, the
official codes' framework, multiplies them in float32 by default (since
1.12). Every public function here is wrapped by
`ssljax.checks.float32_matmuls`, which traces it under
`jax.default_matmul_precision("highest")`, so its products, those of its
gradient, and those under an outer `jax.jit` carry `Precision.HIGHEST`. On
one NVIDIA H200 (2026-11-26), with JAX's default, a float32 VICReg graph
loss was 2.9e-4 relative away from float64 (tests/test_losses.py,
`TestVicregGraph.test_dtypes`, which allows 1e-4). On CPU nothing changes:
its float32 products are float32 anyway. A precision the user sets is kept,
e.g. TF32 for speed, for the whole program or for one block:

    jax.config.update("jax_default_matmul_precision", "tensorfloat32")
    with jax.default_matmul_precision("tensorfloat32"): ...

Bfloat16 embeddings are still upcast to float32 first (`checks.as_float`).
"""

from ssljax.losses.barlow_twins import barlow_twins
from ssljax.losses.barlow_twins import barlow_twins_terms
from ssljax.losses.barlow_twins import barlow_twins_two_view
from ssljax.losses.barlow_twins import barlow_twins_two_view_terms
from ssljax.losses.edge_sampled import edge_vic2_terms
from ssljax.losses.frossl import frossl
from ssljax.losses.frossl import frossl_terms
from ssljax.losses.simclr import simclr
from ssljax.losses.simclr import simclr_terms
from ssljax.losses.simclr import simclr_two_view
from ssljax.losses.simclr import simclr_two_view_terms
from ssljax.losses.spectral_contrastive import spectral_contrastive
from ssljax.losses.spectral_contrastive import spectral_contrastive_terms
from ssljax.losses.spectral_contrastive import spectral_contrastive_two_view
from ssljax.losses.vicreg import vicreg
from ssljax.losses.vicreg import vicreg_terms
from ssljax.losses.vicreg import vicreg_two_view
from ssljax.losses.vicreg import vicreg_two_view_terms
from ssljax.losses.wmse import wmse_two_view
from ssljax.losses.wmse import wmse_two_view_terms
from ssljax.losses.wmse import wmse_whiten

__all__ = ["vicreg", "vicreg_terms", "vicreg_two_view", "vicreg_two_view_terms"]
__all__ += ["simclr", "simclr_terms", "simclr_two_view", "simclr_two_view_terms",
            "frossl", "frossl_terms",
            "wmse_two_view", "wmse_two_view_terms", "wmse_whiten"]
__all__ += ["barlow_twins", "barlow_twins_terms", "barlow_twins_two_view",
            "barlow_twins_two_view_terms", "spectral_contrastive",
            "spectral_contrastive_terms", "spectral_contrastive_two_view"]
__all__ += ["edge_vic2_terms"]  # whole-dataset graphs sampled by edges
from ssljax.losses.byol import byol  # noqa: E402
from ssljax.losses.byol import byol_graph  # noqa: E402
from ssljax.losses.byol import byol_two_view  # noqa: E402
from ssljax.losses.mocov3 import mocov3  # noqa: E402
from ssljax.losses.mocov3 import mocov3_graph  # noqa: E402
from ssljax.losses.mocov3 import mocov3_two_view  # noqa: E402
from ssljax.losses.simsiam import simsiam  # noqa: E402
from ssljax.losses.simsiam import simsiam_graph  # noqa: E402
from ssljax.losses.simsiam import simsiam_two_view  # noqa: E402

__all__ += ["byol", "byol_two_view", "byol_graph",  # predictor + stop-gradient
            "simsiam", "simsiam_two_view", "simsiam_graph",
            "mocov3", "mocov3_two_view", "mocov3_graph"]

from ssljax.losses.dino import dino
from ssljax.losses.dino import dino_center_update
from ssljax.losses.dino import dino_crops_graph
from ssljax.losses.dino import dino_graph
from ssljax.losses.dino import dino_teacher_temperature
from ssljax.losses.dino import dino_terms
from ssljax.losses.nnclr import nearest_neighbour
from ssljax.losses.nnclr import nnclr
from ssljax.losses.nnclr import nnclr_graph
from ssljax.losses.nnclr import nnclr_two_view
from ssljax.losses.nnclr import support_knn_graph

__all__ += ["dino", "dino_terms", "dino_center_update",
            "dino_teacher_temperature", "dino_crops_graph", "dino_graph"]
__all__ += ["nearest_neighbour", "nnclr", "nnclr_two_view",
            "support_knn_graph", "nnclr_graph"]

from ssljax.losses.sigreg import sigreg  # noqa: E402
from ssljax.losses.sigreg import sigreg_directions  # noqa: E402
from ssljax.losses.sigreg import sigreg_null_mean  # noqa: E402
from ssljax.losses.sigreg import sigreg_quadrature  # noqa: E402
from ssljax.losses.lejepa import lejepa  # noqa: E402
from ssljax.losses.lejepa import lejepa_crops_graph  # noqa: E402
from ssljax.losses.lejepa import lejepa_graph  # noqa: E402
from ssljax.losses.lejepa import lejepa_graph_terms  # noqa: E402
from ssljax.losses.lejepa import lejepa_terms  # noqa: E402

__all__ += ["sigreg", "sigreg_directions", "sigreg_null_mean",  # LeJEPA
            "sigreg_quadrature", "lejepa", "lejepa_terms", "lejepa_graph",
            "lejepa_graph_terms", "lejepa_crops_graph"]
from ssljax.losses.ijepa import ijepa  # noqa: E402
from ssljax.losses.ijepa import target_layer_norm  # noqa: E402
from ssljax.losses.mae import mae  # noqa: E402
from ssljax.losses.mae import normalize_patches  # noqa: E402

__all__ += ["ijepa", "target_layer_norm",  # predictive: I-JEPA, MAE
            "mae", "normalize_patches"]
from ssljax.losses.dinov2 import dinov2_terms  # noqa: E402
from ssljax.losses.dinov2 import gram_anchoring  # noqa: E402
from ssljax.losses.ibot import ibot  # noqa: E402
from ssljax.losses.koleo import koleo  # noqa: E402
from ssljax.losses.sinkhorn import sinkhorn_knopp  # noqa: E402
from ssljax.losses.swav import swav  # noqa: E402

__all__ += ["sinkhorn_knopp", "swav",  # Sinkhorn-Knopp codes: SwAV, DINOv2/v3
            "koleo", "ibot", "dinov2_terms", "gram_anchoring"]
