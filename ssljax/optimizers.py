"""The optimiser of the network and its learning-rate schedule.

Both read ``config.optim`` (configs/common.py): ``name`` ("adamw" |
"lars"), ``learning_rate`` (peak, per batch of 256 samples),
``weight_decay``, ``warmup_epochs``, ``end_lr_factor``, ``clip_grad_norm``
(0: off) and ``clip_mode`` ("global" | "per_tensor" | "per_module"),
``adam_bias_correction`` ("optax" | "accurate"),
``weight_decay_schedule`` ("constant" | "cosine", to
``final_weight_decay``), ``schedule_scale`` (the schedules run over
``schedule_scale`` × the run's steps), ``warmup_start_factor`` (the
warm-up's first learning rate / peak), ``schedule_offset`` (update k reads
the learning-rate and weight-decay schedules at k + offset),
``adam_bias_correction``, optionally ``freeze_last_layer_epochs`` (DINO,
SwAV), ``freeze_last_layer_by`` (DINOv2), ``frozen_adam_count`` (DINO),
``normalize_last_layer`` (SwAV),
``b2`` (AdamW's β2; MAE's 0.95), ``weight_decay_mask`` (LeJEPA),
``layerwise_decay`` and ``patch_embed_lr_mult`` (DINOv2's per-block
learning rates of a ViT), ``bias_norm_lr_factor`` (Barlow Twins' rate of
biases and norms) and, for LARS only, ``lars.momentum``,
``lars.trust_coefficient``, ``lars.momentum_buffer`` ("updates" |
"gradients"), ``lars.trust_ratio`` ("update" | "larc") and ``lars.clip``.

The options exist because the official codes differ in them, and a
re-implementation that fixes one choice drifts from the others' steps:
DINO clips each tensor's gradient norm and ramps the weight decay from 0.04
to 0.4 on a cosine; I-JEPA ramps it too and can stretch every schedule by
``ipe_scale`` (1.25 by its code's default, 1.0 in its configs), starts its
warm-up at ``start_lr`` (0.2 × the peak in its configs) and steps its
schedulers before the update, so that update k reads them at k + 1, and
computes Adam's bias corrections in float64 as PyTorch does;
PyTorch's AdamW skips a parameter without gradient, so DINO's frozen last
layer starts its Adam step count when it thaws; MAE's AdamW takes β2 =
0.95 instead of PyTorch's and optax's 0.999. LeJEPA's minimal example
decays every parameter (one AdamW group) and warms up from 0.01 × the
peak (PyTorch's ``LinearLR(start_factor=0.01)``). MoCo v3's AdamW decays every
parameter too. The PyTorch LARS of MoCo v3 (and of VICReg and solo-learn)
and BYOL's own LARS keep a momentum of trust-scaled gradients and multiply
it by the current learning rate, where optax's LARS keeps a momentum of
learning-rate-scaled steps (the two differ whenever the learning rate
changes: in the warm-up and the decay). SwAV's official optimiser is SGD
inside apex's LARC, and solo-learn's LARS is the same rule: the trust
ratio divides by ‖g‖ + λ‖w‖ instead of ‖g + λw‖, SwAV's reaches every
parameter, and solo-learn's can be clipped at the learning rate.
"""

from collections.abc import Callable, Mapping
import math

import jax
import jax.numpy as jnp
import ml_collections
import optax

__all__ = ["create_learning_rate_fn", "create_optimizer", "freeze_while",
           "weight_decay_fn",
           "hold_while", "clip_by_tensor_norm", "clip_by_module_norm",
           "cosine_schedule",
           "unit_columns_after", "layerwise_lr_multipliers",
           "scale_by_layerwise_lr",
           "schedule_steps", "CLIP_MODES", "WEIGHT_DECAY_SCHEDULES",
           "WEIGHT_DECAY_MASKS", "FROZEN_ADAM_COUNTS", "FREEZE_MODES",
           "BIAS_CORRECTIONS",
           "LARS_MOMENTUM_BUFFERS", "LARS_TRUST_RATIOS", "LARC_EPS",
           "OPTIMIZERS", "SCHEDULE_UNITS",
           "scale_by_adam_accurate", "scale_by_larc"]

OPTIMIZERS = ("adamw", "lars", "sgd")
SCHEDULE_UNITS = ("step", "epoch")
CLIP_MODES = ("global", "per_tensor", "per_module")
WEIGHT_DECAY_SCHEDULES = ("constant", "cosine")
WEIGHT_DECAY_MASKS = ("kernels", "all", "no_bias_norm")
FROZEN_ADAM_COUNTS = ("advance", "hold")
FREEZE_MODES = ("gradient", "learning_rate")
BIAS_CORRECTIONS = ("optax", "accurate")
LARS_MOMENTUM_BUFFERS = ("updates", "gradients")
LARS_TRUST_RATIOS = ("update", "larc")
# ε of LARC's denominator (apex's LARC and solo-learn's LARS default).
LARC_EPS = 1e-8
# Adam's constants (optax.adamw's and torch.optim.AdamW's defaults).
_B1, _B2, _EPS = 0.9, 0.999, 1e-8


def schedule_steps(optim: ml_collections.ConfigDict, total_steps: int) -> int:
  """The length of the run's schedules: ``optim.schedule_scale`` (>= 1,
  default 1) × ``total_steps``, truncated to an int as I-JEPA's
  ``int(ipe_scale * num_epochs * ipe)`` (Assran et al. 2023, arXiv
  2301.08243, official ``ipe_scale``: with 1.25, its code's default, a run
  stops at 80 % of its learning-rate, weight-decay and EMA schedules; its
  configs use 1.0)."""
  return int(optim.get("schedule_scale", 1.0) * total_steps)


