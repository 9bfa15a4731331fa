"""Tests for ssljax.methods.ema: BYOL's cosine momentum schedule and the EMA update
(Grill et al. 2020, arXiv 2006.07733, §3.2)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax.methods import ema


def test_cosine_momentum_endpoints_and_midpoint():
  total = 100
  assert float(ema.cosine_momentum(0, total)) == pytest.approx(0.996, abs=1e-7)
  assert float(ema.cosine_momentum(50, total)) == pytest.approx(0.998, abs=1e-7)
  assert float(ema.cosine_momentum(total, total)) == pytest.approx(1.0, abs=1e-7)
  # Past the end and before the start: clipped to [0, K].
  assert float(ema.cosine_momentum(250, total)) == pytest.approx(1.0, abs=1e-7)
  assert float(ema.cosine_momentum(-3, total)) == pytest.approx(0.996, abs=1e-7)
  m = ema.cosine_momentum(7, 10, base=0.5, final=0.9)
  assert m.dtype == jnp.float32 and m.shape == ()
  want = 0.9 - 0.4 * (math.cos(math.pi * 0.7) + 1) / 2
  assert float(m) == pytest.approx(want, abs=1e-6)


def test_cosine_momentum_is_monotone_and_jit_able():
  steps = jnp.arange(0, 1001, 50)
  taus = jax.jit(jax.vmap(lambda k: ema.cosine_momentum(k, 1000)))(steps)
  assert taus.dtype == jnp.float32
  assert np.all(np.diff(np.asarray(taus)) >= 0)
  assert np.diff(np.asarray(taus)).max() > 0
  eager = [float(ema.cosine_momentum(int(k), 1000)) for k in (0, 500, 1000)]
  np.testing.assert_allclose(np.asarray(taus)[[0, 10, 20]], eager, atol=1e-7)


def test_momentum_follows_the_default_float_dtype(x64):
  # Under x64 (the float64 step comparisons) τ_k is float64, to float64
  # rounding of the formula; a float32 teacher stays float32 when moved by
  # it (ema_update casts per leaf).
  for schedule, want in (
      ("cosine", 1.0 - 0.004 * (np.cos(np.pi * 3 / 10) + 1) / 2),
      ("linear", 0.996 + 3 * 0.004 / 10)):
    tau = ema.momentum(schedule, jnp.asarray(3, jnp.int32), 10)
    assert tau.dtype == jnp.float64
    assert abs(float(tau) - want) < 1e-12  # float64, a few ulps of cos
  teacher = {"w": jnp.ones((2,), jnp.float32)}
  moved = ema.ema_update(teacher, {"w": jnp.zeros((2,), jnp.float32)},
                         ema.cosine_momentum(3, 10))
  assert moved["w"].dtype == jnp.float32


def test_ema_update_against_formula():
  rng = np.random.default_rng(0)
  teacher = {"a": rng.normal(size=(3, 2)).astype(np.float32),
             "b": [jnp.asarray(rng.normal(size=4), jnp.bfloat16)]}
  online = {"a": rng.normal(size=(3, 2)).astype(np.float32),
            "b": [jnp.asarray(rng.normal(size=4), jnp.bfloat16)]}
  out = ema.ema_update(teacher, online, 0.9)
  np.testing.assert_allclose(out["a"], 0.9 * teacher["a"] + 0.1 * online["a"],
                             rtol=1e-6)
  assert out["a"].dtype == jnp.float32 and out["b"][0].dtype == jnp.bfloat16
  kept = ema.ema_update(teacher, online, 1.0)
  copied = ema.ema_update(teacher, online, 0.0)
  for t, o, k, c in zip(*(jax.tree_util.tree_leaves(x)
                          for x in (teacher, online, kept, copied))):
    np.testing.assert_array_equal(np.asarray(k, np.float32),
                                  np.asarray(t, np.float32))
    np.testing.assert_array_equal(np.asarray(c, np.float32),
                                  np.asarray(o, np.float32))


def test_ema_update_under_jit_with_traced_momentum():
  teacher, online = {"w": jnp.zeros(3)}, {"w": jnp.ones(3)}

  @jax.jit
  def step(t, o, k):
    return ema.ema_update(t, o, ema.cosine_momentum(k, 10, base=0.5))

  out = step(teacher, online, jnp.asarray(0))
  np.testing.assert_allclose(out["w"], 0.5 * np.ones(3), rtol=1e-6)


def test_bad_inputs_name_the_argument():
  t = {"w": jnp.zeros(2)}
  for m in (-0.1, 1.5, float("nan")):
    with pytest.raises(ValueError, match="momentum"):
      ema.ema_update(t, t, m)
  with pytest.raises(ValueError, match="teacher and online"):
    ema.ema_update(t, {"v": jnp.zeros(2)}, 0.5)
  with pytest.raises(ValueError, match="teacher and online"):
    ema.ema_update(t, {"w": jnp.zeros(3)}, 0.5)
  with pytest.raises(ValueError, match="base"):
    ema.cosine_momentum(0, 10, base=1.2)
  with pytest.raises(ValueError, match="final"):
    ema.cosine_momentum(0, 10, final=-0.5)
  for total in (0, -1):
    with pytest.raises(ValueError, match="total_steps"):
      ema.cosine_momentum(0, total)
