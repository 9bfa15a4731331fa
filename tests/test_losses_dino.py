"""Tests for ssljax.losses.dino and ssljax.models.DINOHead.

The loss is checked in float64 against a NumPy transcription of the official
DINOLoss (Caron et al. 2021, arXiv 2104.14294, Algorithm 1): value, and the
gradient against the closed form ∂/∂s_vb = Σ_{g≠v} (P_s,vb − P_t,gb)/(τ_s·B·n_pairs).
"""

import jax
from jax.experimental import sparse as jsparse
import jax.numpy as jnp
import numpy as np
from scipy import special as scipy_special
import pytest

from ssljax import losses
from ssljax.models import DINOHead

pytestmark = pytest.mark.usefixtures("fast_compiles")

B, K = 3, 5


# One jitted value-and-gradient for every test with equal shapes (the
# temperatures are traced arguments).
@jax.jit
def _dino_vg(s, t, c, tau_s, tau_t):
  return jax.value_and_grad(
      lambda s, t, c: losses.dino(s, t, c, student_temperature=tau_s,
                                  teacher_temperature=tau_t),
      argnums=(0, 1, 2))(s, t, c)


@jax.jit
def _graph_vg(s, t, c, g, tau_s, tau_t):
  return jax.value_and_grad(
      lambda s, t, c: losses.dino_graph(s, t, c, g, student_temperature=tau_s,
                                        teacher_temperature=tau_t),
      argnums=(0, 1, 2))(s, t, c)


# ---------------------------------------------------------------------------
# NumPy transcription of the official DINOLoss.
# ---------------------------------------------------------------------------


def _softmax(x):
  e = np.exp(x - x.max(axis=-1, keepdims=True))
  return e / e.sum(axis=-1, keepdims=True)


def _numpy_dino(student, teacher, center, tau_s, tau_t):
  """Loop over (teacher crop iq, student crop v ≠ iq), as the official code."""
  student_out = [s / tau_s for s in student]
  teacher_out = [_softmax((t - center) / tau_t) for t in teacher]
  total, n_terms = 0.0, 0
  for iq, q in enumerate(teacher_out):
    for v, s in enumerate(student_out):
      if v == iq:
        continue
      log_p = np.log(_softmax(s))
      total += np.sum(-q * log_p, axis=-1).mean()
      n_terms += 1
  return total / n_terms


def _numpy_dino_grad(student, teacher, center, tau_s, tau_t):
  v_crops, g_crops = student.shape[0], teacher.shape[0]
  p_s = _softmax(student / tau_s)
  p_t = _softmax((teacher - center) / tau_t)
  n_pairs = g_crops * (v_crops - 1)
  grad = np.zeros_like(student)
  for v in range(v_crops):
    for g in range(g_crops):
      if g != v:
        grad[v] += (p_s[v] - p_t[g]) / (tau_s * student.shape[1] * n_pairs)
  return grad


def _inputs(rng, g_crops, l_crops):
  s = rng.normal(size=(g_crops + l_crops, B, K))
  t = rng.normal(size=(g_crops, B, K))
  return s, t, rng.normal(size=K)


def _close(a, b, rtol=1e-12, atol=1e-13):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------
# Loss.
# ---------------------------------------------------------------------------


