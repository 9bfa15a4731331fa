"""Patches and the heads of the masked-token ViT methods (I-JEPA, MAE).

* `patchify` / `unpatchify`: images (B, H, W, C) <-> patch rows (B, L, p²·C)
  in MAE's order (row-major over patches; within a patch row-major over
  pixels, channel last).
* `JEPAPredictor`: I-JEPA's narrow ViT predictor (Assran et al. 2023, arXiv
  2301.08243, §3): the context tokens projected to the predictor width plus
  their position embeddings, one mask token per target patch plus its
  position embedding, transformer blocks, a LayerNorm and a projection back
  to the encoder width.
* `MAEDecoder`: MAE's light decoder (He et al. 2022, arXiv 2111.06377, §3):
  the visible tokens projected to the decoder width, mask tokens at the
  removed positions, fixed sine-cosine positions, blocks, a LayerNorm and
  a linear map to the p²·C pixel values of each patch.

Both use fixed 2-D sine-cosine position embeddings
(`ssljax.models.vit.sincos_pos_embed_2d`) as the official code, and the
blocks of `ssljax.models.vit` (pre-norm, LayerNorm eps 1e-6, float32
LayerNorm and softmax in bf16 runs).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from ssljax.models.vit import (Block, dense_init, sincos_pos_embed_2d,
                               wide_dtype)

__all__ = ["patchify", "unpatchify", "JEPAPredictor", "MAEDecoder"]

_dense = dict(kernel_init=nn.initializers.xavier_uniform(),
              bias_init=nn.initializers.zeros)


def patchify(images: jax.Array, patch: int) -> jax.Array:
  """Images (B, H, W, C) -> patches (B, L, patch²·C), L = (H/p)·(W/p).

  Row l = i·(W/p) + j is patch (i, j); its values are ordered (pixel row,
  pixel column, channel): MAE's ``einsum('nchpwq->nhwpqc')`` on NCHW images,
  here on NHWC ones.

  Args:
    images: (B, H, W, C) any dtype; H and W divisible by ``patch``.
    patch: p >= 1, the patch side.

  Returns:
    (B, L, p²·C) array of the images' dtype.

  Raises:
    ValueError: images not rank 4, or H or W not divisible by p.

  References:
    He et al. 2022, arXiv 2111.06377; the official ``patchify``.

  Example:
    >>> x = jnp.arange(16.).reshape(1, 4, 4, 1)
    >>> patchify(x, 2)[0, 1].tolist()   # top-right 2x2 patch
    [2.0, 3.0, 6.0, 7.0]
  """
  images = jnp.asarray(images)
  if images.ndim != 4:
    raise ValueError(f"images must be (B, H, W, C), got shape {images.shape}")
  b, h, w, c = images.shape
  if patch < 1 or h % patch or w % patch:
    raise ValueError(f"image size {h}x{w} is not divisible by patch {patch}")
  gh, gw = h // patch, w // patch
  x = images.reshape(b, gh, patch, gw, patch, c)
  x = x.transpose(0, 1, 3, 2, 4, 5)  # (B, gh, gw, p, p, C)
  return x.reshape(b, gh * gw, patch * patch * c)


def unpatchify(patches: jax.Array, patch: int) -> jax.Array:
  """Patches (B, L, P) -> images (B, H, W, C), the inverse of `patchify`
  on a square grid: L = n², H = W = n·p, C = P / p².

  Args:
    patches: (B, L, P) with L a square and P divisible by p².
    patch: p >= 1.

  Returns:
    (B, n·p, n·p, C) array of the patches' dtype.

  Raises:
    ValueError: not rank 3, L not a square, or P not divisible by p².

  References:
    He et al. 2022, arXiv 2111.06377; the official ``unpatchify``.
  """
  patches = jnp.asarray(patches)
  if patches.ndim != 3:
    raise ValueError(f"patches must be (B, L, P), got shape {patches.shape}")
  b, length, size = patches.shape
  n = int(round(length ** 0.5))
  if n * n != length:
    raise ValueError(f"L = {length} patches is not a square grid")
  if patch < 1 or size % (patch * patch):
    raise ValueError(f"P = {size} values per patch is not divisible by "
                     f"patch² = {patch * patch}")
  c = size // (patch * patch)
  x = patches.reshape(b, n, n, patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
  return x.reshape(b, n * patch, n * patch, c)


def _blocks(x, depth, num_heads, mlp_ratio, dtype, key_mask=None,
            weight_init="xavier"):
  hidden = int(x.shape[-1] * mlp_ratio)
  for i in range(depth):
    x = Block(num_heads, hidden, dtype, weight_init, name=f"block_{i}")(
        x, key_mask)
  norm = nn.LayerNorm(epsilon=1e-6, dtype=wide_dtype(dtype), name="norm")
  return norm(x).astype(dtype)


class JEPAPredictor(nn.Module):
  """I-JEPA's predictor: context tokens + target positions -> predicted
  target tokens.

  Rows of the output are ordered (target block, image) (with one context
  mask per image, as here, that is the official (target block, context
  mask, image) order): the context of image b is repeated for each of the
  M target blocks, row m·B + b.

  Attributes:
    width: predictor token width (official: 384).
    depth: predictor blocks (official: 6 for ViT-B/L, 12 for ViT-H).
    num_heads: attention heads (divides width).
    out_dim: encoder width D (the predictions' width).
    mlp_ratio: MLP width / width.
    dtype: computation dtype.
    weight_init: one of ``ssljax.models.vit.WEIGHT_INITS``: "xavier" (the
      default) or, as the official predictor, "ijepa" (N(0, 0.02²) linear
      kernels, `ssljax.models.vit.dense_init`); the mask token is
      N(0, 0.02²) in every case.
  """
  width: int
  depth: int
  num_heads: int
  out_dim: int
  mlp_ratio: float = 4.0
  dtype: jnp.dtype = jnp.float32
  weight_init: str = "xavier"

  @nn.compact
  def __call__(self, context, context_idx, target_idx, grid,
               context_valid=None, target_valid=None):
    """Predicted target tokens.

    Args:
      context: (B, K, D) context-encoder tokens (patches only).
      context_idx: int (B, K) their patch positions.
      target_idx: int (M, B, T) patch positions of M target blocks.
      grid: (gh, gw) static patch grid (the position embeddings).
      context_valid: None or bool (B, K), False = padding.
      target_valid: None or bool (M, B, T), False = padding.

    Returns:
      (M·B, T, out_dim) predictions, rows ordered (target block, image).
    """
    linear = dense_init(self.weight_init)  # ValueError: unknown weight_init
    m, b, t = target_idx.shape
    pos = sincos_pos_embed_2d(self.width, tuple(grid)).astype(self.dtype)
    x = nn.Dense(self.width, dtype=self.dtype, name="embed", **linear)(
        context.astype(self.dtype))
    x = x + pos[context_idx]
    k = x.shape[1]
    mask_token = self.param("mask_token", nn.initializers.normal(0.02),
                            (1, 1, self.width))
    queries = mask_token.astype(self.dtype) + pos[target_idx.reshape(m * b, t)]
    x = jnp.concatenate([jnp.tile(x, (m, 1, 1)), queries], axis=1)
    key_mask = None
    if context_valid is not None or target_valid is not None:
      cv = (jnp.ones((b, k), bool) if context_valid is None
            else context_valid.astype(bool))
      tv = (jnp.ones((m * b, t), bool) if target_valid is None
            else target_valid.reshape(m * b, t).astype(bool))
      key_mask = jnp.concatenate([jnp.tile(cv, (m, 1)), tv], axis=1)
    x = _blocks(x, self.depth, self.num_heads, self.mlp_ratio, self.dtype,
                key_mask, self.weight_init)
    return nn.Dense(self.out_dim, dtype=self.dtype, name="proj", **linear)(
        x[:, k:])


class MAEDecoder(nn.Module):
  """MAE's decoder: encoded visible tokens -> pixel predictions of every
  patch.

  Attributes:
    width: decoder width (official: 512).
    depth: decoder blocks (official: 8).
    num_heads: attention heads (official: 16).
    mlp_ratio: MLP width / width.
    dtype: computation dtype.
  """
  width: int
  depth: int
  num_heads: int
  mlp_ratio: float = 4.0
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, latent, ids_restore, grid, patch_dim):
    """Predictions (B, L, P).

    Args:
      latent: (B, 1 + K, D) encoder output: the class token, then the K
        visible tokens in the order of ``ids_restore``'s shuffle.
      ids_restore: int (B, L), the inverse of the shuffle whose first K
        entries are the visible positions (`ssljax.methods.masks.random_masking`).
      grid: (gh, gw) static patch grid, gh·gw = L.
      patch_dim: P = p²·C values per patch (static).
    """
    b, length = ids_restore.shape
    x = nn.Dense(self.width, dtype=self.dtype, name="embed", **_dense)(
        latent.astype(self.dtype))
    mask_token = self.param("mask_token", nn.initializers.normal(0.02),
                            (1, 1, self.width))
    fill = jnp.broadcast_to(mask_token.astype(self.dtype),
                            (b, length + 1 - x.shape[1], self.width))
    seq = jnp.concatenate([x[:, 1:], fill], axis=1)  # shuffled order
    seq = jnp.take_along_axis(seq, ids_restore[..., None], axis=1)
    pos = sincos_pos_embed_2d(self.width, tuple(grid)).astype(self.dtype)
    seq = jnp.concatenate([x[:, :1], seq + pos[None]], axis=1)
    seq = _blocks(seq, self.depth, self.num_heads, self.mlp_ratio, self.dtype)
    out = nn.Dense(patch_dim, dtype=self.dtype, name="pred", **_dense)(seq)
    return out[:, 1:]


class IJEPANetwork(nn.Module):
  """I-JEPA's trained networks: the context encoder (a ViT) and the
  predictor. Parameter tree {"encoder", "predictor"}.

  Attributes:
    encoder: a `ssljax.models.VisionTransformer`.
    predictor: a `JEPAPredictor` whose ``out_dim`` is the encoder's width.
  """
  encoder: nn.Module
  predictor: nn.Module

  def __call__(self, x, train: bool = True):
    """Every patch as context and a one-patch target block (initialises
    both networks): (B, 1, D)."""
    del train
    tokens = self.context(x)
    b, l = tokens.shape[:2]
    idx = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l))
    return self.predict(tokens, idx, idx[None, :, :1], self.grid(x))

  def grid(self, x):
    """(gh, gw) of images x (static)."""
    p = self.encoder.patch_size
    return (x.shape[1] // p, x.shape[2] // p)

  def context(self, x, keep=None, keep_valid=None):
    """Encoder tokens (B, K, D) of the patches ``keep`` (all if None),
    the class token (if any) dropped."""
    tokens = self.encoder(x, keep=keep, keep_valid=keep_valid,
                          output="tokens")
    return tokens[:, int(self.encoder.class_token):]

  def predict(self, context, context_idx, target_idx, grid,
              context_valid=None, target_valid=None):
    """`JEPAPredictor` outputs (M·B, T, D)."""
    return self.predictor(context, context_idx, target_idx, grid,
                          context_valid, target_valid)

  def represent(self, x, train: bool = False):
    """The encoder's representation (B, D)."""
    return self.encoder(x, train=train)


class MAENetwork(nn.Module):
  """MAE's encoder (a ViT with a class token) and decoder. Parameter tree
  {"encoder", "decoder"}.

  Attributes:
    encoder: a `ssljax.models.VisionTransformer` with ``class_token``.
    decoder: a `MAEDecoder`.
  """
  encoder: nn.Module
  decoder: nn.Module

  def __call__(self, x, train: bool = True):
    """Every patch visible (initialises both networks): (B, L, P)."""
    del train
    p = self.encoder.patch_size
    grid = (x.shape[1] // p, x.shape[2] // p)
    ids = jnp.broadcast_to(jnp.arange(grid[0] * grid[1], dtype=jnp.int32),
                           (x.shape[0], grid[0] * grid[1]))
    return self.reconstruct(x, ids, ids)

  def reconstruct(self, x, keep, ids_restore):
    """Pixel predictions (B, L, p²·C) of every patch from the patches
    ``keep`` (B, K) (`ssljax.methods.masks.random_masking`)."""
    p = self.encoder.patch_size
    grid = (x.shape[1] // p, x.shape[2] // p)
    latent = self.encoder(x, keep=keep, output="tokens")
    return self.decoder(latent, ids_restore, grid, p * p * x.shape[3])

  def represent(self, x, train: bool = False):
    """The encoder's representation (B, D) of the whole image."""
    return self.encoder(x, train=train)
