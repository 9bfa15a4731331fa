"""MAE's loss: pixel regression on the removed patches only.

The decoder predicts every patch; the loss is the mean squared error of each
patch (averaged over its P = p²·C values), averaged over the patches the
encoder did not see. With ``norm_pix_loss`` the target patches are first
normalised by their own mean and standard deviation (unbiased variance, as
PyTorch's ``Tensor.var``, plus 1e-6), which the paper reports as better
representations (He et al. 2022, Table 1c / §A.1).

References:
  He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners", arXiv
  2111.06377, §3 ("Reconstruction target") and the official
  ``forward_loss``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssljax import checks

__all__ = ["mae", "normalize_patches"]

# Added to the per-patch variance under norm_pix_loss (official value).
NORM_PIX_EPS = 1e-6


@checks.float32_matmuls
def normalize_patches(target: jax.typing.ArrayLike) -> jax.Array:
  """(t − mean) / sqrt(var_unbiased + 1e-6) over the last axis of each patch.

  Args:
    target: (..., P) float patches, P >= 2 (the unbiased variance divides by
      P − 1). bf16 is computed in float32.

  Returns:
    float32 (float64 for float64 input) array of target's shape.

  Raises:
    ValueError: P < 2.

  References:
    He et al. 2022, arXiv 2111.06377, §3 (per-patch normalised pixels); the
    official code's ``target.var(dim=-1)`` (ddof 1).
  """
  t = checks.as_float(target)
  if t.ndim == 0 or t.shape[-1] < 2:
    raise ValueError(f"target must be (..., P) with P >= 2 values per patch "
                     f"for the unbiased variance, got shape {t.shape}")
  t = t.astype(checks.compute_dtype(t.dtype))
  mean = jnp.mean(t, axis=-1, keepdims=True)
  var = jnp.var(t, axis=-1, keepdims=True, ddof=1)
  return (t - mean) / jnp.sqrt(var + NORM_PIX_EPS)


def _mae(pred, target, mask, norm_pix_loss):
  dtype = checks.compute_dtype(pred.dtype)
  t = normalize_patches(target) if norm_pix_loss else target.astype(dtype)
  per_patch = jnp.mean(jnp.square(pred.astype(dtype) - t), axis=-1)  # (B, L)
  m = mask.astype(dtype)
  return jnp.sum(per_patch * m) / jnp.sum(m)


_mae_jit = jax.jit(_mae, static_argnames="norm_pix_loss")


@checks.float32_matmuls
def mae(pred: jax.typing.ArrayLike, target: jax.typing.ArrayLike,
        mask: jax.typing.ArrayLike, *, norm_pix_loss: bool) -> jax.Array:
  """MAE's reconstruction loss over the removed patches.

      t_l = (x_l − mean(x_l)) / sqrt(var₁(x_l) + 1e-6)  if norm_pix_loss
            else x_l,
      L = Σ_{b,l} m_bl · mean_p (pred_blp − t_blp)² / Σ_{b,l} m_bl,

  with var₁ the unbiased (ddof 1) variance over the P values of a patch and
  m = 1 for the removed (masked) patches, 0 for the visible ones. ``target``
  gets no stop-gradient: it is pixels (its gradient is returned if asked).

  Args:
    pred: (B, L, P) decoder outputs, one row of P = p²·C values per patch in
      `ssljax.models.patchify`'s order; bf16 is computed in float32.
    target: (B, L, P) the image's patches (`ssljax.models.patchify`).
    mask: (B, L) 1 = removed (predicted), 0 = visible; bool or float.
    norm_pix_loss: normalise each target patch first (the paper's choice
      for its best representations).

  Returns:
    0-d float32 (float64 for float64 ``pred``), >= 0; NaN when no patch is
    masked (0/0, as the official code).

  Raises:
    ValueError: pred/target not rank 3 or of different shapes, mask not
      (B, L), P < 2 with ``norm_pix_loss``, or (concrete inputs only) a
      non-finite input.

  References:
    He et al. 2022, arXiv 2111.06377, §3 and the official ``forward_loss``.
    Elsewhere: lightly's MAE example regresses raw pixels (no
    ``norm_pix_loss``) with ``nn.MSELoss`` over the removed patches' values,
    equal to this loss with ``norm_pix_loss=False`` when every image has as
    many removed patches; several JAX ports take ``jnp.var``'s default
    ddof 0 for ``norm_pix_loss``, a biased variance the official code does
    not use.

  Example:
    >>> pred = jnp.zeros((1, 2, 2))
    >>> target = jnp.array([[[1.0, 1.0], [3.0, 3.0]]])
    >>> float(mae(pred, target, jnp.array([[0, 1]]), norm_pix_loss=False))
    9.0
  """
  pred, target = checks.as_float(pred), checks.as_float(target)
  mask = jnp.asarray(mask)
  for name, x in (("pred", pred), ("target", target)):
    if x.ndim != 3:
      raise ValueError(f"{name} must be (B, L, P), got shape {x.shape}")
  if pred.shape != target.shape:
    raise ValueError(f"pred and target must have the same shape, got "
                     f"{pred.shape} and {target.shape}")
  if mask.shape != pred.shape[:2]:
    raise ValueError(f"mask must be (B, L) = {pred.shape[:2]}, got "
                     f"{mask.shape}")
  if norm_pix_loss and pred.shape[-1] < 2:
    raise ValueError(f"norm_pix_loss needs P >= 2 values per patch, got "
                     f"{pred.shape}")
  checks.check_finite(pred, "pred")
  checks.check_finite(target, "target")
  return _mae_jit(pred, target, mask, bool(norm_pix_loss))
