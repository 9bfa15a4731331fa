"""Kernel closed form vs trained networks on Fashion-MNIST (issue 4, exp. 7).

    .venv/bin/python experiments/theory_vs_training.py --out runs/theory_vs_training [--fast] [--data-dir DIR]

Question: how far does the closed form of the kernel regime (Cabannes et al.
2023, arXiv 2303.15256, §5, with M = G − (λ/2)K⁻¹) predict what gradient
training of a network on the same loss and the same graph learns?

Data. n Fashion-MNIST train images (seeded subset) with V views each, built
once by the training view engine (`ssljax.data.device_views`: pad-and-crop by 2 px, flip,
Gaussian noise 0.05; seeded), flattened to 784 pixels in [0, 1], stacked
view-major (row v·n + i), N = nV rows. Test: the first M test images, clean.

Graphs (N × N, rows): G_ssl = `views_graph(n, V)` (zero diagonal, degree
V − 1) and G_sup = `supervised_graph` of the row labels (same label across
all views and images, diagonal included).

Closed form. Laplacian kernel k(x, x') = exp(−‖x − x'‖/σ) on the pixels,
σ = median pairwise distance of up to 1,000 random training rows (median
heuristic), K + 1e-8·I for safety. `kernel_embedding(K, G, k, ridge)` gives
Z* = argmin ‖ZZᵀ − G‖² + ridge·Tr(ZᵀK⁻¹Z) (top eigenpairs of
G − (ridge/2)K⁻¹, clipped); ridge = 1.0, which is the mean kernel
eigenvalue Tr(K)/N = 1 (diag of this kernel is 1): large enough to choose
within the degenerate top eigenspace of G_ssl (all view-invariant
vectors have eigenvalue V − 1), small enough to keep all k eigenvalues of
G_ssl − (ridge/2)K⁻¹ positive. Test features by the out-of-sample map
f(x) = Z*ᵀK⁻¹k(X, x) (`kernel_embedding_features`).

Network. A flax MLP (`MLPEncoder`(hidden, hidden), no BatchNorm, + a linear
layer to k outputs whose init is scaled down by 0.01 in variance), float32,
on pixels centred by the training-row mean (the kernel is unchanged by
centring), trained full batch on all N rows with Adam (linear warm-up, then
cosine decay) on the plain loss ‖f(X)f(X)ᵀ − G‖²
(`losses.spectral_contrastive`, no regulariser, no weight decay), same G
and same k as the closed form, one run per graph from the same init.

Measured, per graph and for {closed form, network}: linear-probe test
accuracy (`probes.linear_probe`: trained on the N training-row features
with their labels, scored on the M test images); on the training rows, the
principal angles between span(Z_net) and span(Z*) (r = numerical rank of Z*;
Z_net contributes its top-r left singular vectors), their mean cos²
(random r-subspaces give r/N) and the relative ‖ZZᵀ − Z*Z*ᵀ‖/‖Z*Z*ᵀ‖; the
plain loss of both against the free (interpolation-regime) optimum
‖G‖² − Σ_{i<=k} max(μ_i(G), 0)², the regularised objective of both (Z* is
its global minimiser); the fraction of ‖Z‖² in the top eigenspace of G
(view-invariant vectors for G_ssl, span(Y) for G_sup). Curves over training
steps of the loss, angles and Gram gap. Writes theory_vs_training.png and
theory_vs_training.json (every plotted number).
"""

from __future__ import annotations

import argparse
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import flax.linen as nn  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import scipy.linalg  # noqa: E402

import _common  # noqa: E402
from ssljax import graphs  # noqa: E402
from ssljax.probes import linear_probe  # noqa: E402
from ssljax.losses import spectral_contrastive  # noqa: E402
from ssljax.models.encoders import MLPEncoder  # noqa: E402
from ssljax.theory import spectral  # noqa: E402

_FULL = {"n": 1000, "views": 2, "k": 32, "test": 2000, "hidden": 256,
         "steps": 600, "warmup": 50, "lr": 3e-3, "log_every": 25,
         "train_split": "train"}
