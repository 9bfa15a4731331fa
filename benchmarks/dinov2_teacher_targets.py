"""How flat DINOv2's centred teacher targets are at initialisation.

    python benchmarks/dinov2_teacher_targets.py --config cpu \\
        --temperatures 0.02 0.04 0.07

Builds `ssljax.methods.dinov2` from ``configs/dinov2.py:<variant>``,
initialises it (seed 0) and runs the network on the first ``--images``
Fashion-MNIST train images (unaugmented, in [0, 1]). Prints, as one JSON
line:

* ``cls_cosine``: the mean cosine similarity of the backbone class tokens
  over all pairs of images (1: every image gives the same token);
* ``logit_std_over_images`` / ``logit_std_over_prototypes``: the DINO-head
  logits' standard deviation over the images (per prototype, averaged) and
  over the prototypes (per image, averaged); the logits are cosines in
  [-1, 1] (L2-normalised bottleneck, unit-norm prototypes);
* ``target_entropy``: per teacher temperature τ, the mean entropy (nats) of
  softmax((z - mean_images z) / τ), the batch-centred teacher targets of
  DINO (Caron et al. 2021, arXiv 2104.14294) and DINOv2 (Oquab et al. 2023,
  arXiv 2304.07193); ``uniform`` is ln K, the entropy of flat targets.

At initialisation the student and the teacher are the same network, so these
are the first step's targets up to the augmentation.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--config", default="cpu",
                      help="variant of configs/dinov2.py")
  parser.add_argument("--temperatures", nargs="+", type=float,
                      default=[0.02, 0.04, 0.07])
  parser.add_argument("--images", type=int, default=256)
  args = parser.parse_args(argv)

  import jax
  import jax.numpy as jnp

  from configs import dinov2 as dinov2_config
  from ssljax.data import fashion_mnist
  from ssljax.methods import dinov2

  images, _ = fashion_mnist.read_split(
      fashion_mnist.find_fashion_mnist_files(), "train")
  x = jnp.asarray(images[:args.images, :, :, None] / 255.0, jnp.float32)
  config = dinov2_config.get_config(args.config)
  method = dinov2.Method(config)
  params, _ = method.init(jax.random.key(0),
                          types.SimpleNamespace(view_shape=x.shape[1:]))
  out = method.network.apply({"params": params}, x, train=False)
  h, z = out["h"], out["z"]
  unit = h / jnp.linalg.norm(h, axis=1, keepdims=True)
  centred = z - z.mean(axis=0)
  entropy = {}
  for tau in args.temperatures:
    p = jax.nn.softmax(centred / tau, axis=-1)
    entropy[f"{tau:g}"] = round(float(
        -(p * jnp.log(jnp.maximum(p, 1e-30))).sum(-1).mean()), 3)
  result = {
      "config": f"configs/dinov2.py:{args.config}",
      "images": args.images,
      "cls_cosine": round(float((unit @ unit.T).mean()), 4),
      "logit_std_over_images": round(float(z.std(axis=0).mean()), 4),
      "logit_std_over_prototypes": round(float(z.std(axis=1).mean()), 4),
      "target_entropy": entropy,
      "uniform": round(math.log(z.shape[-1]), 3),
  }
  print(json.dumps(result))
  return result


if __name__ == "__main__":
  main()
