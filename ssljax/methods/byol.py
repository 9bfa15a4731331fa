"""BYOL (Grill et al. 2020, arXiv 2006.07733) as a method.

Networks: the student encoder + projector + predictor
(`ssljax.models.EncoderProjectorPredictor`) and an EMA teacher encoder +
projector (`ssljax.methods.ema_teacher`). Loss: each view's prediction
against the teacher's projection of the other global view(s), as normalised
MSE (§3.1, eq. (2)), in one of two forms:

* ``"two_view"``: the paper's symmetrised loss, the sum of the two views'
  batch means (`losses.byol_two_view`); two views only;
* ``"graph"``: Σ_ij G_ij ‖p̂_i − sg(ẑ_j)‖² / Σ G over the crop graph,
  times 2 (`losses.byol_graph`), so that V = G = 2 equals ``"two_view"``;
  it also takes local crops.
"""

from ssljax import losses
from ssljax.methods import base, ema_teacher, networks, student

__all__ = ["Method"]


def _two_view(p_VxBxK, t_GxBxK):
  return losses.byol_two_view(p_VxBxK[0], p_VxBxK[1], t_GxBxK[0], t_GxBxK[1])


def _graph(p_VxBxK, t_GxBxK):
  g = student.crops_graph(p_VxBxK, t_GxBxK.shape[0])
  return 2.0 * losses.byol_graph(student.flat(p_VxBxK),
                                 student.flat(t_GxBxK), g)


class Method(ema_teacher.EMATeacherMixin, student.PredictorMethod):
  """BYOL: predictor on the student, EMA teacher on the global views."""

  name = "byol"
  FORMS = {"two_view": _two_view, "graph": _graph}

  def __init__(self, config):
    super().__init__(config)
    self.teacher_network = networks.projector_network(config)

  def loss(self, params, state, batch, key, schedule):
    del key, schedule
    t_GxBxK, state = self.teacher_forward(state, batch["views"])
    outs, stats = self.forward(params, state["batch_stats"], batch["views"])
    loss = self.FORMS[self.config.loss.form](student.stack(outs, "p"),
                                             t_GxBxK)
    return loss, base.LossAux({"loss": loss},
                              {**state, "batch_stats": stats}, outs[0]["h"])
