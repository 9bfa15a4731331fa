"""The view recipe: G global and L local crops, each with its own ops.

A `ViewSpec` holds everything a run's views need: how many global (G) and
local (L) crops, their sizes and crop ranges, and for each of the V = G + L
views the probability and strength of every op of `ssljax.data.view_ops`
(flip, colour jitter, grayscale, blur, solarisation, erasing, noise), so the
asymmetric recipes of BYOL, VICReg or Barlow Twins are configs, not code.

`device_views` runs inside the jitted train step, on every path. It
receives what the host shipped: the uint8 images of the batch
(`ssljax.data.batches.train_batches`), cropped here once per view; the
uint8 endpoint images of an edge batch of a whole-dataset graph
(`ssljax.data.edges.edge_batches`), view v cropped from endpoint v; or the
host's uint8 crops of images of several sizes. Then it applies each view's
ops. Every draw is keyed by ``key`` (derived from
(seed, step)) with the batch as the leading axis, so the views at step s
are the same on 1 or 8 devices, in 1 or 2 processes, and after a resume.

Rows are samples. Views are returned as a list, view-major: global views
first, then local ones; view v of sample i is row i of ``views[v]``.
"""

import dataclasses

import jax

from ssljax.data import crops, view_ops

__all__ = ["PER_VIEW_OPTIONS", "RANGE_OPTIONS", "ViewSpec", "device_views",
           "view_spec"]

# Options of ssljax.data.view_ops.apply_view, set per view in the config.
PER_VIEW_OPTIONS = tuple(view_ops.VIEW_OP_OPTIONS)
# Of those, the ones whose value is a (min, max) range.
RANGE_OPTIONS = ("blur_sigma", "erase_scale")


@dataclasses.dataclass(frozen=True)
class ViewSpec:
  """The views of a run (hashable: a static argument of the jitted step).

  Attributes:
    num_global: G >= 1 global crops.
    num_local: L >= 0 local crops.
    size: global crop side in pixels (0: the images' own size).
    local_size: local crop side in pixels.
    crop: crop mode of `ssljax.data.crops` ("random_resized", "pad_and_crop",
      "none"); local crops are always "random_resized".
    crop_scale, local_crop_scale: area-fraction ranges of the two crop kinds.
    crop_ratio: aspect-ratio range (width / height) of every crop.
    pad: padding of "pad_and_crop".
    ops: V tuples of (option, value) pairs, the `view_ops.apply_view`
      options of each view.
  """
  num_global: int = 2
  num_local: int = 0
  size: int = 0
  local_size: int = 0
  crop: str = "random_resized"
  crop_scale: tuple = (0.08, 1.0)
  local_crop_scale: tuple = (0.05, 0.4)
  crop_ratio: tuple = (3 / 4, 4 / 3)
  pad: int = 4
  ops: tuple = ()

  @property
  def num_views(self) -> int:
    return self.num_global + self.num_local

  def sizes(self, image_shape=None) -> tuple:
    """The V crop sides; a global size 0 takes the images' height."""
    size = self.size or (image_shape[0] if image_shape else 0)
    return (size,) * self.num_global + (self.local_size,) * self.num_local

  def crop_args(self, view: int) -> dict:
    """`crops.device_crop` / `crops.host_crop` range arguments of a view."""
    local = view >= self.num_global
    return {"crop_scale": self.local_crop_scale if local else self.crop_scale,
            "crop_ratio": self.crop_ratio}


def _per_view(name, value, num_views):
  """``value`` for each of the V views: a scalar (or range) for all, or one
  per view.

  Raises:
    ValueError: a tuple whose length is neither 1 nor V.
  """
  is_range = name in RANGE_OPTIONS
  single = (not isinstance(value, (tuple, list)) or
            (is_range and not isinstance(value[0], (tuple, list))))
  if single:
    return (tuple(value) if is_range else value,) * num_views
  if len(value) == 1:
    return (tuple(value[0]) if is_range else value[0],) * num_views
  if len(value) != num_views:
    raise ValueError(f"views.{name} has {len(value)} entries; give one value "
                     f"for every view or one per view (V = {num_views})")
  return tuple(tuple(v) if is_range else v for v in value)


