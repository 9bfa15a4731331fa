"""DINO (Caron et al. 2021, arXiv 2104.14294) as a method.

Networks: the student encoder + DINO head (`ssljax.models.DINOHead`, from
``config.model.dino_head``) and an EMA teacher of the same
(`ssljax.methods.ema_teacher`); state: the centre (K,) of the teacher
outputs. Loss (eq. (3)): the cross-entropy between the centred, sharpened
teacher distribution of each global crop and the student distribution of
every other crop, the teacher temperature warmed up linearly from
``warmup_teacher_temperature`` to ``teacher_temperature`` over
``teacher_temperature_warmup_epochs``; then the centre's EMA update
(momentum ``center_momentum``). Forms: ``"multi_view"`` (the official
pairing, `losses.dino_terms`) and ``"graph"`` (Σ_ij G_ij H(P_t,j, P_s,i) / Σ G
over the crop graph, `losses.dino_graph`), equal to it.

BatchNorm (a CNN encoder, or ``use_bn`` in the head;
``config.dino.batch_norm_views``): "multi_crop" is the official
``MultiCropWrapper``: the encoder takes the crops of one resolution as one
batch, the head all crops as one batch, for the student and for the
teacher (its two global crops together)
(`ssljax.methods.single_network.forward_multi_crop`); "per_view" (the
default when the field is absent) passes one view at a time.
``configs/dino.py`` sets "multi_crop". A ViT with the default head has no
BatchNorm: both give the same step.
"""

import jax.numpy as jnp

from ssljax import config_rules as rules, losses, models
from ssljax.methods import (base, ema_teacher, loss_config, networks,
                            single_network, student)

__all__ = ["Method"]

_HEAD_FIELDS = {
    "model.dino_head.out_dim": rules.integer(1),
    "model.dino_head.hidden_dim": rules.integer(1),
    "model.dino_head.bottleneck_dim": rules.integer(1),
    "model.dino_head.num_layers": rules.integer(1),
    "model.dino_head.use_bn": rules.boolean,
    "model.dino_head.norm_last_layer": rules.boolean,
    # The last layer does not move for this many epochs (ssljax.optimizers).
    "optim.freeze_last_layer_epochs": rules.real(0.0),
    # Adam's step count of the frozen layer meanwhile: "advance" or "hold".
    "optim.frozen_adam_count": rules.one_of("advance", "hold"),
}
# Read where present; absent, "per_view" (the earlier forward).
OPTIONAL_FIELDS = {"dino.batch_norm_views": rules.one_of(
    *single_network.BATCH_NORM_VIEWS)}


def _hyperparameters(*, student_temperature: float = 0.1,
                     teacher_temperature: float = 0.04,
                     warmup_teacher_temperature: float = 0.04,
                     teacher_temperature_warmup_epochs: float = 0.0,
                     center_momentum: float = 0.9) -> dict:
  """DINO's ``config.loss`` hyper-parameters (every form takes all five: the
  temperature schedule and the centre momentum act outside the form), with
  the official defaults filled in."""
  return dict(locals())


def _multi_view(s_VxBxK, t_GxBxK, center_K, *, student_temperature: float = 0.1,
                teacher_temperature: float = 0.04):
  return losses.dino_terms(s_VxBxK, t_GxBxK, center_K,
                           student_temperature=student_temperature,
                           teacher_temperature=teacher_temperature)


def _graph(s_VxBxK, t_GxBxK, center_K, *, student_temperature: float = 0.1,
           teacher_temperature: float = 0.04):
  g = student.crops_graph(s_VxBxK, t_GxBxK.shape[0])
  return {"loss": losses.dino_graph(
      student.flat(s_VxBxK), student.flat(t_GxBxK), center_K, g,
      student_temperature=student_temperature,
      teacher_temperature=teacher_temperature)}


class Method(ema_teacher.EMATeacherMixin, single_network.SingleNetworkMethod):
  """DINO: self-distillation with a centred, sharpened EMA teacher."""

  name = "dino"
  FORMS = {"multi_view": _multi_view, "graph": _graph}
  HPARAM_RULES = {
      "student_temperature": rules.real(0.0, lo_open=True),
      "teacher_temperature": rules.real(0.0, lo_open=True),
      "warmup_teacher_temperature": rules.real(0.0, lo_open=True),
      "teacher_temperature_warmup_epochs": rules.real(0.0),
      "center_momentum": rules.real(0.0, 1.0),
  }

  def __init__(self, config):
    super().__init__(config)
    dtype = networks.compute_dtype(config)
    head = lambda: models.DINOHead(dtype=dtype,
                                   **config.model.dino_head.to_dict())
    self.network = models.EncoderProjector(networks.encoder_of(config),
                                           head())
    self.teacher_network = models.EncoderProjector(
        networks.encoder_of(config), head())
    self.hparams = _hyperparameters(**loss_config.loss_hparams(config))
    self.multi_crop = single_network.uses_multi_crop(config, "dino")

  @classmethod
  def hparam_signatures(cls):
    # Every form takes all five: the temperature schedule and the centre
    # momentum act outside the form.
    return {form: _hyperparameters for form in cls.FORMS}

  @classmethod
  def config_fields(cls, config):
    return {**_HEAD_FIELDS, **rules.where_set(config, OPTIONAL_FIELDS),
            **super().config_fields(config)}

  def init(self, key, batch_spec):
    params, state = super().init(key, batch_spec)
    dim = self.config.model.dino_head.out_dim
    return params, {**state, "center": jnp.zeros((dim,), jnp.float32)}

  def teacher_temperature(self, schedule):
    """τ_t at ``schedule["step"]``: the linear warm-up then constant."""
    h = self.hparams
    warmup = int(round(h["teacher_temperature_warmup_epochs"]
                       * schedule["steps_per_epoch"]))
    return losses.dino_teacher_temperature(
        schedule["step"], warmup, start=h["warmup_teacher_temperature"],
        end=h["teacher_temperature"])

  def loss(self, params, state, batch, key, schedule):
    del key
    t_GxBxK, state = self.teacher_forward(state, batch["views"])
    outs, stats = self.forward(params, state["batch_stats"], batch["views"])
    tau_t = self.teacher_temperature(schedule)
    terms = self.FORMS[self.config.loss.form](
        student.stack(outs, "z"), t_GxBxK, state["center"],
        student_temperature=self.hparams["student_temperature"],
        teacher_temperature=tau_t)
    center = losses.dino_center_update(
        state["center"], t_GxBxK, momentum=self.hparams["center_momentum"])
    new = {**state, "batch_stats": stats, "center": center}
    return terms["loss"], base.LossAux(
        {**terms, "teacher_temperature": tau_t}, new, outs[0]["h"])