_FAST = {"n": 150, "views": 2, "k": 16, "test": 300, "hidden": 64,
         "steps": 60, "warmup": 10, "lr": 3e-3, "log_every": 10,
         "train_split": "train[:3000]"}
_RIDGE = 1.0
_JITTER = 1e-8
_SEED = 0
_AUGMENT = {"crop": "pad_and_crop", "pad": 2, "flip_prob": 0.5, "noise_std": 0.05}
_LAST_INIT_SCALE = 0.01


# ---------------------------------------------------------------------------
# Data, kernel, graphs.
# ---------------------------------------------------------------------------


def _load(cfg, data_dir):
  """(x_rows (N, 784), y_rows (N,), x_test (M, 784), y_test (M,)), float64."""
  _, y, views, test, y_test = _common.augmented_subset(cfg, data_dir, _SEED,
                                                      _AUGMENT)
  x_rows = np.concatenate(views).reshape(cfg["n"] * cfg["views"], -1)
  x_test = test.reshape(len(y_test), -1) / 255.0
  return (x_rows.astype(np.float64), np.tile(y, cfg["views"]),
          x_test.astype(np.float64), y_test)


def _median_sigma(x_rows, max_rows=1000):
  sub = x_rows[np.random.default_rng(_SEED + 1).permutation(len(x_rows))
               [:max_rows]]
  sq = np.sum(sub**2, 1)
  d2 = np.maximum(sq[:, None] + sq[None] - 2 * sub @ sub.T, 0.0)
  return float(np.median(np.sqrt(d2[np.triu_indices(len(sub), 1)])))


def _graphs(cfg, y_rows):
  return {"G_ssl": graphs.views_graph(cfg["n"], cfg["views"],
                                      dtype=jnp.float64),
          "G_sup": graphs.supervised_graph(jnp.asarray(y_rows),
                                           dtype=jnp.float64)}


# ---------------------------------------------------------------------------
# Comparisons (numpy float64).
# ---------------------------------------------------------------------------


def _plain_loss(z, g):
  z = np.asarray(z, np.float64)
  gz = np.asarray(g) @ z
  return float(np.sum((z.T @ z)**2) - 2 * np.sum(z * gz)
               + np.sum(np.asarray(g)**2))


def _rank(z, rtol=1e-6):
  s = np.linalg.svd(np.asarray(z, np.float64), compute_uv=False)
  return int(np.count_nonzero(s > rtol * s[0])) if s[0] > 0 else 0


def _compare(z, z_star, r):
  """Principal angles (r-dim spans) and relative Gram gap of z vs z_star."""
  z, z_star = np.asarray(z, np.float64), np.asarray(z_star, np.float64)
  q = np.linalg.svd(z, full_matrices=False)[0][:, :r]
  q_star = np.linalg.svd(z_star, full_matrices=False)[0][:, :r]
  cos = np.clip(np.linalg.svd(q.T @ q_star, compute_uv=False), 0.0, 1.0)
  gap2 = (np.sum((z.T @ z)**2) - 2 * np.sum((z.T @ z_star)**2)
          + np.sum((z_star.T @ z_star)**2))
  return {"cos2": cos**2, "mean_cos2": float(np.mean(cos**2)),
          "max_angle_deg": float(np.degrees(np.arccos(cos.min()))),
          "rel_gram_gap": float(np.sqrt(max(gap2, 0.0))
                                / np.linalg.norm(z_star.T @ z_star))}


def _top_fraction(z, u_top):
  """Fraction of ‖Z‖² inside span(u_top) (orthonormal columns)."""
  z = np.asarray(z, np.float64)
  return float(np.sum((u_top.T @ z)**2) / max(np.sum(z**2), 1e-300))


def _top_eigenspace(g):
  mu, u = np.linalg.eigh(np.asarray(g, np.float64))
  keep = mu > 1e-8 * np.max(np.abs(mu))
  return u[:, keep]


# ---------------------------------------------------------------------------
# Network.
# ---------------------------------------------------------------------------


