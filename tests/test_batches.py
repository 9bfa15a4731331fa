"""The streaming input pipeline: sources, batches keyed by (seed, step), crops.

Properties: the batch at step s is a pure function of (seed, s) (resume
equals an uninterrupted run); P processes read disjoint shards that together
are the single-process global batch and cover each epoch once; image folders
(labels from class folders, unlabeled, mixed modes, corrupt files skipped,
clear errors); a tfds ArrayRecord split streams the same records as the
in-memory split; the host and device crops cut the same box.
"""

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from ssljax import data, graphs
from ssljax.data import crops, fashion_mnist_tfds, synthetic

SPEC = data.view_spec({"num_global": 2, "size": 24})


def _array_source(num=40, size=12):
  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, (num, size, size, 3), dtype=np.uint8)
  return data.ArraySource(images, np.arange(num) % 5)


def _take(source, **kwargs):
  kwargs = {"batch_size": 8, "seed": 3, "spec": SPEC, "threads": 2} | kwargs
  return list(data.train_batches(source, **kwargs))


# ------------------------------------------------------------- batch order --
def test_epoch_is_a_permutation_and_processes_split_each_step():
  n, b, p = 40, 8, 4
  per_epoch = n // b
  seen = []
  for step in range(per_epoch):
    parts = [data.step_indices(step, seed=1, num_examples=n, batch_size=b,
                               process_index=i, process_count=p)
             for i in range(p)]
    whole = data.step_indices(step, seed=1, num_examples=n, batch_size=b)
    np.testing.assert_array_equal(np.concatenate(parts), whole)
    seen.extend(whole)
  assert sorted(seen) == list(range(n))  # every example once per epoch
  other = data.step_indices(per_epoch, seed=1, num_examples=n, batch_size=b)
  assert set(other) != set(data.step_indices(0, seed=1, num_examples=n,
                                             batch_size=b))


def test_resume_yields_the_batches_of_an_uninterrupted_run():
  source = _array_source()
  full = _take(source, num_steps=9)
  resumed = _take(source, start_step=6, num_steps=3)
  for a, b in zip(full[6:], resumed):
    np.testing.assert_array_equal(a["images"], b["images"])
    np.testing.assert_array_equal(a["labels"], b["labels"])


class _SlowSource:
  """An ArraySource whose reads take 50 ms and record how many overlap."""

  def __init__(self, source):
    import threading  # pylint: disable=import-outside-toplevel
    self.source, self.lock = source, threading.Lock()
    self.active = self.peak = 0

  def __len__(self):
    return len(self.source)

  def __getattr__(self, name):
    return getattr(self.source, name)

  def read(self, indices):
    import time  # pylint: disable=import-outside-toplevel
    with self.lock:
      self.active += 1
      self.peak = max(self.peak, self.active)
    time.sleep(0.05)
    with self.lock:
      self.active -= 1
    return self.source.read(indices)


def test_every_thread_prepares_a_step_even_with_a_short_prefetch():
  """threads=4, prefetch=1: grain's buffer is max(threads, prefetch), so
  several steps are read at once (with a buffer of 1, one at a time)."""
  assert data.read_options(16, 4).prefetch_buffer_size == 16
  assert data.read_options(2, 6).prefetch_buffer_size == 6
  with pytest.raises(ValueError, match="prefetch"):
    data.read_options(4, 0)
  source = _SlowSource(_array_source())
  batches = _take(source, num_steps=8, threads=4, prefetch=1)
  assert len(batches) == 8 and source.peak >= 2, source.peak
  for a, b in zip(batches, _take(_array_source(), num_steps=8)):
    np.testing.assert_array_equal(a["images"], b["images"])


def test_fixed_shape_batches_hold_the_images_of_their_indices():
  source = _array_source()
  for batch in _take(source, num_steps=3):
    np.testing.assert_array_equal(batch["images"],
                                  source.images[batch["indices"]])
    np.testing.assert_array_equal(batch["labels"],
                                  source.labels[batch["indices"]])


def test_bad_arguments_name_the_argument():
  source = _array_source()
  with pytest.raises(ValueError, match="batch_size"):
    _take(source, batch_size=41, num_steps=1)
  with pytest.raises(ValueError, match="start_step"):
    _take(source, start_step=-1, num_steps=1)
  with pytest.raises(ValueError, match="process_count"):
    _take(source, batch_size=9, process_count=2, num_steps=1)


