"""Run bookkeeping of the train loop: metrics files, NaN/Inf guards, timings.

``MetricWriter`` appends metrics.jsonl and TensorBoard scalars (process 0);
``kept_line`` and ``atomic_write`` make both survive a kill and a resume;
``check_metrics_finite`` / ``check_state_finite`` stop a run at the first
non-finite loss term or state, naming the last good checkpoint; ``timed``
measures the phases reported in results.json.
"""

import contextlib
import json
import os
import resource
import time

from flax.metrics import tensorboard
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

__all__ = ["MetricWriter", "kept_line", "atomic_write", "all_finite",
           "peak_rss_mib",
           "checkpoint_note", "check_metrics_finite", "check_state_finite",
           "timed"]


class MetricWriter:
  """metrics.jsonl and TensorBoard, written by process 0 only."""

  def __init__(self, workdir: str, resume_step: int):
    self.active = jax.process_index() == 0
    if not self.active:
      return
    self.path = os.path.join(workdir, "metrics.jsonl")
    # Drop lines past the restored step: those steps are recomputed exactly.
    if os.path.exists(self.path):
      with open(self.path) as f:
        kept = [l for l in f if kept_line(l, resume_step)]
      atomic_write(self.path, "".join(kept))
    self.tb = tensorboard.SummaryWriter(os.path.join(workdir, "tensorboard"))

  def write(self, step: int, metrics: dict):
    if not self.active:
      return
    with open(self.path, "a") as f:
      f.write(json.dumps({"step": step, **metrics}) + "\n")
    for name, value in metrics.items():
      self.tb.scalar(name, value, step)
    self.tb.flush()


def kept_line(line: str, resume_step: int) -> bool:
  """Whether a metrics.jsonl line survives a resume at ``resume_step``.

  A line cut short by a kill (no newline, or not JSON) is dropped with the
  steps after the checkpoint, which the resumed run writes again.
  """
  if not line.endswith("\n"):
    return False
  try:
    return json.loads(line).get("step", 0) <= resume_step
  except json.JSONDecodeError:
    return False


def atomic_write(path: str, text: str):
  """Writes ``text`` to ``path`` through a temporary file and a rename, so a
  kill leaves either the old or the new file, never a truncated one."""
  tmp = f"{path}.tmp"
  with open(tmp, "w") as f:
    f.write(text)
  os.replace(tmp, path)


def peak_rss_mib() -> float:
  """Peak resident memory of this process so far, in MiB (ru_maxrss, Linux)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@jax.jit
def all_finite(tree) -> jax.Array:
  """bool scalar: every element of every leaf of ``tree`` is finite."""
  return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x))
                            for x in jax.tree.leaves(tree)]))


def checkpoint_note(ckpt: ocp.CheckpointManager) -> str:
  """Names the newest complete checkpoint on disk (waits for pending saves)."""
  ckpt.wait_until_finished()
  step = ckpt.latest_step()
  if step is None:
    return "no checkpoint was written yet (a rerun starts from step 0)"
  return (f"last good checkpoint: step {step} at {ckpt.directory / str(step)} "
          "(a rerun with this workdir resumes from it)")


def check_metrics_finite(metrics: dict, step: int,
                  ckpt: ocp.CheckpointManager) -> dict[str, float]:
  """The metrics of ``step`` as floats; raises if one is NaN or Inf.

  Args:
    metrics: the step's metrics (loss terms of the method and "grad_norm"),
      scalars as floats or jax arrays.
    step: the step that produced them (1-based, as in metrics.jsonl).
    ckpt: the run's checkpoint manager, to name the last good checkpoint.

  Returns:
    dict name -> float, the same keys as ``metrics``.

  Raises:
    FloatingPointError: naming the step, every non-finite term with its value
      and the last good checkpoint.
  """
  values = {k: float(v) for k, v in jax.device_get(metrics).items()}
  bad = {k: v for k, v in values.items() if not np.isfinite(v)}
  if bad:
    terms = ", ".join(f"{k}={v}" for k, v in bad.items())
    raise FloatingPointError(
        f"non-finite value at step {step}: {terms}; stopped before "
        f"writing this step's metrics or checkpoint; {checkpoint_note(ckpt)}")
  return values


def check_state_finite(state, step: int, ckpt):
  """Raises FloatingPointError if the state after ``step`` (parameters,
  BatchNorm statistics, optimiser moments) holds a NaN or Inf: such a state
  must never become a checkpoint, even when the step's loss was finite."""
  if not bool(all_finite(state)):
    raise FloatingPointError(
        f"non-finite parameters or optimiser state after step {step} (its "
        f"loss terms were finite); not saved; {checkpoint_note(ckpt)}")


@contextlib.contextmanager
def timed(seconds: dict, phase: str, announce: bool = False):
  """Adds the wall time of the ``with`` block to ``seconds[phase]``; with
  ``announce`` (process 0 only), prints the phase's duration when done."""
  start = time.time()
  try:
    yield
  finally:
    seconds[phase] = seconds.get(phase, 0.0) + time.time() - start
  if announce and jax.process_index() == 0:
    print(f"{phase}: done in {time.time() - start:.1f} s", flush=True)