class _Net(nn.Module):
  """MLPEncoder (ReLU, no BatchNorm) followed by a linear map to k outputs."""
  hidden: int
  k: int

  @nn.compact
  def __call__(self, x):
    h = MLPEncoder(features=(self.hidden, self.hidden), use_bn=False)(x)
    # Small last layer: the quartic loss is badly conditioned at large Z.
    init = nn.initializers.variance_scaling(_LAST_INIT_SCALE, "fan_in",
                                            "normal")
    return nn.Dense(self.k, kernel_init=init)(h)


def _train(cfg, x32, g, z_star, r, u_top, params0):
  """Full-batch Adam on ‖f(X)f(X)ᵀ − G‖²; curves of the comparisons."""
  model = _Net(cfg["hidden"], cfg["k"])
  x_Nx784 = x32  # centred pixels, float32
  g_NxN = jnp.asarray(g, jnp.float32)
  opt = optax.adam(optax.warmup_cosine_decay_schedule(
      0.0, cfg["lr"], cfg["warmup"], cfg["steps"]))

  @jax.jit
  def step(params, opt_state, x, g_):
    loss, grads = jax.value_and_grad(
        lambda p: spectral_contrastive(model.apply(p, x), g_))(params)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  embed = jax.jit(model.apply)
  params, opt_state = params0, opt.init(params0)
  curve = {k: [] for k in ("step", "loss", "mean_cos2", "max_angle_deg",
                           "rel_gram_gap", "top_fraction")}

  def log(t):
    z = np.asarray(embed(params, x_Nx784), np.float64)
    c = _compare(z, z_star, r)
    curve["step"].append(t)
    curve["loss"].append(_plain_loss(z, g))
    for key in ("mean_cos2", "max_angle_deg", "rel_gram_gap"):
      curve[key].append(c[key])
    curve["top_fraction"].append(_top_fraction(z, u_top))

  t0 = time.perf_counter()
  for t in range(cfg["steps"]):
    if t % cfg["log_every"] == 0:
      log(t)
    params, opt_state, _ = step(params, opt_state, x_Nx784, g_NxN)
  log(cfg["steps"])
  seconds = time.perf_counter() - t0
  return params, curve, seconds


# ---------------------------------------------------------------------------
# Main.
# ---------------------------------------------------------------------------


def _probe(train_features, y_rows, test_features, y_test):
  return float(linear_probe(np.asarray(train_features), y_rows,
                            np.asarray(test_features), y_test)["test_accuracy"])


