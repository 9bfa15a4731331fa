"""I-JEPA (Assran et al. 2023, arXiv 2301.08243) as a method.

Networks: a ViT context encoder and a narrow ViT predictor
(`ssljax.models.IJEPANetwork`, `ssljax.models.JEPAPredictor`), and an EMA
target encoder (`ssljax.methods.ema_teacher`; the state's
``teacher.params.encoder``). One view per image. Each step draws the
multi-block masks from the step's key (`ssljax.masks.multiblock_masks`:
M target blocks, one context block minus the targets); the context encoder
sees the context patches, the target encoder the whole image; the predictor
predicts each target block's tokens from the context; the loss is
`ssljax.losses.ijepa` (smooth-L1 to the layer-normalised targets).

What is probed: the target encoder (the paper evaluates it), with the
encoder's ``representation`` (the configs use "avg_tokens", the paper's
average-pooled tokens). ``train_representation`` (fine-tuning) reads the
context encoder, the trained weights.

Differences from the official code: the EMA momentum follows BYOL's cosine
from ``teacher.momentum`` to ``teacher.final_momentum``
(`ssljax.methods.ema_teacher`); the official schedule is linear between
the same values. Index arrays are padded to static sizes and the padding
is kept out of attention and loss (equal numbers, fixed shapes).
"""

import jax
import jax.numpy as jnp

from ssljax import config_rules as rules, losses, masks, models
from ssljax.methods import base, ema_teacher, masked_vit

__all__ = ["Method"]

_MASK_FIELDS = {
    "masks.num_targets": rules.integer(1),
    "masks.target_scale": rules.pair(0.0, 1.0),
    "masks.target_aspect": rules.pair(0.0, 100.0),
    "masks.context_scale": rules.pair(0.0, 1.0),
    "masks.min_keep": rules.integer(0),
}


def _smooth_l1(pred, target, valid):
  return losses.ijepa(pred, target, valid=valid)


class Method(ema_teacher.EMATeacherMixin, base.SingleNetworkMethod):
  """I-JEPA: predict target-encoder tokens of target blocks from a context
  block."""

  name = "ijepa"
  FORMS = {"smooth_l1": _smooth_l1}
  forms = tuple(FORMS)

  def __init__(self, config):
    super().__init__(config)
    encoder = base.encoder_of(config)
    head = config.model.jepa_predictor
    predictor = models.JEPAPredictor(
        head.width, head.depth, head.num_heads, encoder.hidden_dim,
        dtype=base.compute_dtype(config))
    self.network = models.IJEPANetwork(encoder, predictor)
    self.teacher_network = self.network
    self.encoder = encoder

  @classmethod
  def config_fields(cls, config):
    return {**_MASK_FIELDS, **ema_teacher.TEACHER_FIELDS,
            **masked_vit.head_fields("jepa_predictor"),
            **base.loss_fields(config, cls.FORMS)}

  @classmethod
  def check_config(cls, config):
    problems = (base.loss_key_problems(config, cls.name, cls.FORMS)
                + masked_vit.vit_problems(config, cls.name, "jepa_predictor"))
    if problems:
      return problems
    patch = config.model.encoder_kwargs.get(
        "patch_size", models.ENCODERS[config.model.encoder].patch_size)
    if config.views.size:
      side = config.views.size // patch
      problems += masks.multiblock_problems((side, side), **_mask_kwargs(config))
    return problems

  def mask_kwargs(self):
    """`ssljax.masks.multiblock_masks` keywords of the config."""
    return _mask_kwargs(self.config)

  def loss(self, params, state, batch, key, schedule):
    del schedule
    x = batch["views"][0]
    grid = masked_vit.patch_grid(x, self.encoder.patch_size)
    m = masks.multiblock_masks(key, x.shape[0], grid, **self.mask_kwargs())
    teacher = {"params": state["teacher"]["params"]}
    h = jax.lax.stop_gradient(self.network.apply(
        teacher, x, method=models.IJEPANetwork.context))  # (B, L, D)
    num_targets, batch_size, t_max = m["targets"].shape
    rows = jnp.arange(batch_size)[None, :, None]
    target = h[rows, m["targets"]].reshape(num_targets * batch_size, t_max, -1)
    variables = {"params": params}
    ctx = self.network.apply(variables, x, m["context"], m["context_valid"],
                             method=models.IJEPANetwork.context)
    pred = self.network.apply(variables, ctx, m["context"], m["targets"],
                              grid, m["context_valid"], m["target_valid"],
                              method=models.IJEPANetwork.predict)
    valid = m["target_valid"].reshape(num_targets * batch_size, t_max)
    loss = self.FORMS[self.config.loss.form](pred, target, valid)
    rep = masked_vit.token_representation(self.encoder, h, with_prefix=False)
    if rep is None:
      rep = self.representation(params, state, x)
    metrics = {"loss": loss,
               "context_patches": m["num_context"].astype(jnp.float32),
               "target_patches": m["num_target"].astype(jnp.float32)}
    return loss, base.LossAux(metrics, state, jax.lax.stop_gradient(rep))

  def representation(self, params, state, images):
    """The target encoder's representation (B, D) (the paper's choice)."""
    del params
    return self.network.apply({"params": state["teacher"]["params"]}, images,
                              method=models.IJEPANetwork.represent)

  def embedding(self, params, state, images):
    h = self.representation(params, state, images)
    return h, h


def _mask_kwargs(config) -> dict:
  """The mask keywords of ``config.masks``."""
  mc = config.masks
  return dict(num_targets=mc.num_targets, target_scale=tuple(mc.target_scale),
              target_aspect=tuple(mc.target_aspect),
              context_scale=tuple(mc.context_scale), min_keep=mc.min_keep)
