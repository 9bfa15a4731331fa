"""Learning dynamics of a 2-layer linear SSL model under orthonormality.

Esser, Mukherjee & Ghoshdastidar 2023: a 2-layer linear network
f(x) = W2 W1 x with orthonormality constraints W1ᵀW1 = I_d (W1: h × d) and
W2 W2ᵀ = I_z (W2: z × h), trained on the trace loss Tr(W A Wᵀ), W = W2 W1
(W1 lives on a Stiefel manifold; the paper's "Grassmannian" is a misnomer,
the loss is not invariant under W1 → W1Q). The projected gradient flow of
the weights closes on the output map W (eq. 9, whatever the hidden width h):
`stiefel_flow` integrates it, `stiefel_weight_flow` integrates the weights
themselves, `projected_gradient_descent` is the discrete training of eq. 11
and `stiefel_flow_euler` the discretised output dynamics of eq. 12.

Rows are samples: data x is (n, d). The paper writes the model on column
vectors, f(x) = W x; with rows the outputs are x @ Wᵀ.

ODEs are integrated with diffrax (`ssljax.theory.ode`) and returned at the
requested times; use float64 (`jax.experimental.enable_x64`) for tight
tolerances.

References:
  Esser, Mukherjee & Ghoshdastidar 2023, "Representation Learning Dynamics
  of Self-Supervised Models", arXiv 2309.02011, eqs. (7)–(12), Theorems 2–3.
  The forms here were derived from scratch and checked numerically (float64,
  finite differences, ODE vs gradient descent): model f(x) = W2W1x with
  W1ᵀW1 = I, W2W2ᵀ = I and loss Tr(WAWᵀ); the projected flows reduce, for
  any width h, to Ẇ = −2[WA(I − WᵀW) + (I − WWᵀ)WA].
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ssljax import checks
from ssljax.theory import ode

__all__ = [
    "stiefel_flow_velocity",
    "stiefel_flow",
    "stiefel_weight_flow",
    "stiefel_flow_euler",
    "projected_gradient_descent",
]

_RETRACTIONS = ("polar", "qr")


# ---------------------------------------------------------------------------
# Boundary checks (concrete values only; tracers pass through).
# ---------------------------------------------------------------------------


def _orth_tol(dtype) -> float:
  return 1e-8 if jnp.dtype(dtype) == jnp.float64 else 1e-4


def _check_symmetric(a, name: str) -> None:
  checks.check_nonempty_matrix(a, name, "(d, d)")
  if a.shape[0] != a.shape[1]:
    raise ValueError(f"{name} must be square (d, d), got shape {a.shape}")
  if checks.is_concrete(a):
    a_np = np.asarray(a)
    scale = max(1.0, float(np.max(np.abs(a_np))))
    if np.max(np.abs(a_np - a_np.T)) > 1e-6 * scale:
      raise ValueError(f"{name} must be symmetric, got max |a − aᵀ| ="
                       f" {np.max(np.abs(a_np - a_np.T)):.3g}")


def _check_orthonormal(m, name: str, rows: bool) -> None:
  """rows=True: m mᵀ = I (orthonormal rows); else mᵀ m = I (columns)."""
  if not checks.is_concrete(m):
    return
  m_np = np.asarray(m, np.float64)
  gram = m_np @ m_np.T if rows else m_np.T @ m_np
  err = float(np.max(np.abs(gram - np.eye(gram.shape[0]))))
  if err > _orth_tol(m.dtype):
    what = f"{name} {name}ᵀ" if rows else f"{name}ᵀ {name}"
    raise ValueError(f"{name} must have orthonormal {'rows' if rows else 'columns'}"
                     f" ({what} = I), got max deviation {err:.3g} for shape"
                     f" {m.shape}")


def _check_step_args(lr, steps) -> int:
  if not (isinstance(steps, (int, np.integer)) and not isinstance(steps, bool)
          and steps >= 0):
    raise ValueError(f"steps must be an int >= 0, got {steps!r}")
  if not np.isfinite(lr) or lr <= 0:
    raise ValueError(f"lr must be a finite float > 0, got {lr!r}")
  return int(steps)


# ---------------------------------------------------------------------------
# Esser et al. 2023: output flow (eq. 9), weight flow (Theorem 2), eq. 11 and
# eq. 12.
# ---------------------------------------------------------------------------


def _velocity(a_dxd, w_zxd):
  wa_zxd = w_zxd @ a_dxd
  return -2.0 * (wa_zxd - (wa_zxd @ w_zxd.T) @ w_zxd
                 + wa_zxd - (w_zxd @ w_zxd.T) @ wa_zxd)


def _check_a_w(a, w, w_name: str):
  a = checks.as_float(a)
  _check_symmetric(a, "a")
  w = jnp.asarray(w, a.dtype)
  checks.check_nonempty_matrix(w, w_name, "(z, d)")
  if w.shape[1] != a.shape[0]:
    raise ValueError(f"{w_name} must be (z, d) with d = {a.shape[0]} (from a),"
                     f" got shape {w.shape}")
  return a, w


def stiefel_flow_velocity(a, w) -> jax.Array:
  """Vector field of the output flow (eq. 9, in weight coordinates).

      Ẇ = −2 [W A (I − WᵀW) + (I − WWᵀ) W A].

  This is dW/dt for W = W2 W1 when W1 and W2 follow the projected gradient
  flows of Tr(W A Wᵀ) (`stiefel_weight_flow`); in the eigenbasis A = VΛVᵀ,
  Z = W V obeys eq. 9, Ż = −2[ZΛ(I − ZᵀZ) + (I − ZZᵀ)ZΛ]. For z = 1 it is
  eq. 10, ζ̇ = −2[(2 − ‖ζ‖²)Λζ − (ζᵀΛζ)ζ].

  Args:
    a: (d, d) symmetric data matrix.
    w: (z, d) output map W = W2 W1.

  Returns:
    (z, d) array Ẇ.

  Raises:
    ValueError: if a is not a finite symmetric (d, d) array or w is not
      (z, d).

  References:
    Esser, Mukherjee & Ghoshdastidar 2023 (arXiv 2309.02011), eqs. (9), (10),
    Theorem 2.
  """
  a, w = _check_a_w(a, w, "w")
  return _velocity(a, w)


def _check_w0_contraction(w0) -> None:
  if checks.is_concrete(w0):
    norm = float(np.linalg.norm(np.asarray(w0, np.float64), 2))
    if norm > 1.0 + _orth_tol(w0.dtype):
      raise ValueError(
          "w0 must be realisable as W2 W1 with orthonormal W1, W2, i.e. have"
          f" spectral norm <= 1, got {norm:.6g} for shape {w0.shape}")


def stiefel_flow(a, w0, ts, *, rtol: float = 1e-8, atol: float = 1e-10,
                 max_steps: int = 100_000) -> jax.Array:
  """Integrates the output dynamics of Esser et al. 2023 eq. 9 with diffrax.

  Diagonalises A = VΛVᵀ, integrates Z = W V under
  Ż = −2[ZΛ(I − ZᵀZ) + (I − ZZᵀ)ZΛ] from Z(ts[0]) = w0 V and returns
  W(t) = Z(t) Vᵀ. The cost per step is O(z² d), independent of the hidden
  width h. If w0 has orthonormal rows, W stays on the Stiefel manifold
  (WWᵀ = I); in general ‖W‖₂ <= 1 is preserved. Theorem 3: the rows of W
  converge to the span of the eigenvectors of the z most negative
  eigenvalues of A (when they are negative), WWᵀ → I and
  Tr(W A Wᵀ) → their sum; if A ≻ 0 (and h > d) W → 0.

  Args:
    a: (d, d) symmetric data matrix (`contrastive_data_matrix`).
    w0: (z, d) initial output map W2(0) W1(0); spectral norm <= 1.
    ts: (T,) strictly increasing times, T >= 2; w0 is the value at ts[0].
    rtol: relative tolerance of the adaptive step.
    atol: absolute tolerance of the adaptive step.
    max_steps: maximum number of solver steps.

  Returns:
    (T, z, d) array, W at each time (row 0 equals w0).

  Raises:
    ValueError: on bad shapes, non-symmetric a, ‖w0‖₂ > 1, or ts not
      strictly increasing.

  References:
    Esser, Mukherjee & Ghoshdastidar 2023 (arXiv 2309.02011), eq. (9), Theorems
    2–3: if Λ ≻ 0 then ζ → 0; if λ_min < 0 and ζ₁(0) ≠ 0 then ζ → ±e₁.
  """
  a, w0 = _check_a_w(a, w0, "w0")
  _check_w0_contraction(w0)
  ts = ode.check_times(ts).astype(a.dtype)
  lam_d, v_dxd = jnp.linalg.eigh(a)
  z_txzxd = ode.solve_ode(_eq9_rhs, w0 @ v_dxd, ts, lam_d, rtol, atol, max_steps)
  return z_txzxd @ v_dxd.T


def _eq9_rhs(t, z_zxd, lam_d):
  """Ż = −2[ZΛ(I − ZᵀZ) + (I − ZZᵀ)ZΛ], O(z² d)."""
  del t
  zl_zxd = z_zxd * lam_d
  return -2.0 * (2.0 * zl_zxd - (zl_zxd @ z_zxd.T) @ z_zxd
                 - (z_zxd @ z_zxd.T) @ zl_zxd)


def _check_weights(a, w1, w2):
  a = checks.as_float(a)
  _check_symmetric(a, "a")
  w1 = jnp.asarray(w1, a.dtype)
  w2 = jnp.asarray(w2, a.dtype)
  checks.check_nonempty_matrix(w1, "w1", "(h, d)")
  checks.check_nonempty_matrix(w2, "w2", "(z, h)")
  if w1.shape[1] != a.shape[0]:
    raise ValueError(f"w1 must be (h, d) with d = {a.shape[0]} (from a), got"
                     f" shape {w1.shape}")
  if w2.shape[1] != w1.shape[0]:
    raise ValueError(f"w2 must be (z, h) with h = {w1.shape[0]} (from w1), got"
                     f" shape {w2.shape}")
  _check_orthonormal(w1, "w1", rows=False)
  _check_orthonormal(w2, "w2", rows=True)
  return a, w1, w2


def _euclidean_grads(a_dxd, w1_hxd, w2_zxh):
  """∂/∂W1, ∂/∂W2 of Tr(W A Wᵀ): 2 W2ᵀ W A and 2 W A W1ᵀ."""
  wa_zxd = (w2_zxh @ w1_hxd) @ a_dxd
  return 2.0 * w2_zxh.T @ wa_zxd, 2.0 * wa_zxd @ w1_hxd.T


def _tangent(w1_hxd, w2_zxh, g1_hxd, g2_zxh):
  """Projections (I − W1W1ᵀ) G1 and G2 (I − W2ᵀW2), never h × h."""
  return (g1_hxd - w1_hxd @ (w1_hxd.T @ g1_hxd),
          g2_zxh - (g2_zxh @ w2_zxh.T) @ w2_zxh)


def stiefel_weight_flow(a, w1, w2, ts, *, rtol: float = 1e-8,
                        atol: float = 1e-10, max_steps: int = 100_000):
  """Integrates the projected gradient flow of both weights (Theorem 2).

      Ẇ1 = −2 (I − W1W1ᵀ) W2ᵀ W A,    Ẇ2 = −2 W A W1ᵀ (I − W2ᵀW2),

  with W = W2 W1. Both constraints W1ᵀW1 = I_d and W2W2ᵀ = I_z are
  invariant, and W = W2 W1 follows `stiefel_flow` exactly for any width h.
  Cost per step O(h d (d + z)), growing with h.

  Args:
    a: (d, d) symmetric data matrix.
    w1: (h, d) first layer, orthonormal columns (h >= d).
    w2: (z, h) second layer, orthonormal rows.
    ts: (T,) strictly increasing times, T >= 2; (w1, w2) is the value at
      ts[0].
    rtol: relative tolerance of the adaptive step.
    atol: absolute tolerance of the adaptive step.
    max_steps: maximum number of solver steps.

  Returns:
    (w1_t, w2_t): (T, h, d) and (T, z, h) arrays.

  Raises:
    ValueError: on bad shapes, non-orthonormal w1 or w2, or bad ts.

  References:
    Esser, Mukherjee & Ghoshdastidar 2023 (arXiv 2309.02011), Theorem 2 and its
    proof (projected flows Ẇ1 = −2(I − W1W1ᵀ)W2ᵀWA, Ẇ2 = −2WAW1ᵀ(I − W2ᵀW2)).
  """
  a, w1, w2 = _check_weights(a, w1, w2)
  ts = ode.check_times(ts).astype(a.dtype)
  return ode.solve_ode(_weight_rhs, (w1, w2), ts, a, rtol, atol, max_steps)


def _weight_rhs(t, y, a_dxd):
  del t
  g1_hxd, g2_zxh = _tangent(*y, *_euclidean_grads(a_dxd, *y))
  return (-g1_hxd, -g2_zxh)


def stiefel_flow_euler(a, w0, *, lr: float, steps: int) -> jax.Array:
  """Explicit Euler discretisation of the output flow (eq. 12).

      W_{k+1} = W_k + lr · Ẇ(W_k),   Ẇ = `stiefel_flow_velocity`,

  i.e. Z_{k+1} = Z_k − 2 lr [Z_kΛ(I − Z_kᵀZ_k) + (I − Z_kZ_kᵀ)Z_kΛ] in the
  eigenbasis. Step k approximates `stiefel_flow` at t = lr·k; a step costs
  O(z d²) whatever the hidden width.

  Args:
    a: (d, d) symmetric data matrix.
    w0: (z, d) initial output map, spectral norm <= 1.
    lr: step size η > 0.
    steps: number of steps >= 0.

  Returns:
    (steps + 1, z, d) array W_0, ..., W_steps.

  Raises:
    ValueError: on bad shapes, non-symmetric a, ‖w0‖₂ > 1, lr <= 0 or
      steps < 0.

  References:
    Esser, Mukherjee & Ghoshdastidar 2023 (arXiv 2309.02011), eq. (12).
  """
  a, w0 = _check_a_w(a, w0, "w0")
  _check_w0_contraction(w0)
  steps = _check_step_args(lr, steps)
  return _euler_path(a, w0, jnp.asarray(lr, a.dtype), steps)


@functools.partial(jax.jit, static_argnames="steps")
def _euler_path(a_dxd, w0_zxd, lr, steps):
  def body(w_zxd, _):
    w_next = w_zxd + lr * _velocity(a_dxd, w_zxd)
    return w_next, w_next
  _, path = jax.lax.scan(body, w0_zxd, None, length=steps)
  return jnp.concatenate([w0_zxd[None], path], axis=0)


# Both retractions go through the small (d, d) Gram matrix of a tall m with
# full column rank: m is one step away from orthonormal, so the Gram is well
# conditioned, and an eigh/Cholesky of it is much cheaper on CPU than an
# SVD/QR of m itself (the cost per step stays O(h d²) matmuls).


def _polar(m):
  """Polar factor U Vᵀ of a tall m: m (mᵀm)^{-1/2}."""
  mu, v = jnp.linalg.eigh(m.T @ m)
  return m @ ((v / jnp.sqrt(mu)) @ v.T)


def _qr_columns(m):
  """Q of the thin QR of a tall m with diag R > 0 (Cholesky QR)."""
  r_t = jnp.linalg.cholesky(m.T @ m)  # m = Q R, R = r_tᵀ
  return jax.scipy.linalg.solve_triangular(r_t, m.T, lower=True).T


@functools.partial(jax.jit, static_argnames=("steps", "retraction", "tangent"))
def _pgd_path(a_dxd, w1_hxd, w2_zxh, lr, steps, retraction, tangent):
  def body(carry, _):
    w1, w2 = carry
    g1, g2 = _euclidean_grads(a_dxd, w1, w2)
    if tangent:
      g1, g2 = _tangent(w1, w2, g1, g2)
    w1, w2 = w1 - lr * g1, w2 - lr * g2
    if retraction == "polar":
      w1, w2 = _polar(w1), _polar(w2.T).T
    else:
      w1, w2 = _qr_columns(w1), _qr_columns(w2.T).T
    return (w1, w2), w2 @ w1
  (w1, w2), path = jax.lax.scan(body, (w1_hxd, w2_zxh), None, length=steps)
  return w1, w2, jnp.concatenate([(w2_zxh @ w1_hxd)[None], path], axis=0)


def projected_gradient_descent(a, w1, w2, *, lr: float, steps: int,
                               retraction: str = "polar",
                               tangent: bool = True):
  """Projected gradient descent on Tr(W A Wᵀ), W = W2 W1 (eq. 11).

  Each step uses the Euclidean gradients G1 = 2W2ᵀWA, G2 = 2WAW1ᵀ of the
  current weights, optionally projected as in Theorem 2,
  G1 ← (I − W1W1ᵀ)G1 and G2 ← G2(I − W2ᵀW2) (`tangent=True`), takes
  W_v ← W_v − lr·G_v and maps back onto the constraint set:

  * "polar": nearest orthonormal matrix, U Vᵀ of the thin SVD (computed as
    M (MᵀM)^{-1/2});
  * "qr": Q factor of the thin QR with diag R > 0 (computed by Cholesky QR).

  Which combination to use (checked in tests/test_theory_dynamics.py):

  * tangent=True (default), either retraction: a first-order discretisation
    of the flow of Theorem 2, so W_k tracks `stiefel_flow` at t = lr·k with
    O(lr) error and converges to the Theorem 3 fixed points.
  * tangent=False, "polar" (the literal "gradient step, project back"):
    converges to the same subspace but follows the Riemannian gradient flow
    of the embedded metric, which adds a drift W1·skew(2WᵀWA) to W1; it does
    NOT track eq. 9, by O(1) whatever lr.
  * tangent=False, "qr": STALLS above the optimum. The O(lr) rotation inside
    span(W1) that the Q factor applies to the raw step acts as a spurious
    drift that balances the descent. Kept only to demonstrate the pitfall.

  Args:
    a: (d, d) symmetric data matrix.
    w1: (h, d) first layer, orthonormal columns (W1ᵀW1 = I_d).
    w2: (z, h) second layer, orthonormal rows (W2W2ᵀ = I_z).
    lr: learning rate η > 0; step k corresponds to time t = lr·k.
    steps: number of steps >= 0.
    retraction: "polar" or "qr".
    tangent: project the gradients onto the Theorem 2 directions first.

  Returns:
    (w1, w2, w_path): final (h, d) and (z, h) weights and the (steps + 1, z, d)
      outputs W_k = W2_k W1_k, k = 0..steps.

  Raises:
    ValueError: on bad shapes, non-orthonormal w1 or w2, lr <= 0,
      steps < 0 or an unknown retraction.

  References:
    Esser, Mukherjee & Ghoshdastidar 2023 (arXiv 2309.02011), eq. (11) ("project
    back"): use the polar/SVD projection, or QR on a tangent-projected step; QR
    of the raw Euclidean step can stall above the optimum.
  """
  if retraction not in _RETRACTIONS:
    raise ValueError(f"retraction must be one of {_RETRACTIONS}, got"
                     f" {retraction!r}")
  a, w1, w2 = _check_weights(a, w1, w2)
  steps = _check_step_args(lr, steps)
  return _pgd_path(a, w1, w2, jnp.asarray(lr, a.dtype), steps, retraction,
                   bool(tangent))
