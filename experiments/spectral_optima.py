"""Trained models vs the closed forms of ssljax.theory.spectral.

Papers: Balestriero & LeCun 2022 (arXiv 2205.11508); Cabannes et al. 2023 (arXiv
2303.15256).

    .venv/bin/python experiments/spectral_optima.py --out runs/spectral [--fast]

Synthetic data: C = 4 Gaussian classes in R^6, two noisy views per sample.
  * free Z (N, k) trained by L-BFGS (SciPy, jax gradients, float64, 3
    random starts, best kept) on VIC² ‖ZZᵀ − G‖², squared-variance VICReg
    and BarlowTwins (λ = 1), under G_sup (supervised; class-normalised for
    BarlowTwins) and G_ssl (views graph; /(V − 1) for BarlowTwins), against
    `optimal_embedding`: relative ‖ZZᵀ − Z*Z*ᵀ‖ (not for BarlowTwins, whose
    column scale is free), the largest principal angle between span(Z) and
    span(Z*), and the loss gap;
  * a linear network Z = XW trained on VIC² against `linear_optimal_weights`;
  * a kernel model Z = Kα with penalty ridge·Tr(αᵀKα) = ridge·Tr(ZᵀK⁻¹Z),
    trained on α, against `kernel_embedding` (also out of sample).
Writes spectral_optima.png and spectral_optima.json.
"""

from __future__ import annotations

import sys

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import scipy.optimize  # noqa: E402

import _common  # noqa: E402
from ssljax import graphs  # noqa: E402
from ssljax.theory import spectral  # noqa: E402


def _vic2(z, g):
  return jnp.sum((z @ z.T - g)**2)


def _vicreg_squared(z, g):
  n, k = z.shape
  return (jnp.sum((z.T @ z / n - jnp.eye(k))**2)
          + 2.0 / n**2 * jnp.trace(z.T @ (n * jnp.eye(n) - g) @ z))


def _bt(z, g):
  zt = z / jnp.linalg.norm(z, axis=0)
  return jnp.sum((zt.T @ g @ zt - jnp.eye(z.shape[1]))**2)


_LOSSES = {"vic2": _vic2, "vicreg_squared": _vicreg_squared,
           "barlow_twins": _bt}


def _lbfgs(fun, shape, seeds=(0, 1, 2), maxiter=20000):
  vg = jax.jit(jax.value_and_grad(lambda t: fun(t.reshape(shape))))
  best = None
  for seed in seeds:
    res = scipy.optimize.minimize(
        lambda t: tuple(np.asarray(v, np.float64) for v in vg(jnp.asarray(t))),
        np.random.default_rng(seed).standard_normal(int(np.prod(shape))),
        jac=True, method="L-BFGS-B",
        options={"maxiter": maxiter, "ftol": 1e-16, "gtol": 1e-12,
                 "maxcor": 30})
    if best is None or res.fun < best[1]:
      best = (jnp.asarray(res.x.reshape(shape)), float(res.fun))
  return best


def _rel(a, b):
  return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))


def _angle(a, b_star):
  """Largest principal angle (degrees) between column spaces of rank r.

  r is the numerical rank of the closed form b_star (zero columns from
  clipped eigenvalues do not count); a contributes its top-r left singular
  vectors.
  """
  ua, _, _ = np.linalg.svd(np.asarray(a), full_matrices=False)
  ub, sb, _ = np.linalg.svd(np.asarray(b_star), full_matrices=False)
  r = int(np.count_nonzero(sb > 1e-8 * sb[0]))
  return _common.subspace_angle_deg(ua[:, :r].T, ub[:, :r].T)


def _data(n_per_class, c=4, d=6, seed=0):
  rng = np.random.default_rng(seed)
  labels = np.repeat(np.arange(c), n_per_class)
  centres = 2.0 * rng.standard_normal((c, d))
  base = centres[labels] + 0.7 * rng.standard_normal((labels.size, d))
  views = [base + 0.3 * rng.standard_normal(base.shape) for _ in range(2)]
  x = np.concatenate(views)  # view-major: row v·n + i
  return jnp.asarray(x), np.concatenate([labels, labels])


