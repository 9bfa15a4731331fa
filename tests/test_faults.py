"""Faults of issue 25, the fast part: preemption, a failing evaluator, a
failed checkpoint write, non-finite steps ("skip"), gradient clipping and
the frozen last layer, a torn metrics.jsonl line, the run fingerprint.

The end-to-end versions (subprocesses, two processes, a full filesystem)
are in tests/test_reliability.py and tests/test_multihost.py (slow).
"""

import errno
import json
import os
import platform
import signal
import sys

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from ssljax import (checkpoints, distributed, evaluators, faults, inputs,
                    monitor, optimizers, preemption, train)
from ssljax.methods import joint_embedding

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from configs import vicreg as vicreg_config  # noqa: E402


def _config(data_dir, **changes):
  config = vicreg_config.get_config("smoke")  # 6 steps, checkpoints 3 and 6
  config.dataset.data_dir = data_dir
  config.eval_inputs.baselines = False
  del config.evals.probe  # the slow one; knn, rankme, online_probe remain
  config.update_from_flattened_dict(changes)
  return config


# ------------------------------------------------- preemption, evaluators --
@pytest.mark.usefixtures("fast_compiles")
def test_signal_checkpoints_that_step_then_failed_evaluator_then_rerun(
    fmnist_data_dir, tmp_path, monkeypatch):
  workdir = str(tmp_path / "run")
  config = _config(fmnist_data_dir, checkpoint_every_steps=100)
  # 1. SIGTERM while the batch of step 2 is prepared: step 2 is finished,
  #    checkpointed (not a checkpoint step) and the run stops.
  real_batch, calls = inputs.to_device_batch, []

  def batch_then_signal(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
      os.kill(os.getpid(), signal.SIGTERM)
    return real_batch(*args, **kwargs)

  monkeypatch.setattr(inputs, "to_device_batch", batch_then_signal)
  with pytest.raises(preemption.Preempted, match="preempted at step 2: "
                     "checkpoint written; rerun the same command to resume"):
    train.train_and_evaluate(config, workdir)
  assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # put back
  assert os.listdir(os.path.join(workdir, "checkpoints")) == ["2"]
  assert checkpoints.verify(os.path.join(workdir, "checkpoints", "2")) is None
  assert os.path.exists(os.path.join(workdir, "checkpoints", "2",
                                     checkpoints.MANIFEST))  # sealed
  steps = [json.loads(l)["step"] for l in open(f"{workdir}/metrics.jsonl")]
  assert steps == [2]  # flushed (log every 2 steps)
  monkeypatch.setattr(inputs, "to_device_batch", real_batch)

  # 2. Resume at 2; the k-NN evaluator raises after the last step: recorded,
  #    the others still run, results.json and report.png are written.
  knn = evaluators.load_type("knn")

  def broken(self, state):
    raise ValueError("k-NN made to fail\nsecond line")
    yield  # pylint: disable=unreachable

  monkeypatch.setattr(knn, "run", broken)
  results = train.train_and_evaluate(config, workdir)
  assert results["resumed_from_step"] == 2
  assert results["failed_evaluators"] == ["knn"]
  assert results["evals"]["knn"] == {"error": "ValueError",
                                     "message": "ValueError: k-NN made to fail"}
  assert "rankme/rankme" in results["evals"]
  assert os.path.exists(os.path.join(workdir, "report.png"))
  saved = json.load(open(os.path.join(workdir, "results.json")))
  assert saved["evals"]["knn"]["error"] == "ValueError"

  # 3. Rerun: training is done; only k-NN (no result yet) runs.
  monkeypatch.undo()
  ran = []
  for kind in ("knn", "rankme", "online_probe"):
    cls = evaluators.load_type(kind)
    real = cls.run
    monkeypatch.setattr(cls, "run", lambda self, state, real=real:
                        ran.append(self.name) or real(self, state))
  results = train.train_and_evaluate(config, workdir)
  assert ran == ["knn"]
  assert results["resumed_from_step"] == 6 and not results["failed_evaluators"]
  assert {"knn/test_accuracy", "rankme/rankme"} <= set(results["evals"])


# --------------------------------------------------------- storage faults --
def test_failed_checkpoint_write_names_path_cause_and_keeps_previous(
    tmp_path, monkeypatch):
  manager = ocp.CheckpointManager(str(tmp_path / "checkpoints"))
  saver = faults.CheckpointSaver(manager)
  state = {"w": jnp.arange(4.0)}
  saver.save(1, state)
  saver.finish()

  def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device",
                  str(tmp_path / "checkpoints" / "2"))

  monkeypatch.setattr(manager, "save", full_disk)
  with pytest.raises(checkpoints.CheckpointSaveError) as info:
    saver.save(2, {"w": jnp.arange(4.0) + 1})
  line = str(info.value)
  assert "\n" not in line
  assert str(tmp_path / "checkpoints") in line and "No space left" in line
  assert "step 1 is intact" in line
  monkeypatch.undo()
  restored, step, damaged = checkpoints.restore_latest(manager, state)
  assert step == 1 and not damaged
  np.testing.assert_array_equal(restored["w"], state["w"])
  manager.close()


