"""FroSSL as a method: one encoder + projector, the loss of its embeddings.

Source: Skean, Dhakal, Jacobs & Giraldo 2023, arXiv 2310.02903, eqs. (4)-(6):
log Frobenius norms of each view's covariance plus the invariance to the
mean view.

Form: "multi_view", the original paper's; the other ``config.loss`` fields
are its keyword hyper-parameters.
"""

from ssljax.methods import joint_embedding

__all__ = ["Method"]


class Method(joint_embedding.JointEmbeddingMethod):
  """FroSSL: log Frobenius norms of the views' covariances plus the
  invariance to their mean."""

  name = "frossl"
  FORMS = {
      "multi_view": joint_embedding.terms_of("frossl"),
  }