class TestDino:

  @pytest.mark.parametrize("l_crops", [0, 4])
  def test_against_numpy_official_value_and_grad(self, x64, l_crops):
    rng = np.random.default_rng(l_crops)
    s, t, c = _inputs(rng, 2, l_crops)
    value, (g_s, g_t, g_c) = _dino_vg(s, t, c, 0.1, 0.04)
    _close(value, _numpy_dino(s, t, c, 0.1, 0.04))
    _close(g_s, _numpy_dino_grad(s, t, c, 0.1, 0.04), rtol=1e-10)
    # Stop-gradient: the teacher and the centre get exactly zero.
    assert np.all(np.asarray(g_t) == 0) and np.all(np.asarray(g_c) == 0)
    assert np.abs(np.asarray(g_s)).max() > 1e-3

  def test_one_global_crop_and_eager_equals_jit(self, x64):
    rng = np.random.default_rng(1)
    s, t, c = _inputs(rng, 1, 2)
    _close(losses.dino(s, t, c, student_temperature=0.2,
                       teacher_temperature=0.05),
           _numpy_dino(s, t, c, 0.2, 0.05))

  def test_terms_monitors(self, x64):
    rng = np.random.default_rng(2)
    s, t, c = _inputs(rng, 2, 1)
    out = losses.dino_terms(s, t, c, teacher_temperature=0.07)
    p_t = _softmax((t - c) / 0.07)
    entropy = -np.sum(p_t * np.log(p_t), axis=-1).mean()
    _close(out["teacher_entropy"], entropy)
    # KL averaged over the pairs (teacher crop g, student crop v ≠ g).
    log_ps = np.log(_softmax(s / 0.1))
    kls = [np.sum(p_t[g] * (np.log(p_t[g]) - log_ps[v]), axis=-1).mean()
           for g in range(2) for v in range(3) if v != g]
    _close(out["kl"], np.mean(kls))
    _close(out["loss"], _numpy_dino(s, t, c, 0.1, 0.07))
    # Uniform logits: H = log K, KL = 0.
    out = losses.dino_terms(np.zeros((3, B, K)), np.zeros((2, B, K)),
                            np.zeros(K))
    _close(out["loss"], np.log(K))
    _close(out["teacher_entropy"], np.log(K))
    _close(out["kl"], 0.0, atol=1e-14)

  def test_batch_permutation_invariance(self, x64):
    rng = np.random.default_rng(3)
    s, t, c = _inputs(rng, 2, 2)
    perm = rng.permutation(B)
    _close(_dino_vg(s[:, perm], t[:, perm], c, 0.1, 0.04)[0],
           _dino_vg(s, t, c, 0.1, 0.04)[0])

  def test_center_shift_of_student_changes_nothing(self, x64):
    # log_softmax is invariant to adding a constant per row.
    rng = np.random.default_rng(4)
    s, t, c = _inputs(rng, 2, 0)
    _close(losses.dino(s + 3.0, t, c), losses.dino(s, t, c))

  @pytest.mark.parametrize("dtype", ["float32", "float64"])
  def test_dtypes(self, dtype):
    rng = np.random.default_rng(5)
    s, t, c = _inputs(rng, 2, 1)
    with jax.enable_x64(dtype == "float64"):
      out = losses.dino_terms(s.astype(dtype), t.astype(dtype), c.astype(dtype))
      for value in out.values():
        assert value.dtype == dtype and value.shape == ()
      assert losses.dino_center_update(c.astype(dtype), t.astype(dtype)).dtype \
          == dtype
    np.testing.assert_allclose(float(out["loss"]),
                               _numpy_dino(s, t, c, 0.1, 0.04), rtol=1e-5)


# ---------------------------------------------------------------------------
# Graph form.
# ---------------------------------------------------------------------------


