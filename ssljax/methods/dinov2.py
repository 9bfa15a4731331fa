"""DINOv2 (Oquab et al. 2023, arXiv 2304.07193) and DINOv3 (Siméoni et al.
2025, arXiv 2508.10104) as a method.

Networks: a ViT student (``config.model.encoder``, its tokens) with a DINO
head on the backbone class token (``config.model.dino_head``) and an iBOT
head on the patch tokens: the DINO head itself
(``model.ibot_separate_head = False``, DINOv2's default config) or its own
(``model.ibot_head``, same fields); an EMA teacher of all of it
(`ssljax.methods.ema_teacher`: ``teacher.momentum`` ->
``teacher.final_momentum``), kept in ``state["teacher"]``.

A step: the G = 2 global crops are stacked crop-major (row g·B + b, the
official collate's order); `ssljax.methods.masks.dinov2_masks` masks
⌊2B·p⌋ of them (``masks.mask_sample_probability`` p, ratios in
``masks.mask_ratio_min_max``); the student sees the masked global crops
(masked patch embeddings replaced by its learned mask token,
`ssljax.models.VisionTransformer` ``masks``) and the L local crops
unmasked, the teacher the global crops unmasked. The loss is
`ssljax.losses.dinov2_terms` of the student's and teacher's DINO-head logits
of the class tokens, the iBOT-head logits of the masked patches (the M
patches in ``masks.flatten().nonzero()`` order) and the student's backbone
class tokens of the global crops (KoLeo), centred by Sinkhorn-Knopp or by
EMA centres (``loss.centering``; the centres live in ``state["dino_center"]``
and ``state["ibot_center"]``, each step centring with the one that includes
the previous step's teacher, as the official lazy update). The teacher
temperature is warmed up linearly (``loss.warmup_teacher_temperature`` ->
``loss.teacher_temperature`` over ``loss.teacher_temperature_warmup_epochs``).
``loss.version`` "dinov3" takes DINOv3's pair count; ``loss.gram_weight`` > 0
adds DINOv3's Gram anchoring (`ssljax.losses.gram_anchoring`) between the
student's patch tokens of the global crops (masked forward, after the final
LayerNorm) and those of a Gram teacher.

The Gram teacher here is the current EMA teacher's backbone (unmasked global
crops). The official DINOv3 uses a separate frozen snapshot of the EMA
teacher, refreshed every ``gram.it_load_ema_teacher`` iterations from
``gram.it_first_update`` on (and high-resolution Gram teacher inputs): not
reproduced.

The evaluators probe the teacher's backbone class token (``representation``,
``encoder_variables``), as DINOv2's official evaluation loads the teacher.

Other differences from the official code: masks are random patches with a
fixed count per masked crop (`ssljax.methods.masks.dinov2_masks`; the
official ``MaskingGenerator`` draws rectangular blocks and the ratio
uniformly within each crop's range); no stochastic depth, LayerScale,
layer-wise lr decay or patch-embedding lr multiplier (the ViT of
`ssljax.models` has none).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ssljax import config_rules as rules, losses, models
from ssljax.methods import (base, dino, ema_teacher, loss_config, masks,
                            networks, single_network)

__all__ = ["Method", "Network"]

_HEAD_KEYS = ("out_dim", "hidden_dim", "bottleneck_dim", "num_layers",
              "use_bn", "norm_last_layer")


def _head_fields(group: str) -> dict:
  return {f"model.{group}.out_dim": rules.integer(1),
          f"model.{group}.hidden_dim": rules.integer(1),
          f"model.{group}.bottleneck_dim": rules.integer(1),
          f"model.{group}.num_layers": rules.integer(1),
          f"model.{group}.use_bn": rules.boolean,
          f"model.{group}.norm_last_layer": rules.boolean}


_FIELDS = {
    **_head_fields("dino_head"),
    "model.ibot_separate_head": rules.boolean,
    "masks.mask_ratio_min_max": rules.anything,  # checked in check_config
    "masks.mask_sample_probability": rules.real(0.0, 1.0),
    "optim.freeze_last_layer_epochs": rules.real(0.0),
    "optim.frozen_adam_count": rules.one_of("advance", "hold"),
    # How the last layer is frozen: "gradient" (DINO's cancelled gradients)
    # or "learning_rate" (DINOv2's zero last-layer learning rate).
    "optim.freeze_last_layer_by": rules.one_of("gradient", "learning_rate"),
    "optim.weight_decay_mask": rules.one_of("kernels", "no_bias_norm"),
}


class Network(nn.Module):
  """ViT + DINO head (+ iBOT head): images (N, H, W, C) ->
  {"h": (N, D) backbone class token, "z": (N, K) DINO-head logits,
  "patch": (N, T, D) backbone patch tokens}; the tokens after the ViT's
  final LayerNorm, in its dtype.

  Attributes:
    encoder: a `ssljax.models.VisionTransformer` with a class token.
    projector: the DINO head (`ssljax.models.DINOHead`), on the class token.
    ibot_head: the iBOT head on patch tokens, or None: the DINO head.
  """
  encoder: nn.Module
  projector: nn.Module
  ibot_head: nn.Module | None = None

  def __call__(self, x, train: bool = True, masks=None) -> dict:
    tokens = self.encoder(x, train=train, output="tokens", masks=masks)
    h = tokens[:, 0]
    return {"h": h, "z": self.projector(h, train=train),
            "patch": tokens[:, 1:]}

  def patch_logits(self, tokens, train: bool = True):
    """(M, D) patch tokens -> (M, K) iBOT-head logits."""
    head = self.projector if self.ibot_head is None else self.ibot_head
    return head(tokens, train=train)

  def represent(self, x, train: bool = False):
    """The encoder output h (B, D) alone."""
    return self.encoder(x, train=train)


def _dinov2(*, version: str = "dinov2", centering: str = "centering",
            student_temperature: float = 0.1,
            teacher_temperature: float = 0.07,
            warmup_teacher_temperature: float = 0.04,
            teacher_temperature_warmup_epochs: float = 0.0,
            center_momentum: float = 0.9, dino_weight: float = 1.0,
            ibot_weight: float = 1.0, koleo_weight: float = 0.1,
            gram_weight: float = 0.0) -> dict:
  """DINOv2's ``config.loss`` hyper-parameters with the official defaults
  (ssl_default_config.yaml; ``gram_weight`` 0: no Gram anchoring)."""
  return dict(locals())


def _f32(x):
  return x.astype(jnp.promote_types(x.dtype, jnp.float32))


class Method(ema_teacher.EMATeacherMixin, single_network.SingleNetworkMethod):
  """DINOv2 / DINOv3: DINO + iBOT + KoLeo (+ Gram anchoring) with an EMA
  teacher."""

  name = "dinov2"
  FORMS = {"dinov2": _dinov2}
  # DINO's temperatures and centre momentum, plus the version and centring.
  HPARAM_RULES = {
      "version": rules.one_of(*losses.dinov2.VERSIONS),
      "centering": rules.one_of(*losses.dinov2.CENTERINGS),
      **dino.Method.HPARAM_RULES,
  }

  def __init__(self, config):
    super().__init__(config)
    dtype = networks.compute_dtype(config)
    head = lambda group: models.DINOHead(
        dtype=dtype, weight_norm=config.model[group].get("weight_norm", True),
        **{k: config.model[group][k] for k in _HEAD_KEYS})
    separate = config.model.get("ibot_separate_head", False)

    def make():
      return Network(networks.encoder_of(config), head("dino_head"),
                     head("ibot_head") if separate else None)

    self.network = make()
    self.teacher_network = make()
    self.encoder = self.network.encoder
    self.hparams = _dinov2(**loss_config.loss_hparams(config))

  @classmethod
  def config_fields(cls, config):
    fields = dict(_FIELDS)
    heads = ["dino_head"]
    if config.model.get("ibot_separate_head", False):
      fields.update(_head_fields("ibot_head"))
      heads.append("ibot_head")
    # Optional (absent: True, the weight-normalised head of DINO and
    # DINOv2); False: DINOv3's plain last layer.
    fields.update(rules.where_set(config, {
        f"model.{h}.weight_norm": rules.boolean for h in heads}))
    return {**fields, **super().config_fields(config)}

  @classmethod
  def check_config(cls, config):
    problems = super().check_config(config)
    if problems:
      return problems
    encoder = models.ENCODERS[config.model.encoder]
    if not issubclass(encoder, models.VisionTransformer):
      return [f"method 'dinov2' needs a ViT encoder (config.model.encoder ="
              f" 'vit_tiny16' or 'vit_small16'), got {config.model.encoder!r}"]
    kwargs = config.model.encoder_kwargs
    if not kwargs.get("class_token", True):
      problems.append("method 'dinov2' reads the class token: config.model."
                      "encoder_kwargs.class_token must be True")
    if config.views.num_global != 2:
      problems.append(f"method 'dinov2' needs config.views.num_global = 2"
                      f" (the official loss pairs 2 global crops), got"
                      f" {config.views.num_global}")
    groups = ["dino_head"] + (["ibot_head"] if config.model.get(
        "ibot_separate_head", False) else [])
    for group in groups:
      if config.model[group].use_bn:
        problems.append(f"config.model.{group}.use_bn must be False for"
                        " method 'dinov2' (its ViT heads have no BatchNorm)")
    if (len(groups) == 2 and config.model.ibot_head.out_dim
        != config.model.dino_head.out_dim):
      problems.append("config.model.ibot_head.out_dim must equal"
                      " model.dino_head.out_dim (losses.dinov2_terms takes"
                      " one K)")
    h = _dinov2(**loss_config.loss_hparams(config))
    if h["version"] == "dinov3" and h["centering"] != "sinkhorn_knopp":
      problems.append("config.loss.version='dinov3' needs config.loss."
                      f"centering='sinkhorn_knopp', got {h['centering']!r}")
    if config.batch_size < 2:
      problems.append(f"method 'dinov2' needs config.batch_size >= 2 (KoLeo"
                      f" needs a neighbour), got {config.batch_size}")
    ratios = config.masks.mask_ratio_min_max
    patch = kwargs.get("patch_size", encoder.patch_size)
    size = config.views.size or 28  # 0: the images' own (Fashion-MNIST)
    if size % patch:
      problems.append(f"config.views.size={size} is not divisible by the"
                      f" patch size {patch}")
    elif (not isinstance(ratios, (tuple, list)) or len(ratios) != 2
          or not all(isinstance(r, (int, float)) for r in ratios)):
      problems.append(f"config.masks.mask_ratio_min_max={ratios!r}: must be"
                      " (min, max) with 0 <= min <= max <= 1")
    else:
      try:
        masks.dinov2_mask_counts(
            2 * config.batch_size, (size // patch) ** 2,
            ratio_min_max=tuple(ratios),
            sample_probability=config.masks.mask_sample_probability)
      except ValueError as e:
        problems.append(
            f"config.masks.mask_ratio_min_max={tuple(ratios)} with"
            f" mask_sample_probability="
            f"{config.masks.mask_sample_probability}: {e}")
    return problems

  def _mask_kwargs(self):
    mc = self.config.masks
    return dict(ratio_min_max=tuple(mc.mask_ratio_min_max),
                sample_probability=mc.mask_sample_probability)

  def init(self, key, batch_spec):
    x = jnp.zeros((2, *batch_spec.view_shape), jnp.float32)
    grid = (x.shape[1] // self.encoder.patch_size,
            x.shape[2] // self.encoder.patch_size)
    m = jnp.zeros((2, grid[0] * grid[1]), bool)

    def full(module, x, m):
      out = module(x, train=False, masks=m)
      return out, module.patch_logits(out["patch"][:, 0], train=False)

    variables = self.network.init(key, x, m, method=full)
    params = variables["params"]
    teacher = jax.tree.map(jnp.copy, {"params": params, "batch_stats": {}})
    state = {"batch_stats": {}, "teacher": teacher}
    if self.hparams["centering"] == "centering":
      k = self.config.model.dino_head.out_dim
      state["dino_center"] = jnp.zeros((k,), jnp.float32)
      state["ibot_center"] = jnp.zeros((k,), jnp.float32)
    return params, state

  # τ_t at schedule["step"], DINO's: the linear warm-up then constant.
  teacher_temperature = dino.Method.teacher_temperature

  def outputs(self, params, teacher_params, views, key):
    """The network outputs one loss step reads.

    Args:
      params, teacher_params: student and teacher parameters.
      views: G = 2 global views (B, S, S, C) then L local views.
      key: PRNG key of the masks.

    Returns:
      dict: "masks" bool (2B, T); "student_global" (2, B, K),
      "student_local" (L, B, K), "teacher_global" (2, B, K),
      "student_patch" and "teacher_patch" (M, K) iBOT logits of the masked
      patches, "backbone_cls" (2, B, D) student class tokens,
      "student_tokens" and "teacher_tokens" (2B, T, D) backbone patch
      tokens, "teacher_cls" (2, B, D); logits at least float32.
    """
    g = self.config.views.num_global
    b = views[0].shape[0]
    # The network sees the global crops sample-major (rows (b, g): a batch
    # sharded over devices stays where it is, no image is gathered); the
    # masks and the loss are crop-major (row g·B + b), as the official
    # collate.
    x_global = jnp.stack(views[:g], axis=1).reshape(g * b, *views[0].shape[1:])
    num_patches = (x_global.shape[1] // self.encoder.patch_size) * (
        x_global.shape[2] // self.encoder.patch_size)
    mask_CxT = masks.dinov2_masks(key, g * b, num_patches,
                                  **self._mask_kwargs())
    count = int(sum(masks.dinov2_mask_counts(
        g * b, num_patches, **self._mask_kwargs())))
    flat = jnp.nonzero(mask_CxT.reshape(-1), size=count)[0]
    to_sample = lambda a: jnp.swapaxes(a.reshape(g, b, *a.shape[1:]), 0, 1
                                       ).reshape(g * b, *a.shape[1:])
    to_crop = lambda a: jnp.swapaxes(a.reshape(b, g, *a.shape[1:]), 0, 1
                                     ).reshape(g * b, *a.shape[1:])
    net = self.network
    s = net.apply({"params": params}, x_global, masks=to_sample(mask_CxT))
    t = net.apply({"params": teacher_params}, x_global)
    s = jax.tree.map(to_crop, s)
    t = jax.tree.map(lambda a: jax.lax.stop_gradient(to_crop(a)), t)
    dim = s["patch"].shape[-1]
    s_patch = net.apply({"params": params},
                        s["patch"].reshape(-1, dim)[flat],
                        method=Network.patch_logits)
    t_patch = jax.lax.stop_gradient(net.apply(
        {"params": teacher_params}, t["patch"].reshape(-1, dim)[flat],
        method=Network.patch_logits))
    local = views[g:]
    if local:
      x_local = jnp.stack(local, axis=1).reshape(
          len(local) * b, *local[0].shape[1:])  # sample-major rows
      sl = net.apply({"params": params}, x_local)["z"]
      sl = jnp.swapaxes(sl.reshape(b, len(local), -1), 0, 1)
    else:
      sl = jnp.zeros((0, b, s["z"].shape[-1]), s["z"].dtype)
    split = lambda a: a.reshape(g, b, *a.shape[1:])
    return {"masks": mask_CxT, "student_global": _f32(split(s["z"])),
            "student_local": _f32(sl), "teacher_global": _f32(split(t["z"])),
            "student_patch": _f32(s_patch), "teacher_patch": _f32(t_patch),
            "backbone_cls": _f32(split(s["h"])),
            "student_tokens": s["patch"], "teacher_tokens": t["patch"],
            "teacher_cls": split(t["h"])}

  def terms(self, outs, state, teacher_temperature):
    """`losses.dinov2_terms` (+ ``gram`` and its weight) of ``outputs``."""
    h = self.hparams
    centred = h["centering"] == "centering"
    terms = losses.dinov2_terms(
        outs["student_global"], outs["student_local"], outs["teacher_global"],
        outs["student_patch"], outs["teacher_patch"], outs["masks"],
        outs["backbone_cls"], centering=h["centering"],
        teacher_temperature=teacher_temperature,
        dino_center=state["dino_center"] if centred else None,
        ibot_center=state["ibot_center"] if centred else None,
        student_temperature=h["student_temperature"],
        koleo_weight=h["koleo_weight"], ibot_weight=h["ibot_weight"],
        dino_weight=h["dino_weight"], center_momentum=h["center_momentum"],
        version=h["version"])
    if h["gram_weight"] > 0:
      gram = h["gram_weight"] * losses.gram_anchoring(
          _f32(outs["student_tokens"]), _f32(outs["teacher_tokens"]))
      terms = {**terms, "gram": gram, "loss": terms["loss"] + gram}
    return terms

  def loss(self, params, state, batch, key, schedule):
    outs = self.outputs(params, state["teacher"]["params"], batch["views"],
                        key)
    tau_t = self.teacher_temperature(schedule)
    terms = self.terms(outs, state, tau_t)
    new = dict(state)
    for name in ("dino_center", "ibot_center"):
      if name in terms:
        new[name] = terms.pop(name).astype(state[name].dtype)
    metrics = {**terms, "teacher_temperature": tau_t,
               "masked_patches": jnp.sum(outs["masks"]).astype(jnp.float32)}
    return terms["loss"], base.LossAux(metrics, new,
                                       outs["teacher_cls"][0])

  def representation(self, params, state, images):
    """The teacher's backbone class token (B, D) (the official evaluation
    probes the teacher)."""
    del params
    return self.network.apply({"params": state["teacher"]["params"]}, images,
                              method=Network.represent)

  def encoder_variables(self, params, state):
    """The teacher's encoder (what ``representation`` probes)."""
    del params
    return self.encoder, {"params": state["teacher"]["params"]["encoder"]}

  def train_representation(self, params, state, images):
    h = self.network.apply({"params": params}, images,
                           method=Network.represent)
    return h, state

  def embedding(self, params, state, images):
    out = self.network.apply({"params": state["teacher"]["params"]}, images,
                             train=False)
    return out["h"], out["z"]
