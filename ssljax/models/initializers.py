"""Weight initialisations and BatchNorm defaults of the small models, by name.

The small encoders (`ssljax.models.encoders`) and the projector/predictor MLP
(`ssljax.models.heads.Projector`) take a ``weight_init`` attribute naming one of
``INITS``:

- ``"uniform_fan_in"`` (their default): kernel and bias both drawn from
  U(−1/√fan_in, 1/√fan_in), i.e. kernel variance 1/(3·fan_in). This is
  PyTorch's default for ``nn.Conv2d`` and ``nn.Linear`` (``reset_parameters``:
  ``kaiming_uniform_(w, a=√5)``, whose bound √(6/((1 + a²)·fan_in)) is
  1/√fan_in, and the bias bound 1/√fan_in), which the official code of most
  SSL methods (VICReg, Barlow Twins, lightly, solo-learn heads) runs with.
- ``"lecun_normal"``: flax's default, a normal truncated at ±2σ and rescaled
  to variance 1/fan_in (LeCun et al. 1998, "Efficient BackProp"); zero bias.
- ``"he_normal"``: a normal truncated at ±2σ with variance 2/fan_in (He et al.
  2015, arXiv:1502.01852, Eq. 10); zero bias.

fan_in is the number of inputs of one output unit: in_features for a Dense
kernel, kh·kw·in_channels for a convolution kernel.

Why it matters (docs/results.md, "The first epoch"): before a BatchNorm
the scale of a kernel changes nothing in the forward pass, only how fast it
turns. With SGD the effective learning rate of such a weight is lr/‖w‖²
(van Laarhoven 2017, arXiv:1706.05350); Adam's steps have a size set by lr
alone, so the relative change per step is ∝ lr/‖w‖. The PyTorch kernels
are √3 smaller than flax's, so they turn ~1.7× faster early in training (our
reading of the measurement, not a proof); on the main job the 1-epoch probe
goes from 0.8740 to 0.8825 with them.

BatchNorm (Ioffe & Szegedy 2015, arXiv:1502.03167, Alg. 1 and §3.1) keeps
running averages of the batch mean and variance for evaluation:
``BN_MOMENTUM`` = 0.9 is the weight of the old average (PyTorch's
``momentum=0.1``; flax's default is 0.99). The methods update the averages
once per view, so after one epoch of the main job (2×234 updates) even 0.99
keeps under 1 % of the initial (0, 1), but it averages over ~100 updates of
weights that have since moved: with the PyTorch initialisation the 1-epoch
k-NN accuracy is 0.8214 with 0.99 and 0.8300 with 0.9 (probe 0.8824 and
0.8825); with flax's initialisation the momentum made no difference.
``BN_EPSILON`` = 1e-5 is PyTorch's and flax's.
"""

import math

import jax
import jax.numpy as jnp
from flax.linen import initializers

__all__ = ["INITS", "BN_MOMENTUM", "BN_EPSILON", "check_init", "kernel_init",
           "bias_init"]

INITS = ("uniform_fan_in", "lecun_normal", "he_normal")
BN_MOMENTUM = 0.9
BN_EPSILON = 1e-5


def check_init(init: str) -> None:
  """Raises ValueError when ``init`` is not one of ``INITS``."""
  if init not in INITS:
    raise ValueError(f"init must be one of {INITS}, got {init!r}")


def kernel_init(init: str):
  """The flax kernel initialiser named ``init`` (one of ``INITS``).

  Returns a function (key, shape, dtype) -> array of ``shape``, whose last
  axis is the output units and the others the inputs (flax's Dense and Conv
  layout), so fan_in = prod(shape[:-1]).

  Raises:
    ValueError: an unknown name.
  """
  check_init(init)
  if init == "uniform_fan_in":  # bound √(3·scale/fan_in) = 1/√fan_in
    return initializers.variance_scaling(1 / 3, "fan_in", "uniform")
  if init == "he_normal":
    return initializers.variance_scaling(2.0, "fan_in", "truncated_normal")
  return initializers.lecun_normal()


def bias_init(init: str, fan_in: int):
  """The bias initialiser of a layer with ``fan_in`` inputs per unit.

  U(−1/√fan_in, 1/√fan_in) for "uniform_fan_in" (PyTorch's bias default),
  zeros otherwise.

  Raises:
    ValueError: an unknown name, or fan_in < 1.
  """
  check_init(init)
  if fan_in < 1:
    raise ValueError(f"fan_in must be >= 1, got {fan_in}")
  if init != "uniform_fan_in":
    return initializers.zeros
  bound = 1.0 / math.sqrt(fan_in)

  def init_fn(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -bound, bound)

  return init_fn
