"""SwAV as a method (ssljax.methods.swav, configs/swav.py).

The method's loss is `losses.swav` on its own prototype scores, with the
queue's scores against the current prototypes once the queue is full (the
official main_swav.py test: its last row is not zero), and the queue takes
the assigned crops' embeddings newest first from epoch
``epoch_queue_starts``. The prototypes have unit-norm columns at init and
after every optimiser step, and do not move while frozen; with a frozen or
moving layer, normalising after the step gives the iterates of the official
order (normalise, forward, step) (Caron et al. 2020, arXiv 2006.09882).
"""

import os
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from ssljax import config_validation, losses, methods, optimizers, train

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # configs/
from configs import swav as swav_config  # noqa: E402

pytestmark = pytest.mark.usefixtures("fast_compiles")
B = 16


def _config(**loss):
  config = swav_config.get_config("smoke")
  config.model.encoder = "mlp"
  config.model.encoder_kwargs = ml_collections.ConfigDict({"features": (8,)})
  config.views.local_size = 28
  config.batch_size = B
  config.loss.queue_length = 2 * B
  for key, value in loss.items():
    config.loss[key] = value
  return config


def _batch(config):
  rng = np.random.default_rng(0)
  return {"views": tuple(
      jnp.asarray(rng.uniform(size=(B, 28, 28, 1)), jnp.float32)
      for _ in range(config.views.num_global + config.views.num_local))}


def _schedule(step):
  return {"step": jnp.asarray(step, jnp.int32), "total_steps": 20,
          "steps_per_epoch": 2}


def test_config_validates_and_refuses_bad_queue_and_crops():
  config_validation.validate(swav_config.get_config("smoke"))
  config_validation.validate(swav_config.get_config())
  bad = _config(queue_length=B + 1)
  assert any("queue_length" in p for p in methods.get("swav").check_config(
      bad))
  bad = _config(crops_for_assign=(0, 9))
  assert any("crops_for_assign" in p
             for p in methods.get("swav").check_config(bad))


def test_loss_is_the_library_loss_and_the_queue_fills_newest_first():
  config = _config(epoch_queue_starts=1.0)       # from step 2
  method = methods.build(config)
  params, state = method.init(jax.random.key(0),
                              train.batch_spec(config, (28, 28, 1)))
  kernel = params["last_layer"]["kernel"]
  np.testing.assert_allclose(jnp.linalg.norm(kernel, axis=0), 1.0, rtol=1e-6)
  batch = _batch(config)
  loss_fn = jax.jit(method.loss)
  outs, _ = method.forward(params, state["batch_stats"], batch["views"])
  scores = jnp.stack([o["z"] for o in outs])
  e = jnp.stack([o["e"] for o in outs])
  for step in range(5):
    loss, aux = loss_fn(params, state, batch, jax.random.key(1),
                        _schedule(step))
    queue, rows = state["queue"], int(state["queue_rows"])
    if step < 2:                                 # not started: no push
      want = losses.swav(scores)
      assert int(aux.state["queue_rows"]) == 0
    elif rows < 2 * B:                           # started, not yet full
      want = losses.swav(scores)
      np.testing.assert_allclose(aux.state["queue"][:, :B], e[:2],
                                 atol=1e-6)                 # jit vs eager
      np.testing.assert_allclose(aux.state["queue"][:, B:], queue[:, :B])
    else:
      want = losses.swav(scores, queue=queue @ kernel)
    assert float(aux.metrics["queue_in_use"]) == float(rows >= 2 * B)
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    state = aux.state
  assert int(state["queue_rows"]) == 2 * B


def test_prototypes_unit_norm_after_steps_and_frozen_first():
  config = _config()
  config.optim.freeze_last_layer_epochs = 1.0    # 2 steps
  method = methods.build(config)
  params, state = method.init(jax.random.key(0),
                              train.batch_spec(config, (28, 28, 1)))
  tx = optimizers.create_optimizer(config.optim, 0.5, steps_per_epoch=2)
  opt_state = tx.init(params)
  batch = _batch(config)
  grad_fn = jax.jit(jax.grad(method.loss, has_aux=True))
  start = params["last_layer"]["kernel"]
  for step in range(4):
    grads, aux = grad_fn(params, state, batch, jax.random.key(step),
                         _schedule(0))
    updates, opt_state = tx.update(grads, opt_state, params)
    params, state = optax.apply_updates(params, updates), aux.state
    kernel = params["last_layer"]["kernel"]
    np.testing.assert_allclose(jnp.linalg.norm(kernel, axis=0), 1.0,
                               rtol=1e-6)
    moved = float(jnp.max(jnp.abs(kernel - start)))
    assert (moved == 0.0) == (step < 2), (step, moved)


def test_normalising_after_the_step_gives_the_official_iterates(x64):
  """Official: w ← normalize(w); w ← w − lr·g(w) (+ weight decay), per
  iteration. Here w is kept normalised after each step: the normalised
  iterates are the same."""
  rng = np.random.default_rng(0)
  w0 = rng.normal(size=(4, 3))
  target = rng.normal(size=(4, 3))
  grad = lambda w: 2 * (w - target)              # a quadratic loss
  normalize = lambda w: w / np.linalg.norm(w, axis=0, keepdims=True)
  lr, wd = 0.1, 0.05
  official = w0
  for _ in range(3):
    official = normalize(official)
    official = official - lr * (grad(official) + wd * official)
  ours = {"last_layer": jnp.asarray(normalize(w0))}
  tx = optax.chain(optax.add_decayed_weights(wd), optax.sgd(lr),
                   optimizers.unit_columns_after({"last_layer": True}))
  opt_state = tx.init(ours)
  for _ in range(3):
    g = {"last_layer": grad(ours["last_layer"])}
    updates, opt_state = tx.update(g, opt_state, ours)
    ours = optax.apply_updates(ours, updates)
  np.testing.assert_allclose(ours["last_layer"], normalize(official),
                             rtol=1e-12)


@pytest.mark.slow  # a smoke run of python -m ssljax.main: ~50 s
def test_smoke_run_trains_with_the_queue(fmnist_data_dir, tmp_path):
  import json  # pylint: disable=import-outside-toplevel
  import subprocess  # pylint: disable=import-outside-toplevel
  workdir = tmp_path / "run"
  cmd = [sys.executable, "-m", "ssljax.main", "--config",
         os.path.join(REPO, "configs", "swav.py") + ":smoke",
         f"--config.dataset.data_dir={fmnist_data_dir}", f"--workdir={workdir}"]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = [json.loads(l) for l in
           (workdir / "metrics.jsonl").read_text().splitlines()]
  train = [l for l in lines if "loss" in l]
  assert all(np.isfinite(l["loss"]) for l in train)
  # Smoke: batch 64, a 128-row queue from step 0, in use from step 2 on.
  assert [l["queue_in_use"] for l in train] == [0.0, 1.0, 1.0]
  results = json.loads((workdir / "results.json").read_text())
  assert results["steps"] == 6 and results["method"] == "swav"