def _offset(schedule, optim):
  """``schedule`` read ``optim.schedule_offset`` (default 0) steps ahead,
  at a count of the default float dtype (float64 with x64 on: optax's
  schedules give float32 for the optimiser's int32 count, even then)."""
  offset = int(optim.get("schedule_offset", 0))
  return lambda count: schedule(jnp.asarray(count, float) + offset)


def cosine_schedule(start: float, end: float, steps: int
                    ) -> Callable[[int], jax.Array]:
  """step -> end + (start − end)·(1 + cos(π·min(step / steps, 1)))/2.

  The half-cosine from ``start`` (step 0) to ``end`` (step ``steps`` and
  after), rising or falling: DINO's ``cosine_scheduler`` without warm-up
  and I-JEPA's ``CosineWDSchedule`` (Caron et al. 2021, arXiv 2104.14294;
  Assran et al. 2023, arXiv 2301.08243; both official codes), read at the
  step the caller gives.

  Args:
    start, end: values at step 0 and at ``steps``.
    steps: length (int >= 1).

  Returns:
    a schedule: int step (traced or not) -> float value (float32, or
    float64 with x64 enabled).

  Raises:
    ValueError: steps < 1.
  """
  if steps < 1:
    raise ValueError(f"a cosine schedule needs steps >= 1, got {steps}")

  def schedule(step):
    progress = jnp.minimum(jnp.asarray(step, float) / steps, 1.0)
    return end + (start - end) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))

  return schedule


def scale_by_adam_accurate(b1: float = _B1, b2: float = _B2,
                           eps: float = _EPS) -> optax.GradientTransformation:
  """``optax.scale_by_adam`` with its bias corrections 1 − βᵗ computed as
  −expm1(t·ln β), ln β taken in float64.

  optax computes 1 − βᵗ in the moments' float type: in float32,
  1 − 0.999 is 1.3e-5 off (0.999 is not a float32 number and the
  subtraction cancels), so the first Adam updates are ~6e-6 off after the
  square root. PyTorch's AdamW computes its corrections as Python floats
  (float64); these are within float32 rounding of them. In float64 both
  forms agree to float64 rounding.

  Args:
    b1, b2: the moments' decay rates in [0, 1) (0.9, 0.999).
    eps: added to √v̂ (1e-8).

  Returns:
    an optax GradientTransformation whose state is
    ``optax.ScaleByAdamState`` (int32 count, mu and nu like the params).

  References:
    Kingma & Ba 2015, arXiv 1412.6980, Algorithm 1; Loshchilov & Hutter
    2019, arXiv 1711.05101 (AdamW).
  """
  log_b1, log_b2 = math.log(b1), math.log(b2)

  def init(params):
    return optax.ScaleByAdamState(count=jnp.zeros([], jnp.int32),
                                  mu=optax.tree.zeros_like(params),
                                  nu=optax.tree.zeros_like(params))

  def update(updates, state, params=None):
    del params
    mu = optax.tree.update_moment(updates, state.mu, b1, 1)
    nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
    count = optax.safe_increment(state.count)

    def corrected(moment, log_b):
      c = -jnp.expm1(count.astype(float) * log_b)  # 1 − β^count
      return jax.tree.map(lambda t: t / c.astype(t.dtype), moment)

    updates = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps),
                           corrected(mu, log_b1), corrected(nu, log_b2))
    return updates, optax.ScaleByAdamState(count=count, mu=mu, nu=nu)

  return optax.GradientTransformation(init, update)


def clip_by_tensor_norm(max_norm: float, eps: float = 1e-6
                        ) -> optax.GradientTransformation:
  """Rescales each gradient tensor on its own to L2 norm at most
  ``max_norm``: g ← g · c where c = max_norm / (‖g‖₂ + eps) < 1, else g.

  DINO's ``clip_gradients`` (Caron et al. 2021, arXiv 2104.14294, official
  utils.py: the same coefficient, eps 1e-6, per parameter tensor), where
  ``optax.clip_by_global_norm`` rescales all tensors by one coefficient.

  Args:
    max_norm: the largest norm of a tensor's gradient (float > 0).
    eps: added to the norm in the coefficient.

  Returns:
    a stateless optax GradientTransformation.
  """
  def update(updates, state, params=None):
    del params

    def clip(g):
      coef = max_norm / (jnp.linalg.norm(g.reshape(-1)) + eps)
      return jnp.where(coef < 1.0, g * coef.astype(g.dtype), g)

    return jax.tree.map(clip, updates), state

  return optax.GradientTransformation(lambda _: optax.EmptyState(), update)


# The ViT encoder's parameters before its first block (DINOv2's
# get_vit_lr_decay_rate: layer 0).
_VIT_EMBEDDINGS = ("patch_embed", "pos_embed", "cls_token", "mask_token",
                   "register_tokens")