# ------------------------------------------------------------ image folders --
@pytest.fixture(scope="module")
def folder(tmp_path_factory):
  root = tmp_path_factory.mktemp("images")
  return synthetic.write_image_folder(root, num_train=24, num_test=12,
                                      num_classes=3, size=30, size_jitter=6)


def test_folder_labels_come_from_class_folders(folder):
  source = data.ImageFolderSource(folder / "train")
  assert len(source) == 24 and source.num_classes == 3
  assert source.image_shape is None
  images, labels = source.read([0, 5, 23])
  assert all(x.dtype == np.uint8 and x.shape[2] == 3 for x in images)
  names = [source.files[i].split(os.sep)[0] for i in (0, 5, 23)]
  assert [source.classes[y] for y in labels] == names


def test_host_crops_resume_and_processes_agree(folder):
  source = data.ImageFolderSource(folder / "train")
  spec = data.view_spec({"num_global": 2, "size": 16, "num_local": 2,
                         "local_size": 8})
  full = _take(source, spec=spec, num_steps=4)
  assert [v.shape for v in full[0]["views"]] == [(2, 8, 16, 16, 3),
                                                 (2, 8, 8, 8, 3)]
  resumed = _take(source, spec=spec, start_step=3, num_steps=1)[0]
  parts = [_take(source, spec=spec, start_step=3, num_steps=1,
                 process_index=i, process_count=2)[0] for i in range(2)]
  for g in range(2):
    np.testing.assert_array_equal(full[3]["views"][g], resumed["views"][g])
    np.testing.assert_array_equal(
        np.concatenate([p["views"][g] for p in parts], axis=1),
        full[3]["views"][g])
  # View v is Pillow's crop of row i with the uniforms keyed (seed, step, v).
  images, _ = source.read(full[3]["indices"])
  for v, (g, j, size) in enumerate([(0, 0, 16), (0, 1, 16), (1, 0, 8),
                                    (1, 1, 8)]):
    u = crops.host_uniforms(3, 3, v, 8, 0, 8)
    for i, x in enumerate(images):
      np.testing.assert_array_equal(
          full[3]["views"][g][j, i],
          crops.host_crop(x, u[i], size=size, **spec.crop_args(v)))


def test_unlabeled_folder_and_mixed_layouts(tmp_path):
  rng = np.random.default_rng(0)
  flat = tmp_path / "flat"
  flat.mkdir()
  for i in range(3):
    Image.fromarray(rng.integers(0, 255, (9, 7, 3), np.uint8)).save(
        flat / f"{i}.png")
  source = data.ImageFolderSource(flat)
  assert source.num_classes is None and (source.labels == -1).all()
  os.makedirs(flat / "cls")
  Image.fromarray(np.zeros((5, 5, 3), np.uint8)).save(flat / "cls" / "a.png")
  with pytest.raises(data.DatasetUnavailableError, match="mixes"):
    data.ImageFolderSource(flat)


def test_empty_or_missing_folder_is_one_clear_error(tmp_path):
  (tmp_path / "empty").mkdir()
  (tmp_path / "empty" / "notes.txt").write_text("no images here")
  with pytest.raises(data.DatasetUnavailableError, match="has no"):
    data.ImageFolderSource(tmp_path / "empty")
  with pytest.raises(data.DatasetUnavailableError, match="does not exist"):
    data.ImageFolderSource(tmp_path / "missing")


def test_modes_are_converted_to_the_requested_channels(tmp_path):
  rgb = np.random.default_rng(1).integers(0, 255, (6, 6, 3), np.uint8)
  Image.fromarray(rgb).convert("L").save(tmp_path / "a_grey.png")
  Image.fromarray(rgb).save(tmp_path / "b_rgb.png")
  Image.fromarray(rgb).convert("RGBA").save(tmp_path / "c_rgba.png")
  Image.fromarray(rgb).convert("P").save(tmp_path / "d_palette.png")
  images, _ = data.ImageFolderSource(tmp_path).read(range(4))
  assert all(x.shape == (6, 6, 3) for x in images)
  grey = np.asarray(Image.fromarray(rgb).convert("L"))
  np.testing.assert_array_equal(images[0], np.repeat(grey[..., None], 3, 2))
  np.testing.assert_array_equal(images[2], rgb)  # alpha dropped
  images, _ = data.ImageFolderSource(tmp_path, channels=1).read(range(4))
  assert all(x.shape == (6, 6, 1) for x in images)


