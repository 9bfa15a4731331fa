"""Wall time of the closed-form theory solvers at N = 4000 (one run each).

    .venv/bin/python benchmarks/theory.py [--n 4000] [--k 16] [--method auto]

Prints seconds for `kernel_embedding` (Gaussian kernel + jitter, supervised
graph, float64) and, for reference, the residual ‖gradient‖ at Z*.
Timings depend on the machine load; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from ssljax.theory import spectral


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--n", type=int, default=4000)
  parser.add_argument("--k", type=int, default=16)
  parser.add_argument("--classes", type=int, default=10)
  parser.add_argument("--ridge", type=float, default=1e-2)
  parser.add_argument("--method", default="auto")
  args = parser.parse_args()

  with jax.enable_x64(True):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, args.classes, args.n)
    centres = rng.standard_normal((args.classes, 8))
    x = jnp.asarray(centres[labels] + 0.5 * rng.standard_normal((args.n, 8)))
    y = jax.nn.one_hot(labels, args.classes, dtype=jnp.float64)
    g = y @ y.T
    kmat = spectral.gaussian_kernel(x, x, 2.0) + 1e-6 * jnp.eye(args.n)
    kmat.block_until_ready()

    start = time.perf_counter()
    emb = spectral.kernel_embedding(kmat, g, args.k, args.ridge,
                                    method=args.method)
    emb.z.block_until_ready()
    seconds = time.perf_counter() - start

    # Gradient of ‖ZZᵀ − G‖² + λTr(ZᵀK⁻¹Z) at Z*: 4(ZZᵀ − G)Z + 2λK⁻¹Z.
    z = emb.z
    grad = 4.0 * (z @ (z.T @ z) - g @ z) + 2.0 * args.ridge * emb.coef
    rel_grad = float(jnp.linalg.norm(grad) / jnp.linalg.norm(g @ z))
  print(f"kernel_embedding N={args.n} k={args.k} method={args.method}:"
        f" {seconds:.2f} s  (relative gradient norm at Z* {rel_grad:.2e})")


if __name__ == "__main__":
  main()
