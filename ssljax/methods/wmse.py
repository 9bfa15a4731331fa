"""W-MSE as a method: one encoder + projector, the loss of its embeddings.

Source: Ermolov, Siarohin, Sangineto & Sebe 2021, arXiv 2007.06346, eqs. (2)-(5): the MSE of whitened embeddings of the two views. Forms: "two_view" (first: the original paper's); the
network, state and graph options are those of
`ssljax.methods.joint_embedding.JointEmbeddingMethod`.
"""

from ssljax.methods import joint_embedding

__all__ = ["Method"]


class Method(joint_embedding.JointEmbeddingMethod):
  """W-MSE: ``config.loss.form`` picks the form, the other ``config.loss``
  fields are its keyword hyper-parameters."""

  name = "wmse"
  FORMS = {
      "two_view": joint_embedding.terms_of("wmse_two_view"),
  }
