"""Generated image folders, for smoke runs, tests and benchmarks offline.

``write_image_folder(root, ...)`` writes ``root/train/<class>/*.jpg`` and
``root/test/<class>/*.jpg`` (or PNG): RGB images whose class sets the hue
of a filled disc and of a bar on a textured background, with random
position, size, brightness and image size, so that a network can learn
the classes from crops and colour but not from one pixel. It is what the
``smoke`` variants of the CIFAR and ImageNet recipes train on, through the
same image-folder code path as real data.
"""

import colorsys
import os
import pathlib

import numpy as np

__all__ = ["write_image_folder"]


def _image(rng, label: int, num_classes: int, height: int, width: int):
  """uint8 (H, W, 3): a class-coloured disc and bar on a noisy background."""
  ys, xs = np.mgrid[0:height, 0:width]
  background = rng.uniform(0.2, 0.6, 3)
  texture = rng.normal(0.0, 0.08, (height, width, 1))
  image = np.clip(background + texture, 0, 1)
  hue = label / num_classes
  colour = np.asarray(colorsys.hsv_to_rgb(hue, 0.9, rng.uniform(0.6, 1.0)))
  cy, cx = rng.uniform(0.3, 0.7) * height, rng.uniform(0.3, 0.7) * width
  radius = rng.uniform(0.15, 0.3) * min(height, width)
  disc = (ys - cy) ** 2 + (xs - cx) ** 2 <= radius ** 2
  image[disc] = colour
  bar = np.abs(ys - rng.uniform(0.1, 0.9) * height) < 0.06 * height
  image[bar] = colour[::-1]
  return (image * 255).astype(np.uint8)


def write_image_folder(root, *, num_train: int = 64, num_test: int = 32,
                       num_classes: int = 4, size: int = 40,
                       size_jitter: int = 8, seed: int = 0,
                       image_format: str = "jpeg") -> pathlib.Path:
  """Writes a labelled image folder with train and test splits.

  Args:
    root: directory to create (parents too); existing files are kept and
      overwritten by name.
    num_train, num_test: images per split (classes in turn).
    num_classes: number of class folders "class_0", ...
    size: mean image side in pixels.
    size_jitter: sides vary uniformly in [size − j, size + j] (0: all
      size x size).
    seed: numpy seed of the images.
    image_format: "jpeg" (quality 90) or "png".

  Returns:
    ``root`` as a pathlib.Path.

  Raises:
    ValueError: a count < 1, size − size_jitter < 1, unknown format.
  """
  from PIL import Image  # pylint: disable=import-outside-toplevel
  if min(num_train, num_test, num_classes) < 1:
    raise ValueError("num_train, num_test and num_classes must be >= 1, got "
                     f"{num_train}, {num_test}, {num_classes}")
  if size - size_jitter < 1:
    raise ValueError(f"size - size_jitter must be >= 1, got {size} - "
                     f"{size_jitter}")
  suffix = {"jpeg": ".jpg", "png": ".png"}.get(image_format)
  if suffix is None:
    raise ValueError(f"image_format must be 'jpeg' or 'png', got "
                     f"{image_format!r}")
  root = pathlib.Path(root)
  rng = np.random.default_rng(seed)
  for split, count in (("train", num_train), ("test", num_test)):
    for c in range(num_classes):
      os.makedirs(root / split / f"class_{c}", exist_ok=True)
    for i in range(count):
      label = i % num_classes
      height, width = rng.integers(size - size_jitter, size + size_jitter + 1,
                                   2)
      pixels = _image(rng, label, num_classes, int(height), int(width))
      path = root / split / f"class_{label}" / f"{i:06d}{suffix}"
      Image.fromarray(pixels).save(path, quality=90)
  return root
