"""ODE solving shared by the theory modules (diffrax, Tsit5, adaptive step).

`solve_ode` integrates dy/dt = rhs(t, y, args) and returns y at the requested
times; `check_times` validates those times. Used by `ssljax.theory.stiefel`
(Esser, Mukherjee & Ghoshdastidar 2023, arXiv 2309.02011, eq. 9) and
`ssljax.theory.frossl_dynamics` (Skean et al. 2023, arXiv 2310.02903).
"""

from __future__ import annotations

import functools

import diffrax
import jax
import numpy as np

from ssljax import checks

__all__ = ["check_times", "solve_ode"]


def check_times(ts) -> jax.Array:
  """ts as a float (T,) array of strictly increasing, finite times, T >= 2.

  Args:
    ts: (T,) array-like of times (any real dtype; ints become floats).

  Returns:
    (T,) float jax.Array.

  Raises:
    ValueError: if ts is not 1-D with T >= 2, has a NaN/inf, or (concrete
      ts only) is not strictly increasing.
  """
  ts = checks.as_float(ts)
  if ts.ndim != 1 or ts.shape[0] < 2:
    raise ValueError(f"ts must be a 1-D array of >= 2 times, got shape"
                     f" {ts.shape}")
  checks.check_finite(ts, "ts")
  if checks.is_concrete(ts) and not np.all(np.diff(np.asarray(ts)) > 0):
    raise ValueError(f"ts must be strictly increasing, got {np.asarray(ts)}")
  return ts


@functools.partial(jax.jit,
                   static_argnames=("rhs", "rtol", "atol", "max_steps"))
def solve_ode(rhs, y0, ts, args, rtol: float, atol: float, max_steps: int):
  """diffrax Tsit5 + PID step control from ts[0], saved at every ts.

  `rhs(t, y, args)` should be a module-level function: it is a static
  argument, so the compiled solver is cached per (rhs, shapes, dtypes,
  tolerances) across calls.

  Args:
    rhs: the vector field, rhs(t, y, args) -> dy/dt (a pytree like y).
    y0: the state at ts[0], a pytree of float arrays.
    ts: (T,) strictly increasing times (see `check_times`).
    args: pytree passed to rhs.
    rtol, atol: tolerances of the PID step-size controller.
    max_steps: maximum number of solver steps.

  Returns:
    y at every ts: the pytree of y0 with a leading (T,) axis.

  Raises:
    RuntimeError: raised by diffrax (at run time) if max_steps is reached.
  """
  sol = diffrax.diffeqsolve(
      diffrax.ODETerm(rhs), diffrax.Tsit5(), t0=ts[0], t1=ts[-1], dt0=None,
      y0=y0, args=args, saveat=diffrax.SaveAt(ts=ts),
      stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
      max_steps=max_steps)
  return sol.ys
