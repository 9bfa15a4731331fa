"""What the step-parity tests share (tests/test_step_parity*.py): the peer
checkout from an environment variable, the marks that skip a test without
it (CI has none), the benchmark module, and the command's arguments."""

import argparse
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def peer(variable: str) -> str:
  """The official checkout's path from ``variable`` ("" when unset)."""
  return os.environ.get(variable, "")


def marks(variable: str, checkout: str, subfolder: str = "") -> list:
  """``pytestmark`` of a step-parity test: slow, and skipped unless
  ``variable`` names a folder (holding ``subfolder``, if given;
  ``checkout`` says what it should be)."""
  path = os.path.join(peer(variable), subfolder) if peer(variable) else ""
  return [pytest.mark.slow,
          pytest.mark.skipif(not os.path.isdir(path),
                             reason=f"set {variable} to {checkout}")]


def step_parity_module(*needed: str):
  """benchmarks/step_parity.py as a module; skips unless every package of
  ``needed`` imports."""
  for name in needed:
    pytest.importorskip(name)
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  import step_parity  # pylint: disable=import-outside-toplevel
  return step_parity


def args(method: str, variable: str, **kw) -> argparse.Namespace:
  """The command's arguments: float64, no local crops, no overrides, 10
  steps (2 epochs of 5: the first the warm-up), then ``kw``."""
  base = dict(method=method, peer=peer(variable), steps=10, local=0,
              set=None, float64=True, optimizer=None, apex=None, queue=False,
              encoder=None,
              mask_batches=0,
              out="unused")
  base.update(kw)
  return argparse.Namespace(**base)