def test_torn_last_metrics_line_is_repaired_on_resume(tmp_path):
  path = tmp_path / "metrics.jsonl"
  path.write_text('{"step": 2, "loss": 1.0}\n{"step": 4, "loss": 0.5}\n'
                  '{"step": 6, "lo')  # killed mid-write
  writer = monitor.MetricWriter(str(tmp_path), resume_step=4)
  writer.write(6, {"loss": 0.25})
  writer.close()
  rows = [json.loads(l) for l in path.read_text().splitlines()]
  assert [r["step"] for r in rows] == [2, 4, 6] and rows[2]["loss"] == 0.25


# --------------------------------------------------------------- numerics --
def test_skip_keeps_the_state_and_the_guard_stops_after_max_skipped(tmp_path):
  @flax.struct.dataclass
  class S:  # a pytree with .replace(step=...), like TrainState
    step: jax.Array
    w: jax.Array

  before = S(jnp.int32(4), jnp.ones(3))
  after = S(jnp.int32(5), jnp.full(3, jnp.nan))
  step = jax.jit(faults.skip_nonfinite)
  kept, metrics = step(before, after, {"loss": jnp.float32(jnp.nan)},
                       {"w": jnp.ones(3)})
  assert int(metrics["skipped"]) == 1 and int(kept.step) == 5
  np.testing.assert_array_equal(kept.w, before.w)
  fine = S(jnp.int32(5), jnp.zeros(3))
  new, metrics = step(before, fine, {"loss": jnp.float32(1.0)},
                      {"w": jnp.ones(3)})
  assert int(metrics["skipped"]) == 0
  np.testing.assert_array_equal(new.w, fine.w)
  # Infinite gradient, finite loss: skipped too.
  _, metrics = step(before, fine, {"loss": jnp.float32(1.0)},
                    {"w": jnp.array([1.0, jnp.inf, 0.0])})
  assert int(metrics["skipped"]) == 1

  manager = ocp.CheckpointManager(str(tmp_path / "c"))
  guard = faults.NonfiniteGuard("skip", 3, manager)
  flags = [0, 1, 1, 0, 1, 1]
  for i, flag in enumerate(flags, 1):
    guard.after_step(i, {"loss": jnp.float32(np.nan if flag else 1.0),
                         "skipped": jnp.int32(flag)})
  assert guard.values(6, {"loss": jnp.float32(np.nan),
                          "skipped": jnp.int32(1)}) == {
                              "skipped": 1.0, "skipped_steps": 4.0}
  with pytest.raises(FloatingPointError, match=r"3 steps in a row \(steps 5 "
                     r"to 7\).*skipped \(train.max_skipped=3\)"):
    guard.after_step(7, {"loss": jnp.float32(np.nan), "skipped": jnp.int32(1)})
    guard.values(7, {"loss": jnp.float32(np.nan), "skipped": jnp.int32(1)})
  manager.close()


@pytest.mark.slow  # ~10-20 s; the skip logic's unit test above is fast
@pytest.mark.usefixtures("fast_compiles")
def test_skip_policy_in_the_train_step_drops_only_the_bad_step(
    fmnist_data_dir, tmp_path, monkeypatch):
  real_loss = joint_embedding.JointEmbeddingMethod.loss

  def loss_nan_at_step_3(self, params, state, batch, key, schedule):
    value, aux = real_loss(self, params, state, batch, key, schedule)
    # A NaN gradient at step index 3 (the loss terms reported stay finite).
    return value * jnp.where(schedule["step"] == 3, jnp.nan, 1.0), aux

  monkeypatch.setattr(joint_embedding.JointEmbeddingMethod, "loss",
                      loss_nan_at_step_3)
  config = _config(fmnist_data_dir, **{"train.on_nonfinite": "skip",
                                       "log_every_steps": 1})
  config.evals = ml_collections.ConfigDict()
  results = train.train_and_evaluate(config, str(tmp_path / "run"))
  assert results["skipped_steps"] == 1
  rows = [json.loads(l) for l in open(tmp_path / "run" / "metrics.jsonl")]
  assert [r["skipped"] for r in rows] == [0, 0, 0, 1, 0, 0]  # step 4 = index 3
  assert "grad_norm" not in rows[3]  # NaN: left out of the line
  assert all(np.isfinite(r["grad_norm"]) for r in rows if "grad_norm" in r)