def layerwise_lr_multipliers(params, decay: float,
                             patch_embed_lr_mult: float = 1.0):
  """Each parameter's learning-rate multiplier under layer-wise decay.

  A ViT encoder's block i (``params["encoder"]["block_i"]``, i from 0) is
  layer i + 1 of L blocks, its patch embedding, position table and class,
  mask and register tokens layer 0, everything else in it (the final norm)
  layer L + 1; layer l's multiplier is decay^(L + 1 − l). The patch
  embedding's is further multiplied by ``patch_embed_lr_mult``. Parameters
  outside the encoder (the heads) get 1. This is DINOv2's
  ``get_params_groups_with_decay`` (Oquab et al. 2023, arXiv 2304.07193;
  facebookresearch/dinov2 dinov2/utils/param_groups.py; its configs:
  decay 0.9, patch-embedding multiplier 0.2), after BEiT's layer-wise
  decay (Bao et al. 2021, arXiv 2106.08254). In PyTorch the multiplier
  scales a parameter group's learning rate, and AdamW's decoupled weight
  decay with it: the whole update.

  Args:
    params: the parameters' tree (nested dicts), with ``"encoder"``
      holding ``"block_0"`` … ``"block_{L-1}"``.
    decay: the per-block decay, in (0, 1].
    patch_embed_lr_mult: > 0.

  Returns:
    A tree of Python floats with the structure of ``params``.

  Raises:
    ValueError: ``params`` has no ``encoder/block_i`` entries (not a ViT).
  """
  encoder = params.get("encoder", {}) if isinstance(params, Mapping) else {}
  blocks = [k for k in encoder if k.startswith("block_")]
  if not blocks:
    raise ValueError("optim.layerwise_decay and optim.patch_embed_lr_mult "
                     "need a ViT encoder (parameters encoder/block_i); "
                     f"the encoder has {sorted(encoder)}")
  depth = len(blocks)

  def multiplier(path, _):
    keys = [str(getattr(k, "key", k)) for k in path]
    if keys[0] != "encoder":
      return 1.0
    name = keys[1]
    if name in _VIT_EMBEDDINGS:
      layer = 0
    elif name.startswith("block_"):
      layer = int(name[len("block_"):]) + 1
    else:
      layer = depth + 1
    rate = float(decay) ** (depth + 1 - layer)
    return rate * (patch_embed_lr_mult if name == "patch_embed" else 1.0)

  return jax.tree_util.tree_map_with_path(multiplier, params)


def scale_by_layerwise_lr(decay: float, patch_embed_lr_mult: float = 1.0
                          ) -> optax.GradientTransformation:
  """Scales each update by `layerwise_lr_multipliers` of its parameter
  (stateless; the multipliers come from the tree's names, so they are
  constants of the compiled step).

  Raises:
    ValueError: (at the first update) the tree has no ViT encoder blocks.
  """

  def update(updates, state, params=None):
    del params
    scale = layerwise_lr_multipliers(updates, decay, patch_embed_lr_mult)
    return jax.tree.map(lambda u, m: u if m == 1.0 else u * m, updates,
                        scale), state

  return optax.GradientTransformation(lambda _: optax.EmptyState(), update)


def clip_by_module_norm(max_norm: float, eps: float = 1e-6
                        ) -> optax.GradientTransformation:
  """Rescales the gradient of each top-level module on its own to global
  L2 norm at most ``max_norm``: for each entry ``updates[name]`` of the
  top-level dict, every tensor in it is multiplied by min(1, max_norm /
  (‖g‖₂ + eps)), ‖g‖₂ the norm over all of that module's tensors.

  DINOv2's clipping (Oquab et al. 2023, arXiv 2304.07193; official
  train.py: ``for v in model.student.values(): v.clip_grad_norm_(clip_grad)``,
  one call per student module: backbone, DINO head and, when separate, iBOT
  head; the coefficient and eps 1e-6 of ``torch.nn.utils.clip_grad_norm_``,
  which FSDP's method repeats). Between `clip_by_tensor_norm` (DINO's, per
  tensor) and ``optax.clip_by_global_norm`` (one coefficient for all).

  Args:
    max_norm: the largest norm of a module's gradient (float > 0).
    eps: added to the norm in the coefficient.

  Returns:
    a stateless optax GradientTransformation. Updates that are not a dict
    (or Mapping) are one module.
  """
  def clip(tree):
    norm = optax.tree.norm(tree)
    coef = jnp.minimum(max_norm / (norm + eps), 1.0)
    return jax.tree.map(lambda g: g * coef.astype(g.dtype), tree)

  def update(updates, state, params=None):
    del params
    if isinstance(updates, Mapping):
      updates = type(updates)({k: clip(v) for k, v in updates.items()})
    else:
      updates = clip(updates)
    return updates, state

  return optax.GradientTransformation(lambda _: optax.EmptyState(), update)


def scale_by_larc(weight_decay: float, trust_coefficient: float, *,
                  clip: bool = False, learning_rate_fn=None,
                  eps: float = LARC_EPS) -> optax.GradientTransformation:
  """LARC's layer-wise trust ratio with its weight decay, per tensor.

  Each gradient g of a parameter w becomes ``r · (g + λ w)`` with

      r = η ‖w‖ / (‖g‖ + λ ‖w‖ + ε)

  where both norms are non-zero, and stays g otherwise (no decay either).
  With ``clip`` the ratio is r / lr_k capped at 1, lr_k being the learning
  rate of this update, so that the step's rate is min(r, lr_k). A momentum
  of these updates times the learning rate (``optax.trace`` then
  ``optax.scale_by_learning_rate``) is the SGD that apex's ``LARC`` wraps
  in SwAV (``LARC(SGD(momentum=0.9), trust_coefficient=0.001,
  clip=False)`` on every parameter) and the LARS of solo-learn (``eta``,
  ``clip_lr``; ``exclude_bias_n_norm`` leaves 1-D tensors untouched: mask
  this transform to the kernels). The denominator differs from LARS's
  (You et al. 2017, arXiv 1708.03888, eq. 6 with the decay in the update:
  η ‖w‖ / ‖g + λ w‖, ``optax.scale_by_trust_ratio`` after
  ``optax.add_decayed_weights``, VICReg's and BYOL's LARS).

  A gradient zeroed upstream (a frozen parameter, `freeze_while`) passes as
  zero, so a momentum after it stays zero: PyTorch's optimiser skipping a
  parameter whose gradient is None (SwAV's frozen prototypes).

  Args:
    weight_decay: λ (float >= 0), added inside the ratio's branch.
    trust_coefficient: η (float > 0).
    clip: LARC's clipping mode (``clip=True``, solo-learn's ``clip_lr``).
    learning_rate_fn: step -> learning rate (or a constant); needed with
      ``clip``, called at this transform's own update count (0 at the
      first update).
    eps: ε of the denominator (LARC's and solo-learn's 1e-8).

  Returns:
    an optax GradientTransformation whose state holds the update count;
    updates have the gradients' shapes and dtypes.

  Raises:
    ValueError: ``clip`` without ``learning_rate_fn``.
  """
  if clip and learning_rate_fn is None:
    raise ValueError("scale_by_larc(clip=True) needs learning_rate_fn: the "
                     "clipped ratio is min(r / lr, 1)")
  if clip and not callable(learning_rate_fn):
    constant = learning_rate_fn
    learning_rate_fn = lambda count: constant

  def init(params):
    del params
    return optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

  def update(updates, state, params=None):
    if params is None:
      raise ValueError("scale_by_larc needs the parameters: its ratio is "
                       "η ‖w‖ / (‖g‖ + λ ‖w‖ + ε)")
    lr = learning_rate_fn(state.count) if clip else None

    def one(g, w):
      w_norm, g_norm = jnp.linalg.norm(w), jnp.linalg.norm(g)
      ratio = trust_coefficient * w_norm / (g_norm + weight_decay * w_norm
                                            + eps)
      if clip:
        ratio = jnp.minimum(ratio / lr, 1.0)
      scaled = (ratio * (g + weight_decay * w)).astype(g.dtype)
      return jnp.where((w_norm != 0) & (g_norm != 0), scaled, g)

    return (jax.tree.map(one, updates, params),
            optax.ScaleByScheduleState(
                count=optax.safe_increment(state.count)))

  return optax.GradientTransformation(init, update)


