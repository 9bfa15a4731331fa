"""SimCLR as a method: one encoder + projector, the loss of its embeddings.

Source: Chen, Kornblith, Norouzi & Hinton 2020, arXiv 2002.05709, eq. (1): NT-Xent over the 2B views; `losses.simclr` is InfoNCE over a graph G. Forms: "two_view", "graph" (first: the original paper's); the
network, state and graph options are those of
`ssljax.methods.joint_embedding.JointEmbeddingMethod`.
"""

from ssljax.methods import joint_embedding

__all__ = ["Method"]


class Method(joint_embedding.JointEmbeddingMethod):
  """SimCLR: ``config.loss.form`` picks the form, the other ``config.loss``
  fields are its keyword hyper-parameters."""

  name = "simclr"
  FORMS = {
      "two_view": joint_embedding.terms_of("simclr_two_view"),
      "graph": joint_embedding.terms_of("simclr"),
  }
