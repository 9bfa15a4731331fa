"""Semi-supervised fine-tuning of the whole encoder on a fraction of labels.

The protocol of Chen et al. 2020 (SimCLR, arXiv:2002.05709, §B.5) and Grill
et al. 2020 (BYOL, arXiv:2006.07733, §C): copy the pretrained encoder, put a
linear classifier on its representation h, and train both with cross-entropy
on a class-balanced ``fraction`` of the labelled train rows (1 % and 10 % in
the papers); report the test accuracy. Unlike the linear probe it measures
how good a *starting point* the encoder is, not how linear its features are.

Here, kept small: a random horizontal flip is the only augmentation, a
cosine-decayed learning rate, Nesterov SGD (the papers) or AdamW, a fixed
number of steps, BatchNorm in train mode (its running statistics are
updated on the copy). The run's train state is never modified. Batches are
replicated over ``ctx.mesh`` (one program on every device), which suits the
small labelled subsets this evaluator is meant for.

Needs ``ctx.labelled_images`` (see `ssljax.evaluators.base.EvalContext`);
skipped with one printed line without it or without labels.

Metrics: ``<name>/<pct>pct_test_accuracy`` per fraction, pct = 100·fraction
written with ``:g`` (0.01 → "1pct", 0.1 → "10pct", 0.005 → "0.5pct").
"""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
import numpy as np
import optax

from ssljax.evaluators import base
from ssljax.evaluators.base import check_option

__all__ = ["Evaluator", "balanced_rows"]


def balanced_rows(labels: np.ndarray, fraction: float, seed: int
                  ) -> np.ndarray:
  """Sorted row indices: ``round(fraction · n_c)`` rows (at least 1) drawn at
  random from each class c of ``labels`` (int (N,)), seeded."""
  rng = np.random.default_rng(seed)
  rows = []
  for c in np.unique(labels):
    members = np.flatnonzero(labels == c)
    take = max(1, int(round(fraction * len(members))))
    rows.append(rng.choice(members, size=take, replace=False))
  return np.sort(np.concatenate(rows))


