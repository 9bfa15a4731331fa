"""Run bookkeeping of the train loop: metrics files, NaN/Inf guards, timings.

``MetricWriter`` appends metrics.jsonl (`JsonLinesWriter`) and, when the
``tensorboard`` package is installed, TensorBoard event files
(`TensorBoardWriter`, which needs no TensorFlow), on process 0;
``kept_line`` and ``atomic_write`` make both survive a kill and a resume;
``check_metrics_finite`` / ``check_state_finite`` stop a run at the first
non-finite loss term or state, naming the last good checkpoint; ``timed``
measures the phases reported in results.json.
"""

import contextlib
import ctypes
import errno
import json
import os
import re
import resource
import socket
import time

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

__all__ = ["MetricWriter", "JsonLinesWriter", "TensorBoardWriter",
           "tensorboard_available", "kept_line", "write_cause",
           "atomic_write",
           "all_finite", "peak_rss_mib", "release_free_memory",
           "checkpoint_note", "check_metrics_finite", "check_state_finite",
           "timed"]


class JsonLinesWriter:
  """Appends ``{"step": s, ...}`` lines to a file.

  Scalars are written as floats and 1-D arrays (``write_histograms``: a
  spectrum) as lists. Values given for one step between two ``flush`` calls
  make one line. The method names are those of clu's ``MetricWriter``;
  images, videos, audio and hyper-parameters are accepted and not kept.

  Attributes:
    path: the metrics.jsonl file.
  """

  def __init__(self, path: str):
    self.path = path
    self._pending: dict[int, dict] = {}

  def _add(self, step: int, values: dict):
    self._pending.setdefault(int(step), {}).update(values)

  def write_scalars(self, step, scalars):
    self._add(step, {k: float(v) for k, v in scalars.items()})

  def write_histograms(self, step, arrays, num_buckets=None):
    del num_buckets  # the values themselves are kept
    self._add(step, {k: np.asarray(v, np.float64).tolist()
                     for k, v in arrays.items()})

  def write_texts(self, step, texts):
    self._add(step, {k: str(v) for k, v in texts.items()})

  def write_summaries(self, step, values, metadata=None):
    del step, values, metadata  # tensor summaries: TensorBoard only

  def write_images(self, step, images):
    del step, images

  def write_videos(self, step, videos):
    del step, videos

  def write_audios(self, step, audios, *, sample_rate):
    del step, audios, sample_rate

  def write_hparams(self, hparams):
    del hparams  # the whole config is in config.json

  def flush(self):
    if not self._pending:
      return
    lines = "".join(json.dumps({"step": step, **values}) + "\n"
                    for step, values in sorted(self._pending.items()))
    with open(self.path, "a") as f:
      f.write(lines)
    self._pending = {}

  def close(self):
    self.flush()


def tensorboard_available() -> bool:
  """Whether the ``tensorboard`` package (its record writer) imports."""
  try:
    # pylint: disable=import-outside-toplevel,unused-import
    from tensorboard.summary.writer import record_writer  # noqa: F401
  except ImportError:
    return False
  return True


class TensorBoardWriter:
  """TensorBoard event files written without TensorFlow.

  One file ``events.out.tfevents.<time>.<host>.<pid>.ssljax`` per writer,
  of ``Event`` records holding the summary protos of TensorBoard's scalar
  and histogram plugins, the records ``tf.summary`` writes:
  ``tensorboard --logdir DIR`` shows them as usual. Only the ``tensorboard``
  package's record format and protos are used (``train`` extra), never its
  ``tensorboard.compat.tf``, which would import TensorFlow if installed.
  Writes are synchronous and reach the disk at each ``flush``.

  Args:
    logdir: the directory of the event files (created if missing).

  Raises:
    ImportError: ``tensorboard`` is not installed.
    OSError: the file cannot be created.
  """

  def __init__(self, logdir: str):
    # pylint: disable=import-outside-toplevel
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.histogram import summary_v2 as histogram
    from tensorboard.plugins.scalar import summary_v2 as scalar
    from tensorboard.summary.writer import record_writer
    os.makedirs(logdir, exist_ok=True)
    self._event = event_pb2.Event
    self._scalar_pb, self._histogram_pb = scalar.scalar_pb, histogram.histogram_pb
    self.path = os.path.join(
        logdir, f"events.out.tfevents.{int(time.time()):010d}."
        f"{socket.gethostname()}.{os.getpid()}.ssljax")
    self._records = record_writer.RecordWriter(open(self.path, "ab"))  # pylint: disable=consider-using-with
    self._write(self._event(wall_time=time.time(), file_version="brain.Event:2"))

  def _write(self, event):
    self._records.write(event.SerializeToString())

  def write_scalars(self, step: int, scalars: dict):
    """One scalar summary per name (floats)."""
    for name, value in scalars.items():
      self._write(self._event(step=int(step), wall_time=time.time(),
                              summary=self._scalar_pb(name, float(value))))

  def write_histograms(self, step: int, arrays: dict, num_buckets=None):
    """One histogram summary per name (finite 1-D arrays; 30 buckets by
    default, as ``tf.summary.histogram``)."""
    for name, value in arrays.items():
      summary = self._histogram_pb(name, np.asarray(value, np.float64),
                                   buckets=num_buckets or 30)
      self._write(self._event(step=int(step), wall_time=time.time(),
                              summary=summary))

  def flush(self):
    self._records.flush()

  def close(self):
    if not self._records.closed:
      self._records.close()