def test_clip_grad_norm_rescales_to_the_global_norm():
  optim = ml_collections.ConfigDict({"name": "adamw", "weight_decay": 0.0,
                                     "clip_grad_norm": 0.5})
  params = {"a": jnp.ones((2, 2)), "b": jnp.ones(3)}
  grads = {"a": jnp.full((2, 2), 3.0), "b": jnp.full(3, 4.0)}
  norm = float(optax.tree.norm(grads))
  clipped = jax.tree.map(lambda g: g * 0.5 / norm, grads)
  tx = optimizers.create_optimizer(optim, 0.1)
  updates, _ = tx.update(grads, tx.init(params), params)
  bare = optax.adamw(0.1, weight_decay=0.0)
  expected, _ = bare.update(clipped, bare.init(params), params)
  for k in params:
    np.testing.assert_allclose(updates[k], expected[k], rtol=1e-6)
  optim.clip_grad_norm = 0.0  # off: the bare optimiser
  tx = optimizers.create_optimizer(optim, 0.1)
  updates, _ = tx.update(clipped, tx.init(params), params)
  for k in params:
    np.testing.assert_allclose(updates[k], expected[k], rtol=1e-6)


def test_freeze_last_layer_for_its_epochs_then_trains():
  optim = ml_collections.ConfigDict({"name": "adamw", "weight_decay": 0.1,
                                     "clip_grad_norm": 0.0,
                                     "freeze_last_layer_epochs": 1.0})
  params = {"head": {"last_layer_v": jnp.ones((2, 3)),
                     "Dense_0": {"kernel": jnp.ones((2, 2))}}}
  grads = jax.tree.map(jnp.ones_like, params)
  tx = optimizers.create_optimizer(optim, 0.1, steps_per_epoch=2)
  opt_state = tx.init(params)
  moved = []
  for _ in range(3):
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    moved.append((float(jnp.abs(updates["head"]["last_layer_v"]).max()),
                  float(jnp.abs(updates["head"]["Dense_0"]["kernel"]).max())))
  assert moved[0][0] == moved[1][0] == 0.0 and moved[2][0] > 0  # 2 steps
  assert all(m[1] > 0 for m in moved)


# ------------------------------------------------------------ processes ----
def test_run_fingerprint_ignores_process_id_and_sees_any_other_change():
  config = vicreg_config.get_config("smoke")
  base = distributed.run_fingerprint(config)
  assert len(base) == 32
  config.distributed.process_id = 1
  assert distributed.run_fingerprint(config) == base
  config.optim.learning_rate *= 2
  assert distributed.run_fingerprint(config) != base
  distributed.check_same_run(config)  # one process: nothing to compare


def test_preemption_watch_flag_and_handlers_put_back():
  before = signal.getsignal(signal.SIGUSR1)
  watch = preemption.PreemptionWatch(("SIGUSR1",), exit_status=75)
  with watch:
    assert not watch.requested(1)
    os.kill(os.getpid(), signal.SIGUSR1)
    assert watch.requested(2) and watch.received == "SIGUSR1"
  assert signal.getsignal(signal.SIGUSR1) == before
  error = watch.preempted(2)
  assert error.exit_status == 75 and error.step == 2


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or
                    not os.path.exists("/proc/self/status"),
                    reason="malloc_trim is glibc's; RSS read from /proc")
def test_release_free_memory_returns_a_fragmented_heap_to_the_system():
  """200 MiB of 2 KiB blocks, one in 100 kept (so the heap cannot shrink
  from its top): freeing the rest leaves the resident memory high until
  release_free_memory()."""
  def rss_mib():
    with open("/proc/self/status") as f:
      return int(f.read().split("VmRSS:")[1].split()[0]) / 1024
  blocks = [bytearray(2048) for _ in range(100_000)]
  kept = blocks[::100]
  del blocks
  before = rss_mib()
  assert monitor.release_free_memory()
  assert rss_mib() < before - 100, (before, rss_mib())
  assert len(kept) == 1000
