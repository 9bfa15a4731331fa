"""Tests for the predictor + stop-gradient losses: BYOL, SimSiam, MoCo v3.

References are NumPy transcriptions of each paper's pseudo-code (Grill et al.
2020 eq. (2) and §3.1; Chen & He 2021 Algorithm 1; Chen, Xie & He 2021
Algorithm 1). Values and gradients are compared in float64; reference
gradients are central finite differences of the NumPy functions (the
targets held fixed, as the stop-gradient does).
"""

import jax
from jax.experimental import sparse as jsparse
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import pad_bcoo
from ssljax import graphs
from ssljax import losses
from ssljax.losses.byol import graph_cosine

pytestmark = pytest.mark.usefixtures("fast_compiles")

B, K = 4, 3


# ---------------------------------------------------------------------------
# NumPy references, written from the papers' pseudo-code.
# ---------------------------------------------------------------------------


def _normalize(x):
  return x / np.linalg.norm(x, axis=1, keepdims=True)


def _np_byol(p, z):
  """Mean over the batch of ‖p̂ − ẑ‖² summed over features (eq. (2))."""
  return np.mean(np.sum((_normalize(p) - _normalize(z))**2, axis=1))


def _np_byol_two_view(p1, p2, z1, z2):
  return _np_byol(p1, z2) + _np_byol(p2, z1)


def _np_simsiam_d(p, z):
  """D(p, z) = −(normalize(p) * normalize(z)).sum(dim=1).mean()."""
  return -np.mean(np.sum(_normalize(p) * _normalize(z), axis=1))


def _np_simsiam_two_view(p1, p2, z1, z2):
  return _np_simsiam_d(p1, z2) / 2 + _np_simsiam_d(p2, z1) / 2


def _np_ctr(q, k, tau):
  """CrossEntropy(q̂k̂ᵀ/τ, labels = arange) · 2τ, one row at a time."""
  logits = _normalize(q) @ _normalize(k).T / tau
  total = 0.0
  for i in range(len(q)):
    row = logits[i]
    total += np.log(np.sum(np.exp(row - row.max()))) + row.max() - row[i]
  return 2 * tau * total / len(q)


def _np_mocov3_two_view(q1, q2, k1, k2, tau):
  return _np_ctr(q1, k2, tau) + _np_ctr(q2, k1, tau)


def _np_graph_sq_dist(p, z, g):
  """Σ_ij G_ij ‖p̂_i − ẑ_j‖² / Σ_ij G_ij, double loop."""
  pn, zn = _normalize(p), _normalize(z)
  num = sum(g[i, j] * np.sum((pn[i] - zn[j])**2)
            for i in range(len(p)) for j in range(len(z)))
  return num / np.sum(g)


def _fd_grad(f, x, h=1e-6):
  """Central finite differences of a NumPy scalar function of x."""
  grad = np.zeros_like(x)
  for idx in np.ndindex(x.shape):
    e = np.zeros_like(x)
    e[idx] = h
    grad[idx] = (f(x + e) - f(x - e)) / (2 * h)
  return grad


def _four(seed, n=B, k=K):
  rng = np.random.default_rng(seed)
  return [rng.normal(size=(n, k)) for _ in range(4)]


def _close(a, b, rtol=1e-12, atol=1e-13):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


TWO_VIEW = {
    "byol": (losses.byol_two_view, _np_byol_two_view),
    "simsiam": (losses.simsiam_two_view, _np_simsiam_two_view),
    "mocov3": (lambda *a: losses.mocov3_two_view(*a, temperature=0.3),
               lambda *a: _np_mocov3_two_view(*a, 0.3)),
}


# ---------------------------------------------------------------------------
# Values and gradients against the references; stop-gradients.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TWO_VIEW))
def test_two_view_value_and_grad_match_numpy(x64, name):
  fn, ref = TWO_VIEW[name]
  p1, p2, z1, z2 = _four(1)
  value, grads = jax.value_and_grad(fn, argnums=(0, 1, 2, 3))(p1, p2, z1, z2)
  assert value.dtype == jnp.float64
  _close(value, ref(p1, p2, z1, z2))
  _close(grads[0], _fd_grad(lambda x: ref(x, p2, z1, z2), p1), rtol=1e-7,
         atol=1e-8)
  _close(grads[1], _fd_grad(lambda x: ref(p1, x, z1, z2), p2), rtol=1e-7,
         atol=1e-8)
  # Stop-gradient: the targets / keys get exactly zero, the predictions not.
  assert np.all(np.asarray(grads[2]) == 0) and np.all(np.asarray(grads[3]) == 0)
  assert np.abs(np.asarray(grads[0])).min() > 0


