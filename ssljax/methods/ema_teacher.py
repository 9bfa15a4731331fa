"""The EMA teacher (momentum target) of BYOL, MoCo v3 and DINO.

A teacher network has the student's encoder and projector; its weights ξ are
no parameters of the optimiser but part of the method's state: they start as
a copy of the student's and, after each optimiser step, move towards them,
ξ ← τ_k ξ + (1 − τ_k) θ, with τ_k from ``config.teacher.momentum`` to
``config.teacher.final_momentum`` on ``config.teacher.schedule``: BYOL's
cosine or I-JEPA's line (`ssljax.methods.ema`), over
``config.optim.schedule_scale`` × the run's steps (I-JEPA's denominator
``ipe · num_epochs · ipe_scale``, not truncated). The optional
``config.teacher.momentum_step`` says which τ moves the teacher after step
k: "done" (the default: τ_k, the step just taken, as BYOL's and DINO's
updates after the optimiser step) or "next" (τ_{k+1}: MoCo v3 moves its key
encoder at the start of step k + 1 with that step's momentum, official
moco/builder.py ``forward``; the same teacher for every step's keys). The
teacher sees the G global views only, in train mode (its BatchNorm
statistics are its own), under stop-gradient; one view at a time, or
with ``multi_crop`` (a method attribute) as one batch through
`ssljax.methods.single_network.forward_multi_crop`.

References:
  Grill et al. 2020, arXiv 2006.07733, §3.2; Chen, Xie & He 2021, arXiv
  2104.02057, Algorithm 1; Caron et al. 2021, arXiv 2104.14294, §3.1.
"""

import jax
import jax.numpy as jnp

from ssljax import config_rules as rules
from ssljax.methods import ema, single_network

__all__ = ["TEACHER_FIELDS", "EMATeacherMixin"]

TEACHER_FIELDS = {"teacher.momentum": rules.real(0.0, 1.0),
                  "teacher.final_momentum": rules.real(0.0, 1.0),
                  "teacher.schedule": rules.one_of(*ema.SCHEDULES)}
# Optional: which step's momentum moves the teacher after step k.
MOMENTUM_STEPS = ("done", "next")
_TEACHER_PARTS = ("encoder", "projector")
_ABSENT = object()  # an optional field the config does not set


class EMATeacherMixin:
  """For a `ssljax.methods.single_network.SingleNetworkMethod` (listed after
  this mixin) whose ``teacher_network`` (an `ssljax.models.EncoderProjector`)
  shares the student's encoder and projector: ``init`` adds
  state["teacher"] = {"params", "batch_stats"}, ``after_update`` moves it,
  and the method reads the teacher's config fields (TEACHER_FIELDS)."""

  teacher_network = None
  # True: the teacher's global views go through `forward_multi_crop` (one
  # batch for the encoder, one for the head), as DINO's MultiCropWrapper.
  multi_crop = False

  @classmethod
  def config_fields(cls, config):
    optional = ({"teacher.momentum_step": rules.one_of(*MOMENTUM_STEPS)}
                if rules.value_at(config, "teacher.momentum_step", _ABSENT)
                is not _ABSENT else {})
    return {**TEACHER_FIELDS, **optional, **super().config_fields(config)}

  def init(self, key, batch_spec):
    """The student's (params, state), the state with the teacher: a copy
    (own buffers: the train step donates the state) of the student's
    encoder and projector."""
    params, state = super().init(key, batch_spec)
    pick = lambda tree: {k: tree[k] for k in _TEACHER_PARTS if k in tree}
    teacher = jax.tree.map(jnp.copy, {
        "params": pick(params), "batch_stats": pick(state["batch_stats"])})
    return params, {**state, "teacher": teacher}

  def teacher_forward(self, state, views) -> tuple:
    """(stop-gradient teacher outputs z (G, B, K) of the global views, the
    state with the teacher's new BatchNorm statistics)."""
    teacher = state["teacher"]
    variables_of = lambda s: {"params": teacher["params"], "batch_stats": s}
    global_views = views[:self.config.views.num_global]
    if self.multi_crop:
      outs, stats = single_network.forward_multi_crop(
          self.teacher_network.apply, variables_of, teacher["batch_stats"],
          global_views, encoder_method=self.teacher_network.represent,
          head_method=self.teacher_network.head)
    else:
      outs, stats = single_network.forward_views(
          self.teacher_network.apply, variables_of, teacher["batch_stats"],
          global_views)
    z_GxBxK = jax.lax.stop_gradient(jnp.stack([o["z"] for o in outs]))
    return z_GxBxK, {**state, "teacher": {**teacher, "batch_stats": stats}}

  def after_update(self, state, params, schedule):
    step = schedule["step"]
    if self.config.teacher.get("momentum_step", "done") == "next":
      step = step + 1
    momentum = ema.momentum(
        self.config.teacher.schedule, step,
        self.config.optim.get("schedule_scale", 1.0) * schedule["total_steps"],
        base=self.config.teacher.momentum,
        final=self.config.teacher.final_momentum)
    teacher = state["teacher"]
    student = {k: params[k] for k in teacher["params"]}
    new = {**teacher, "params": ema.ema_update(teacher["params"], student,
                                               momentum)}
    return {**state, "teacher": new}, {"teacher_momentum": momentum}
