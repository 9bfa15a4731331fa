"""Multi-process training (jax.distributed over gloo) equals one process.

Two processes on 127.0.0.1, each with 2 CPU devices and its own B/2 rows of
every global batch, run ``python -m ssljax.main`` on the smoke config; a
single process with 4 CPU devices runs the same config. Same global batches
and mesh size, so the losses and final parameters must agree to round-off,
and only process 0 may write files under the workdir.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import jax
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from ssljax import distributed, methods, train, train_state

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from configs import vicreg as vicreg_config  # noqa: E402

# Runs ssljax.main with an audit hook that logs every file this process
# opens for writing (Python-level opens: metrics, results, config, orbax
# metadata) to $SSLJAX_WRITE_LOG, one path per line.
_LAUNCHER = r"""
import os, runpy, sys
log_path = os.environ["SSLJAX_WRITE_LOG"]
log = open(log_path, "a", buffering=1)
def hook(event, args):
  if event == "open" and args[0] is not None and not isinstance(args[0], int):
    mode, flags = args[1], args[2]
    writing = (mode and any(c in mode for c in "wax+")) or (
        mode is None and flags & (os.O_WRONLY | os.O_RDWR))
    if writing and os.fspath(args[0]) != log_path:
      log.write(os.path.abspath(os.fsdecode(args[0])) + "\n")
sys.addaudithook(hook)
sys.argv = ["ssljax.main"] + sys.argv[1:]
runpy.run_module("ssljax.main", run_name="__main__", alter_sys=True)
"""

# Generous: 3 processes on 2 shared cores took 11 min once and over 10 another
# time while other jobs loaded the machine.
TIMEOUT_S = 1500


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


# Smoke VICReg, 4 steps, with LARS (Adam would turn round-off-only
# gradients, e.g. of the projector's output bias, into ±lr steps), no
# warm-up and a large step, so the parameters move well beyond round-off.
_OVERRIDES = {"optim.name": "lars", "optim.warmup_epochs": 0.0,
              "optim.learning_rate": 0.4, "optim.lars.trust_coefficient": 0.02,
              "num_steps": 4, "eval_inputs.baselines": False}


def _main_args(data_dir, workdir):
  return ([os.path.join(REPO, "configs", "vicreg.py") + ":smoke",
           f"--config.dataset.data_dir={data_dir}", f"--workdir={workdir}"]
          + [f"--config.{k}={v}" for k, v in _OVERRIDES.items()])


def _initial_params():
  """The parameters both runs start from (a function of config.seed)."""
  config = vicreg_config.get_config("smoke")
  state = train_state.create_train_state(
      methods.build(config), optax.identity(), jax.random.key(config.seed),
      train.batch_spec(config, (28, 28, 1)))
  return state.params


def _launch(args, *, devices, log, env_extra=None):
  env = dict(os.environ, JAX_PLATFORMS="cpu", SSLJAX_WRITE_LOG=str(log),
             XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
             **(env_extra or {}))
  return subprocess.Popen([sys.executable, "-c", _LAUNCHER, "--config", *args],
                          cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def _wait_all(procs):
  """Waits for every process; on a failure or after TIMEOUT_S in all, kills
  them all (CI never hangs) and fails with the tail of each output."""
  deadline = time.monotonic() + TIMEOUT_S
  try:
    outputs = [p.communicate(timeout=max(deadline - time.monotonic(), 1))[0]
               for p in procs]
  except subprocess.TimeoutExpired:
    for p in procs:
      p.kill()
    tails = [p.communicate()[0][-2000:] for p in procs]
    pytest.fail(f"timed out after {TIMEOUT_S} s:\n" + "\n---\n".join(tails))
  for p, out in zip(procs, outputs):
    assert p.returncode == 0, out[-4000:]


def _final_params(workdir):
  """Parameters of the latest checkpoint, restored onto this process's first
  device (the checkpoint's own 4-device sharding does not exist here)."""
  path = workdir / "checkpoints"
  step = ocp.CheckpointManager(path).latest_step()
  checkpointer = ocp.StandardCheckpointer()
  metadata = checkpointer.metadata(path / str(step) / "default")
  metadata = getattr(metadata, "item_metadata", metadata)
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  target = jax.tree.map(
      lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=device), metadata)
  return checkpointer.restore(path / str(step) / "default", target)["params"]


def _metrics(workdir):
  """{(step, name): value} of the scalars of metrics.jsonl."""
  lines = (workdir / "metrics.jsonl").read_text().splitlines()
  return {(r["step"], k): v for r in map(json.loads, lines) for k, v in r.items()
          if k != "step" and not isinstance(v, list)}