class Evaluator(base.Evaluator):
  """Fine-tunes a copy of the encoder plus a linear head per fraction.

  Args:
    name, ctx, every_steps: see `ssljax.evaluators.base.Evaluator`.
    fractions: fractions in (0, 1] of the labelled train rows, one run each.
    steps: optimiser steps per run (>= 1). BatchNorm running statistics of
      the copy move with flax's momentum 0.99, and the test pass uses them:
      with fewer than a few hundred steps they lag the trained weights.
    batch_size: images per step (>= 1; lowered to the subset's size).
    learning_rate: peak of the cosine-decayed learning rate (> 0).
    optimizer: "sgd" (momentum 0.9, Nesterov) or "adamw".
    weight_decay: decoupled weight decay on every parameter (>= 0).
    flip: random horizontal flips of the training images.
    eval_batch_size: test images per forward pass (>= 1).
    seed: seeds the subsets, the batches and the flips (>= 0).
  """

  uses_labels = True

  def __init__(self, name, ctx, *, every_steps=None, fractions=(0.01, 0.1),
               steps=1000, batch_size=256, learning_rate=0.05,
               optimizer="sgd", weight_decay=0.0, flip=True,
               eval_batch_size=500, seed=0):
    super().__init__(name, ctx, every_steps=every_steps)
    real = lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool)
    count = lambda v, lo: isinstance(v, numbers.Integral) and not isinstance(
        v, bool) and v >= lo
    check_option(name, "fractions", fractions,
                 isinstance(fractions, (tuple, list)) and len(fractions) > 0
                 and all(real(f) and 0 < f <= 1 for f in fractions),
                 "a non-empty tuple of numbers in (0, 1]")
    check_option(name, "steps", steps, count(steps, 1), "an integer >= 1")
    check_option(name, "batch_size", batch_size, count(batch_size, 1),
                 "an integer >= 1")
    check_option(name, "learning_rate", learning_rate,
                 real(learning_rate) and learning_rate > 0, "a number > 0")
    check_option(name, "optimizer", optimizer, optimizer in ("sgd", "adamw"),
                 "'sgd' or 'adamw'")
    check_option(name, "weight_decay", weight_decay,
                 real(weight_decay) and weight_decay >= 0, "a number >= 0")
    check_option(name, "flip", flip, isinstance(flip, bool), "True or False")
    check_option(name, "eval_batch_size", eval_batch_size,
                 count(eval_batch_size, 1), "an integer >= 1")
    check_option(name, "seed", seed, count(seed, 0), "an integer >= 0")
    self.fractions, self.steps = tuple(float(f) for f in fractions), steps
    self.batch_size, self.learning_rate = batch_size, float(learning_rate)
    self.optimizer, self.weight_decay = optimizer, float(weight_decay)
    self.flip, self.eval_batch_size, self.seed = flip, eval_batch_size, seed

  def _put(self, x):
    if self.ctx.mesh is None:
      return jax.device_put(x)
    return jax.device_put(x, NamedSharding(self.ctx.mesh, P()))

  def _tx(self):
    lr = optax.cosine_decay_schedule(self.learning_rate, self.steps)
    if self.optimizer == "adamw":
      return optax.adamw(lr, weight_decay=self.weight_decay)
    return optax.chain(optax.add_decayed_weights(self.weight_decay),
                       optax.sgd(lr, momentum=0.9, nesterov=True))

  def fine_tune(self, state, images, labels, num_classes: int, seed: int):
    """Trains a copy of the encoder + a zero-initialised linear head.

    Args:
      state: the train state (its method's ``train_representation`` and
        ``representation``, ``params``, ``method_state``).
      images: uint8 (n, S, S, C); labels: int (n,) in [0, num_classes).
      num_classes: C of the head.
      seed: seeds batches and flips.

    Returns:
      (params, method_state, forward) of the copy: params = {"net": ...,
      "head": {"kernel": (D, C), "bias": (C,)}}; ``forward(params,
      method_state, x, train) -> (logits (B, C), method_state)``.
    """
    method = state.method

    def forward(params, method_state, x, train):
      if train:
        h, method_state = method.train_representation(params["net"],
                                                      method_state, x)
      else:
        h = method.representation(params["net"], method_state, x)
      h = h.astype(jnp.float32)
      return (h @ params["head"]["kernel"] + params["head"]["bias"],
              method_state)

    def loss_fn(params, stats, x, y):
      logits, stats = forward(params, stats, x, True)
      loss = optax.softmax_cross_entropy_with_integer_labels(logits, y)
      return loss.mean(), stats

    tx = self._tx()

    @jax.jit
    def step(params, stats, opt_state, x_u8, y, key):
      x = x_u8.astype(jnp.float32) / 255.0
      if self.flip:
        flips = jax.random.bernoulli(key, 0.5, (x.shape[0], 1, 1, 1))
        x = jnp.where(flips, x[:, :, ::-1], x)
      (_, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
          params, stats, x, y)
      updates, opt_state = tx.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), stats, opt_state

    probe_x = self._put(images[:1].astype(np.float32) / 255.0)
    h_dim = jax.eval_shape(method.representation, state.params,
                           state.method_state, probe_x).shape[-1]
    params = {"net": state.params,
              "head": {"kernel": jnp.zeros((h_dim, num_classes), jnp.float32),
                       "bias": jnp.zeros((num_classes,), jnp.float32)}}
    params = self._put(jax.device_get(params))  # a copy of the networks
    stats = self._put(jax.device_get(state.method_state))
    opt_state = tx.init(params)
    rng = np.random.default_rng(seed)
    key = jax.random.key(seed)
    batch = min(self.batch_size, len(images))
    order = np.zeros(0, np.int64)
    for _ in range(self.steps):
      if len(order) < batch:  # epochs of random permutations
        order = np.concatenate([order, rng.permutation(len(images))])
      rows, order = order[:batch], order[batch:]
      key, sub = jax.random.split(key)
      params, stats, opt_state = step(
          params, stats, opt_state, self._put(images[rows]),
          self._put(np.asarray(labels[rows], np.int32)), sub)
    return params, stats, forward

  def run(self, state):
    ctx = self.ctx
    why = ("no labelled split" if ctx.features is None else
           "the run gives no labelled images (EvalContext.labelled_images)"
           if ctx.labelled_images is None else None)
    if why:
      if ctx.shown:
        print(f"{self.name}: skipped ({why})", flush=True)
      return
    _, ytrain = ctx.features(state, "train")
    xtest, ytest = ctx.labelled_images("test", None)
    num_classes = max(ctx.num_classes, int(max(ytrain.max(), ytest.max())) + 1)
    for i, fraction in enumerate(self.fractions):
      rows = balanced_rows(np.asarray(ytrain), fraction, self.seed + i)
      x, y = ctx.labelled_images("train", rows)
      params, stats, forward = self.fine_tune(state, x, y, num_classes,
                                              self.seed + i)
      predict = jax.jit(lambda p, s, x: jnp.argmax(
          forward(p, s, x.astype(jnp.float32) / 255.0, False)[0], -1))
      correct = 0
      for start in range(0, len(xtest), self.eval_batch_size):
        chunk = xtest[start:start + self.eval_batch_size]
        pad = self.eval_batch_size - len(chunk)  # one compiled shape
        chunk = np.pad(chunk, ((0, pad),) + ((0, 0),) * (chunk.ndim - 1))
        pred = np.asarray(jax.device_get(
            predict(params, stats, self._put(chunk))))[:len(chunk) - pad]
        correct += int(np.sum(pred == ytest[start:start + len(pred)]))
      if ctx.shown:
        print(f"{self.name}: {fraction:g} of the labels ({len(rows)} images)"
              f": test accuracy {correct / len(xtest):.4f}", flush=True)
      yield f"{self.name}/{100 * fraction:g}pct_test_accuracy", (
          correct / len(xtest))
