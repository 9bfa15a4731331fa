"""FLOPs, bytes and XLA buffers of a recipe's train step, from compilation only.

    python benchmarks/step_cost.py                       # I-JEPA and MAE ViT-B/16, batch 8
    python benchmarks/step_cost.py --recipes imagenet_vit:ijepa --batch 4
    python benchmarks/step_cost.py --encoder_kwargs hidden_dim=384,num_heads=6

For each recipe ``MODULE:ARG`` (``configs/MODULE.py`` with argument ARG)
the main job's step (`ssljax.train.sharded_train_step`: views, loss,
gradient, optimiser, teacher) is lowered and compiled for the default
backend (CPU here) on abstract inputs: the state from ``jax.eval_shape``
(nothing is initialised, nothing runs) and a batch of host crops
("views": uint8 (1, B, S, S, C)). Printed per step and per image:

* **GFLOP**: ``compiled.cost_analysis()["flops"]`` (every op of the step);
* **GB accessed**: ``cost_analysis()["bytes accessed"]``;
* **temp MiB**: ``compiled.memory_analysis().temp_size_in_bytes`` (the
  activations kept for the backward pass and the scratch buffers) and
  **buffers MiB** = arguments + outputs + temporaries − aliased (the
  figure `benchmarks/accelerator.py` reports as the XLA step buffers).

CPU numbers are XLA's estimates for the CPU compilation; a GPU compile
fuses differently, but the FLOPs and the scaling with the batch carry over.
Compile at small batches: one ViT-B/16 step takes about a minute on a
2-core machine.

For I-JEPA, ``--context_length K`` compiles the step with one context
length K as the branch it takes (`ssljax.methods.ijepa.context_lengths`):
the cost of the steps whose batch has a context of at most K patches.
XLA counts a conditional as its costliest branch and a loop body once, so
the FLOPs of the lengths above half the bound (the predictor runs one
target block at a time in a loop) are undercounted: the hand count below
holds for them.

Before/after the I-JEPA context cut (2-core x86-64
development machine, no GPU, 2026-11-26, cores shared with other jobs;
jax 0.10.2 CPU compile, recipe configs/imagenet_vit.py, batch 8; per image;
hand count: `hand_gflop`, forward FLOPs of the blocks, (8 + 4·mlp_ratio)·w² + 4·n·w per
token and block, times 3 for forward and backward, times 4 where a branch
recomputes its forward pass, plus one more predictor forward where it runs
one target block at a time):

| step | context length | GFLOP/img (XLA) | GFLOP/img (hand) | temp MiB/img | buffers MiB (B = 8) |
|---|---|---|---|---|---|
| I-JEPA before (padded to the bound; hand: one length, no recompute) | 169 | 256.8 | 249.9 | 954.7 | 9,196 |
| I-JEPA after, the whole step (worst branch) | 48-169 | 212.3 (undercounted) | 363.5 | 416.7 | 4,892 |
| I-JEPA after, batch context <= 48 | 48 | 146.8 | 141.5 | 331.6 | 4,211 |
| I-JEPA after, batch context <= 64 | 64 | 170.5 | 164.6 | 395.8 | 4,725 |
| I-JEPA after, batch context <= 88 | 88 | 132.5 (undercounted) | 225.6 | 237.5 | 3,458 |
| I-JEPA after, batch context <= 128 | 128 | 171.5 (undercounted) | 292.9 | 320.5 | 4,122 |
| I-JEPA after, batch context <= 169 | 169 | 212.3 (undercounted) | 363.5 | 416.7 | 4,892 |
| MAE (unchanged) | | 59.75 | 57.4 | 226.1 | 3,088 |

The batch's context (the smallest of its images', as the official
collator cuts) over 200 mask draws per batch size on the 14x14 grid: at
batch 8 mean 64, max 82 (lengths 48/64/88 taken 8/95/97 times); at 128
mean 51, max 67 (67/130/3 times); at 256 mean 48, max 61. Lengths 128 and
169 exist for the guarantee and were never taken. Hand count of the
official code's unpadded shapes at batch 128 (context 50, target 34):
104.8 GFLOP/img.
"""

import argparse
import importlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from ssljax import (config_validation, data, methods,  # noqa: E402
                    optimizers, train, train_state)
from ssljax.methods import ijepa  # noqa: E402


def recipe_config(recipe: str, batch: int, encoder_kwargs: dict):
  """The config of "module:arg" with batch ``batch`` (one device)."""
  module, _, arg = recipe.partition(":")
  config = importlib.import_module(f"configs.{module}").get_config(arg or None)
  config.batch_size = batch
  if encoder_kwargs:
    config.model.encoder_kwargs.update(encoder_kwargs)
  config_validation.validate(config)
  return config


