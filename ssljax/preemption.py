"""Preemption: a signal ends the run at a step boundary with a checkpoint.

Schedulers announce an eviction with a signal some seconds before the kill:
SIGTERM (Kubernetes, Cloud TPU maintenance, spot and preemptible VMs, SLURM
at the end of a job's time), SIGUSR1 or another signal chosen with SLURM's
``--signal``, SIGINT for Ctrl-C. `PreemptionWatch` catches the signals named
in ``config.train.preemption_signals``; the train loop asks it after every
step whether to stop, and if so writes a checkpoint of that step and raises
`Preempted` (``ssljax.main`` prints one line and exits with
``config.train.preempted_exit_status``).

On several processes every one of them must stop after the same step, or
the checkpoint would mix steps (or a process would wait forever in a
collective). A signal usually reaches one process, or all at slightly
different steps, so the decision goes through JAX's preemption sync point
(``jax.experimental.multihost_utils.reached_preemption_sync_point``): the
coordination service spreads the notice to every process, they agree on the
step max(current steps) + 1, and the call returns True on all of them at
that step. JAX's notifier listens to SIGTERM itself (a C++ handler installed
by ``jax.distributed.initialize``), so on several processes SIGTERM is left
to it and the other configured signals are forwarded to it as SIGTERM.
"""

import os
import signal
import threading
import time

import jax
from jax.experimental import multihost_utils

__all__ = ["Preempted", "PreemptionWatch", "message"]


class Preempted(Exception):  # pylint: disable=g-bad-exception-name
  """The run stopped on a preemption signal after writing a checkpoint.

  Attributes:
    step: the checkpointed step (a rerun resumes from it); None when the
      signal came during the final evaluation (the training checkpoint is
      the last step's).
    phase: "training" or "evaluation".
    exit_status: the status ``ssljax.main`` exits with.
  """

  def __init__(self, step, phase: str, exit_status: int):
    self.step, self.phase, self.exit_status = step, phase, exit_status
    super().__init__(message(step, phase))


def message(step, phase: str = "training") -> str:
  """The one line printed on a preemption."""
  if phase == "training":
    return (f"preempted at step {step}: checkpoint written; rerun the same "
            "command to resume")
  return (f"preempted during the final evaluation (training finished at step "
          f"{step}; checkpoint intact); rerun the same command to run the "
          "evaluators that have no result yet")


class PreemptionWatch:
  """Catches preemption signals; answers, step by step, whether to stop.

  Use as a context manager around the train loop and the final evaluation:
  the previous handlers are put back on exit.

  Args:
    signals: signal names, e.g. ("SIGTERM", "SIGINT", "SIGUSR1").
    exit_status: exit status of a preempted run (`Preempted.exit_status`).

  Attributes:
    received: name of the first signal received, or None.
    received_at: its ``time.time()``, or None.
  """

  def __init__(self, signals=("SIGTERM", "SIGINT"), exit_status: int = 0):
    self.signals = tuple(signals)
    self.exit_status = exit_status
    self.received = None
    self.received_at = None
    self._previous = {}
    # One process without jax.distributed: a Python flag. Otherwise the
    # coordination service decides (see the module docstring).
    self.synced = jax.distributed.is_initialized()

  def _handler(self, signum, frame):
    del frame
    if self.received is None:
      self.received = signal.Signals(signum).name
      self.received_at = time.time()
    if self.synced and signum != signal.SIGTERM:
      os.kill(os.getpid(), signal.SIGTERM)  # to JAX's preemption notifier

  def __enter__(self):
    if threading.current_thread() is not threading.main_thread():
      return self  # signal handlers can only be set from the main thread
    for name in self.signals:
      signum = getattr(signal, name)
      if self.synced and signum == signal.SIGTERM:
        continue  # JAX's own handler notifies the coordination service
      self._previous[signum] = signal.signal(signum, self._handler)
    return self

  def __exit__(self, *exc):
    for signum, previous in self._previous.items():
      signal.signal(signum, previous)
    self._previous = {}
    return False

  def requested(self, step: int) -> bool:
    """Whether the run stops after ``step`` (call it once per step, with
    increasing steps, on every process).

    One process: a signal has been received. Several processes (or
    ``jax.distributed`` initialised): JAX's preemption sync point, True on
    every process at the same step.
    """
    if self.synced:
      return multihost_utils.reached_preemption_sync_point(step)
    return self.received is not None

  def preempted(self, step, phase: str = "training") -> Preempted:
    """The `Preempted` exception to raise once the checkpoint of ``step``
    is written (its message is the line `ssljax.main` prints)."""
    return Preempted(step, phase, self.exit_status)