def run(run_cfg) -> dict:
  """Closed form vs trained networks, per graph.

  Args:
    run_cfg: namespace with `fast` (bool) and `data_dir` (tfds data dir or
      None).

  Returns:
    {"config", "reference", "graphs": per-graph results, "summary"}.
  """
  cfg = dict(_FAST if run_cfg.fast else _FULL)
  t_start = time.perf_counter()

  x_rows, y_rows, x_test, y_test = _load(cfg, run_cfg.data_dir)
  n_rows = len(y_rows)
  sigma = _median_sigma(x_rows)
  kmat = np.array(spectral.laplacian_kernel(x_rows, x_rows, sigma))
  kmat[np.diag_indices(n_rows)] += _JITTER
  cross = spectral.laplacian_kernel(x_test, x_rows, sigma)
  chol = scipy.linalg.cho_factor(kmat)

  def kernel_penalty(z):  # ridge·Tr(ZᵀK⁻¹Z)
    z = np.asarray(z, np.float64)
    return _RIDGE * float(np.sum(z * scipy.linalg.cho_solve(chol, z)))

  model = _Net(cfg["hidden"], cfg["k"])
  params0 = model.init(jax.random.PRNGKey(_SEED),
                       jnp.zeros((1, x_rows.shape[1]), jnp.float32))
  embed = jax.jit(model.apply)
  pixel_mean = x_rows.mean(0)
  x32, xt32 = (jnp.asarray(x_rows - pixel_mean, jnp.float32),
               jnp.asarray(x_test - pixel_mean, jnp.float32))
  reference = {
      "chance": 0.1,
      "probe_raw_pixels": _probe(x_rows, y_rows, x_test, y_test),
      "probe_network_at_init": _probe(embed(params0, x32), y_rows,
                                      embed(params0, xt32), y_test),
  }
  print("reference", reference, flush=True)

  results = {}
  for gname, g in _graphs(cfg, y_rows).items():
    t0 = time.perf_counter()
    emb = spectral.kernel_embedding(kmat, g, cfg["k"], _RIDGE)
    closed_seconds = time.perf_counter() - t0
    z_star = np.asarray(emb.z)
    r = _rank(z_star)
    u_top = _top_eigenspace(g)
    z_free = spectral.optimal_embedding(g, cfg["k"])
    free_loss = _plain_loss(z_free, g)
    g_sq = float(np.sum(np.asarray(g)**2))
    closed = {
        "probe": _probe(z_star, y_rows,
                        spectral.kernel_embedding_features(emb, cross), y_test),
        "plain_loss": _plain_loss(z_star, g),
        "objective": _plain_loss(z_star, g) + kernel_penalty(z_star),
        "eigenvalues": np.asarray(emb.eigenvalues),
        "singular_values": np.linalg.svd(z_star, compute_uv=False),
        "rank": r, "top_fraction": _top_fraction(z_star, u_top),
        "seconds": closed_seconds,
    }
    print(gname, "closed", {k: v for k, v in closed.items()
                            if np.ndim(v) == 0}, flush=True)
    params, curve, train_seconds = _train(cfg, x32, g, z_star, r, u_top,
                                          params0)
    z_net = np.asarray(embed(params, x32), np.float64)
    cmp = _compare(z_net, z_star, r)
    net = {
        "probe": _probe(z_net, y_rows, embed(params, xt32), y_test),
        "plain_loss": _plain_loss(z_net, g),
        "objective": _plain_loss(z_net, g) + kernel_penalty(z_net),
        "singular_values": np.linalg.svd(z_net, compute_uv=False),
        "rank": _rank(z_net, 1e-3), "top_fraction": _top_fraction(z_net,
                                                                   u_top),
        "seconds": train_seconds,
    }
    print(gname, "network", {k: v for k, v in net.items() if np.ndim(v) == 0},
          flush=True)
    results[gname] = {
        "graph_sq_norm": g_sq, "free_optimum_loss": free_loss,
        "closed_form": closed, "network": net, "comparison": cmp,
        "random_subspace_mean_cos2": r / n_rows, "curve": curve,
        "network_vs_free_optimum": _compare(z_net, z_free, _rank(z_free)),
    }
    print(gname, "comparison", {k: v for k, v in cmp.items() if k != "cos2"},
          flush=True)

  summary = {}
  for gname, res in results.items():
    for kind in ("closed_form", "network"):
      summary[f"probe/{gname}/{kind}"] = res[kind]["probe"]
      summary[f"plain_loss_over_graph_sq/{gname}/{kind}"] = (
          res[kind]["plain_loss"] / res["graph_sq_norm"])
    summary[f"free_optimum_loss_over_graph_sq/{gname}"] = (
        res["free_optimum_loss"] / res["graph_sq_norm"])
    summary[f"mean_cos2/{gname}"] = res["comparison"]["mean_cos2"]
    summary[f"max_angle_deg/{gname}"] = res["comparison"]["max_angle_deg"]
    summary[f"rel_gram_gap/{gname}"] = res["comparison"]["rel_gram_gap"]
    summary[f"objective_gap_rel/{gname}"] = (
        (res["network"]["objective"] - res["closed_form"]["objective"])
        / abs(res["closed_form"]["objective"]))
  print("summary", summary, flush=True)

  config = dict(cfg, rows=n_rows, sigma=sigma, ridge=_RIDGE, jitter=_JITTER,
                kernel="laplacian", augment=_AUGMENT, seed=_SEED,
                loss="spectral_contrastive ‖ZZᵀ − G‖² (sum)",
                optimizer="adam, warm-up + cosine decay, full batch",
                last_init_scale=_LAST_INIT_SCALE, input="centred pixels",
                total_seconds=time.perf_counter() - t_start)
  return {"config": config, "reference": reference, "graphs": results,
          "summary": summary}