def view_spec(views) -> ViewSpec:
  """The `ViewSpec` of a config's ``views`` section (a ConfigDict or dict).

  ``num_global`` (G, default 2) global and ``num_local`` (L, default 0)
  local crops; sizes, crop ranges and ``pad`` as `ViewSpec`'s attributes.
  Options of `PER_VIEW_OPTIONS` may be one value for every view or a tuple
  of V = num_global + num_local values (global views first); missing ones
  take the `view_ops.VIEW_OP_OPTIONS` defaults.

  Raises:
    ValueError: a per-view tuple of the wrong length, unknown crop mode, or
      the old names ``num_views`` / ``num_local_views`` (renamed
      ``num_global`` / ``num_local``).
  """
  views = dict(views)
  for old, name in (("num_views", "num_global"),
                    ("num_local_views", "num_local")):
    if old in views:
      raise ValueError(f"views.{old} was renamed views.{name}")
  num_global = int(views.get("num_global", 2))
  num_local = int(views.get("num_local", 0))
  num_views = num_global + num_local
  per_view = {name: _per_view(name, views.get(name, default), num_views)
              for name, default in view_ops.VIEW_OP_OPTIONS.items()}
  ops = tuple(tuple((name, per_view[name][v]) for name in PER_VIEW_OPTIONS)
              for v in range(num_views))
  crop = views.get("crop", "random_resized")
  if crop not in crops.CROP_MODES:
    raise ValueError(f"views.crop must be one of {crops.CROP_MODES}, got "
                     f"{crop!r}")
  return ViewSpec(
      num_global=num_global, num_local=num_local,
      size=int(views.get("size", 0)),
      local_size=int(views.get("local_size", 0)), crop=crop,
      crop_scale=tuple(views.get("crop_scale", (0.08, 1.0))),
      local_crop_scale=tuple(views.get("local_crop_scale", (0.05, 0.4))),
      crop_ratio=tuple(views.get("crop_ratio", (3 / 4, 4 / 3))),
      pad=int(views.get("pad", 4)), ops=ops)


def device_views(batch: dict, key, spec: ViewSpec) -> list:
  """The V augmented views of a batch, on the devices (jit-able).

  Args:
    batch: dict with one of
      "images": uint8 (B, H, W, C) of one shape, every view cropped here
        from the same rows;
      "edge_images": uint8 (2, B, H, W, C), the endpoints of B edges of a
        whole-dataset graph (`ssljax.data.edge_batches`): view v is cropped
        here from [v], with the keys view v of "images" would use (V = 2);
      "views": a tuple of uint8 arrays (V_g, B, S_g, S_g, C) of host crops
        (one array per crop size, global first);
      "ready_views": float (V, B, H, W, C) views made elsewhere, returned
        unchanged (tests and benchmarks that feed fixed views; no config
        path ships them).
    key: a ``jax.random`` key of this step.
    spec: the run's `ViewSpec`.

  Returns:
    list of V float32 arrays (B, S_v, S_v, C) in [0, 1].

  Raises:
    ValueError: "edge_images" with a spec of V != 2 views.
  """
  if "ready_views" in batch:
    return list(batch["ready_views"])
  if "images" in batch or "edge_images" in batch:
    if "images" in batch:
      sources = [batch["images"]] * spec.num_views
    else:
      if spec.num_views != 2:
        raise ValueError(f"edge batches have 2 views (the endpoints), the "
                         f"spec {spec.num_views}")
      sources = list(batch["edge_images"])
    sizes = spec.sizes(sources[0].shape[1:])
    cropped = []
    for v, (images, size) in enumerate(zip(sources, sizes)):
      mode = spec.crop if v < spec.num_global else "random_resized"
      cropped.append(crops.device_crop(
          images, jax.random.fold_in(key, 2 * v), size=size, crop=mode,
          pad=spec.pad, **spec.crop_args(v)) / 255.0)
  else:
    cropped = [view for group in batch["views"] for view in group]
  return [view_ops.apply_view(x, jax.random.fold_in(key, 2 * v + 1),
                              **dict(spec.ops[v]))
          for v, x in enumerate(cropped)]
