"""SimCLR as a method: one encoder + projector, the loss of its embeddings.

Source: Chen, Kornblith, Norouzi & Hinton 2020, arXiv 2002.05709, eq. (1):
NT-Xent over the 2B views; `losses.simclr` is InfoNCE over a graph G.

Forms: "two_view", "graph" (the first is the original paper's); the other
``config.loss`` fields are the form's keyword hyper-parameters.
"""

from ssljax import config_rules as rules
from ssljax.methods import joint_embedding

__all__ = ["Method"]


class Method(joint_embedding.JointEmbeddingMethod):
  """SimCLR: NT-Xent (InfoNCE) between the views' embeddings, τ =
  ``config.loss.temperature``."""

  name = "simclr"
  FORMS = {
      "two_view": joint_embedding.terms_of("simclr_two_view"),
      "graph": joint_embedding.terms_of("simclr"),
  }
  HPARAM_RULES = {"temperature": rules.real(0.0, lo_open=True),
                  "block_size": rules.integer(1, none_ok=True)}
