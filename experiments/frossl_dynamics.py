"""Skean et al. 2023 Fig. 2: linear FroSSL (eq. 10) vs Barlow variant, the ODE.

Paper: Skean et al. 2023, "FroSSL: Frobenius Norm Minimization for
Self-Supervised Learning", arXiv 2310.02903.

Two linear layers W1, W2 (d × m), one per view, trained by full-batch GD on
n Fashion-MNIST images (m = 784, pixels centred, one global rescale so the
top eigenvalue of (Γ1 + Γ2)/2 is 1) with two augmented views (random
±2-pixel shifts, horizontal flips, Gaussian noise, in numpy):

* FroSSL variant (eq. 10): ‖Z1ᵀZ1 − I‖² + ‖Z2ᵀZ2 − I‖² + ‖Z1 − Z2‖²;
* Barlow variant (Simon et al. 2023): ‖Z1ᵀZ2 − I‖².

Both start from the aligned initialisation W_v(0) = U S(0) V̂ (V̂: top-d
eigenvectors of (Γ1 + Γ2)/2, shared U, small S(0)). Plotted against
t = lr·step: loss and the top-10 eigenvalues of Z1ᵀZ1, with the corrected
singular-value ODE prediction λ_j s1_j(t)² (`frossl_linear_dynamics`, with
λ_j = v_jᵀΓ1v_j, γ_j = v_jᵀΓ2v_j, c_j = v_jᵀX2ᵀX1v_j since augmented views
are only approximately aligned) and the paper's eq. 34 (which misses).
Losses are evaluated through the m × m Gram matrices (exactly equal to the
Z forms; checked at initialisation against `frossl_linear_loss`).

Run:  .venv/bin/python experiments/frossl_dynamics.py --out runs/frossl
"""

import sys

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import _common  # noqa: E402
from ssljax import checks  # noqa: E402
from ssljax.theory import dynamics  # noqa: E402
from ssljax.theory import frossl_dynamics  # noqa: E402


def paper_eq34(t, lam, gam, s0) -> jax.Array:
  """The printed closed form of Skean et al. 2023 eq. 34: WRONG, for comparison.

      s(t) = sqrt( b / ((2λ² + b/s0²) e^{4bt} − 2λ²) ),  b = 2√(λγ) − λ,

  which solves the paper's eq. (32), s' = 2s(λ − 2√(λγ) − 2λ²s²), exactly.
  Eq. (32) has the wrong sign and factor on the cross term and s1 instead
  of s2, so this does not describe gradient descent: for λ = γ it predicts
  collapse s → 0, whereas GD (and `frossl_linear_dynamics`) gives
  s² → 1/λ. Kept here, outside the library, to show that discrepancy.
  Returns NaN where the square root's argument is negative (e.g. when
  b < 0 and e^{4bt} is small enough).

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
    Skean et al. 2023, arXiv 2310.02903, eqs. (32)–(34) as printed.
  """
  lam, gam, s0 = frossl_dynamics.broadcast_positive(
      [("lam", lam), ("gam", gam), ("s0", s0)])
  t = checks.as_float(t).astype(lam.dtype)
  if t.ndim > 1:
    raise ValueError(f"t must be a scalar or 1-D (T,) array, got shape {t.shape}")
  checks.check_finite(t, "t")
  if t.ndim == 1:
    t = t.reshape(t.shape + (1,) * lam.ndim)
  b = 2.0 * jnp.sqrt(lam * gam) - lam
  return jnp.sqrt(b / ((2.0 * lam**2 + b / s0**2) * jnp.exp(4.0 * b * t)
                       - 2.0 * lam**2))


def _augment(rng, x):
  """Random ±2 px shift, horizontal flip (p = 0.5) and noise σ = 0.05."""
  imgs = x.reshape(-1, 28, 28)
  out = np.empty_like(imgs)
  pad = np.pad(imgs, ((0, 0), (2, 2), (2, 2)))
  for i, (dy, dx) in enumerate(rng.integers(0, 5, size=(len(imgs), 2))):
    out[i] = pad[i, dy:dy + 28, dx:dx + 28]
  flip = rng.random(len(imgs)) < 0.5
  out[flip] = out[flip, :, ::-1]
  return out.reshape(len(x), -1) + 0.05 * rng.normal(size=x.shape)


