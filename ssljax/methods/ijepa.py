"""I-JEPA (Assran et al. 2023, arXiv 2301.08243) as a method.

Networks: a ViT context encoder and a narrow ViT predictor
(`ssljax.models.IJEPANetwork`, `ssljax.models.JEPAPredictor`), and an EMA
target encoder (`ssljax.methods.ema_teacher`; the state's
``teacher.params.encoder``). One view per image. Each step draws the
multi-block masks from the step's key (`ssljax.methods.masks.multiblock_masks`:
M target blocks, one context block minus the targets); the context encoder
sees the context patches, the target encoder the whole image; the predictor
predicts each target block's tokens from the context; the loss is
`ssljax.losses.ijepa` (smooth-L1 to the layer-normalised targets).

What is probed: the target encoder (the paper evaluates it), with the
encoder's ``representation`` (the configs use "avg_tokens", the paper's
average-pooled tokens). ``train_representation`` (fine-tuning) reads the
context encoder, the trained weights.

Against the official code: with configs/ijepa.py's options (the linear
EMA momentum ``teacher.schedule = "linear"``, the cosine weight decay, the
official learning-rate warm-up start and step offset, PyTorch's Adam bias
corrections) the whole step equals the official training loop's to
float64 rounding over 20 steps (``benchmarks/step_parity.py --method
ijepa``, docs/fidelity.md). Index arrays are padded to static sizes and
the padding is kept out of attention and loss (equal numbers, fixed
shapes).

Cost: the official collator cuts every context of a batch to the batch's
smallest (about 50 of 196 patches at batch 128, ViT-B/16 at 224 px); padded
to its bound (169) the context would cost the context encoder and the
predictor (which sees it once per target block) 2-3 times their work and
memory. The step therefore cuts the context to the shortest of a few static
lengths that holds the batch's (`context_lengths`, one `jax.lax.switch`
branch per length, each recomputing its forward pass in the backward pass;
the long, rare lengths run the predictor one target block at a time).
Loss and gradient are those of the padded computation.
"""

import jax
import jax.numpy as jnp

from ssljax import config_rules as rules, losses, models

from ssljax.methods import masks
from ssljax.methods import (base, ema_teacher, masked_vit, networks,
                            single_network)

__all__ = ["Method", "context_lengths"]

_MASK_FIELDS = {
    "masks.num_targets": rules.integer(1),
    "masks.target_scale": rules.pair(0.0, 1.0),
    "masks.target_aspect": rules.pair(0.0, 100.0),
    "masks.context_scale": rules.pair(0.0, 1.0),
    "masks.min_keep": rules.integer(0),
}


def _smooth_l1(pred, target, valid):
  return losses.ijepa(pred, target, valid=valid)


