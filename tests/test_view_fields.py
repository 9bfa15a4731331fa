"""Every ``config.views`` field has its effect, on the plain and the graph path.

For each field: its neutral value leaves the views equal to the plain crop
(the same crop, keyed alike, with every op off), and a non-neutral value
changes the pixels the way the field says (flip 1 mirrors every view,
grayscale 1 gives equal channels, solarize 1 inverts above the threshold,
...). "plain": a batch of images, every view cut from the same rows
(`ssljax.data.train_batches`); "graph": an edge batch of a whole-dataset
graph (`ssljax.data.edge_batches`), view v cut from endpoint v. Both go
through `ssljax.data.device_views` with the spec `ssljax.data.view_spec`
makes of the fields, as the train step does.
"""

import jax
import numpy as np
import pytest

from ssljax import config_validation, data, graphs

PATHS = ("plain", "graph")
# The plain crop: a random resized crop, every op off.
BASE = {"crop": "random_resized", "crop_scale": (0.2, 1.0), "flip_prob": 0.0}
SIDE, ROWS = 12, 6


def _images():
  """uint8 (2·ROWS, SIDE, SIDE, 3): smooth colour ramps plus noise."""
  rng = np.random.default_rng(0)
  ramp = np.linspace(0, 1, SIDE)
  x = (ramp[None, :, None, None] * rng.uniform(0.3, 1, (2 * ROWS, 1, 1, 3))
       + ramp[None, None, :, None] * rng.uniform(0, 0.5, (2 * ROWS, 1, 1, 3))
       + rng.uniform(0, 0.2, (2 * ROWS, SIDE, SIDE, 3)))
  return np.clip(x * 200, 0, 255).astype(np.uint8)


IMAGES = _images()


def _batch(path):
  if path == "plain":
    return {"images": IMAGES[:ROWS]}
  g = graphs.symmetrize_edges(2 * ROWS, np.arange(ROWS),
                              np.arange(ROWS) + ROWS, np.ones(ROWS))
  batch = next(data.edge_batches(IMAGES, g, batch_size=ROWS, seed=0,
                                 num_steps=1, threads=1))
  return {"edge_images": batch["edge_images"]}


def views(path, **fields):
  """The views of step 3 of seed 0 with BASE updated by ``fields``."""
  spec = data.view_spec({**BASE, **fields})
  key = jax.random.fold_in(jax.random.key(0), 3)
  return [np.asarray(v) for v in data.device_views(_batch(path), key, spec)]


def _same(a, b, atol=0.0):
  assert len(a) == len(b)
  for x, y in zip(a, b):
    np.testing.assert_allclose(x, y, atol=atol, rtol=0)


def _luma(x):
  return x @ np.array([0.299, 0.587, 0.114])


def _tv(x):
  return np.abs(np.diff(x, axis=1)).mean() + np.abs(np.diff(x, axis=2)).mean()


# field -> (neutral fields, check(path, base views)): the effect check of a
# non-neutral value; base = the plain crop.
def _flip(path, base):
  _same(views(path, flip_prob=1.0), [b[:, :, ::-1] for b in base])


def _jitter_prob(path, base):
  got = views(path, jitter_prob=1.0, brightness=0.5)
  for g, b in zip(got, base):  # every row scaled by one factor
    keep = (b > 0.05) & (g < 0.999)
    ratio = np.where(keep, g / np.where(keep, b, 1), np.nan)
    per_row = np.nanmean(ratio.reshape(len(b), -1), 1)
    assert np.all((per_row > 0.5 - 1e-4) & (per_row < 1.5 + 1e-4))
    assert np.nanmax(np.abs(ratio - per_row[:, None, None, None])) < 1e-4
    assert np.abs(per_row - 1).max() > 1e-3


def _contrast(path, base):
  got = views(path, jitter_prob=1.0, contrast=0.3)
  for g, b in zip(got, base):  # luma mean kept where nothing clips, spread
    clean = (g.min((1, 2, 3)) > 0) & (g.max((1, 2, 3)) < 1)  # scaled
    assert clean.any()
    np.testing.assert_allclose(_luma(g).mean((1, 2))[clean],
                               _luma(b).mean((1, 2))[clean], atol=1e-4)
    assert np.abs(g.std((1, 2, 3)) / b.std((1, 2, 3)) - 1).max() > 1e-2


def _saturation(path, base):
  got = views(path, jitter_prob=1.0, saturation=0.8)
  for g, b in zip(got, base):  # luma kept where nothing clips, chroma changed
    clean = (g.min(-1) > 0) & (g.max(-1) < 1)
    np.testing.assert_allclose(_luma(g)[clean], _luma(b)[clean], atol=1e-4)
    assert np.abs(g - b).max() > 1e-2


