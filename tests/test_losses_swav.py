"""Tests for ssljax.losses.sinkhorn (sinkhorn_knopp) and ssljax.losses.swav.

Checked in float64 against a NumPy transcription of the official code of
facebookresearch/swav @ 06b1b7cbaf6ba2a792300d79c7299db98b93b7f9,
main_swav.py (``distributed_sinkhorn`` and the loss loop of ``train``),
written here in our own words in the official order of operations: the raw
exp(scores/ε) with no max subtracted, the K-by-B layout, the total-sum
normalisation, the prototype then sample steps, the final ×B; the loop over
crops_for_assign and over the other crops, ÷(V − 1) then ÷|A|.

Values to 1e-10 relative; gradients against central finite differences of the
reference with the codes held fixed (the official codes are computed under
``torch.no_grad``), to 1e-6. Caron et al. 2020, arXiv 2006.09882.
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
FLOAT32_LOG_MAX = float(np.log(np.finfo(np.float32).max))   # 88.72


# ------------------------------------------------------- official, in NumPy --
def log_softmax(x):
  m = x.max(axis=-1, keepdims=True)
  return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def official_sinkhorn(out, epsilon, iterations=3):
  """distributed_sinkhorn on one process (world_size 1), dtype of `out`."""
  with np.errstate(over="ignore", invalid="ignore"):
    q = np.exp(out / out.dtype.type(epsilon)).T
    n = q.shape[1]
    k = q.shape[0]
    q = q / np.sum(q)
    for _ in range(iterations):
      q = q / np.sum(q, axis=1, keepdims=True)
      q = q / k
      q = q / np.sum(q, axis=0, keepdims=True)
      q = q / n
    return (q * n).T


def official_swav(output, bs, crops_for_assign=(0, 1), temperature=0.1,
                  epsilon=0.05, iterations=3, queue=None, code_output=None):
  """The loss of main_swav.py's train loop; `output` is (V·B, K) crop-major.

  code_output (default output) feeds the codes, so finite differences can
  hold the codes fixed as the official torch.no_grad block does."""
  code_output = output if code_output is None else code_output
  n_crops = output.shape[0] // bs
  loss = 0.0
  for i, crop_id in enumerate(crops_for_assign):
    out = code_output[bs * crop_id: bs * (crop_id + 1)]
    if queue is not None:
      out = np.concatenate([queue[i], out])
    q = official_sinkhorn(out, epsilon, iterations)[-bs:]
    subloss = 0.0
    for v in np.delete(np.arange(n_crops), crop_id):
      x = output[bs * v: bs * (v + 1)] / temperature
      subloss -= np.mean(np.sum(q * log_softmax(x), axis=1))
    loss += subloss / (n_crops - 1)
  return loss / len(crops_for_assign)


# ------------------------------------------------------------------ helpers --
def rel(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def finite_difference(f, x, h=1e-6):
  x = np.array(x, np.float64)
  grad = np.zeros_like(x)
  for i in np.ndindex(x.shape):
    up, down = x.copy(), x.copy()
    up[i] += h
    down[i] -= h
    grad[i] = (f(up) - f(down)) / (2 * h)
  return grad


def overflowing_logits():
  """(16, 10) float32 scores whose largest score/ε = 100 > 88.72 at ε=0.05."""
  rng = np.random.default_rng(7)
  logits = (rng.normal(size=(16, 10)) * 1.5).astype(np.float32)
  logits[3, 4] = 5.0
  return logits


# ------------------------------------------------------------ sinkhorn_knopp --
class TestSinkhorn:

  @pytest.mark.parametrize("iterations", [1, 3, 7])
  def test_equals_official(self, x64, iterations):
    t = np.random.default_rng(iterations).normal(size=(12, 7))
    q = losses.sinkhorn_knopp(t, temperature=0.05, num_iterations=iterations)
    assert q.dtype == jnp.float64
    assert rel(q, official_sinkhorn(t, 0.05, iterations)) <= 1e-10
    np.testing.assert_allclose(np.sum(q, axis=1), 1.0, rtol=1e-12)

  def test_gradient_matches_official(self, x64):
    rng = np.random.default_rng(1)
    t, w = rng.normal(size=(6, 4)), rng.normal(size=(6, 4))
    grad = jax.grad(lambda t: jnp.sum(w * losses.sinkhorn_knopp(
        t, temperature=0.5)))(t)
    fd = finite_difference(lambda t: np.sum(w * official_sinkhorn(t, 0.5)), t)
    assert rel(grad, fd) <= 1e-6

  def test_float32_stays_finite_where_the_official_overflows(self):
    logits = overflowing_logits()
    assert logits.max() / 0.05 > FLOAT32_LOG_MAX
    official32 = official_sinkhorn(logits, 0.05)
    assert not np.all(np.isfinite(official32))            # inf/inf = NaN
    ours = np.asarray(losses.sinkhorn_knopp(logits, temperature=0.05))
    assert ours.dtype == np.float32 and np.all(np.isfinite(ours))
    np.testing.assert_allclose(ours.sum(axis=1), 1.0, rtol=1e-5)
    # float64 does not overflow at exp(100): there the official is exact.
    official64 = official_sinkhorn(logits.astype(np.float64), 0.05)
    assert np.all(np.isfinite(official64))
    assert np.max(np.abs(ours - official64)) <= 1e-5

  def test_float32_equals_official_below_overflow(self):
    logits = (np.random.default_rng(2).normal(size=(16, 10))).astype(
        np.float32)
    ours = losses.sinkhorn_knopp(logits, temperature=0.05)
    assert np.max(np.abs(np.asarray(ours) - official_sinkhorn(logits, 0.05))
                  ) <= 1e-5

  def test_jit_with_traced_temperature(self, x64):
    t = np.random.default_rng(3).normal(size=(5, 3))
    f = jax.jit(lambda t, tau: losses.sinkhorn_knopp(t, temperature=tau))
    assert rel(f(t, 0.3), official_sinkhorn(t, 0.3)) <= 1e-10

  @pytest.mark.parametrize("logits, kwargs, match", [
      (np.zeros((3,)), {}, r"\(N, K\)"),
      (np.zeros((0, 3)), {}, r"\(N, K\)"),
      (np.zeros((2, 3)), {"temperature": 0.0}, "temperature"),
      (np.zeros((2, 3)), {"num_iterations": 0}, "num_iterations"),
      (np.zeros((2, 3)), {"num_iterations": 2.0}, "num_iterations"),
      (np.array([[0.0, np.nan]]), {}, "finite"),
  ])
  def test_bad_input_gets_one_clear_error(self, logits, kwargs, match):
    with pytest.raises(ValueError, match=match):
      losses.sinkhorn_knopp(logits, **{"temperature": 0.05, **kwargs})


# --------------------------------------------------------------------- SwAV --
class TestSwav:

  @pytest.mark.parametrize("n_crops, assign", [(2, (0, 1)), (5, (0, 1)),
                                               (4, (1,))])
  def test_value_and_gradient_match_official(self, x64, n_crops, assign):
    bs, k = 4, 6
    scores = np.random.default_rng(n_crops).normal(size=(n_crops, bs, k))
    flat = scores.reshape(n_crops * bs, k)
    value, grad = jax.value_and_grad(
        lambda s: losses.swav(s, crops_for_assign=assign))(scores)
    assert rel(value, official_swav(flat, bs, assign)) <= 1e-10
    fd = finite_difference(
        lambda o: official_swav(o, bs, assign, code_output=flat), flat)
    assert rel(grad, fd.reshape(scores.shape)) <= 1e-6

  def test_queue_matches_official(self, x64):
    rng = np.random.default_rng(11)
    scores, queue = rng.normal(size=(3, 4, 5)), rng.normal(size=(2, 8, 5))
    got = losses.swav(scores, queue=queue, temperature=0.2, epsilon=0.1)
    want = official_swav(scores.reshape(12, 5), 4, queue=queue,
                         temperature=0.2, epsilon=0.1)
    assert rel(got, want) <= 1e-10

  def test_float32_stays_finite_where_the_official_overflows(self):
    scores = overflowing_logits().reshape(2, 8, 10)
    flat = scores.reshape(16, 10)
    with np.errstate(over="ignore", invalid="ignore"):
      assert np.isnan(official_swav(flat, 8))
    got = float(losses.swav(scores))
    want = official_swav(flat.astype(np.float64), 8)
    assert np.isfinite(got) and abs(got - want) <= 1e-5 * abs(want)

  @pytest.mark.parametrize("scores, kwargs, match", [
      (np.zeros((1, 2, 3)), {}, "V >= 2"),
      (np.zeros((2, 3)), {}, r"\(V, B, K\)"),
      (np.zeros((2, 2, 3)), {"crops_for_assign": (0, 2)}, "crops_for_assign"),
      (np.zeros((2, 2, 3)), {"crops_for_assign": (1, 1)}, "crops_for_assign"),
      (np.zeros((2, 2, 3)), {"crops_for_assign": ()}, "crops_for_assign"),
      (np.zeros((2, 2, 3)), {"queue": np.zeros((1, 4, 3))}, "queue"),
      (np.zeros((2, 2, 3)), {"epsilon": -1.0}, "epsilon"),
      (np.zeros((2, 2, 3)), {"temperature": np.inf}, "temperature"),
  ])
  def test_bad_input_gets_one_clear_error(self, scores, kwargs, match):
    with pytest.raises(ValueError, match=match):
      losses.swav(scores, **kwargs)


# ------------------------------------------------------- 8 devices vs one --
def _device_worker():
  """sinkhorn_knopp and swav (with and without a queue) with the batch rows
  sharded over 8 CPU devices, against one device and the official."""
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=import-outside-toplevel
  jax.config.update("jax_enable_x64", True)
  rng = np.random.default_rng(0)
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
  one = jax.devices()[0]
  logits = rng.normal(size=(64, 12))
  sk = jax.jit(lambda t: losses.sinkhorn_knopp(t, temperature=0.05))
  q1 = sk(jax.device_put(logits, one))
  q8 = sk(jax.device_put(logits, NamedSharding(mesh, P("data"))))
  scores, queue = rng.normal(size=(4, 16, 12)), rng.normal(size=(2, 32, 12))
  vg = jax.jit(jax.value_and_grad(lambda s, q: losses.swav(s, queue=q)))
  v1, g1 = vg(jax.device_put(scores, one), jax.device_put(queue, one))
  v8, g8 = vg(jax.device_put(scores, NamedSharding(mesh, P(None, "data"))),
              jax.device_put(queue, NamedSharding(mesh, P(None, "data"))))
  vg0 = jax.jit(jax.value_and_grad(losses.swav))
  w1, h1 = vg0(jax.device_put(scores, one))
  w8, h8 = vg0(jax.device_put(scores, NamedSharding(mesh, P(None, "data"))))
  print(json.dumps({
      "devices": len(jax.devices()),
      "sinkhorn": rel(q8, q1),
      "sinkhorn_official": rel(q1, official_sinkhorn(logits, 0.05)),
      "swav_value": rel(w8, w1), "swav_gradient": rel(h8, h1),
      "swav_official": rel(w1, official_swav(scores.reshape(64, 12), 16)),
      "queue_value": rel(v8, v1), "queue_gradient": rel(g8, g1),
      "queue_official": rel(v1, official_swav(scores.reshape(64, 12), 16,
                                              queue=queue))}))


def test_eight_devices_equal_one_device():
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO,
             XLA_FLAGS="--xla_force_host_platform_device_count=8")
  out = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env,
                       cwd=REPO, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-4000:]
  row = json.loads(out.stdout.strip().splitlines()[-1])
  print("\n", row)
  assert row["devices"] == 8
  for key in ("sinkhorn", "swav_value", "swav_gradient", "queue_value",
              "queue_gradient"):
    assert row[key] <= 1e-12, key
  for key in ("sinkhorn_official", "swav_official", "queue_official"):
    assert row[key] <= 1e-10, key


if __name__ == "__main__":
  _device_worker()
