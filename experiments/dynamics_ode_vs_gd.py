"""003 Figs. 3–4: the output ODE (eq. 9) against projected GD (eq. 11).

Data: two classes (digits 0 and 1, at most 200 images each) of
scikit-learn's bundled `load_digits` (8 × 8, d = 64), scaled to [0, 1] and
centred; x⁺ = x + noise, x⁻ an independent sample; A from 003 eq. 7.

* Fig. 3: loss Tr(WAWᵀ) and outputs of `stiefel_flow` (the ODE, solved by
  diffrax) against `projected_gradient_descent` at t = lr·step, with the
  Theorem 2 (tangent) directions + polar retraction, and the literal eq. 11
  (raw step + polar) for contrast; subspace angles between row spaces.
* Fig. 4 left: wall time per step against the hidden width h for an ODE
  step (Euler, eq. 12, cost independent of h) and a projected-GD step.
* Fig. 4 right: linear-SVM (scikit-learn LinearSVC) test accuracy of the
  embeddings f(x) = W x from the ODE and from GD along training.
(Fashion-MNIST two-class variant: not run here.)

Run:  .venv/bin/python experiments/dynamics_ode_vs_gd.py --out runs/ode_vs_gd
"""

import jax

jax.config.update("jax_enable_x64", True)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.svm import LinearSVC  # noqa: E402

import _common  # noqa: E402
from ssljax.theory import dynamics  # noqa: E402


def _orthonormal(rng, rows, cols):
  return np.linalg.qr(rng.normal(size=(rows, cols)))[0]


def _svm_accuracy(x_tr, y_tr, x_te, y_te, w):
  clf = LinearSVC(C=1.0, max_iter=20000).fit(x_tr @ w.T, y_tr)
  return float(clf.score(x_te @ w.T, y_te))


