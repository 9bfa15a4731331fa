"""Random crops of a view: boxes, the device crop (jnp) and the host crop (Pillow).

Both crops use one box distribution, the RandomResizedCrop of Szegedy et al.
2015 ("Going deeper with convolutions", arXiv 1409.4842) exactly as
torchvision samples it (``RandomResizedCrop.get_params``), the crop that
SimCLR (Chen et al. 2020, arXiv 2002.05709, App. A) and its successors
train with. A candidate box of an H x W image is drawn from two uniforms:
area a = H·W·(s₀ + (s₁ − s₀)·u₀) pixels and aspect ratio (width / height)
r = exp(log r₀ + (log r₁ − log r₀)·u₁), log-uniform; its sides are
w = round(√(a·r)) and h = round(√(a / r)) pixels (half to even). Up to
`CROP_TRIES` (10) candidates are drawn; the first with 0 < w ≤ W and
0 < h ≤ H is taken, at the whole-pixel corner (⌊u₂·(H − h + 1)⌋,
⌊u₃·(W − w + 1)⌋). If none fits, the box is torchvision's fallback: the
whole image narrowed to the nearest allowed aspect ratio, centred.
Redrawing, not clipping an oversized box to the image, keeps every drawn
box's area in [s₀, s₁] and its aspect in [r₀, r₁]: a clipped box is larger
than drawn, which weakens the augmentation where the range allows
whole-image crops. A crop is a pure function of its (`CROP_TRIES`, 4)
uniforms.

Images of one fixed shape (Fashion-MNIST, CIFAR) are cropped on the devices,
inside the jitted step (`device_crop`): the host ships each image once and
every view, global or local, is cut from it there. Images of different sizes
(a folder, ImageNet) are cropped on the host as they are decoded
(`host_crop`), and only the fixed-size crops are shipped.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["CROP_MODES", "CROP_TRIES", "box_fractions", "center_crop",
           "device_crop", "host_crop", "host_uniforms"]

CROP_MODES = ("random_resized", "pad_and_crop", "none")
# Candidate boxes per crop, as in torchvision's RandomResizedCrop.
CROP_TRIES = 10
# Folded into the host crop seeds so they never reuse the shuffle's.
HOST_CROP_STREAM = 0xC20F


def box_fractions(u, crop_scale, crop_ratio, height, width, xp=np):
  """RandomResizedCrop boxes (y0, x0, h, w) as fractions of the image sides.

  The first of T candidate boxes that fits in the image, else the centred
  fallback, in whole pixels, as torchvision's ``RandomResizedCrop`` draws
  them (module docstring; Szegedy et al. 2015, arXiv 1409.4842).

  Args:
    u: float (n, T, 4) uniforms in [0, 1): candidate t of row i draws its
      area and aspect from u[i, t, :2] and, if taken, its corner from
      u[i, t, 2:]. A (n, 4) array is read as T = 1.
    crop_scale: (min, max) area fraction, 0 < min <= max <= 1.
    crop_ratio: (min, max) aspect ratio width / height, 0 < min <= max.
    height, width: image sides in pixels (scalars or (n,) arrays).
    xp: array module, numpy or jax.numpy.

  Returns:
    (y0, x0, h, w), each float (n,): the box's corner and sides in pixels
    divided by the image's sides, with 0 <= y0, y0 + h <= 1 (same for x).
  """
  u = u[:, None, :] if u.ndim == 2 else u
  height, width = xp.asarray(height), xp.asarray(width)
  rows_h, rows_w = (height[:, None], width[:, None]) if height.ndim else (
      height, width)
  area = rows_h * rows_w * (
      crop_scale[0] + (crop_scale[1] - crop_scale[0]) * u[..., 0])
  log_lo, log_hi = math.log(crop_ratio[0]), math.log(crop_ratio[1])
  aspect = xp.exp(log_lo + (log_hi - log_lo) * u[..., 1])
  box_w = xp.round(xp.sqrt(area * aspect))  # (n, T) pixels, half to even
  box_h = xp.round(xp.sqrt(area / aspect))
  fits = (box_w > 0) & (box_w <= rows_w) & (box_h > 0) & (box_h <= rows_h)
  first = xp.argmax(fits, axis=1)[:, None]  # the first fitting candidate
  pick = lambda a: xp.take_along_axis(a, first, axis=1)[:, 0]
  found = xp.any(fits, axis=1)
  box_h, box_w = pick(box_h), pick(box_w)
  top = xp.minimum(xp.floor(pick(u[..., 2]) * (height - box_h + 1)),
                   height - box_h)
  left = xp.minimum(xp.floor(pick(u[..., 3]) * (width - box_w + 1)),
                    width - box_w)
  # Fallback: the whole image, narrowed to the nearest allowed aspect.
  image_ratio = width / height
  fall_h = xp.where(image_ratio < crop_ratio[0],
                    xp.round(width / crop_ratio[0]), height)
  fall_w = xp.where(image_ratio > crop_ratio[1],
                    xp.round(height * crop_ratio[1]), width)
  box_h = xp.where(found, box_h, fall_h)
  box_w = xp.where(found, box_w, fall_w)
  top = xp.where(found, top, (height - fall_h) // 2)
  left = xp.where(found, left, (width - fall_w) // 2)
  return top / height, left / width, box_h / height, box_w / width


def device_crop(images, key, *, size: int, crop: str = "random_resized",
                crop_scale=(0.08, 1.0), crop_ratio=(3 / 4, 4 / 3),
                pad: int = 4):
  """Crops every row of a fixed-shape batch, vectorised, keyed by ``key``.

  Args:
    images: (B, H, W, C) uint8 or float array.
    key: a ``jax.random`` key; the draws have the batch as leading axis, so a
      row's crop does not depend on how the batch is sharded.
    size: output side S in pixels.
    crop: "random_resized" (box as in the module docstring, resized to S x S
      bilinearly with antialiasing), "pad_and_crop" (zero-pad by ``pad`` and
      take a random integer-shifted window; needs S = H = W) or "none" (the
      image resized to S x S; the identity when S = H = W).
    crop_scale, crop_ratio: RandomResizedCrop ranges (see `box_fractions`).
    pad: padding in pixels of "pad_and_crop".

  Returns:
    float32 (B, S, S, C), values in the input's range.

  Raises:
    ValueError: unknown crop mode, or "pad_and_crop" with S != H or H != W.
  """
  batch, height, width, _ = images.shape
  images = images.astype(jnp.float32)
  if crop == "none":
    if (height, width) == (size, size):
      return images
    return jax.image.resize(images, (batch, size, size, images.shape[3]),
                            "linear")
  if crop == "pad_and_crop":
    if not size == height == width:
      raise ValueError(f"crop 'pad_and_crop' keeps the image size: needs "
                       f"size == H == W, got size {size} for {height}x{width}")
    padded = jnp.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    offsets = jax.random.randint(key, (batch, 2), 0, 2 * pad + 1)
    cut = lambda x, o: jax.lax.dynamic_slice(x, (o[0], o[1], 0),
                                             (size, size, x.shape[2]))
    return jax.vmap(cut)(padded, offsets)
  if crop != "random_resized":
    raise ValueError(f"crop must be one of {CROP_MODES}, got {crop!r}")
  u = jax.random.uniform(key, (batch, CROP_TRIES, 4))
  y0, x0, box_h, box_w = box_fractions(u, crop_scale, crop_ratio, height,
                                       width, xp=jnp)
  # Output pixel i samples input coordinate (i + 0.5) / scale − translation
  # / scale: scale = S / (box side in pixels), translation = −corner · scale.
  scale = jnp.stack([size / (box_h * height), size / (box_w * width)], 1)
  translation = -jnp.stack([y0 * height, x0 * width], 1) * scale

  def one(image, s, t):
    return jax.image.scale_and_translate(
        image, (size, size, image.shape[2]), (0, 1), s, t, method="linear",
        antialias=True)

  return jax.vmap(one)(images, scale, translation)


def host_uniforms(seed: int, step: int, view: int, total_rows: int,
                  first_row: int, rows: int) -> np.ndarray:
  """The (rows, `CROP_TRIES`, 4) crop uniforms of rows [first_row,
  first_row + rows) of a global batch of ``total_rows`` at ``step``, view
  ``view``.

  Drawn for the whole global batch and sliced, so each process gets the
  draws a single process would make for its rows.
  """
  rng = np.random.default_rng([seed, HOST_CROP_STREAM, step, view])
  return rng.random((total_rows, CROP_TRIES, 4))[first_row:first_row + rows]


def host_crop(image: np.ndarray, u: np.ndarray, *, size: int,
              crop_scale=(0.08, 1.0), crop_ratio=(3 / 4, 4 / 3)) -> np.ndarray:
  """RandomResizedCrop of one decoded image on the host, with Pillow.

  Args:
    image: uint8 (H, W, C), C = 1 or 3, any size (smaller images are
      upsampled by the resize), or a Pillow image in mode "RGB" or "L"
      (read as it is, without the copy into Pillow an array needs).
    u: float (`CROP_TRIES`, 4) uniforms in [0, 1) (`host_uniforms`), or
      (4,) for one candidate.
    size: output side S.
    crop_scale, crop_ratio: as `box_fractions`.

  Returns:
    uint8 (S, S, C): the box resized bilinearly (Pillow's resize, which
    filters with the box's scale when it shrinks).
  """
  from PIL import Image  # pylint: disable=import-outside-toplevel
  if isinstance(image, np.ndarray):
    height, width, channels = image.shape
    pil = Image.fromarray(image[..., 0] if channels == 1 else image)
  else:
    (width, height), channels, pil = image.size, len(image.getbands()), image
  y0, x0, box_h, box_w = (float(v[0]) for v in box_fractions(
      np.asarray(u)[None], crop_scale, crop_ratio, height, width))
  box = (x0 * width, y0 * height, (x0 + box_w) * width, (y0 + box_h) * height)
  out = np.asarray(pil.resize((size, size), Image.BILINEAR, box=box), np.uint8)
  return out[..., None] if channels == 1 else out


def center_crop(image: np.ndarray, size: int, crop_fraction: float = 0.875):
  """Evaluation view of a decoded image: the shorter side resized to
  round(S / crop_fraction), then the central S x S square (the ImageNet
  evaluation transform: 256 then 224 for S = 224).

  Args:
    image: uint8 (H, W, C), C = 1 or 3.
    size: output side S.
    crop_fraction: S over the resized shorter side, in (0, 1].

  Returns:
    uint8 (S, S, C).
  """
  from PIL import Image  # pylint: disable=import-outside-toplevel
  height, width, channels = image.shape
  short = max(size, round(size / crop_fraction))
  scale = short / min(height, width)
  new_h, new_w = max(size, round(height * scale)), max(size, round(width * scale))
  top, left = (new_h - size) // 2, (new_w - size) // 2
  pil = Image.fromarray(image[..., 0] if channels == 1 else image)
  pil = pil.resize((new_w, new_h), Image.BILINEAR)
  out = np.asarray(pil.crop((left, top, left + size, top + size)), np.uint8)
  return out[..., None] if channels == 1 else out
