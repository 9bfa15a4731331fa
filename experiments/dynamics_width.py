"""Esser et al. 2023 Fig. 2: 2-layer non-linear vs linear networks, by width.

Paper: Esser, Mukherjee & Ghoshdastidar 2023, arXiv 2309.02011.

f_σ(x) = W2 σ(W1 x) and f(x) = W2 W1 x (W1: h × d orthonormal columns,
W2: z × h orthonormal rows) start from the same weights and are trained on
the contrastive loss (1), (1/n) Σ −f(x)ᵀ(f(x⁺) − f(x⁻)), by projected
gradient descent (Theorem 2 directions, polar retraction). Plotted: the mean
output difference (1/n) Σ ‖f_σ(x_i) − f(x_i)‖ at initialisation and after
training, against h, for σ = tanh, ReLU, sigmoid (mean ± std over inits).
Esser et al. 2023 Theorem 1 / Conjecture 1: the difference shrinks with h for
tanh (σ(0) = 0, σ'(0) = 1), more slowly for ReLU, and grows for sigmoid. Data:
half moons (d = 2), x⁺ = x + noise, x⁻ an independent sample.

Run:  .venv/bin/python experiments/dynamics_width.py --out runs/width
"""

import functools

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import make_moons  # noqa: E402

import _common  # noqa: E402

ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu,
               "sigmoid": jax.nn.sigmoid, "linear": lambda u: u}


def _forward(act, w1, w2, x):
  return ACTIVATIONS[act](x @ w1.T) @ w2.T


def _loss(act, w1, w2, x, xp, xn):
  f = functools.partial(_forward, act, w1, w2)
  return -jnp.mean(jnp.sum(f(x) * (f(xp) - f(xn)), axis=1))


def _polar(m):
  """U Vᵀ of a tall or wide m, via the small Gram (cheap on CPU)."""
  if m.shape[0] < m.shape[1]:
    return _polar(m.T).T
  mu, v = jnp.linalg.eigh(m.T @ m)
  return m @ ((v / jnp.sqrt(mu)) @ v.T)


@functools.partial(jax.jit, static_argnames=("act", "steps"))
def _train(act, w1, w2, x, xp, xn, lr, steps):
  grad = jax.grad(functools.partial(_loss, act), argnums=(0, 1))

  def body(c, _):
    w1, w2 = c
    g1, g2 = grad(w1, w2, x, xp, xn)
    g1 = g1 - w1 @ (w1.T @ g1)  # (I − W1W1ᵀ) G1
    g2 = g2 - (g2 @ w2.T) @ w2  # G2 (I − W2ᵀW2)
    return (_polar(w1 - lr * g1), _polar(w2 - lr * g2)), None
  return jax.lax.scan(body, (w1, w2), None, length=steps)[0]


def run(cfg) -> dict:
  """Non-linear vs linear networks, trained from the same weights, by width.

  Args:
    cfg: namespace with `fast` (bool): two widths, two inits, 20 steps.

  Returns:
    dict with widths, steps, lr, n_init and "difference"[activation][stage]
    = {mean, std, all} of the mean output difference (stage: init, trained).
  """
  if cfg.fast:
    widths, n_init, steps, n = [8, 64], 2, 20, 100
  else:
    widths, n_init, steps, n = [10, 30, 100, 300, 1000, 3000], 5, 300, 300
  lr, z = 0.05, 1
  rng = np.random.default_rng(0)
  x, _ = make_moons(n_samples=n, noise=0.05, random_state=0)
  x = x - x.mean(0)
  xp = x + 0.1 * rng.normal(size=x.shape)
  xn = x[rng.permutation(n)]
  data = tuple(jnp.asarray(v) for v in (x, xp, xn))

  diff = {a: {"init": np.zeros((len(widths), n_init)),
              "trained": np.zeros((len(widths), n_init))}
          for a in ("tanh", "relu", "sigmoid")}
  for i, h in enumerate(widths):
    for k in range(n_init):
      w1 = np.linalg.qr(rng.normal(size=(h, 2)))[0]
      w2 = np.linalg.qr(rng.normal(size=(h, z)))[0].T
      lin = _train("linear", w1, w2, *data, lr, steps)
      f_lin0 = _forward("linear", w1, w2, data[0])
      f_lin = _forward("linear", *lin, data[0])
      for act in diff:
        trained = _train(act, w1, w2, *data, lr, steps)
        diff[act]["init"][i, k] = jnp.mean(jnp.linalg.norm(
            _forward(act, w1, w2, data[0]) - f_lin0, axis=1))
        diff[act]["trained"][i, k] = jnp.mean(jnp.linalg.norm(
            _forward(act, *trained, data[0]) - f_lin, axis=1))

  for act, d in diff.items():
    print(act, "trained mean diff by width:",
          np.array2string(d["trained"].mean(1), precision=4))
  return dict(widths=widths, steps=steps, lr=lr, n_init=n_init,
              difference={a: {s: dict(mean=v.mean(1), std=v.std(1), all=v)
                              for s, v in d.items()}
                          for a, d in diff.items()})


def plot(result: dict, out) -> None:
  """Writes dynamics_width.png under `out` from the result of `run`."""
  widths, steps, lr = result["widths"], result["steps"], result["lr"]
  fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
  for j, stage in enumerate(("init", "trained")):
    for act, d in result["difference"].items():
      m, s = d[stage]["mean"], d[stage]["std"]
      ax[j].errorbar(widths, m, yerr=s, marker="o", capsize=3, label=act)
    ax[j].set(xscale="log", yscale="log", xlabel="hidden width h",
              ylabel="mean ‖f_σ(x) − f_linear(x)‖",
              title=f"{stage} ({steps} projected-GD steps, lr={lr})"
              if stage == "trained" else "at initialisation")
    ax[j].legend()
  _common.save_figure(fig, out, "dynamics_width.png")


def main(argv=None):
  return _common.run_experiment(__doc__, "dynamics_width", run, plot, argv)


if __name__ == "__main__":
  main()
