"""Argument checks shared by every public function of ssljax.

One set of checks for the public boundary of `ssljax.losses`,
`ssljax.graphs`, `ssljax.theory` and `ssljax.pal`. Each check raises
`ValueError` with the argument's name and what was seen.

Shape checks read only static shapes and always run, also under `jax.jit`.
Value checks (finite, > 0, ...) run only on concrete arrays: inside jit,
grad or vmap an argument is a tracer and its value checks are skipped
(`is_concrete`). A value check reduces on the device and brings one scalar
back to the host; it never copies the array itself.

`float32_matmuls` is the one decorator every public loss wears: it fixes
the precision of the loss's matrix products (see its docstring).

JAX is imported inside the checks that need it, so NumPy-only modules
(`ssljax.pal`'s oracles and bookkeeping) use this module without loading JAX.
"""

from __future__ import annotations

import functools
import math
import operator
import sys

import numpy as np

__all__ = [
    "is_concrete", "as_float", "compute_dtype", "as_int", "as_positive_int",
    "check_positive_int", "check_finite", "check_matrix", "check_embeddings",
    "check_nonempty_matrix", "check_same_shape", "check_two_views",
    "check_nonnegative", "check_positive", "unit_rows", "float_pair",
    "float32_matmuls",
]


def is_concrete(x) -> bool:
  """True when `x` holds actual values (it is not a tracer inside jit/grad).

  Args:
    x: anything; an array, a scalar or a `BCOO` (then both its `data` and
      `indices` must be concrete).

  Returns:
    bool. Never raises.
  """
  if "jax" not in sys.modules:  # no JAX loaded: nothing can be a tracer
    return True
  import jax  # pylint: disable=g-import-not-at-top
  from jax.experimental import sparse as jsparse  # pylint: disable=g-import-not-at-top
  if isinstance(x, jsparse.BCOO):
    return is_concrete(x.data) and is_concrete(x.indices)
  return not isinstance(x, jax.core.Tracer)


