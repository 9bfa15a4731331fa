"""Learning dynamics of linear SSL models: ODEs, their solutions and GD.

Two models, each on the theory side of the line data → Z → loss:

* 003 (Esser, Mukherjee & Ghoshdastidar): a 2-layer linear network
  f(x) = W2 W1 x with orthonormality constraints W1ᵀW1 = I_d (W1: h × d) and
  W2 W2ᵀ = I_z (W2: z × h), trained on the trace loss Tr(W A Wᵀ), W = W2 W1.
  The projected gradient flow of the weights closes on the output map W
  (eq. 9, whatever the hidden width h): `stiefel_flow` integrates it,
  `stiefel_weight_flow` integrates the weights themselves,
  `projected_gradient_descent` is the discrete training of eq. 11 and
  `stiefel_flow_euler` the discretised output dynamics of eq. 12.
* 004 (Skean et al., FroSSL): the linear variant (eq. 10/11) with aligned
  initialisation, whose singular values obey a coupled ODE
  (`frossl_linear_dynamics`, closed form `frossl_symmetric_singular_values`
  for identical views). The paper's own eq. (32)–(34) is wrong;
  `frossl_paper_eq34` keeps it so experiments can show the discrepancy.

Rows are samples: data x is (n, d), embeddings Z_v = X_v W_vᵀ are (n, d).
Paper 003 writes the model on column vectors, f(x) = W x; with rows the
outputs are x @ Wᵀ.

All ODEs are integrated with diffrax (Tsit5, adaptive PID step size) and
returned at the requested times; use float64 (`jax.experimental.enable_x64`)
for tight tolerances.

References (keys of /work/shared/papers; FINDINGS.md overrides the papers):
  003 Esser, Mukherjee & Ghoshdastidar, "Representation learning dynamics of
      self-supervised models" (arXiv 2309.02011); its maths was lost in
      extraction, the forms here are the FINDINGS reconstruction (eqs. 7–12,
      Theorems 2–3).
  004 Skean et al., "FroSSL", eq. (10)–(13), App. D–E.4 (eqs. 30–34), with
      the FINDINGS corrections (004 errata 3–5).
"""

from __future__ import annotations

import functools

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "contrastive_data_matrix",
    "stiefel_flow_velocity",
    "stiefel_flow",
    "stiefel_weight_flow",
    "stiefel_flow_euler",
    "projected_gradient_descent",
    "frossl_linear_loss",
    "frossl_linear_dynamics",
    "frossl_symmetric_singular_values",
    "frossl_paper_eq34",
]

_RETRACTIONS = ("polar", "qr")


# ---------------------------------------------------------------------------
# Boundary checks (concrete values only; tracers pass through).
# ---------------------------------------------------------------------------


def _is_concrete(x) -> bool:
  return not isinstance(x, jax.core.Tracer)


def _as_float(x) -> jax.Array:
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(jnp.result_type(float))
  return x


def _orth_tol(dtype) -> float:
  return 1e-8 if jnp.dtype(dtype) == jnp.float64 else 1e-4


def _check_finite(x, name: str) -> None:
  if _is_concrete(x) and not np.all(np.isfinite(np.asarray(x))):
    raise ValueError(f"{name} must be finite, got non-finite values in an"
                     f" array of shape {x.shape}")


def _check_rank2(x, name: str, what: str) -> None:
  if x.ndim != 2 or 0 in x.shape:
    raise ValueError(f"{name} must be a non-empty rank-2 {what} array, got"
                     f" shape {x.shape}")
  _check_finite(x, name)


def _check_symmetric(a, name: str) -> None:
  _check_rank2(a, name, "(d, d)")
  if a.shape[0] != a.shape[1]:
    raise ValueError(f"{name} must be square (d, d), got shape {a.shape}")
  if _is_concrete(a):
    a_np = np.asarray(a)
    scale = max(1.0, float(np.max(np.abs(a_np))))
    if np.max(np.abs(a_np - a_np.T)) > 1e-6 * scale:
      raise ValueError(f"{name} must be symmetric, got max |a − aᵀ| ="
                       f" {np.max(np.abs(a_np - a_np.T)):.3g}")


