"""Spectral contrastive as a method: one encoder + projector, the loss of its embeddings.

Source: HaoChen, Wei, Gaidon & Ma 2021, arXiv 2106.04156; its graph form is ‖ZZᵀ − G‖² up to a constant (Cabannes et al. 2023, arXiv 2303.15256, Theorem 1). Forms: "two_view", "graph" (first: the original paper's); the
network, state and graph options are those of
`ssljax.methods.joint_embedding.JointEmbeddingMethod`.
"""

from ssljax.methods import joint_embedding

__all__ = ["Method"]


class Method(joint_embedding.JointEmbeddingMethod):
  """Spectral contrastive: ``config.loss.form`` picks the form, the other ``config.loss``
  fields are its keyword hyper-parameters."""

  name = "spectral_contrastive"
  FORMS = {
      "two_view": joint_embedding.terms_of("spectral_contrastive_two_view"),
      "graph": joint_embedding.terms_of("spectral_contrastive"),
  }
