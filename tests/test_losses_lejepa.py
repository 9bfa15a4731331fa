"""Tests for ssljax.losses.lejepa: the LeJEPA loss and its graph form.

Parity in float64 with a NumPy transcription of the official loss
(Balestriero & LeCun 2025, arXiv 2511.08544, Algorithm 2, and the official
code: ``(1 − λ)·(centres − z).square().mean() + λ·mean over views of
SIGReg``, centres the mean of the global views, the SIGReg statistic of
lejepa/univariate/epps_pulley.py per view), value and gradient; the graph form
over the crop graph equals it; the divergences of other implementations are
different numbers.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax import losses
from test_losses_sigreg import (official_epps_pulley, official_sigreg_grad,
                                _rel, _unit_columns)

pytestmark = pytest.mark.usefixtures("fast_compiles")


def official_lejepa(z_VxBxK, a_KxM, num_global, lam):
  """The official loss: centres = z[:G].mean(0);
  sim = (centres − z).square().mean(); sigreg = mean over views and slices of
  EppsPulley(z_v @ A); (1 − λ)·sim + λ·sigreg. Returns (loss, sim, sigreg)."""
  centres = z_VxBxK[:num_global].mean(0)
  sim = np.square(centres - z_VxBxK).mean()
  sig = official_epps_pulley(z_VxBxK @ a_KxM).mean()
  return (1 - lam) * sim + lam * sig, sim, sig


def official_lejepa_grad(z_VxBxK, a_KxM, num_global, lam):
  """∂/∂z of `official_lejepa`: invariance part
  (2/(VBK))·(z_v − μ) − [v < G]·(2/(G·VBK))·Σ_u (z_u − μ), plus λ/V times each
  view's SIGReg gradient."""
  v, b, k = z_VxBxK.shape
  mu = z_VxBxK[:num_global].mean(0)
  d_inv = 2 * (z_VxBxK - mu) / (v * b * k)
  d_inv[:num_global] -= d_inv.sum(0) / num_global
  d_sig = np.stack([official_sigreg_grad(z_VxBxK[i], a_KxM) for i in range(v)])
  return (1 - lam) * d_inv + lam * d_sig / v


def _views(rng, v, b, k):
  base = rng.standard_normal((1, b, k))
  return base + 0.5 * rng.standard_normal((v, b, k))


@pytest.mark.parametrize("v,g,b,k,m,lam", [(2, 2, 32, 8, 16, 0.05),
                                           (6, 2, 24, 6, 32, 0.05),
                                           (4, 1, 16, 4, 8, 0.5)])
def test_value_and_gradient_equal_the_official_code_float64(x64, v, g, b, k,
                                                            m, lam):
  rng = np.random.default_rng(v * 100 + b)
  z, a = _views(rng, v, b, k), _unit_columns(rng, k, m)
  fn = lambda z: losses.lejepa_terms(z, num_global=g, lam=lam, directions=a)
  terms, grad = jax.jit(lambda z: (fn(z), jax.grad(
      lambda z: fn(z)["loss"])(z)))(jnp.asarray(z))
  loss, sim, sig = official_lejepa(z, a, g, lam)
  rel = {"loss": abs(float(terms["loss"]) - loss) / loss,
         "invariance": abs(float(terms["invariance"]) - sim) / sim,
         "sigreg": abs(float(terms["sigreg"]) - sig) / sig,
         "gradient": _rel(grad, official_lejepa_grad(z, a, g, lam))}
  print(f"\nlejepa V={v} G={g} B={b} K={k} M={m} lam={lam}: "
        + ", ".join(f"{n} {r:.1e}" for n, r in rel.items()))
  assert max(rel.values()) <= 1e-12, rel


def test_transcribed_gradient_matches_finite_differences():
  rng = np.random.default_rng(1)
  z, a = _views(rng, 3, 5, 2), _unit_columns(rng, 2, 3)
  g = official_lejepa_grad(z, a, 2, 0.3)
  eps = 1e-6
  for idx in np.ndindex(z.shape):
    e = np.zeros_like(z)
    e[idx] = eps
    fd = (official_lejepa(z + e, a, 2, 0.3)[0]
          - official_lejepa(z - e, a, 2, 0.3)[0]) / (2 * eps)
    assert abs(fd - g[idx]) <= 1e-7 * max(1.0, abs(fd)), idx


@pytest.mark.parametrize("g,l", [(2, 0), (2, 4), (1, 2)])
def test_graph_form_on_the_crop_graph_equals_lejepa(x64, g, l):
  rng = np.random.default_rng(2)
  b, k = 8, 4
  z = jnp.asarray(_views(rng, g + l, b, k))
  a = jnp.asarray(_unit_columns(rng, k, 16))
  graph = losses.lejepa_crops_graph(b, g, l, dtype=jnp.float64)
  multi = lambda z: losses.lejepa(z, num_global=g, lam=0.2, directions=a)
  flat = lambda z: losses.lejepa_graph(z.reshape(-1, k), graph,
                                       num_views=g + l, lam=0.2, directions=a)
  both = jax.jit(lambda z: (jax.value_and_grad(flat)(z),
                            jax.value_and_grad(multi)(z)))
  (v_flat, g_flat), (v_multi, g_multi) = both(z)
  np.testing.assert_allclose(v_flat, v_multi, rtol=1e-13)
  np.testing.assert_allclose(g_flat, g_multi, rtol=1e-12, atol=1e-15)


