"""The mask samplers: I-JEPA's multi-block masks and MAE's random masking.

Block sizes against a transcription of the official ``_sample_block_size``
(facebookresearch/ijepa ``src/masks/multiblock.py``); the invariants of the
official sampler (targets are h x w rectangles off the last row and column,
the context is a square block minus the targets with more than min_keep
patches, truncation to the batch minimum); determinism in the key.
Equality across devices is part of the train-step test of
tests/test_sharding.py (the masks are drawn inside the step).
"""

import math

import jax
import numpy as np
import pytest

from ssljax.methods import masks

pytestmark = pytest.mark.usefixtures("fast_compiles")

# Jitted sampler (the eager one dispatches op by op).
_DRAW = jax.jit(masks.multiblock_masks, static_argnums=(1, 2), static_argnames=(
    "num_targets", "target_scale", "target_aspect", "context_scale",
    "min_keep"))

PAPER = dict(num_targets=4, target_scale=(0.15, 0.2),
             target_aspect=(0.75, 1.5), context_scale=(0.85, 1.0))


def _official_block_size(u, height, width, scale, aspect):
  mask_scale = scale[0] + u * (scale[1] - scale[0])
  max_keep = int(height * width * mask_scale)
  ar = aspect[0] + u * (aspect[1] - aspect[0])
  h = int(round(math.sqrt(max_keep * ar)))
  w = int(round(math.sqrt(max_keep / ar)))
  while h >= height:
    h -= 1
  while w >= width:
    w -= 1
  return h, w


@pytest.mark.parametrize("grid", [(7, 7), (14, 14), (8, 12)])
def test_block_size_matches_official(grid):
  us = np.random.default_rng(0).uniform(size=200).astype(np.float32)
  for scale, aspect in ((PAPER["target_scale"], PAPER["target_aspect"]),
                        (PAPER["context_scale"], (1.0, 1.0))):
    ours = jax.vmap(lambda u: masks.block_size(u, grid, scale, aspect))(us)
    ref = [_official_block_size(float(u), *grid, scale, aspect) for u in us]
    np.testing.assert_array_equal(np.stack(ours, 1), np.array(ref))
    t_max = masks.multiblock_bounds(grid, target_scale=scale,
                                    target_aspect=aspect,
                                    context_scale=scale)[0]
    assert max(h * w for h, w in ref) <= t_max


@pytest.mark.parametrize("grid,min_keep", [
    ((7, 7), 4), pytest.param((14, 14), 10, marks=pytest.mark.slow)])
def test_multiblock_invariants(grid, min_keep):
  gh, gw = grid
  batch = 16
  sizes = {_official_block_size(i / 999, gh, gw, PAPER["target_scale"],
                                PAPER["target_aspect"]) for i in range(1000)}
  for seed in range(4):
    m = jax.device_get(_DRAW(jax.random.key(seed), batch, grid,
                             min_keep=min_keep, **PAPER))
    nt, nc = int(m["num_target"]), int(m["num_context"])
    assert nc > min_keep
    for b in range(batch):
      ctx = set(m["context"][b, :nc].tolist())
      assert len(ctx) == nc
      assert np.all(np.diff(m["context"][b, :nc]) > 0)  # row-major order
      for k in range(PAPER["num_targets"]):
        block = m["targets"][k, b, :nt]
        rows, cols = block // gw, block % gw
        h, w = rows.max() - rows.min() + 1, cols.max() - cols.min() + 1
        assert h * w == nt == len(set(block.tolist()))  # a full rectangle
        assert (h, w) in sizes
        assert rows.max() < gh - 1 and cols.max() < gw - 1  # exclusive bound
        assert not ctx & set(block.tolist())  # context and targets disjoint
        assert m["target_mask"][k, b].sum() == nt
    # The cut to the batch minimum: some image keeps exactly nc patches.
    assert m["context_valid"].sum(1).min() == nc
    assert m["target_valid"][..., :nt].all()
    assert not m["target_valid"][..., nt:].any()


def test_multiblock_is_deterministic_in_the_key():
  draw = lambda k: _DRAW(k, 8, (7, 7), min_keep=4, **PAPER)
  a = jax.device_get(draw(jax.random.key(3)))
  b = jax.device_get(draw(jax.random.key(3)))
  c = jax.device_get(draw(jax.random.key(4)))
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])
  assert any(not np.array_equal(a[k], c[k]) for k in a)


def test_multiblock_problems_name_the_official_infinite_loop():
  assert masks.multiblock_problems((7, 7), min_keep=4, **PAPER) == []
  assert masks.multiblock_problems((14, 14), min_keep=10, **PAPER) == []
  (line,) = masks.multiblock_problems((8, 8), min_keep=10, **PAPER)
  assert "target block" in line and "min_keep = 10" in line
  with pytest.raises(ValueError, match="2x2"):
    masks.multiblock_masks(jax.random.key(0), 2, (1, 5))


def test_random_masking():
  m = jax.device_get(masks.random_masking(jax.random.key(0), 6, 49, 0.75))
  assert m["keep"].shape == (6, 12) and m["mask"].shape == (6, 49)
  for b in range(6):
    keep = set(m["keep"][b].tolist())
    assert len(keep) == 12
    assert set(np.flatnonzero(m["mask"][b] == 0).tolist()) == keep
    # ids_restore inverts the shuffle whose first K entries are kept.
    shuffle = np.argsort(m["ids_restore"][b])
    np.testing.assert_array_equal(shuffle[:12], m["keep"][b])
  assert len({tuple(sorted(k)) for k in m["keep"].tolist()}) == 6
  again = jax.device_get(masks.random_masking(jax.random.key(0), 6, 49, 0.75))
  np.testing.assert_array_equal(again["keep"], m["keep"])
  with pytest.raises(ValueError, match="mask_ratio"):
    masks.random_masking(jax.random.key(0), 2, 4, 0.9)