def _losses(g1, g2, c12):
  """Gram forms: Γ_v = X_vᵀX_v, c12 = X1ᵀX2 (m × m)."""
  def frossl(w1, w2):
    eye = jnp.eye(w1.shape[0])
    k1, k2 = w1 @ g1 @ w1.T, w2 @ g2 @ w2.T
    return (jnp.sum((k1 - eye) ** 2) + jnp.sum((k2 - eye) ** 2)
            + jnp.trace(k1) + jnp.trace(k2) - 2 * jnp.trace(w1 @ c12 @ w2.T))

  def barlow(w1, w2):
    return jnp.sum((w1 @ c12 @ w2.T - jnp.eye(w1.shape[0])) ** 2)
  return frossl, barlow


def _gd(loss, g1, w1, w2, lr, steps):
  """Full-batch GD; per step: loss and eigenvalues of Z1ᵀZ1 (descending)."""
  grad = jax.value_and_grad(loss, argnums=(0, 1))

  @jax.jit
  def run(w1, w2):
    def body(c, _):
      value, (d1, d2) = grad(*c)
      eig = jnp.linalg.eigvalsh(c[0] @ g1 @ c[0].T)[::-1]
      return (c[0] - lr * d1, c[1] - lr * d2), (value, eig)
    return jax.lax.scan(body, (w1, w2), None, length=steps + 1)[1]
  return [np.asarray(v) for v in run(w1, w2)]