class Method(ema_teacher.EMATeacherMixin, single_network.SingleNetworkMethod):
  """I-JEPA: predict target-encoder tokens of target blocks from a context
  block."""

  name = "ijepa"
  FORMS = {"smooth_l1": _smooth_l1}

  def __init__(self, config):
    super().__init__(config)
    encoder = networks.encoder_of(config)
    head = config.model.jepa_predictor
    predictor = models.JEPAPredictor(
        head.width, head.depth, head.num_heads, encoder.hidden_dim,
        dtype=networks.compute_dtype(config),
        weight_init=encoder.weight_init)
    self.network = models.IJEPANetwork(encoder, predictor)
    self.teacher_network = self.network
    self.encoder = encoder

  @classmethod
  def config_fields(cls, config):
    return {**_MASK_FIELDS, **masked_vit.head_fields("jepa_predictor"),
            **super().config_fields(config)}

  @classmethod
  def check_config(cls, config):
    problems = (super().check_config(config)
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
    """`ssljax.methods.masks.multiblock_masks` keywords of the config."""
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
    valid = m["target_valid"].reshape(num_targets * batch_size, t_max)
    bound = m["context"].shape[1]
    lengths = context_lengths(bound)
    branches = [self._context_loss(k, bound, len(lengths) > 1)
                for k in lengths]
    args = (params, x, m["context"], m["context_valid"], m["targets"],
            m["target_valid"], target, valid)
    if len(branches) == 1:
      loss = branches[0](*args)
    else:  # the shortest length that holds this batch's context
      index = jnp.searchsorted(jnp.asarray(lengths), m["num_context"])
      loss = jax.lax.switch(index, branches, *args)
    rep = masked_vit.token_representation(self.encoder, h, with_prefix=False)
    if rep is None:
      rep = self.representation(params, state, x)
    metrics = {"loss": loss,
               "context_patches": m["num_context"].astype(jnp.float32),
               "target_patches": m["num_target"].astype(jnp.float32)}
    return loss, base.LossAux(metrics, state, jax.lax.stop_gradient(rep))

  def _context_loss(self, length: int, bound: int, switched: bool):
    """The loss from the context cut to its first ``length`` positions
    (every valid one: ``length`` >= the batch's ``num_context``).

    Under `jax.lax.switch` each branch is a `jax.checkpoint`: a switch keeps
    the residuals of every branch for the backward pass, a checkpointed
    branch only its inputs (it recomputes its forward pass in the backward
    pass). Lengths above half the bound run the predictor one target block
    at a time (`jax.lax.scan` of a checkpointed body: the same rows, the
    activations of one block kept at a time), so that the rare long
    contexts need no more memory than the common short ones."""
    one_block_at_a_time = switched and 2 * length > bound
    network, form = self.network, self.FORMS[self.config.loss.form]

    def context_loss(params, x, context, context_valid, targets,
                     target_valid, target, valid):
      variables = {"params": params}
      keep, keep_valid = context[:, :length], context_valid[:, :length]
      ctx = network.apply(variables, x, keep, keep_valid,
                          method=models.IJEPANetwork.context)
      grid = masked_vit.patch_grid(x, self.encoder.patch_size)

      def predict(idx, idx_valid):
        return network.apply(variables, ctx, keep, idx, grid, keep_valid,
                             idx_valid, method=models.IJEPANetwork.predict)

      if one_block_at_a_time:
        body = jax.checkpoint(lambda _, t: (None, predict(t[0][None],
                                                          t[1][None])))
        _, pred = jax.lax.scan(body, None, (targets, target_valid))
        pred = pred.reshape(-1, *pred.shape[2:])  # (M·B, T, D)
      else:
        pred = predict(targets, target_valid)
      return form(pred, target, valid)

    return jax.checkpoint(context_loss) if switched else context_loss

  def representation(self, params, state, images):
    """The target encoder's representation (B, D) (the paper's choice)."""
    del params
    return self.network.apply({"params": state["teacher"]["params"]}, images,
                              method=models.IJEPANetwork.represent)

  def encoder_variables(self, params, state):
    """The target encoder (what ``representation`` probes)."""
    del params
    return self.encoder, {"params": state["teacher"]["params"]["encoder"]}

  def embedding(self, params, state, images):
    h = self.representation(params, state, images)
    return h, h


def context_lengths(bound: int) -> tuple:
  """The static lengths the context is cut to, ascending, the last ``bound``.

  The context of a batch has ``num_context`` valid positions (the batch's
  smallest context, as the official collator truncates), known only on the
  device; shapes under jit are static, so the positions come padded to the
  bound K_max (`ssljax.methods.masks.multiblock_bounds`: 169 of 196 patches for
  ViT-B/16 at 224 px), far above the usual ``num_context`` (about 50 at
  batch 128). The step runs the context encoder and the predictor at the
  shortest of these lengths that holds ``num_context``: the fractions 1/4,
  3/8, 1/2, 3/4 and 1 of the bound, rounded up to multiples of 8 (bounds
  under 64: the bound alone). The padding is masked out of attention and
  loss, so every length gives the same loss and gradient.

  Args:
    bound: K_max >= 1, the padded context length.

  Returns:
    tuple of ints, ascending, distinct, the last ``bound``.

  Raises:
    ValueError: bound < 1.

  Example:
    >>> context_lengths(169)
    (48, 64, 88, 128, 169)
  """
  if bound < 1:
    raise ValueError(f"the context bound must be >= 1, got {bound}")
  if bound < 64:
    return (bound,)
  sizes = {min(bound, -(-bound * num // (8 * den)) * 8)
           for num, den in ((1, 4), (3, 8), (1, 2), (3, 4), (1, 1))}
  return tuple(sorted(sizes))


def _mask_kwargs(config) -> dict:
  """The mask keywords of ``config.masks``."""
  mc = config.masks
  return dict(num_targets=mc.num_targets, target_scale=tuple(mc.target_scale),
              target_aspect=tuple(mc.target_aspect),
              context_scale=tuple(mc.context_scale), min_keep=mc.min_keep)
