"""Methods whose trained parameters are one network, and the views through a
network.

`forward_views` passes the V views of a batch through one flax network,
threading its BatchNorm statistics; `forward_multi_crop` does so with the
encoder and the head apart, as the official multi-crop wrappers of SwAV and
DINO do; `SingleNetworkMethod` implements the
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

__all__ = ["forward_views", "forward_multi_crop", "forward_network",
           "BATCH_NORM_VIEWS", "uses_multi_crop", "SingleNetworkMethod"]

# The values of a method's ``<method>.batch_norm_views`` option (DINO,
# SwAV): "multi_crop", `forward_multi_crop`; "per_view", `forward_views`.
BATCH_NORM_VIEWS = ("multi_crop", "per_view")


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


def forward_multi_crop(apply, variables_of, state_stats, views, *,
                       encoder_method, head_method):
  """The views through an encoder, then a head, as the official multi-crop
  forward passes do.

  The encoder takes the consecutive views of one shape as one batch (its
  BatchNorm normalises over their n·B rows; its running statistics move
  once per group), then the head takes the representations of all V views
  as one batch of V·B rows (its BatchNorm normalises over all of them).
  This is SwAV's ``ResNet.forward`` (Caron et al. 2020, arXiv 2006.09882;
  facebookresearch/swav src/resnet50.py: ``forward_backbone`` per
  resolution, then ``forward_head`` on the concatenation) and DINO's
  ``MultiCropWrapper`` (arXiv 2104.14294). Rows are interleaved sample by
  sample, (sample, view), as in `forward_views`: BatchNorm's statistics do
  not depend on the order, and a batch sharded over devices stays where it
  is.

  Args:
    apply: ``apply(variables, x, train=..., mutable=..., method=...)`` of a
      flax module.
    variables_of: ``variables_of(batch_stats) -> variables`` dict for apply.
    state_stats: BatchNorm statistics before the step ({} or a tree without
      leaves: the network has none).
    views: sequence of V arrays (B, S_v, S_v, C), all with the same B.
    encoder_method: the module's method images (n·B, S, S, C) -> (n·B, D)
      representations, called with ``train=True``.
    head_method: the module's method (V·B, D) representations -> a dict of
      outputs, each (V·B, ...), called with ``train=True``; ``"h"`` is added
      to each view's outputs when the head does not return it.

  Returns:
    (list of V output dicts, each (B, ...), BatchNorm statistics after the
    head).

  Raises:
    ValueError: views of different batch sizes, or an output without one
      row per input row.
  """
  batches = {x.shape[0] for x in views}
  if len(batches) != 1:
    raise ValueError(f"views of batch sizes {sorted(batches)}: the "
                     "multi-crop forward needs one batch size")
  with_stats = bool(jax.tree.leaves(state_stats))

  def run(x, method):
    if with_stats:
      out, updates = apply(variables_of(state_stats), x, train=True,
                           mutable=["batch_stats"], method=method)
      return out, updates.get("batch_stats", state_stats)
    return apply(variables_of(state_stats), x, train=True,
                 method=method), state_stats

  hs = []
  for _, group in itertools.groupby(views, key=lambda x: x.shape):
    group = list(group)
    n, b = len(group), group[0].shape[0]
    x = jnp.stack(group, axis=1).reshape(n * b, *group[0].shape[1:])
    h, state_stats = run(x, encoder_method)
    if h.shape[:1] != (n * b,):
      raise ValueError(f"an encoder output of shape {h.shape} for {n} views"
                       f" of {b} rows: expected {n * b} rows")
    h = h.reshape(b, n, *h.shape[1:])
    hs += [h[:, i] for i in range(n)]
  num_views, b = len(hs), hs[0].shape[0]
  h_all = jnp.stack(hs, axis=1).reshape(num_views * b, *hs[0].shape[1:])
  out, state_stats = run(h_all, head_method)

  def per_view(a):
    if a.shape[:1] != (num_views * b,):
      raise ValueError(f"a head output of shape {a.shape} for {num_views} "
                       f"views of {b} rows: expected {num_views * b} rows")
    return a.reshape(b, num_views, *a.shape[1:])

  stacked = jax.tree.map(per_view, out)
  outs = [{"h": hs[i], **jax.tree.map(lambda a, i=i: a[:, i], stacked)}
          for i in range(num_views)]
  return outs, state_stats


def uses_multi_crop(config, group: str) -> bool:
  """Whether ``config.<group>.batch_norm_views`` is "multi_crop" (absent:
  "per_view")."""
  return (config.get(group, {}).get("batch_norm_views", "per_view")
          == "multi_crop")


def forward_network(network, variables_of, state_stats, views, *,
                    multi_crop: bool):
  """The views through ``network`` in train mode: `forward_multi_crop`
  (with its ``represent`` and ``head`` methods) or `forward_views`."""
  if multi_crop:
    return forward_multi_crop(network.apply, variables_of, state_stats,
                              views, encoder_method=network.represent,
                              head_method=network.head)
  return forward_views(network.apply, variables_of, state_stats, views)


class SingleNetworkMethod(base.Method):
  """A method whose trained parameters are one network (``self.network``,
  a `ssljax.models.EncoderProjector` or `EncoderProjectorPredictor`):
  ``init``, ``representation`` and ``embedding`` from it; ``forward``
  passes views through it in train mode."""

  network: Any = None
  # True: `forward` passes the views through `forward_multi_crop` (the
  # network needs ``represent`` and ``head`` methods), as the official
  # multi-crop wrappers of SwAV and DINO do; False: `forward_views`.
  multi_crop = False

  def init(self, key, batch_spec):
    x = jnp.zeros((2, *batch_spec.view_shape), jnp.float32)
    variables = self.network.init(key, x, train=False)
    return variables["params"], {"batch_stats":
                                 variables.get("batch_stats", {})}

  def forward(self, params, batch_stats, views):
    """(list of V output dicts, new batch_stats), train mode: per view, or
    through `forward_multi_crop` when ``multi_crop``."""
    return forward_network(
        self.network, lambda stats: {"params": params, "batch_stats": stats},
        batch_stats, views, multi_crop=self.multi_crop)

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
