"""Tests for ssljax.losses.sigreg: SIGReg, the sliced Epps–Pulley statistic.

Parity in float64 with a NumPy transcription of the official code
(rbalestr-lab/lejepa @ eddffdd: ``lejepa/univariate/epps_pulley.py``
``EppsPulley.forward`` and ``lejepa/multivariate/slicing.py``
``SlicingUnivariateTest.forward`` with the directions given, reduction
"mean"), value and gradient (the transcription's gradient is the closed form
of its autograd, itself checked against finite differences). Then the
statistic's properties: its null expectation, collapse and uniform data,
evenness of the quadrature, bf16 inputs, and 8 devices against 1.
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax import losses

pytestmark = pytest.mark.usefixtures("fast_compiles")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------- official, in NumPy --
def official_epps_pulley(x_NxM, t_max=3.0, n_points=17):
  """EppsPulley(t_max, n_points).forward(x) on 1 process (world_size 1):

      t = linspace(0, t_max, n_points); dt = t_max / (n_points − 1)
      weights = full(2·dt); weights[[0, −1]] = dt; phi = exp(−t²/2)
      weights = weights · phi
      cos_mean = cos(x[..., None] · t).mean(−3); sin_mean likewise
      err = (cos_mean − phi)² + sin_mean²
      return (err @ weights) · N
  """
  assert n_points % 2 == 1
  t = np.linspace(0, t_max, n_points)
  dt = t_max / (n_points - 1)
  weights = np.full(n_points, 2 * dt)
  weights[[0, -1]] = dt
  phi = np.exp(-np.square(t) / 2)
  weights = weights * phi
  x_t = x_NxM[..., None] * t
  cos_mean, sin_mean = np.cos(x_t).mean(-3), np.sin(x_t).mean(-3)
  err = np.square(cos_mean - phi) + np.square(sin_mean)
  return (err @ weights) * x_NxM.shape[-2]


def official_sigreg(z_NxK, a_KxM, t_max=3.0, n_points=17):
  """SlicingUnivariateTest(EppsPulley, reduction="mean") with A given:
  ``univariate_test(x @ A).mean()``."""
  return official_epps_pulley(z_NxK @ a_KxM, t_max, n_points).mean()


def official_sigreg_grad(z_NxK, a_KxM, t_max=3.0, n_points=17):
  """∂/∂z of `official_sigreg`: with x = z A, C, S the means of cos(t x),
  sin(t x) over the N rows,
  ∂T_m/∂x_nm = Σ_j 2 w_j t_j (S_mj cos(t_j x_nm) − (C_mj − φ_j) sin(t_j x_nm)),
  then the mean over m and the chain rule through x = z A."""
  t = np.linspace(0, t_max, n_points)
  dt = t_max / (n_points - 1)
  w = np.full(n_points, 2 * dt)
  w[[0, -1]] = dt
  phi = np.exp(-np.square(t) / 2)
  w = w * phi
  x = z_NxK @ a_KxM
  xt = x[..., None] * t
  c, s = np.cos(xt).mean(0), np.sin(xt).mean(0)
  dx = np.einsum("j,nmj->nm", 2 * w * t,
                 s[None] * np.cos(xt) - (c - phi)[None] * np.sin(xt))
  return (dx / a_KxM.shape[1]) @ a_KxM.T


def _unit_columns(rng, k, m):
  a = rng.standard_normal((k, m))
  return a / np.linalg.norm(a, axis=0)


def _rel(a, b):
  return float(np.max(np.abs(np.asarray(a) - b)) / np.max(np.abs(b)))


@jax.jit
def _vg(z, a):
  return jax.value_and_grad(losses.sigreg)(z, a)


# ------------------------------------------------------------------ parity --
def test_transcribed_gradient_matches_finite_differences():
  rng = np.random.default_rng(0)
  z, a = rng.standard_normal((7, 3)), _unit_columns(rng, 3, 4)
  g = official_sigreg_grad(z, a)
  eps = 1e-6
  for idx in np.ndindex(z.shape):
    e = np.zeros_like(z)
    e[idx] = eps
    fd = (official_sigreg(z + e, a) - official_sigreg(z - e, a)) / (2 * eps)
    assert abs(fd - g[idx]) <= 1e-7 * max(1.0, abs(fd)), idx


PARITY = [(64, 8, 16, 1.0), (256, 32, 128, 1.0), (33, 5, 7, 3.0),
          (256, 16, 64, 0.1)]


@pytest.mark.parametrize("n,k,m,scale", PARITY)
def test_value_and_gradient_equal_the_official_code_float64(x64, n, k, m,
                                                            scale):
  rng = np.random.default_rng(n + k + m)
  z = scale * rng.standard_normal((n, k)) + 0.3 * rng.uniform(size=k)
  a = _unit_columns(rng, k, m)
  value, grad = _vg(jnp.asarray(z), jnp.asarray(a))
  assert value.dtype == jnp.float64
  rel_value = abs(float(value) - official_sigreg(z, a)) / official_sigreg(z, a)
  rel_grad = _rel(grad, official_sigreg_grad(z, a))
  print(f"\nsigreg N={n} K={k} M={m} scale={scale}: value {rel_value:.1e}, "
        f"gradient {rel_grad:.1e}")
  assert rel_value <= 1e-12 and rel_grad <= 1e-11


def test_other_quadratures_equal_the_official_code(x64):
  rng = np.random.default_rng(1)
  z, a = rng.standard_normal((50, 4)), _unit_columns(rng, 4, 6)
  for n_points, t_max in ((21, 5.0), (5, 2.0)):
    value = losses.sigreg(z, a, num_knots=n_points, t_max=t_max)
    np.testing.assert_allclose(value, official_sigreg(z, a, t_max, n_points),
                               rtol=1e-12)


# -------------------------------------------------------------- properties --
def test_half_line_quadrature_is_the_symmetric_trapezoid(x64):
  """Doubling inside [0, 3] is the trapezoid on [−3, 3] (33 knots): the
  integrand |φ̂(t) − φ(t)|² is even."""
  rng = np.random.default_rng(2)
  x = rng.standard_normal((40, 1)) * 1.3 + 0.2
  t = np.linspace(-3, 3, 33)
  integrand = (np.square(np.cos(np.outer(x, t)).mean(0) - np.exp(-t * t / 2))
               + np.square(np.sin(np.outer(x, t)).mean(0))) * np.exp(-t * t / 2)
  full = 40 * np.sum((integrand[1:] + integrand[:-1]) / 2 * np.diff(t))
  np.testing.assert_allclose(losses.sigreg(x, np.ones((1, 1))), full,
                             rtol=1e-12)


def test_paper_quadrature_differs_slightly_from_the_code(x64):
  """Algorithm 1 of the paper: trapezoid on 17 knots over [−5, 5]; the code
  integrates on [0, 3]. Same statistic up to well under 1 % here."""
  rng = np.random.default_rng(3)
  x = rng.standard_normal((256, 1)) * 1.2 + 0.1
  t = np.linspace(-5, 5, 17)
  w = np.full(17, 10 / 16)
  w[[0, -1]] /= 2
  err = (np.square(np.cos(np.outer(x, t)).mean(0) - np.exp(-t * t / 2))
         + np.square(np.sin(np.outer(x, t)).mean(0)))
  paper = 256 * np.sum(w * np.exp(-t * t / 2) * err)
  ours = float(losses.sigreg(x, np.ones((1, 1))))
  assert ours != paper and abs(ours - paper) / paper < 0.01


def test_null_expectation_is_exact_for_any_n(x64):
  """For i.i.d. N(0, 1) projections E|φ̂ − φ|² = (1 − φ²)/N, so
  E[SIGReg] = Σ_j w_j (1 − exp(−t_j²)) whatever N. Each of R draws gives an
  independent statistic (K = 1, one direction); their mean is within 5
  standard errors of the closed form (fails with probability ~1e-6)."""
  expected = losses.sigreg_null_mean()
  stat = jax.jit(jax.vmap(lambda z: losses.sigreg(z, jnp.ones((1, 1)))))
  rng = np.random.default_rng(4)
  for n in (8, 64):
    draws = np.asarray(stat(jnp.asarray(rng.standard_normal((2000, n, 1)))))
    se = draws.std(ddof=1) / np.sqrt(draws.size)
    assert abs(draws.mean() - expected) <= 5 * se, (n, draws.mean(), se)
  # For a K-dim isotropic Gaussian every unit direction is such a sample.
  z = rng.standard_normal((4000, 16))
  a = np.asarray(losses.sigreg_directions(jax.random.key(0), 16, 64,
                                          jnp.float64))
  assert float(losses.sigreg(z, a)) < 3 * expected


def test_collapse_and_uniform_grow_like_n(x64):
  """A non-Gaussian sample gives N·∫|φ_X − φ|²w: linear in N, far above the
  null value ~1.05. Collapsed: z = 0; uniform on [−√3, √3] (mean 0,
  variance 1, Gaussian in its first two moments)."""
  rng = np.random.default_rng(5)
  one = np.ones((1, 1))
  t, w = losses.sigreg_quadrature()
  phi = np.exp(-t * t / 2)
  s3t = np.sqrt(3) * np.maximum(t, 1e-300)
  phi_uniform = np.where(t > 0, np.sin(np.sqrt(3) * t) / s3t, 1.0)
  for n in (1000, 8000):
    collapsed = float(losses.sigreg(np.zeros((n, 1)), one))
    np.testing.assert_allclose(collapsed, n * np.sum(w * (1 - phi) ** 2),
                               rtol=1e-12)
    uniform = float(losses.sigreg(
        rng.uniform(-np.sqrt(3), np.sqrt(3), (n, 1)), one))
    population = n * np.sum(w * (phi_uniform - phi) ** 2)
    # Null fluctuations are O(1): within 10 of the population value.
    assert abs(uniform - population) < 10, (n, uniform, population)
  assert collapsed > 1000 * losses.sigreg_null_mean()
  assert uniform > 50 * losses.sigreg_null_mean()


def test_gradient_matches_finite_differences(x64):
  rng = np.random.default_rng(6)
  z, a = rng.standard_normal((9, 3)), _unit_columns(rng, 3, 5)
  jax.test_util.check_grads(lambda z: losses.sigreg(z, a), (jnp.asarray(z),),
                            order=2, modes=["rev"], eps=1e-5)


def test_directions_are_unit_columns_and_reproducible():
  a = losses.sigreg_directions(jax.random.key(3), 12, 100)
  assert a.shape == (12, 100) and a.dtype == jnp.float32
  np.testing.assert_allclose(jnp.linalg.norm(a, axis=0), 1.0, rtol=1e-6)
  np.testing.assert_array_equal(
      a, losses.sigreg_directions(jax.random.key(3), 12, 100))
  assert not np.allclose(a, losses.sigreg_directions(jax.random.key(4), 12,
                                                     100))


def test_bfloat16_embeddings_are_computed_in_float32():
  """bf16 z: the statistic is computed in float32 on the bf16 values (equal
  to float32 on the upcast values), and within 2 % of float32 z here (the
  bf16 rounding of z, relative 2⁻⁸, moves the statistic)."""
  rng = np.random.default_rng(7)
  z32 = jnp.asarray(rng.standard_normal((512, 16)) * 0.7 + 0.2, jnp.float32)
  a = losses.sigreg_directions(jax.random.key(0), 16, 64)
  z16 = z32.astype(jnp.bfloat16)
  value16 = losses.sigreg(z16, a)
  assert value16.dtype == jnp.float32
  np.testing.assert_allclose(value16, losses.sigreg(z16.astype(jnp.float32),
                                                    a), rtol=1e-6)
  np.testing.assert_allclose(value16, losses.sigreg(z32, a), rtol=0.02)
  g16 = jax.grad(lambda z: losses.sigreg(z, a))(z16)
  assert g16.dtype == jnp.bfloat16 and np.isfinite(
      np.asarray(g16, np.float32)).all()


def test_jit_equals_eager():
  rng = np.random.default_rng(8)
  z = jnp.asarray(rng.standard_normal((32, 4)), jnp.float32)
  a = losses.sigreg_directions(jax.random.key(1), 4, 8)
  np.testing.assert_allclose(jax.jit(losses.sigreg)(z, a),
                             losses.sigreg(z, a), rtol=1e-6)


@pytest.mark.parametrize("z, a, kwargs, match", [
    (np.zeros((4,)), np.eye(2), {}, "rank-2"),
    (np.zeros((4, 3)), np.eye(2), {}, r"directions must be \(K, M\) with K = 3"),
    (np.zeros((4, 2)), np.eye(2), {"num_knots": 16}, "odd int >= 3"),
    (np.zeros((4, 2)), np.eye(2), {"t_max": 0.0}, "t_max must be > 0"),
    (np.full((4, 2), np.nan), np.eye(2), {}, "z must be finite"),
])
def test_bad_input_gets_one_clear_error(z, a, kwargs, match):
  with pytest.raises(ValueError, match=match):
    losses.sigreg(z, a, **kwargs)


# ------------------------------------------------------- 8 devices vs one --
def _device_worker():
  """Value and gradient of SIGReg of a (64, 8) float64 z: rows sharded over
  8 CPU devices against one device."""
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=import-outside-toplevel
  jax.config.update("jax_enable_x64", True)
  rng = np.random.default_rng(0)
  z = rng.standard_normal((64, 8)) * 1.3 + 0.1
  a = np.asarray(losses.sigreg_directions(jax.random.key(0), 8, 32,
                                          jnp.float64))
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
  vg = jax.jit(jax.value_and_grad(losses.sigreg))
  v1, g1 = vg(jax.device_put(z, jax.devices()[0]), a)
  zs = jax.device_put(z, NamedSharding(mesh, P("data")))
  v8, g8 = vg(zs, jax.device_put(a, NamedSharding(mesh, P())))
  print(json.dumps({"devices": len(jax.devices()),
                    "value": _rel(v8, np.asarray(v1)),
                    "gradient": _rel(g8, np.asarray(g1)),
                    "official": _rel(v1, official_sigreg(z, a))}))


def test_eight_devices_equal_one_device():
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=8")
  out = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env,
                       cwd=REPO, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-4000:]
  row = json.loads(out.stdout.strip().splitlines()[-1])
  print("\n", row)
  assert row["devices"] == 8
  assert row["value"] <= 1e-13 and row["gradient"] <= 1e-13
  assert row["official"] <= 1e-12


if __name__ == "__main__":
  _device_worker()
