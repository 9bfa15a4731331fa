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
needs a square grid at init (a ValueError otherwise). ``pos_interpolation``
chooses whose resampling: timm's (the default; antialiased bicubic at the
new size), DINO's and DINOv2's (bicubic at a scale factor offset by 0.1),
each equal to PyTorch's to float32 rounding, or ``jax.image.resize``'s
(`interpolate_pos_embed`). They differ by a good part of the table's scale
when a 28-px grid is resized to a 14-px local crop's.

Precision: ``dtype`` is the computation dtype; parameters stay float32.
With ``dtype=jnp.bfloat16`` the matmuls and the residual stream are bf16,
while every LayerNorm and the attention softmax (and its logits, accumulated
with ``preferred_element_type``) are computed in float32 and cast back.
"""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["VisionTransformer", "ViTTiny16", "ViTSmall16", "Block",
           "interpolate_pos_embed", "sincos_pos_embed_2d", "REPRESENTATIONS",
           "POS_INTERPOLATIONS", "torch_bicubic_matrix",
           "WEIGHT_INITS", "dense_init", "wide_dtype"]

# What ``VisionTransformer`` returns as the representation (the module
# docstring says which paper uses which).
REPRESENTATIONS = ("cls", "avg_tokens", "cls_last2", "cls_last4",
                   "cls_last4_avg")

# How many blocks' class tokens a "cls_lastN" representation concatenates.
_LAST_BLOCKS = {"cls_last2": 2, "cls_last4": 4, "cls_last4_avg": 4}
# Those that append the mean of the last block's patch tokens after them.
_WITH_PATCH_MEAN = ("cls_last4_avg",)

# How the linear layers and the patch embedding start (biases zero unless
# said):
#   "xavier": Xavier-uniform linear kernels (MAE's official
#     ``initialize_weights``); the patch embedding keeps flax's LeCun normal;
#   "timm": timm's ViT (``init_weights_vit_timm``), which the official
#     DINOv2 and LeJEPA networks start from: linear kernels N(0, 0.02²);
#     the patch embedding keeps PyTorch's Conv2d default, kernel and bias
#     U(±1/sqrt(fan_in)), fan_in = C·p²;
#   "ijepa": the weights that the official I-JEPA trains from (Assran et
#     al. 2023, arXiv 2301.08243; facebookresearch/ijepa, src/helper.py
#     ``init_model``): linear kernels and the patch embedding N(0, 0.02²).
#     The models' constructors also divide each block's attention output
#     and second MLP layer by sqrt(2·l) (``fix_init_weight``), but
#     ``init_model`` then draws every linear layer again at N(0, 0.02²), so
#     no run of the official code starts from that rescale; nor does this.
# PyTorch's ``trunc_normal_(std=0.02)`` cuts at ±2 in absolute value, 100
# standard deviations: a plain normal.
WEIGHT_INITS = ("xavier", "timm", "ijepa")


def dense_init(weight_init: str = "xavier") -> dict:
  """``nn.Dense`` keywords (kernel_init, bias_init) of ``weight_init``,
  one of ``WEIGHT_INITS`` (see the comment above it).

  Returns:
    dict(kernel_init=..., bias_init=zeros): float32 kernels of any
    (fan_in, fan_out) shape; Xavier-uniform for "xavier", N(0, 0.02²)
    otherwise.

  Raises:
    ValueError: an unknown ``weight_init``.

  References:
    Glorot & Bengio 2010 (Xavier); He et al. 2022, arXiv 2111.06377 (MAE's
    initialize_weights); Assran et al. 2023, arXiv 2301.08243 (I-JEPA's
    init_model); Oquab et al. 2023, arXiv 2304.07193 (DINOv2, timm's ViT).
  """
  if weight_init not in WEIGHT_INITS:
    raise ValueError(f"weight_init {weight_init!r}: expected one of "
                     f"{WEIGHT_INITS}")
  kernel = (nn.initializers.xavier_uniform() if weight_init == "xavier"
            else nn.initializers.normal(0.02))
  return dict(kernel_init=kernel, bias_init=nn.initializers.zeros)


def _patch_embed_init(weight_init: str, fan_in: int) -> dict:
  """``nn.Conv`` keywords of the patch embedding (fan_in = C·p²)."""
  if weight_init == "ijepa":
    return dense_init(weight_init)
  if weight_init == "timm":
    bound = 1.0 / math.sqrt(fan_in)
    uniform = lambda key, shape, dtype=jnp.float32: jax.random.uniform(
        key, shape, dtype, -bound, bound)
    return dict(kernel_init=uniform, bias_init=uniform)
  return {}  # flax's defaults: LeCun normal, zero bias


# How learned position embeddings are resized to another patch grid.
POS_INTERPOLATIONS = ("timm", "dino", "jax")


def _cubic(x: float, a: float) -> float:
  """Keys' cubic convolution kernel with parameter ``a``."""
  x = abs(x)
  if x <= 1.0:
    return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
  if x < 2.0:
    return (((x - 5.0) * x + 8.0) * x - 4.0) * a
  return 0.0


def torch_bicubic_matrix(n_in: int, n_out: int, *,
                         scale_factor: float | None = None,
                         antialias: bool = False) -> np.ndarray:
  """The (n_out, n_in) matrix of PyTorch's 1-D bicubic resampling
  (``F.interpolate(mode="bicubic", align_corners=False)``, one axis).

  Without ``antialias`` (``upsample_bicubic2d``): Keys' kernel with a =
  −0.75 at source position s = (i + ½)·r − ½, the four taps clamped to the
  edge, r = 1 / ``scale_factor`` when one is given (the output then has
  floor(n_in · scale_factor) entries, which must be ``n_out``), else
  n_in / n_out. With ``antialias`` (``_upsample_bicubic2d_aa``, PIL's
  resampling): a = −0.5, the kernel stretched by r when downsampling
  (support 2·max(r, 1) around (i + ½)·r) and each row normalised to sum 1.

  Args:
    n_in, n_out: input and output lengths (ints >= 1).
    scale_factor: None, or the ``scale_factor`` given to ``F.interpolate``.
    antialias: ``F.interpolate``'s ``antialias``.

  Returns:
    float64 array (n_out, n_in); out = matrix @ in along that axis.

  Raises:
    ValueError: ``scale_factor`` with ``antialias``, or one that does not
      give ``n_out`` entries.
  """
  m = np.zeros((n_out, n_in))
  if antialias:
    if scale_factor is not None:
      raise ValueError("scale_factor with antialias is not implemented")
    r = n_in / n_out
    support = 2.0 * r if r >= 1.0 else 2.0
    inv = 1.0 / r if r >= 1.0 else 1.0
    for i in range(n_out):
      center = r * (i + 0.5)
      lo = max(int(center - support + 0.5), 0)
      hi = min(int(center + support + 0.5), n_in)
      w = np.array([_cubic((j - center + 0.5) * inv, -0.5)
                    for j in range(lo, hi)])
      m[i, lo:hi] = w / w.sum()
    return m
  if scale_factor is not None:
    if math.floor(n_in * scale_factor) != n_out:
      raise ValueError(f"scale_factor {scale_factor} gives "
                       f"{math.floor(n_in * scale_factor)} entries from "
                       f"{n_in}, not {n_out}")
    r = 1.0 / scale_factor
  else:
    r = n_in / n_out
  for i in range(n_out):
    src = r * (i + 0.5) - 0.5
    i0 = math.floor(src)
    t = src - i0
    for k, w in zip(range(-1, 3), (_cubic(t + 1.0, -0.75), _cubic(t, -0.75),
                                   _cubic(1.0 - t, -0.75),
                                   _cubic(2.0 - t, -0.75))):
      m[i, min(max(i0 + k, 0), n_in - 1)] += w
  return m


def interpolate_pos_embed(pos_embed: jax.Array, grid: tuple[int, int],
                          method: str = "bicubic", num_prefix: int = 1,
                          interpolation: str = "jax") -> jax.Array:
  """Resizes position embeddings to a new patch grid.

  Args:
    pos_embed: (1, num_prefix + n * n, D): the class-token entry (none when
      num_prefix = 0), then an n x n grid of patch entries in row-major
      order.
    grid: (gh, gw), the patch grid of the new input.
    method: a ``jax.image.resize`` method ("bicubic", "linear", ...), read
      with ``interpolation="jax"`` only.
    num_prefix: 1 with a class token, 0 without.
    interpolation: one of ``POS_INTERPOLATIONS``:

      * "timm": timm's ``resample_abs_pos_embed`` (``F.interpolate`` to the
        new size, bicubic, ``antialias=True``), which a timm ViT with
        ``dynamic_img_size`` applies (LeJEPA's minimal example);
      * "dino": the ``interpolate_pos_encoding`` of DINO (Caron et al.
        2021, arXiv 2104.14294) and DINOv2 (Oquab et al. 2023, arXiv
        2304.07193; ``interpolate_offset`` 0.1, ``interpolate_antialias``
        False): bicubic without antialiasing at ``scale_factor`` (g + 0.1)
        / n, so that the sampling positions are those of a grid 0.1 larger;
      * "jax": ``jax.image.resize`` with ``method`` (Keys' a = −0.5, no
        antialiasing), which equals "timm" when upsampling but not when
        downsampling.

      "timm" and "dino" equal PyTorch's to float32 rounding
      (`torch_bicubic_matrix`).

  Returns:
    (1, num_prefix + gh * gw, D), same dtype; the class-token entry is
    unchanged. At (gh, gw) = (n, n) "timm" and "jax" return ``pos_embed``
    up to round-off; "dino" would resample (at scale (n + 0.1) / n), which
    DINO's code never does: it returns the table as it is when the token
    count is unchanged, as `VisionTransformer` does for every option.

  Raises:
    ValueError: the stored patch part is not a square grid, or an unknown
      ``interpolation``.
  """
  if interpolation not in POS_INTERPOLATIONS:
    raise ValueError(f"interpolation {interpolation!r}: expected one of "
                     f"{POS_INTERPOLATIONS}")
  cls_pos = pos_embed[:, :num_prefix]
  patch_pos = pos_embed[:, num_prefix:]
  count, dim = patch_pos.shape[1], patch_pos.shape[2]
  side = math.isqrt(count)
  if side * side != count:
    raise ValueError(
        f"position embeddings hold {count} patch entries, not a square grid: "
        "initialise the ViT with a square image to use other resolutions")
  gh, gw = grid
  # At least float32 (float64 tables stay float64, as in DINO's code).
  wide = jnp.promote_types(pos_embed.dtype, jnp.float32)
  patch_pos = patch_pos.reshape(1, side, side, dim).astype(wide)
  if interpolation == "jax":
    patch_pos = jax.image.resize(patch_pos, (1, gh, gw, dim), method=method,
                                 antialias=False)
  else:
    def matrix(g):
      if interpolation == "timm":
        return torch_bicubic_matrix(side, g, antialias=True)
      return torch_bicubic_matrix(side, g, scale_factor=(g + 0.1) / side)
    rows = jnp.asarray(matrix(gh), wide)
    cols = jnp.asarray(matrix(gw), wide)
    patch_pos = jnp.einsum("ia,bacd,jc->bijd", rows,
                           patch_pos, cols, precision="highest")
  patch_pos = patch_pos.reshape(1, gh * gw, dim).astype(pos_embed.dtype)
  return jnp.concatenate([cls_pos, patch_pos], axis=1)


def sincos_pos_embed_2d(dim: int, grid: tuple[int, int]) -> jax.Array:
  """Fixed 2-D sine-cosine position embeddings of MAE and I-JEPA.

  The first D/2 channels encode the patch's column, the last D/2 its row;
  each half is [sin(pos·ω), cos(pos·ω)] with ω_k = 10000^(−k/(D/4)),
  k = 0..D/4 − 1 (the official ``get_2d_sincos_pos_embed``, whose meshgrid
  puts the column coordinate first). Computed as the official code does,
  in float64 with numpy, then rounded to float32 (the official parameter's
  dtype): the same table whether or not it is traced, which a float32
  table computed by XLA is not (a jitted step folds it as a constant with
  another sine than the eager one, ulps apart; computed in float32,
  entries were up to 1.2e-7 off, which float64 comparisons with the
  official steps see).

  Args:
    dim: D, divisible by 4.
    grid: (gh, gw) patch grid (static ints).

  Returns:
    float32 (gh·gw, D), row-major over patches.

  Raises:
    ValueError: D not divisible by 4.

  References:
    He et al. 2022, arXiv 2111.06377, §A.1 (sine-cosine embeddings);
    Vaswani et al. 2017, arXiv 1706.03762, §3.5.
  """
  if dim % 4:
    raise ValueError(f"sine-cosine embeddings need D divisible by 4, got {dim}")
  gh, gw = grid
  omega = 1.0 / 10000 ** (np.arange(dim // 4, dtype=np.float64) / (dim / 4))
  rows, cols = np.meshgrid(np.arange(gh, dtype=np.float64),
                           np.arange(gw, dtype=np.float64), indexing="ij")

  def one_axis(pos):
    out = pos.reshape(-1)[:, None] * omega[None, :]
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)

  table = np.concatenate([one_axis(cols), one_axis(rows)], axis=1)
  return jnp.asarray(table.astype(np.float32))


def wide_dtype(dtype):
  """The dtype of LayerNorms and softmax logits: float32, or float64 when
  the computation dtype is float64 (exactness tests)."""
  return jnp.promote_types(dtype, jnp.float32)


def _layer_norm(name: str, x, dtype):
  """LayerNorm (eps 1e-6) computed in float32, output cast to ``dtype``."""
  y = nn.LayerNorm(epsilon=1e-6, dtype=wide_dtype(dtype), name=name)(x)
  return y.astype(dtype)


class _Attention(nn.Module):
  """Multi-head self-attention with a fused qkv projection (as timm).

  x: (B, N, D) -> (B, N, D). Logits and softmax in float32. ``key_mask``
  (B, N) bool, True = a real token: padded keys get no attention weight
  (fixed-shape token subsets, `ssljax.methods.masks`).
  """
  num_heads: int
  dtype: jnp.dtype = jnp.float32
  weight_init: str = "xavier"

  @nn.compact
  def __call__(self, x, key_mask=None):
    batch, tokens, dim = x.shape
    head_dim = dim // self.num_heads
    qkv = nn.Dense(3 * dim, dtype=self.dtype, name="qkv",
                   **dense_init(self.weight_init))(x)
    qkv = qkv.reshape(batch, tokens, 3, self.num_heads, head_dim)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # (B, N, heads, hd)
    q = q * jnp.asarray(head_dim ** -0.5, self.dtype)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k,
                        preferred_element_type=wide_dtype(self.dtype))
    if key_mask is not None:
      logits = jnp.where(key_mask[:, None, None, :], logits, -1e30)
    weights = jax.nn.softmax(logits, axis=-1).astype(self.dtype)
    out = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, tokens, dim)
    return nn.Dense(dim, dtype=self.dtype, name="proj",
                    **dense_init(self.weight_init))(out)