def run(cfg) -> dict:
  """Trained free, linear and kernel embeddings vs their closed forms.

  Args:
    cfg: namespace with `fast` (bool): 3 instead of 6 samples per class.

  Returns:
    {"free": rows per (loss, graph), "linear", "kernel", "summary"}.
  """
  n_per_class = 3 if cfg.fast else 6
  c = 4
  x, labels = _data(n_per_class, c)
  n = x.shape[0]
  y = jnp.asarray(np.eye(c)[labels])
  g_sup = y @ y.T
  g_sup_n = y @ jnp.diag(1.0 / jnp.sum(y, 0)) @ y.T
  g_ssl = graphs.views_graph(n // 2, 2, dtype=jnp.float64)
  cases = {
      ("vic2", "G_sup"): (g_sup, c + 2),
      ("vicreg_squared", "G_sup"): (g_sup, c + 2),
      ("barlow_twins", "G_sup"): (g_sup_n, c),
      ("vic2", "G_ssl"): (g_ssl, n // 2),
      ("vicreg_squared", "G_ssl"): (g_ssl, n // 2),
      ("barlow_twins", "G_ssl"): (g_ssl, n // 2),  # /(V − 1) = 1 for V = 2
  }
  free = []
  for (loss, gname), (g, k) in cases.items():
    fn = _LOSSES[loss]
    z, value = _lbfgs(lambda z_: fn(z_, g), (n, k))
    z_star = spectral.optimal_embedding(g, k, loss=loss)
    row = {"loss": loss, "graph": gname, "n": n, "k": k,
           "loss_trained": value, "loss_closed": float(fn(z_star, g)),
           "max_angle_deg": _angle(z, z_star)}
    row["rel_gram_gap"] = (None if loss == "barlow_twins"
                           else _rel(z @ z.T, z_star @ z_star.T))
    free.append(row)
    print(row)

  # Linear network Z = XW on VIC² with the supervised graph.
  k_lin = c
  w_star = spectral.linear_optimal_weights(x, g_sup, k_lin)
  w, value = _lbfgs(lambda w_: _vic2(x @ w_, g_sup), (x.shape[1], k_lin))
  linear = {"n": n, "d": int(x.shape[1]), "k": k_lin, "loss_trained": value,
            "loss_closed": float(_vic2(x @ w_star, g_sup)),
            "rel_gram_gap": _rel((x @ w) @ (x @ w).T,
                                 (x @ w_star) @ (x @ w_star).T),
            "max_angle_deg": _angle(x @ w, x @ w_star)}
  print("linear", linear)

  # Kernel model Z = Kα, penalty ridge·Tr(αᵀKα), Laplacian kernel.
  ridge, k_ker, sigma = 1.0, c, 2.0
  kmat = spectral.laplacian_kernel(x, x, sigma)
  emb = spectral.kernel_embedding(kmat, g_sup, k_ker, ridge)

  def kernel_obj(alpha):
    z_ = kmat @ alpha
    return _vic2(z_, g_sup) + ridge * jnp.trace(alpha.T @ kmat @ alpha)

  alpha, value = _lbfgs(kernel_obj, (n, k_ker))
  z_ker = kmat @ alpha
  x_test, _ = _data(n_per_class, c, seed=1)
  cross = spectral.laplacian_kernel(x_test, x, sigma)
  f_closed = spectral.kernel_embedding_features(emb, cross)
  f_trained = cross @ alpha
  kernel = {"n": n, "k": k_ker, "ridge": ridge, "loss_trained": value,
            "loss_closed": float(kernel_obj(emb.coef)),
            "rel_gram_gap": _rel(z_ker @ z_ker.T, emb.z @ emb.z.T),
            "max_angle_deg": _angle(z_ker, emb.z),
            "rel_gram_gap_out_of_sample": _rel(f_trained @ f_trained.T,
                                               f_closed @ f_closed.T)}
  print("kernel", kernel)

  gram_gaps = [r["rel_gram_gap"] for r in free if r["rel_gram_gap"] is not None]
  summary = {
      "max_rel_gram_gap_free": max(gram_gaps),
      "max_angle_deg_free": max(r["max_angle_deg"] for r in free),
      "max_rel_loss_gap_free": max(
          (r["loss_trained"] - r["loss_closed"]) / max(abs(r["loss_closed"]), 1)
          for r in free),
      "linear_rel_gram_gap": linear["rel_gram_gap"],
      "kernel_rel_gram_gap": kernel["rel_gram_gap"],
      "kernel_rel_gram_gap_out_of_sample": kernel["rel_gram_gap_out_of_sample"],
  }
  print(summary)
  return {"free": free, "linear": linear, "kernel": kernel,
          "summary": summary}


def plot(result: dict, out) -> None:
  """Writes spectral_optima.png under `out` from the result of `run`."""
  free, linear, kernel = result["free"], result["linear"], result["kernel"]
  fig, axes = plt.subplots(1, 2, figsize=(11, 4))
  names = ([f"{r['loss']}\n{r['graph']}" for r in free]
           + ["linear\nVIC²", "kernel\nVIC²", "kernel\nout of sample"])
  gaps = ([r["rel_gram_gap"] if r["rel_gram_gap"] is not None else np.nan
           for r in free]
          + [linear["rel_gram_gap"], kernel["rel_gram_gap"],
             kernel["rel_gram_gap_out_of_sample"]])
  floor = 1e-16
  axes[0].bar(range(len(gaps)), [max(gv, floor) if np.isfinite(gv) else 0
                                 for gv in gaps])
  axes[0].set_yscale("log")
  axes[0].set_xticks(range(len(names)), names, fontsize=6)
  axes[0].set_ylabel("‖ZZᵀ − Z*Z*ᵀ‖ / ‖Z*Z*ᵀ‖ (trained vs closed form)")
  angles = ([r["max_angle_deg"] for r in free]
            + [linear["max_angle_deg"], kernel["max_angle_deg"]])
  axes[1].bar(range(len(angles)), np.maximum(angles, 1e-12))
  axes[1].set_yscale("log")
  axes[1].set_xticks(range(len(angles)), names[:len(angles)], fontsize=6)
  axes[1].set_ylabel("largest principal angle (degrees)")
  _common.save_figure(fig, out, "spectral_optima.png")


def main(argv=None):
  return _common.run_experiment(__doc__, "spectral_optima", run, plot, argv)


if __name__ == "__main__":
  main(sys.argv[1:])
