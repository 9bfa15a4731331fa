"""VICReg as a method: one encoder + projector, the loss of its embeddings.

Source: Bardes, Ponce & LeCun 2022, arXiv 2105.04906, eqs. (1)-(6): invariance,
variance hinge and covariance terms; `losses.vicreg` is its graph form.

Forms: "two_view", "graph" (the first is the original paper's); the other
``config.loss`` fields are the form's keyword hyper-parameters.
"""

from ssljax import config_rules as rules
from ssljax.methods import joint_embedding

__all__ = ["Method"]


class Method(joint_embedding.JointEmbeddingMethod):
  """VICReg: invariance, variance hinge and covariance of the views'
  embeddings."""

  name = "vicreg"
  FORMS = {
      "two_view": joint_embedding.terms_of("vicreg_two_view"),
      "graph": joint_embedding.terms_of("vicreg"),
  }
  HPARAM_RULES = {"eps": rules.real(0.0)}  # the *_weight fields: >= 0