class TestDinoGraph:

  @pytest.mark.parametrize("l_crops", [0, 4])
  def test_crops_graph_equals_dino_dense_and_bcoo(self, x64, l_crops):
    rng = np.random.default_rng(10 + l_crops)
    s, t, c = _inputs(rng, 2, l_crops)
    v = 2 + l_crops
    value, grads = _dino_vg(s, t, c, 0.1, 0.04)
    s_rows, t_rows = s.reshape(v * B, K), t.reshape(2 * B, K)
    for g in (losses.dino_crops_graph(B, 2, l_crops, dtype=jnp.float64),
              losses.dino_crops_graph(B, 2, l_crops, sparse=True)):
      g_value, (g_s, g_t, g_c) = _graph_vg(s_rows, t_rows, c, g, 0.1, 0.04)
      _close(g_value, value)
      _close(g_s, np.asarray(grads[0]).reshape(v * B, K), rtol=1e-10)
      assert np.all(np.asarray(g_t) == 0) and np.all(np.asarray(g_c) == 0)

  def test_crops_graph_structure(self):
    g = np.asarray(losses.dino_crops_graph(B, 2, 3))
    assert g.shape == (5 * B, 2 * B)
    assert g.sum() == B * 2 * 4  # B·G·(V − 1) pairs
    # Global crop 0 of image 1 (teacher row 1) teaches student crops 1..4 of
    # image 1, never crop 0 of image 1 nor other images.
    np.testing.assert_array_equal(np.nonzero(g[:, 1])[0], [1 + B * v for v in
                                                           range(1, 5)])
    sparse = losses.dino_crops_graph(B, 2, 3, sparse=True)
    np.testing.assert_array_equal(np.asarray(sparse.todense()), g)

  def test_weighted_graph_against_numpy_and_permutation(self, x64):
    rng = np.random.default_rng(12)
    s, t, c = rng.normal(size=(6, K)), rng.normal(size=(4, K)), rng.normal(size=K)
    g = rng.uniform(size=(6, 4))
    log_ps, p_t = np.log(_softmax(s / 0.1)), _softmax((t - c) / 0.04)
    h = -log_ps @ p_t.T  # H(P_t,j, P_s,i) at (i, j)
    _close(losses.dino_graph(s, t, c, g), np.sum(g * h) / g.sum())
    pi, pj = rng.permutation(6), rng.permutation(4)
    _close(losses.dino_graph(s[pi], t[pj], c, g[np.ix_(pi, pj)]),
           losses.dino_graph(s, t, c, g))
    # BCOO with padding entries (index = shape) counts only real entries.
    rows, cols = np.nonzero(g)
    padded = jsparse.BCOO(
        (np.concatenate([g[rows, cols], np.full(3, 9.0)]),
         np.concatenate([np.stack([rows, cols], 1), np.full((3, 2), 6)])),
        shape=(6, 4))
    _close(losses.dino_graph(s, t, c, padded), np.sum(g * h) / g.sum())


# ---------------------------------------------------------------------------
# Centre and teacher temperature.
# ---------------------------------------------------------------------------


class TestCenterAndTemperature:

  def test_center_update_formula(self, x64):
    rng = np.random.default_rng(20)
    _, t, c = _inputs(rng, 2, 0)
    want = 0.9 * c + 0.1 * t.reshape(-1, K).mean(axis=0)
    _close(losses.dino_center_update(c, t), want)
    _close(losses.dino_center_update(c, t.reshape(-1, K)), want)  # (M, K)
    _close(losses.dino_center_update(c, t, momentum=0.0),
           t.reshape(-1, K).mean(axis=0))
    _close(losses.dino_center_update(c, t, momentum=1.0), c)
    jitted = jax.jit(losses.dino_center_update)(c, t, momentum=0.5)
    _close(jitted, 0.5 * c + 0.5 * t.reshape(-1, K).mean(axis=0))

  def test_teacher_temperature_schedule(self):
    temp = losses.dino_teacher_temperature
    # Start, midpoint, end, after the warm-up; a negative step gives start.
    np.testing.assert_allclose(temp(np.array([0, 15, 30, 31, 1000, -3]), 30),
                               [0.04, 0.055, 0.07, 0.07, 0.07, 0.04], rtol=1e-6)
    assert float(temp(5, 0)) == pytest.approx(0.07)
    assert float(temp(4, 8, start=0.1, end=0.2)) == pytest.approx(0.15)
    traced = jax.jit(lambda s: temp(s, 30))(jnp.array(15))
    np.testing.assert_allclose(traced, 0.055, rtol=1e-6)
    # The official np.linspace(start, end, W) is this schedule with W − 1.
    np.testing.assert_allclose(temp(np.arange(30), 29),
                               np.linspace(0.04, 0.07, 30), rtol=1e-6)


# ---------------------------------------------------------------------------
# Head.
# ---------------------------------------------------------------------------