def run(cfg) -> dict | None:
  """GD on both variants, the corrected ODE and eq. 34, on Fashion-MNIST.

  Args:
    cfg: namespace with `fast` (bool): n = 256, d = 10, t <= 10.

  Returns:
    None when the Fashion-MNIST files are missing, else a dict with
    "summary" and the full-resolution curves: t, ts (ODE times), loss_f,
    loss_b, eig_f, eig_b (GD), ode_sorted, paper_sorted, k, lam, gam, cross.
  """
  n, d, lr, t_end = (256, 10, 0.02, 10.0) if cfg.fast else (1024, 16, 0.01,
                                                          60.0)
  steps = int(round(t_end / lr))
  data = _common.load_fashion_mnist(n, seed=0)
  if data is None:
    print("Fashion-MNIST IDX files not found (apt-get install -y "
          "dataset-fashion-mnist); skipping.")
    return None
  rng = np.random.default_rng(0)
  x = data[0]
  x1, x2 = _augment(rng, x), _augment(rng, x)
  mean = np.concatenate([x1, x2]).mean(0)
  x1, x2 = x1 - mean, x2 - mean
  g_avg = (x1.T @ x1 + x2.T @ x2) / 2
  scale = np.sqrt(np.linalg.eigvalsh(g_avg)[-1])
  x1, x2 = x1 / scale, x2 / scale
  g1, g2, c12 = x1.T @ x1, x2.T @ x2, x1.T @ x2
  mu, v = np.linalg.eigh((g1 + g2) / 2)
  v_hat = v[:, ::-1][:, :d].T  # (d, m) top-d eigenvectors
  lam = np.einsum("jm,mk,jk->j", v_hat, g1, v_hat)
  gam = np.einsum("jm,mk,jk->j", v_hat, g2, v_hat)
  cross = np.einsum("jm,mk,jk->j", v_hat, (c12 + c12.T) / 2, v_hat)

  u = np.linalg.qr(rng.normal(size=(d, d)))[0]
  s0 = np.full(d, 1e-2)
  w0 = u * s0 @ v_hat
  frossl, barlow = _losses(g1, g2, c12)
  np.testing.assert_allclose(
      frossl(w0, 1.01 * w0), dynamics.frossl_linear_loss(w0, 1.01 * w0, x1, x2),
      rtol=1e-9)

  loss_f, eig_f = _gd(frossl, g1, w0, w0, lr, steps)
  loss_b, eig_b = _gd(barlow, g1, w0, w0, lr, steps)
  t = lr * np.arange(steps + 1)
  ts = t[:: max(1, steps // 400)]
  s1, _ = dynamics.frossl_linear_dynamics(ts, lam, gam, s0, s0, cross=cross,
                                          rtol=1e-8, atol=1e-10)
  e_ode = lam * np.asarray(s1) ** 2
  e_paper = lam * np.asarray(paper_eq34(ts, lam, gam, s0)) ** 2
  e_gd = eig_f[:: max(1, steps // 400)]
  k = min(10, d)
  # GD eigenvalues are sorted; match the ODE curves sorted the same way.
  ode_sorted = -np.sort(-e_ode, axis=1)
  paper_sorted = -np.sort(-np.nan_to_num(e_paper, nan=0.0), axis=1)
  scale_e = np.max(e_gd[:, :k])
  err_ode = float(np.max(np.abs(e_gd[:, :k] - ode_sorted[:, :k])) / scale_e)
  err_paper = float(np.max(np.abs(e_gd[:, :k] - paper_sorted[:, :k]))
                    / scale_e)
  summary = dict(n=n, d=d, lr=lr, steps=steps,
                 max_rel_err_corrected_ode=err_ode,
                 max_rel_err_paper_eq34=err_paper,
                 final_top_eig_gd=eig_f[-1, :k], final_top_eig_ode=ode_sorted[-1, :k],
                 final_top_eig_paper=paper_sorted[-1, :k],
                 final_loss=dict(frossl=float(loss_f[-1]),
                                 barlow=float(loss_b[-1])))
  print(summary)
  return dict(summary=summary, t=t, ts=ts, loss_f=loss_f, loss_b=loss_b,
              eig_f=eig_f, eig_b=eig_b, e_gd=e_gd, ode_sorted=ode_sorted,
              paper_sorted=paper_sorted, k=k, lam=lam, gam=gam, cross=cross)


def plot(result: dict, out) -> None:
  """Writes frossl_dynamics.png under `out` from the result of `run`."""
  t, ts, k = result["t"], result["ts"], result["k"]
  loss_f, loss_b = result["loss_f"], result["loss_b"]
  eig_f, eig_b = result["eig_f"], result["eig_b"]
  ode_sorted, paper_sorted = result["ode_sorted"], result["paper_sorted"]
  fig, ax = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
  ax[0, 0].semilogy(t, loss_f)
  ax[0, 0].set(title="FroSSL variant (eq. 10): loss")
  ax[0, 1].semilogy(t, loss_b, "C1")
  ax[0, 1].set(title="Barlow variant ‖Z1ᵀZ2 − I‖²: loss")
  for j in range(k):
    ax[1, 0].plot(t, eig_f[:, j], color=f"C{j % 10}", lw=1.5)
    ax[1, 0].plot(ts, ode_sorted[:, j], "k--", lw=0.8)
    ax[1, 0].plot(ts, paper_sorted[:, j], "r:", lw=0.8)
    ax[1, 1].plot(t, eig_b[:, j], color=f"C{j % 10}", lw=1.5)
  ax[1, 0].plot([], [], "k--", label="corrected ODE")
  ax[1, 0].plot([], [], "r:", label="paper eq. 34")
  ax[1, 0].legend()
  ax[1, 0].set(title=f"FroSSL: top-{k} eigenvalues of Z1ᵀZ1",
               xlabel="t = lr·step", ylim=(-0.05, 1.3))
  ax[1, 1].set(title=f"Barlow: top-{k} eigenvalues of Z1ᵀZ1",
               xlabel="t = lr·step", ylim=(-0.05, 1.3))
  _common.save_figure(fig, out, "frossl_dynamics.png")


def main(argv=None):
  args = _common.parse_args(__doc__.splitlines()[0], argv)
  result = run(args)
  if result is None:
    _common.save_json(args.out, "frossl_dynamics.json",
                      dict(skipped="fashion-mnist missing"))
    return 0
  plot(result, args.out)
  every = max(1, result["summary"]["steps"] // 400)
  _common.save_json(args.out, "frossl_dynamics.json", dict(
      summary=result["summary"], t=result["t"][::every], ts=result["ts"],
      loss_frossl=result["loss_f"][::every],
      loss_barlow=result["loss_b"][::every],
      eig_frossl=result["e_gd"][:, :result["k"]],
      eig_barlow=result["eig_b"][::every, :result["k"]],
      eig_ode=result["ode_sorted"][:, :result["k"]],
      eig_paper_eq34=result["paper_sorted"][:, :result["k"]],
      lam=result["lam"], gam=result["gam"], cross=result["cross"]))
  return 0


if __name__ == "__main__":
  sys.exit(main())
