"""MoCo v3 (Chen, Xie & He 2021, arXiv 2104.02057) as a method.

Networks: the query encoder + projector + predictor
(`ssljax.models.EncoderProjectorPredictor`) and the momentum key encoder +
projector (`ssljax.methods.ema_teacher`). Loss (Algorithm 1): InfoNCE of
each view's queries against the other view's momentum keys over the global
batch, times 2τ, symmetrised (`losses.mocov3_two_view`); τ =
``config.loss.temperature`` (paper: 0.2). One form, ``"two_view"``.
"""

from ssljax import config_rules as rules, losses
from ssljax.methods import base, ema_teacher, loss_config, networks, student

__all__ = ["Method"]


def _two_view(q_VxBxK, k_GxBxK, *, temperature: float = 0.2):
  return losses.mocov3_two_view(q_VxBxK[0], q_VxBxK[1], k_GxBxK[0],
                                k_GxBxK[1], temperature=temperature)


class Method(ema_teacher.EMATeacherMixin, student.PredictorMethod):
  """MoCo v3: queries from the predictor, keys from the momentum encoder."""

  name = "mocov3"
  FORMS = {"two_view": _two_view}
  HPARAM_RULES = {"temperature": rules.real(0.0, lo_open=True)}

  def __init__(self, config):
    super().__init__(config)
    self.teacher_network = networks.projector_network(config)
    self.hparams = loss_config.loss_hparams(config)

  @classmethod
  def config_fields(cls, config):
    # The official AdamW decays every parameter ("all"); its LARS decays
    # kernels only ("kernels", which LARS needs). Read where a config sets
    # it; absent, "kernels" (the recipes that do not set it keep their
    # steps).
    return {**rules.where_set(config, {
        "optim.weight_decay_mask": rules.one_of("kernels", "all")}),
            **super().config_fields(config)}

  def loss(self, params, state, batch, key, schedule):
    del key, schedule
    k_GxBxK, state = self.teacher_forward(state, batch["views"])
    outs, stats = self.forward(params, state["batch_stats"], batch["views"])
    loss = _two_view(student.stack(outs, "p"), k_GxBxK, **self.hparams)
    return loss, base.LossAux({"loss": loss},
                              {**state, "batch_stats": stats}, outs[0]["h"])
