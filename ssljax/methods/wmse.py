"""W-MSE as a method: one encoder + projector, the loss of its embeddings.

Source: Ermolov, Siarohin, Sangineto & Sebe 2021, arXiv 2007.06346, eqs. (2)-(5):
the MSE of whitened embeddings of the two views.

Form: "two_view", the original paper's; the other ``config.loss`` fields
are its keyword hyper-parameters.
"""

from ssljax import config_rules as rules
from ssljax.methods import joint_embedding

__all__ = ["Method"]


class Method(joint_embedding.JointEmbeddingMethod):
  """W-MSE: the MSE between the whitened embeddings of the two views."""

  name = "wmse"
  FORMS = {
      "two_view": joint_embedding.terms_of("wmse_two_view"),
  }
  HPARAM_RULES = {"whitening_size": rules.integer(2), "eps": rules.real(0.0)}