def hold_while(num_steps: int, inner: optax.GradientTransformation
               ) -> optax.GradientTransformation:
  """``inner`` that neither moves nor changes its state during the first
  ``num_steps`` calls: zero updates and the state kept as it was.

  Around ``optax.scale_by_adam`` this is PyTorch's AdamW on a parameter
  whose gradient is None (DINO's ``cancel_gradients_last_layer``): its
  moments and its step count start when it thaws, so its first bias
  corrections are those of step 1.

  Args:
    num_steps: calls (int >= 0) during which ``inner`` is held.
    inner: the transformation to hold.

  Returns:
    an optax GradientTransformation with state (count, inner state).
  """
  def init(params):
    return (jnp.zeros([], jnp.int32), inner.init(params))

  def update(updates, state, params=None):
    count, inner_state = state
    new_updates, new_inner = inner.update(updates, inner_state, params)
    held = count < num_steps
    new_updates = jax.tree.map(
        lambda u: jnp.where(held, jnp.zeros_like(u), u), new_updates)
    new_inner = jax.tree.map(lambda old, new: jnp.where(held, old, new),
                             inner_state, new_inner)
    return new_updates, (optax.safe_increment(count), new_inner)

  return optax.GradientTransformation(init, update)


def create_learning_rate_fn(optim: ml_collections.ConfigDict, batch_size: int,
                            steps_per_epoch: int, total_steps: int
                            ) -> Callable[[int], float]:
  """Linear warm-up from ``warmup_start_factor`` × peak (default 0) to the
  peak, then cosine decay to ``end_lr_factor`` × peak.

  At step i < W (W warm-up steps) the lr is peak·(f + (1 − f)·i/W), f the
  start factor: PyTorch's ``LinearLR(start_factor=f, total_iters=W)``
  (LeJEPA's minimal example: f = 0.01); from W on the half cosine over the
  remaining steps, PyTorch's ``CosineAnnealingLR(T_max=total − W)`` after
  it in ``SequentialLR``.

  With ``optim.schedule_unit`` "epoch" (default "step") the rate is held
  through each epoch at the value of its first step: SimSiam's
  ``adjust_learning_rate``, init_lr · ½ (1 + cos(π e / E)) set at the start
  of epoch e (Chen & He 2021, arXiv 2011.10566; its official
  main_simsiam.py), is this with no warm-up and ``end_lr_factor`` 0.

  Update k (0, 1, ...) reads the schedule at k + ``optim.schedule_offset``
  (default 0). I-JEPA's official ``WarmupCosineSchedule`` (Assran et al.
  2023, arXiv 2301.08243, src/utils/schedulers.py) is this schedule with
  the factor ``start_lr / lr`` (0.2 in its configs) and offset 1: its
  ``step()`` advances its count before the update it sets the rate of, so
  the first update already has 1/warmup of the warm-up. DINO's
  ``cosine_scheduler`` is offset 0 from 0 (Caron et al. 2021, arXiv
  2104.14294).

  Args:
    optim: ``config.optim``: ``learning_rate`` (peak lr per 256 samples),
      ``warmup_epochs`` (epochs, may be fractional), ``end_lr_factor``
      (final lr / peak lr); optionally ``warmup_start_factor`` (in [0, 1])
      and ``schedule_offset`` (int >= 0).
    batch_size: global batch of samples; the peak lr is
      ``learning_rate · batch_size / 256`` (linear scaling).
    steps_per_epoch: optimiser steps in one epoch (converts warmup_epochs
      to steps).
    total_steps: optimiser steps of the whole run; the decay ends at
      `schedule_steps` (``optim.schedule_scale`` × total_steps, when the
      config has it; else total_steps).

  Returns:
    an optax schedule: step (int) -> learning rate (float32, float64 with
    x64 on). The warm-up is at most ``total_steps − 1`` steps.

  Raises:
    ValueError: ``warmup_start_factor`` outside [0, 1]; an unknown
      ``schedule_unit``.
  """
  peak = optim.learning_rate * batch_size / 256
  warmup = min(int(optim.warmup_epochs * steps_per_epoch), total_steps - 1)
  start = optim.get("warmup_start_factor", 0.0)
  if not 0.0 <= start <= 1.0:
    raise ValueError(f"optim.warmup_start_factor must be in [0, 1], got "
                     f"{start!r}")
  unit = optim.get("schedule_unit", "step")
  if unit not in SCHEDULE_UNITS:
    raise ValueError(f"unknown optim.schedule_unit {unit!r}; expected one of"
                     f" {SCHEDULE_UNITS}")
  schedule = optax.warmup_cosine_decay_schedule(
      init_value=peak * start,
      peak_value=peak, warmup_steps=max(warmup, 0),
      decay_steps=max(schedule_steps(optim, total_steps), 1),
      end_value=peak * optim.end_lr_factor)
  if unit == "epoch":
    # Held through each epoch at its first step's value.
    per_step = schedule
    schedule = lambda count: per_step(
        jnp.floor(count / steps_per_epoch) * steps_per_epoch)
  return _offset(schedule, optim)


