"""Checkpoints that survive damage: checksums, and resume from the newest good one.

Orbax writes each step into a temporary directory and renames it when the
write is complete, so a kill never leaves a half-written step. It does not
protect against what happens to a step afterwards: a disk that fills, a copy
cut short, a flipped bit. This module adds two things around an
``orbax.checkpoint.CheckpointManager``:

* :func:`seal` writes, once a step's write has finished, a manifest
  (``ssljax_checksums.json`` in the step directory) with the size and SHA-256
  of every file of the step;
* :func:`restore_latest` tries the steps newest first. A step whose files do
  not match its manifest, or that orbax cannot restore, is reported in one
  line, and the newest step that restores is used. The damaged newer steps are
  then moved aside to ``<step>.corrupt`` (never deleted); if no step
  restores, :class:`CheckpointRestoreError` lists every step tried and why,
  and nothing on disk is changed.

Steps written before manifests existed (or whose manifest a kill prevented)
are restored without the checksum comparison; orbax's own reads still catch
truncated and missing files in them.
"""

import ast
from collections.abc import Callable
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
from typing import Any

from etils import epath
import jax
import orbax.checkpoint as ocp

__all__ = ["MANIFEST", "CheckpointRestoreError", "CheckpointSaveError", "seal", "verify",
           "restore_latest", "saved_fields", "layout_problem", "shape_problem"]

MANIFEST = "ssljax_checksums.json"
_CHUNK = 1 << 20  # bytes read at a time while hashing


class CheckpointRestoreError(RuntimeError):
  """No checkpoint step could be restored; the message lists each step tried
  and why it failed. Nothing on disk was changed."""


class CheckpointSaveError(RuntimeError):
  """A checkpoint could not be written (disk full, directory unwritable);
  the message names the directory, the cause and the newest intact step,
  which stays restorable (orbax renames a step into place only once it is
  complete, and `restore_latest` checks the manifests)."""


def _step_dir(manager: ocp.CheckpointManager, step: int) -> str:
  return os.path.join(os.fspath(manager.directory), str(step))


def _files(step_dir: str) -> list[str]:
  """Paths of the regular files under ``step_dir``, relative, sorted."""
  out = []
  for root, _, names in os.walk(step_dir):
    for name in names:
      path = os.path.relpath(os.path.join(root, name), step_dir)
      if path != MANIFEST:
        out.append(path)
  return sorted(out)


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    while chunk := f.read(_CHUNK):
      digest.update(chunk)
  return digest.hexdigest()


def seal(manager: ocp.CheckpointManager) -> list[int]:
  """Writes the checksum manifest of every finished step that lacks one.

  Waits for pending asynchronous saves first, so only complete steps are
  sealed. Only process 0 writes (the steps are shared by all processes);
  other processes return at once. The manifest is written through a
  temporary file and a rename: a kill leaves no manifest or a whole one.

  Args:
    manager: the run's checkpoint manager (a local directory).

  Returns:
    the steps sealed by this call (empty on processes other than 0).
  """
  manager.wait_until_finished()
  if jax.process_index() != 0:
    return []
  sealed = []
  for step in manager.all_steps():
    step_dir = _step_dir(manager, step)
    path = os.path.join(step_dir, MANIFEST)
    if not os.path.isdir(step_dir) or os.path.exists(path):
      continue
    files = {p: {"bytes": os.path.getsize(os.path.join(step_dir, p)),
                 "sha256": _sha256(os.path.join(step_dir, p))}
             for p in _files(step_dir)}
    with open(path + ".tmp", "w") as f:
      json.dump({"step": step, "files": files}, f, indent=1)
    os.replace(path + ".tmp", path)
    sealed.append(step)
  return sealed


def verify(step_dir: str) -> str | None:
  """Compares a step directory with its manifest.

  Args:
    step_dir: path of one step (``<workdir>/checkpoints/<step>``).

  Returns:
    None when the step matches its manifest, or has no manifest but holds
    files; otherwise a one-line reason: the directory is missing or empty,
    the manifest is unreadable, a file is missing, has another size, or has
    another SHA-256 than when it was written.
  """
  if not os.path.isdir(step_dir):
    return "step directory is missing"
  present = _files(step_dir)
  manifest_path = os.path.join(step_dir, MANIFEST)
  if not present:
    return "step directory is empty"
  if not os.path.exists(manifest_path):
    return None  # written before manifests, or killed before sealing
  try:
    with open(manifest_path) as f:
      expected = json.load(f)["files"]
  except (OSError, ValueError, KeyError, TypeError) as e:
    return f"checksum manifest unreadable ({type(e).__name__}: {e})"
  for rel, meta in expected.items():
    path = os.path.join(step_dir, rel)
    if not os.path.isfile(path):
      return f"file {rel} is missing"
    size = os.path.getsize(path)
    if size != meta["bytes"]:
      return f"file {rel} has {size} bytes, {meta['bytes']} when written"
    if _sha256(path) != meta["sha256"]:
      return f"file {rel} changed since it was written (SHA-256 differs)"
  return None


def saved_fields(step_dir: str) -> set | None:
  """Top-level field names of the state saved in ``step_dir`` (read from
  orbax's ``default/_METADATA``), or None when it cannot be read."""
  try:
    with open(os.path.join(step_dir, "default", "_METADATA")) as f:
      keys = json.load(f)["tree_metadata"]
    return {ast.literal_eval(k)[0] for k in keys}
  except (OSError, ValueError, KeyError, TypeError, SyntaxError, IndexError):
    return None


