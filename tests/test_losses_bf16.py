"""Mixed precision: every loss computes in float32 on bfloat16 embeddings.

A bfloat16 network (``model.dtype = "bfloat16"``) hands the losses bfloat16
embeddings; their sums, covariances, normalisations, softmax and
log-sum-exp must not run in bfloat16 (8-bit mantissa: a VICReg graph loss
was 3 % off, W-MSE's Cholesky did not run at all). The losses read their
inputs through `ssljax.checks.as_float`, which makes bfloat16 float32.

Per loss (the cases of benchmarks/bf16_losses.py, which prints the table):
* the loss of bfloat16 inputs is float32 and equals the float32 loss of
  the same (bf16-rounded) values to 1e-5 relative (the same float32
  computation; jit against eager);
* it is within 1e-2 relative of the float32 loss of the unrounded inputs:
  the inputs' rounding (2^-9 relative per entry) is the only error left
  (measured at most 3.3e-3, NNCLR, whose nearest neighbour may change).
"""

import os
import sys

import jax.numpy as jnp
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from benchmarks import bf16_losses  # noqa: E402

from ssljax import checks  # noqa: E402


# All cases: ~40 s (a compilation each), so -m slow; W-MSE (which did not run at all in bf16) in the default suite.
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=() if n == "wmse_two_view"
                 else pytest.mark.slow) for n in sorted(bf16_losses.CASES)])
def test_loss_of_bf16_inputs_is_computed_in_float32(name):
  dtype, same, unrounded = bf16_losses.compare(bf16_losses.CASES[name])
  assert dtype == "float32"
  assert same <= 1e-5, same
  assert unrounded <= 1e-2, unrounded


def test_as_float_widens_narrow_floats_only():
  assert checks.as_float(jnp.ones(2, jnp.bfloat16)).dtype == jnp.float32
  assert checks.as_float(jnp.ones(2, jnp.float16)).dtype == jnp.float32
  assert checks.as_float(jnp.ones(2, jnp.float32)).dtype == jnp.float32
  assert checks.as_float(jnp.ones(2, jnp.int32)).dtype == jnp.float32
