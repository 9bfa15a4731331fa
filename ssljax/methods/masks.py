"""Patch masks of the masked-token methods, drawn in jnp with fixed shapes.

Both samplers are pure functions of a PRNG key (in training the step's key,
derived from (seed, step)) and static sizes: the same key gives the same
masks on every device and after a resume, and every array has a shape known
at trace time, so they run inside the jitted train step.

* `random_masking` (MAE; He et al. 2022, arXiv 2111.06377, §3): per image,
  a uniform random permutation of the L patches; the first ⌊L·(1 − r)⌋ are
  kept, the rest removed (the official ``random_masking``: argsort of
  uniform noise).
* `multiblock_masks` (I-JEPA; Assran et al. 2023, arXiv 2301.08243, §3 and
  the official ``MaskCollator``): M target blocks and one context block per
  image, the context block minus that image's targets.

I-JEPA's sampler, as the official code: one uniform u per batch sets both
the scale and the aspect ratio of the target blocks (and one more u the
context block's scale, aspect 1); a block of scale s and aspect a has
h = round(√(⌊gh·gw·s⌋·a)), w = round(√(⌊gh·gw·s⌋/a)) patches (Python's
round-half-even), cut to gh − 1 and gw − 1; its top-left corner is uniform
on [0, gh − h) x [0, gw − w) (a block never touches the last row or column).
A context candidate is accepted when more than ``min_keep`` patches remain;
after every 20 rejected candidates one more target block is dropped from the
constraint (the official ``tries``). The masks of a batch are cut to the
smallest count (the first patches in row-major order).

Fixed shapes: the index arrays are padded to static bounds (the largest
block the scale and aspect ranges allow) and come with counts; the padding
is marked invalid and kept out of attention and of the loss.

Bounded where the official loops: the official sampler retries forever when
no candidate can be accepted (a target block of at most ``min_keep``
patches, or a context block that small: grids of 8x8 with the ImageNet
scales). Here a context is drawn from 20·(M + 1) candidates (every
relaxation level of the official schedule, the last one unconstrained) and
the last candidate is taken when none is accepted; a target block (the
official code also asks more than ``min_keep`` patches of it) is always
accepted. ``multiblock_problems`` names the settings where this bound acts,
and the configs refuse them.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

__all__ = ["random_masking", "block_size", "multiblock_bounds",
           "multiblock_masks", "multiblock_problems", "TRIES_PER_LEVEL",
           "dinov2_mask_counts", "dinov2_masks"]

# Rejected context candidates before one target block is dropped from the
# constraint (the official ``timeout``).
TRIES_PER_LEVEL = 20


def random_masking(key: jax.Array, batch: int, num_patches: int,
                   mask_ratio: float) -> dict:
  """MAE's per-image random masking.

  Args:
    key: PRNG key.
    batch: B images.
    num_patches: L patches per image.
    mask_ratio: r in [0, 1): fraction removed; K = ⌊L·(1 − r)⌋ >= 1 kept.

  Returns:
    {"keep": int32 (B, K) kept positions (in shuffled order, as the
    official code), "mask": float32 (B, L) 1 = removed, "ids_restore":
    int32 (B, L) the inverse permutation (`ssljax.models.MAEDecoder`)}.

  Raises:
    ValueError: K < 1 or r outside [0, 1).

  References:
    He et al. 2022, arXiv 2111.06377, §3 ("random sampling") and the
    official ``random_masking``.
  """
  num_keep = int(num_patches * (1 - mask_ratio))
  if not 0 <= mask_ratio < 1 or num_keep < 1:
    raise ValueError(f"mask_ratio {mask_ratio} on {num_patches} patches keeps "
                     f"{num_keep}; need 0 <= mask_ratio < 1 and >= 1 kept")
  noise = jax.random.uniform(key, (batch, num_patches))
  ids_shuffle = jnp.argsort(noise, axis=1).astype(jnp.int32)
  ids_restore = jnp.argsort(ids_shuffle, axis=1).astype(jnp.int32)
  mask = jnp.ones((batch, num_patches), jnp.float32).at[:, :num_keep].set(0)
  mask = jnp.take_along_axis(mask, ids_restore, axis=1)
  return {"keep": ids_shuffle[:, :num_keep], "mask": mask,
          "ids_restore": ids_restore}


def block_size(u, grid, scale, aspect):
  """(h, w) of a block from one uniform u (the official
  ``_sample_block_size``); works on Python floats and on jnp scalars.

  Args:
    u: uniform in [0, 1).
    grid: (gh, gw).
    scale: (min, max) fraction of the gh·gw patches.
    aspect: (min, max) aspect ratio h / w.
  """
  gh, gw = grid
  s = scale[0] + u * (scale[1] - scale[0])
  a = aspect[0] + u * (aspect[1] - aspect[0])
  if isinstance(u, (int, float)):
    keep = int(gh * gw * s)
    h, w = int(round(math.sqrt(keep * a))), int(round(math.sqrt(keep / a)))
    return min(h, gh - 1), min(w, gw - 1)
  keep = jnp.floor(gh * gw * s)
  h = jnp.round(jnp.sqrt(keep * a)).astype(jnp.int32)
  w = jnp.round(jnp.sqrt(keep / a)).astype(jnp.int32)
  return jnp.minimum(h, gh - 1), jnp.minimum(w, gw - 1)


def multiblock_bounds(grid, *, target_scale, target_aspect, context_scale):
  """(T_max, K_max): static bounds on the patches of a target block and of
  a context. h grows with u but w need not (scale and aspect move
  together), so each side is bounded on its own: h <= round(√(⌊gh·gw·s_max⌋
  ·a_max)), w <= round(√(⌊gh·gw·s_max⌋ / a_min)), each cut as the blocks."""
  gh, gw = grid

  def bound(scale, aspect):
    keep = int(gh * gw * scale[1])
    h = min(int(round(math.sqrt(keep * aspect[1]))), gh - 1)
    w = min(int(round(math.sqrt(keep / aspect[0]))), gw - 1)
    return max(h * w, 1)

  return bound(target_scale, target_aspect), bound(context_scale, (1.0, 1.0))


def _smallest_block(grid, scale, aspect, points=2001):
  """min over u on a grid of [0, 1] of h·w (sizes are piecewise constant)."""
  sizes = [block_size(i / (points - 1), grid, scale, aspect)
           for i in range(points)]
  return min(sizes, key=lambda hw: hw[0] * hw[1])


def multiblock_problems(grid, *, num_targets, target_scale, target_aspect,
                        context_scale, min_keep) -> list:
  """One line per setting where the official sampler can loop forever (and
  ours falls back to its bound): a target or context block of at most
  ``min_keep`` patches (the official code checks both against it)."""
  problems = []
  for name, scale, aspect in (("target", target_scale, target_aspect),
                              ("context", context_scale, (1.0, 1.0))):
    h, w = _smallest_block(grid, scale, aspect)
    if h * w <= min_keep:
      problems.append(
          f"the smallest {name} block on a {grid[0]}x{grid[1]} patch grid has "
          f"{h}x{w} patches <= min_keep = {min_keep}: the official sampler "
          "would never accept it")
  if num_targets < 1:
    problems.append(f"num_targets must be >= 1, got {num_targets}")
  return problems


def _block_masks(key, grid, h, w, shape):
  """bool (*shape, gh·gw): blocks of h x w at uniform corners."""
  gh, gw = grid
  k_top, k_left = jax.random.split(key)
  top = jax.random.randint(k_top, shape, 0, gh - h)
  left = jax.random.randint(k_left, shape, 0, gw - w)
  rows = jnp.arange(gh)[:, None]
  cols = jnp.arange(gw)[None, :]
  t, l = top[..., None, None], left[..., None, None]
  inside = (rows >= t) & (rows < t + h) & (cols >= l) & (cols < l + w)
  return inside.reshape(*shape, gh * gw)


def _first_true(mask, size):
  """int32 (..., size): the positions of mask's True entries in ascending
  order (then the False ones)."""
  order = jnp.argsort(~mask, axis=-1, stable=True)
  return order[..., :size].astype(jnp.int32)


def multiblock_masks(key: jax.Array, batch: int, grid: tuple, *,
                     num_targets: int = 4, target_scale=(0.15, 0.2),
                     target_aspect=(0.75, 1.5), context_scale=(0.85, 1.0),
                     min_keep: int = 10) -> dict:
  """I-JEPA's multi-block masks for one batch (see the module docstring).

  Args:
    key: PRNG key.
    batch: B images.
    grid: (gh, gw) patch grid, each >= 2.
    num_targets: M target blocks per image (paper: 4).
    target_scale, target_aspect: ranges of the target blocks (paper:
      (0.15, 0.2), (0.75, 1.5)).
    context_scale: range of the context block, aspect 1 (paper:
      (0.85, 1.0)).
    min_keep: a context needs more than this many patches (official: 10
      in the ImageNet configs, 4 by default).

  Returns:
    {"context": int32 (B, K_max) context positions, ascending, the first
    ``num_context`` valid; "context_valid": bool (B, K_max);
    "num_context": int32 0-d (the batch minimum); "targets": int32
    (M, B, T_max) positions of each target block, ascending, the first
    ``num_target`` valid; "target_valid": bool (M, B, T_max); "num_target":
    int32 0-d (= h·w); "target_mask": bool (M, B, L) the full blocks}.

  Raises:
    ValueError: a grid side < 2.

  References:
    Assran et al. 2023, arXiv 2301.08243, §3 ("Targets", "Context") and the
    official ``MaskCollator``.
  """
  gh, gw = grid
  if gh < 2 or gw < 2:
    raise ValueError(f"multi-block masks need a grid of at least 2x2, got "
                     f"{gh}x{gw}")
  t_max, k_max = multiblock_bounds(grid, target_scale=target_scale,
                                   target_aspect=target_aspect,
                                   context_scale=context_scale)
  k_size, k_targets, k_context = jax.random.split(key, 3)
  u = jax.random.uniform(k_size, (2,))
  th, tw = block_size(u[0], grid, target_scale, target_aspect)
  ch, cw = block_size(u[1], grid, context_scale, (1.0, 1.0))
  targets = _block_masks(k_targets, grid, th, tw, (num_targets, batch))
  # Context candidates; candidate r keeps the first M − r // 20 targets out.
  levels = num_targets + 1
  tries = levels * TRIES_PER_LEVEL
  blocks = _block_masks(k_context, grid, ch, cw, (tries, batch))
  dropped = jnp.arange(tries) // TRIES_PER_LEVEL  # (R,)
  used = jnp.arange(num_targets)[None, :] < (num_targets - dropped)[:, None]
  covered = jnp.any(used[:, :, None, None] & targets[None], axis=1)  # R,B,L
  candidates = blocks & ~covered
  counts = jnp.sum(candidates, axis=-1)  # (R, B)
  accepted = counts > min_keep
  first = jnp.where(jnp.any(accepted, axis=0), jnp.argmax(accepted, axis=0),
                    tries - 1)  # (B,)
  context = jnp.take_along_axis(candidates, first[None, :, None], axis=0)[0]
  num_context = jnp.min(jnp.sum(context, axis=-1)).astype(jnp.int32)
  num_target = (th * tw).astype(jnp.int32)
  ctx_idx = _first_true(context, k_max)
  tgt_idx = _first_true(targets, t_max)
  return {"context": ctx_idx,
          "context_valid": jnp.broadcast_to(
              jnp.arange(k_max) < num_context, (batch, k_max)),
          "num_context": num_context,
          "targets": tgt_idx,
          "target_valid": jnp.broadcast_to(
              jnp.arange(t_max) < num_target, (num_targets, batch, t_max)),
          "num_target": num_target,
          "target_mask": targets}


def dinov2_mask_counts(num_crops: int, num_patches: int, *,
                       ratio_min_max: tuple, sample_probability: float
                       ) -> tuple:
  """The masked-patch counts of DINOv2's masked crops (static).

  n = ⌊C·p⌋ of the C crops are masked (the official collate's
  ``n_samples_masked``); crop i of them gets the ratio range
  [r_i, r_{i+1}] of ``linspace(r_min, r_max, n + 1)`` and here the centre of
  that range, k_i = ⌊T·(r_i + r_{i+1})/2⌋ patches (the official code draws
  the ratio uniformly within the range; the centre keeps the number of
  masked patches static under jit).

  Args:
    num_crops: C >= 1 global crops of the batch (2B).
    num_patches: T >= 1 patches per crop.
    ratio_min_max: (r_min, r_max), 0 <= r_min <= r_max <= 1 (official
      (0.1, 0.5)).
    sample_probability: p in [0, 1] (official 0.5).

  Returns:
    tuple of n ints, the k_i, ascending.

  Raises:
    ValueError: a size < 1, a ratio or probability out of range, or no
      masked patch at all (n = 0 or Σ k_i = 0: the iBOT loss needs one).

  References:
    Oquab et al. 2023, "DINOv2", arXiv 2304.07193, §4 and App. (iBOT masking,
    ratio 0.1-0.5 on half of the crops); official ``collate_data_and_cast``.
  """
  lo, hi = (float(r) for r in ratio_min_max)
  if num_crops < 1 or num_patches < 1:
    raise ValueError(f"num_crops and num_patches must be >= 1, got"
                     f" {num_crops} and {num_patches}")
  if not 0 <= lo <= hi <= 1:
    raise ValueError(f"ratio_min_max must satisfy 0 <= min <= max <= 1, got"
                     f" {tuple(ratio_min_max)}")
  if not 0 <= sample_probability <= 1:
    raise ValueError(f"sample_probability must be in [0, 1], got"
                     f" {sample_probability}")
  n = int(num_crops * sample_probability)
  edges = [lo + (hi - lo) * i / n for i in range(n + 1)] if n else []
  counts = tuple(int(num_patches * (edges[i] + edges[i + 1]) / 2)
                 for i in range(n))
  if sum(counts) < 1:
    raise ValueError(
        f"no masked patch: {n} of {num_crops} crops masked (probability"
        f" {sample_probability}) with ratios {tuple(ratio_min_max)} of"
        f" {num_patches} patches; raise the batch, the probability or the"
        " ratios")
  return counts


def dinov2_masks(key: jax.Array, num_crops: int, num_patches: int, *,
                 ratio_min_max: tuple, sample_probability: float
                 ) -> jax.Array:
  """DINOv2's iBOT masks of the C global crops of a batch.

  ``dinov2_mask_counts`` gives n masked crops and their patch counts k_i;
  crop slot i masks k_i patches drawn uniformly without replacement (the
  official ``MaskingGenerator`` masks rectangular blocks), the other C − n
  slots none, and the slots are shuffled over the crops (the official
  ``random.shuffle``).

  Args:
    key: PRNG key.
    num_crops, num_patches, ratio_min_max, sample_probability: as
      ``dinov2_mask_counts``.

  Returns:
    bool (C, T), row c the mask of crop c; Σ = Σ k_i (static).

  Raises:
    ValueError: as ``dinov2_mask_counts``.
  """
  counts = dinov2_mask_counts(num_crops, num_patches,
                              ratio_min_max=ratio_min_max,
                              sample_probability=sample_probability)
  k_C = jnp.zeros((num_crops,), jnp.int32).at[:len(counts)].set(
      jnp.asarray(counts, jnp.int32))
  key_patch, key_crop = jax.random.split(key)
  noise = jax.random.uniform(key_patch, (num_crops, num_patches))
  rank = jnp.argsort(jnp.argsort(noise, axis=1), axis=1)
  rows = rank < k_C[:, None]
  return rows[jax.random.permutation(key_crop, num_crops)]
