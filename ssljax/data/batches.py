"""Streaming input: the batch at step s is a pure function of (seed, s).

`train_batches` is a grain ``MapDataset`` over steps: element s reads the
rows of step s from a random-access source (`ssljax.data.sources`), so a
run resumed at step s starts there at once (no replay of the s earlier
steps) and host memory holds only the batches in flight, O(batch ×
max(threads, prefetch)), whatever the size of the dataset. Grain's thread
pool prepares the next steps while the devices train, one step per thread.

Which rows: epoch e = s // steps_per_epoch uses the permutation
``np.random.default_rng([seed, e]).permutation(N)`` and step s takes its
slice ``perm[i·B:(i + 1)·B]``, i = s mod steps_per_epoch (the remainder of
an epoch is dropped). Process p of P reads only rows [p·B/P, (p + 1)·B/P)
of that slice, so the P processes read disjoint shards that together cover
B·steps_per_epoch distinct examples per epoch.

What is shipped: images of one fixed shape go to the devices as they are
(uint8, "images"), and every crop is cut there (`ssljax.data.views`);
images of different sizes are cropped here, per view, as they are decoded
(uint8 "views", one array per crop size). Both are keyed by (seed, step,
view) and drawn for the whole global batch, so a process's rows are the
ones a single process would produce.
"""

import functools
import itertools
import os
from collections.abc import Iterator

import grain
import numpy as np

from ssljax.data import crops
from ssljax.data.views import ViewSpec

__all__ = ["AUTO_WORKERS", "epoch_permutation", "eval_batches",
           "host_iterator", "host_workers", "read_options", "step_indices",
           "train_batches"]

# dataset.workers = AUTO_WORKERS: worker processes where they measured
# faster (`host_workers`).
AUTO_WORKERS = -1
_AUTO_MIN_CPUS = 8  # below: the threads of one process (2 CPUs: 1.14x faster)
_AUTO_SPARE_CPUS = 4  # left to the main process (batch hand-off, devices)


def read_options(threads: int, prefetch: int) -> grain.ReadOptions:
  """Grain's read options for ``threads`` threads and ``prefetch`` steps ahead.

  Grain prepares at most ``prefetch_buffer_size`` elements at a time, so a
  buffer smaller than the thread count leaves threads idle (with 16
  threads and 4 steps ahead, only 4 batches were ever decoded at once: a
  ResNet-50 on one H200 waited for input 68 % of the time). The buffer is
  therefore max(threads, prefetch) steps: every thread has a step to
  prepare, and host memory holds that many batches.

  Raises:
    ValueError: threads < 0 or prefetch < 1.
  """
  if threads < 0 or prefetch < 1:
    raise ValueError(f"threads must be >= 0 and prefetch >= 1, got threads="
                     f"{threads}, prefetch={prefetch}")
  return grain.ReadOptions(num_threads=threads,
                           prefetch_buffer_size=max(threads, prefetch))


def host_workers(workers: int, threads: int, source, *,
                 cpus: int | None = None) -> tuple[int, int]:
  """The host pipeline's (worker processes, threads per process).

  ``workers`` >= 0 is used as given, with ``threads``. ``workers`` =
  `AUTO_WORKERS` (-1) picks worker processes where they were measured to
  help: for a source whose images have no fixed shape (an image folder,
  ImageNet from tfds: each image is decoded and cropped on the host) on a
  host with at least 8 CPUs, cpus − 4 worker processes of one thread each
  (12 on a 16-CPU GPU host, where they fed a ResNet-50 two-view step
  1,889–2,076 images/s; 16 threads of one process gave 1,477 on another
  such host); otherwise 0 workers (the ``threads`` threads of this
  process): images of one shape only need their rows gathered, and on a
  2-CPU machine two threads were 1.14× faster than two processes.

  Args:
    workers: int >= 0, or -1 (`AUTO_WORKERS`).
    threads: grain threads per process, >= 1 (kept unless "auto" picks
      workers).
    source: the training source (`ssljax.data.sources`); its
      ``image_shape`` (None: images of several sizes) is read.
    cpus: CPUs this process may run on (default: its CPU affinity).

  Returns:
    (workers, threads), both ints, workers >= 0.

  Raises:
    ValueError: workers < -1.
  """
  if workers < AUTO_WORKERS:
    raise ValueError(f"workers must be >= 0, or {AUTO_WORKERS} (auto), got "
                     f"{workers}")
  if workers != AUTO_WORKERS:
    return int(workers), threads
  if cpus is None:
    cpus = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1)
  if getattr(source, "image_shape", ()) is None and cpus >= _AUTO_MIN_CPUS:
    return cpus - _AUTO_SPARE_CPUS, 1
  return 0, threads


