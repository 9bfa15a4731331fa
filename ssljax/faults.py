"""What the train loop does when something goes wrong, kept out of its way.

* `NonfiniteGuard`: a NaN/Inf loss or gradient, under
  ``config.train.on_nonfinite`` "stop" (raise, naming the step and the last
  good checkpoint) or "skip" (the jitted step already dropped the update,
  `skip_nonfinite`; the guard counts skips and stops after
  ``config.train.max_skipped`` in a row). Each step's flag is read one step
  late, so the host never waits for the device between steps.
* `CheckpointSaver`: saves and seals checkpoints; a failed write (disk
  full, directory unwritable) becomes one `CheckpointSaveError` naming the
  path, the cause and the intact earlier checkpoint.
* `EvaluatorRunner`: runs evaluators so that one that raises loses nothing:
  its error is recorded under its name, the others still run, and after
  the last step every evaluator's result is kept in ``final_evals.json`` as
  soon as it exists, so a rerun (after a preemption or a failure) runs only
  the evaluators that have no result yet.
"""

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from ssljax import checkpoints, monitor

__all__ = ["one_line", "skip_nonfinite", "NonfiniteGuard", "CheckpointSaver",
           "EvaluatorRunner", "FINAL_EVALS"]

FINAL_EVALS = "final_evals.json"  # per-evaluator results of the last step


def one_line(exc: BaseException, limit: int = 300) -> str:
  """``Type: first line of the message``, at most ``limit`` characters."""
  text = str(exc).strip().splitlines()
  line = f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
  return line if len(line) <= limit else line[:limit - 1] + "…"


# ----------------------------------------------------------- non-finite ----
def skip_nonfinite(old_state, new_state, metrics: dict, grads):
  """Inside the jitted step: keeps ``old_state`` when the step is not finite.

  The decision is one boolean computed from the global (replicated) loss
  terms and gradients, so every device and process takes the same branch.
  A skipped step leaves parameters, optimiser, method and probe state as
  they were and advances only ``step`` (so views and schedules stay keyed
  by the step count, as in a run without the skip).

  Args:
    old_state, new_state: the TrainState before and after the update.
    metrics: the step's scalar metrics (loss terms, ...).
    grads: the gradient pytree.

  Returns:
    (state, metrics with "skipped": int32 scalar, 1 when skipped).
  """
  ok = monitor.all_finite((metrics, grads))
  kept = old_state.replace(step=old_state.step + 1)
  state = jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_state, kept)
  return state, {**metrics, "skipped": (~ok).astype(jnp.int32)}


class NonfiniteGuard:
  """Host side of ``config.train.on_nonfinite``, one step late.

  Call `after_step` after dispatching every step and `values` before a
  step's metrics are written or its state saved or evaluated.

  Args:
    policy: "stop" | "skip".
    max_skipped: "skip" stops after this many consecutive skipped steps.
    ckpt: the checkpoint manager (names the last good checkpoint).
  """

  def __init__(self, policy: str, max_skipped: int, ckpt):
    self.policy, self.max_skipped, self.ckpt = policy, max_skipped, ckpt
    self.pending = None  # (step, metrics, device flag) not yet read
    self.consecutive = 0  # skipped steps in a row
    self.skipped = 0  # skipped steps of this process's run

  def _settle(self):
    if self.pending is None:
      return
    step, metrics, flag = self.pending
    self.pending = None
    if self.policy == "stop":
      if not bool(flag):
        monitor.check_metrics_finite(metrics, step, self.ckpt)  # raises
      return
    if not bool(flag):
      self.consecutive = 0
      return
    self.consecutive += 1
    self.skipped += 1
    if self.consecutive >= self.max_skipped:
      raise FloatingPointError(
          f"{self.consecutive} steps in a row (steps "
          f"{step - self.consecutive + 1} to {step}) had a non-finite loss or "
          f"gradient and were skipped (train.max_skipped="
          f"{self.max_skipped}); stopped; "
          f"{monitor.checkpoint_note(self.ckpt)}")

  def after_step(self, step: int, metrics: dict):
    """Reads the previous step's flag (raising as the policy says) and
    queues this one's."""
    self._settle()
    flag = (metrics["skipped"] if self.policy == "skip"
            else monitor.all_finite(metrics))
    self.pending = (step, metrics, flag)

  def values(self, step: int, metrics: dict) -> dict[str, float]:
    """The metrics of ``step`` as floats, every step so far settled. Under
    "skip" the non-finite terms of a skipped step are left out and
    "skipped_steps" (the count so far) is added."""
    self._settle()
    if self.policy == "stop":
      return monitor.check_metrics_finite(metrics, step, self.ckpt)
    values = {k: float(v) for k, v in jax.device_get(metrics).items()}
    values = {k: v for k, v in values.items() if np.isfinite(v)}
    values["skipped_steps"] = float(self.skipped)
    return values