def as_float(x) -> jax.Array:
  """`jnp.asarray(x)`; integer and bool inputs become the default float, and
  floats narrower than 32 bits (bfloat16, float16) become float32.

  The losses read their inputs through this function, so under mixed
  precision (a bfloat16 network) their sums, normalisations, softmax and
  log-sum-exp run in float32 (tests/test_losses_bf16.py).

  Args:
    x: array-like of any shape and dtype.

  Returns:
    jax.Array of x's shape: x's dtype if a float of 32 or 64 bits, float32
      for bfloat16 and float16, else the default float dtype (float32, or
      float64 with `jax_enable_x64`).
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(jnp.result_type(float))
  elif x.dtype.itemsize < 4:
    x = x.astype(jnp.float32)
  return x


def compute_dtype(dtype):
  """float64 for float64, else float32: the dtype a loss computes in.

  Never half precision: bfloat16 and float16 inputs are upcast (as in
  `as_float`), float32 stays float32 and float64 stays float64.

  Args:
    dtype: a dtype (e.g. an input array's ``.dtype``).

  Returns:
    `jnp.float64` if dtype is float64, else `jnp.float32`.
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return jnp.float64 if dtype == jnp.float64 else jnp.float32


def as_int(value, name: str, what: str) -> int:
  """`int(value)` when value is an integral number (3 or 3.0), else ValueError.

  Args:
    value: the argument (Python or NumPy number).
    name: argument name used in the message.
    what: the expectation, completing "{name} must be {what}".

  Returns:
    int.

  Raises:
    ValueError: for a non-number, a non-integral number, inf or NaN (instead
      of the TypeError/OverflowError of `int(None)` or `int(inf)`).
  """
  try:
    as_int_ = int(value)
    ok = as_int_ == value
  except (TypeError, ValueError, OverflowError):
    ok = False
  if not ok:
    raise ValueError(f"{name} must be {what}, got {value!r}")
  return as_int_


def as_positive_int(value, name: str) -> int:
  """`as_int` for an integral number >= 1 (3 and 3.0 yes, 0 and 2.5 no).

  Raises:
    ValueError: "{name} must be a positive integer, got {value!r}".
  """
  value_int = as_int(value, name, "a positive integer")
  if value_int < 1:
    raise ValueError(f"{name} must be a positive integer, got {value!r}")
  return value_int


def check_positive_int(value, name: str) -> int:
  """An index-like int >= 1 (`operator.index`: 3 yes, 3.0 and True no).

  Args:
    value: the argument.
    name: argument name used in the message.

  Returns:
    int(value).

  Raises:
    ValueError: if value is a bool, not index-like, or < 1.
  """
  if isinstance(value, bool):
    raise ValueError(f"{name} must be an int >= 1, got {value!r}")
  try:
    value_int = operator.index(value)
  except TypeError:
    raise ValueError(f"{name} must be an int >= 1, got {value!r}") from None
  if value_int < 1:
    raise ValueError(f"{name} must be an int >= 1, got {value_int}")
  return value_int


def check_finite(x, name: str) -> None:
  """Raises ValueError if a concrete `x` holds a NaN or an inf.

  Skipped for tracers. For a `BCOO` only the stored values (`x.data`) are
  checked. The test is one reduction on x's device; only the count of bad
  values comes back to the host.

  Args:
    x: array (any shape, any dtype) or `BCOO`.
    name: argument name used in the message.

  Raises:
    ValueError: "{name} must be finite, got {n} non-finite value(s) in an
      {array|BCOO matrix} of shape {shape}".
  """
  if not is_concrete(x):
    return
  import jax  # pylint: disable=g-import-not-at-top
  from jax.experimental import sparse as jsparse  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  shape = tuple(np.shape(x))
  is_bcoo = isinstance(x, jsparse.BCOO)
  values = x.data if is_bcoo else x
  if isinstance(values, jax.Array):
    if not jnp.issubdtype(values.dtype, jnp.inexact):
      return  # ints and bools are always finite
    # Evaluated now even when called while tracing an outer function.
    with jax.ensure_compile_time_eval():
      bad = int(jnp.sum(~jnp.isfinite(values)))
  else:
    values = np.asarray(values)
    bad = int(np.size(values) - np.count_nonzero(np.isfinite(values)))
  if bad:
    kind = "BCOO matrix" if is_bcoo else "array"
    raise ValueError(
        f"{name} must be finite, got {bad} non-finite value(s) in an {kind}"
        f" of shape {shape}")


def check_matrix(z, name: str, *, min_rows: int = 1, why: str = "") -> None:
  """z must be rank 2, (N, K) with N >= min_rows and K >= 1, and finite.

  Args:
    z: array with `.ndim` and `.shape` (any dtype).
    name: argument name used in the messages.
    min_rows: smallest allowed N.
    why: completes the message for too few rows (e.g. "for the ddof=1
      covariance").

  Raises:
    ValueError: on a wrong rank, too few rows, no columns, or (concrete z
      only) a NaN/inf.
  """
  if z.ndim != 2:
    raise ValueError(f"{name} must be a rank-2 (N, K) array, got shape {z.shape}")
  if z.shape[0] < min_rows:
    reason = f" {why}" if why else ""
    raise ValueError(
        f"{name} must have N >= {min_rows} rows{reason}, got shape {z.shape}")
  if z.shape[1] < 1:
    raise ValueError(f"{name} must have K >= 1 columns, got shape {z.shape}")
  check_finite(z, name)


def check_nonempty_matrix(x, name: str, what: str) -> None:
  """x must be rank 2 with no empty axis, and finite.

  Args:
    x: array with `.ndim` and `.shape`.
    name: argument name used in the messages.
    what: the expected shape in words, e.g. "(n, d)".

  Raises:
    ValueError: "{name} must be a non-empty rank-2 {what} array, got shape
      {shape}", or (concrete x only) on a NaN/inf.
  """
  if x.ndim != 2 or 0 in x.shape:
    raise ValueError(f"{name} must be a non-empty rank-2 {what} array, got"
                     f" shape {x.shape}")
  check_finite(x, name)


def check_embeddings(z, name: str) -> None:
  """`check_matrix` for embeddings (N, K) with N >= 2 (ddof=1 covariance).

  Raises:
    ValueError: as `check_matrix` with min_rows = 2.
  """
  check_matrix(z, name, min_rows=2, why="for the ddof=1 covariance")


def check_same_shape(a, b, name_a: str, name_b: str) -> None:
  """a and b must have the same (N, K) shape.

  Raises:
    ValueError: naming both arguments and both shapes.
  """
  if a.shape != b.shape:
    raise ValueError(
        f"{name_a} and {name_b} must have the same (N, K) shape, got {a.shape}"
        f" and {b.shape}")


def check_nonnegative(value, name: str) -> None:
  """A concrete scalar must be >= 0 (tracers skipped; NaN fails).

  Raises:
    ValueError: "{name} must be >= 0, got {value!r}".
  """
  if is_concrete(value) and not float(value) >= 0:
    raise ValueError(f"{name} must be >= 0, got {value!r}")


def check_positive(value, name: str) -> None:
  """A concrete scalar hyper-parameter must be finite and > 0.

  Tracers are skipped.

  Raises:
    ValueError: "{name} must be a finite number > 0, got {value!r}".
  """
  if is_concrete(value):
    v = float(value)
    if not (math.isfinite(v) and v > 0):
      raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def unit_rows(z, *, floor: float = 1e-12):
  """Rows scaled to unit Euclidean norm: z_i / max(‖z_i‖, floor).

  The max is taken inside the square root (on ‖z_i‖² and floor²), so the
  gradient stays finite at a zero row. A NumPy input is computed in NumPy
  (same dtype back); anything else in jax.numpy. jit-safe.

  Args:
    z: (N, K) float array.
    floor: smallest norm divided by (1e-12 is `torch.nn.functional.normalize`'s
      eps, used by the official SimCLR and W-MSE code).

  Returns:
    (N, K) array of z's dtype and kind (NumPy or jax).
  """
  if isinstance(z, np.ndarray):
    xp = np
  else:
    import jax.numpy as xp  # pylint: disable=g-import-not-at-top
  sq_norms_Nx1 = xp.sum(z**2, axis=1, keepdims=True)
  return z / xp.sqrt(xp.maximum(sq_norms_Nx1, floor**2))


def check_two_views(z1, z2) -> tuple[jax.Array, jax.Array]:
  """z1, z2 as float arrays, checked as two (N, K) views of one batch.

  Args:
    z1, z2: (N, K) arrays (ints and bools become the default float), N >= 2
      (the losses use a ddof=1 covariance).

  Returns:
    (z1, z2) as float jax arrays.

  Raises:
    ValueError: if z1 is not rank 2, the shapes differ, N < 2, K < 1, or a
      concrete view holds a NaN/inf.
  """
  z1_NxK, z2_NxK = as_float(z1), as_float(z2)
  if z1_NxK.ndim != 2:
    raise ValueError(f"z1 must be a rank-2 (N, K) array, got shape {z1_NxK.shape}")
  check_same_shape(z1_NxK, z2_NxK, "z1", "z2")
  for z, name in ((z1_NxK, "z1"), (z2_NxK, "z2")):
    check_embeddings(z, name)
  return z1_NxK, z2_NxK


def float_pair(a, b, name_a: str, name_b: str):
  """Two (N, K) float arrays of one shape, cast to their common dtype.

  Raises:
    ValueError: either is not a 2-D float-castable array, or their shapes
      differ (the message names both arguments).
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  a_NxK, b_NxK = as_float(a), as_float(b)
  check_matrix(a_NxK, name_a)
  check_same_shape(a_NxK, b_NxK, name_a, name_b)
  check_matrix(b_NxK, name_b)
  dtype = jnp.result_type(a_NxK, b_NxK)
  return a_NxK.astype(dtype), b_NxK.astype(dtype)


def float32_matmuls(fn):
  """Decorator: `fn`'s matrix products run at full float32 precision, unless
  the user has chosen a default matmul precision.

  JAX's default precision for float32 products is the backend's fastest:
  TF32 (10-bit mantissa) on NVIDIA GPUs since Ampere, bfloat16 passes on
  TPUs, exact float32 only on CPU. When
  `jax.config.jax_default_matmul_precision` is None (JAX's default), the
  wrapper calls `fn` inside
  `jax.default_matmul_precision("highest")`, so every `@`, `jnp.matmul`,
  `jnp.dot`, `jnp.einsum` and `lax.dot_general` without an explicit
  `precision=` traced in it gets `Precision.HIGHEST`. When the user has set
  the option (`jax.config.update("jax_default_matmul_precision",
  "tensorfloat32")` or a `jax.default_matmul_precision(...)` block around
  the call), `fn` runs unchanged and their choice holds.

  The precision is fixed when JAX traces the products: it is the
  `precision` parameter of each `dot_general` in the jaxpr
  (`jax.make_jaxpr`), so it also holds under an outer `jax.jit`, `grad`,
  `vmap` or `shard_map` (the backward products copy it). Nothing changes on
  CPU, where float32 products are exact float32 anyway, nor for float64.

  Args:
    fn: a function; any arguments, any return value.

  Returns:
    The wrapped function, with fn's name, docstring and signature.
  """
  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    import jax  # pylint: disable=g-import-not-at-top
    if jax.config.jax_default_matmul_precision is not None:
      return fn(*args, **kwargs)
    with jax.default_matmul_precision("highest"):
      return fn(*args, **kwargs)
  return wrapper
