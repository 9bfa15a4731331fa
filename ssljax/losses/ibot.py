"""iBOT: masked-patch self-distillation (Zhou et al. 2021), as DINOv2 runs it.

The student sees the global crops with some patch tokens masked; for each
masked patch it predicts the teacher's distribution over K prototypes, which
the teacher computes from the unmasked crop. The loss is the cross-entropy
H(P_t, P_s) of each masked patch.

The weighting is that of DINOv2's and DINOv3's official
``iBOTPatchLoss.forward_masked`` (checked against their code): a masked
patch of crop c weighs 1/max(1, n_c), n_c the number of masked patches of
crop c, so every masked crop counts the same whatever its mask ratio; the
weighted sum is then divided by the number C of crops, the crops with no
masked patch included (they contribute 0 but count in C).

Only the M masked patches are passed, in the order of
``masks.flatten().nonzero()`` (crop-major, then patch index), the order in
which the official collate function gathers them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssljax import checks

__all__ = ["ibot"]


@checks.float32_matmuls
def ibot(
    student_patch: jax.typing.ArrayLike,
    teacher_probs: jax.typing.ArrayLike,
    masks: jax.typing.ArrayLike,
    *,
    student_temperature: float = 0.1,
) -> jax.Array:
  """iBOT masked-patch loss with DINOv2's per-crop weights.

  With c(m) the crop of masked patch m and n_c = Σ_t masks[c, t],

      loss = −(1/C) Σ_m w_m Σ_k P_t[m, k] log softmax(s_m/τ_s)_k,
      w_m = 1/max(1, n_c(m)).

  The crop of each row is found from the cumulative mask counts (rows are
  in ``masks.flatten().nonzero()`` order), so the function is jit-able with
  M static and masks traced. Rows beyond Σ masks (padding, as the official
  ``upperbound`` buffer) weigh 0. The teacher probabilities are under
  stop-gradient (the official teacher runs under ``torch.no_grad``).

  Args:
    student_patch: (M, K) student head logits of the masked patches,
      float32 or float64.
    teacher_probs: (M, K) teacher probabilities of the same patches (rows
      summing to 1: `sinkhorn_knopp` or a centred softmax).
    masks: (C, T) bool or 0/1 mask of the C global crops (crop-major:
      crop g of image b is row g·B + b) over T patches; Σ masks = M (concrete
      masks are checked; under jit rows past Σ masks weigh 0).
    student_temperature: τ_s > 0 (official 0.1); may be traced.

  Returns:
    0-d array in the promoted dtype of student_patch and teacher_probs.

  Raises:
    ValueError: if student_patch and teacher_probs are not (M, K) arrays of
      one shape, masks is not a non-empty (C, T) array, τ_s is not a finite
      number > 0, or (concrete only) an input has NaN/inf or Σ masks ≠ M.

  References:
    Zhou, Wei, Wang, Shen, Xie, Yuille & Kong 2021, "iBOT: Image BERT
    Pre-Training with Online Tokenizer", arXiv 2111.07832, eq. (2) (masked
    image modelling loss); Oquab et al. 2023, "DINOv2", arXiv 2304.07193,
    §4 (iBOT loss, untied heads); official ``forward_masked`` weights.

  Example:
    >>> s = jnp.zeros((3, 2))                    # 3 masked patches, K = 2
    >>> t = jnp.full((3, 2), 0.5)
    >>> masks = jnp.array([[1, 1, 0], [0, 0, 1], [0, 0, 0]])   # C = 3 crops
    >>> round(float(ibot(s, t, masks)), 4)       # (log 2 + log 2) / 3
    0.4621
  """
  s_MxK, t_MxK = checks.float_pair(student_patch, teacher_probs,
                                   "student_patch", "teacher_probs")
  mask_CxT = jnp.asarray(masks)
  if mask_CxT.ndim != 2 or 0 in mask_CxT.shape:
    raise ValueError(f"masks must be a non-empty rank-2 (C, T) array, got"
                     f" shape {mask_CxT.shape}")
  if checks.is_concrete(mask_CxT):
    with jax.ensure_compile_time_eval():
      count = int(jnp.sum(mask_CxT != 0))
    if count != s_MxK.shape[0]:
      raise ValueError(f"masks must have exactly M = {s_MxK.shape[0]} masked"
                       f" patches (one per row of student_patch), got {count}")
  checks.check_positive(student_temperature, "student_temperature")
  return _ibot_core(s_MxK, t_MxK, mask_CxT, student_temperature)


@jax.jit
def _ibot_core(s_MxK, t_MxK, mask_CxT, tau_s):
  dtype = s_MxK.dtype
  m, c = s_MxK.shape[0], mask_CxT.shape[0]
  count_C = jnp.sum(mask_CxT != 0, axis=1)
  # Row m belongs to the first crop whose cumulative count exceeds m.
  crop_M = jnp.searchsorted(jnp.cumsum(count_C), jnp.arange(m), side="right")
  valid_M = crop_M < c
  count_M = count_C[jnp.minimum(crop_M, c - 1)]
  weight_M = jnp.where(valid_M, 1 / jnp.maximum(count_M, 1).astype(dtype), 0)
  log_ps_MxK = jax.nn.log_softmax(s_MxK / jnp.asarray(tau_s, dtype), axis=-1)
  pt_MxK = jax.lax.stop_gradient(t_MxK)
  ce_M = -jnp.sum(pt_MxK * log_ps_MxK, axis=-1)
  return jnp.sum(jnp.where(valid_M, weight_M * ce_M, 0)) / c
