"""The DINO projection head (Caron et al. 2021)."""

import flax.linen as nn
import jax.numpy as jnp

__all__ = ["DINOHead"]


class DINOHead(nn.Module):
  """MLP → ℓ2-normalised bottleneck → weight-normalised linear layer.

  `num_layers` Dense layers (the first `num_layers − 1` of width
  `hidden_dim`, each followed by an optional BatchNorm and an exact GELU;
  the last of width `bottleneck_dim`), then x/‖x‖, then a bias-free layer
  of `out_dim` units with weight W = g·V/‖V‖ per output column (weight
  normalisation). With `norm_last_layer=True` (official default) g is fixed
  to 1, so every column of W has unit norm and, since x has unit norm, every
  logit lies in [−1, 1]; with False, g (init 1) is a learned (out_dim,)
  parameter. The DINO loss is applied to these logits.

  Parameters: Dense_0 ... Dense_{num_layers−1} (kernels initialised from a
  truncated normal of std 0.02, biases 0, as the official head),
  BatchNorm_i when `use_bn`, "last_layer_v" (bottleneck_dim, out_dim) and,
  without `norm_last_layer`, "last_layer_g" (out_dim,). The official recipe
  also keeps the last layer frozen during the first epoch; that is the
  training loop's business.

  Attributes:
    out_dim: K, number of logits (official 65536).
    hidden_dim: width of the hidden layers (2048).
    bottleneck_dim: width of the normalised bottleneck (256).
    num_layers: Dense layers before the last layer, >= 1 (3).
    use_bn: BatchNorm after each hidden Dense (False for ViTs, official).
    norm_last_layer: fix g = 1 in the weight-normalised last layer (True).
    weight_norm: the last layer is weight-normalised (True: DINO's and
      DINOv2's heads); False: a plain bias-free layer, parameter
      "last_layer" (bottleneck_dim, out_dim) from a truncated normal of std
      0.02, as DINOv3's DINOHead (Siméoni et al. 2025, arXiv 2508.10104;
      facebookresearch/dinov3 dinov3/layers/dino_head.py), whose logits
      are not bounded; ``norm_last_layer`` is then not read.
    dtype: computation dtype; parameters stay float32.

  References:
    Caron, Touvron, Misra, Jégou, Mairal, Bojanowski & Joulin 2021,
    "Emerging Properties in Self-Supervised Vision Transformers", arXiv
    2104.14294, §3.1 ("projection head": 3-layer MLP, hidden 2048, ℓ2
    normalisation, weight-normalised fully connected layer of K dimensions)
    and the official DINOHead.

  Example:
    >>> import jax
    >>> head = DINOHead(out_dim=5, hidden_dim=8, bottleneck_dim=4)
    >>> h = jnp.ones((2, 3))
    >>> variables = jax.eval_shape(head.init, jax.random.key(0), h)
    >>> variables["params"]["last_layer_v"].shape
    (4, 5)
    >>> jax.eval_shape(head.apply, variables, h).shape
    (2, 5)
  """
  out_dim: int = 65536
  hidden_dim: int = 2048
  bottleneck_dim: int = 256
  num_layers: int = 3
  use_bn: bool = False
  norm_last_layer: bool = True
  weight_norm: bool = True
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, h, train: bool = True):
    """h: (B, D) -> logits (B, out_dim), float32 (float64 if dtype is)."""
    if self.num_layers < 1:
      raise ValueError(f"num_layers must be >= 1, got {self.num_layers}")
    init = nn.initializers.truncated_normal(stddev=0.02)
    x = h.astype(self.dtype)
    for _ in range(self.num_layers - 1):
      x = nn.Dense(self.hidden_dim, dtype=self.dtype, kernel_init=init)(x)
      if self.use_bn:
        # PyTorch's BatchNorm1d defaults (momentum 0.1 = flax 0.9, eps 1e-5).
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9,
                         epsilon=1e-5, dtype=self.dtype)(x)
      x = nn.gelu(x, approximate=False)  # nn.GELU of PyTorch is exact
    x = nn.Dense(self.bottleneck_dim, dtype=self.dtype, kernel_init=init)(x)
    # ℓ2 normalisation with F.normalize's floor 1e-12 (inside the sqrt).
    x = x * jnp.reciprocal(jnp.sqrt(jnp.maximum(
        jnp.sum(x * x, axis=-1, keepdims=True), 1e-24)))
    shape = (self.bottleneck_dim, self.out_dim)
    if not self.weight_norm:
      # DINOv3: a plain bias-free layer, truncated normal of std 0.02.
      w = self.param("last_layer", init, shape, jnp.float32)
    else:
      # Weight-normalised; V's scale is irrelevant (W = V/‖V‖).
      v = self.param("last_layer_v",
                     nn.initializers.variance_scaling(1 / 3, "fan_in",
                                                      "uniform"),
                     shape, jnp.float32)
      w = v / jnp.sqrt(jnp.sum(v * v, axis=0, keepdims=True))
      if not self.norm_last_layer:
        w = w * self.param("last_layer_g", nn.initializers.ones,
                           (self.out_dim,), jnp.float32)
    out_dtype = jnp.promote_types(self.dtype, jnp.float32)
    return (x @ w.astype(self.dtype)).astype(out_dtype)
