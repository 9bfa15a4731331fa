"""The sharded train step on 8 CPU devices equals the same global batch on 1.

Runs in a subprocess because the device count is fixed when JAX starts.
"""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = r"""
import sys
import jax, numpy as np
sys.path.insert(0, REPO)
from configs import vicreg as vicreg_config
from ssljax import train
assert jax.device_count() == 8, jax.devices()
config = vicreg_config.get_config("smoke")
config.model.encoder_kwargs.channels = (4, 8)
# LARS, not Adam: VICReg is blind to the projector's output bias, whose
# gradient is pure round-off, and Adam would turn that into ±lr steps.
config.optim.name = "lars"
for form in ("two_view", "graph"):
  config.loss.form = form
  net = train.create_network(config)
  lr = lambda step: 1e-2
  tx = train.create_optimizer(config.optim, lr)
  views = np.random.default_rng(0).uniform(size=(2, 64, 28, 28, 1)).astype(np.float32)
  out = {}
  for n in (1, 8):
    mesh = train.make_mesh(jax.devices()[:n])
    state = train.create_train_state(net, tx, jax.random.key(0), (28, 28, 1))
    state = jax.device_put(state, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    x = jax.device_put(views, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, "data")))
    step = train.sharded_train_step(config, mesh)
    if n > 1:  # data parallel: gradients are all-reduced, images never gathered
      hlo = step.lower(state, x).compile().as_text().splitlines()
      assert any("all-reduce(" in l for l in hlo), "no all-reduce: not data-parallel"
      gathers = [l for l in hlo if "all-gather(" in l]
      assert not any("28,28" in l for l in gathers), gathers  # (the graph form gathers Z)
    state, metrics = step(state, x)
    assert len(x.sharding.device_set) == n
    out[n] = jax.device_get((state.params, state.batch_stats, metrics))
  # Per-device statistics would change the loss by O(1); these agree to
  # float32 round-off (all-reduce sums in another order).
  for a, b in zip(jax.tree.leaves(out[1]), jax.tree.leaves(out[8])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
  params_diff = max(float(np.max(np.abs(a - b))) for a, b in
                    zip(jax.tree.leaves(out[1][0]), jax.tree.leaves(out[8][0])))
  print(form, "loss", out[1][2]["loss"], out[8][2]["loss"], "max abs param diff", params_diff)
print("OK")
"""


def test_eight_device_step_equals_one_device_step():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
             JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", f"REPO={REPO!r}\n" + SCRIPT],
                        env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr[-3000:]