def test_corrupt_images_are_skipped_and_counted(tmp_path):
  rng = np.random.default_rng(2)
  for i in range(4):
    Image.fromarray(rng.integers(0, 255, (20, 20, 3), np.uint8)).save(
        tmp_path / f"{i}.jpg", quality=90)
  good = (tmp_path / "1.jpg").read_bytes()
  (tmp_path / "1.jpg").write_bytes(good[:len(good) // 3])  # truncated
  (tmp_path / "2.jpg").write_bytes(b"not an image")
  source = data.ImageFolderSource(tmp_path)
  spec = data.view_spec({"num_global": 2, "size": 8})
  batches = _take(source, spec=spec, batch_size=4, num_steps=3)
  assert all(b["views"][0].shape == (2, 4, 8, 8, 3) for b in batches)
  assert sorted(source.skipped) == [1, 2]
  images, _ = source.read([1, 2])  # both replaced by the next readable: 3
  np.testing.assert_array_equal(images[0], images[1])


def test_worker_processes_give_the_batches_of_one_process(tmp_path):
  """Two grain worker processes (dataset.workers = 2): the same host crops
  in step order, and the images they skipped reach the caller's source."""
  rng = np.random.default_rng(3)
  for i in range(8):
    Image.fromarray(rng.integers(0, 255, (20 + i, 24, 3), np.uint8)).save(
        tmp_path / f"{i}.jpg", quality=90)
  (tmp_path / "5.jpg").write_bytes(b"not an image")
  spec = data.view_spec({"num_global": 2, "size": 8, "num_local": 1,
                         "local_size": 4})
  kwargs = {"spec": spec, "batch_size": 4, "num_steps": 6, "prefetch": 2}
  here = data.ImageFolderSource(tmp_path)
  expected = _take(here, **kwargs)
  source = data.ImageFolderSource(tmp_path)
  got = _take(source, workers=2, threads=1, **kwargs)
  assert len(got) == len(expected) == 6
  for a, b in zip(expected, got):
    assert set(a) == set(b)  # no "skipped" entry left in the batches
    np.testing.assert_array_equal(a["indices"], b["indices"])
    np.testing.assert_array_equal(a["labels"], b["labels"])
    for u, v in zip(a["views"], b["views"]):
      np.testing.assert_array_equal(u, v)
  assert sorted(source.skipped) == sorted(here.skipped) == [5]
  with pytest.raises(ValueError, match="workers"):
    _take(source, workers=-2, **kwargs)  # -1 is auto



def _folder(tmp_path, count=8):
  rng = np.random.default_rng(5)
  for i in range(count):
    Image.fromarray(rng.integers(0, 255, (20 + i, 24, 3), np.uint8)).save(
        tmp_path / f"{i}.jpg", quality=90)
  return data.ImageFolderSource(tmp_path)


def test_auto_workers_are_processes_for_host_decoding_on_many_cpus(tmp_path):
  """dataset.workers = -1: cpus − 4 one-thread processes for images of
  several sizes (host crops) on >= 8 CPUs; else the given threads."""
  folder, memory = _folder(tmp_path, 2), _array_source()
  auto = data.AUTO_WORKERS
  assert data.host_workers(auto, 16, folder, cpus=16) == (12, 1)
  assert data.host_workers(auto, 16, folder, cpus=8) == (4, 1)
  assert data.host_workers(auto, 16, folder, cpus=7) == (0, 16)
  assert data.host_workers(auto, 16, memory, cpus=64) == (0, 16)
  assert data.host_workers(3, 2, folder, cpus=64) == (3, 2)
  assert data.host_workers(0, 2, folder, cpus=64) == (0, 2)
  with pytest.raises(ValueError, match="workers must be >= 0, or -1"):
    data.host_workers(-2, 1, folder, cpus=16)


def test_train_and_edge_batches_run_the_workers_auto_picks(tmp_path,
                                                           monkeypatch):
  """workers = -1 reaches host_iterator resolved (spied in this process on
  a 16-CPU affinity), and the batches are those of workers = 0."""
  from ssljax.data import batches  # pylint: disable=import-outside-toplevel
  calls, host_iterator = [], batches.host_iterator

  def spy(steps, *, source, threads, prefetch, workers=0):
    calls.append((workers, threads))
    return host_iterator(steps, source=source, threads=threads,
                         prefetch=prefetch)

  monkeypatch.setattr(batches, "host_iterator", spy)
  monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)),
                      raising=False)
  spec = data.view_spec({"num_global": 2, "size": 8})
  folder = _folder(tmp_path)
  auto = _take(folder, spec=spec, num_steps=2, workers=-1, threads=3)
  here = _take(folder, spec=spec, num_steps=2, workers=0, threads=3)
  assert calls == [(12, 1), (0, 3)]
  for a, b in zip(auto, here):
    assert set(a) == set(b)
    for u, v in zip(a["views"], b["views"]):
      np.testing.assert_array_equal(u, v)
  graph = graphs.symmetrize_edges(4, [0, 1, 2], [1, 2, 3], [1.0, 1.0, 1.0])
  images = np.zeros((4, 4, 4, 1), np.uint8)
  list(data.edge_batches(images, graph, batch_size=2, seed=0, num_steps=1,
                         threads=3, workers=-1))
  assert calls[-1] == (0, 3)  # fixed-shape images: this process's threads