class TestDINOHead:

  def test_shapes_norms_and_bounded_logits(self):
    head = DINOHead(out_dim=7, hidden_dim=8, bottleneck_dim=4)
    h = jnp.asarray(np.random.default_rng(0).normal(size=(5, 3)) * 10,
                    jnp.float32)
    variables = jax.jit(head.init)(jax.random.key(1), h)
    apply = jax.jit(head.apply)
    params = variables["params"]
    assert set(params) == {"Dense_0", "Dense_1", "Dense_2", "last_layer_v"}
    assert params["Dense_0"]["kernel"].shape == (3, 8)
    assert params["Dense_1"]["kernel"].shape == (8, 8)
    assert params["Dense_2"]["kernel"].shape == (8, 4)
    assert params["last_layer_v"].shape == (4, 7)
    logits = apply(variables, h)
    assert logits.shape == (5, 7) and logits.dtype == jnp.float32
    # W = V/‖V‖ per column, x has unit norm: |logit| <= 1.
    assert np.abs(np.asarray(logits)).max() <= 1 + 1e-6
    v = np.asarray(params["last_layer_v"])
    w = v / np.linalg.norm(v, axis=0, keepdims=True)
    np.testing.assert_allclose(np.linalg.norm(w, axis=0), 1.0, rtol=1e-6)
    # Scaling V changes nothing (only its direction counts).
    scaled = {"params": {**params, "last_layer_v": 5.0 * params["last_layer_v"]}}
    np.testing.assert_allclose(apply(scaled, h), logits, rtol=1e-5,
                               atol=1e-6)

  def test_free_gain_batchnorm_and_one_layer(self):
    h = jnp.ones((4, 3)).at[0].set(2.0)
    head = DINOHead(out_dim=6, hidden_dim=8, bottleneck_dim=4, use_bn=True,
                    norm_last_layer=False, num_layers=2)
    variables = jax.jit(head.init)(jax.random.key(0), h)
    assert variables["params"]["last_layer_g"].shape == (6,)
    np.testing.assert_array_equal(variables["params"]["last_layer_g"], 1.0)
    assert "BatchNorm_0" in variables["batch_stats"]
    apply = jax.jit(lambda v: head.apply(v, h, mutable=["batch_stats"])[0])
    logits = apply(variables)
    # A gain of 3 scales the logits by 3.
    params = {**variables["params"],
              "last_layer_g": 3.0 * variables["params"]["last_layer_g"]}
    logits3 = apply({**variables, "params": params})
    np.testing.assert_allclose(logits3, 3.0 * logits, rtol=1e-5, atol=1e-6)
    one = DINOHead(out_dim=6, bottleneck_dim=4, num_layers=1)
    params = jax.eval_shape(one.init, jax.random.key(0), h)["params"]
    assert set(params) == {"Dense_0", "last_layer_v"}
    assert params["Dense_0"]["kernel"].shape == (3, 4)

  def test_dinov3_head_is_a_plain_last_layer(self, x64):
    # DINOv3's DINOHead (facebookresearch/dinov3 dinov3/layers/
    # dino_head.py): Linear-GELU-Linear-GELU-Linear, F.normalize, then a
    # bias-free nn.Linear without weight normalisation, every Linear drawn
    # from a truncated normal of std 0.02. Written out in numpy, float64.
    rng = np.random.default_rng(3)
    h = rng.normal(size=(5, 3))
    head = DINOHead(out_dim=7, hidden_dim=8, bottleneck_dim=4,
                    weight_norm=False, dtype=jnp.float64)
    params = jax.jit(head.init)(jax.random.key(2), jnp.asarray(h))["params"]
    assert set(params) == {"Dense_0", "Dense_1", "Dense_2", "last_layer"}
    assert params["last_layer"].shape == (4, 7)
    assert 0.01 < float(np.std(params["last_layer"])) < 0.03
    params = jax.tree.map(
        lambda a: jnp.asarray(rng.normal(size=a.shape)), params)
    gelu = lambda x: 0.5 * x * (1 + scipy_special.erf(x / np.sqrt(2)))
    x = h
    for i in range(2):
      d = params[f"Dense_{i}"]
      x = gelu(x @ np.asarray(d["kernel"]) + np.asarray(d["bias"]))
    x = x @ np.asarray(params["Dense_2"]["kernel"]) + np.asarray(
        params["Dense_2"]["bias"])
    x = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
    want = x @ np.asarray(params["last_layer"])
    got = head.apply({"params": params}, jnp.asarray(h))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # Unbounded logits: the last layer's scale is the logits' scale.
    doubled = {**params, "last_layer": 2.0 * params["last_layer"]}
    np.testing.assert_allclose(head.apply({"params": doubled},
                                          jnp.asarray(h)), 2 * want,
                               rtol=1e-12)


