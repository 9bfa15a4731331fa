"""I-JEPA's loss: smooth-L1 between predicted and target patch embeddings.

Rows are (target block, context mask, image) triples, tokens are the patches
of a target block. The predictor's outputs at the target patches are pulled
towards the target encoder's outputs there, layer-normalised over the
feature dimension (no affine, eps 1e-5) and under stop-gradient; the
distance is the smooth-L1 (Huber with beta = 1) averaged over every element.

Where the layer norm happens: *inside* `ijepa`. The official code normalises
the target encoder's whole output (B, L, D) and then gathers the target
patches; a layer norm acts on each token on its own, so normalising the
gathered tokens gives the same numbers. ``target`` is therefore the raw
target-encoder output at the target patches.

References:
  Assran et al. 2023, "Self-Supervised Learning from Images with a
  Joint-Embedding Predictive Architecture", arXiv 2301.08243, §3 (eq. (1)
  writes the squared L2 distance; the official training code uses the
  smooth-L1 of this module, which is what the reported numbers come from).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssljax import checks

__all__ = ["ijepa", "target_layer_norm"]

# Layer-norm epsilon of the target (PyTorch's F.layer_norm default).
LAYER_NORM_EPS = 1e-5


@checks.float32_matmuls
def target_layer_norm(h: jax.typing.ArrayLike) -> jax.Array:
  """(h − mean) / sqrt(var + 1e-5) over the last axis (biased variance, no
  affine): I-JEPA's normalisation of the target encoder's tokens.

  Args:
    h: (..., D) float array (bf16 is computed in float32).

  Returns:
    float32 (float64 for float64 input) array of h's shape.

  Raises:
    ValueError: h has rank 0 or an empty last axis.

  References:
    Assran et al. 2023, arXiv 2301.08243, §3 (targets); the official code's
    ``F.layer_norm(h, (h.size(-1),))``.
  """
  h = checks.as_float(h)
  if h.ndim == 0 or h.shape[-1] == 0:
    raise ValueError(f"h must be (..., D) with D >= 1, got shape {h.shape}")
  h = h.astype(checks.compute_dtype(h.dtype))
  mean = jnp.mean(h, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(h - mean), axis=-1, keepdims=True)
  return (h - mean) * jax.lax.rsqrt(var + LAYER_NORM_EPS)


@jax.jit
def _ijepa(pred, target, valid):
  dtype = checks.compute_dtype(pred.dtype)
  y = jax.lax.stop_gradient(target_layer_norm(target)).astype(dtype)
  d = jnp.abs(pred.astype(dtype) - y)
  # Huber with beta = 1: ½d² below 1, d − ½ above (PyTorch's smooth_l1_loss).
  huber = jnp.where(d < 1.0, 0.5 * d * d, d - 0.5)
  if valid is None:
    return jnp.mean(huber)
  w = valid.astype(dtype)
  return jnp.sum(huber * w[..., None]) / (jnp.sum(w) * pred.shape[-1])


@checks.float32_matmuls
def ijepa(pred: jax.typing.ArrayLike, target: jax.typing.ArrayLike, *,
          valid: jax.typing.ArrayLike | None = None) -> jax.Array:
  """I-JEPA's loss: mean smooth-L1 (beta 1) of pred − LN(sg(target)).

      L = mean_{r,t,d} huber_1(pred[r,t,d] − LN(target[r,t])[d]),
      huber_1(x) = ½x² if |x| < 1 else |x| − ½,
      LN(y) = (y − mean(y)) / sqrt(var(y) + 1e-5) over the D features.

  The layer norm is applied **here**, to ``target`` (see the module
  docstring); ``target`` gets no gradient (the official targets are
  computed under ``torch.no_grad``). The mean runs over all R·T·D elements,
  as ``F.smooth_l1_loss``'s default reduction.

  Args:
    pred: (R, T, D) predictor outputs at the target patches; R rows ordered
      (target block, context mask, image), T patches per target block, D
      features. bf16 inputs are computed in float32.
    target: (R, T, D) target-encoder outputs (before the layer norm) at the
      same patches, in the same row order.
    valid: None, or bool (R, T): False marks padding (fixed shapes under
      jit, `ssljax.methods.masks.multiblock_masks`); the mean then runs over the
      valid tokens' elements only, which equals the official loss on the
      unpadded arrays.

  Returns:
    0-d float32 (float64 for float64 ``pred``), >= 0.

  Raises:
    ValueError: an input is not rank 3, the shapes differ, D = 0, or (concrete
      inputs only) an input has NaN/inf.

  References:
    Assran et al. 2023, arXiv 2301.08243, §3 and the official training code
    (smooth-L1 on layer-normalised targets).
    Elsewhere: lightly's I-JEPA example computes the same loss (layer norm
    over features, ``nn.SmoothL1Loss`` with its default beta 1 and mean);
    we did not find an I-JEPA loss in stable-pretraining to compare.

  Example:
    >>> pred = jnp.zeros((1, 1, 2))
    >>> target = jnp.array([[[1.0, -1.0]]])   # LN -> ~(1, -1)
    >>> round(float(ijepa(pred, target)), 4)
    0.5
  """
  pred, target = checks.as_float(pred), checks.as_float(target)
  for name, x in (("pred", pred), ("target", target)):
    if x.ndim != 3:
      raise ValueError(f"{name} must be (R, T, D), got shape {x.shape}")
  if pred.shape != target.shape:
    raise ValueError(f"pred and target must have the same shape, got "
                     f"{pred.shape} and {target.shape}")
  if pred.shape[-1] == 0:
    raise ValueError(f"pred must have D >= 1 features, got {pred.shape}")
  if valid is not None:
    valid = jnp.asarray(valid)
    if valid.shape != pred.shape[:2]:
      raise ValueError(f"valid must be (R, T) = {pred.shape[:2]}, got "
                       f"{valid.shape}")
  checks.check_finite(pred, "pred")
  checks.check_finite(target, "target")
  return _ijepa(pred, target, valid)