# ------------------------------------------------------------------- tfds --
def test_array_record_split_streams_the_in_memory_records(tmp_path,
                                                          monkeypatch):
  from test_data import _synthetic, _write_idx  # pylint: disable=import-outside-toplevel
  idx = tmp_path / "idx"
  idx.mkdir()
  for split, num, offset in (("train", 30, 0), ("test", 10, 100)):
    images, labels = _synthetic(num, offset)
    names = data.fashion_mnist.FASHION_MNIST_FILES[split]
    _write_idx(idx / names[0], images)
    _write_idx(idx / names[1], labels)
  monkeypatch.setenv("SSLJAX_FASHION_MNIST_DIR", str(idx))
  fashion_mnist_tfds.FashionMnistLocal(
      data_dir=str(tmp_path / "tfds"),
      file_format="array_record").download_and_prepare()
  kwargs = dict(data_dir=str(tmp_path / "tfds"))
  streamed = data.open_split("fashion_mnist_local", "train", in_memory="no",
                             **kwargs)
  idx_memory = data.open_split("fashion_mnist_local", "train", in_memory="yes",
                               **kwargs)
  assert isinstance(streamed, data.TfdsSource) and len(streamed) == 30
  assert streamed.num_classes == idx_memory.num_classes == 10
  # tfds stores the records in its own order (hashed keys); the IDX files
  # are read in file order: the same records.
  records = streamed.read(range(30))
  assert (sorted(zip(map(bytes, records[0]), records[1].tolist()))
          == sorted(zip(map(bytes, idx_memory.images), idx_memory.labels.tolist())))
  memory = data.ArraySource(*records, num_classes=10)
  spec = data.view_spec({"num_global": 2})
  for a, b in zip(_take(streamed, spec=spec, num_steps=4),
                  _take(memory, spec=spec, num_steps=4)):
    np.testing.assert_array_equal(a["images"], b["images"])
    np.testing.assert_array_equal(a["labels"], b["labels"])


def test_tfrecord_split_cannot_stream_and_says_how_to_fix(tmp_path,
                                                          monkeypatch):
  from test_data import _synthetic, _write_idx  # pylint: disable=import-outside-toplevel
  idx = tmp_path / "idx"
  idx.mkdir()
  for split, num in (("train", 8), ("test", 4)):
    images, labels = _synthetic(num, 0)
    names = data.fashion_mnist.FASHION_MNIST_FILES[split]
    _write_idx(idx / names[0], images)
    _write_idx(idx / names[1], labels)
  monkeypatch.setenv("SSLJAX_FASHION_MNIST_DIR", str(idx))
  with pytest.raises(data.DatasetUnavailableError, match="array_record"):
    data.open_split("fashion_mnist_local", "train", in_memory="no",
                    data_dir=str(tmp_path / "tfds"))


