"""Colour-op views: jitted jnp (ssljax.data.view_ops) vs batched tf.image.

    python benchmarks/view_ops.py            # both sizes
    python benchmarks/view_ops.py --repeats 5

Times the BYOL-style recipe after the crop (Grill et al. 2020, arXiv
2006.07733, Table 6): flip p = 0.5, colour jitter p = 0.8 with (b, c, s, h)
= (0.4, 0.4, 0.2, 0.1) in a random order per row, grayscale p = 0.2,
Gaussian blur p = 1.0 (σ in [0.1, 2], kernel 10 % of the height, reflect
padding), solarize p = 0.2, on float32 batches of (a) 512 x 32x32x3 and (b)
64 x 224x224x3, with

  1. jax: ``jax.jit(apply_view)`` on the default jax backend (the CPU here;
     on an accelerator this is the cost inside the train step);
  2. tf: the same recipe as batched TF ops inside one ``tf.function`` (the
     host-side alternative, e.g. in a tf.data map): per-row factors as
     (B, 1, 1, 1) tensors, tf.image.rgb_to_grayscale / rgb_to_hsv /
     hsv_to_rgb, blur as two depthwise convolutions with per-row kernels
     (rows folded into the channel axis), solarize with tf.where.

Both do the same work (every enabled op evaluated for every row at every
jitter step, then selected per row). Times are medians over ``--repeats``
calls after a warm-up call (compilation); printed as images/s, the ratio
jax / tf, and one JSON line per size.
"""

import argparse
import functools
import json
import time

import jax
import numpy as np
import tensorflow as tf

from ssljax.data import view_ops

RECIPE = dict(flip_prob=0.5, jitter_prob=0.8, brightness=0.4, contrast=0.4,
              saturation=0.2, hue=0.1, grayscale_prob=0.2, blur_prob=1.0,
              blur_sigma=(0.1, 2.0), blur_kernel_fraction=0.1,
              solarize_prob=0.2)
SIZES = ((512, 32), (64, 224))


def _tf_rows(mask):
  return tf.reshape(mask, [-1, 1, 1, 1])


def _tf_jitter(x, u):
  """Colour jitter of RECIPE, random order per row; u: (B, 9) uniforms."""
  b, c, s, h = (RECIPE[k] for k in ("brightness", "contrast", "saturation",
                                    "hue"))
  lows = tf.constant([1 - b, 1 - c, 1 - s])
  factors = lows + (tf.constant([1 + b, 1 + c, 1 + s]) - lows) * u[:, 1:4]
  shift = h * (2.0 * u[:, 4] - 1.0)
  order = tf.argsort(u[:, 5:9], axis=1)
  out = x
  for step in range(4):
    op = order[:, step]
    luma = tf.image.rgb_to_grayscale(out)
    mean = tf.reduce_mean(luma, axis=[1, 2, 3], keepdims=True)
    target = tf.where(_tf_rows(op == 0), 0.0,
                      tf.where(_tf_rows(op == 1), mean, luma))
    f = tf.gather(factors, tf.minimum(op, 2), axis=1, batch_dims=1)
    f = tf.reshape(f, [-1, 1, 1, 1])
    new = tf.clip_by_value(f * out + (1 - f) * target, 0.0, 1.0)
    hsv = tf.image.rgb_to_hsv(out)
    hue = tf.math.floormod(hsv[..., :1] + tf.reshape(shift, [-1, 1, 1, 1]),
                           1.0)
    hued = tf.image.hsv_to_rgb(tf.concat([hue, hsv[..., 1:]], -1))
    out = tf.where(_tf_rows(op == 3), tf.clip_by_value(hued, 0.0, 1.0), new)
  return tf.where(_tf_rows(u[:, 0] < RECIPE["jitter_prob"]), out, x)


