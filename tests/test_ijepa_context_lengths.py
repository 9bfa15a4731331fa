"""I-JEPA's context lengths: the step runs the context encoder and the
predictor on the context cut to the shortest static length that holds the
batch's valid context (`ssljax.methods.ijepa.context_lengths`), not padded
to the bound; loss and gradient equal those of the padded run; the target
encoder gets no gradient."""

import os
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax import methods, models

from ssljax.methods import masks
from ssljax.methods import ijepa

pytestmark = pytest.mark.usefixtures("fast_compiles")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # configs/

GRID = (14, 14)  # 56 px views, patch 4: ViT-B/16's grid at 224 px
# Mask keys of a batch of 2 whose smallest context has 61 (length 64: the
# predictor on all target blocks at once) and 100 patches (length 128: one
# target block at a time); checked in the test.
SHORT_KEY, LONG_KEY = 2, 7


def _method():
  from configs import ijepa as ijepa_config  # pylint: disable=import-outside-toplevel
  config = ijepa_config.get_config("smoke")
  config.views.size = 56
  method = methods.build(config)
  params, state = method.init(jax.random.key(0),
                              methods.BatchSpec((56, 56, 1), 1, 0))
  views = (jnp.asarray(np.random.default_rng(0).uniform(
      size=(2, 56, 56, 1)), jnp.float32),)
  return method, params, state, {"views": views}


def _bounds(method):
  return masks.multiblock_bounds(
      GRID, **{k: v for k, v in method.mask_kwargs().items()
               if k in ("target_scale", "target_aspect", "context_scale")})


def test_context_lengths_cover_the_bound_in_steps_of_eight():
  assert ijepa.context_lengths(169) == (48, 64, 88, 128, 169)
  assert ijepa.context_lengths(63) == (63,)
  for bound in range(64, 400, 7):
    lengths = ijepa.context_lengths(bound)
    assert list(lengths) == sorted(set(lengths)) and lengths[-1] == bound
    assert all(k % 8 == 0 for k in lengths[:-1]) and lengths[0] >= bound / 4
  with pytest.raises(ValueError, match="bound"):
    ijepa.context_lengths(0)


def test_predictor_sees_the_cut_context_and_long_ones_one_block_at_a_time():
  """Every branch's predictor input: the cut context (length k) + T_max
  query tokens; above half the bound, one target block (M = 1) a call."""
  method, params, state, batch = _method()
  t_max, bound = _bounds(method)
  seen = set()

  def record(next_fun, args, kwargs, context):
    if isinstance(context.module, models.JEPAPredictor):
      ctx, _, target_idx = args[:3]
      assert target_idx.shape[-1] == t_max
      seen.add((ctx.shape[1], target_idx.shape[0]))
    return next_fun(*args, **kwargs)

  schedule = {"step": jnp.zeros((), jnp.int32), "total_steps": 4,
              "steps_per_epoch": 2}
  with nn.intercept_methods(record):
    jax.eval_shape(jax.grad(lambda p: method.loss(
        p, state, batch, jax.random.key(SHORT_KEY), schedule)[0]), params)
  m = method.mask_kwargs()["num_targets"]
  assert seen == {(k, 1 if 2 * k > bound else m)
                  for k in ijepa.context_lengths(bound)}


@pytest.mark.parametrize("key,length", [
    pytest.param(SHORT_KEY, 64, marks=pytest.mark.slow), (LONG_KEY, 128)])
def test_cut_context_gives_the_loss_and_gradient_of_the_padded_one(
    key, length, monkeypatch):
  """A switch over three of the library's lengths (five compile slowly)."""
  method, params, state, batch = _method()
  _, bound = _bounds(method)
  m = masks.multiblock_masks(jax.random.key(key), 2, GRID,
                             **method.mask_kwargs())
  lengths = (64, 128, bound)
  assert set(lengths) <= set(ijepa.context_lengths(bound))
  monkeypatch.setattr(ijepa, "context_lengths", lambda b: lengths)
  chosen = lengths[int(np.searchsorted(lengths, int(m["num_context"])))]
  assert chosen == length < bound  # the test cuts the context

  schedule = {"step": jnp.zeros((), jnp.int32), "total_steps": 4,
              "steps_per_epoch": 2}

  def value_and_grad():
    return jax.jit(jax.value_and_grad(lambda p: method.loss(
        p, state, batch, jax.random.key(key), schedule)[0]))(params)

  cut, g_cut = value_and_grad()
  monkeypatch.setattr(ijepa, "context_lengths", lambda b: (b,))
  padded, g_padded = value_and_grad()
  np.testing.assert_allclose(cut, padded, rtol=1e-5)
  for a, b in zip(jax.tree.leaves(g_cut), jax.tree.leaves(g_padded)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  assert float(jnp.sum(jnp.abs(g_cut["predictor"]["proj"]["kernel"]))) > 0


def test_no_gradient_reaches_the_target_encoder():
  method, params, state, batch = _method()
  schedule = {"step": jnp.zeros((), jnp.int32), "total_steps": 4,
              "steps_per_epoch": 2}

  def loss_of_teacher(teacher_params):
    s = {**state, "teacher": {**state["teacher"], "params": teacher_params}}
    return method.loss(params, s, batch, jax.random.key(SHORT_KEY),
                       schedule)[0]

  grads = jax.jit(jax.grad(loss_of_teacher))(state["teacher"]["params"])
  for g in jax.tree.leaves(grads):
    np.testing.assert_array_equal(g, 0.0)