# ------------------------------------------------------------------ crops --
def test_eval_batches_centre_crop_images_of_other_sizes(folder):
  source = data.ImageFolderSource(folder / "test")
  chunks = list(data.eval_batches(source, batch_size=5, size=16))
  assert [len(x) for x, _ in chunks] == [5, 5, 2]
  assert all(x.shape[1:] == (16, 16, 3) for x, _ in chunks)
  fixed = _array_source()
  chunk, _ = next(data.eval_batches(fixed, batch_size=7))
  np.testing.assert_array_equal(chunk, fixed.images[:7])


def _torchvision_box(u, scale, ratio, height, width):
  """RandomResizedCrop.get_params of torchvision, written out for one image
  with the draws taken from u (T, 4) instead of torch's generator."""
  for area_u, ratio_u, top_u, left_u in u:
    area = height * width * (scale[0] + (scale[1] - scale[0]) * area_u)
    aspect = math.exp(math.log(ratio[0]) +
                      (math.log(ratio[1]) - math.log(ratio[0])) * ratio_u)
    w = int(round(math.sqrt(area * aspect)))
    h = int(round(math.sqrt(area / aspect)))
    if 0 < w <= width and 0 < h <= height:
      return (int(top_u * (height - h + 1)), int(left_u * (width - w + 1)),
              h, w)
  if width / height < min(ratio):
    w, h = width, int(round(width / min(ratio)))
  elif width / height > max(ratio):
    h, w = height, int(round(height * max(ratio)))
  else:
    h, w = height, width
  return (height - h) // 2, (width - w) // 2, h, w


@pytest.mark.parametrize("scale,ratio,height,width", [
    ((0.3, 1.0), (3 / 4, 4 / 3), 28, 28),  # the main job: redraws matter
    ((0.08, 1.0), (3 / 4, 4 / 3), 30, 40),
    ((0.05, 0.4), (1 / 2, 2.0), 32, 32),
    ((0.5, 1.0), (3 / 4, 4 / 3), 10, 60),  # nothing fits: the fallback
    ((0.9, 1.0), (3 / 4, 4 / 3), 60, 10)])
def test_boxes_are_torchvisions_random_resized_crop(scale, ratio, height,
                                                    width):
  """From the same uniforms, box_fractions draws torchvision's boxes: the
  first of ten candidates that fits, in whole pixels, else the centred
  fallback; in float64 (numpy) and float32 (the device crop's jnp)."""
  u = np.random.default_rng(0).random((3000, crops.CROP_TRIES, 4))
  want = np.array([_torchvision_box(x, scale, ratio, height, width)
                   for x in u])
  sides = np.array([height, width, height, width])  # (y0, x0, h, w)
  got = np.stack(crops.box_fractions(u, scale, ratio, height, width), 1)
  np.testing.assert_allclose(got * sides, want, atol=1e-9)
  u32 = jnp.asarray(u, jnp.float32)
  want32 = np.array([_torchvision_box(x, scale, ratio, height, width)
                     for x in np.asarray(u32, np.float64)])
  got32 = np.stack(crops.box_fractions(u32, scale, ratio, height, width,
                                       xp=jnp), 1) * sides
  # float32 may round a side that lies within an ulp of a half pixel the
  # other way: allow a few such rows, never a box outside the image.
  assert np.mean(np.abs(got32 - want32).max(1) > 1e-3) < 2e-3
  top, left, h, w = got32.T
  assert (top >= 0).all() and (top + h <= height + 1e-4).all()
  assert (left >= 0).all() and (left + w <= width + 1e-4).all()


def test_redrawn_boxes_keep_the_requested_ranges():
  """Every drawn box has its area and aspect in range (up to whole-pixel
  rounding), unlike clipping an oversized draw, which enlarges it."""
  u = np.random.default_rng(1).random((20000, crops.CROP_TRIES, 4))
  _, _, h, w = crops.box_fractions(u, (0.3, 1.0), (3 / 4, 4 / 3), 64, 64)
  # A half-pixel rounding of sides of >= 30 pixels moves the area and the
  # aspect by < 4 %.
  assert (h * w >= 0.3 * 0.96).all() and (h * w <= 1.0).all()
  assert (np.abs(np.log(w / h)) <= np.log(4 / 3) + 0.04).all()
  # One candidate per box, clipped (the former rule): 1 in 5 boxes is
  # enlarged, and the mean area rises by more than 0.03.
  first = u[:, 0]
  area = 0.3 + 0.7 * first[:, 0]
  aspect = np.exp(np.log(3 / 4) + np.log(16 / 9) * first[:, 1])
  clipped = (np.minimum(np.sqrt(area / aspect), 1) *
             np.minimum(np.sqrt(area * aspect), 1))
  assert clipped.mean() > np.mean(h * w) + 0.03


