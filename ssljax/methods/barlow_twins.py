"""Barlow Twins as a method: one encoder + projector, the loss of its embeddings.

Source: Zbontar, Jing, Misra, LeCun & Deny 2021, arXiv 2103.03230, eqs. (1)-(2): the cross-correlation matrix driven to the identity. Forms: "two_view", "graph" (first: the original paper's); the
network, state and graph options are those of
`ssljax.methods.joint_embedding.JointEmbeddingMethod`.
"""

from ssljax.methods import joint_embedding

__all__ = ["Method"]


class Method(joint_embedding.JointEmbeddingMethod):
  """Barlow Twins: ``config.loss.form`` picks the form, the other ``config.loss``
  fields are its keyword hyper-parameters."""

  name = "barlow_twins"
  FORMS = {
      "two_view": joint_embedding.terms_of("barlow_twins_two_view"),
      "graph": joint_embedding.terms_of("barlow_twins"),
  }
