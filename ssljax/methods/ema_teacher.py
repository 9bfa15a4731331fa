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
statistics are its own), under stop-gradient, through
`ssljax.methods.single_network.forward_network` as the student (the
method's ``multi_crop``).

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
    outs, stats = single_network.forward_network(
        self.teacher_network,
        lambda s: {"params": teacher["params"], "batch_stats": s},
        teacher["batch_stats"], views[:self.config.views.num_global],
        multi_crop=self.multi_crop)
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