def test_full_box_device_crop_is_the_identity():
  images = np.random.default_rng(0).random((3, 10, 10, 2)).astype(np.float32)
  out = crops.device_crop(images, jax.random.key(0), size=10,
                          crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0))
  np.testing.assert_allclose(out, images, atol=1e-5)


def test_host_and_device_crops_cut_the_same_box():
  # A smooth image (a ramp): both bilinear resamplers agree to rounding.
  ys, xs = np.mgrid[0:32, 0:32]
  ramp = np.stack([4 * ys + 2, 3 * xs + 20, 2 * (ys + xs)], -1).astype(np.uint8)
  key = jax.random.key(5)
  u = np.asarray(jax.random.uniform(key, (1, crops.CROP_TRIES, 4)))
  device = crops.device_crop(ramp[None], key, size=16, crop_scale=(0.3, 1.0))
  host = crops.host_crop(ramp, u[0], size=16, crop_scale=(0.3, 1.0))
  inner = (slice(2, -2), slice(2, -2))  # edges: the two clamp differently
  np.testing.assert_allclose(np.asarray(device[0])[inner], host[inner],
                             atol=2.5)


@pytest.mark.parametrize("channels", [1, 3])
def test_host_crop_of_a_pillow_image_equals_the_crop_of_its_array(channels):
  """The folder's Pillow images (what the host crops read) and their uint8
  arrays give the same crops, in both modes, with a box that is not the
  image's shape."""
  from PIL import Image
  rng = np.random.default_rng(0)
  array = rng.integers(0, 256, (37, 53, channels), np.uint8)
  pil = Image.fromarray(array[..., 0] if channels == 1 else array)
  for u in rng.random((4, 4)):
    a = crops.host_crop(array, u, size=24)
    p = crops.host_crop(pil, u, size=24)
    assert a.shape == p.shape == (24, 24, channels)
    np.testing.assert_array_equal(a, p)


def test_device_views_multi_crop_shapes_and_key():
  spec = data.view_spec({"num_global": 2, "num_local": 3,
                         "local_size": 8, "jitter_prob": 0.8,
                         "brightness": 0.4,
                         "blur_prob": (1.0, 0.1, 0.5, 0.5, 0.5)})
  images = jnp.asarray(np.random.default_rng(0).integers(
      0, 256, (4, 16, 16, 3), dtype=np.uint8))
  make = jax.jit(lambda x, k: data.device_views({"images": x}, k, spec))
  views = make(images, jax.random.key(1))
  assert [v.shape for v in views] == [(4, 16, 16, 3)] * 2 + [(4, 8, 8, 3)] * 3
  assert all(float(v.min()) >= 0 and float(v.max()) <= 1 for v in views)
  again = make(images, jax.random.key(1))
  other = make(images, jax.random.key(2))
  np.testing.assert_array_equal(views[0], again[0])
  assert not np.allclose(views[0], other[0])


def test_per_view_options_need_one_value_or_one_per_view():
  spec = data.view_spec({"num_global": 2, "blur_prob": (1.0, 0.1),
                         "blur_sigma": (0.1, 2.0)})
  assert dict(spec.ops[0])["blur_prob"] == 1.0
  assert dict(spec.ops[1])["blur_prob"] == 0.1
  assert dict(spec.ops[1])["blur_sigma"] == (0.1, 2.0)
  with pytest.raises(ValueError, match="blur_prob has 3 entries"):
    data.view_spec({"num_global": 2, "blur_prob": (1.0, 0.1, 0.2)})


# ---------------------------------------------------------- two processes --
_SHARD_READER = r"""
import sys
import jax
import numpy as np
jax.distributed.initialize(sys.argv[1], num_processes=2,
                           process_id=int(sys.argv[2]))
from ssljax import data
source = data.ImageFolderSource(sys.argv[3])
spec = data.view_spec({"num_global": 2, "size": 12})
batches = list(data.train_batches(
    source, batch_size=8, seed=7, spec=spec, num_steps=len(source) // 8,
    process_index=jax.process_index(), process_count=jax.process_count()))
np.savez(sys.argv[4], indices=np.stack([b["indices"] for b in batches]),
         views=np.stack([b["views"][0] for b in batches]))
"""