# 7 to 14 min wall (TF and JAX start-up, compiles and the probe in three
# processes, plus preparing the dataset fixture) while other jobs shared the
# 2 cores: far over a minute, so not in the default suite.
@pytest.mark.slow
def test_two_processes_equal_one_process(fmnist_data_dir, tmp_path):
  multi, single = tmp_path / "multi", tmp_path / "single"
  coordinator = f"127.0.0.1:{_free_port()}"
  procs = [_launch(_main_args(fmnist_data_dir, multi) +
                   ["--config.distributed.enabled=True"], devices=2,
                   log=tmp_path / f"writes{p}.txt",
                   env_extra={"JAX_COORDINATOR_ADDRESS": coordinator,
                              "JAX_NUM_PROCESSES": "2",
                              "JAX_PROCESS_ID": str(p)})
           for p in range(2)]
  procs.append(_launch(_main_args(fmnist_data_dir, single), devices=4,
                       log=tmp_path / "writes_single.txt"))
  _wait_all(procs)

  results = json.loads((multi / "results.json").read_text())
  assert results["num_devices"] == 4 and results["steps"] == 4
  # Same global batches (each process augments its rows with the draws one
  # process would use) and the same 4-device mesh: only the cross-process
  # all-reduce order and crop_and_resize rounding differ. Compared: every
  # logged metric (loss terms, norm of the all-reduced gradient) at steps 2
  # and 4, and the final parameters relative to how far they moved from the
  # common initialisation. Measured: metrics within 1.5e-6 relative;
  # parameters moved 0.57 (max abs) and differ by 1.1e-6. The 1e-4 bound leaves
  # room for float32 round-off amplified by the smoke CNN's BatchNorm (up to
  # 5.5e-5 in tests/test_sharding.py). Probe accuracies are not compared:
  # L-BFGS may flip a test sample on features equal up to round-off.
  metrics_m, metrics_s = _metrics(multi), _metrics(single)
  assert metrics_m.keys() == metrics_s.keys()
  assert {step for step, _ in metrics_m} == {2, 3, 4}  # 3: label-free evals
  # Train-step metrics to round-off; evaluator values ("<name>/<metric>"):
  # accuracies not compared (as above: a probe may flip test images on
  # round-off; measured 4 of 256), the label-free ones (RankMe) to 1 %.
  # Not numerics: the host's peak memory; the online probe's batch accuracy
  # (64 rows: one flip is 1.6 %) is an accuracy too.
  train_keys = [k for k in metrics_s if "/" not in k[1] and k[1] not in (
      "host_peak_rss_mib", "online_probe_train_accuracy")]
  worst = max(abs(metrics_m[k] - metrics_s[k]) / max(abs(metrics_s[k]), 1e-6)
              for k in train_keys)
  for k, v in metrics_s.items():
    if "/" in k[1] and "accuracy" not in k[1]:
      assert abs(metrics_m[k] - v) <= 1e-2 * abs(v), (k, metrics_m[k], v)
  p0, pm, ps = _initial_params(), _final_params(multi), _final_params(single)
  moved = max(float(np.max(np.abs(s - i))) for s, i in
              zip(jax.tree.leaves(ps), jax.tree.leaves(p0)))
  diff = max(float(np.max(np.abs(m - s))) for m, s in
             zip(jax.tree.leaves(pm), jax.tree.leaves(ps)))
  print(f"\nmax relative metric difference {worst:.2e}; parameters moved "
        f"{moved:.3g} (max abs), max |2 processes − 1 process| {diff:.2e}")
  assert worst <= 1e-4
  assert diff <= 1e-4 * moved

  # Process 0 alone writes metrics, results and config (TensorBoard writes
  # through TF's C++ file layer, invisible to the hook: one events file).
  # Orbax checkpoints are collective: every process adds its own records to
  # the same step directory (a shared file system on a real cluster), so
  # process 1 may write under checkpoints/ and nowhere else.
  writes = [set((tmp_path / f"writes{p}.txt").read_text().split())
            for p in range(2)]
  in_multi = lambda paths: {p for p in paths if p.startswith(str(multi))}
  outside = [p for p in in_multi(writes[1])
             if not p.startswith(str(multi / "checkpoints"))]
  assert not outside, outside
  names = {os.path.basename(p).removesuffix(".tmp")
           for p in in_multi(writes[0])}
  assert {"metrics.jsonl", "results.json", "config.json"} <= names, names
  assert len(os.listdir(multi / "tensorboard")) == 1


def test_distributed_arguments_from_config_then_environment(monkeypatch):
  dist = ml_collections.ConfigDict({"enabled": True,
                                    "coordinator_address": "10.0.0.1:1234",
                                    "num_processes": None, "process_id": 3})
  monkeypatch.setenv("JAX_NUM_PROCESSES", "4")
  monkeypatch.setenv("JAX_PROCESS_ID", "1")
  # pylint: disable=protected-access
  assert distributed._resolved(dist) == {
      "coordinator_address": "10.0.0.1:1234", "num_processes": 4,
      "process_id": 3}
  monkeypatch.setenv("JAX_NUM_PROCESSES", "four")
  with pytest.raises(ValueError, match="num_processes"):
    distributed._resolved(dist)
  dist.enabled = False
  assert distributed.initialize(dist) is False  # no-op: nothing initialised