def step_cost(config) -> dict:
  """Compiles the config's train step on abstract inputs; its costs."""
  method = methods.build(config)
  steps_per_epoch, total_steps = 100, 10_000
  lr_fn = optimizers.create_learning_rate_fn(config.optim, config.batch_size,
                                             steps_per_epoch, total_steps)
  tx = optimizers.create_optimizer(config.optim, lr_fn, steps_per_epoch,
                                   total_steps)
  shapes = train.batch_spec(config)
  state = jax.eval_shape(
      lambda key: train_state.create_train_state(method, tx, key, shapes),
      jax.random.key(config.seed))
  spec = data.view_spec(config.views)
  b, s, c = config.batch_size, config.views.size, config.dataset.channels
  batch = {"views": (jax.ShapeDtypeStruct((spec.num_global, b, s, s, c),
                                          jnp.uint8),)}
  step = train.sharded_train_step(config, train.make_mesh(jax.devices()[:1]),
                                  total_steps=total_steps,
                                  steps_per_epoch=steps_per_epoch)
  start = time.perf_counter()
  compiled = step.lower(state, batch).compile()
  seconds = time.perf_counter() - start
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):  # older jax: one dict per device
    cost = cost[0]
  mem = compiled.memory_analysis()
  buffers = (mem.argument_size_in_bytes + mem.output_size_in_bytes
             + mem.temp_size_in_bytes - mem.alias_size_in_bytes)
  return {"batch": b, "flops": float(cost["flops"]),
          "bytes_accessed": float(cost["bytes accessed"]),
          "temp_bytes": float(mem.temp_size_in_bytes),
          "argument_bytes": float(mem.argument_size_in_bytes),
          "buffer_bytes": float(buffers), "compile_s": seconds}


def _blocks_flops(tokens, length, width, depth, mlp_ratio):
  """Forward FLOPs of ``depth`` pre-norm blocks on ``tokens`` rows of
  sequences of ``length``: the matmuls (qkv, projection, MLP) and the
  attention's two products."""
  return tokens * depth * ((8 + 4 * mlp_ratio) * width ** 2
                           + 4 * length * width)


def hand_gflop(config, context_length: int = 0) -> float:
  """Hand count of the step's GFLOP per image (blocks only) for I-JEPA
  (at ``context_length``, 0: the library's longest length) and MAE; NaN
  for other methods."""
  enc = config.model.encoder_kwargs
  width, depth = enc.hidden_dim, enc.depth
  mlp = enc.get("mlp_ratio", 4.0)
  side = config.views.size // enc.patch_size
  patches = side * side
  if config.method == "mae":
    dec = config.model.mae_decoder
    keep = 1 + int(patches * (1 - config.masks.mask_ratio))
    return 3 * (_blocks_flops(keep, keep, width, depth, mlp)
                + _blocks_flops(patches + 1, patches + 1, dec.width,
                                dec.depth, 4.0)) / 1e9
  if config.method != "ijepa":
    return float("nan")
  kw = ijepa.Method(config).mask_kwargs()
  from ssljax.methods import masks  # pylint: disable=import-outside-toplevel
  t_max, bound = masks.multiblock_bounds(
      (side, side), target_scale=kw["target_scale"],
      target_aspect=kw["target_aspect"], context_scale=kw["context_scale"])
  lengths = ijepa.context_lengths(bound)
  k = context_length or lengths[-1]
  switched = len(lengths) > 1 or bool(context_length)
  one_block = switched and 2 * k > bound
  pred = config.model.jepa_predictor
  m = kw["num_targets"]
  target = _blocks_flops(patches, patches, width, depth, mlp)
  context = _blocks_flops(k, k, width, depth, mlp)
  predictor = _blocks_flops(m * (k + t_max), k + t_max, pred.width,
                            pred.depth, 4.0)
  passes = 3 + switched
  return (target + passes * context
          + (passes + one_block) * predictor) / 1e9


def _kwargs(text: str) -> dict:
  out = {}
  for item in filter(None, text.split(",")):
    name, _, value = item.partition("=")
    out[name] = int(value) if value.lstrip("-").isdigit() else value
  return out


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--recipes", default="imagenet_vit:ijepa,imagenet_vit:mae")
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--context_length", type=int, default=0,
                      help="I-JEPA: compile the step with this one context "
                      "length as the branch the step takes (costs only: "
                      "the loss is wrong for batches with a longer "
                      "context); 0: the library's lengths")
  parser.add_argument("--encoder_kwargs", default="",
                      help="name=value,... over the recipe's encoder_kwargs")
  args = parser.parse_args(argv)
  if args.context_length:  # two equal branches: the switched form, one cost
    length = args.context_length
    ijepa.context_lengths = lambda bound: (min(length, bound),) * 2
  print(f"jax {jax.__version__}, backend {jax.default_backend()}, "
        f"batch {args.batch}")
  header = ("recipe", "GFLOP/img", "hand GFLOP/img", "GB acc./img", "temp MiB/img",
            "buffers MiB", "args MiB", "compile s")
  print(" | ".join(header))
  rows = []
  for recipe in filter(None, args.recipes.split(",")):
    config = recipe_config(recipe, args.batch, _kwargs(args.encoder_kwargs))
    r = step_cost(config)
    rows.append((recipe, r))
    b = r["batch"]
    print(f"{recipe} | {r['flops'] / b / 1e9:.2f} | "
          f"{hand_gflop(config, args.context_length):.1f} | "
          f"{r['bytes_accessed'] / b / 1e9:.3f} | "
          f"{r['temp_bytes'] / b / 2**20:.1f} | "
          f"{r['buffer_bytes'] / 2**20:.0f} | "
          f"{r['argument_bytes'] / 2**20:.0f} | {r['compile_s']:.0f}",
          flush=True)
  return rows


if __name__ == "__main__":
  main()