def _check_times(ts) -> jax.Array:
  ts = _as_float(ts)
  if ts.ndim != 1 or ts.shape[0] < 2:
    raise ValueError(f"ts must be a 1-D array of >= 2 times, got shape"
                     f" {ts.shape}")
  _check_finite(ts, "ts")
  if _is_concrete(ts) and not np.all(np.diff(np.asarray(ts)) > 0):
    raise ValueError(f"ts must be strictly increasing, got {np.asarray(ts)}")
  return ts


def _check_orthonormal(m, name: str, rows: bool) -> None:
  """rows=True: m mᵀ = I (orthonormal rows); else mᵀ m = I (columns)."""
  if not _is_concrete(m):
    return
  m_np = np.asarray(m, np.float64)
  gram = m_np @ m_np.T if rows else m_np.T @ m_np
  err = float(np.max(np.abs(gram - np.eye(gram.shape[0]))))
  if err > _orth_tol(m.dtype):
    what = f"{name} {name}ᵀ" if rows else f"{name}ᵀ {name}"
    raise ValueError(f"{name} must have orthonormal {'rows' if rows else 'columns'}"
                     f" ({what} = I), got max deviation {err:.3g} for shape"
                     f" {m.shape}")


def _check_positive(x, name: str) -> jax.Array:
  x = _as_float(x)
  if x.ndim > 1:
    raise ValueError(f"{name} must be a scalar or a 1-D (d,) array, got shape"
                     f" {x.shape}")
  _check_finite(x, name)
  if _is_concrete(x) and not np.all(np.asarray(x) > 0):
    raise ValueError(f"{name} must be > 0, got {np.asarray(x)}")
  return x


def _check_step_args(lr, steps) -> int:
  if not (isinstance(steps, (int, np.integer)) and not isinstance(steps, bool)
          and steps >= 0):
    raise ValueError(f"steps must be an int >= 0, got {steps!r}")
  if not np.isfinite(lr) or lr <= 0:
    raise ValueError(f"lr must be a finite float > 0, got {lr!r}")
  return int(steps)


@functools.partial(jax.jit,
                   static_argnames=("rhs", "rtol", "atol", "max_steps"))
def _solve(rhs, y0, ts, args, rtol: float, atol: float, max_steps: int):
  """diffrax Tsit5 + PID step control from ts[0], saved at every ts.

  `rhs(t, y, args)` is a module-level function, so the compiled solver is
  cached per (rhs, shapes, dtypes, tolerances) across calls.
  """
  sol = diffrax.diffeqsolve(
      diffrax.ODETerm(rhs), diffrax.Tsit5(), t0=ts[0], t1=ts[-1], dt0=None,
      y0=y0, args=args, saveat=diffrax.SaveAt(ts=ts),
      stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
      max_steps=max_steps)
  return sol.ys


# ---------------------------------------------------------------------------
# 003: data matrix (eq. 7).
# ---------------------------------------------------------------------------


def contrastive_data_matrix(x, x_pos, x_neg=None) -> jax.Array:
  """Symmetric data matrix A of the trace loss Tr(W A Wᵀ) (003 eq. 7).

  With Δ_i = x⁺_i − x⁻_i (rows are samples),

      A = −(1/2n) Σ_i [x_i Δ_iᵀ + Δ_i x_iᵀ] = −(xᵀΔ + Δᵀx) / (2n),

  so that the linear contrastive loss (1/n) Σ_i −f(x_i)ᵀ(f(x⁺_i) − f(x⁻_i))
  equals Tr(W A Wᵀ) for f(x) = W x. Without `x_neg` (non-contrastive loss
  (2)) Δ = x⁺. For x⁺ = x + noise and an independent x⁻, E[A] = −Cov(x),
  negative definite (FINDINGS "003").

  Args:
    x: (n, d) anchors, float.
    x_pos: (n, d) positives (e.g. augmented anchors).
    x_neg: optional (n, d) negatives (independent samples).

  Returns:
    (d, d) symmetric A in the dtype of x.

  Raises:
    ValueError: if an argument is not a finite rank-2 array or the shapes
      differ.

  References:
    003 eq. (1), (2), (7); FINDINGS "003 (reconstructed)".
  """
  x = _as_float(x)
  x_pos = jnp.asarray(x_pos, x.dtype)
  _check_rank2(x, "x", "(n, d)")
  _check_rank2(x_pos, "x_pos", "(n, d)")
  if x_pos.shape != x.shape:
    raise ValueError(f"x_pos must have the shape of x {x.shape}, got"
                     f" {x_pos.shape}")
  delta_nxd = x_pos
  if x_neg is not None:
    x_neg = jnp.asarray(x_neg, x.dtype)
    _check_rank2(x_neg, "x_neg", "(n, d)")
    if x_neg.shape != x.shape:
      raise ValueError(f"x_neg must have the shape of x {x.shape}, got"
                       f" {x_neg.shape}")
    delta_nxd = x_pos - x_neg
  cross_dxd = x.T @ delta_nxd
  return -(cross_dxd + cross_dxd.T) / (2 * x.shape[0])