# ---------------------------------------------- faults of 2 processes (25) --
_FAULT_OVERRIDES = ("--config.num_steps=16", "--config.checkpoint_every_steps=4",
                    "--config.log_every_steps=1",
                    "--config.eval_inputs.baselines=False",
                    "--config.distributed.heartbeat_timeout_seconds=10",
                    "--config.distributed.enabled=True")


def _start_pair(data_dir, workdir, logdir, extra=((), ())):
  """Two processes of the stretched smoke run; output to files (a full
  pipe would stall them)."""
  coordinator = f"127.0.0.1:{_free_port()}"
  procs = []
  for p in range(2):
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=1",
               JAX_COORDINATOR_ADDRESS=coordinator, JAX_NUM_PROCESSES="2",
               JAX_PROCESS_ID=str(p))
    log = open(logdir / f"p{p}.txt", "w")  # pylint: disable=consider-using-with
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "ssljax.main", "--config",
         os.path.join(REPO, "configs", "vicreg.py") + ":smoke",
         f"--config.dataset.data_dir={data_dir}", f"--workdir={workdir}",
         *_FAULT_OVERRIDES, *extra[p]], cwd=REPO, env=env, stdout=log,
        stderr=subprocess.STDOUT))
  return procs


def _wait_step(procs, workdir, step):
  metrics, deadline = workdir / "metrics.jsonl", time.monotonic() + TIMEOUT_S
  while not (metrics.exists() and f'"step": {step},' in metrics.read_text()):
    assert all(p.poll() is None for p in procs), "exited early"
    assert time.monotonic() < deadline, "hang"
    time.sleep(0.02)


def _ends(procs, timeout):
  """[(exit status, seconds)] of each process, killing any still alive
  after ``timeout`` seconds."""
  start, ends = time.monotonic(), [None, None]
  while None in ends and time.monotonic() - start < timeout:
    for i, p in enumerate(procs):
      if ends[i] is None and p.poll() is not None:
        ends[i] = (p.returncode, time.monotonic() - start)
    time.sleep(0.02)
  for p in procs:
    p.kill()
    p.wait()
  return ends


@pytest.mark.slow
def test_sigterm_to_one_process_both_save_one_step_then_resume(
    fmnist_data_dir, tmp_path):
  workdir = tmp_path / "run"
  procs = _start_pair(fmnist_data_dir, workdir, tmp_path)
  _wait_step(procs, workdir, 6)
  os.kill(procs[1].pid, signal.SIGTERM)
  ends = _ends(procs, 300)
  assert [e and e[0] for e in ends] == [0, 0], ends
  out0 = (tmp_path / "p0.txt").read_text()
  step = int(re.search(r"preempted at step (\d+): checkpoint written", out0)[1])
  assert 6 <= step < 16 and str(step) in os.listdir(workdir / "checkpoints")
  procs = _start_pair(fmnist_data_dir, workdir, tmp_path)
  assert [e and e[0] for e in _ends(procs, TIMEOUT_S)] == [0, 0]
  assert json.loads((workdir / "results.json").read_text())[
      "resumed_from_step"] == step


@pytest.mark.slow
@pytest.mark.parametrize("victim", [1, 0])
def test_kill9_of_one_process_ends_the_other_with_one_line_then_resume(
    fmnist_data_dir, tmp_path, victim):
  workdir = tmp_path / "run"
  procs = _start_pair(fmnist_data_dir, workdir, tmp_path)
  _wait_step(procs, workdir, 6)  # checkpoint 4 is written
  os.kill(procs[victim].pid, signal.SIGKILL)
  ends = _ends(procs, 120)  # heartbeat timeout 10 s: bounded
  survivor = 1 - victim
  assert ends[survivor] is not None and ends[survivor][0] != 0, ends
  out = (tmp_path / f"p{survivor}.txt").read_text()
  errors = [l for l in out.splitlines() if l.startswith("error:")
            or "Terminating process because the JAX distributed" in l]
  # Ours (a failed collective), or JAX's fatal line (the coordination
  # service noticed first); when process 0 dies both may be printed.
  assert 1 <= len(errors) <= 2, out[-3000:]
  saved = max(int(s) for s in os.listdir(workdir / "checkpoints") if s.isdigit())
  procs = _start_pair(fmnist_data_dir, workdir, tmp_path)
  assert [e and e[0] for e in _ends(procs, TIMEOUT_S)] == [0, 0]
  assert json.loads((workdir / "results.json").read_text())[
      "resumed_from_step"] == saved


@pytest.mark.slow
def test_mismatched_config_is_refused_before_training(fmnist_data_dir,
                                                      tmp_path):
  workdir = tmp_path / "run"
  procs = _start_pair(fmnist_data_dir, workdir, tmp_path,
                      extra=((), ("--config.optim.learning_rate=0.004",)))
  ends = _ends(procs, TIMEOUT_S)
  assert [e and e[0] for e in ends] == [1, 1], ends
  out = (tmp_path / "p0.txt").read_text()
  assert re.search(r"error: process\(es\) \[1\] run another config or ssljax "
                   "code than process 0", out), out[-3000:]
  assert not (workdir / "checkpoints").exists() or not os.listdir(
      workdir / "checkpoints")