def layout_problem(step_dir: str, target: Any) -> str | None:
  """Why a saved step cannot fit ``target``'s layout (its top-level
  fields), in one line; None when they agree or cannot be read. A
  checkpoint of ssljax before the method interface (fields "batch_stats",
  "teacher", "memory" beside "params") is refused here: its state has no
  "method_state" and cannot be mapped onto one safely."""
  saved = saved_fields(step_dir)
  if saved is None or not dataclasses.is_dataclass(target):
    return None
  expected = {f.name for f in dataclasses.fields(target)
              if f.metadata.get("pytree_node", True)}
  if saved == expected:
    return None
  old = {"batch_stats", "teacher", "memory"} <= saved
  return ("saved with the state layout {" + ", ".join(sorted(saved)) + "}"
          + (" of ssljax before the method interface" if old else "")
          + "; this version saves {" + ", ".join(sorted(expected)) + "} and "
          "cannot restore it: train in a new --workdir")


def shape_problem(step_dir: str, target: Any) -> str | None:
  """Why a saved step cannot fit ``target``'s array shapes, in one line:
  the first array (by orbax's dotted name) whose saved shape differs from
  the target's, and how many others differ; None when every array found in
  both agrees, or the step's metadata cannot be read (the restore itself
  then decides). Typed PRNG keys are not compared (orbax stores their raw
  data). This is what a config change to the model (width, representation,
  head) looks like, and it is caught before orbax is asked to restore."""
  try:
    with _quiet_orbax():
      saved = ocp.StandardCheckpointHandler().metadata(
          epath.Path(os.path.abspath(os.path.join(step_dir, "default"))))
    saved = {m.name: tuple(m.shape)
             for m in jax.tree_util.tree_leaves(saved)
             if getattr(m, "shape", None) is not None
             and getattr(m, "name", None)}
  except Exception:  # pylint: disable=broad-except
    return None
  differ = []
  for path, leaf in jax.tree_util.tree_flatten_with_path(target)[0]:
    dtype = getattr(leaf, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype,
                                                   jax.dtypes.prng_key):
      continue
    name = jax.tree_util.keystr(path, simple=True, separator=".")
    shape = tuple(getattr(leaf, "shape", ()))
    if name in saved and saved[name] != shape:
      differ.append((name, saved[name], shape))
  if not differ:
    return None
  name, was, now = differ[0]
  n = len(differ) - 1
  more = f" (and {n} other array{'s' if n > 1 else ''})" if n else ""
  return (f"{name} was saved with shape {was}, this config makes {now}{more}: "
          "the config changed the model since this step was written")


def _one_line(exc: BaseException, limit: int = 240) -> str:
  """``Type: first line of the message``, at most ``limit`` characters."""
  text = str(exc).strip().splitlines()
  line = f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
  return line if len(line) <= limit else line[:limit - 1] + "…"


def _aside_path(step_dir: str) -> str:
  """``<step>.corrupt``, or ``<step>.corrupt.N`` if that already exists."""
  path, n = f"{step_dir}.corrupt", 1
  while os.path.exists(path):
    path, n = f"{step_dir}.corrupt.{n}", n + 1
  return path


@contextlib.contextmanager
def _quiet_orbax():
  """Silences orbax's absl warnings (e.g. a missing metadata file) while
  steps are tried: each damaged step gets one line from us instead."""
  logger = logging.getLogger("absl")
  level = logger.level
  logger.setLevel(max(level, logging.ERROR))
  try:
    yield
  finally:
    logger.setLevel(level)


def _sync(name: str):
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)


def restore_latest(manager: ocp.CheckpointManager, target: Any, *,
                   warn: Callable[[str], None] = print
                   ) -> tuple[Any, int, list[tuple[int, str]]]:
  """Restores the newest step that is intact, moving damaged newer ones aside.

  Args:
    manager: the run's checkpoint manager.
    target: a pytree like the saved state (arrays or ShapeDtypeStructs with
      shardings), passed to ``orbax.checkpoint.args.StandardRestore``.
    warn: called with one line per damaged step (default ``print``; only
      process 0 calls it).

  Returns:
    ``(state, step, damaged)``: the restored state and its step, or
    ``(target, 0, [])`` when there is no checkpoint; ``damaged`` lists
    ``(step, reason)`` for each newer step that failed and was moved to
    ``<step>.corrupt``.

  Raises:
    CheckpointRestoreError: steps exist but none restores (for instance all
      are damaged, or the config changed the model so no saved state fits);
      the message names every step with its reason, and no file is moved.
  """
  failures = []
  for step in sorted(manager.all_steps(), reverse=True):
    reason = (layout_problem(_step_dir(manager, step), target)
              or verify(_step_dir(manager, step))
              or shape_problem(_step_dir(manager, step), target))
    if reason is None:
      try:
        with _quiet_orbax():
          state = manager.restore(step, args=ocp.args.StandardRestore(target))
      except Exception as e:  # pylint: disable=broad-except
        reason = _one_line(e)
    if reason is not None:
      failures.append((step, reason))
      continue
    if failures:
      if jax.process_index() == 0:
        for bad, why in failures:
          aside = _aside_path(_step_dir(manager, bad))
          os.rename(_step_dir(manager, bad), aside)
          warn(f"checkpoint step {bad} is damaged ({why}); moved to {aside}; "
               f"resuming from step {step}")
      _sync("ssljax_checkpoints_moved_aside")
      manager.reload()
    return state, step, failures
  if failures:
    listing = "; ".join(f"step {s}: {why}" for s, why in failures)
    raise CheckpointRestoreError(
        f"no checkpoint in {manager.directory} could be restored ({listing}); "
        "nothing was moved or deleted: move the checkpoints directory away to "
        "start from step 0")
  return target, 0, []