def _hue(path, base):
  got = views(path, jitter_prob=1.0, hue=0.3)
  for g, b in zip(got, base):  # HSV value and chroma kept, colours rotated
    np.testing.assert_allclose(g.max(-1), b.max(-1), atol=1e-4)
    np.testing.assert_allclose(g.max(-1) - g.min(-1), b.max(-1) - b.min(-1),
                               atol=1e-4)
    assert np.abs(g - b).max() > 1e-2


def _grayscale(path, base):
  for g, b in zip(views(path, grayscale_prob=1.0), base):
    np.testing.assert_allclose(g, np.repeat(_luma(b)[..., None], 3, -1),
                               atol=1e-5)


def _blur(path, base):
  for g, b in zip(views(path, blur_prob=1.0, blur_sigma=(1.5, 1.5)), base):
    assert _tv(g) < 0.8 * _tv(b)


def _blur_sigma(path, base):
  del base
  small = views(path, blur_prob=1.0, blur_sigma=(0.3, 0.3))
  large = views(path, blur_prob=1.0, blur_sigma=(2.0, 2.0))
  assert all(_tv(lg) < _tv(sm) for sm, lg in zip(small, large))


def _blur_kernel(path, base):
  del base
  narrow = views(path, blur_prob=1.0, blur_sigma=(3.0, 3.0),
                 blur_kernel_fraction=0.25)
  wide = views(path, blur_prob=1.0, blur_sigma=(3.0, 3.0),
               blur_kernel_fraction=1.0)
  assert all(_tv(w) < _tv(n) for n, w in zip(narrow, wide))


def _solarize(path, base, threshold=0.5):
  got = views(path, solarize_prob=1.0, solarize_threshold=threshold)
  for g, b in zip(got, base):
    np.testing.assert_allclose(g, np.where(b >= threshold, 1 - b, b),
                               atol=1e-6)


def _erase(path, base, scale=(0.02, 0.2)):
  got = views(path, erase_prob=1.0, erase_scale=scale)
  for g, b in zip(got, base):
    zero = np.all(g == 0, -1)  # erased pixels (all channels 0)
    np.testing.assert_array_equal(g[~zero], b[~zero])
    fraction = zero.mean((1, 2))
    assert np.all(fraction > 0)
    assert np.all(fraction <= scale[1] + 3 / SIDE)  # box edges: whole pixels


def _erase_scale(path, base):
  _erase(path, base, scale=(0.4, 0.4))
  big = np.mean([np.all(g == 0, -1).mean() for g in views(
      path, erase_prob=1.0, erase_scale=(0.4, 0.4))])
  assert big > 0.25


def _noise(path, base):
  for g, b in zip(views(path, noise_std=0.05), base):
    inside = (b > 0.2) & (b < 0.8)  # no clipping
    assert abs((g - b)[inside].std() - 0.05) < 0.01


def _crop(path, base):
  del base
  for x in views(path, crop="none"):  # the image itself
    assert x.shape == (ROWS, SIDE, SIDE, 3)
  got = views(path, crop="none")
  src = _batch(path)
  firsts = [src["images"]] * 2 if path == "plain" else src["edge_images"]
  _same(got, [f / 255.0 for f in firsts], atol=1e-6)


def _crop_scale(path, base):
  del base
  full = views(path, crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0))
  _same(full, views(path, crop="none"), atol=1e-5)  # the whole image
  small = views(path, crop_scale=(0.1, 0.1))  # a zoom: smoother
  assert all(_tv(s) < _tv(f) for s, f in zip(small, full))


def _crop_ratio(path, base):
  del base

  def across_over_down(x):  # column over row differences
    return (np.abs(np.diff(x, axis=2)).mean((1, 2, 3))
            / np.abs(np.diff(x, axis=1)).mean((1, 2, 3)))
  # Width / height 4 at area 1/4: full width, a quarter of the height
  # stretched 4x (rows smooth); 1/4: the other way round.
  wide = views(path, crop_scale=(0.25, 0.25), crop_ratio=(4.0, 4.0))
  tall = views(path, crop_scale=(0.25, 0.25), crop_ratio=(0.25, 0.25))
  for w, t in zip(wide, tall):
    assert np.all(across_over_down(w) > across_over_down(t))


def _pad(path, base):
  del base
  _same(views(path, crop="pad_and_crop", pad=0), views(path, crop="none"),
        atol=1e-6)
  src = views(path, crop="none")
  for v, x in zip(views(path, crop="pad_and_crop", pad=3), src):
    padded = np.pad(x, ((0, 0), (3, 3), (3, 3), (0, 0)))
    for i in range(ROWS):  # each row: one integer-shifted window
      assert any(np.allclose(v[i], padded[i, dy:dy + SIDE, dx:dx + SIDE],
                             atol=1e-6, rtol=0)
                 for dy in range(7) for dx in range(7))


