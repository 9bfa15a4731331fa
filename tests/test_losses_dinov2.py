"""Tests for ssljax.losses.dinov2 (dinov2_terms, gram_anchoring), .koleo, .ibot.

Each loss is checked in float64 against a NumPy transcription of the official
code, written here in our own words but in the official order of operations:

* facebookresearch/dinov2 @ b8931f7bf91576930313be2c6d6af376033b35f0:
  dinov2/loss/dino_clstoken_loss.py (DINOLoss, sinkhorn_knopp_teacher, lazy
  centre), ibot_patch_loss.py (forward_masked), koleo_loss.py (KoLeoLoss),
  dinov2/data/collate.py (masks_weight), dinov2/train/ssl_meta_arch.py
  (forward_backward: swapped teacher, division counts, KoLeo sum).
* facebookresearch/dinov3 @ 6876159a11b4df116f30f667f8c9888617df0751:
  dinov3/loss/dino_clstoken_loss.py (ignore_diagonal), gram_loss.py
  (GramLoss), dinov3/train/ssl_meta_arch.py (compute_losses).

Values to 1e-10 relative; gradients against central finite differences of
the NumPy reference on every coordinate (teacher inputs held fixed, as the
official teacher runs without gradient), to 1e-6 relative to the largest
component. References: Oquab et al. 2023 (arXiv 2304.07193), Siméoni et al.
2025 (arXiv 2508.10104), Sablayrolles et al. 2019 (arXiv 1806.03198), Zhou
et al. 2021 (arXiv 2111.07832).
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
B, K, D, T = 4, 6, 5, 5


# ------------------------------------------------------- official, in NumPy --
def log_softmax(x):
  m = x.max(axis=-1, keepdims=True)
  return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def softmax(x):
  return np.exp(log_softmax(x))


def official_sinkhorn(teacher_output, teacher_temp, n_samples=None,
                      n_iterations=3):
  """sinkhorn_knopp_teacher on one process: the raw exp, K-by-B layout,
  total-sum normalisation, then per-prototype and per-sample steps."""
  q = np.exp(teacher_output / teacher_temp).T
  n = q.shape[1] if n_samples is None else n_samples
  k = q.shape[0]
  q = q / np.sum(q)
  for _ in range(n_iterations):
    q = q / np.sum(q, axis=1, keepdims=True)
    q = q / k
    q = q / np.sum(q, axis=0, keepdims=True)
    q = q / n
  return (q * n).T


def official_dino_loss(student_list, teacher_list, student_temp=0.1):
  """DINOv2 DINOLoss.forward: every (student, teacher) pair, means summed."""
  total = 0.0
  for s in student_list:
    lsm = log_softmax(s / student_temp)
    for t in teacher_list:
      total -= np.sum(t * lsm, axis=-1).mean()
  return total


def official_koleo(x, eps=1e-8):
  norms = np.sqrt(np.sum(x * x, axis=-1, keepdims=True))
  u = x / np.maximum(norms, eps)
  dots = u @ u.T
  np.fill_diagonal(dots, -1)
  nn = np.argmax(dots, axis=1)
  diff = u - u[nn] + eps                      # nn.PairwiseDistance's eps
  return -np.mean(np.log(np.sqrt(np.sum(diff * diff, axis=-1)) + eps))


def official_masks_weight(masks):
  per_crop = 1 / np.maximum(masks.sum(-1), 1.0)
  return np.broadcast_to(per_crop[:, None], masks.shape)[masks]


def official_ibot_masked(s, t, masks, student_temp=0.1):
  loss = np.sum(t * log_softmax(s / student_temp), axis=-1)
  loss = loss * official_masks_weight(masks)
  return -loss.sum() / masks.shape[0]


class OfficialDinoV2:
  """DINOv2 SSLMetaArch.forward_backward's losses, with the DINOLoss and
  iBOTPatchLoss centre state (lazy update) kept across calls."""

  def __init__(self, k, momentum=0.9):
    self.center, self.ibot_center = np.zeros((1, k)), np.zeros((1, 1, k))
    self.pending = self.ibot_pending = None
    self.m = momentum

  def _apply(self):
    if self.pending is not None:
      self.center = self.center * self.m + self.pending * (1 - self.m)
      self.pending = None
    if self.ibot_pending is not None:
      self.ibot_center = (self.ibot_center * self.m
                          + self.ibot_pending * (1 - self.m))
      self.ibot_pending = None

  def step(self, sg, sl, tg, sp, tp, masks, cls, *, teacher_temp, centering,
           koleo_w=0.1, ibot_w=1.0):
    n_local = sl.shape[0]
    b = sg.shape[1]
    t_cls = tg.reshape(2 * b, -1)
    t_cls = np.concatenate([t_cls[b:], t_cls[:b]])      # swapped chunks
    if centering == "centering":
      self._apply()
      p = softmax((t_cls - self.center) / teacher_temp).reshape(2, b, -1)
      self.pending = t_cls.sum(0, keepdims=True) / len(t_cls)
      p_patch = softmax((tp[None] - self.ibot_center) / teacher_temp)[0]
      self.ibot_pending = tp[None].mean(1).sum(0, keepdims=True) / 1
    else:
      p = official_sinkhorn(t_cls, teacher_temp).reshape(2, b, -1)
      p_patch = official_sinkhorn(tp, teacher_temp, n_samples=len(tp))
    n_local_terms = max(n_local * 2, 1)
    n_global_terms = (2 - 1) * 2
    out = {"dino_local": 0.0}
    if n_local > 0:
      out["dino_local"] = official_dino_loss(
          list(sl), list(p)) / (
              n_global_terms + n_local_terms)
    out["dino_global"] = official_dino_loss(
        [sg.reshape(2 * b, -1)], [p.reshape(2 * b, -1)]) * 2 / (
            n_global_terms + n_local_terms)
    flat_cls = cls.reshape(2 * b, -1)
    out["koleo"] = koleo_w * sum(official_koleo(c) for c in
                                 (flat_cls[:b], flat_cls[b:]))
    out["ibot"] = ibot_w * official_ibot_masked(sp, p_patch, masks) * 2 * 0.5
    out["loss"] = (out["dino_local"] + out["dino_global"] + out["koleo"]
                   + out["ibot"])
    return out


def official_dinov3(sg, sl, tg, sp, tp, masks, cls, *, teacher_temp,
                    koleo_w=0.1, ibot_w=1.0):
  """DINOv3 SSLMetaArch.compute_losses (global_ignore_diagonal=True)."""
  g, b, k = sg.shape
  n_local = sl.shape[0]
  p = official_sinkhorn(tg.reshape(g * b, k), teacher_temp).reshape(g, b, k)
  p_patch = official_sinkhorn(tp, teacher_temp, n_samples=len(tp))
  global_terms, local_terms = g * (g - 1), g * n_local
  global_scale = global_terms / (global_terms + local_terms)
  local_scale = local_terms / (global_terms + local_terms)
  with np.errstate(invalid="ignore", divide="ignore"):
    lsm_l = log_softmax(sl / 0.1)
    local = -np.einsum("sbk,tbk->", lsm_l, p) / (b * n_local * g)
  lsm_g = log_softmax(sg / 0.1)
  per_pair = -np.einsum("sbk,tbk->st", lsm_g, p)
  np.fill_diagonal(per_pair, 0)
  glob = per_pair.sum() / (b * g * g - b * g)
  koleo = sum(official_koleo(x) for x in cls) / g
  ibot = official_ibot_masked(sp, p_patch, masks)
  out = {"dino_local": local_scale * local, "dino_global": global_scale * glob,
         "koleo": koleo_w * g * koleo, "ibot": ibot_w * ibot}
  out["loss"] = sum(out.values())
  return out


def official_gram(output_feats, target_feats, img_level, remove_neg,
                  remove_only_teacher_neg):
  """GramLoss(apply_norm=True).forward, with its in-place clipping order."""
  def normalize(x):
    return x / np.maximum(np.sqrt(np.sum(x * x, -1, keepdims=True)), 1e-12)
  target_feats = normalize(target_feats)
  if not img_level and target_feats.ndim == 3:
    target_feats = target_feats.reshape(-1, target_feats.shape[-1])
  target_sim = target_feats @ np.swapaxes(target_feats, -1, -2)
  output_feats = normalize(output_feats)
  if not img_level and output_feats.ndim == 3:
    output_feats = output_feats.reshape(-1, output_feats.shape[-1])
  student_sim = output_feats @ np.swapaxes(output_feats, -1, -2)
  if remove_neg:
    target_sim[target_sim < 0] = 0.0
    student_sim[student_sim < 0] = 0.0
  elif remove_only_teacher_neg:
    target_sim[target_sim < 0] = 0.0
    student_sim[(student_sim < 0) & (target_sim < 0)] = 0.0
  return np.mean((student_sim - target_sim) ** 2)


# ------------------------------------------------------------------ helpers --
def rel(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def finite_difference(f, x, h=1e-6):
  """Central differences of a NumPy scalar function, every coordinate."""
  x = np.array(x, np.float64)
  grad = np.zeros_like(x)
  for i in np.ndindex(x.shape):
    up, down = x.copy(), x.copy()
    up[i] += h
    down[i] -= h
    grad[i] = (f(up) - f(down)) / (2 * h)
  return grad


def make_masks(rng, c, t):
  masks = np.zeros((c, t), bool)
  for row in range(c):
    if row % 3 == 2:
      continue                                   # an unmasked crop
    masks[row, rng.choice(t, size=rng.integers(1, t), replace=False)] = True
  return masks


def dinov2_inputs(rng, n_local, b=B):
  masks = make_masks(rng, 2 * b, T)
  m = int(masks.sum())
  return dict(sg=rng.normal(size=(2, b, K)), sl=rng.normal(size=(n_local, b, K)),
              tg=rng.normal(size=(2, b, K)), sp=rng.normal(size=(m, K)),
              tp=rng.normal(size=(m, K)), masks=masks,
              cls=rng.normal(size=(2, b, D)))


def ours(x, **kwargs):
  return losses.dinov2_terms(x["sg"], x["sl"], x["tg"], x["sp"], x["tp"],
                             x["masks"], x["cls"], **kwargs)


KEYS = ("loss", "dino_global", "dino_local", "koleo", "ibot")


# -------------------------------------------------------------------- KoLeo --
class TestKoleo:

  def test_value_and_gradient_match_official(self, x64):
    x = np.random.default_rng(0).normal(size=(7, D))
    value, grad = jax.value_and_grad(losses.koleo)(x)
    assert rel(value, official_koleo(x)) <= 1e-10
    assert rel(grad, finite_difference(official_koleo, x)) <= 1e-6

  def test_groups_are_the_per_device_loss(self, x64):
    x = np.random.default_rng(1).normal(size=(8, D))
    per_gpu = np.mean([official_koleo(x[:4]), official_koleo(x[4:])])
    assert rel(losses.koleo(x, group_size=4), per_gpu) <= 1e-10

  def test_duplicate_rows_stay_finite(self, x64):
    x = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    value = float(losses.koleo(x))
    assert np.isfinite(value)
    assert rel(value, official_koleo(x)) <= 1e-10

  @pytest.mark.parametrize("x, kwargs, match", [
      (np.zeros((1, 3)), {}, "N >= 2"),
      (np.zeros((3,)), {}, "rank-2"),
      (np.ones((6, 3)), {"group_size": 4}, "divides N"),
      (np.ones((6, 3)), {"eps": 0.0}, "eps"),
  ])
  def test_bad_input_gets_one_clear_error(self, x, kwargs, match):
    with pytest.raises(ValueError, match=match):
      losses.koleo(x, **kwargs)


# --------------------------------------------------------------------- iBOT --
class TestIbot:

  def test_value_and_gradient_match_official(self, x64):
    rng = np.random.default_rng(2)
    masks = make_masks(rng, 6, T)
    m = int(masks.sum())
    s, t = rng.normal(size=(m, K)), softmax(rng.normal(size=(m, K)))
    value, (g_s, g_t) = jax.value_and_grad(
        lambda s, t: losses.ibot(s, t, masks, student_temperature=0.1),
        argnums=(0, 1))(s, t)
    assert rel(value, official_ibot_masked(s, t, masks)) <= 1e-10
    fd = finite_difference(lambda s_: official_ibot_masked(s_, t, masks), s)
    assert rel(g_s, fd) <= 1e-6
    assert np.all(np.asarray(g_t) == 0)           # teacher: stop-gradient

  def test_jit_with_traced_masks_and_padding_rows(self, x64):
    rng = np.random.default_rng(3)
    masks = make_masks(rng, 6, T)
    m = int(masks.sum())
    s, t = rng.normal(size=(m, K)), softmax(rng.normal(size=(m, K)))
    f = jax.jit(lambda s, t, masks: losses.ibot(s, t, masks))
    want = official_ibot_masked(s, t, masks)
    assert rel(f(s, t, masks), want) <= 1e-10
    # The official upperbound buffer: extra rows past Σ masks weigh 0.
    pad = np.full((3, K), 7.0)
    assert rel(f(np.concatenate([s, pad]), np.concatenate([t, pad / 7]),
                 masks), want) <= 1e-10

  def test_wrong_mask_count_is_an_error(self):
    with pytest.raises(ValueError, match="exactly M = 2"):
      losses.ibot(np.zeros((2, 3)), np.zeros((2, 3)),
                  np.array([[1, 1], [1, 0]]))
    with pytest.raises(ValueError, match="same"):
      losses.ibot(np.zeros((2, 3)), np.zeros((2, 4)), np.array([[1, 1]]))


# -------------------------------------------------------------- dinov2_terms --
class TestDinov2Terms:

  @pytest.mark.parametrize("n_local", [0, 3])
  @pytest.mark.parametrize("centering", ["sinkhorn_knopp", "centering"])
  def test_value_and_gradient_match_official(self, x64, n_local, centering):
    rng = np.random.default_rng(10 + n_local)
    x = dinov2_inputs(rng, n_local)
    kwargs = dict(centering=centering, teacher_temperature=0.07)
    if centering == "centering":
      kwargs.update(dino_center=np.zeros(K), ibot_center=np.zeros(K))
    want = OfficialDinoV2(K).step(**x, teacher_temp=0.07, centering=centering)
    got = ours(x, **kwargs)
    for key in KEYS:
      assert rel(got[key], want[key]) <= 1e-10 or (
          want[key] == 0 and got[key] == 0), key
    # Gradient of the total with respect to every student input.
    names = ("sg", "sl", "sp", "cls")
    grads = jax.grad(lambda *a: ours({**x, **dict(zip(names, a))},
                                     **kwargs)["loss"],
                     argnums=tuple(range(4)))(*(x[n] for n in names))
    for name, grad in zip(names, grads):
      if x[name].size == 0:
        continue

      def f(v, name=name):
        return OfficialDinoV2(K).step(**{**x, name: v}, teacher_temp=0.07,
                                      centering=centering)["loss"]
      assert rel(grad, finite_difference(f, x[name])) <= 1e-6, name
    # No gradient reaches the teacher.
    g_t = jax.grad(lambda tg, tp: ours({**x, "tg": tg, "tp": tp},
                                       **kwargs)["loss"],
                   argnums=(0, 1))(x["tg"], x["tp"])
    assert all(np.all(np.asarray(g) == 0) for g in g_t)

  def test_no_local_crop_divides_global_by_three(self, x64):
    x = dinov2_inputs(np.random.default_rng(4), 0)
    got = ours(x, teacher_temperature=0.05)
    p = official_sinkhorn(x["tg"].reshape(2 * B, K), 0.05).reshape(2, B, K)
    two_pairs = (official_dino_loss([x["sg"][0]], [p[1]])
                 + official_dino_loss([x["sg"][1]], [p[0]]))
    assert rel(got["dino_global"], two_pairs / 3) <= 1e-10
    v3 = ours(x, teacher_temperature=0.05, version="dinov3")
    assert rel(v3["dino_global"], two_pairs / 2) <= 1e-10
    assert float(v3["dino_local"]) == 0.0

  def test_lazy_centring_over_two_steps(self, x64):
    rng = np.random.default_rng(5)
    official = OfficialDinoV2(K)
    c_dino, c_ibot = np.zeros(K), np.zeros(K)
    for _ in range(3):
      x = dinov2_inputs(rng, 2)
      want = official.step(**x, teacher_temp=0.04, centering="centering")
      got = ours(x, centering="centering", teacher_temperature=0.04,
                 dino_center=c_dino, ibot_center=c_ibot)
      assert rel(got["loss"], want["loss"]) <= 1e-10
      c_dino, c_ibot = got["dino_center"], got["ibot_center"]
    official._apply()                            # the update queued last
    assert rel(c_dino, official.center[0]) <= 1e-10
    assert rel(c_ibot, official.ibot_center[0, 0]) <= 1e-10

  @pytest.mark.parametrize("n_local", [0, 2])
  def test_dinov3_matches_official(self, x64, n_local):
    x = dinov2_inputs(np.random.default_rng(20 + n_local), n_local)
    got = ours(x, teacher_temperature=0.06, version="dinov3")
    want = official_dinov3(**x, teacher_temp=0.06)
    if n_local == 0:   # official: 0/0 local term, NaN total; here 0
      assert np.isnan(want["loss"])
      want["dino_local"] = 0.0
      want["loss"] = sum(want[k] for k in KEYS[1:])
    for key in KEYS:
      assert rel(got[key], want[key]) <= 1e-10 or (
          want[key] == 0 and got[key] == 0), key
    names = ("sg", "sl", "sp", "cls")
    grads = jax.grad(lambda *a: ours({**x, **dict(zip(names, a))},
                                     teacher_temperature=0.06,
                                     version="dinov3")["loss"],
                     argnums=tuple(range(4)))(*(x[n] for n in names))
    for name, grad in zip(names, grads):
      if x[name].size == 0:
        continue

      def f(v, name=name):
        out = official_dinov3(**{**x, name: v}, teacher_temp=0.06)
        return sum(out[k] for k in KEYS[1:] if not np.isnan(out[k]))
      assert rel(grad, finite_difference(f, x[name])) <= 1e-6, name

  def test_float32_close_to_float64(self):
    x = dinov2_inputs(np.random.default_rng(6), 2)
    with jax.enable_x64(True):
      want = {k: float(v) for k, v in ours(x, teacher_temperature=0.07).items()}
    got = ours({k: (v.astype(np.float32) if v.dtype == np.float64 else v)
                for k, v in x.items()}, teacher_temperature=0.07)
    assert got["loss"].dtype == jnp.float32
    for key in KEYS:
      assert abs(float(got[key]) - want[key]) <= 1e-5 * max(abs(want[key]),
                                                            1e-3), key

  @pytest.mark.parametrize("change, match", [
      (dict(sg=np.zeros((3, B, K))), "G = 2"),
      (dict(sl=np.zeros((1, B + 1, K))), "match student_global"),
      (dict(tg=np.zeros((2, B, K + 1))), "match student_global"),
      (dict(sp=np.zeros((2, K + 1)), tp=np.zeros((2, K + 1))), "K = 6"),
      (dict(masks=np.ones((2 * B + 1, T), bool)), r"\(2B, T\)"),
      (dict(cls=np.zeros((2, B + 1, D))), "backbone_cls"),
      (dict(sp=np.zeros((1, K)), tp=np.zeros((1, K))), "exactly M = 1"),
  ])
  def test_bad_shape_gets_one_clear_error(self, change, match):
    x = dinov2_inputs(np.random.default_rng(7), 1)
    with pytest.raises(ValueError, match=match):
      ours({**x, **change}, teacher_temperature=0.07)

  @pytest.mark.parametrize("kwargs, match", [
      (dict(centering="softmax"), "centering must be one of"),
      (dict(version="dinov4"), "version must be one of"),
      (dict(version="dinov3", centering="centering",
            dino_center=np.zeros(K), ibot_center=np.zeros(K)), "dinov3"),
      (dict(centering="centering"), "dino_center is required"),
      (dict(dino_center=np.zeros(K)), "only with"),
      (dict(teacher_temperature=0.0), "teacher_temperature"),
      (dict(koleo_weight=-1.0), "koleo_weight"),
  ])
  def test_bad_option_gets_one_clear_error(self, kwargs, match):
    x = dinov2_inputs(np.random.default_rng(8), 1)
    with pytest.raises(ValueError, match=match):
      ours(x, **{"teacher_temperature": 0.07, **kwargs})


# --------------------------------------------------------------------- Gram --
class TestGram:

  @pytest.mark.parametrize("img_level", [False, True])
  @pytest.mark.parametrize("clip", ["none", "remove_neg",
                                    "remove_only_teacher_neg"])
  def test_value_and_gradient_match_official(self, x64, img_level, clip):
    rng = np.random.default_rng(30)
    s, t = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 4))
    flags = dict(remove_neg=clip == "remove_neg",
                 remove_only_teacher_neg=clip == "remove_only_teacher_neg")
    value, (g_s, g_t) = jax.value_and_grad(
        lambda s, t: losses.gram_anchoring(s, t, img_level=img_level, **flags),
        argnums=(0, 1))(s, t)
    assert rel(value, official_gram(s, t, img_level, **flags)) <= 1e-10
    fd = finite_difference(
        lambda s_: official_gram(s_, t, img_level, **flags), s)
    assert rel(g_s, fd) <= 1e-6
    assert np.all(np.asarray(g_t) == 0)

  def test_flat_tokens_and_errors(self, x64):
    rng = np.random.default_rng(31)
    s, t = rng.normal(size=(5, 4)), rng.normal(size=(5, 3))
    assert rel(losses.gram_anchoring(s, t),
               official_gram(s, t, False, False, False)) <= 1e-10
    with pytest.raises(ValueError, match="exclusive"):
      losses.gram_anchoring(s, t, remove_neg=True,
                            remove_only_teacher_neg=True)
    with pytest.raises(ValueError, match=r"\(N, P, D\)"):
      losses.gram_anchoring(s, t, img_level=True)
    with pytest.raises(ValueError, match="all but the last"):
      losses.gram_anchoring(s, t[:4])


# ------------------------------------------------------- 8 devices vs one --
def _device_worker():
  """dinov2_terms with B and M sharded over 8 CPU devices against one."""
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=import-outside-toplevel
  jax.config.update("jax_enable_x64", True)
  rng = np.random.default_rng(0)
  x = dinov2_inputs(rng, 2, b=8)
  while x["sp"].shape[0] % 8:                    # M divisible by 8
    x = dinov2_inputs(rng, 2, b=8)
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
  names = ("sg", "sl", "tg", "sp", "tp", "masks", "cls")
  specs = dict(sg=P(None, "data"), sl=P(None, "data"), tg=P(None, "data"),
               sp=P("data"), tp=P("data"), masks=P("data"),
               cls=P(None, "data"))

  @jax.jit
  def vg(*arrays):
    kw = dict(zip(names, arrays))
    return jax.value_and_grad(
        lambda sg: ours({**kw, "sg": sg}, teacher_temperature=0.07)["loss"])(
            kw["sg"])
  v1, g1 = vg(*(jax.device_put(x[n], jax.devices()[0]) for n in names))
  v8, g8 = vg(*(jax.device_put(x[n], NamedSharding(mesh, specs[n]))
                for n in names))
  official = OfficialDinoV2(K).step(**x, teacher_temp=0.07,
                                    centering="sinkhorn_knopp")["loss"]
  print(json.dumps({"devices": len(jax.devices()), "value": rel(v8, v1),
                    "gradient": rel(g8, g1), "official": rel(v1, official)}))


def test_eight_devices_equal_one_device():
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO,
             XLA_FLAGS="--xla_force_host_platform_device_count=8")
  out = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env,
                       cwd=REPO, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-4000:]
  row = json.loads(out.stdout.strip().splitlines()[-1])
  print("\n", row)
  assert row["devices"] == 8
  assert row["value"] <= 1e-12 and row["gradient"] <= 1e-12
  assert row["official"] <= 1e-10


if __name__ == "__main__":
  _device_worker()