def test_one_direction_losses_match_numpy(x64):
  p, z, _, _ = _four(2)
  _close(losses.byol(p, z), _np_byol(p, z))
  _close(losses.simsiam(p, z), _np_simsiam_d(p, z))
  _close(losses.mocov3(p, z, temperature=0.2), _np_ctr(p, z, 0.2))
  # BYOL's two forms of one pair: ‖p̂ − ẑ‖² = 2 − 2 cos = 2 + 2 D.
  _close(losses.byol(p, z), 2 + 2 * losses.simsiam(p, z))
  assert float(losses.mocov3(p, z)) == pytest.approx(_np_ctr(p, z, 0.2),
                                                     rel=1e-12)  # default τ


def test_hand_computed_extremes():
  e = jnp.eye(2)
  assert float(losses.byol(e, 3 * e)) == pytest.approx(0.0, abs=1e-6)
  assert float(losses.byol(e, -e)) == pytest.approx(4.0)
  assert float(losses.simsiam(e, 2 * e)) == pytest.approx(-1.0)
  # Orthogonal queries, τ = 1: −log(e / (e + 1)) per row, times 2τ = 2.
  assert float(losses.mocov3(e, e, temperature=1.0)) == pytest.approx(
      2 * np.log1p(np.exp(-1.0)), rel=1e-6)


# ---------------------------------------------------------------------------
# Symmetries.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TWO_VIEW))
def test_row_permutation_invariance(x64, name):
  fn, _ = TWO_VIEW[name]
  args = _four(3)
  perm = np.array([2, 0, 3, 1])
  _close(fn(*[a[perm] for a in args]), fn(*args))
  # A permutation of the targets alone breaks the pairing: a real test.
  assert abs(float(fn(args[0], args[1], args[2][perm], args[3])) -
             float(fn(*args))) > 1e-3


@pytest.mark.parametrize("name", ["byol", "simsiam"])
def test_invariant_to_positive_row_scaling(x64, name):
  fn, _ = TWO_VIEW[name]
  args = _four(4)
  rng = np.random.default_rng(5)
  scaled = [a * rng.uniform(0.1, 10.0, size=(B, 1)) for a in args]
  _close(fn(*scaled), fn(*args))
  flipped = [args[0] * np.array([[-1.0], [1.0], [1.0], [1.0]])] + args[1:]
  assert abs(float(fn(*flipped)) - float(fn(*args))) > 1e-3