class _Mlp(nn.Module):
  """Dense (hidden) -> exact GELU -> Dense (D). x: (B, N, D) -> (B, N, D)."""
  hidden: int
  dtype: jnp.dtype = jnp.float32
  weight_init: str = "xavier"

  @nn.compact
  def __call__(self, x):
    y = nn.Dense(self.hidden, dtype=self.dtype, name="fc1",
                 **dense_init(self.weight_init))(x)
    y = nn.gelu(y, approximate=False)
    return nn.Dense(x.shape[-1], dtype=self.dtype, name="fc2",
                    **dense_init(self.weight_init))(y)


class Block(nn.Module):
  """Pre-norm transformer block. x: (B, N, D) -> (B, N, D), dtype ``dtype``;
  ``key_mask`` (B, N) bool (True = real token) keeps padded tokens out of
  the attention of every token. ``weight_init`` (``WEIGHT_INITS``) chooses
  the initial kernels (`dense_init`)."""
  num_heads: int
  mlp_hidden: int
  dtype: jnp.dtype = jnp.float32
  weight_init: str = "xavier"

  @nn.compact
  def __call__(self, x, key_mask=None):
    attn = _Attention(self.num_heads, self.dtype, self.weight_init,
                      name="attn")
    x = x + attn(_layer_norm("norm1", x, self.dtype), key_mask)
    mlp = _Mlp(self.mlp_hidden, self.dtype, self.weight_init, name="mlp")
    return x + mlp(_layer_norm("norm2", x, self.dtype))


