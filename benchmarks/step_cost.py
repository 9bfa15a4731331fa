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

Before/after of the I-JEPA fix (branch ijepa-memory; 2-core x86-64
development machine, no GPU, 2026-11-26, cores shared with other jobs;
``python benchmarks/step_cost.py --batch 8``; per image):

    see the table in the module's ``RESULTS`` below.
"""

import argparse
import importlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from ssljax import config_validation, data, methods, train  # noqa: E402
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
  lr_fn = train.create_learning_rate_fn(config.optim, config.batch_size,
                                        steps_per_epoch, total_steps)
  tx = train.create_optimizer(config.optim, lr_fn, steps_per_epoch)
  shapes = train.batch_spec(config)
  state = jax.eval_shape(
      lambda key: train.create_train_state(method, tx, key, shapes),
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
                      help="I-JEPA: compile the step at this one context "
                      "length (costs only: the loss is wrong for batches "
                      "with a longer context); 0: the library's lengths")
  parser.add_argument("--encoder_kwargs", default="",
                      help="name=value,... over the recipe's encoder_kwargs")
  args = parser.parse_args(argv)
  if args.context_length:
    ijepa.context_lengths = lambda bound: (min(args.context_length, bound),)
  print(f"jax {jax.__version__}, backend {jax.default_backend()}, "
        f"batch {args.batch}")
  header = ("recipe", "GFLOP/img", "GB acc./img", "temp MiB/img",
            "buffers MiB", "args MiB", "compile s")
  print(" | ".join(header))
  rows = []
  for recipe in filter(None, args.recipes.split(",")):
    config = recipe_config(recipe, args.batch, _kwargs(args.encoder_kwargs))
    r = step_cost(config)
    rows.append((recipe, r))
    b = r["batch"]
    print(f"{recipe} | {r['flops'] / b / 1e9:.2f} | "
          f"{r['bytes_accessed'] / b / 1e9:.3f} | "
          f"{r['temp_bytes'] / b / 2**20:.1f} | "
          f"{r['buffer_bytes'] / 2**20:.0f} | "
          f"{r['argument_bytes'] / 2**20:.0f} | {r['compile_s']:.0f}",
          flush=True)
  return rows


if __name__ == "__main__":
  main()
