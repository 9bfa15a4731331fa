"""Multi-process (multi-host) start-up: ``jax.distributed.initialize`` from config.

A multi-process run starts one copy of ``python -m ssljax.main`` per host (or
per process); every copy calls ``initialize`` before JAX touches a device.
Afterwards ``jax.devices()`` lists the devices of all processes, the train
step's mesh spans them, each process feeds its own B/P rows of every global
batch (``ssljax.data.train_batches``) and process 0 alone writes metrics and
results.
"""

import hashlib
import os

import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np

__all__ = ["ENV_VARS", "MismatchError", "initialize", "run_fingerprint",
           "check_same_run", "lost_peer"]

# Environment fallbacks of the config fields. JAX_COORDINATOR_ADDRESS is also
# read by jax itself; the other two are ours.
ENV_VARS = {"coordinator_address": "JAX_COORDINATOR_ADDRESS",
            "num_processes": "JAX_NUM_PROCESSES",
            "process_id": "JAX_PROCESS_ID"}


def _resolved(dist: ml_collections.ConfigDict) -> dict:
  """The three arguments: config field, else its environment variable, else
  None (left to jax's cluster detection: SLURM, Open MPI, Cloud TPU)."""
  out = {}
  for field, var in ENV_VARS.items():
    value = dist[field]
    if value is None and os.environ.get(var):
      value = os.environ[var]
    if value is not None and field != "coordinator_address":
      try:
        value = int(value)
      except ValueError:
        raise ValueError(f"distributed.{field} (or ${var}) must be an int, got "
                         f"{value!r}") from None
    out[field] = value
  return out


def initialize(dist: ml_collections.ConfigDict) -> bool:
  """Joins the multi-process job described by ``dist`` (config.distributed).

  Does nothing unless ``dist.enabled``. Otherwise the coordinator address,
  process count and process id are taken from the config fields, else from
  $JAX_COORDINATOR_ADDRESS, $JAX_NUM_PROCESSES, $JAX_PROCESS_ID, else (for
  any still unset) from jax's cluster detection (SLURM's srun variables,
  Open MPI, Cloud TPU pod metadata). CPU collectives across processes use
  gloo (XLA's CPU backend has none otherwise); GPU/TPU use their own.

  Args:
    dist: ConfigDict with ``enabled`` (bool), ``coordinator_address``
      ("host:port" of process 0 or None), ``num_processes`` and
      ``process_id`` (int or None).

  Returns:
    True if ``jax.distributed.initialize`` was called.

  Timeouts (``dist.heartbeat_timeout_seconds``, default 30;
  ``dist.initialization_timeout_seconds``, default 300): every process
  sends heartbeats to the coordination service (held by process 0). A
  process that misses them for the heartbeat timeout (killed, its host
  gone) is declared dead and the service tells every other process, which
  then stops with an error instead of waiting in a collective forever; if
  process 0 dies, the others lose the service and stop after the same
  timeout. So a survivor exits at most about one heartbeat timeout after a
  peer dies. Shorter timeouts notice deaths sooner but can stop a healthy
  run whose process is stalled (a long compilation, a slow filesystem).
  Every process must join within the initialisation timeout.

  Also turns on JAX's preemption service (the default), which
  ``ssljax.preemption`` uses to agree on the step a preempted run saves.

  Raises:
    ValueError: a process count or id that is not an int, or (from jax) one
      that neither config, environment nor cluster detection provides.
    RuntimeError: (from jax) JAX already initialised its backend.
  """
  if not dist.enabled:
    return False
  args = _resolved(dist)
  # Must precede the backend's creation, like initialize itself.
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.config.update("jax_enable_preemption_service", True)
  jax.distributed.initialize(
      **args,
      heartbeat_timeout_seconds=dist.get("heartbeat_timeout_seconds", 30),
      initialization_timeout=dist.get("initialization_timeout_seconds", 300))
  return True


class MismatchError(RuntimeError):
  """The processes of one run do not run the same config or code."""


def run_fingerprint(config: ml_collections.ConfigDict) -> bytes:
  """SHA-256 (32 bytes) of the config (JSON, without the per-process
  ``distributed.process_id``) and of every ``.py`` file of the ssljax
  package (paths and contents): equal on processes that run the same
  experiment with the same code."""
  digest = hashlib.sha256()
  fields = config.to_dict()
  fields.get("distributed", {}).pop("process_id", None)
  digest.update(ml_collections.ConfigDict(fields).to_json(sort_keys=True)
                .encode())
  root = os.path.dirname(os.path.abspath(__file__))
  for folder, dirs, names in sorted(os.walk(root)):
    dirs.sort()
    for name in sorted(names):
      if name.endswith(".py"):
        path = os.path.join(folder, name)
        digest.update(os.path.relpath(path, root).encode())
        with open(path, "rb") as f:
          digest.update(f.read())
  return digest.digest()


def check_same_run(config: ml_collections.ConfigDict):
  """Compares `run_fingerprint` across processes before training.

  Raises:
    MismatchError: one line naming the processes whose config or ssljax
      code differs from process 0's.
  """
  if jax.process_count() == 1:
    return
  mine = np.frombuffer(run_fingerprint(config), np.uint8)
  every = np.asarray(multihost_utils.process_allgather(mine))  # (P, 32)
  differ = [p for p in range(every.shape[0])
            if not np.array_equal(every[p], every[0])]
  if differ:
    raise MismatchError(
        f"process(es) {differ} run another config or ssljax code than "
        f"process 0 (SHA-256 of config and code: {every[0].tobytes().hex()[:12]}"
        f" on process 0, {every[differ[0]].tobytes().hex()[:12]} on process "
        f"{differ[0]}); start every process with the same command and code")


def lost_peer(exc: BaseException) -> str:
  """The one line printed when a collective fails because another process
  of the run died (``exc``: the ``jax.errors.JaxRuntimeError``)."""
  first = (str(exc).strip().splitlines() or [""])[0]
  cause = first.rsplit(": ", 1)[-1] if "Gloo" in first else first[:200]
  return (f"another process of this run stopped ({cause}); no process "
          "can go on alone: restart every process with the same command to "
          "resume from the last checkpoint they all wrote")