def test_two_processes_read_disjoint_shards_covering_the_epoch(folder,
                                                               tmp_path):
  import socket  # pylint: disable=import-outside-toplevel
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{s.getsockname()[1]}"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  procs = [subprocess.Popen(
      [sys.executable, "-c", _SHARD_READER, address, str(p),
       str(folder / "train"), str(tmp_path / f"p{p}.npz")], env=env,
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for p in range(2)]
  for p in procs:
    out = p.communicate(timeout=600)[0]
    assert p.returncode == 0, out[-3000:]
  parts = [np.load(tmp_path / f"p{p}.npz") for p in range(2)]
  first, second = (set(p["indices"].ravel()) for p in parts)
  assert not first & second  # disjoint shards
  assert first | second == set(range(24))  # 24 images, 3 steps of 8: once
  source = data.ImageFolderSource(folder / "train")
  single = _take(source, spec=data.view_spec({"num_global": 2, "size": 12}),
                 seed=7, num_steps=3)
  for step, batch in enumerate(single):
    np.testing.assert_array_equal(
        np.concatenate([p["views"][step] for p in parts], axis=1),
        batch["views"][0])


# ------------------------------------------------- multi-crop train steps --
_MULTI_CROP_WORKER = r"""
import json, sys
import jax, numpy as np, optax
from jax.sharding import NamedSharding, PartitionSpec as P
sys.path.insert(0, sys.argv[1])
from configs import frossl, vicreg
from ssljax import inputs, methods, train, train_state
out = {}
for method, form in (("frossl", "multi_view"),):
  c = (frossl if method == "frossl" else vicreg).get_config("smoke")
  c.loss.form, c.views.num_global = form, 2
  c.views.num_local, c.views.local_size = 2, 12
  with c.views.ignore_type():
    c.views.blur_prob = (1.0, 0.1, 0.5, 0.5)
  c.model.encoder_kwargs.channels, c.model.projector = (4, 8), (16, 16)
  state0 = jax.device_get(train_state.create_train_state(
      methods.build(c), optax.sgd(0.05), jax.random.key(0),
      train.batch_spec(c, (28, 28, 1))))
  images = np.random.default_rng(0).integers(0, 256, (16, 28, 28, 1),
                                             dtype=np.uint8)
  rows = []
  for devices in (jax.devices()[:1], jax.devices()):
    mesh = train.make_mesh(devices)
    state = jax.tree.map(lambda a: jax.device_put(np.array(a), NamedSharding(mesh, P())), state0)
    batch = inputs.to_device_batch({"images": images}, mesh)
    state, metrics = train.sharded_train_step(c, mesh)(state, batch)
    leaves = jax.tree.leaves(jax.device_get(state.params))
    rows.append((float(metrics["loss"]), np.concatenate([np.ravel(l) for l in leaves])))
  moved = float(np.abs(rows[0][1] - np.concatenate([np.ravel(l) for l in jax.tree.leaves(state0.params)])).max())
  out[method] = {"loss": [r[0] for r in rows], "moved": moved,
                 "param_diff": float(np.abs(rows[0][1] - rows[1][1]).max()),
                 "param_scale": float(np.abs(rows[0][1]).max())}
print(json.dumps(out))
"""


def test_multi_crop_steps_on_eight_devices_equal_one_device():
  # 2 global crops (28 px) + 2 local crops (12 px), cut on the devices from
  # one uint8 batch, through FroSSL's V-view loss (V = 4). (The VICReg graph
  # form took the same path; dropped to keep the fast suite short.)
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=8")
  proc = subprocess.run([sys.executable, "-c", _MULTI_CROP_WORKER, repo],
                        env=env, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = __import__("json").loads(proc.stdout.strip().splitlines()[-1])
  for method, row in out.items():
    assert np.isfinite(row["loss"]).all(), (method, row)
    np.testing.assert_allclose(row["loss"][0], row["loss"][1], rtol=1e-4)
    assert row["moved"] > 1e-4, (method, row)  # the step changed parameters
    assert row["param_diff"] <= 1e-4 * row["param_scale"], (method, row)
