"""Shared pieces of ``benchmarks/step_parity.py``'s per-method comparisons:
the checkout's commit, the after-K-steps tensor drift, the worst relative
difference of two arrays, ``--set`` overrides, and the fixed run shape
(Fashion-MNIST images, an epoch of a few steps so that the schedules and
freezes turn within a 20-step run)."""

from __future__ import annotations

import json
import subprocess

import numpy as np

STEPS_PER_EPOCH = 5
BATCH = 16


def commit(path: str) -> str:
  try:
    return subprocess.run(["git", "-C", path, "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True
                          ).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "unknown (not a git checkout)"


def drift(ours: dict, theirs: dict, start: dict, keys) -> dict:
  """The worst tensor after K steps: ‖ours − theirs‖₂ / ‖theirs − start‖₂,
  the disagreement over how far the official step moved that tensor (a
  tensor's own scale would make small, barely moved tensors look far
  apart: Adam turns the rounding noise of a near-zero gradient into ±lr
  steps). Also the largest |ours − theirs| over all tensors."""
  ratios = {}
  for k in keys:
    moved = np.linalg.norm(np.asarray(theirs[k], np.float64)
                           - np.asarray(start[k], np.float64))
    diff = np.linalg.norm(np.asarray(ours[k], np.float64)
                          - np.asarray(theirs[k], np.float64))
    ratios[k] = float(diff / moved) if moved > 0 else (
        0.0 if diff == 0 else float("inf"))
  name = max(ratios, key=ratios.get)
  largest = max(float(np.abs(np.asarray(ours[k], np.float64)
                             - np.asarray(theirs[k], np.float64)).max())
                for k in keys)
  return {"worst_over_update": ratios[name], "tensor": name,
          "largest_abs_difference": largest}


def worst(a, b) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  scale = max(np.abs(b).max(), 1e-30)
  return float(np.abs(a - b).max() / scale)


def override(config, assignments):
  """``--set key=value`` on ssljax's side only (values parsed as JSON,
  else kept as str)."""
  for item in assignments or ():
    path, _, text = item.partition("=")
    try:
      value = json.loads(text)
    except ValueError:
      value = text
    node = config
    *parents, leaf = path.split(".")
    for part in parents:
      node = node[part]
    node[leaf] = value
  return config
