"""FroSSL as a method: one encoder + projector, the loss of its embeddings.

Source: Skean, Dhakal, Jacobs & Giraldo 2023, arXiv 2310.02903, eqs. (4)-(6): log Frobenius norms of each view's covariance plus the invariance to the mean view. Forms: "multi_view" (first: the original paper's); the
network, state and graph options are those of
`ssljax.methods.joint_embedding.JointEmbeddingMethod`.
"""

from ssljax.methods import joint_embedding

__all__ = ["Method"]


class Method(joint_embedding.JointEmbeddingMethod):
  """FroSSL: ``config.loss.form`` picks the form, the other ``config.loss``
  fields are its keyword hyper-parameters."""

  name = "frossl"
  FORMS = {
      "multi_view": joint_embedding.terms_of("frossl"),
  }
