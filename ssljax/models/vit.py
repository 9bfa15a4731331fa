"""Vision Transformer encoders (Dosovitskiy et al. 2021, "An Image is Worth
16x16 Words", arXiv 2010.11929): images (B, H, W, C) -> class token (B, D).

Layout as in timm's ``VisionTransformer`` with ``num_classes=0``: a
patch-embedding conv (kernel = stride = patch size), a class token, learned
position embeddings, ``depth`` pre-norm blocks (LayerNorm eps 1e-6 ->
multi-head self-attention -> residual; LayerNorm -> MLP of width
``mlp_ratio * D`` with exact GELU -> residual), a final LayerNorm; the
representation is the class token after that LayerNorm. Parameter names
follow timm (``patch_embed``, ``cls_token``, ``pos_embed``, ``block_i`` with
``norm1``, ``attn/qkv``, ``attn/proj``, ``norm2``, ``mlp/fc1``, ``mlp/fc2``,
``norm``). No dropout and no stochastic depth: ``train`` is accepted only for
interface parity with the BatchNorm encoders.

Position embeddings are sized by the image the network is initialised with
(any H, W divisible by the patch size). An input of another resolution gets
them resized to its patch grid by bicubic interpolation of the patch part
(the class-token entry is kept), as DINO does (Caron et al. 2021,
arXiv 2104.14294) so that 96x96 local crops and 224x224 global crops go
through the same network. Interpolation reads the stored grid as square: it
needs a square grid at init (a ValueError otherwise). ``jax.image.resize``'s
bicubic is the Keys kernel with a = -0.5 and half-pixel centres, without
antialiasing; PyTorch's (DINO's) uses a = -0.75, so the numbers differ
slightly from DINO's.

Precision: ``dtype`` is the computation dtype; parameters stay float32.
With ``dtype=jnp.bfloat16`` the matmuls and the residual stream are bf16,
while every LayerNorm and the attention softmax (and its logits, accumulated
with ``preferred_element_type``) are computed in float32 and cast back.
"""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ["VisionTransformer", "ViTTiny16", "ViTSmall16",
           "interpolate_pos_embed"]

_dense_init = dict(kernel_init=nn.initializers.xavier_uniform(),
                   bias_init=nn.initializers.zeros)


def interpolate_pos_embed(pos_embed: jax.Array, grid: tuple[int, int],
                          method: str = "bicubic") -> jax.Array:
  """Resizes position embeddings to a new patch grid.

  Args:
    pos_embed: (1, 1 + n * n, D): the class-token entry, then an n x n grid
      of patch entries in row-major order.
    grid: (gh, gw), the patch grid of the new input.
    method: a ``jax.image.resize`` method ("bicubic", "linear", ...).

  Returns:
    (1, 1 + gh * gw, D), same dtype; the class-token entry is unchanged. At
    (gh, gw) = (n, n) it equals ``pos_embed`` up to round-off.

  Raises:
    ValueError: the stored patch part is not a square grid.
  """
  cls_pos, patch_pos = pos_embed[:, :1], pos_embed[:, 1:]
  count, dim = patch_pos.shape[1], patch_pos.shape[2]
  side = math.isqrt(count)
  if side * side != count:
    raise ValueError(
        f"position embeddings hold {count} patch entries, not a square grid: "
        "initialise the ViT with a square image to use other resolutions")
  gh, gw = grid
  patch_pos = patch_pos.reshape(1, side, side, dim).astype(jnp.float32)
  patch_pos = jax.image.resize(patch_pos, (1, gh, gw, dim), method=method,
                               antialias=False)
  patch_pos = patch_pos.reshape(1, gh * gw, dim).astype(pos_embed.dtype)
  return jnp.concatenate([cls_pos, patch_pos], axis=1)


def _layer_norm(name: str, x, dtype):
  """LayerNorm (eps 1e-6) computed in float32, output cast to ``dtype``."""
  y = nn.LayerNorm(epsilon=1e-6, dtype=jnp.float32, name=name)(x)
  return y.astype(dtype)


class _Attention(nn.Module):
  """Multi-head self-attention with a fused qkv projection (as timm).

  x: (B, N, D) -> (B, N, D). Logits and softmax in float32.
  """
  num_heads: int
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x):
    batch, tokens, dim = x.shape
    head_dim = dim // self.num_heads
    qkv = nn.Dense(3 * dim, dtype=self.dtype, name="qkv", **_dense_init)(x)
    qkv = qkv.reshape(batch, tokens, 3, self.num_heads, head_dim)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # (B, N, heads, hd)
    q = q * jnp.asarray(head_dim ** -0.5, self.dtype)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k,
                        preferred_element_type=jnp.float32)
    weights = jax.nn.softmax(logits, axis=-1).astype(self.dtype)
    out = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, tokens, dim)
    return nn.Dense(dim, dtype=self.dtype, name="proj", **_dense_init)(out)