def _tf_blur(x, sigma):
  """Separable per-row Gaussian blur; rows folded into depthwise channels."""
  bsz, height, width, ch = x.shape
  size = view_ops.blur_kernel_size(height, RECIPE["blur_kernel_fraction"])
  r = size // 2
  taps = tf.range(size, dtype=tf.float32) - r
  w = tf.exp(-0.5 * (taps[None, :] / sigma[:, None]) ** 2)
  w = w / tf.reduce_sum(w, axis=1, keepdims=True)  # (B, K)
  w = tf.reshape(tf.repeat(w, ch, axis=0), [bsz * ch, size])  # per channel
  # (B, H, W, C) -> (1, H, W, B * C).
  y = tf.reshape(tf.transpose(x, [1, 2, 0, 3]), [1, height, width, bsz * ch])
  y = tf.pad(y, [[0, 0], [r, r], [r, r], [0, 0]], mode="REFLECT")
  kh = tf.reshape(tf.transpose(w), [size, 1, bsz * ch, 1])
  kw = tf.reshape(tf.transpose(w), [1, size, bsz * ch, 1])
  y = tf.nn.depthwise_conv2d(y, kh, [1, 1, 1, 1], "VALID")
  y = tf.nn.depthwise_conv2d(y, kw, [1, 1, 1, 1], "VALID")
  return tf.transpose(tf.reshape(y, [height, width, bsz, ch]), [2, 0, 1, 3])


@tf.function(jit_compile=False)
def tf_view(x, seed):
  """The RECIPE as batched TF ops; x float32 (B, H, W, 3), seed int32 (2,)."""
  bsz = tf.shape(x)[0]
  u = tf.random.stateless_uniform([bsz, 14], seed=seed)
  x = tf.where(_tf_rows(u[:, 0] < RECIPE["flip_prob"]), tf.reverse(x, [2]), x)
  x = _tf_jitter(x, u[:, 1:10])
  gray = tf.image.grayscale_to_rgb(tf.image.rgb_to_grayscale(x))
  x = tf.where(_tf_rows(u[:, 10] < RECIPE["grayscale_prob"]), gray, x)
  lo, hi = RECIPE["blur_sigma"]
  blurred = _tf_blur(x, lo + (hi - lo) * u[:, 12])
  x = tf.where(_tf_rows(u[:, 11] < RECIPE["blur_prob"]), blurred, x)
  sol = tf.where(x >= 0.5, 1.0 - x, x)
  return tf.where(_tf_rows(u[:, 13] < RECIPE["solarize_prob"]), sol, x)


def _median_time(fn, repeats):
  fn()  # warm-up: tracing and compilation
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--repeats", type=int, default=7)
  args = parser.parse_args()
  jax_view = jax.jit(functools.partial(view_ops.apply_view, **RECIPE))
  print(f"jax backend: {jax.default_backend()}, devices: {jax.devices()}")
  print(f"{'batch':>16} {'jax img/s':>11} {'tf img/s':>11} {'jax/tf':>7}")
  for bsz, side in SIZES:
    images = np.random.default_rng(0).uniform(
        size=(bsz, side, side, 3)).astype(np.float32)
    x_jax, key = jax.device_put(images), jax.random.key(0)
    x_tf, seed = tf.constant(images), tf.constant([0, 1], tf.int32)
    t_jax = _median_time(
        lambda: jax_view(x_jax, key).block_until_ready(), args.repeats)  # pylint: disable=cell-var-from-loop
    t_tf = _median_time(lambda: tf_view(x_tf, seed).numpy(), args.repeats)  # pylint: disable=cell-var-from-loop
    rate_jax, rate_tf = bsz / t_jax, bsz / t_tf
    name = f"{bsz}x{side}x{side}x3"
    print(f"{name:>16} {rate_jax:11.0f} {rate_tf:11.0f} "
          f"{rate_jax / rate_tf:7.2f}")
    print(json.dumps({"batch": name, "jax_images_per_s": round(rate_jax, 1),
                      "tf_images_per_s": round(rate_tf, 1),
                      "jax_over_tf": round(rate_jax / rate_tf, 3),
                      "jax_backend": jax.default_backend(),
                      "repeats": args.repeats}))


if __name__ == "__main__":
  main()
