"""The small models' initialisations have the stated distributions, and their
BatchNorm keeps running averages with the stated momentum.

Statistical checks use tens of thousands of draws: the sample variance of n
i.i.d. draws has relative standard error about sqrt(2/n) (< 1 % here), so a
5 % tolerance fails only on a wrong distribution.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax import models
from ssljax.models import initializers as inits


# A normal truncated at ±2s has standard deviation 0.8796·s; flax picks s
# so that the truncated one has the stated variance: bound 2/0.8796 σ.
_TRUNC = 2 / 0.87962566103423978


@pytest.mark.parametrize("init,variance,bound_sigmas", [
    ("uniform_fan_in", 1 / 3, math.sqrt(3)),  # U(±1/√fan_in)
    ("lecun_normal", 1.0, _TRUNC),  # variance 1/fan_in
    ("he_normal", 2.0, _TRUNC),  # variance 2/fan_in
])
def test_kernel_init_variance_and_bounds(init, variance, bound_sigmas):
  fan_in, units = 288, 256  # a 3x3 conv from 32 channels
  w = np.asarray(inits.kernel_init(init)(jax.random.key(0),
                                         (3, 3, 32, units)))
  var = variance / fan_in
  assert w.var() == pytest.approx(var, rel=0.05)
  assert abs(w.mean()) < 0.02 * math.sqrt(var)
  bound = bound_sigmas * math.sqrt(var)
  assert np.abs(w).max() <= bound * (1 + 1e-6)
  assert np.abs(w).max() >= 0.95 * bound  # the bound is reached


def test_uniform_fan_in_is_pytorch_kaiming_uniform_a_sqrt5():
  """PyTorch's nn.Linear/nn.Conv2d reset_parameters: kaiming_uniform_(a=√5)
  has bound gain·√(3/fan_in) with gain √(2/(1 + a²)): 1/√fan_in."""
  fan_in = 512
  a = math.sqrt(5)
  torch_bound = math.sqrt(2 / (1 + a * a)) * math.sqrt(3 / fan_in)
  w = np.asarray(inits.kernel_init("uniform_fan_in")(jax.random.key(1),
                                                     (fan_in, 512)))
  assert torch_bound == pytest.approx(1 / math.sqrt(fan_in))
  assert np.abs(w).max() <= torch_bound * (1 + 1e-6)
  # Uniform on [−b, b]: half the draws have |w| > b/2 (a normal: 38 %).
  assert np.mean(np.abs(w) > torch_bound / 2) == pytest.approx(0.5, abs=0.01)


def test_bias_init():
  b = np.asarray(inits.bias_init("uniform_fan_in", 100)(jax.random.key(2),
                                                        (20000,)))
  assert np.abs(b).max() <= 0.1 * (1 + 1e-6)
  assert b.var() == pytest.approx(0.01 / 3, rel=0.05)
  zero = inits.bias_init("lecun_normal", 100)(jax.random.key(2), (5,))
  np.testing.assert_array_equal(np.asarray(zero), 0.0)


def test_unknown_init_and_fan_in_are_refused():
  with pytest.raises(ValueError, match="init must be one of"):
    inits.kernel_init("xavier")
  with pytest.raises(ValueError, match="fan_in"):
    inits.bias_init("uniform_fan_in", 0)
  with pytest.raises(ValueError, match="init must be one of"):
    models.SmallCNN(channels=(4,), weight_init="torch").init(
        jax.random.key(0), jnp.zeros((2, 8, 8, 1)))


def test_models_use_the_default_init():
  """SmallCNN, MLPEncoder and Projector kernels (and the projector's last
  bias) are U(±1/√fan_in) by default."""
  cnn = models.SmallCNN(channels=(64, 256)).init(
      jax.random.key(0), jnp.zeros((1, 8, 8, 3)), train=False)["params"]
  w = np.asarray(cnn["Conv_1"]["kernel"])  # fan_in 9·64 = 576
  assert w.var() == pytest.approx(1 / (3 * 576), rel=0.05)
  assert np.abs(w).max() <= 1 / math.sqrt(576) * (1 + 1e-6)
  mlp = models.MLPEncoder(features=(256,)).init(
      jax.random.key(0), jnp.zeros((1, 10, 10, 1)), train=False)["params"]
  assert np.asarray(mlp["Dense_0"]["kernel"]).var() == pytest.approx(
      1 / 300, rel=0.05)
  proj = models.Projector((128, 4096)).init(
      jax.random.key(0), jnp.zeros((1, 64)), train=False)["params"]
  assert np.asarray(proj["Dense_0"]["kernel"]).var() == pytest.approx(
      1 / (3 * 64), rel=0.05)
  bias = np.asarray(proj["Dense_1"]["bias"])  # fan_in 128
  assert np.abs(bias).max() <= 1 / math.sqrt(128) * (1 + 1e-6)
  assert bias.var() == pytest.approx(1 / (3 * 128), rel=0.1)


def test_lecun_normal_is_flax_default():
  """weight_init="lecun_normal" gives the parameters flax's default would."""
  import flax.linen as nn
  x = jnp.zeros((1, 8, 8, 3))
  ours = models.SmallCNN(channels=(8,), weight_init="lecun_normal").init(
      jax.random.key(3), x, train=False)["params"]["Conv_0"]["kernel"]

  class Plain(nn.Module):
    @nn.compact
    def __call__(self, x):
      return nn.Conv(8, (3, 3), use_bias=False)(x)

  plain = Plain().init(jax.random.key(3), x)["params"]["Conv_0"]["kernel"]
  np.testing.assert_array_equal(np.asarray(ours), np.asarray(plain))


@pytest.mark.parametrize("momentum", [inits.BN_MOMENTUM, 0.99])
def test_batchnorm_running_average_momentum(momentum):
  """One training batch from the initial (0, 1) statistics: running mean =
  (1 − m)·batch mean, running variance = m + (1 − m)·batch variance
  (flax keeps the biased batch variance)."""
  net = models.Projector((16, 4), bn_momentum=momentum)
  h = jax.random.normal(jax.random.key(4), (64, 8)) * 3.0 + 1.0
  variables = net.init(jax.random.key(5), h, train=False)
  _, upd = net.apply(variables, h, train=True, mutable=["batch_stats"])
  pre = h @ variables["params"]["Dense_0"]["kernel"]
  stats = upd["batch_stats"]["BatchNorm_0"]
  np.testing.assert_allclose(stats["mean"], (1 - momentum) * pre.mean(0),
                             rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(stats["var"],
                             momentum + (1 - momentum) * pre.var(0),
                             rtol=1e-4, atol=1e-6)
  assert models.SmallCNN().bn_momentum == 0.9  # PyTorch's momentum=0.1
