"""DINOv2 and DINOv3: the composed training loss and DINOv3's Gram anchoring.

DINOv2 (Oquab et al. 2023) trains a student against an EMA teacher with
three terms: the DINO cross-entropy between the teacher's class-token
distribution of each global crop and the student's of every other crop, the
iBOT cross-entropy on masked patches (`ssljax.losses.ibot`), and the KoLeo
regulariser on the student's backbone class token (`ssljax.losses.koleo`).
The teacher's distributions are centred either by Sinkhorn-Knopp
(`ssljax.losses.sinkhorn_knopp`: DINOv2's ViT-L/14 and ViT-g/14 recipes,
the only choice DINOv3 accepts) or by DINO's EMA centre and a softmax
(DINOv2's default config). DINOv3 (Siméoni et al. 2025) keeps the three terms
and adds Gram anchoring (`gram_anchoring`): the student's patch-to-patch
cosine similarities are pulled towards those of an earlier "Gram teacher".

`dinov2_terms` is the composition of the official ``SSLMetaArch`` (DINOv2's
``forward_backward``, DINOv3's ``compute_losses``), checked against their
code. What a re-implementation easily gets wrong, and this one matches:

* Pairs. There are G = 2 global crops and L local ones. The global DINO
  term pairs each student global crop with the teacher of the other one
  (DINOv2 swaps the teacher's two chunks; DINOv3 drops the diagonal,
  ``ignore_diagonal=True``): 2 pairs. The local term pairs every local crop
  with both teacher crops: 2L pairs. Both are sums of per-pair means over
  the batch divided by one common count, n_global + n_local.
* That count. DINOv2 uses n_global = 2 and n_local = max(2L, 1): with no
  local crop the global term is divided by 3, not 2. DINOv3 uses 2 + 2L
  (divided by 2 with no local crop; its local term is then 0/0 = NaN in the
  official code, here 0).
* KoLeo. Computed separately on each global crop's B backbone class tokens,
  weighted 0.1 and summed (not averaged) over the two crops.
* iBOT. Divided by the number of global crops C = 2B, unmasked included
  (`ssljax.losses.ibot`); DINOv2's extra factors 2 · 1/2 cancel.
* Centring (``centering="centering"``) is lazy: the official loss applies,
  at the start of a step, the centre update queued by the previous step, so
  a step centres with the centre that includes the previous step's teacher.
  Here the caller passes that centre and receives the next one.

Left to the caller or not reproduced: DINOv3's optional local-loss
weight schedule (``reweight_dino_local_loss``, off by default); and under
several processes the official iBOT centre averages the per-process means
of the masked patches (processes hold different numbers of them), where
the centre here is the mean of all M rows.

The official code logs some terms rescaled (DINOv2 logs koleo/2 and ibot/2,
DINOv3 logs the per-pair means); the values here are the contributions to
the loss it backpropagates, so ``loss`` is their sum.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ssljax import checks
from ssljax.losses.ibot import ibot
from ssljax.losses.koleo import koleo
from ssljax.losses.sinkhorn import sinkhorn_knopp

__all__ = ["dinov2_terms", "gram_anchoring"]

CENTERINGS = ("sinkhorn_knopp", "centering")
VERSIONS = ("dinov2", "dinov3")


def _rank3(x, name: str, what: str, *, allow_empty_first: bool = False):
  x = checks.as_float(x)
  empty = 0 in (x.shape[1:] if allow_empty_first else x.shape)
  if x.ndim != 3 or empty:
    raise ValueError(f"{name} must be a non-empty rank-3 {what} array, got"
                     f" shape {x.shape}")
  checks.check_finite(x, name)
  return x


def _center(center, k: int, name: str):
  if center is None:
    raise ValueError(f"{name} is required with centering='centering' (zeros"
                     f" at the first step), got None")
  c_K = checks.as_float(center)
  if c_K.shape != (k,):
    raise ValueError(f"{name} must have shape (K,) = ({k},), got shape"
                     f" {c_K.shape}")
  checks.check_finite(c_K, name)
  return c_K


@checks.float32_matmuls
def dinov2_terms(
    student_global: jax.typing.ArrayLike,
    student_local: jax.typing.ArrayLike,
    teacher_global: jax.typing.ArrayLike,
    student_patch: jax.typing.ArrayLike,
    teacher_patch: jax.typing.ArrayLike,
    masks: jax.typing.ArrayLike,
    backbone_cls: jax.typing.ArrayLike,
    *,
    centering: str = "sinkhorn_knopp",
    teacher_temperature: float,
    dino_center: jax.typing.ArrayLike | None = None,
    ibot_center: jax.typing.ArrayLike | None = None,
    student_temperature: float = 0.1,
    koleo_weight: float = 0.1,
    ibot_weight: float = 1.0,
    dino_weight: float = 1.0,
    center_momentum: float = 0.9,
    version: str = "dinov2",
) -> dict[str, jax.Array]:
  """The DINOv2 / DINOv3 loss of one step, as the official SSLMetaArch.

  Teacher targets (under stop-gradient): P_t = sinkhorn_knopp(teacher_global
  rows, τ_t) and P_p = sinkhorn_knopp(teacher_patch, τ_t), or with
  ``centering="centering"`` P_t = softmax((teacher_global − dino_center)/τ_t)
  and P_p = softmax((teacher_patch − ibot_center)/τ_t). With
  CE(s, t) = (1/B) Σ_b H(P_t[t, b], softmax(s_b/τ_s)) and n the division
  count (2 + max(2L, 1) for "dinov2", 2 + 2L for "dinov3"):

      dino_global = w_dino · (CE(s_g0, t1) + CE(s_g1, t0)) / n
      dino_local  = w_dino · Σ_l Σ_g CE(s_l, t_g) / n        (0 if L = 0)
      koleo       = w_koleo · (koleo(cls_0) + koleo(cls_1))
      ibot        = w_ibot · ibot(student_patch, P_p, masks, τ_s)
      loss        = dino_global + dino_local + koleo + ibot

  Args:
    student_global: (2, B, K) student DINO-head logits of the 2 global
      crops (crop-major), float32 or float64.
    student_local: (L, B, K) student logits of the L >= 0 local crops.
    teacher_global: (2, B, K) teacher DINO-head logits of the global crops
      (not swapped: the pairing is done here).
    student_patch: (M, K) student iBOT-head logits of the M >= 1 masked
      patches, in ``masks.flatten().nonzero()`` order.
    teacher_patch: (M, K) teacher iBOT-head logits of the same patches.
    masks: (2B, T) bool or 0/1 masks of the global crops (row g·B + b),
      Σ masks = M.
    backbone_cls: (2, B, D) student backbone class tokens (before the head)
      of the global crops, for KoLeo.
    centering: "sinkhorn_knopp" (default here; DINOv2's large recipes, the
      only one DINOv3 allows) or "centering" (DINOv2's default config).
    teacher_temperature: τ_t > 0 (official 0.04 warmed up to 0.07); may be
      traced.
    dino_center, ibot_center: (K,) centres, required with "centering" and
      rejected otherwise: the ones updated with the previous step's teacher
      (zeros at the first step).
    student_temperature: τ_s > 0 (official 0.1).
    koleo_weight, ibot_weight, dino_weight: weights >= 0 (official 0.1, 1.0,
      1.0).
    center_momentum: m in [0, 1] of the centre EMA (official 0.9).
    version: "dinov2" or "dinov3" (the division count above).

  Returns:
    dict of 0-d arrays "loss", "dino_global", "dino_local", "koleo", "ibot"
    in the promoted float dtype; with "centering" also "dino_center" and
    "ibot_center", the (K,) centres for the next step:
    m·c + (1 − m)·(mean of the 2B teacher rows, resp. of the M patch rows).

  Raises:
    ValueError: on a shape mismatch (the message names the arguments and
      shapes), G ≠ 2, M = 0, Σ masks ≠ M (concrete masks), an unknown
      centering or version, "centering" with "dinov3", a centre missing or
      given when it is not used, a temperature not finite > 0, a negative
      weight, or (concrete only) an input with NaN/inf.

  References:
    Oquab et al. 2023, "DINOv2: Learning Robust Visual Features without
    Supervision", arXiv 2304.07193, §4 (image-level, patch-level objectives,
    KoLeo, Sinkhorn-Knopp centring); Siméoni et al. 2025, "DINOv3", arXiv
    2508.10104, §3 eq. (1)-(2); Caron et al. 2021, arXiv 2104.14294, eq. (3)
    (DINO cross-entropy, centring).

  Example:
    >>> g, loc = jnp.zeros((2, 2, 3)), jnp.zeros((1, 2, 3))
    >>> masks = jnp.array([[1, 0], [0, 0], [0, 1], [0, 0]])
    >>> cls = jnp.array([[[1., 0.], [0., 1.]], [[1., 1.], [1., -1.]]])
    >>> out = dinov2_terms(g, loc, g, jnp.zeros((2, 3)), jnp.zeros((2, 3)),
    ...                    masks, cls, teacher_temperature=0.07)
    >>> round(float(out["dino_global"]), 4), round(float(out["ibot"]), 4)
    (0.5493, 0.5493)
  """
  if centering not in CENTERINGS:
    raise ValueError(f"centering must be one of {CENTERINGS}, got"
                     f" {centering!r}")
  if version not in VERSIONS:
    raise ValueError(f"version must be one of {VERSIONS}, got {version!r}")
  if version == "dinov3" and centering != "sinkhorn_knopp":
    raise ValueError("version='dinov3' supports only centering="
                     "'sinkhorn_knopp' (its SSLMetaArch asserts it), got"
                     f" {centering!r}")
  sg_2xBxK = _rank3(student_global, "student_global", "(2, B, K)")
  g, b, k = sg_2xBxK.shape
  if g != 2:
    raise ValueError(f"student_global must hold G = 2 global crops (the"
                     f" official SSLMetaArch fixes 2), got shape"
                     f" {sg_2xBxK.shape}")
  sl_LxBxK = _rank3(student_local, "student_local", "(L, B, K)",
                    allow_empty_first=True)
  tg_2xBxK = _rank3(teacher_global, "teacher_global", "(2, B, K)")
  if sl_LxBxK.shape[1:] != (b, k) or tg_2xBxK.shape != (g, b, k):
    raise ValueError(
        f"student_local (L, B, K) and teacher_global (2, B, K) must match"
        f" student_global {sg_2xBxK.shape} in B and K, got {sl_LxBxK.shape}"
        f" and {tg_2xBxK.shape}")
  sp_MxK, tp_MxK = checks.float_pair(student_patch, teacher_patch,
                                     "student_patch", "teacher_patch")
  if sp_MxK.shape[1] != k:
    raise ValueError(f"student_patch must have the K = {k} of the class"
                     f" logits, got shape {sp_MxK.shape}")
  mask_CxT = jnp.asarray(masks)
  if mask_CxT.ndim != 2 or mask_CxT.shape[0] != g * b:
    raise ValueError(f"masks must be (2B, T) = ({g * b}, T), one row per"
                     f" global crop, got shape {mask_CxT.shape}")
  cls_2xBxD = _rank3(backbone_cls, "backbone_cls", "(2, B, D)")
  if cls_2xBxD.shape[:2] != (g, b):
    raise ValueError(f"backbone_cls must be (2, B, D) = (2, {b}, D), got"
                     f" shape {cls_2xBxD.shape}")
  if b < 2:
    raise ValueError(f"B must be >= 2 (KoLeo needs a neighbour in each"
                     f" crop), got student_global shape {sg_2xBxK.shape}")
  centres = None
  if centering == "centering":
    centres = (_center(dino_center, k, "dino_center"),
               _center(ibot_center, k, "ibot_center"))
    checks.check_nonnegative(center_momentum, "center_momentum")
    if checks.is_concrete(center_momentum) and float(center_momentum) > 1:
      raise ValueError(f"center_momentum must be in [0, 1], got"
                       f" {center_momentum!r}")
  elif dino_center is not None or ibot_center is not None:
    raise ValueError("dino_center and ibot_center are used only with"
                     " centering='centering'; pass None with"
                     " 'sinkhorn_knopp'")
  checks.check_positive(teacher_temperature, "teacher_temperature")
  checks.check_positive(student_temperature, "student_temperature")
  for w, name in ((koleo_weight, "koleo_weight"), (ibot_weight, "ibot_weight"),
                  (dino_weight, "dino_weight")):
    checks.check_nonnegative(w, name)
  if checks.is_concrete(mask_CxT):
    with jax.ensure_compile_time_eval():
      n_masked = int(jnp.sum(mask_CxT != 0))
    if n_masked != sp_MxK.shape[0]:
      raise ValueError(f"masks must have exactly M = {sp_MxK.shape[0]}"
                       f" masked patches (one per row of student_patch), got"
                       f" {n_masked}")
  return _dinov2_core(
      sg_2xBxK, sl_LxBxK, tg_2xBxK, sp_MxK, tp_MxK, mask_CxT, cls_2xBxD,
      centres, teacher_temperature, student_temperature, koleo_weight,
      ibot_weight, dino_weight, center_momentum, centering=centering,
      version=version)


@functools.partial(jax.jit, static_argnames=("centering", "version"))
def _dinov2_core(sg_2xBxK, sl_LxBxK, tg_2xBxK, sp_MxK, tp_MxK, mask_CxT,
                 cls_2xBxD, centres, tau_t, tau_s, w_koleo, w_ibot, w_dino,
                 momentum, *, centering, version):
  dtype = jnp.result_type(sg_2xBxK, sl_LxBxK, tg_2xBxK, sp_MxK, tp_MxK)
  g, b, k = sg_2xBxK.shape
  n_local = sl_LxBxK.shape[0]
  tau_t = jnp.asarray(tau_t, dtype)
  out = {}
  t_2BxK = jax.lax.stop_gradient(tg_2xBxK.reshape(g * b, k).astype(dtype))
  t_patch_MxK = jax.lax.stop_gradient(tp_MxK.astype(dtype))
  if centering == "sinkhorn_knopp":
    pt_2BxK = sinkhorn_knopp(t_2BxK, temperature=tau_t)
    pp_MxK = sinkhorn_knopp(t_patch_MxK, temperature=tau_t)
  else:
    dino_c_K, ibot_c_K = (jax.lax.stop_gradient(c.astype(dtype))
                          for c in centres)
    pt_2BxK = jax.nn.softmax((t_2BxK - dino_c_K) / tau_t, axis=-1)
    pp_MxK = jax.nn.softmax((t_patch_MxK - ibot_c_K) / tau_t, axis=-1)
    m = jnp.asarray(momentum, dtype)
    out["dino_center"] = m * dino_c_K + (1 - m) * jnp.mean(t_2BxK, axis=0)
    out["ibot_center"] = m * ibot_c_K + (1 - m) * jnp.mean(t_patch_MxK,
                                                           axis=0)
  pt_2xBxK = jax.lax.stop_gradient(pt_2BxK).reshape(g, b, k)
  pp_MxK = jax.lax.stop_gradient(pp_MxK)

  tau_s = jnp.asarray(tau_s, dtype)
  n_pairs_global = g * (g - 1)
  n_pairs_local = (max(g * n_local, 1) if version == "dinov2"
                   else g * n_local)
  count = n_pairs_global + n_pairs_local
  w_dino = jnp.asarray(w_dino, dtype)
  # ce_SxG[s, t] = (1/B) Σ_b H(P_t[t, b], softmax(student[s, b]/τ_s)).
  log_ps_2xBxK = jax.nn.log_softmax(sg_2xBxK.astype(dtype) / tau_s, axis=-1)
  ce_2x2 = -jnp.einsum("sbk,tbk->st", log_ps_2xBxK, pt_2xBxK) / b
  off_diagonal = ~jnp.eye(g, dtype=bool)
  out["dino_global"] = w_dino * jnp.sum(jnp.where(off_diagonal, ce_2x2, 0)
                                        ) / count
  if n_local:
    log_ps_LxBxK = jax.nn.log_softmax(sl_LxBxK.astype(dtype) / tau_s,
                                      axis=-1)
    ce_Lx2 = -jnp.einsum("lbk,tbk->lt", log_ps_LxBxK, pt_2xBxK) / b
    out["dino_local"] = w_dino * jnp.sum(ce_Lx2) / count
  else:
    out["dino_local"] = jnp.zeros((), dtype)
  cls_2xBxD = cls_2xBxD.astype(dtype)
  out["koleo"] = jnp.asarray(w_koleo, dtype) * (koleo(cls_2xBxD[0])
                                                + koleo(cls_2xBxD[1]))
  out["ibot"] = jnp.asarray(w_ibot, dtype) * ibot(
      sp_MxK.astype(dtype), pp_MxK, mask_CxT, student_temperature=tau_s)
  out["loss"] = (out["dino_global"] + out["dino_local"] + out["koleo"]
                 + out["ibot"])
  return out


def _unit_last(x, floor: float = 1e-12):
  """x / max(‖x‖, floor) along the last axis (``F.normalize``'s eps)."""
  sq = jnp.sum(x * x, axis=-1, keepdims=True)
  return x / jnp.sqrt(jnp.maximum(sq, floor**2))


@checks.float32_matmuls
def gram_anchoring(
    student: jax.typing.ArrayLike,
    teacher: jax.typing.ArrayLike,
    *,
    img_level: bool = False,
    remove_neg: bool = False,
    remove_only_teacher_neg: bool = False,
    normalize: bool = True,
) -> jax.Array:
  """DINOv3's Gram anchoring: MSE between patch-similarity matrices.

  With rows normalised (u = x/max(‖x‖, 1e-12), ``normalize=True``, DINOv3's
  default) the Gram matrices S = U Uᵀ of the student and T of the Gram
  teacher (stop-gradient) are compared entry by entry:
  loss = mean (S − T)². ``img_level=False`` (DINOv3's default) flattens
  the N images into one (N·P, N·P) Gram matrix of all patches of the batch;
  ``img_level=True`` takes one (P, P) matrix per image.

  ``remove_neg`` clips both matrices at 0. ``remove_only_teacher_neg`` is
  meant to clip the teacher's negatives and the student's where both are
  negative; the official code clips the teacher first and then tests the
  clipped teacher for negatives, so the student is never clipped: only the
  teacher is. This function matches that behaviour.

  Under sharding the official loss runs on each GPU's own images (one Gram
  matrix per GPU with ``img_level=False``); here the Gram matrix spans the
  rows passed in.

  Args:
    student: (N, P, D) student patch features, float32 or float64; or
      (N·P, D) with img_level=False (the official masked/unmasked variants).
    teacher: Gram teacher features, same shape except possibly D.
    img_level: per-image Gram matrices (True) or one over the batch.
    remove_neg, remove_only_teacher_neg: at most one True (official assert).
    normalize: unit rows first (official ``gram.normalized``, default True).

  Returns:
    0-d array in the promoted float dtype.

  Raises:
    ValueError: if the inputs are not rank 3 (rank 2 allowed only with
      img_level=False), their leading shapes differ, both clipping options
      are set, or (concrete only) an input has NaN/inf.

  References:
    Siméoni et al. 2025, "DINOv3", arXiv 2508.10104, §4.2 eq. (3) (Gram
    anchoring objective); official ``GramLoss``.

  Example:
    >>> s = jnp.array([[[1., 0.], [0., 1.]]])     # N = 1 image, P = 2
    >>> t = jnp.array([[[1., 0.], [1., 0.]]])
    >>> round(float(gram_anchoring(s, t)), 4)     # off-diagonals 0 vs 1
    0.5
  """
  if remove_neg and remove_only_teacher_neg:
    raise ValueError("remove_neg and remove_only_teacher_neg are exclusive"
                     " (the official GramLoss asserts it); set at most one")
  s, t = checks.as_float(student), checks.as_float(teacher)
  ranks = (3,) if img_level else (2, 3)
  for x, name in ((s, "student"), (t, "teacher")):
    if x.ndim not in ranks or 0 in x.shape:
      what = "(N, P, D)" if img_level else "(N, P, D) or (N·P, D)"
      raise ValueError(f"{name} must be a non-empty {what} array, got shape"
                       f" {x.shape}")
    checks.check_finite(x, name)
  if s.shape[:-1] != t.shape[:-1]:
    raise ValueError(f"student and teacher must agree in all but the last"
                     f" axis, got {s.shape} and {t.shape}")
  return _gram_core(s, t, img_level=bool(img_level),
                    remove_neg=bool(remove_neg),
                    remove_only_teacher_neg=bool(remove_only_teacher_neg),
                    normalize=bool(normalize))


@functools.partial(jax.jit, static_argnames=(
    "img_level", "remove_neg", "remove_only_teacher_neg", "normalize"))
def _gram_core(s, t, *, img_level, remove_neg, remove_only_teacher_neg,
               normalize):
  dtype = jnp.result_type(s, t)
  s, t = s.astype(dtype), jax.lax.stop_gradient(t.astype(dtype))
  if normalize:
    s, t = _unit_last(s), _unit_last(t)
  if not img_level and s.ndim == 3:
    s, t = s.reshape(-1, s.shape[-1]), t.reshape(-1, t.shape[-1])
  s_sim = jnp.matmul(s, jnp.swapaxes(s, -1, -2))
  t_sim = jnp.matmul(t, jnp.swapaxes(t, -1, -2))
  if remove_neg:
    s_sim, t_sim = jnp.where(s_sim < 0, 0, s_sim), jnp.where(t_sim < 0, 0,
                                                             t_sim)
  elif remove_only_teacher_neg:
    t_sim = jnp.where(t_sim < 0, 0, t_sim)
  return jnp.mean((s_sim - t_sim) ** 2)