def _size(path, base):
  assert all(b.shape[1:3] == (SIDE, SIDE) for b in base)  # 0: own size
  assert all(v.shape[1:3] == (7, 7) for v in views(path, size=7))


def _num_global(path, base):
  assert len(base) == 2
  if path == "graph":  # the endpoints are the two views
    with pytest.raises(ValueError, match="2 views"):
      views(path, num_global=3)
    return
  three = views(path, num_global=3)
  assert len(three) == 3 and not np.array_equal(three[2], three[1])


def _local(path, base, **extra):
  del base
  fields = {"num_local": 2, "local_size": 5, **extra}
  if path == "graph":  # refused before anything loads (two-view form)
    config = _knn_config()
    config.views.update(fields)
    with pytest.raises(config_validation.ConfigError, match="2 views"):
      config_validation.validate(config)
    return
  got = views(path, **fields)
  assert [v.shape[1] for v in got] == [SIDE, SIDE, 5, 5]
  return got


def _local_crop_scale(path, base):
  small = _local(path, base, local_crop_scale=(0.05, 0.05))
  if small is not None:
    large = _local(path, base, local_crop_scale=(1.0, 1.0))
    assert _tv(small[2]) < _tv(large[2])


def _knn_config():
  import os, sys  # pylint: disable=import-outside-toplevel,multiple-imports
  sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
  from configs import vicreg_knn_graph  # pylint: disable=import-outside-toplevel
  return vicreg_knn_graph.get_config("smoke")


# field -> (neutral fields relative to BASE, effect check).
FIELDS = {
    "flip_prob": ({"flip_prob": 0.0}, _flip),
    "jitter_prob": ({"jitter_prob": 0.0, "brightness": 0.5}, _jitter_prob),
    "brightness": ({"jitter_prob": 1.0, "brightness": 0.0}, _jitter_prob),
    "contrast": ({"jitter_prob": 1.0, "contrast": 0.0}, _contrast),
    "saturation": ({"jitter_prob": 1.0, "saturation": 0.0}, _saturation),
    "hue": ({"jitter_prob": 1.0, "hue": 0.0}, _hue),
    "grayscale_prob": ({"grayscale_prob": 0.0}, _grayscale),
    "blur_prob": ({"blur_prob": 0.0}, _blur),
    "blur_sigma": ({"blur_prob": 0.0, "blur_sigma": (2.0, 2.0)}, _blur_sigma),
    "blur_kernel_fraction": ({"blur_prob": 0.0, "blur_kernel_fraction": 1.0},
                             _blur_kernel),
    "solarize_prob": ({"solarize_prob": 0.0}, _solarize),
    "solarize_threshold": ({"solarize_prob": 0.0, "solarize_threshold": 0.3},
                           lambda p, b: _solarize(p, b, threshold=0.3)),
    "erase_prob": ({"erase_prob": 0.0}, _erase),
    "erase_scale": ({"erase_prob": 0.0, "erase_scale": (0.4, 0.4)},
                    _erase_scale),
    "noise_std": ({"noise_std": 0.0}, _noise),
    "crop": ({"crop": "random_resized"}, _crop),
    "crop_scale": ({"crop_scale": (0.2, 1.0)}, _crop_scale),
    "crop_ratio": ({"crop_ratio": (3 / 4, 4 / 3)}, _crop_ratio),
    "pad": ({"pad": 9}, _pad),  # read by "pad_and_crop" only
    "size": ({"size": 0}, _size),
    "num_global": ({"num_global": 2}, _num_global),
    "num_local": ({"num_local": 0}, _local),
    "local_size": ({"local_size": 7}, _local),  # read with num_local > 0
    "local_crop_scale": ({"local_crop_scale": (0.1, 0.2)}, _local_crop_scale),
}


def test_every_views_field_has_a_property():
  names = {p.removeprefix("views.") for p in config_validation.field_paths(
      _knn_config()) if p.startswith("views.")}
  assert names == set(FIELDS)


# The wide blur kernels compile slowly on CPU (9 s): -m slow.
CASES = [pytest.param(f, p, marks=[pytest.mark.slow]
                      if f == "blur_kernel_fraction" else [])
         for f in sorted(FIELDS) for p in PATHS]


@pytest.mark.parametrize("field,path", CASES)
def test_views_field_neutral_is_plain_crop_and_effect_shows(field, path):
  neutral, check = FIELDS[field]
  base = views(path)
  _same(views(path, **neutral), base)
  check(path, base)
