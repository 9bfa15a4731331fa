"""Dynamics of the linear FroSSL variant: loss, singular-value ODE, closed form.

Skean et al. 2023: the linear variant of FroSSL (eq. 10/11), Z_v = X_v W_vᵀ,
with aligned initialisation, whose singular values obey a coupled ODE
(`frossl_linear_dynamics`, closed form `frossl_symmetric_singular_values`
for identical views). The paper's own eqs. (32)–(34) are wrong; the
printed closed form lives in `experiments/frossl_dynamics.py`, which shows
the discrepancy.

Rows are samples: data X_v is (n, m), embeddings Z_v = X_v W_vᵀ are (n, d).
ODEs are integrated with diffrax (`ssljax.theory.ode`); use float64 for
tight tolerances.

References:
  Skean, Dhakal, Jacobs & Sanchez Giraldo 2023, "FroSSL: Frobenius Norm
  Minimization for Self-Supervised Learning", arXiv 2310.02903, eqs.
  (10)–(13), App. D–E.4 (eqs. 30–34), corrected: the flow is dW/dt = −∇L
  (eqs. (12)/(13) print +∇L), the cross term of eq. (30) has S2 (not S1),
  and eq. (32) (hence its solutions (33)/(34)) is wrong; the corrected ODE
  is `frossl_linear_dynamics`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ssljax import checks
from ssljax.theory import ode

__all__ = [
    "frossl_linear_loss",
    "frossl_linear_dynamics",
    "frossl_symmetric_singular_values",
    "broadcast_positive",
]


def _check_positive(x, name: str) -> jax.Array:
  x = checks.as_float(x)
  if x.ndim > 1:
    raise ValueError(f"{name} must be a scalar or a 1-D (d,) array, got shape"
                     f" {x.shape}")
  checks.check_finite(x, name)
  if checks.is_concrete(x) and not np.all(np.asarray(x) > 0):
    raise ValueError(f"{name} must be > 0, got {np.asarray(x)}")
  return x


# ---------------------------------------------------------------------------
# Skean et al. 2023: linear FroSSL variant (eq. 10/11) and its singular-value
# ODE.
# ---------------------------------------------------------------------------


def frossl_linear_loss(w1, w2, x1, x2) -> jax.Array:
  """Linear FroSSL variant (Skean et al. 2023 eq. 10/11), Z_v = X_v W_vᵀ.

      L = ‖Z1ᵀZ1 − I‖² + ‖Z2ᵀZ2 − I‖² + ‖Z1 − Z2‖²
        = ‖W1Γ1W1ᵀ − I‖² + ‖W2Γ2W2ᵀ − I‖² + ‖X1W1ᵀ − X2W2ᵀ‖²,  Γ_v = X_vᵀX_v.

  Its gradient is ∂L/∂W1 = −2(W1Γ1 + W2X2ᵀX1 − 2W1Γ1W1ᵀW1Γ1) (and
  symmetrically for W2); full-batch GD with step lr follows dW/dt = −∂L/∂W
  at t = lr·step (eqs. (12)/(13) of the paper print +∇L).

  Args:
    w1: (d, m) view-1 weights.
    w2: (d, m) view-2 weights.
    x1: (n, m) view-1 inputs (rows are samples).
    x2: (n, m) view-2 inputs.

  Returns:
    0-d array.

  Raises:
    ValueError: if shapes disagree or an input is not a finite rank-2 array.

  References:
    Skean et al. 2023, arXiv 2310.02903, eqs. (10)–(13), App. E.3, with the flow
    dW/dt = −∂L/∂W and ∂L/∂W1 = −2(W1Γ1 + W2X2ᵀX1 − 2W1Γ1W1ᵀW1Γ1) (checked by
    finite differences; eq. (24) needs the sign +4(WΓWᵀ − I)WΓ and eq. (27) Γ2
    for Γ1).
  """
  w1 = checks.as_float(w1)
  w2, x1, x2 = (jnp.asarray(v, w1.dtype) for v in (w2, x1, x2))
  for v, name, what in ((w1, "w1", "(d, m)"), (w2, "w2", "(d, m)"),
                        (x1, "x1", "(n, m)"), (x2, "x2", "(n, m)")):
    checks.check_nonempty_matrix(v, name, what)
  if w2.shape != w1.shape:
    raise ValueError(f"w2 must have the shape of w1 {w1.shape}, got {w2.shape}")
  if x1.shape[1] != w1.shape[1] or x2.shape != x1.shape:
    raise ValueError(f"x1 and x2 must both be (n, m) with m = {w1.shape[1]},"
                     f" got {x1.shape} and {x2.shape}")
  return _frossl_loss(w1, w2, x1, x2)


def _frossl_loss(w1_dxm, w2_dxm, x1_nxm, x2_nxm):
  z1_nxd, z2_nxd = x1_nxm @ w1_dxm.T, x2_nxm @ w2_dxm.T
  eye = jnp.eye(w1_dxm.shape[0], dtype=w1_dxm.dtype)
  return (jnp.sum((z1_nxd.T @ z1_nxd - eye) ** 2)
          + jnp.sum((z2_nxd.T @ z2_nxd - eye) ** 2)
          + jnp.sum((z1_nxd - z2_nxd) ** 2))


def broadcast_positive(names_values):
  """Checks named parameters as > 0 and broadcasts them to one shape.

  Args:
    names_values: [(name, value), ...], each value a scalar or (d,) array.

  Returns:
    list of float arrays of one broadcast shape and the promoted dtype.

  Raises:
    ValueError: naming the first value that is not a finite scalar or 1-D
      array > 0 (tracers skip the value checks), or when the shapes do not
      broadcast.
  """
  arrays = [_check_positive(v, n) for n, v in names_values]
  dtype = jnp.result_type(*arrays)
  try:
    shape = jnp.broadcast_shapes(*(x.shape for x in arrays))
  except ValueError:
    shapes = ", ".join(f"{n} {x.shape}" for (n, _), x in zip(names_values,
                                                              arrays))
    raise ValueError(f"shapes must broadcast, got {shapes}") from None
  return [jnp.broadcast_to(x.astype(dtype), shape) for x in arrays]


def frossl_linear_dynamics(ts, lam, gam, s1_0, s2_0, *, cross=None,
                           rtol: float = 1e-10, atol: float = 1e-12,
                           max_steps: int = 100_000):
  """Singular values of the linear FroSSL variant under gradient flow.

  Aligned setting: X_v = P D_v^{1/2} Vᵀ with shared P, V (so X2ᵀX1 = V√(D1D2)Vᵀ)
  and W_v(0) = U S_v(0) V̂ with the SAME U. Then W_v(t) = U S_v(t) V̂ and, per
  direction j, with λ = (D1)_jj, γ = (D2)_jj and c = √(λγ),

      s1' = 2λ s1 + 2c s2 − 4λ² s1³
      s2' = 2γ s2 + 2c s1 − 4γ² s2³.

  Both converge to s1² = 1/λ, s2² = 1/γ (Z1 = Z2, Z_vᵀZ_v = I, L = 0). The
  eigenvalues of Z_vᵀZ_v are λ s1², γ s2². `cross` overrides c, e.g. with
  v_jᵀ sym(X2ᵀX1) v_j when the views are only approximately aligned.
  The paper's eq. (32) is different and wrong (sign and factor of the cross
  term, s1 for s2).

  Args:
    ts: (T,) strictly increasing times t = lr·step, T >= 2; s_v_0 are the
      values at ts[0].
    lam: scalar or (d,) eigenvalues λ_j > 0 of Γ1 = X1ᵀX1 (top d).
    gam: scalar or (d,) eigenvalues γ_j > 0 of Γ2.
    s1_0: scalar or (d,) initial singular values of W1, > 0.
    s2_0: scalar or (d,) initial singular values of W2, > 0.
    cross: optional scalar or (d,) coupling c (default √(λγ)).
    rtol: relative tolerance of the adaptive step.
    atol: absolute tolerance of the adaptive step.
    max_steps: maximum number of solver steps.

  Returns:
    (s1, s2): two (T, d) arrays (d = broadcast size of the inputs).

  Raises:
    ValueError: if a parameter is not > 0, shapes do not broadcast, or ts
      is not strictly increasing.

  References:
    Skean et al. 2023, arXiv 2310.02903, App. D.1/E.4 eqs. (30)–(32), corrected
    (S2 in the cross term of eq. (30); eq. (32) has the wrong sign and factor in
    the cross term and s1 for s2). The ODE here matches gradient descent to
    1.6e-6 and converges to s1² = 1/λ, s2² = 1/γ.
  """
  lam, gam, s1_0, s2_0 = broadcast_positive(
      [("lam", lam), ("gam", gam), ("s1_0", s1_0), ("s2_0", s2_0)])
  if cross is None:
    cross = jnp.sqrt(lam * gam)
  else:
    cross = checks.as_float(cross)
    checks.check_finite(cross, "cross")
    cross = jnp.broadcast_to(cross, lam.shape).astype(lam.dtype)
  ts = ode.check_times(ts).astype(lam.dtype)
  lam, gam, cross, s1_0, s2_0 = (jnp.atleast_1d(v) for v in
                                 (lam, gam, cross, s1_0, s2_0))

  return ode.solve_ode(_frossl_rhs, (s1_0, s2_0), ts, (lam, gam, cross), rtol, atol,
                max_steps)


def _frossl_rhs(t, y, args):
  """Corrected FroSSL singular-value ODE (see `frossl_linear_dynamics`)."""
  del t
  (s1, s2), (lam, gam, cross) = y, args
  return (2 * lam * s1 + 2 * cross * s2 - 4 * lam**2 * s1**3,
          2 * gam * s2 + 2 * cross * s1 - 4 * gam**2 * s2**3)


def frossl_symmetric_singular_values(t, lam, s0) -> jax.Array:
  """Closed form of the FroSSL singular values for identical views.

  With X1 = X2 (λ = γ) and W1(0) = W2(0) the ODE of
  `frossl_linear_dynamics` reduces to s' = 4λs − 4λ²s³, solved by

      s(t)² = 1 / (λ + (1/s0² − λ) e^{−8λt}),

  which increases (or decreases) monotonically to 1/λ. Only t >= 0: for
  s0² > 1/λ the solution blows up at a finite negative time, and the formula
  gives NaN before it.

  Args:
    t: scalar or (T,) times t = lr·step >= 0.
    lam: scalar or (d,) eigenvalue(s) λ > 0.
    s0: scalar or (d,) initial singular value(s) s(0) > 0.

  Returns:
    s(t) with shape broadcast(t[..., None], lam, s0) for 1-D t; t.shape
      broadcast with lam and s0 for scalar t.

  Raises:
    ValueError: if lam or s0 is not > 0, or t is not finite, has rank > 1
      or (concrete) a value < 0.

  References:
    Skean et al. 2023, arXiv 2310.02903: replaces eqs. (33)/(34), which solve
    the wrong eq. (32). Symmetric case of the corrected ODE, s(t)² = 1/(λ +
    (1/s0² − λ)e^{−8λt}), matching gradient descent.
  """
  lam, s0 = broadcast_positive([("lam", lam), ("s0", s0)])
  t = checks.as_float(t).astype(lam.dtype)
  if t.ndim > 1:
    raise ValueError(f"t must be a scalar or 1-D (T,) array, got shape {t.shape}")
  checks.check_finite(t, "t")
  if checks.is_concrete(t) and np.any(np.asarray(t) < 0):
    raise ValueError(f"t must be >= 0, got min(t) = {float(np.min(t))}")
  if t.ndim == 1:
    t = t.reshape(t.shape + (1,) * lam.ndim)
  return 1.0 / jnp.sqrt(lam + (1.0 / s0**2 - lam) * jnp.exp(-8.0 * lam * t))
