"""Multi-process (multi-host) start-up: ``jax.distributed.initialize`` from config.

A multi-process run starts one copy of ``python -m ssljax.main`` per host (or
per process); every copy calls ``initialize`` before JAX touches a device.
Afterwards ``jax.devices()`` lists the devices of all processes, the train
step's mesh spans them, each process feeds its own B/P rows of every global
batch (``ssljax.data.train_batches``) and process 0 alone writes metrics and
results.
"""

import os

import jax
import ml_collections

__all__ = ["ENV_VARS", "initialize"]

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
  jax.distributed.initialize(**args)
  return True
