"""Algorithm 1 of Cabannes et al. 2023: SGD with minibatches from an oracle.

`run_pal` alternates oracle query rounds (answers from a labeler, or none)
with optax steps on the unbiased degree-corrected minibatch estimate of
‖ZZᵀ − G‖² − ‖G‖² (`pal_minibatch_loss`, divided by N² so that its scale
is O(1)), for the oracle's current graph G. The model is any flax module
called as `model.apply(variables, x, train=...)` returning (B, K)
embeddings; a "batch_stats" collection (BatchNorm) is updated in training
mode and used in evaluation mode.

References:
  Cabannes et al. 2023, "Active Self-Supervised Learning: A Few Low-Cost
  Relationships Are All You Need", arXiv 2303.15256, Algorithm 1, eqs. (9)–(11),
  in the degree-corrected form Σ_ij [G_ij‖z_i − z_j‖² + (z_iᵀz_j)² − (d_i‖z_i‖²
  + d_j‖z_j‖²)/N] = ‖ZZᵀ − G‖² − ‖G‖².
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ssljax.models.encoders import MLPEncoder
from ssljax.pal.minibatch import pal_minibatch_loss

__all__ = ["PALNet", "ScaledMLP", "PALResult", "run_pal", "embed"]


class PALNet(nn.Module):
  """Small MLP f_θ: (B, ...) -> (B, K), ReLU hidden layers, linear output.

  Attributes:
    hidden: widths of the hidden layers.
    out: embedding dimension K.
  """
  hidden: Sequence[int] = (128,)
  out: int = 8

  @nn.compact
  def __call__(self, x, train: bool = True):
    del train
    h = x.reshape(x.shape[0], -1)
    for width in self.hidden:
      h = nn.relu(nn.Dense(width)(h))
    return nn.Dense(self.out)(h)


class ScaledMLP(nn.Module):
  """(B, H, W, C) -> (B, k): `ssljax.models.MLPEncoder` (BatchNorm), a
  linear head, times a learned scale exp(s), s initialised to −½·log N so
  the N embeddings start at the scale of the PAL loss's 1/N-normalised
  targets (the neural PAL experiments and the annotation service's rounds).

  Attributes:
    hidden: MLPEncoder widths.
    k: embedding dimension K.
    n_rows: N, sets the initial scale exp(s) = N^(−1/2).
  """
  hidden: tuple
  k: int
  n_rows: int

  @nn.compact
  def __call__(self, x, train: bool = True):
    h = MLPEncoder(tuple(self.hidden), use_bn=True)(x, train)
    s = self.param("log_scale", lambda _: jnp.float32(
        -0.5 * np.log(self.n_rows)))
    return nn.Dense(self.k)(h) * jnp.exp(s)


class PALResult(NamedTuple):
  """Output of `run_pal`.

  Attributes:
    variables: trained flax variables ({"params", maybe "batch_stats"}).
    history: one dict per logged step: "step", "answers" (cumulative pair
      answers spent), "loss" (the minibatch loss / N²), plus the items of
      eval_fn's dict at evaluation steps.
  """
  variables: dict
  history: list


def _embed_with(apply_eval, variables, x, chunk: int) -> np.ndarray:
  x = np.asarray(x, np.float32)
  return np.concatenate([np.asarray(apply_eval(variables, x[i:i + chunk]))
                         for i in range(0, x.shape[0], chunk)])


def embed(model, variables, x, *, chunk: int = 4096) -> np.ndarray:
  """(N, K) numpy embeddings of x in evaluation mode, in chunks."""
  fn = jax.jit(lambda v, xb: model.apply(v, xb, train=False))
  return _embed_with(fn, variables, x, chunk)


def _check_args(x, steps, batch_size, query_every, eval_every):
  if np.ndim(x) < 2:
    raise ValueError(f"x must be (N, ...) with at least 2 dims, got shape"
                     f" {np.shape(x)}")
  for name, v, lo in (("steps", steps, 1), ("batch_size", batch_size, 2),
                      ("query_every", query_every, 1),
                      ("eval_every", eval_every, 0)):
    if int(v) != v or v < lo:
      raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")


def run_pal(x, oracle, model: nn.Module, *, key: jax.Array, steps: int,
            batch_size: int, optimizer: optax.GradientTransformation | None = None,
            query_every: int = 1, eval_fn: Callable | None = None,
            eval_every: int = 0, log_every: int = 50,
            eval_at_start: bool = False,
            variables: dict | None = None) -> PALResult:
  """Runs Algorithm 1 (PAL) and returns the trained variables and a history.

  At every step t: if t % query_every == 0 the oracle asks one round of
  questions (`oracle.query`, given `embed_all` for active oracles), then a
  minibatch (`oracle.minibatch`) gives rows J_t, the known graph block,
  full-graph degrees and inverse inclusion probabilities, and the optimizer
  takes a step on `pal_minibatch_loss(...) / N²`.

  Args:
    x: (N, ...) inputs X (numpy; rows are samples).
    oracle: an oracle of `ssljax.pal` (query / minibatch interface).
    model: flax module, `apply(variables, x, train=bool) -> (B, K)`.
    key: jax PRNG key; seeds the initialisation and the numpy Generator
      that drives sampling (same key -> same run).
    steps: number of SGD steps T.
    batch_size: minibatch rows B (for `SSLOracle`, B // V groups).
    optimizer: optax transformation (default `optax.adam(1e-3)`).
    query_every: steps between oracle query rounds.
    eval_fn: optional f(variables, step) -> dict of metrics.
    eval_every: evaluate every this many steps (0: only at the end).
    log_every: steps between history entries.
    eval_at_start: also evaluate the initial network, before any query or
      step (a history entry with step 0, answers 0 and loss NaN).
    variables: optional flax variables to start from (a warm start, e.g.
      the previous round of `ssljax.pal.serve`); None initialises the model
      with the key. The optimizer state starts fresh either way.

  Returns:
    `PALResult(variables, history)`.

  Raises:
    ValueError: on bad shapes or step counts.

  References:
    Cabannes et al. 2023, arXiv 2303.15256, Algorithm 1, eq. (11).
  """
  _check_args(x, steps, batch_size, query_every, eval_every)
  x = np.asarray(x, np.float32)
  optimizer = optax.adam(1e-3) if optimizer is None else optimizer
  init_key, seed_key = jax.random.split(key)
  rng = np.random.default_rng(int(jax.random.randint(seed_key, (), 0,
                                                     2**31 - 1)))
  if variables is None:
    variables = model.init(init_key, jnp.asarray(x[:2]), train=False)
  params = variables["params"]
  state = {k: v for k, v in variables.items() if k != "params"}
  opt_state = optimizer.init(params)

  def loss_fn(params, state, xb, g, degree, n, w):
    if state:
      z, new_state = model.apply({"params": params, **state}, xb, train=True,
                                 mutable=list(state))
    else:
      z, new_state = model.apply({"params": params}, xb, train=True), state
    loss = pal_minibatch_loss(z.astype(jnp.float32), g, degree, n, w) / n**2
    return loss, new_state

  @jax.jit
  def train_step(params, state, opt_state, xb, g, degree, n, w):
    (loss, state), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params, state, xb, g, degree, n, w)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), state, opt_state, loss

  def current():
    return {"params": params, **state}

  apply_eval = jax.jit(lambda v, xb: model.apply(v, xb, train=False))

  def embed_all():
    return _embed_with(apply_eval, current(), x, 4096)

  def embed_rows(idx):
    return _embed_with(apply_eval, current(), x[idx], 4096)

  history, answers = [], 0
  if eval_fn is not None and eval_at_start:
    history.append({"step": 0, "answers": 0, "loss": float("nan"),
                    **eval_fn(current(), 0)})
  for t in range(steps):
    if t % query_every == 0:
      answers += int(oracle.query(rng, embed_all))
    mb = oracle.minibatch(rng, batch_size, embed_rows)
    params, state, opt_state, loss = train_step(
        params, state, opt_state, jnp.asarray(x[mb.idx]),
        jnp.asarray(mb.g, jnp.float32), jnp.asarray(mb.degree, jnp.float32),
        jnp.float32(mb.n), jnp.asarray(mb.pair_weights, jnp.float32))
    last = t == steps - 1
    do_eval = eval_fn is not None and (
        last or (eval_every and (t + 1) % eval_every == 0))
    if do_eval or last or (t + 1) % log_every == 0:
      entry = {"step": t + 1, "answers": answers, "loss": float(loss)}
      if do_eval:
        entry.update(eval_fn(current(), t + 1))
      history.append(entry)
  return PALResult(current(), history)
