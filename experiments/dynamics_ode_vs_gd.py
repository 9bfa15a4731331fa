"""Esser et al. 2023 Figs. 3–4: output ODE (eq. 9) vs projected GD (eq. 11).

Paper: Esser, Mukherjee & Ghoshdastidar 2023, arXiv 2309.02011.

Data, two classes × at most 200 images each, scaled to [0, 1] and centred;
x⁺ = x + noise, x⁻ an independent sample; A from Esser et al. 2023 eq. 7:

* digits 0 and 1 of scikit-learn's bundled `load_digits` (8 × 8, d = 64);
* Fashion-MNIST classes 0 (T-shirt/top) and 6 (Shirt), the first 200 of
  each in the IDX train file, read with `ssljax.data.find_fashion_mnist_files`
  and the IDX reader of `ssljax.data.fashion_mnist`. A hard pair on purpose:
  0 vs 9 (ankle boot) is separable on any 2-d projection (SVM 0.995), so it
  could not show a difference between embeddings. Each image is averaged
  over 4 × 4 blocks to 7 × 7 (d = 49), as `load_digits` counts pixels of a
  32 × 32 bitmap over 4 × 4 blocks; this keeps the same h ≥ d, lr and steps
  as the digits (at d = 784 the projected GD needs h ≥ 784 and a 784 × 784
  eigh per step). Skipped, with a message in the JSON, if the files are
  missing.

* Fig. 3: loss Tr(WAWᵀ) and outputs of `stiefel_flow` (the ODE, solved by
  diffrax) against `projected_gradient_descent` at t = lr·step, with the
  Theorem 2 (tangent) directions + polar retraction, and the literal eq. 11
  (raw step + polar) for contrast; subspace angles between row spaces. One
  row per data set.
* Fig. 4 left: wall time per step against the hidden width h for an ODE
  step (Euler, eq. 12, cost independent of h) and a projected-GD step
  (digits A).
* Fig. 4 right: linear-SVM (scikit-learn LinearSVC) test accuracy of the
  embeddings f(x) = W x from the ODE and from GD along training, both data
  sets.

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
from ssljax.data import fashion_mnist  # noqa: E402
from ssljax.theory import dynamics  # noqa: E402

FASHION_CLASSES = (0, 6)  # T-shirt/top vs Shirt
FASHION_BLOCK = 4  # 28 × 28 → 7 × 7 block means


def _orthonormal(rng, rows, cols):
  return np.linalg.qr(rng.normal(size=(rows, cols)))[0]


def _svm_accuracy(x_tr, y_tr, x_te, y_te, w):
  clf = LinearSVC(C=1.0, max_iter=20000).fit(x_tr @ w.T, y_tr)
  return float(clf.score(x_te @ w.T, y_te))


def _digits():
  digits = load_digits()
  keep = np.flatnonzero(np.isin(digits.target, (0, 1)))
  keep = np.concatenate([keep[digits.target[keep] == c][:200] for c in (0, 1)])
  return digits.data[keep] / 16.0, digits.target[keep]


def _fashion_mnist():
  """(x, y) of FASHION_CLASSES, 200 train images each, or None if missing."""
  root = fashion_mnist.find_fashion_mnist_files()
  if root is None:
    return None
  images, labels = fashion_mnist.read_split(root, "train")  # validated IDX
  keep = np.concatenate([np.flatnonzero(labels == c)[:200]
                         for c in FASHION_CLASSES])
  side = 28 // FASHION_BLOCK
  x = (images[keep].astype(np.float64) / 255.0).reshape(
      -1, side, FASHION_BLOCK, side, FASHION_BLOCK).mean((2, 4))
  return x.reshape(len(keep), -1), labels[keep].astype(np.int64)


def _ode_vs_gd(x, y, rng, *, h, z, lr, steps):
  """Fig. 3 trajectories and Fig. 4 (right) SVM accuracies on one data set."""
  x = x - x.mean(0)
  n, d = x.shape
  x_pos = x + 0.1 * rng.normal(size=x.shape)
  x_neg = x[rng.permutation(n)]
  a = np.asarray(dynamics.contrastive_data_matrix(x, x_pos, x_neg))
  lam, v = np.linalg.eigh(a)

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

  x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.5,
                                            stratify=y, random_state=0)
  svm_at = np.linspace(0, len(idx) - 1, 6).astype(int)
  svm = dict(t=ts[svm_at],
             ode=[_svm_accuracy(x_tr, y_tr, x_te, y_te, w_ode[k])
                  for k in svm_at],
             gd=[_svm_accuracy(x_tr, y_tr, x_te, y_te, w_gd[k])
                 for k in svm_at])
  return dict(x=x, y=y, a=a, lam=lam, n=n, d=d, w1=w1, w2=w2, ts=ts,
              w_ode=w_ode, w_gd=w_gd,
              loss_ode=loss(w_ode), loss_gd=loss(w_gd), loss_raw=loss(w_raw),
              ang_gd=angle(w_ode, w_gd), ang_raw=angle(w_ode, w_raw),
              ang_ode_opt=angle(w_ode, np.broadcast_to(bottom, w_ode.shape)),
              svm=svm)


def _summary(r, z):
  return dict(
      n=r["n"], d=r["d"],
      final_angle_ode_vs_gd_deg=float(r["ang_gd"][-1]),
      max_angle_ode_vs_gd_deg=float(r["ang_gd"].max()),
      final_angle_ode_vs_raw_eq11_deg=float(r["ang_raw"][-1]),
      max_angle_ode_vs_raw_eq11_deg=float(r["ang_raw"].max()),
      final_angle_ode_vs_theorem3_deg=float(r["ang_ode_opt"][-1]),
      max_abs_output_diff_ode_vs_gd=float(np.abs(r["w_ode"]
                                                 - r["w_gd"]).max()),
      final_loss=dict(ode=float(r["loss_ode"][-1]),
                      gd=float(r["loss_gd"][-1]),
                      raw_eq11=float(r["loss_raw"][-1]),
                      optimum=float(r["lam"][:z].sum())),
      svm_final=dict(ode=r["svm"]["ode"][-1], gd=r["svm"]["gd"][-1]))


def _curves(r):
  return dict(ts=r["ts"], loss_ode=r["loss_ode"], loss_gd=r["loss_gd"],
              loss_raw_eq11=r["loss_raw"], angle_ode_vs_gd_deg=r["ang_gd"],
              angle_ode_vs_raw_deg=r["ang_raw"],
              angle_ode_vs_theorem3_deg=r["ang_ode_opt"], svm=r["svm"])


def _plot_row(ax, r, z, h, name):
  ts = r["ts"]
  ax[0].plot(ts, r["loss_ode"], "k-", lw=2, label="ODE (eq. 9, diffrax)")
  ax[0].plot(ts, r["loss_gd"], "C0--", label="projected GD, tangent + polar")
  ax[0].plot(ts, r["loss_raw"], "C1:", label="eq. 11 literal (raw + polar)")
  ax[0].axhline(r["lam"][:z].sum(), color="r", lw=0.8,
                label="Σ bottom-z λ(A)")
  ax[0].set(xlabel="t = lr·step", ylabel="Tr(WAWᵀ)",
            title=f"{name}: loss (h={h}, d={r['d']})")
  ax[0].legend(fontsize=8)
  ax[1].plot(ts, r["ang_gd"], label="ODE vs GD (tangent)")
  ax[1].plot(ts, r["ang_raw"], label="ODE vs eq. 11 literal")
  ax[1].plot(ts, r["ang_ode_opt"], label="ODE vs Theorem 3 subspace")
  ax[1].set(xlabel="t", ylabel="largest principal angle (deg)",
            yscale="symlog", title=f"{name}: row-space angles")
  ax[1].legend(fontsize=8)
  f_ode, f_gd = r["x"] @ r["w_ode"][-1].T, r["x"] @ r["w_gd"][-1].T
  ax[2].scatter(*f_ode.T, c=r["y"], s=8, cmap="coolwarm", label="ODE")
  ax[2].scatter(*f_gd.T, c=r["y"], s=30, cmap="coolwarm", marker="x",
                alpha=0.4, label="GD")
  ax[2].set(title=f"{name}: outputs f(x) at t={ts[-1]:g}", xlabel="f₁",
            ylabel="f₂")
  ax[2].legend(fontsize=8)


def run(cfg) -> dict:
  """Output ODE vs projected GD on digits (and Fashion-MNIST when present).

  Args:
    cfg: namespace with `fast` (bool): h = 80, 300 steps, two widths.

  Returns:
    {"json": what dynamics_ode_vs_gd.json holds (summary, curves, timing,
    fashion_mnist), "rows": [(run, name)] for the figures, "timing", "h",
    "z", "widths"}.
  """
  fast = cfg.fast
  # h >= d (64 digits, 49 Fashion-MNIST) for W1ᵀW1 = I_d
  h, z, lr = (80 if fast else 128), 2, 0.01
  steps = 300 if fast else 3000
  widths = [64, 256] if fast else [64, 128, 256, 512, 1024, 2048, 4096]
  rng = np.random.default_rng(0)

  digits = _ode_vs_gd(*_digits(), rng, h=h, z=z, lr=lr, steps=steps)
  fashion_data = _fashion_mnist()
  fashion = None if fashion_data is None else _ode_vs_gd(
      *fashion_data, np.random.default_rng(1), h=h, z=z, lr=lr, steps=steps)
  names = {c: fashion_mnist.CLASS_NAMES[c] for c in FASHION_CLASSES}
  fashion_name = "Fashion-MNIST {} vs {}".format(*names.values())

  # ---- Fig. 4 left: time per step against width (digits A) ---------------
  a, d = digits["a"], digits["d"]
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
  w0 = digits["w2"] @ digits["w1"]
  timing["ode_diffrax_solve_s"] = _common.median_time(
      lambda: dynamics.stiefel_flow(a, w0, digits["ts"]), reps=reps)

  # Top-level summary and curves: digits (unchanged keys); "fashion_mnist"
  # holds the same quantities for the Fashion-MNIST pair, or "skipped".
  if fashion is None:
    skipped = ("Fashion-MNIST IDX files not found "
               "(ssljax.data.find_fashion_mnist_files() is None; install "
               "dataset-fashion-mnist or set $"
               f"{fashion_mnist.FASHION_MNIST_ENV_VAR}); part skipped")
    print(skipped)
    fashion_summary = fashion_curves = dict(skipped=skipped)
  else:
    fashion_summary = dict(
        classes=list(FASHION_CLASSES), class_names=list(names.values()),
        block=FASHION_BLOCK, **_summary(fashion, z))
    fashion_curves = _curves(fashion)
  summary = dict(
      **_summary(digits, z), h=h, z=z, lr=lr, steps=steps,
      gd_over_ode_step_time=[g / o for g, o in zip(timing["gd_step_s"],
                                                   timing["ode_euler_step_s"])],
      fashion_mnist=fashion_summary)
  result = dict(summary=summary, **_curves(digits), timing=timing,
                fashion_mnist=fashion_curves)
  print(summary)
  print("width  gd_step_us  ode_step_us")
  for hw, g, o in zip(widths, timing["gd_step_s"], timing["ode_euler_step_s"]):
    print(f"{hw:5d}  {1e6 * g:10.1f}  {1e6 * o:11.1f}")
  rows = [(digits, "digits 0 vs 1")]
  if fashion is not None:
    rows.append((fashion, fashion_name))
  return dict(json=result, rows=rows, timing=timing, h=h, z=z,
              widths=widths)


def plot(result: dict, out) -> None:
  """Writes the Fig. 3 and Fig. 4 PNGs under `out` from `run`'s result."""
  rows, timing, widths = result["rows"], result["timing"], result["widths"]
  h, z = result["h"], result["z"]
  fig, ax = plt.subplots(len(rows), 3, figsize=(16, 4.3 * len(rows)),
                         squeeze=False)
  for row, (r, name) in zip(ax, rows):
    _plot_row(row, r, z, h, name)
  _common.save_figure(fig, out, "dynamics_ode_vs_gd_fig3.png")

  fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
  ax[0].loglog(widths, timing["gd_step_s"], "o-", label="projected GD step")
  ax[0].loglog(widths, timing["ode_euler_step_s"], "s-",
               label="ODE step (Euler eq. 12)")
  ax[0].set(xlabel="hidden width h", ylabel="seconds per step",
            title="time per step (digits A)")
  ax[0].legend()
  for k, (r, name) in enumerate(rows):
    ax[1].plot(r["svm"]["t"], r["svm"]["ode"], f"C{k}o-", label=f"{name}, ODE")
    ax[1].plot(r["svm"]["t"], r["svm"]["gd"], f"C{k}s--", mfc="none", ms=9,
               label=f"{name}, projected GD")
  ax[1].set(xlabel="t", ylabel="test accuracy", ylim=(0.4, 1.02),
            title="linear SVM on f(x)")
  ax[1].legend(fontsize=8)
  _common.save_figure(fig, out, "dynamics_ode_vs_gd_fig4.png")


def main(argv=None):
  args = _common.parse_args(__doc__.splitlines()[0], argv)
  result = run(args)
  plot(result, args.out)
  _common.save_json(args.out, "dynamics_ode_vs_gd.json", result["json"])


if __name__ == "__main__":
  main()