class _Mlp(nn.Module):
  """Dense (hidden) -> exact GELU -> Dense (D). x: (B, N, D) -> (B, N, D)."""
  hidden: int
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x):
    y = nn.Dense(self.hidden, dtype=self.dtype, name="fc1", **_dense_init)(x)
    y = nn.gelu(y, approximate=False)
    return nn.Dense(x.shape[-1], dtype=self.dtype, name="fc2", **_dense_init)(y)


class _Block(nn.Module):
  """Pre-norm transformer block. x: (B, N, D) -> (B, N, D), dtype ``dtype``."""
  num_heads: int
  mlp_hidden: int
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x):
    x = x + _Attention(self.num_heads, self.dtype, name="attn")(
        _layer_norm("norm1", x, self.dtype))
    return x + _Mlp(self.mlp_hidden, self.dtype, name="mlp")(
        _layer_norm("norm2", x, self.dtype))


class VisionTransformer(nn.Module):
  """ViT encoder without a classification head (Dosovitskiy et al. 2021,
  arXiv 2010.11929).

  x: (B, H, W, C) float, H and W divisible by ``patch_size`` -> class token
  (B, hidden_dim), dtype ``dtype``. See the module docstring for the
  position-embedding interpolation and the float32 LayerNorm/softmax.

  Attributes:
    patch_size: side of the square patches (kernel and stride of the
      patch-embedding conv).
    hidden_dim: token width D.
    depth: number of transformer blocks.
    num_heads: attention heads; must divide hidden_dim.
    mlp_ratio: MLP hidden width / D.
    dtype: computation dtype (parameters stay float32).
  """
  patch_size: int = 16
  hidden_dim: int = 384
  depth: int = 12
  num_heads: int = 6
  mlp_ratio: float = 4.0
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = True):
    """x: (B, H, W, C) -> (B, hidden_dim). ``train`` is unused (no dropout).

    Raises:
      ValueError: H or W not divisible by the patch size, hidden_dim not
        divisible by num_heads, or a resolution other than the init one
        after a non-square init.
    """
    del train  # no dropout / stochastic depth
    batch, height, width, _ = x.shape
    p, dim = self.patch_size, self.hidden_dim
    if height % p or width % p:
      raise ValueError(f"image size {height}x{width} is not divisible by the "
                       f"patch size {p}")
    if dim % self.num_heads:
      raise ValueError(f"hidden_dim {dim} is not divisible by num_heads "
                       f"{self.num_heads}")
    x = nn.Conv(dim, (p, p), strides=p, padding="VALID", dtype=self.dtype,
                name="patch_embed")(x.astype(self.dtype))
    gh, gw = x.shape[1], x.shape[2]
    x = x.reshape(batch, gh * gw, dim)
    cls = self.param("cls_token", nn.initializers.normal(1e-6), (1, 1, dim))
    # Sized at init; on later calls the stored shape is requested, so any
    # input resolution reads the same parameter.
    shape = (1, 1 + gh * gw, dim)
    if self.has_variable("params", "pos_embed"):
      shape = self.get_variable("params", "pos_embed").shape
    pos = self.param("pos_embed", nn.initializers.truncated_normal(0.02), shape)
    if pos.shape[1] != 1 + gh * gw:
      pos = interpolate_pos_embed(pos, (gh, gw))
    cls = jnp.broadcast_to(cls.astype(self.dtype), (batch, 1, dim))
    x = jnp.concatenate([cls, x], axis=1) + pos.astype(self.dtype)
    hidden = int(dim * self.mlp_ratio)
    for i in range(self.depth):
      x = _Block(self.num_heads, hidden, self.dtype, name=f"block_{i}")(x)
    return _layer_norm("norm", x[:, 0], self.dtype)


class ViTTiny16(VisionTransformer):
  """ViT-Ti/16: D = 192, depth 12, 3 heads; 5,524,416 parameters without a
  head at 224x224 (timm ``vit_tiny_patch16_224``, ``num_classes=0``)."""
  patch_size: int = 16
  hidden_dim: int = 192
  depth: int = 12
  num_heads: int = 3


class ViTSmall16(VisionTransformer):
  """ViT-S/16: D = 384, depth 12, 6 heads; 21,665,664 parameters without a
  head at 224x224 (timm ``vit_small_patch16_224``, ``num_classes=0``)."""
  patch_size: int = 16
  hidden_dim: int = 384
  depth: int = 12
  num_heads: int = 6
