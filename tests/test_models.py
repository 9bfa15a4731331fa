"""Model output shapes (via jax.eval_shape: no compute) and BatchNorm modes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax import models


def _shapes(net, x_shape):
  init = lambda key, x: net.init(key, x, train=False)
  variables = jax.eval_shape(init, jax.random.key(0), jnp.zeros(x_shape))
  out = jax.eval_shape(lambda v, x: net.apply(v, x, train=False), variables,
                       jnp.zeros(x_shape))
  return variables, out


@pytest.mark.parametrize("name,kwargs,image,dim", [
    ("mlp", dict(features=(32, 16)), (28, 28, 1), 16),
    ("cnn", dict(channels=(8, 16, 24)), (28, 28, 1), 24),
    ("cnn", dict(channels=(4, 8), downsample="stride"), (28, 28, 1), 8),
    ("resnet18", {}, (32, 32, 3), 512),
])
def test_encoder_and_projector_shapes(name, kwargs, image, dim):
  net = models.make_network(name, kwargs, (64, 10))
  _, (h, z) = _shapes(net, (6, *image))
  assert h.shape == (6, dim) and z.shape == (6, 10)
  assert z.dtype == jnp.float32


def test_resnet18_has_the_standard_parameter_count():
  # CIFAR ResNet-18 (3x3 stem, no fc): 11.17M parameters.
  variables, _ = _shapes(models.ResNet18(), (2, 32, 32, 3))
  count = sum(np.prod(p.shape) for p in jax.tree.leaves(variables["params"]))
  assert 11_100_000 < count < 11_200_000


def test_bfloat16_network_still_returns_float32_embeddings():
  net = models.make_network("cnn", dict(channels=(4, 8)), (8, 4), jnp.bfloat16)
  _, (h, z) = _shapes(net, (3, 28, 28, 1))
  assert h.dtype == jnp.bfloat16 and z.dtype == jnp.float32


def test_batchnorm_uses_batch_statistics_only_in_training():
  net = models.make_network("mlp", dict(features=(8,)), (4,))
  x = jax.random.normal(jax.random.key(1), (16, 2, 2, 1))
  v = net.init(jax.random.key(0), x, train=False)
  _, z_eval = net.apply(v, x, train=False)
  (_, z_train), updates = net.apply(v, x, train=True, mutable=["batch_stats"])
  # Eval mode is per-example: the first row does not depend on the others.
  _, z_eval_one = net.apply(v, x[:1], train=False)
  np.testing.assert_allclose(z_eval_one[0], z_eval[0], rtol=1e-5, atol=1e-6)
  assert not np.allclose(z_train, z_eval) and "batch_stats" in updates


def test_unknown_encoder_name():
  with pytest.raises(ValueError, match="unknown encoder"):
    models.make_network("vit", {}, (4,))