def weight_decay_fn(optim: ml_collections.ConfigDict, total_steps: int
                    ) -> Callable[[int], jax.Array]:
  """The cosine weight-decay schedule of ``optim``: `cosine_schedule` from
  ``weight_decay`` to ``final_weight_decay`` over `schedule_steps`, update
  k reading it at k + ``optim.schedule_offset`` (I-JEPA's
  ``CosineWDSchedule`` steps before the update: offset 1; DINO's
  ``cosine_scheduler``: 0).

  Args:
    optim: ``config.optim`` (see `create_optimizer`).
    total_steps: the run's optimiser steps (int >= 1).

  Returns:
    a schedule: int update count -> weight decay (float).

  Raises:
    ValueError: total_steps < 1.
  """
  if not total_steps or total_steps < 1:
    raise ValueError("a cosine weight-decay schedule needs the run's "
                     "total_steps")
  return _offset(cosine_schedule(
      optim.weight_decay, optim.final_weight_decay,
      max(schedule_steps(optim, total_steps), 1)), optim)


def _decay_mask(params):
  # Weight decay and LARS trust ratios on kernels only, as in VICReg/BYOL.
  return jax.tree.map(lambda p: p.ndim > 1, params)


def _all_mask(params):
  # Every parameter (LeJEPA's minimal example: one AdamW group).
  return jax.tree.map(lambda p: True, params)


def _no_bias_norm_mask(params):
  # DINOv2's get_params_groups_with_decay: no decay for a name ending in
  # ".bias" or holding "norm" (or "gamma"); every other tensor decays, the
  # class and mask tokens, the position embedding and the last layer's g
  # included. "norm" is matched without case (flax's LayerNorm_0).
  def decays(path, _):
    names = [str(getattr(k, "key", k)) for k in path]
    return not (names and names[-1] == "bias") and not any(
        "norm" in n.lower() or "gamma" in n for n in names)
  return jax.tree_util.tree_map_with_path(decays, params)


def _is_last_layer(path) -> bool:
  # DINO's weight-normalised last layer: "last_layer_v" (and "last_layer_g");
  # DINOv3's plain one "last_layer"; SwAV's prototypes "last_layer".
  return any("last_layer" in str(getattr(k, "key", k)) for k in path)


def _last_layer_mask(params):
  return jax.tree_util.tree_map_with_path(
      lambda path, _: _is_last_layer(path), params)


def freeze_while(num_steps: int, mask) -> optax.GradientTransformation:
  """Zeroes the gradients/updates of the ``mask``-ed parameters during the
  first ``num_steps`` calls (its own step counter), then passes them on.

  Chained before and after an optimiser, a frozen parameter gets a zero
  gradient (its moments stay where they were: zero at the start) and a
  zero update (no weight decay either), so it does not move: DINO's
  ``freeze_last_layer`` (Caron et al. 2021, arXiv 2104.14294, official
  code: the last layer's gradients are cancelled during the first epoch).
  Unlike PyTorch, where a parameter without gradient is skipped, optax's
  Adam step count still advances for it, so its first bias corrections
  after the freeze differ.

  Args:
    num_steps: steps (int >= 0) during which the masked leaves are frozen.
    mask: pytree of bools like the params, or a function params -> such.

  Returns:
    an optax GradientTransformation with state (count,).
  """
  def init(params):
    del params
    return optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

  def update(updates, state, params=None):
    frozen = state.count < num_steps
    flags = mask(updates) if callable(mask) else mask
    updates = jax.tree.map(
        lambda u, m: jnp.where(frozen & m, jnp.zeros_like(u), u),
        updates, flags)
    return updates, optax.ScaleByScheduleState(
        count=optax.safe_increment(state.count))

  return optax.GradientTransformation(init, update)


def unit_columns_after(mask) -> optax.GradientTransformation:
  """Updates after which the masked kernels have unit-norm columns.

  Last in a chain, it turns each masked update u of a 2-D parameter p into
  normalize(p + u) − p, normalize scaling every column (one output unit of
  a (in, out) kernel) to L2 norm 1, so the parameter after the step is the
  normalised one; an all-zero update (a frozen layer) stays zero. SwAV
  normalises its prototypes at the start of every iteration, before the
  forward pass and the optimiser step (Caron et al. 2020, arXiv
  2006.09882, official main_swav.py); keeping them normalised after each
  step, and at initialisation, gives the same iterates.

  Args:
    mask: pytree of bools like the params, or a function params -> such;
      masked leaves must be 2-D.

  Returns:
    an optax GradientTransformation without state; its update needs params.
  """
  def init(params):
    del params
    return optax.EmptyState()

  def update(updates, state, params=None):
    if params is None:
      raise ValueError("unit_columns_after needs the params in update()")
    flags = mask(params) if callable(mask) else mask

    def project(u, p, m):
      if not m:
        return u
      new = p + u
      norms = jnp.sqrt(jnp.sum(new * new, axis=0, keepdims=True))
      # A zero update (a frozen layer) stays zero: p is already normalised.
      return jnp.where(jnp.any(u != 0), new / jnp.maximum(norms, 1e-12) - p,
                       jnp.zeros_like(u))

    return jax.tree.map(project, updates, params, flags), state

  return optax.GradientTransformation(init, update)