# ---------------------------------------------------------------------------
# 003: output flow (eq. 9), weight flow (Theorem 2), eq. 11 and eq. 12.
# ---------------------------------------------------------------------------


def _velocity(a_dxd, w_zxd):
  wa_zxd = w_zxd @ a_dxd
  return -2.0 * (wa_zxd - (wa_zxd @ w_zxd.T) @ w_zxd
                 + wa_zxd - (w_zxd @ w_zxd.T) @ wa_zxd)


def _check_a_w(a, w, w_name: str):
  a = _as_float(a)
  _check_symmetric(a, "a")
  w = jnp.asarray(w, a.dtype)
  _check_rank2(w, w_name, "(z, d)")
  if w.shape[1] != a.shape[0]:
    raise ValueError(f"{w_name} must be (z, d) with d = {a.shape[0]} (from a),"
                     f" got shape {w.shape}")
  return a, w


def stiefel_flow_velocity(a, w) -> jax.Array:
  """Vector field of the output flow (003 eq. 9, in weight coordinates).

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
    003 eq. (9), (10), Theorem 2; FINDINGS "003".
  """
  a, w = _check_a_w(a, w, "w")
  return _velocity(a, w)


def _check_w0_contraction(w0) -> None:
  if _is_concrete(w0):
    norm = float(np.linalg.norm(np.asarray(w0, np.float64), 2))
    if norm > 1.0 + _orth_tol(w0.dtype):
      raise ValueError(
          "w0 must be realisable as W2 W1 with orthonormal W1, W2, i.e. have"
          f" spectral norm <= 1, got {norm:.6g} for shape {w0.shape}")


def stiefel_flow(a, w0, ts, *, rtol: float = 1e-8, atol: float = 1e-10,
                 max_steps: int = 100_000) -> jax.Array:
  """Integrates the output dynamics of 003 eq. 9 with diffrax.

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
    003 eq. (9), Theorems 2–3; FINDINGS "003".
  """
  a, w0 = _check_a_w(a, w0, "w0")
  _check_w0_contraction(w0)
  ts = _check_times(ts).astype(a.dtype)
  lam_d, v_dxd = jnp.linalg.eigh(a)
  z_txzxd = _solve(_eq9_rhs, w0 @ v_dxd, ts, lam_d, rtol, atol, max_steps)
  return z_txzxd @ v_dxd.T


def _eq9_rhs(t, z_zxd, lam_d):
  """Ż = −2[ZΛ(I − ZᵀZ) + (I − ZZᵀ)ZΛ], O(z² d)."""
  del t
  zl_zxd = z_zxd * lam_d
  return -2.0 * (2.0 * zl_zxd - (zl_zxd @ z_zxd.T) @ z_zxd
                 - (z_zxd @ z_zxd.T) @ zl_zxd)


def _check_weights(a, w1, w2):
  a = _as_float(a)
  _check_symmetric(a, "a")
  w1 = jnp.asarray(w1, a.dtype)
  w2 = jnp.asarray(w2, a.dtype)
  _check_rank2(w1, "w1", "(h, d)")
  _check_rank2(w2, "w2", "(z, h)")
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
  """003 projections (I − W1W1ᵀ) G1 and G2 (I − W2ᵀW2), never h × h."""
  return (g1_hxd - w1_hxd @ (w1_hxd.T @ g1_hxd),
          g2_zxh - (g2_zxh @ w2_zxh.T) @ w2_zxh)


def stiefel_weight_flow(a, w1, w2, ts, *, rtol: float = 1e-8,
                        atol: float = 1e-10, max_steps: int = 100_000):
  """Integrates the projected gradient flow of both weights (003 Theorem 2).

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
    003 Theorem 2 and its proof; FINDINGS "003" (projected flows).
  """
  a, w1, w2 = _check_weights(a, w1, w2)
  ts = _check_times(ts).astype(a.dtype)
  return _solve(_weight_rhs, (w1, w2), ts, a, rtol, atol, max_steps)


