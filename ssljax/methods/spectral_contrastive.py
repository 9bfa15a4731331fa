"""Spectral contrastive as a method: one encoder + projector, the loss of its embeddings.

Source: HaoChen, Wei, Gaidon & Ma 2021, arXiv 2106.04156; its graph form is
‖ZZᵀ − G‖² up to a constant (Cabannes et al. 2023, arXiv 2303.15256,
Theorem 1). On a whole-dataset graph, form "graph" trains on the unbiased
estimate of VIC² from sampled edges (`losses.edge_vic2_terms`).

Forms: "two_view", "graph" (the first is the original paper's); the other
``config.loss`` fields are the form's keyword hyper-parameters.
"""

from ssljax import losses
from ssljax.methods import joint_embedding

__all__ = ["Method"]


class Method(joint_embedding.JointEmbeddingMethod):
  """Spectral contrastive: ‖ZZᵀ − G‖² up to a constant; the one method
  with an edge estimate for whole-dataset graphs."""

  name = "spectral_contrastive"
  FORMS = {
      "two_view": joint_embedding.terms_of("spectral_contrastive_two_view"),
      "graph": joint_embedding.terms_of("spectral_contrastive"),
  }
  EDGE_ESTIMATE = staticmethod(losses.edge_vic2_terms)