def test_crop_graph_points_every_crop_at_its_global_crops():
  graph = np.asarray(losses.lejepa_crops_graph(3, 2, 2))
  assert graph.shape == (12, 12)
  np.testing.assert_array_equal(graph.sum(1), 2)  # G targets per row
  np.testing.assert_array_equal(graph[:, 6:], 0)  # local crops: no target
  for i in range(12):
    assert set(np.flatnonzero(graph[i])) == {i % 3, 3 + i % 3}


def test_lambda_interpolates_and_no_stop_gradient(x64):
  rng = np.random.default_rng(3)
  z = jnp.asarray(_views(rng, 4, 16, 3))
  a = jnp.asarray(_unit_columns(rng, 3, 8))
  terms = jax.jit(lambda z: [losses.lejepa_terms(z, num_global=2, lam=lam,
                                                  directions=a)
                             for lam in (0.0, 1.0)])(z)
  np.testing.assert_allclose(terms[0]["loss"], terms[0]["invariance"])
  np.testing.assert_allclose(terms[1]["loss"], terms[1]["sigreg"])
  # The centre μ is differentiated: the global views' gradient of the
  # invariance term sums the pull of every view (zero only with a stop-grad
  # missing the local views' pull).
  inv = lambda z: losses.lejepa_terms(z, num_global=2, lam=0.0,
                                      directions=a)["loss"]
  grad = np.asarray(jax.jit(jax.grad(inv))(z))
  np.testing.assert_allclose(grad.sum(0), 0.0, atol=1e-14)  # translation


def test_sigreg_is_per_view_not_pooled(x64):
  """Two views, each exactly N(0,1)-like but shifted ±1: pooled rows form a
  bimodal mixture while each view alone is a shifted Gaussian; the official
  per-view statistic and stable-pretraining's pooled one differ."""
  rng = np.random.default_rng(4)
  x = rng.standard_normal((1, 512, 1))
  z = jnp.asarray(np.concatenate([x + 1, x - 1]))
  a = jnp.ones((1, 1))
  per_view, pooled, each = jax.jit(lambda z: (
      losses.lejepa_terms(z, num_global=2, lam=1.0, directions=a)["sigreg"],
      losses.sigreg(z.reshape(-1, 1), a),
      jnp.stack([losses.sigreg(z[0], a), losses.sigreg(z[1], a)])))(z)
  np.testing.assert_allclose(per_view, np.mean(each), rtol=1e-13)
  assert abs(float(per_view) - float(pooled)) > 0.1 * float(pooled)


def test_divergent_anchor_forms_give_other_numbers(x64):
  """lightly before #2023 (local views only, centred on the global views) and
  stable-pretraining (inv + λ·sigreg) are not the official loss."""
  rng = np.random.default_rng(5)
  z = _views(rng, 4, 16, 3)
  a = _unit_columns(rng, 3, 8)
  ours = float(losses.lejepa(z, num_global=2, lam=0.05, directions=a))
  _, sim, sig = official_lejepa(z, a, 2, 0.05)
  lightly_old = 0.95 * np.square(z[:2].mean(0) - z[2:]).mean() + (
      0.05 * official_epps_pulley(z[2:] @ a).mean())
  stable_pretraining = sim + 0.05 * official_epps_pulley(
      z.reshape(-1, 3) @ a).mean()
  for other in (lightly_old, stable_pretraining):
    assert abs(ours - other) > 1e-3 * ours
  np.testing.assert_allclose(ours, 0.95 * sim + 0.05 * sig, rtol=1e-13)


def test_bfloat16_views_are_computed_in_float32():
  rng = np.random.default_rng(6)
  z32 = jnp.asarray(_views(rng, 4, 64, 8), jnp.float32)
  a = losses.sigreg_directions(jax.random.key(0), 8, 32)
  z16 = z32.astype(jnp.bfloat16)
  terms = jax.jit(lambda z: losses.lejepa_terms(z, num_global=2, lam=0.05,
                                                directions=a))
  out16, out = terms(z16), terms(z16.astype(jnp.float32))
  for name in ("loss", "invariance", "sigreg"):
    assert out16[name].dtype == jnp.float32
    np.testing.assert_allclose(out16[name], out[name], rtol=1e-6)
  # ... and within 2 % of the float32 embeddings (bf16 rounding of z).
  ref = terms(z32)
  np.testing.assert_allclose(out16["loss"], ref["loss"], rtol=0.02)


@pytest.mark.parametrize("kwargs, match", [
    ({"views": np.zeros((4, 3))}, r"\(V, B, K\)"),
    ({"num_global": 5}, "num_global must be <= V = 4"),
    ({"num_global": 0}, "num_global must be an int >= 1"),
    ({"lam": 1.5}, r"lam must be in \[0, 1\]"),
    ({"directions": np.eye(3)}, "directions must be"),
])
def test_bad_input_gets_one_clear_error(kwargs, match):
  args = {"views": np.zeros((4, 3, 2)), "num_global": 2, "lam": 0.05,
          "directions": np.eye(2)} | kwargs
  with pytest.raises(ValueError, match=match):
    losses.lejepa(args.pop("views"), **args)


def test_graph_form_errors():
  z, a = np.zeros((6, 2)), np.eye(2)
  with pytest.raises(ValueError, match="not divisible by num_views = 4"):
    losses.lejepa_graph(z, np.eye(6), num_views=4, lam=0.1, directions=a)
  with pytest.raises(ValueError, match=r"g must be \(N, N\) = \(6, 6\)"):
    losses.lejepa_graph(z, np.eye(5), num_views=2, lam=0.1, directions=a)