def _weight_rhs(t, y, a_dxd):
  del t
  g1_hxd, g2_zxh = _tangent(*y, *_euclidean_grads(a_dxd, *y))
  return (-g1_hxd, -g2_zxh)


def stiefel_flow_euler(a, w0, *, lr: float, steps: int) -> jax.Array:
  """Explicit Euler discretisation of the output flow (003 eq. 12).

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
    003 eq. (12); FINDINGS "003".
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
  """Projected gradient descent on Tr(W A Wᵀ), W = W2 W1 (003 eq. 11).

  Each step uses the Euclidean gradients G1 = 2W2ᵀWA, G2 = 2WAW1ᵀ of the
  current weights, optionally projected as in Theorem 2,
  G1 ← (I − W1W1ᵀ)G1 and G2 ← G2(I − W2ᵀW2) (`tangent=True`), takes
  W_v ← W_v − lr·G_v and maps back onto the constraint set:

  * "polar": nearest orthonormal matrix, U Vᵀ of the thin SVD (computed as
    M (MᵀM)^{-1/2});
  * "qr": Q factor of the thin QR with diag R > 0 (computed by Cholesky QR).

  Which combination to use (FINDINGS "003", checked in
  tests/test_theory_dynamics.py):

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
    (w1, w2, w_path): final (h, d) and (z, h) weights and the
    (steps + 1, z, d) outputs W_k = W2_k W1_k, k = 0..steps.

  Raises:
    ValueError: on bad shapes, non-orthonormal w1 or w2, lr <= 0,
      steps < 0 or an unknown retraction.

  References:
    003 eq. (11); FINDINGS "003" and 003 erratum 3.
  """
  if retraction not in _RETRACTIONS:
    raise ValueError(f"retraction must be one of {_RETRACTIONS}, got"
                     f" {retraction!r}")
  a, w1, w2 = _check_weights(a, w1, w2)
  steps = _check_step_args(lr, steps)
  return _pgd_path(a, w1, w2, jnp.asarray(lr, a.dtype), steps, retraction,
                   bool(tangent))


# ---------------------------------------------------------------------------
# 004: linear FroSSL variant (eq. 10/11) and its singular-value ODE.
# ---------------------------------------------------------------------------


def frossl_linear_loss(w1, w2, x1, x2) -> jax.Array:
  """Linear FroSSL variant (004 eq. 10/11), Z_v = X_v W_vᵀ.

      L = ‖Z1ᵀZ1 − I‖² + ‖Z2ᵀZ2 − I‖² + ‖Z1 − Z2‖²
        = ‖W1Γ1W1ᵀ − I‖² + ‖W2Γ2W2ᵀ − I‖² + ‖X1W1ᵀ − X2W2ᵀ‖²,  Γ_v = X_vᵀX_v.

  Its gradient is ∂L/∂W1 = −2(W1Γ1 + W2X2ᵀX1 − 2W1Γ1W1ᵀW1Γ1) (and
  symmetrically for W2); full-batch GD with step lr follows dW/dt = −∂L/∂W
  at t = lr·step (004 erratum 3: the paper's sign is flipped).

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
    004 eq. (10)–(13), App. E.3 with FINDINGS "FroSSL (004)".
  """
  w1 = _as_float(w1)
  w2, x1, x2 = (jnp.asarray(v, w1.dtype) for v in (w2, x1, x2))
  for v, name, what in ((w1, "w1", "(d, m)"), (w2, "w2", "(d, m)"),
                        (x1, "x1", "(n, m)"), (x2, "x2", "(n, m)")):
    _check_rank2(v, name, what)
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


def _broadcast_positive(names_values):
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

  Aligned setting (FINDINGS "FroSSL (004)"): X_v = P D_v^{1/2} Vᵀ with shared
  P, V (so X2ᵀX1 = V√(D1D2)Vᵀ) and W_v(0) = U S_v(0) V̂ with the SAME U.
  Then W_v(t) = U S_v(t) V̂ and, per direction j, with λ = (D1)_jj,
  γ = (D2)_jj and c = √(λγ),

      s1' = 2λ s1 + 2c s2 − 4λ² s1³
      s2' = 2γ s2 + 2c s1 − 4γ² s2³.

  Both converge to s1² = 1/λ, s2² = 1/γ (Z1 = Z2, Z_vᵀZ_v = I, L = 0). The
  eigenvalues of Z_vᵀZ_v are λ s1², γ s2². `cross` overrides c, e.g. with
  v_jᵀ sym(X2ᵀX1) v_j when the views are only approximately aligned.
  The paper's eq. (32) is different and wrong (004 erratum 5).

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
    004 App. D.1/E.4 eqs. (30)–(32) as corrected in FINDINGS "FroSSL (004)".
  """
  lam, gam, s1_0, s2_0 = _broadcast_positive(
      [("lam", lam), ("gam", gam), ("s1_0", s1_0), ("s2_0", s2_0)])
  if cross is None:
    cross = jnp.sqrt(lam * gam)
  else:
    cross = _as_float(cross)
    _check_finite(cross, "cross")
    cross = jnp.broadcast_to(cross, lam.shape).astype(lam.dtype)
  ts = _check_times(ts).astype(lam.dtype)
  lam, gam, cross, s1_0, s2_0 = (jnp.atleast_1d(v) for v in
                                 (lam, gam, cross, s1_0, s2_0))

  return _solve(_frossl_rhs, (s1_0, s2_0), ts, (lam, gam, cross), rtol, atol,
                max_steps)


def _frossl_rhs(t, y, args):
  """Corrected 004 singular-value ODE (FINDINGS "FroSSL (004)")."""
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
    FINDINGS "FroSSL (004)", symmetric case (replaces 004 eq. 33/34).
  """
  lam, s0 = _broadcast_positive([("lam", lam), ("s0", s0)])
  t = _as_float(t).astype(lam.dtype)
  if t.ndim > 1:
    raise ValueError(f"t must be a scalar or 1-D (T,) array, got shape {t.shape}")
  _check_finite(t, "t")
  if _is_concrete(t) and np.any(np.asarray(t) < 0):
    raise ValueError(f"t must be >= 0, got min(t) = {float(np.min(t))}")
  if t.ndim == 1:
    t = t.reshape(t.shape + (1,) * lam.ndim)
  return 1.0 / jnp.sqrt(lam + (1.0 / s0**2 - lam) * jnp.exp(-8.0 * lam * t))


def frossl_paper_eq34(t, lam, gam, s0) -> jax.Array:
  """The paper's printed closed form (004 eq. 34) — WRONG, for comparison.

      s(t) = sqrt( b / ((2λ² + b/s0²) e^{4bt} − 2λ²) ),  b = 2√(λγ) − λ,

  which solves the paper's eq. (32), s' = 2s(λ − 2√(λγ) − 2λ²s²), exactly.
  Eq. (32) has the wrong sign and factor on the cross term and s1 instead
  of s2, so this does not describe gradient descent: for λ = γ it predicts
  collapse s → 0, whereas GD (and `frossl_linear_dynamics`) gives
  s² → 1/λ (004 erratum 5). Returns NaN where the square root's argument is
  negative (e.g. when b < 0 and e^{4bt} is small enough).

  Args:
    t: scalar or (T,) times t = lr·step.
    lam: scalar or (d,) eigenvalue(s) λ > 0 of Γ1.
    gam: scalar or (d,) eigenvalue(s) γ > 0 of Γ2.
    s0: scalar or (d,) initial singular value(s) > 0.

  Returns:
    s(t), shaped as in `frossl_symmetric_singular_values`.

  Raises:
    ValueError: if lam, gam or s0 is not > 0 or t is not finite or rank > 1.

  References:
    004 eqs. (32)–(34) (printed), FINDINGS 004 erratum 5.
  """
  lam, gam, s0 = _broadcast_positive([("lam", lam), ("gam", gam), ("s0", s0)])
  t = _as_float(t).astype(lam.dtype)
  if t.ndim > 1:
    raise ValueError(f"t must be a scalar or 1-D (T,) array, got shape {t.shape}")
  _check_finite(t, "t")
  if t.ndim == 1:
    t = t.reshape(t.shape + (1,) * lam.ndim)
  b = 2.0 * jnp.sqrt(lam * gam) - lam
  return jnp.sqrt(b / ((2.0 * lam**2 + b / s0**2) * jnp.exp(4.0 * b * t)
                       - 2.0 * lam**2))