class VisionTransformer(nn.Module):
  """ViT encoder without a classification head (Dosovitskiy et al. 2021,
  arXiv 2010.11929).

  x: (B, H, W, C) float, H and W divisible by ``patch_size`` -> the
  representation (B, D) (or (B, 2D) for "cls_last2", (B, 4D) for
  "cls_last4", (B, 5D) for "cls_last4_avg"; (B, head_dim) with a head),
  dtype ``dtype``. See
  the module docstring for the position-embedding interpolation and the
  float32 LayerNorm/softmax.

  Representations (``representation``), what the evaluators probe:

  * "cls": the class token after the final LayerNorm (the default; DINO,
    MoCo v3 and the ViT paper);
  * "avg_tokens": the mean of the patch tokens after the final LayerNorm
    (I-JEPA's evaluation, Assran et al. 2023, arXiv 2301.08243, App. A:
    average-pooled target-encoder tokens; MAE's fine-tuning uses average
    pooling, and its paper notes that pooling works as well as its class
    token for linear probing, He et al. 2022, arXiv 2111.06377, App. A.1);
  * "cls_last2": the class tokens of the last two blocks, each through the
    final LayerNorm, concatenated (B, 2D) (LeJEPA's linear probe,
    Balestriero & LeCun 2025, arXiv 2511.08544; DINO's evaluation code
    with n = 2);
  * "cls_last4": the same with the last four blocks, (B, 4D) (DINO's
    linear evaluation of its small ViTs, Caron et al. 2021, arXiv
    2104.14294, §4.1 and App.: ``eval_linear.py --n_last_blocks 4``);
  * "cls_last4_avg": "cls_last4" followed by "avg_tokens" (the mean of the
    last block's patch tokens after the final LayerNorm), (B, 5D):
    DINOv2's linear evaluation with four blocks and average pooling
    (Oquab et al. 2023, arXiv 2304.07193, §7; ``create_linear_input`` of
    ``dinov2/eval/linear.py`` with ``use_n_blocks=4, use_avgpool=True``).

  Attributes:
    patch_size: side of the square patches (kernel and stride of the
      patch-embedding conv).
    hidden_dim: token width D.
    depth: number of transformer blocks.
    num_heads: attention heads; must divide hidden_dim.
    mlp_ratio: MLP hidden width / D.
    dtype: computation dtype (parameters stay float32).
    representation: one of ``REPRESENTATIONS``.
    pos_interpolation: how learned position embeddings are resized to
      another grid, one of ``POS_INTERPOLATIONS`` (`interpolate_pos_embed`):
      "timm" (the default), "dino" (DINO's and DINOv2's) or "jax".
    pos_embedding: "learned" (timm's, interpolated to other grids) or
      "sincos" (fixed 2-D sine-cosine, `sincos_pos_embed_2d`, as MAE and
      I-JEPA; the class-token entry is 0).
    class_token: prepend a class token (I-JEPA's encoder has none).
    head_dim: 0 (none, the default) or the width of a linear layer (with
      bias, named "head") on the representation: timm's classifier head
      ``num_classes``, which LeJEPA's minimal example (Balestriero & LeCun
      2025, arXiv 2511.08544; rbalestr-lab/lejepa MINIMAL.md, ``num_classes
      =512``) uses as its embedding, read by its projector and its probe.
      The representation is then (B, head_dim); ``output="tokens"`` is not
      affected.
    input_mean, input_std: () (off, the default) or C floats each (std
      > 0): the images are standardised per channel, (x - mean) / std,
      before the patch embedding, as the official I-JEPA's and MAE's data
      transforms do (Normalize with the ImageNet mean and std). Inside the
      encoder, so that training views and every evaluator's images get it.
    weight_init: "xavier" (the default; MAE's), "timm" (timm's, which
      the official DINOv2 and LeJEPA start from: N(0, 0.02²) linear
      kernels, PyTorch's default patch embedding) or "ijepa" (the official
      I-JEPA's: N(0, 0.02²) kernels, the patch embedding included); see
      ``WEIGHT_INITS``.
  """
  patch_size: int = 16
  hidden_dim: int = 384
  depth: int = 12
  num_heads: int = 6
  mlp_ratio: float = 4.0
  dtype: jnp.dtype = jnp.float32
  representation: str = "cls"
  pos_embedding: str = "learned"
  pos_interpolation: str = "timm"
  class_token: bool = True
  head_dim: int = 0
  input_mean: tuple = ()
  input_std: tuple = ()
  weight_init: str = "xavier"

  def _check(self, height, width):
    p = self.patch_size
    if height % p or width % p:
      raise ValueError(f"image size {height}x{width} is not divisible by the "
                       f"patch size {p}")
    if self.hidden_dim % self.num_heads:
      raise ValueError(f"hidden_dim {self.hidden_dim} is not divisible by "
                       f"num_heads {self.num_heads}")
    if self.representation not in REPRESENTATIONS:
      raise ValueError(f"representation {self.representation!r}: expected "
                       f"one of {REPRESENTATIONS}")
    if self.representation != "avg_tokens" and not self.class_token:
      raise ValueError(f"representation {self.representation!r} reads the "
                       "class token: use class_token=True or 'avg_tokens'")
    last = _LAST_BLOCKS.get(self.representation, 0)
    if self.depth < last:
      raise ValueError(f"representation {self.representation!r} needs "
                       f"depth >= {last}, got {self.depth}")
    if self.pos_embedding not in ("learned", "sincos"):
      raise ValueError(f"pos_embedding {self.pos_embedding!r}: expected "
                       "'learned' or 'sincos'")
    if self.pos_interpolation not in POS_INTERPOLATIONS:
      raise ValueError(f"pos_interpolation {self.pos_interpolation!r}: "
                       f"expected one of {POS_INTERPOLATIONS}")
    if (isinstance(self.head_dim, bool) or not isinstance(self.head_dim, int)
        or self.head_dim < 0):
      raise ValueError(f"head_dim must be an int >= 0, got {self.head_dim!r}")
    if len(self.input_mean) != len(self.input_std) or not all(
        s > 0 for s in self.input_std):
      raise ValueError(f"input_mean {self.input_mean!r} and input_std "
                       f"{self.input_std!r}: expected as many floats each, "
                       "std > 0 (or both empty)")
    if self.weight_init not in WEIGHT_INITS:
      raise ValueError(f"weight_init {self.weight_init!r}: expected one of "
                       f"{WEIGHT_INITS}")

  def _positions(self, gh, gw):
    """(1, num_prefix + gh·gw, D) position embeddings, float32."""
    n_prefix, dim = int(self.class_token), self.hidden_dim
    if self.pos_embedding == "sincos":
      pos = sincos_pos_embed_2d(dim, (gh, gw))
      return jnp.concatenate([jnp.zeros((n_prefix, dim)), pos])[None]
    # Sized at init; on later calls the stored shape is requested, so any
    # input resolution reads the same parameter.
    shape = (1, n_prefix + gh * gw, dim)
    if self.has_variable("params", "pos_embed"):
      shape = self.get_variable("params", "pos_embed").shape
    pos = self.param("pos_embed", nn.initializers.truncated_normal(0.02), shape)
    if pos.shape[1] != n_prefix + gh * gw:
      pos = interpolate_pos_embed(pos, (gh, gw), num_prefix=n_prefix,
                                  interpolation=self.pos_interpolation)
    return pos

  @nn.compact
  def __call__(self, x, train: bool = True, *, keep=None, keep_valid=None,
               output: str = "representation", masks=None):
    """The representation (``output="representation"``) or the tokens.

    Args:
      x: (B, H, W, C) images.
      train: unused (no dropout).
      keep: None (every patch) or int (B, K) patch positions (row-major
        over the patch grid) to encode: the tokens are gathered after the
        position embedding, as MAE's and I-JEPA's encoders do.
      keep_valid: None or bool (B, K): False marks padding in ``keep``
        (fixed shapes under jit): padded tokens are no keys of the
        attention (their own outputs are meaningless).
      output: "representation" ((B, D), (B, nD) for "cls_lastn", (B, 5D)
        for "cls_last4_avg") or
        "tokens" ((B, num_prefix + K, D): the class token first when
        ``class_token``, then the encoded patches, after the final
        LayerNorm).
      masks: None or bool (B, gh·gw) (row-major over the patch grid): the
        patch embeddings where True are replaced by a learned mask token
        (parameter "mask_token" (1, 1, D), zeros at init, created by the
        first call with masks) before the position embedding, as DINOv2's
        and iBOT's student (Oquab et al. 2023, arXiv 2304.07193, §4).

    Raises:
      ValueError: H or W not divisible by the patch size, input_mean /
        input_std not matching the channels or std <= 0, hidden_dim not
        divisible by num_heads, a representation, pos_embedding,
        pos_interpolation or weight_init name not known or not possible, a
        resolution other than the init one after a non-square init, or
        masks not of shape (B, gh·gw).
    """
    del train  # no dropout / stochastic depth
    batch, height, width, _ = x.shape
    self._check(height, width)
    p, dim = self.patch_size, self.hidden_dim
    if self.input_mean:
      if len(self.input_mean) != x.shape[-1]:
        raise ValueError(f"input_mean has {len(self.input_mean)} entries, "
                         f"the images {x.shape[-1]} channels")
      x = ((x.astype(jnp.float32) - jnp.asarray(self.input_mean, jnp.float32))
           / jnp.asarray(self.input_std, jnp.float32))
    conv_init = _patch_embed_init(self.weight_init, p * p * x.shape[-1])
    x = nn.Conv(dim, (p, p), strides=p, padding="VALID", dtype=self.dtype,
                name="patch_embed", **conv_init)(x.astype(self.dtype))
    gh, gw = x.shape[1], x.shape[2]
    x = x.reshape(batch, gh * gw, dim)
    if masks is not None:
      if masks.shape != (batch, gh * gw):
        raise ValueError(f"masks must be (B, patches) = ({batch}, {gh * gw}),"
                         f" got shape {masks.shape}")
      token = self.param("mask_token", nn.initializers.zeros, (1, 1, dim))
      x = jnp.where(masks.astype(bool)[..., None], token.astype(self.dtype), x)
    n_prefix = int(self.class_token)
    pos = self._positions(gh, gw).astype(self.dtype)
    x = x + pos[:, n_prefix:]
    if keep is not None:
      x = jnp.take_along_axis(x, keep[..., None].astype(jnp.int32), axis=1)
    key_mask = None
    if keep_valid is not None:
      key_mask = jnp.concatenate(
          [jnp.ones((batch, n_prefix), bool), keep_valid.astype(bool)], 1)
    if self.class_token:
      cls = self.param("cls_token", nn.initializers.normal(1e-6), (1, 1, dim))
      cls = jnp.broadcast_to(cls.astype(self.dtype) + pos[:, :1],
                             (batch, 1, dim))
      x = jnp.concatenate([cls, x], axis=1)
    hidden = int(dim * self.mlp_ratio)
    class_tokens = []  # after each block (for "cls_lastN")
    for i in range(self.depth):
      x = Block(self.num_heads, hidden, self.dtype, self.weight_init,
                name=f"block_{i}")(x, key_mask)
      class_tokens.append(x[:, 0])
    norm = nn.LayerNorm(epsilon=1e-6, dtype=wide_dtype(self.dtype),
                        name="norm")
    if output == "tokens":
      return norm(x).astype(self.dtype)

    def patch_mean():  # of the kept patch tokens after the final norm
      if keep_valid is None:
        return jnp.mean(norm(x[:, n_prefix:]), axis=1)
      w = keep_valid.astype(wide_dtype(self.dtype))[..., None]
      return jnp.sum(norm(x[:, n_prefix:]) * w, 1) / jnp.sum(w, 1)

    if self.representation in _LAST_BLOCKS:
      last = class_tokens[-_LAST_BLOCKS[self.representation]:]
      parts = [norm(t) for t in last]
      if self.representation in _WITH_PATCH_MEAN:
        parts.append(patch_mean().astype(parts[0].dtype))
      h = jnp.concatenate(parts, axis=-1)
    elif self.representation == "cls":
      h = norm(x[:, 0])
    else:
      h = patch_mean()
    h = h.astype(self.dtype)
    if self.head_dim:
      # timm's head: trunc_normal(0.02) weights, zero bias.
      h = nn.Dense(self.head_dim, dtype=self.dtype, name="head",
                   kernel_init=nn.initializers.truncated_normal(0.02),
                   bias_init=nn.initializers.zeros)(h)
    return h


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