class MetricWriter:
  """metrics.jsonl and TensorBoard event files, process 0 only.

  `JsonLinesWriter` (metrics.jsonl) and, when ``tensorboard`` is installed,
  `TensorBoardWriter` (``workdir/tensorboard``; else ``tensorboard`` is None
  and one log line says so). Scalars go to both; 1-D arrays (a spectrum) go
  to metrics.jsonl as lists and to TensorBoard as histograms (when finite),
  never as scalars.

  Resuming at ``resume_step`` drops the lines of later steps (they are
  recomputed exactly) and, when a step up to ``resume_step`` is written
  again (evaluators re-run after the last step), first removes the metrics
  it re-writes from that step's old lines: no (step, metric) pair is ever
  written twice.

  Args:
    workdir: the run's output directory.
    resume_step: the restored step (0 for a fresh run).
  """

  def __init__(self, workdir: str, resume_step: int):
    self.active = jax.process_index() == 0
    self.resume_step = resume_step
    if not self.active:
      return
    self.path = os.path.join(workdir, "metrics.jsonl")
    if os.path.exists(self.path):
      with open(self.path) as f:
        kept = [l for l in f if kept_line(l, resume_step)]
      atomic_write(self.path, "".join(kept))
    self.jsonl = JsonLinesWriter(self.path)
    self.tensorboard = None
    if tensorboard_available():
      self.tensorboard = TensorBoardWriter(os.path.join(workdir, "tensorboard"))
    else:
      logging.warning("the tensorboard package is not installed: metrics go "
                      "to metrics.jsonl only, no TensorBoard files")
    self.writers = [w for w in (self.jsonl, self.tensorboard) if w is not None]

  def write(self, step: int, metrics: dict):
    """Writes one step's metrics: floats (or 0-d arrays) and 1-D arrays.

    Raises:
      ValueError: a value with more than one dimension.
    """
    if not self.active:
      return
    scalars, arrays = {}, {}
    for name, value in jax.device_get(dict(metrics)).items():
      value = np.asarray(value)
      if value.ndim == 0:
        scalars[name] = float(value)
      elif value.ndim == 1:
        arrays[name] = value
      else:
        raise ValueError(f"metric {name!r} has shape {value.shape}; a "
                         "writer takes scalars and 1-D arrays")
    try:
      if step <= self.resume_step:
        self._forget(step, set(metrics))
      if scalars:
        for writer in self.writers:
          writer.write_scalars(step, scalars)
      if arrays:
        self.jsonl.write_histograms(step, arrays)
        finite = {k: v for k, v in arrays.items()
                  if v.size and np.all(np.isfinite(v))}
        if finite and self.tensorboard is not None:
          self.tensorboard.write_histograms(step, finite)
      for writer in self.writers:
        writer.flush()
    except Exception as e:  # pylint: disable=broad-except
      # The event writer's background thread re-raises its own errors.
      raise OSError(f"cannot write the metrics of step {step} under "
                    f"{os.path.dirname(self.path)} ({write_cause(e)})") from e

  def _forget(self, step: int, names: set):
    """Removes ``names`` from the existing lines of ``step``."""
    if not os.path.exists(self.path):
      return
    kept = []
    with open(self.path) as f:
      for line in f:
        row = json.loads(line)
        if row.get("step") == step:
          row = {k: v for k, v in row.items() if k not in names}
          if set(row) == {"step"}:
            continue
          line = json.dumps(row) + "\n"
        kept.append(line)
    atomic_write(self.path, "".join(kept))

  def close(self):
    if self.active:
      for writer in self.writers:
        writer.close()


def write_cause(exc: BaseException) -> str:
  """The cause of a failed write in a few words: the OSError's strerror
  (errno), the errno named in a tensorstore or TensorFlow message (e.g.
  "No space left on device"), else ``Type: first line``."""
  root = exc
  while not isinstance(root, OSError) and (root.__cause__ or root.__context__):
    root = root.__cause__ or root.__context__
  if isinstance(root, OSError) and root.errno:
    return f"{root.strerror or os.strerror(root.errno)} (errno {root.errno})"
  text = str(exc)
  code = re.search(r"os_error_code='?(\d+)", text)
  if code:
    return f"{os.strerror(int(code.group(1)))} (errno {code.group(1)})"
  for number in (errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EDQUOT):
    if os.strerror(number) in text:
      return f"{os.strerror(number)} (errno {number})"
  line = (text.strip().splitlines() or [""])[0][:200]
  return f"{type(exc).__name__}: {line}".rstrip(": ")


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


def release_free_memory() -> bool:
  """Hands the free pages of the C heap back to the operating system.

  glibc keeps the memory that XLA's compiler and the evaluators' host
  temporaries free in its heap, so a process's resident memory stays near
  its high point; ``malloc_trim(0)`` (the malloc_trim(3) manual page:
  since glibc 2.8 it releases every wholly free page of the heap, not only
  its top) returns it. After the main
  job's train step compiled from an empty cache, 0.32 GiB of 0.88 GiB went
  back (2-core x86-64 machine, jaxlib 0.10.2, 2026-11-26). Called after
  the first train step and after each evaluator. Takes milliseconds.

  Returns:
    True if malloc_trim ran; False where the C library has none (macOS,
    musl): nothing is done there.
  """
  try:
    trim = ctypes.CDLL(None).malloc_trim
  except (OSError, AttributeError):
    return False
  trim(0)
  return True


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