def host_iterator(steps, *, source, threads: int, prefetch: int,
                  workers: int = 0) -> Iterator[dict]:
  """The batches of ``steps`` (a grain ``MapDataset`` of batch dicts, one per
  step), prepared ahead by threads of this process or by worker processes.

  With ``workers`` = 0, ``threads`` grain threads of this process prepare
  the steps (`read_options`). With ``workers`` >= 1, grain's worker
  processes (``IterDataset.mp_prefetch``) each prepare every
  ``workers``-th step with ``threads`` threads of their own, and the
  batches come back in step order, so they equal the batches of one
  process. Threads of one Python process share its interpreter lock: on
  one H200 host 16 threads decoded and cropped about 1,480 JPEGs/s, where
  the cores could do several times that; processes do not share it. Each
  worker holds its own copy of ``source`` (pickled), so the unreadable
  images a worker skips travel with each batch (its "skipped" entry) and
  are merged into ``source.skipped`` here.

  Args:
    steps: a grain MapDataset of batch dicts.
    source: the source the batches read (for its ``skipped`` record).
    threads, prefetch: as `read_options` (per process).
    workers: worker processes, >= 0.

  Returns:
    An iterator of the batch dicts, in step order, without "skipped".

  Raises:
    ValueError: workers < 0, or bad threads / prefetch (`read_options`).
  """
  if workers < 0:
    raise ValueError(f"workers must be >= 0, got {workers}")
  dataset = steps.to_iter_dataset(read_options(threads, prefetch))
  if not workers:
    return iter(dataset)
  # Grain reads its own absl flags in the workers; a library caller (not
  # an absl app) has not parsed them, and their defaults are what we want.
  from absl import flags  # pylint: disable=import-outside-toplevel
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
  options = grain.MultiprocessingOptions(
      num_workers=workers, per_worker_buffer_size=max(1, -(-prefetch // workers)))
  return _merge_skipped(dataset.mp_prefetch(options), source)


def _merge_skipped(batches, source) -> Iterator[dict]:
  """The workers' batches, their "skipped" entries merged into the source's."""
  skipped = getattr(source, "skipped", None)
  for batch in batches:
    reported = batch.pop("skipped", None)
    if reported and skipped is not None:
      skipped.update(reported)
    yield batch  # its arrays are views of shared memory, freed with them


@functools.lru_cache(maxsize=4)
def epoch_permutation(seed: int, epoch: int, num_examples: int) -> np.ndarray:
  """The order of the N examples in epoch ``epoch``: int64 (N,), cached.

  O(N) time and memory once per epoch (10 MB for ImageNet's 1.28M images).
  """
  return np.random.default_rng([seed, epoch]).permutation(num_examples)


def step_indices(step: int, *, seed: int, num_examples: int, batch_size: int,
                 process_index: int = 0, process_count: int = 1) -> np.ndarray:
  """Example indices read by process p at ``step``: int64 (B / P,).

  Raises:
    ValueError: batch_size outside [1, N] or not divisible by process_count.
  """
  if not 1 <= batch_size <= num_examples:
    raise ValueError(f"batch_size must be in [1, N={num_examples}], got "
                     f"{batch_size}")
  if batch_size % process_count:
    raise ValueError(f"batch_size {batch_size} is not divisible by "
                     f"process_count {process_count}")
  per_epoch = num_examples // batch_size
  epoch, position = divmod(step, per_epoch)
  local = batch_size // process_count
  first = position * batch_size + process_index * local
  return epoch_permutation(seed, epoch, num_examples)[first:first + local]


def train_batches(source, *, batch_size: int, seed: int, spec: ViewSpec,
                  start_step: int = 0, num_steps: int,
                  process_index: int = 0, process_count: int = 1,
                  labels: np.ndarray | None = None, threads: int = 8,
                  prefetch: int = 4, workers: int = 0) -> Iterator[dict]:
  """Yields the host part of the batches of steps [start_step, start_step + num_steps).

  Args:
    source: a random-access source (`ssljax.data.sources`).
    batch_size: global batch B, 1 <= B <= N, divisible by process_count.
    seed: the run's seed (shuffle and host crops).
    spec: the run's `ssljax.data.ViewSpec` (host crops need its sizes).
    start_step, num_steps: the steps to yield, both >= 0.
    process_index, process_count: this process p and the number P.
    labels: optional int (N,) labels to ship instead of the source's (e.g.
      with some hidden as −1 for a semi-supervised graph).
    threads: grain threads, each preparing one step at a time (per worker
      process when ``workers`` > 0).
    prefetch: steps prepared ahead; at least ``threads`` (`read_options`).
    workers: 0 (the threads of this process), the number of worker
      processes (`host_iterator`): for sources that decode (image
      folders), where the threads of one process contend for its
      interpreter lock; or -1, chosen by `host_workers`. The batches are
      the same.

  Returns:
    An iterator of dicts, for B / P rows of the global batch:
      "images": uint8 (B / P, H, W, C) when the source's images have one
        shape, else "views": a tuple with one uint8 array (V_g, B / P, S_g,
        S_g, C) per crop size (global, then local);
      "labels": int32 (B / P,) (−1 where unknown);
      "indices": int64 (B / P,) the example indices (not for the devices).

  Raises:
    ValueError: naming the argument (steps < 0, a bad process index, a
      batch that does not fit), or host crops whose sizes are not set.
  """
  for name, value in (("start_step", start_step), ("num_steps", num_steps)):
    if value < 0:
      raise ValueError(f"{name} must be >= 0, got {value}")
  workers, threads = host_workers(workers, threads, source)
  if not 0 <= process_index < process_count:
    raise ValueError(f"process_index must be in [0, process_count="
                     f"{process_count}), got {process_index}")
  num_examples = len(source)
  step_indices(0, seed=seed, num_examples=num_examples, batch_size=batch_size,
               process_count=process_count)  # validates the batch
  host_crops = source.image_shape is None
  if host_crops and (not spec.size or
                     (spec.num_local and not spec.local_size)):
    raise ValueError("images of different sizes are cropped on the host: set "
                     "views.size (and views.local_size with local views)")
  if host_crops and spec.crop != "random_resized":
    raise ValueError(f"views.crop={spec.crop!r} needs images of one size; "
                     "use 'random_resized' for a folder or ImageNet")
  local = batch_size // process_count
  first = process_index * local

  def make_batch(step: int) -> dict:
    indices = step_indices(step, seed=seed, num_examples=num_examples,
                           batch_size=batch_size, process_index=process_index,
                           process_count=process_count)
    # Pillow images straight to the host crops where the source can give
    # them (one copy less per image, and one per crop).
    images, batch_labels = (source.read(indices, as_pil=True) if host_crops
                            and getattr(source, "reads_pil", False)
                            else source.read(indices))
    if labels is not None:
      batch_labels = np.asarray(labels, np.int32)[indices]
    out = {"labels": batch_labels, "indices": indices}
    if workers and getattr(source, "skipped", None):
      out["skipped"] = dict(source.skipped)  # this worker's copy's record
    if not host_crops:
      out["images"] = images
      return out
    # One array per run of views of one size, filled crop by crop (no
    # stacked copies of the batch).
    views, v = [], 0
    first_image = images[0]
    channels = (first_image.shape[-1] if isinstance(first_image, np.ndarray)
                else len(first_image.getbands()))
    for size, run in itertools.groupby(spec.sizes()):
      group = np.empty((len(list(run)), len(images), size, size, channels),
                       np.uint8)
      for j in range(len(group)):
        u = crops.host_uniforms(seed, step, v, batch_size, first, local)
        for i, x in enumerate(images):
          group[j, i] = crops.host_crop(x, u[i], size=size,
                                        **spec.crop_args(v))
        v += 1
      views.append(group)
    out["views"] = tuple(views)
    return out

  steps = grain.MapDataset.range(start_step, start_step + num_steps)
  return host_iterator(steps.map(make_batch), source=source, threads=threads,
                       prefetch=prefetch, workers=workers)


def eval_batches(source, *, batch_size: int, size: int = 0,
                 crop_fraction: float = 0.875) -> Iterator[tuple]:
  """Yields (uint8 images (n, S, S, C), int32 labels (n,)) in index order.

  Images of one shape are passed as they are (size 0 or their own size);
  others get the evaluation centre crop (`ssljax.data.crops.center_crop`).
  The last chunk may be shorter than ``batch_size``.

  Raises:
    ValueError: a source of mixed sizes with size 0.
  """
  fixed = source.image_shape is not None and size in (0, source.image_shape[0])
  if not fixed and not size:
    raise ValueError("images of different sizes need an evaluation size "
                     "(views.size)")
  for start in range(0, len(source), batch_size):
    images, labels = source.read(np.arange(start, min(start + batch_size,
                                                      len(source))))
    if not fixed:
      images = np.stack([crops.center_crop(x, size, crop_fraction)
                         for x in images])
    yield images, labels
