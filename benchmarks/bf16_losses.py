"""Every loss of ssljax.losses on bfloat16 embeddings against float32.

    python benchmarks/bf16_losses.py

For each loss: the dtype it returns on bfloat16 inputs, and its relative
difference to the float32 loss (a) on the same, bf16-rounded values cast to
float32 (0 when the loss computes in float32) and (b) on the unrounded
float32 embeddings (the rounding of the inputs to bf16's 8-bit mantissa).
tests/test_losses_bf16.py asserts the same cases.
"""

import jax
import jax.numpy as jnp
import numpy as np

from ssljax import losses

N, K, Q = 64, 32, 128


def inputs() -> dict:
  """Float32 inputs of the cases: two views, a predictor output pair, a
  support queue, DINO student/teacher logits, edge-batch weights."""
  keys = jax.random.split(jax.random.key(0), 6)
  z1 = jax.random.normal(keys[0], (N, K))
  z2 = z1 + 0.3 * jax.random.normal(keys[1], (N, K))
  p1 = z2 + 0.5 * jax.random.normal(keys[2], (N, K))
  p2 = z1 + 0.5 * jax.random.normal(keys[3], (N, K))
  return {"z1": z1, "z2": z2, "p1": p1, "p2": p2,
          "queue": jax.random.normal(keys[4], (Q, K)),
          "student": 3 * jax.random.normal(keys[5], (4, N, K)),
          "info": jnp.ones((3, 2, N))}


def _pair_graph(n):
  half = n // 2
  return jnp.asarray(np.kron(np.array([[0, 1], [1, 0]]), np.eye(half)),
                     jnp.float32)


def _stacked(x):
  return jnp.concatenate([x["z1"][:N // 2], x["z2"][:N // 2]])


G = _pair_graph(N)
CASES = {
    "vicreg_two_view": lambda x: losses.vicreg_two_view(x["z1"], x["z2"]),
    "vicreg": lambda x: losses.vicreg(_stacked(x), G),
    "edge_vic2_terms": lambda x: losses.edge_vic2_terms(
        jnp.stack([x["z1"], x["z2"]]), x["info"])["loss"],
    "simclr_two_view": lambda x: losses.simclr_two_view(x["z1"], x["z2"]),
    "simclr": lambda x: losses.simclr(_stacked(x), G),
    "barlow_twins_two_view": lambda x: losses.barlow_twins_two_view(
        x["z1"], x["z2"]),
    "barlow_twins": lambda x: losses.barlow_twins(_stacked(x), G),
    "spectral_contrastive_two_view":
        lambda x: losses.spectral_contrastive_two_view(x["z1"], x["z2"]),
    "spectral_contrastive": lambda x: losses.spectral_contrastive(
        _stacked(x), G),
    "wmse_two_view": lambda x: losses.wmse_two_view(x["z1"], x["z2"]),
    "frossl": lambda x: losses.frossl((x["z1"], x["z2"])),
    "byol_two_view": lambda x: losses.byol_two_view(x["p1"], x["p2"],
                                                    x["z1"], x["z2"]),
    "simsiam_two_view": lambda x: losses.simsiam_two_view(x["p1"], x["p2"],
                                                          x["z1"], x["z2"]),
    "mocov3_two_view": lambda x: losses.mocov3_two_view(x["p1"], x["p2"],
                                                        x["z1"], x["z2"]),
    "nnclr_two_view": lambda x: losses.nnclr_two_view(
        x["p1"], x["p2"], x["z1"], x["z2"], x["queue"]),
    "dino": lambda x: losses.dino(x["student"], x["student"][:2] * 0.5,
                                  jnp.zeros((K,), x["student"].dtype)),
    # SwAV scores are cosines (|s| <= 1): the logits divided by 10.
    "swav": lambda x: losses.swav(x["student"] / 10),
    "koleo": lambda x: losses.koleo(x["z1"]),
    "gram_anchoring": lambda x: losses.gram_anchoring(
        x["student"][:2], x["student"][2:]),
}


def compare(case) -> tuple[str, float, float]:
  """(dtype on bf16 inputs, rel. diff. to float32 on the same values, rel.
  diff. to float32 on the unrounded values) of one case."""
  x32 = inputs()
  x16 = {k: v.astype(jnp.bfloat16) for k, v in x32.items()}
  out16 = jax.jit(case)(x16)
  same = case({k: v.astype(jnp.float32) for k, v in x16.items()})
  exact = case(x32)
  rel = lambda a, b: abs(float(a) - float(b)) / abs(float(b))
  return str(out16.dtype), rel(out16, same), rel(out16, exact)


if __name__ == "__main__":
  print(f"{'loss':32s} {'dtype':9s} {'vs f32 same values':>20s} "
        f"{'vs f32 unrounded':>18s}")
  for name, case in CASES.items():
    dtype, same, exact = compare(case)
    print(f"{name:32s} {dtype:9s} {same:20.2e} {exact:18.2e}")