def main(argv=None):
  args = _common.parse_args(__doc__.splitlines()[0], argv)
  fast = args.fast
  h, z, lr = (80 if fast else 128), 2, 0.01  # h >= d = 64 (W1ᵀW1 = I_d)
  steps = 300 if fast else 3000
  widths = [64, 256] if fast else [64, 128, 256, 512, 1024, 2048, 4096]
  rng = np.random.default_rng(0)

  digits = load_digits()
  keep = np.flatnonzero(np.isin(digits.target, (0, 1)))
  keep = np.concatenate([keep[digits.target[keep] == c][:200] for c in (0, 1)])
  x, y = digits.data[keep] / 16.0, digits.target[keep]
  x = x - x.mean(0)
  n, d = x.shape
  x_pos = x + 0.1 * rng.normal(size=x.shape)
  x_neg = x[rng.permutation(n)]
  a = np.asarray(dynamics.contrastive_data_matrix(x, x_pos, x_neg))
  lam, v = np.linalg.eigh(a)

  # ---- Fig. 3: ODE vs projected GD ---------------------------------------
  w1, w2 = _orthonormal(rng, h, d), _orthonormal(rng, h, z).T
  every = steps // 50
  idx = np.arange(0, steps + 1, every)
  ts = lr * idx
  w_ode = np.asarray(dynamics.stiefel_flow(a, w2 @ w1, ts))
  w_gd = np.asarray(dynamics.projected_gradient_descent(
      a, w1, w2, lr=lr, steps=steps)[2])[idx]
  w_raw = np.asarray(dynamics.projected_gradient_descent(
      a, w1, w2, lr=lr, steps=steps, tangent=False)[2])[idx]
  loss = lambda w: np.einsum("tzd,de,tze->t", w, a, w)
  angle = lambda p, q: np.array([_common.subspace_angle_deg(u, w)
                                 for u, w in zip(p, q)])
  bottom = v[:, :z].T
  ang_gd, ang_raw = angle(w_ode, w_gd), angle(w_ode, w_raw)
  ang_ode_opt = angle(w_ode, np.broadcast_to(bottom, w_ode.shape))

  # ---- Fig. 4 right: linear SVM on the embeddings -------------------------
  x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.5,
                                            stratify=y, random_state=0)
  svm_at = idx[np.linspace(0, len(idx) - 1, 6).astype(int)] // every
  svm = dict(t=ts[svm_at],
             ode=[_svm_accuracy(x_tr, y_tr, x_te, y_te, w_ode[k])
                  for k in svm_at],
             gd=[_svm_accuracy(x_tr, y_tr, x_te, y_te, w_gd[k])
                 for k in svm_at])

  # ---- Fig. 4 left: time per step against width ---------------------------
  reps, n_steps = (2, 10) if fast else (5, 50)
  timing = dict(width=widths, gd_step_s=[], ode_euler_step_s=[])
  for hw in widths:
    u1, u2 = _orthonormal(rng, hw, d), _orthonormal(rng, hw, z).T
    timing["gd_step_s"].append(_common.median_time(
        lambda: dynamics.projected_gradient_descent(
            a, u1, u2, lr=lr, steps=n_steps), reps=reps) / n_steps)
    timing["ode_euler_step_s"].append(_common.median_time(
        lambda: dynamics.stiefel_flow_euler(a, u2 @ u1, lr=lr, steps=n_steps),
        reps=reps) / n_steps)
  timing["ode_diffrax_solve_s"] = _common.median_time(
      lambda: dynamics.stiefel_flow(a, w2 @ w1, ts), reps=reps)

  # ---- figures -------------------------------------------------------------
  fig, ax = plt.subplots(1, 3, figsize=(16, 4.3))
  ax[0].plot(ts, loss(w_ode), "k-", lw=2, label="ODE (eq. 9, diffrax)")
  ax[0].plot(ts, loss(w_gd), "C0--", label="projected GD, tangent + polar")
  ax[0].plot(ts, loss(w_raw), "C1:", label="eq. 11 literal (raw + polar)")
  ax[0].axhline(lam[:z].sum(), color="r", lw=0.8, label="Σ bottom-z λ(A)")
  ax[0].set(xlabel="t = lr·step", ylabel="Tr(WAWᵀ)", title=f"loss (h={h})")
  ax[0].legend(fontsize=8)
  ax[1].plot(ts, ang_gd, label="ODE vs GD (tangent)")
  ax[1].plot(ts, ang_raw, label="ODE vs eq. 11 literal")
  ax[1].plot(ts, ang_ode_opt, label="ODE vs Theorem 3 subspace")
  ax[1].set(xlabel="t", ylabel="largest principal angle (deg)",
            yscale="symlog", title="row-space angles")
  ax[1].legend(fontsize=8)
  f_ode, f_gd = x @ w_ode[-1].T, x @ w_gd[-1].T
  ax[2].scatter(*f_ode.T, c=y, s=8, cmap="coolwarm", label="ODE")
  ax[2].scatter(*f_gd.T, c=y, s=30, cmap="coolwarm", marker="x", alpha=0.4,
                label="GD")
  ax[2].set(title=f"outputs f(x) at t={ts[-1]:g}", xlabel="f₁", ylabel="f₂")
  ax[2].legend(fontsize=8)
  _common.save_figure(fig, args.out, "dynamics_ode_vs_gd_fig3.png")

  fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
  ax[0].loglog(widths, timing["gd_step_s"], "o-", label="projected GD step")
  ax[0].loglog(widths, timing["ode_euler_step_s"], "s-",
               label="ODE step (Euler eq. 12)")
  ax[0].set(xlabel="hidden width h", ylabel="seconds per step",
            title="time per step")
  ax[0].legend()
  ax[1].plot(svm["t"], svm["ode"], "ko-", label="ODE")
  ax[1].plot(svm["t"], svm["gd"], "C0s--", label="projected GD")
  ax[1].set(xlabel="t", ylabel="test accuracy", ylim=(0.4, 1.02),
            title="linear SVM on f(x) (digits 0 vs 1)")
  ax[1].legend()
  _common.save_figure(fig, args.out, "dynamics_ode_vs_gd_fig4.png")

  summary = dict(
      n=n, d=d, h=h, z=z, lr=lr, steps=steps,
      final_angle_ode_vs_gd_deg=float(ang_gd[-1]),
      max_angle_ode_vs_gd_deg=float(ang_gd.max()),
      final_angle_ode_vs_raw_eq11_deg=float(ang_raw[-1]),
      max_angle_ode_vs_raw_eq11_deg=float(ang_raw.max()),
      final_angle_ode_vs_theorem3_deg=float(ang_ode_opt[-1]),
      max_abs_output_diff_ode_vs_gd=float(np.abs(w_ode - w_gd).max()),
      final_loss=dict(ode=float(loss(w_ode)[-1]), gd=float(loss(w_gd)[-1]),
                      raw_eq11=float(loss(w_raw)[-1]),
                      optimum=float(lam[:z].sum())),
      svm_final=dict(ode=svm["ode"][-1], gd=svm["gd"][-1]),
      gd_over_ode_step_time=[g / o for g, o in zip(timing["gd_step_s"],
                                                   timing["ode_euler_step_s"])])
  result = dict(summary=summary, ts=ts, loss_ode=loss(w_ode),
                loss_gd=loss(w_gd), loss_raw_eq11=loss(w_raw),
                angle_ode_vs_gd_deg=ang_gd, angle_ode_vs_raw_deg=ang_raw,
                angle_ode_vs_theorem3_deg=ang_ode_opt, svm=svm, timing=timing)
  _common.save_json(args.out, "dynamics_ode_vs_gd.json", result)
  print(summary)
  print("width  gd_step_us  ode_step_us")
  for hw, g, o in zip(widths, timing["gd_step_s"], timing["ode_euler_step_s"]):
    print(f"{hw:5d}  {1e6 * g:10.1f}  {1e6 * o:11.1f}")


if __name__ == "__main__":
  main()
