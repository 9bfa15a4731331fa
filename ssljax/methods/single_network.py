"""Methods whose trained parameters are one network, and the views through a
network.

`forward_views` passes the V views of a batch through one flax network,
threading its BatchNorm statistics; `SingleNetworkMethod` implements the
protocol's ``init``, ``representation``, ``train_representation`` and
``embedding`` for a method with one trained network (every method shipped so
far: a teacher, where there is one, is state, not a parameter).
"""

from __future__ import annotations

import itertools
from typing import Any

import jax
import jax.numpy as jnp

from ssljax.methods import base

__all__ = ["forward_views", "SingleNetworkMethod"]


def forward_views(apply, variables_of, state_stats, views, *, train=True,
                  joint_batch_norm=False):
  """The views through one network, threading BatchNorm statistics.

  With BatchNorm in batch-statistics mode (``train`` and statistics in
  ``state_stats``), each view goes through the network on its own, so
  BatchNorm normalises per view, as in the official VICReg/BYOL code (global
  and local crops differ in size). Without it (a ViT with LayerNorm, or
  ``train=False``) samples do not interact, and consecutive views of one
  shape go through the network as one batch of n·B rows (as DINO's
  multi-crop wrapper does with the crops of one resolution): the same
  outputs, one copy of the network in the compiled step instead of n (the
  DINO ViT-S/16 step with 2 + 6 crops had 2,024 matrix products), and
  larger products for the accelerator. The views are interleaved sample by
  sample, so a batch sharded over devices stays where it is.

  Args:
    apply: ``apply(variables, x, train=..., mutable=...)`` of a flax module
      returning a dict of outputs, each (rows, ...).
    variables_of: ``variables_of(batch_stats) -> variables`` dict for apply.
    state_stats: BatchNorm statistics before the first view ({} or a tree
      without leaves: the network has none).
    views: sequence of V arrays (B, S_v, S_v, C).
    train: BatchNorm in batch-statistics mode (and statistics updated).
    joint_batch_norm: with BatchNorm in batch-statistics mode, consecutive
      views of one shape still go through the network as one batch, so
      BatchNorm normalises over all of their n·B rows and its running
      statistics move once per group (LeJEPA's minimal example passes its
      V views as one batch of N·V rows, rbalestr-lab/lejepa MINIMAL.md).

  Returns:
    (list of V output dicts, BatchNorm statistics after the last view).

  Raises:
    ValueError: an output of a grouped forward pass without one row per
      input row.
  """
  with_stats = bool(train and jax.tree.leaves(state_stats))
  if with_stats and not joint_batch_norm:
    outs = []
    for x in views:  # V is static: unrolled
      out, updates = apply(variables_of(state_stats), x, train=True,
                           mutable=["batch_stats"])
      state_stats = updates.get("batch_stats", state_stats)
      outs.append(out)
    return outs, state_stats
  outs = []
  for _, group in itertools.groupby(views, key=lambda x: x.shape):
    group = list(group)
    n, b = len(group), group[0].shape[0]
    x = group[0] if n == 1 else jnp.stack(group, axis=1).reshape(
        n * b, *group[0].shape[1:])  # rows (sample, view)
    if train:
      out, updates = apply(variables_of(state_stats), x, train=True,
                           mutable=["batch_stats"])
      if with_stats:
        state_stats = updates.get("batch_stats", state_stats)
    else:
      out = apply(variables_of(state_stats), x, train=False)
    if n == 1:
      outs.append(out)
      continue

    def per_view(a, n=n, b=b):
      if a.shape[:1] != (n * b,):
        raise ValueError(f"an output of shape {a.shape} of {n} views of "
                         f"{b} rows: expected {n * b} rows")
      return a.reshape(b, n, *a.shape[1:])

    stacked = jax.tree.map(per_view, out)
    outs += [jax.tree.map(lambda a, i=i: a[:, i], stacked) for i in range(n)]
  return outs, state_stats


class SingleNetworkMethod(base.Method):
  """A method whose trained parameters are one network (``self.network``,
  a `ssljax.models.EncoderProjector` or `EncoderProjectorPredictor`):
  ``init``, ``representation`` and ``embedding`` from it; ``forward``
  passes views through it in train mode."""

  network: Any = None

  def init(self, key, batch_spec):
    x = jnp.zeros((2, *batch_spec.view_shape), jnp.float32)
    variables = self.network.init(key, x, train=False)
    return variables["params"], {"batch_stats":
                                 variables.get("batch_stats", {})}

  def forward(self, params, batch_stats, views):
    """(list of V output dicts, new batch_stats), train mode, per view."""
    return forward_views(
        self.network.apply,
        lambda stats: {"params": params, "batch_stats": stats},
        batch_stats, views)

  def representation(self, params, state, images):
    return self.network.apply(
        {"params": params, "batch_stats": state["batch_stats"]}, images,
        train=False, method=self.network.represent)

  def encoder_variables(self, params, state):
    """The network's encoder (``self.network.encoder``) and its part of
    the parameters and BatchNorm statistics (the "encoder" subtrees)."""
    return self.network.encoder, _encoder_part(params, state)

  def train_representation(self, params, state, images):
    h, updates = self.network.apply(
        {"params": params, "batch_stats": state["batch_stats"]}, images,
        train=True, mutable=["batch_stats"], method=self.network.represent)
    return h, {**state, "batch_stats": {**state["batch_stats"],
                                        **updates.get("batch_stats", {})}}

  def embedding(self, params, state, images):
    out = self.network.apply(
        {"params": params, "batch_stats": state["batch_stats"]}, images,
        train=False)
    return out["h"], out["z"]


def _encoder_part(params, state) -> dict:
  """{"params"[, "batch_stats"]} of the "encoder" subtrees of a network's
  parameters and BatchNorm statistics (no "batch_stats" when the encoder
  has none)."""
  variables = {"params": params["encoder"]}
  stats = state.get("batch_stats", {}).get("encoder", {})
  if jax.tree.leaves(stats):
    variables["batch_stats"] = stats
  return variables
