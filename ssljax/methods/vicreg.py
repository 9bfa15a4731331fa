"""VICReg as a method: one encoder + projector, the loss of its embeddings.

Source: Bardes, Ponce & LeCun 2022, arXiv 2105.04906, eqs. (1)-(6): invariance, variance hinge and covariance terms; `losses.vicreg` is its graph form. Forms: "two_view", "graph" (first: the original paper's); the
network, state and graph options are those of
`ssljax.methods.joint_embedding.JointEmbeddingMethod`.
"""

from ssljax.methods import joint_embedding

__all__ = ["Method"]


class Method(joint_embedding.JointEmbeddingMethod):
  """VICReg: ``config.loss.form`` picks the form, the other ``config.loss``
  fields are its keyword hyper-parameters."""

  name = "vicreg"
  FORMS = {
      "two_view": joint_embedding.terms_of("vicreg_two_view"),
      "graph": joint_embedding.terms_of("vicreg"),
  }