# ---------------------------------------------------------------------------
# Errors.
# ---------------------------------------------------------------------------


class TestDinoErrors:

  @pytest.mark.parametrize("tau", [0.0, -0.1, float("nan"), float("inf")])
  def test_temperatures(self, tau):
    s, t, c = np.zeros((3, 2, 4)), np.zeros((2, 2, 4)), np.zeros(4)
    with pytest.raises(ValueError, match="student_temperature"):
      losses.dino(s, t, c, student_temperature=tau)
    with pytest.raises(ValueError, match="teacher_temperature"):
      losses.dino(s, t, c, teacher_temperature=tau)
    with pytest.raises(ValueError, match="teacher_temperature"):
      losses.dino_graph(s[0], t[0], c, np.ones((2, 2)),
                        teacher_temperature=tau)

  def test_shapes(self):
    c = np.zeros(4)
    with pytest.raises(ValueError, match=r"student .* and teacher .*\(3, 2, 4\)"
                       r".*\(2, 3, 4\)"):
      losses.dino(np.zeros((3, 2, 4)), np.zeros((2, 3, 4)), c)
    with pytest.raises(ValueError, match="G <= V"):
      losses.dino(np.zeros((1, 2, 4)), np.zeros((2, 2, 4)), c)
    with pytest.raises(ValueError, match="student must be a non-empty rank-3"):
      losses.dino(np.zeros((6, 4)), np.zeros((2, 2, 4)), c)
    with pytest.raises(ValueError, match=r"center must have shape \(K,\)"):
      losses.dino(np.zeros((3, 2, 4)), np.zeros((2, 2, 4)), np.zeros(5))
    with pytest.raises(ValueError, match=r"g must have shape \(6, 4\).*\(4, 6\)"):
      losses.dino_graph(np.zeros((6, 4)), np.zeros((4, 4)), c, np.ones((4, 6)))
    with pytest.raises(ValueError, match="student and teacher must have the same K"):
      losses.dino_graph(np.zeros((6, 4)), np.zeros((4, 3)), c, np.ones((6, 4)))
    with pytest.raises(ValueError, match="g must have a positive total"):
      losses.dino_graph(np.zeros((6, 4)), np.zeros((4, 4)), c, np.zeros((6, 4)))

  def test_values_and_helpers(self):
    s = np.zeros((3, 2, 4))
    s[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="student must be finite"):
      losses.dino(s, np.zeros((2, 2, 4)), np.zeros(4))
    for m in (-0.1, 1.5, float("nan")):
      with pytest.raises(ValueError, match="momentum"):
        losses.dino_center_update(np.zeros(4), np.zeros((2, 2, 4)), momentum=m)
    with pytest.raises(ValueError, match="warmup_steps"):
      losses.dino_teacher_temperature(0, -1)
    with pytest.raises(ValueError, match="end"):
      losses.dino_teacher_temperature(0, 10, end=0.0)
    with pytest.raises(ValueError, match="num_global"):
      losses.dino_crops_graph(2, 0, 3)
    with pytest.raises(ValueError, match="num_local"):
      losses.dino_crops_graph(2, 2, -1)
    with pytest.raises(ValueError, match="num_global \\+ num_local"):
      losses.dino_crops_graph(2, 1, 0)