def plot(result: dict, out) -> None:
  """Writes theory_vs_training.png under `out` from the result of `run`."""
  cfg, reference = result["config"], result["reference"]
  results = result["graphs"]
  fig, axes = plt.subplots(2, 3, figsize=(15, 8))
  ax = axes[0, 0]
  labels, values = ["raw pixels", "net @ init"], [
      reference["probe_raw_pixels"], reference["probe_network_at_init"]]
  for gname, res in results.items():
    labels += [f"{gname}\nclosed form", f"{gname}\nnetwork"]
    values += [res["closed_form"]["probe"], res["network"]["probe"]]
  ax.bar(range(len(values)), values,
         color=["grey", "grey", "C0", "C1", "C2", "C3"][:len(values)])
  for i, v in enumerate(values):
    ax.text(i, v + 0.01, f"{v:.3f}", ha="center", fontsize=8)
  ax.set_xticks(range(len(values)), labels, fontsize=7)
  ax.set_ylim(0, 1)
  ax.set_ylabel("linear-probe test accuracy")
  ax.set_title(f"probe ({cfg['test']} test images)")
  for i, (key, ylabel, log) in enumerate([
      ("loss", "‖ZZᵀ − G‖² / ‖G‖²", True),
      ("mean_cos2", "mean cos² principal angles (net vs Z*)", False),
      ("rel_gram_gap", "‖ZZᵀ − Z*Z*ᵀ‖ / ‖Z*Z*ᵀ‖", True),
      ("top_fraction", "fraction of ‖Z‖² in top eigenspace of G", False)]):
    ax = axes.flat[i + 1]
    for j, (gname, res) in enumerate(results.items()):
      curve = res["curve"]
      y = np.asarray(curve[key], np.float64)
      if key == "loss":
        y = y / res["graph_sq_norm"]
        ax.axhline(res["closed_form"]["plain_loss"] / res["graph_sq_norm"],
                   color=f"C{2 * j}", ls="--", lw=1,
                   label=f"{gname} closed form")
        free = res["free_optimum_loss"] / res["graph_sq_norm"]
        if free > 1e-9:  # G_sup with k >= C: 0 up to rounding, not drawn
          ax.axhline(free, color=f"C{2 * j}", ls=":", lw=1,
                     label=f"{gname} free optimum")
      if key == "mean_cos2":
        ax.axhline(res["random_subspace_mean_cos2"], color=f"C{2 * j + 1}",
                   ls=":", lw=1, label=f"{gname} random subspace")
      if key == "top_fraction":
        ax.axhline(res["closed_form"]["top_fraction"], color=f"C{2 * j}",
                   ls="--", lw=1, label=f"{gname} closed form")
      ax.plot(curve["step"], y, color=f"C{2 * j + 1}",
              label=f"{gname} network")
    if log:
      ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel, fontsize=8)
    ax.legend(fontsize=6)
  ax = axes[1, 2]
  for j, (gname, res) in enumerate(results.items()):
    ax.semilogy(res["closed_form"]["singular_values"], "--",
                color=f"C{2 * j}", label=f"{gname} closed form")
    ax.semilogy(res["network"]["singular_values"], color=f"C{2 * j + 1}",
                label=f"{gname} network")
  ax.set_xlabel("index")
  ax.set_ylabel("singular values of Z (training rows)", fontsize=8)
  ax.legend(fontsize=6)
  _common.save_figure(fig, out, "theory_vs_training.png")


def main(argv=None):
  pre = argparse.ArgumentParser(add_help=False)
  pre.add_argument("--data-dir", default=None,
                   help="tfds data dir holding fashion_mnist_local")
  known, rest = pre.parse_known_args(argv)
  args = _common.parse_args(__doc__.splitlines()[0], rest)
  args.data_dir = known.data_dir
  result = run(args)
  plot(result, args.out)
  _common.save_json(args.out, "theory_vs_training.json", result)
  return result


if __name__ == "__main__":
  main(sys.argv[1:])
