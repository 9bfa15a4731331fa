"""Contrastive SSL dynamics on half moons (Esser et al. 2023, Ex. 1 / Fig. 1).

Paper: Esser, Mukherjee & Ghoshdastidar 2023, arXiv 2309.02011.

A linear 2-layer model f(x) = W2 W1 x (d = 2, hidden h, z = 1 output) on the
contrastive trace loss Tr(W A Wᵀ), A from Esser et al. 2023 eq. 7 with x⁺ = x +
noise and x⁻ an independent sample (a random permutation of the data):

* unconstrained gradient descent on (W1, W2) diverges (loss → −∞, ‖W‖ → ∞);
* with orthogonality constraints the output flow (eq. 9, `stiefel_flow`)
  converges, from every initialisation, to the Theorem 3 fixed points
  W → ±v_min (eigenvector of the most negative eigenvalue of A).

Run:  .venv/bin/python experiments/dynamics_half_moons.py --out runs/half_moons
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import make_moons  # noqa: E402

import _common  # noqa: E402
from ssljax.theory import dynamics  # noqa: E402


def _unconstrained_gd(a, w1, w2, lr, steps):
  """Plain GD on Tr(W2 W1 A W1ᵀ W2ᵀ); returns (loss, ‖W‖) per step."""
  def loss(w1, w2):
    w = w2 @ w1
    return jnp.trace(w @ a @ w.T)

  grad = jax.grad(loss, argnums=(0, 1))

  @jax.jit
  def run(w1, w2):
    def body(c, _):
      g1, g2 = grad(*c)
      new = (c[0] - lr * g1, c[1] - lr * g2)
      w = new[1] @ new[0]
      return new, (loss(*new), jnp.linalg.norm(w))
    return jax.lax.scan(body, (w1, w2), None, length=steps)[1]
  return run(w1, w2)


def run(cfg) -> dict:
  """Output flow (constrained) and plain GD (unconstrained) on half moons.

  Args:
    cfg: namespace with `fast` (bool): fewer samples, inits and steps.

  Returns:
    dict with eigenvalues_a, v_min, ts, t_gd, the constrained and
    unconstrained runs, and "summary".
  """
  n, h, n_init = (100, 8, 3) if cfg.fast else (400, 20, 8)
  t_end, n_t = (6.0, 30) if cfg.fast else (10.0, 200)
  lr, steps = 0.01, (200 if cfg.fast else 1000)
  rng = np.random.default_rng(0)

  x, _ = make_moons(n_samples=n, noise=0.05, random_state=0)
  x = x - x.mean(0)
  x_pos = x + 0.1 * rng.normal(size=x.shape)
  x_neg = x[rng.permutation(n)]
  a = np.asarray(dynamics.contrastive_data_matrix(x, x_pos, x_neg))
  lam, v = np.linalg.eigh(a)
  v_min = v[:, 0]

  ts = np.linspace(0.0, t_end, n_t)
  constrained = []
  for i in range(n_init):
    w1 = np.linalg.qr(rng.normal(size=(h, 2)))[0]
    w2 = np.linalg.qr(rng.normal(size=(h, 1)))[0].T
    w_t = np.asarray(dynamics.stiefel_flow(a, w2 @ w1, ts))[:, 0, :]
    constrained.append(dict(
        w=w_t, loss=np.einsum("td,de,te->t", w_t, a, w_t),
        final_alignment=abs(float(w_t[-1] @ v_min)),
        final_norm=float(np.linalg.norm(w_t[-1]))))

  unconstrained = []
  for i in range(n_init):
    w1 = rng.normal(size=(h, 2)) / np.sqrt(2)
    w2 = rng.normal(size=(1, h)) / np.sqrt(h)
    loss, norm = _unconstrained_gd(jnp.asarray(a), w1, w2, lr, steps)
    loss, norm = np.array(loss), np.array(norm)
    blown = ~(norm < 1e6)  # past this the finite-time blow-up is reached
    loss[blown], norm[blown] = np.nan, np.nan
    t_div = lr * (1 + np.argmax(blown)) if blown.any() else None
    unconstrained.append(dict(loss=loss, norm=norm, t_norm_above_1e6=t_div))

  t_gd = lr * np.arange(1, steps + 1)
  result = dict(
      eigenvalues_a=lam, v_min=v_min, ts=ts, t_gd=t_gd,
      constrained=[dict(w=c["w"], loss=c["loss"],
                        final_alignment=c["final_alignment"],
                        final_norm=c["final_norm"]) for c in constrained],
      unconstrained=unconstrained,
      summary=dict(
          min_final_alignment=min(c["final_alignment"] for c in constrained),
          max_final_loss_gap=max(abs(float(c["loss"][-1]) - float(lam[0]))
                                 for c in constrained),
          unconstrained_t_norm_above_1e6=[u["t_norm_above_1e6"]
                                          for u in unconstrained],
          unconstrained_max_norm=[float(np.nanmax(u["norm"]))
                                  for u in unconstrained]))
  print({k: v for k, v in result["summary"].items()})
  return result


def plot(result: dict, out) -> None:
  """Writes dynamics_half_moons.png under `out` from the result of `run`."""
  lam, v_min = result["eigenvalues_a"], result["v_min"]
  ts, t_gd = result["ts"], result["t_gd"]
  constrained, unconstrained = result["constrained"], result["unconstrained"]
  fig, ax = plt.subplots(1, 3, figsize=(15, 4.5))
  circle = np.linspace(0, 2 * np.pi, 200)
  ax[0].plot(np.cos(circle), np.sin(circle), "k:", lw=0.8)
  for c in constrained:
    ax[0].plot(c["w"][:, 0], c["w"][:, 1], "-")
    ax[0].plot(*c["w"][0], "ko", ms=3)
  for sgn in (1, -1):
    ax[0].plot(*(sgn * v_min), "r*", ms=14)
  ax[0].set(title="constrained: W(t) → ±v_min (red stars)", aspect="equal",
            xlabel="W[0]", ylabel="W[1]")
  for c in constrained:
    ax[1].plot(ts, c["loss"])
  ax[1].axhline(lam[0], color="r", ls="--", label="λ_min(A) (Theorem 3)")
  ax[1].set(title="constrained loss Tr(WAWᵀ)", xlabel="t")
  ax[1].legend()
  for u in unconstrained:
    ax[2].semilogy(t_gd, u["norm"])
  ax[2].set(title="unconstrained GD: ‖W‖ blows up (cut at 1e6)", xlabel="t = lr·step",
            ylabel="‖W2 W1‖")
  _common.save_figure(fig, out, "dynamics_half_moons.png")


def main(argv=None):
  return _common.run_experiment(__doc__, "dynamics_half_moons", run, plot,
                                argv)


if __name__ == "__main__":
  main()
