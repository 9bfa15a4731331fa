"""Barlow Twins as a method: one encoder + projector, the loss of its embeddings.

Source: Zbontar, Jing, Misra, LeCun & Deny 2021, arXiv 2103.03230, eqs. (1)-(2):
the cross-correlation matrix driven to the identity.

Forms: "two_view", "graph" (the first is the original paper's); the other
``config.loss`` fields are the form's keyword hyper-parameters.
"""

from ssljax import config_rules as rules
from ssljax.methods import joint_embedding

__all__ = ["Method"]


class Method(joint_embedding.JointEmbeddingMethod):
  """Barlow Twins: the views' cross-correlation driven to the identity,
  off-diagonal weight ``config.loss.lambda_offdiag``."""

  name = "barlow_twins"
  FORMS = {
      "two_view": joint_embedding.terms_of("barlow_twins_two_view"),
      "graph": joint_embedding.terms_of("barlow_twins"),
  }
  HPARAM_RULES = {"lambda_offdiag": rules.real(0.0), "eps": rules.real(0.0)}