# ---------------------------------------------------------------------------
# Graph forms: identities with the two-view forms, rectangular G, BCOO.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("sparse", [False, True])
def test_graph_identities_on_views_graph(x64, sparse):
  p1, p2, z1, z2 = _four(6)
  p, z = np.concatenate([p1, p2]), np.concatenate([z1, z2])
  g = graphs.views_graph(B, 2, dtype=jnp.float64, sparse=sparse)
  # BYOL: the two-view sum of two batch means = 2 × the mean over 2B edges.
  _close(losses.byol_two_view(p1, p2, z1, z2), 2 * losses.byol_graph(p, z, g))
  _close(losses.simsiam_two_view(p1, p2, z1, z2), losses.simsiam_graph(p, z, g))
  # Same gradients too (w.r.t. the stacked predictions).
  g_two = jax.grad(losses.byol_two_view, argnums=(0, 1))(p1, p2, z1, z2)
  g_graph = jax.grad(lambda p: 2 * losses.byol_graph(p, z, g))(p)
  _close(np.concatenate(g_two), g_graph, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
def test_mocov3_graph_identity(x64, sparse):
  q1, q2, k1, k2 = _four(7)
  eye = jnp.eye(B, dtype=jnp.float64)
  eye = graphs.to_bcoo(eye) if sparse else eye
  tau = 0.3
  _close(losses.mocov3_graph(q1, k2, eye, temperature=tau),
         losses.mocov3(q1, k2, temperature=tau))
  _close(losses.mocov3_graph(q1, k2, eye, temperature=tau)
         + losses.mocov3_graph(q2, k1, eye, temperature=tau),
         losses.mocov3_two_view(q1, q2, k1, k2, temperature=tau))


def test_rectangular_graph_multicrop(x64):
  # 3 views of B samples as online rows, targets only for the 2 global views;
  # every crop points at the other views' global crops.
  rng = np.random.default_rng(8)
  p, z = rng.normal(size=(3 * B, K)), rng.normal(size=(2 * B, K))
  g = np.asarray(graphs.views_graph(B, 3, dtype=jnp.float64))[:, :2 * B]
  g = g * rng.uniform(0.5, 2.0, size=g.shape)  # any weights, not symmetric
  _close(losses.byol_graph(p, z, g), _np_graph_sq_dist(p, z, g))
  rows, cols = np.nonzero(g)
  g_sp = pad_bcoo(jsparse.BCOO(
      (jnp.asarray(g[rows, cols]), jnp.asarray(np.stack([rows, cols], 1))),
      shape=g.shape), nse=40)  # padding entries (index 12) must count 0
  _close(losses.byol_graph(p, z, g_sp), losses.byol_graph(p, z, g))
  _close(losses.simsiam_graph(p, z, g_sp), losses.simsiam_graph(p, z, g))
  # MoCo v3 graph form: CE with the positives of row i weighted by G_i.
  logits = _normalize(p) @ _normalize(z).T / 0.5
  logp = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
  want = 2 * 0.5 * -np.sum(g * logp) / np.sum(g)
  _close(losses.mocov3_graph(p, z, g, temperature=0.5), want)
  _close(losses.mocov3_graph(p, z, g_sp, temperature=0.5), want)
  grads = jax.grad(losses.byol_graph, argnums=(0, 1))(p, z, g)
  assert np.all(np.asarray(grads[1]) == 0)
  _close(grads[0], _fd_grad(lambda x: _np_graph_sq_dist(x, z, g), p),
         rtol=1e-7, atol=1e-8)


# ---------------------------------------------------------------------------
# dtypes and jit.
# ---------------------------------------------------------------------------


def test_float32_under_jit():
  p1, p2, z1, z2 = [jnp.asarray(a, jnp.float32) for a in _four(9)]
  g = graphs.views_graph(B, 2)

  @jax.jit
  def all_losses(p1, p2, z1, z2, tau):
    p, z = jnp.concatenate([p1, p2]), jnp.concatenate([z1, z2])
    return (losses.byol_two_view(p1, p2, z1, z2), losses.byol_graph(p, z, g),
            losses.simsiam_two_view(p1, p2, z1, z2),
            losses.mocov3_two_view(p1, p2, z1, z2, temperature=tau),
            losses.mocov3_graph(p, z, g, temperature=tau))

  out = all_losses(p1, p2, z1, z2, 0.2)
  assert all(v.dtype == jnp.float32 and v.shape == () for v in out)
  want = _np_byol_two_view(*[np.asarray(a, np.float64) for a in (p1, p2, z1, z2)])
  assert float(out[0]) == pytest.approx(want, rel=1e-5)
  assert float(out[0]) == pytest.approx(2 * float(out[1]), rel=1e-5)
  want = _np_mocov3_two_view(*[np.asarray(a, np.float64)
                               for a in (p1, p2, z1, z2)], 0.2)
  assert float(out[3]) == pytest.approx(want, rel=1e-5)
  # On the stacked views each query's softmax also sees its own view's keys.
  assert abs(float(out[4]) - float(out[3]) / 2) > 1e-3


# ---------------------------------------------------------------------------
# Bad input.
# ---------------------------------------------------------------------------


def test_bad_inputs_name_the_argument():
  a, b = jnp.ones((4, 3)), jnp.ones((5, 3))
  with pytest.raises(ValueError, match=r"p_online and z_target .*\(4, 3\).*\(5, 3\)"):
    losses.byol(a, b)
  with pytest.raises(ValueError, match="p1 and z2_t"):
    losses.byol_two_view(a, a, a, b)
  with pytest.raises(ValueError, match="p2 and z1"):
    losses.simsiam_two_view(a, b, a, a)
  with pytest.raises(ValueError, match="q and k"):
    losses.mocov3(a, b)
  with pytest.raises(ValueError, match="p must be a rank-2"):
    losses.simsiam(jnp.ones(3), jnp.ones(3))
  with pytest.raises(ValueError, match="z_target must be finite"):
    losses.byol(a, a.at[0, 0].set(jnp.nan))
  for tau in (0.0, -0.1, float("nan"), float("inf")):
    with pytest.raises(ValueError, match="temperature"):
      losses.mocov3(a, a, temperature=tau)
  with pytest.raises(ValueError, match="temperature"):
    losses.mocov3_two_view(a, a, a, a, temperature=0.0)
  with pytest.raises(ValueError, match=r"g must have shape \(4, 5\)"):
    losses.byol_graph(a, b, jnp.ones((4, 4)))
  with pytest.raises(ValueError, match=r"g must have shape \(4, 5\)"):
    losses.mocov3_graph(a, b, jnp.ones((5, 4)))
  with pytest.raises(ValueError, match="g must have a positive total weight"):
    losses.simsiam_graph(a, a, jnp.zeros((4, 4)))
  with pytest.raises(ValueError, match="p and z_target must have the same number of columns"):
    graph_cosine(a, jnp.ones((4, 2)), jnp.eye(4), names=("p", "z_target", "g"))
  g_batched = jsparse.BCOO(  # (4, 5) with a batch dimension
      (jnp.ones((4, 1)), jnp.zeros((4, 1, 1), jnp.int32)), shape=(4, 5))
  with pytest.raises(ValueError, match="g must be a BCOO with 2 sparse"):
    losses.byol_graph(a, b, g_batched)