def create_optimizer(optim: ml_collections.ConfigDict,
                     learning_rate_fn, steps_per_epoch: int = 1,
                     total_steps: int | None = None
                     ) -> optax.GradientTransformation:
  """optax AdamW, LARS or SGD from ``config.optim``, with optional clipping,
  weight-decay schedule and freezing.

  Weight decay (and LARS's trust ratio) applies to parameters with ndim > 1
  only (kernels), not to biases or BatchNorm scales and offsets (as the
  official VICReg, BYOL, DINO and I-JEPA codes group them): the default
  ``weight_decay_mask`` "kernels". With "all" (AdamW only) every parameter
  decays, as LeJEPA's minimal example (rbalestr-lab/lejepa MINIMAL.md: the
  network's parameters in one AdamW group) and MoCo v3's AdamW
  (``torch.optim.AdamW(model.parameters())``). With "no_bias_norm" (AdamW
  only) every parameter but biases and those of a normalisation layer
  decays, by name, as DINOv2's parameter groups: 1-D tensors such as the
  DINO head's trainable ``last_layer_g`` decay too.

  * ``name`` "sgd": PyTorch's ``torch.optim.SGD`` with momentum
    ``sgd.momentum`` (dampening 0, no Nesterov) and coupled weight decay
    (λw added to the gradient before the momentum) on the
    ``weight_decay_mask`` tensors (SimSiam's official optimiser: every
    parameter, "all"; Chen & He 2021, arXiv 2011.10566, Sec. 4).
  * ``lars.trust_ratio`` (LARS only): "update" (the default when the
    field is absent: η ‖w‖ / ‖g + λw‖, optax's, VICReg's and BYOL's LARS)
    or "larc" (`scale_by_larc`: η ‖w‖ / (‖g‖ + λ‖w‖ + ε), apex's LARC of
    SwAV and solo-learn's LARS; needs ``lars.momentum_buffer``
    "gradients", and with ``weight_decay_mask`` "all" reaches every
    parameter, as SwAV's LARC); ``lars.clip`` (default False; "larc"
    only): LARC's clipping, the ratio capped at the learning rate
    (solo-learn's ``clip_lr``).
  * ``lars.momentum_buffer`` (LARS only): "updates" (the default when the
    field is absent; ``optax.lars``: μ ← m μ + lr_k · u_k, step −μ) or
    "gradients" (the PyTorch LARS of MoCo v3, VICReg and solo-learn and
    BYOL's own: μ ← m μ + u_k, step −lr_k · μ), u_k being the trust-scaled,
    decayed gradient. They differ whenever the learning rate changes.

  * Clipping (``clip_grad_norm`` > 0): ``clip_mode`` "global" rescales the
    whole gradient to that global L2 norm (``optax.clip_by_global_norm``),
    "per_tensor" each tensor to it (`clip_by_tensor_norm`, DINO's),
    "per_module" each top-level entry of the parameters (encoder, heads) to
    it (`clip_by_module_norm`, DINOv2's).
  * ``weight_decay_schedule`` "cosine" (AdamW only): the decay follows
    `weight_decay_fn`, `cosine_schedule` from ``weight_decay`` to
    ``final_weight_decay`` over `schedule_steps` (DINO's and I-JEPA's
    0.04 -> 0.4); "constant" (the default when the field is absent):
    ``weight_decay`` throughout.
  * ``freeze_last_layer_epochs`` > 0 (DINO, SwAV): the parameters named
    ``last_layer*`` do not move during that many epochs (`freeze_while`;
    no weight decay either). ``frozen_adam_count`` says what Adam's step
    count does for them meanwhile: "advance" (optax's one count for all
    parameters) or "hold" (AdamW only; PyTorch's per-parameter count, which
    skips a parameter without gradient: `hold_while`).
    ``freeze_last_layer_by`` says how they are frozen: "gradient" (the
    default; DINO's and SwAV's cancelled gradients: the gradient is zeroed
    before the optimiser, so Adam's moments stay at zero) or
    "learning_rate" (DINOv2's: its last-layer learning-rate schedule is 0
    meanwhile, so Adam's moments and step count keep following the
    gradient and only the move is zero; needs ``frozen_adam_count``
    "advance").
  * ``adam_bias_correction`` (AdamW only): "optax" (the default:
    ``optax.scale_by_adam``, whose 1 − βᵗ is computed in the parameters'
    float type) or "accurate" (`scale_by_adam_accurate`, PyTorch's AdamW
    to float32 rounding).
  * ``normalize_last_layer`` (SwAV's prototypes): the 2-D ``last_layer*``
    kernels end every step with unit-norm columns (`unit_columns_after`).
  * ``layerwise_decay`` (in (0, 1], default 1) and ``patch_embed_lr_mult``
    (> 0, default 1): each update of a ViT encoder's block i of L is
    multiplied by decay^(L − i), its embeddings' by decay^(L + 1) (the
    patch embedding's also by the multiplier), as DINOv2's parameter
    groups do (`layerwise_lr_multipliers`); the heads' keep theirs.
  * ``bias_norm_lr_factor`` (> 0, default 1): the learning rate of
    one-dimensional parameters (biases, normalisation scales and offsets)
    is that times the others' (Barlow Twins' official parameter groups:
    0.0048 for them against 0.2, a factor 0.024; Zbontar et al. 2021,
    arXiv 2103.03230, Sec. 4). It scales their whole update, which is
    exact for the "gradients" LARS buffer and AdamW, whose states do not
    hold the rate, and for the "updates" buffer, which is linear in it.
  * ``b2`` (AdamW only; default 0.999, PyTorch's and optax's): Adam's β2,
    the decay of the squared-gradient average. MAE's official AdamW takes
    0.95 (He et al. 2022, arXiv 2111.06377, App. A.1 Table 8;
    main_pretrain.py's ``betas=(0.9, 0.95)``).

  Args:
    optim: ``config.optim``: ``name`` ("adamw" | "lars" | "sgd"),
      ``weight_decay``,
      ``clip_grad_norm`` (float >= 0, 0: no clipping); optionally
      ``clip_mode``, ``weight_decay_schedule``, ``final_weight_decay``,
      ``schedule_scale``, ``schedule_offset`` (int >= 0: the weight decay
      of update k is read at k + offset), ``freeze_last_layer_epochs``
      (float >= 0), ``freeze_last_layer_by``, ``frozen_adam_count``,
      ``normalize_last_layer`` (bool),
      ``b2`` (float in [0, 1)), ``adam_bias_correction``,
      ``weight_decay_mask``; for "lars" also ``lars.momentum`` (heavy-ball
      momentum in [0, 1)), ``lars.trust_coefficient`` (η of the
      layer-wise trust ratio, > 0) and optionally ``lars.momentum_buffer``,
      ``lars.trust_ratio`` and ``lars.clip``; for "sgd" ``sgd.momentum``.
    learning_rate_fn: a schedule step -> lr (`create_learning_rate_fn`) or
      a constant lr.
    steps_per_epoch: converts ``freeze_last_layer_epochs`` to steps.
    total_steps: the run's optimiser steps; needed (int >= 1) for the
      cosine weight-decay schedule.

  Returns:
    the optax GradientTransformation. Its state is the bare optimiser's
    unless clipping, a weight-decay schedule or freezing is on (then an
    ``optax.chain`` state).

  Raises:
    ValueError: an unknown ``optim.name``, ``clip_mode``,
      ``weight_decay_schedule``, ``frozen_adam_count`` or
      ``weight_decay_mask``, ``adam_bias_correction``,
      ``lars.momentum_buffer`` or ``lars.trust_ratio``; "larc" without the
      "gradients" buffer, ``lars.clip`` without "larc"; ``b2`` outside
      [0, 1); ``layerwise_decay`` outside (0, 1] or
      ``patch_embed_lr_mult`` <= 0 (and, at the first update, either set on
      parameters without ViT blocks); ``bias_norm_lr_factor`` <= 0; a cosine weight-decay schedule, a
      held Adam count, the "no_bias_norm" mask, the "all" mask (but with
      "larc") or accurate bias corrections with LARS; a cosine weight-decay
      schedule without ``total_steps``.
  """
  clip_mode = optim.get("clip_mode", "global")
  wd_schedule = optim.get("weight_decay_schedule", "constant")
  count_mode = optim.get("frozen_adam_count", "advance")
  freeze_by = optim.get("freeze_last_layer_by", "gradient")
  b2 = optim.get("b2", _B2)
  if not 0.0 <= b2 < 1.0:
    raise ValueError(f"optim.b2 must be in [0, 1), got {b2}")
  mask_mode = optim.get("weight_decay_mask", "kernels")
  bias = optim.get("adam_bias_correction", "optax")
  lars = optim.get("lars", None)
  buffer = lars.get("momentum_buffer", "updates") if lars else "updates"
  trust = lars.get("trust_ratio", "update") if lars else "update"
  larc_clip = bool(lars.get("clip", False)) if lars else False
  for value, allowed, name in ((optim.name, OPTIMIZERS, "optimiser"),
                               (buffer, LARS_MOMENTUM_BUFFERS,
                                "lars.momentum_buffer"),
                               (trust, LARS_TRUST_RATIOS,
                                "lars.trust_ratio"),
                               (mask_mode, WEIGHT_DECAY_MASKS,
                                "weight_decay_mask"),
                               (clip_mode, CLIP_MODES, "clip_mode"),
                               (wd_schedule, WEIGHT_DECAY_SCHEDULES,
                                "weight_decay_schedule"),
                               (count_mode, FROZEN_ADAM_COUNTS,
                                "frozen_adam_count"),
                               (freeze_by, FREEZE_MODES,
                                "freeze_last_layer_by"),
                               (bias, BIAS_CORRECTIONS,
                                "adam_bias_correction")):
    if value not in allowed:
      raise ValueError(f"unknown {name} {value!r}; expected one of {allowed}")
  freeze_steps = int(round(optim.get("freeze_last_layer_epochs", 0.0)
                           * steps_per_epoch))
  hold = freeze_steps > 0 and count_mode == "hold"
  if hold and freeze_by == "learning_rate":
    raise ValueError("optim.freeze_last_layer_by='learning_rate' keeps Adam's"
                     " step count moving (a zero learning rate, DINOv2's):"
                     " it needs optim.frozen_adam_count='advance', not"
                     " 'hold'")
  larc = optim.name == "lars" and trust == "larc"
  if optim.name == "sgd" and (wd_schedule != "constant" or hold
                              or bias != "optax"):
    raise ValueError("optim.weight_decay_schedule='cosine', "
                     "optim.frozen_adam_count='hold' and "
                     "optim.adam_bias_correction='accurate' need "
                     "optim.name='adamw', not 'sgd'")
  if optim.name == "lars" and (
      wd_schedule != "constant" or hold or bias != "optax"
      or mask_mode == "no_bias_norm" or (mask_mode == "all" and not larc)):
    raise ValueError("optim.weight_decay_schedule='cosine', "
                     "optim.frozen_adam_count='hold', "
                     "optim.weight_decay_mask='no_bias_norm' and "
                     "optim.adam_bias_correction='accurate' need "
                     "optim.name='adamw'; optim.weight_decay_mask='all' "
                     "needs adamw or LARS with optim.lars.trust_ratio="
                     "'larc'")
  if optim.name == "lars" and larc_clip and not larc:
    raise ValueError("optim.lars.clip needs trust_ratio 'larc' (LARC's "
                     f"clipping), got trust_ratio {trust!r}")
  if larc and buffer != "gradients":
    raise ValueError("optim.lars.trust_ratio='larc' is the SGD that LARC "
                     "wraps: it needs optim.lars.momentum_buffer='gradients',"
                     f" got {buffer!r}")
  decay_mask = {"kernels": _decay_mask, "all": _all_mask,
                "no_bias_norm": _no_bias_norm_mask}[mask_mode]
  if optim.name == "sgd":
    # torch.optim.SGD: the decay added to the gradient, a momentum of
    # those (dampening 0), times the current lr.
    tx = optax.chain(
        optax.add_decayed_weights(optim.weight_decay, decay_mask),
        optax.trace(decay=optim.sgd.momentum),
        optax.scale_by_learning_rate(learning_rate_fn))
  elif larc:
    # LARC around SGD: the ratio and the decay (on the mask's tensors; the
    # others keep their gradient), a momentum of those, times the lr.
    tx = optax.chain(
        optax.masked(scale_by_larc(optim.weight_decay,
                                   optim.lars.trust_coefficient,
                                   clip=larc_clip,
                                   learning_rate_fn=learning_rate_fn),
                     decay_mask),
        optax.trace(decay=optim.lars.momentum),
        optax.scale_by_learning_rate(learning_rate_fn))
  elif optim.name == "lars" and buffer == "updates":
    tx = optax.lars(learning_rate_fn, weight_decay=optim.weight_decay,
                    weight_decay_mask=_decay_mask, trust_ratio_mask=_decay_mask,
                    trust_coefficient=optim.lars.trust_coefficient,
                    momentum=optim.lars.momentum)
  elif optim.name == "lars":
    # optax.lars with the momentum before the learning rate.
    tx = optax.chain(
        optax.add_decayed_weights(optim.weight_decay, _decay_mask),
        optax.masked(optax.scale_by_trust_ratio(
            trust_coefficient=optim.lars.trust_coefficient), _decay_mask),
        optax.trace(decay=optim.lars.momentum),
        optax.scale_by_learning_rate(learning_rate_fn))
  elif wd_schedule == "constant" and not hold and bias == "optax":
    tx = optax.adamw(learning_rate_fn, b1=_B1, b2=b2, eps=_EPS,
                     weight_decay=optim.weight_decay, mask=decay_mask)
  else:
    # optax.adamw written out: Adam's scaling, decoupled weight decay, lr.
    scale_by_adam = (scale_by_adam_accurate if bias == "accurate"
                     else optax.scale_by_adam)
    adam = lambda: scale_by_adam(b1=_B1, b2=b2, eps=_EPS)
    if hold:
      labels = lambda params: jax.tree.map(
          lambda frozen: "frozen" if frozen else "rest",
          _last_layer_mask(params))
      scale = optax.multi_transform(
          {"frozen": hold_while(freeze_steps, adam()), "rest": adam()},
          labels)
    else:
      scale = adam()
    if wd_schedule == "cosine":
      decay = optax.inject_hyperparams(
          optax.add_decayed_weights, static_args=("mask",))(
              weight_decay=weight_decay_fn(optim, total_steps),
              mask=decay_mask)
    else:
      decay = optax.add_decayed_weights(optim.weight_decay, decay_mask)
    tx = optax.chain(scale, decay,
                     optax.scale_by_learning_rate(learning_rate_fn))
  decay_rate = optim.get("layerwise_decay", 1.0)
  embed_mult = optim.get("patch_embed_lr_mult", 1.0)
  if not 0.0 < decay_rate <= 1.0 or not embed_mult > 0.0:
    raise ValueError("optim.layerwise_decay must be in (0, 1] and "
                     "optim.patch_embed_lr_mult > 0, got "
                     f"{decay_rate} and {embed_mult}")
  if decay_rate != 1.0 or embed_mult != 1.0:
    # The group's learning rate times the multiplier: the whole update.
    tx = optax.chain(tx, scale_by_layerwise_lr(decay_rate, embed_mult))
  bias_factor = optim.get("bias_norm_lr_factor", 1.0)
  if not bias_factor > 0.0:
    raise ValueError("optim.bias_norm_lr_factor must be > 0, got "
                     f"{bias_factor}")
  if bias_factor != 1.0:
    # The update is linear in its group's rate (the momentum buffers and
    # Adam's moments do not hold it): scaling it is that group's rate.
    tx = optax.chain(tx, optax.masked(
        optax.scale(bias_factor),
        lambda params: jax.tree.map(lambda p: p.ndim <= 1, params)))
  chain = [tx]
  if freeze_steps > 0 and freeze_by == "learning_rate":
    # Only the move is zeroed: Adam sees the gradient (DINOv2).
    chain = [tx, freeze_while(freeze_steps, _last_layer_mask)]
  elif freeze_steps > 0:
    chain = [freeze_while(freeze_steps, _last_layer_mask), tx,
             freeze_while(freeze_steps, _last_layer_mask)]
  if optim.get("normalize_last_layer", False):
    chain.append(unit_columns_after(
        lambda params: jax.tree.map(lambda m, p: m and p.ndim == 2,
                                    _last_layer_mask(params), params)))
  clip = optim.get("clip_grad_norm", 0.0)
  if clip:
    chain.insert(0, {"global": optax.clip_by_global_norm,
                     "per_tensor": clip_by_tensor_norm,
                     "per_module": clip_by_module_norm}[clip_mode](clip))
  return chain[0] if len(chain) == 1 else optax.chain(*chain)
