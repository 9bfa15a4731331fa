"""SimSiam (Chen & He 2021, arXiv 2011.10566) as a method.

Network: encoder + projector + predictor
(`ssljax.models.EncoderProjectorPredictor`), no teacher: the targets are
the student's own projections of the global views under stop-gradient.
Loss: negative cosine of each prediction to the other view's target, in two
forms:

* ``"two_view"``: the paper's symmetrised loss, ½D(p1, z2) + ½D(p2, z1)
  (eq. (2), `losses.simsiam_two_view`); two views only;
* ``"graph"``: the same over the crop graph (`losses.simsiam_graph`), equal
  to ``"two_view"`` for V = G = 2; it also takes local crops.
"""

from ssljax import config_rules as rules, losses
from ssljax.methods import base, student

__all__ = ["Method"]


def _two_view(p_VxBxK, z_GxBxK):
  return losses.simsiam_two_view(p_VxBxK[0], p_VxBxK[1], z_GxBxK[0],
                                 z_GxBxK[1])


def _graph(p_VxBxK, z_GxBxK):
  g = student.crops_graph(p_VxBxK, z_GxBxK.shape[0])
  return losses.simsiam_graph(student.flat(p_VxBxK), student.flat(z_GxBxK),
                              g)


class Method(student.PredictorMethod):
  """SimSiam: predictor, stop-gradient targets, no teacher."""

  name = "simsiam"
  FORMS = {"two_view": _two_view, "graph": _graph}

  @classmethod
  def config_fields(cls, config):
    # The official SGD decays every parameter ("all"); absent, "kernels".
    return {**rules.where_set(config, {
        "optim.weight_decay_mask": rules.one_of("kernels", "all")}),
            **super().config_fields(config)}

  def loss(self, params, state, batch, key, schedule):
    del key, schedule
    outs, stats = self.forward(params, state["batch_stats"], batch["views"])
    z_GxBxK = student.stack(outs, "z")[:self.config.views.num_global]
    loss = self.FORMS[self.config.loss.form](student.stack(outs, "p"),
                                             z_GxBxK)
    return loss, base.LossAux({"loss": loss},
                              {**state, "batch_stats": stats}, outs[0]["h"])