# ---------------------------------------------------------- checkpoints ----
class CheckpointSaver:
  """Saves sealed checkpoints; a failed write raises one clear error.

  Orbax writes asynchronously, so a write error surfaces when the next save
  (or `finish`) waits for it; the error names that step either way.
  """

  def __init__(self, ckpt: ocp.CheckpointManager):
    self.ckpt = ckpt
    self.in_flight = None  # step whose write may not have finished

  def _failed(self, step, exc) -> checkpoints.CheckpointSaveError:
    cause = monitor.write_cause(exc)
    try:
      self.ckpt.reload()
      good = [s for s in self.ckpt.all_steps() if s != step]
    except Exception:  # pylint: disable=broad-except
      good = []
    kept = (f"step {max(good)} is intact and a rerun resumes from it" if good
            else "no earlier checkpoint exists (a rerun starts from step 0)")
    return checkpoints.CheckpointSaveError(
        f"cannot write checkpoint step {step} under {self.ckpt.directory} "
        f"({cause}); {kept}")

  def finish(self):
    """Waits for the write in flight and seals it."""
    try:
      checkpoints.seal(self.ckpt)
    except Exception as e:  # pylint: disable=broad-except
      step, self.in_flight = self.in_flight, None
      raise self._failed(step, e) from e
    self.in_flight = None

  def save(self, step: int, state):
    """Seals the earlier steps, then starts writing ``state`` at ``step``.

    Raises:
      ssljax.checkpoints.CheckpointSaveError: this or the previous write
        failed (e.g. OSError ENOSPC or EACCES); the message names the
        checkpoint directory, the cause and the newest intact step.
    """
    self.finish()
    try:
      self.in_flight = step
      self.ckpt.save(step, args=ocp.args.StandardSave(state), force=True)
    except Exception as e:  # pylint: disable=broad-except
      raise self._failed(step, e) from e


# ----------------------------------------------------------- evaluators ----
class EvaluatorRunner:
  """Runs evaluators, recording failures instead of ending the run.

  Args:
    workdir: the run's directory (``final_evals.json`` lives there).
    seconds: the run's phase timings (``eval/<name>`` is added).
    total_steps: the run's last step.
    resumed_final: the run restored the checkpoint of the last step, so
      results already in ``final_evals.json`` belong to this state.
    entries: ``config.evals`` (a result is kept only while its entry, the
      evaluator's type and options, is unchanged).

  Attributes:
    errors: {evaluator name: {"error": type, "message": one line}}.
  """

  def __init__(self, workdir: str, seconds: dict, total_steps: int,
               resumed_final: bool, entries=None):
    self.path = os.path.join(workdir, FINAL_EVALS)
    self.seconds, self.total_steps = seconds, total_steps
    self.errors = {}
    self.entries = {k: json.loads(json.dumps(v.to_dict() if hasattr(
        v, "to_dict") else dict(v), default=str))
                    for k, v in (entries or {}).items()}
    self.kept = {}  # evaluator name -> its final values, from a former run
    if resumed_final and os.path.exists(self.path):
      try:
        with open(self.path) as f:
          saved = json.load(f)
        if saved.get("step") == total_steps:
          self.kept = {k: v for k, v in saved["evaluators"].items()
                       if saved["entries"].get(k) == self.entries.get(k)}
      except (OSError, ValueError, KeyError, TypeError, AttributeError):
        self.kept = {}
    self.done = dict(self.kept)

  def run(self, ev, state, *, final: bool) -> dict:
    """``ev.run(state)`` as a dict; {} if it raised (recorded in ``errors``,
    one line on stderr). After the last step, an evaluator whose result a
    former run kept is not run again, and each new result is kept."""
    if final and ev.name in self.kept:
      if jax.process_index() == 0:
        print(f"eval/{ev.name}: kept from the former run", flush=True)
      return {}
    try:
      with monitor.timed(self.seconds, f"eval/{ev.name}", announce=final):
        values = dict(ev.run(state))
    except Exception as e:  # pylint: disable=broad-except
      self.errors[ev.name] = {"error": type(e).__name__,
                              "message": one_line(e)}
      if jax.process_index() == 0:
        when = "final evaluation" if final else "periodic evaluation"
        print(f"error: evaluator {ev.name!r} failed in the {when} "
              f"({one_line(e)}); the other evaluators go on", file=sys.stderr,
              flush=True)
      return {}
    finally:  # its temporaries and compilations are freed: return the pages
      monitor.release_free_memory()
    if final:
      self.done[ev.name] = {k: (v.tolist() if isinstance(v, np.ndarray)
                                else float(v)) for k, v in values.items()}
      if jax.process_index() == 0:
        monitor.atomic_write(self.path, json.dumps(
            {"step": self.total_steps, "entries": self.entries,
             "evaluators": self.done}))
    return values

  def results(self) -> dict:
    """Every final value (kept and new) and, under each failed
    evaluator's name, its {"error", "message"}."""
    out = {k: v for values in self.done.values() for k, v in values.items()}
    out.update(self.errors)
    return out
