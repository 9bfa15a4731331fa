"""Edge minibatches of a whole-dataset graph: B edges (i, j) per step.

``edge_batches`` is the large-graph counterpart of ``train_batches``: instead
of B samples with V views each, step s draws B entries (i_b, j_b) of an
`ssljax.graphs.EdgeGraph` i.i.d. (uniformly over the E stored entries, or
∝ their weight G_ij) and yields view 0 = augment(x_i), view 1 = augment(x_j).
The other rows of the batch are the negatives. Memory is O(E + N) (the edge
arrays and the images), never (N, N).

Everything is stateless and keyed by (seed, step), like ``train_batches``: the
batch at step s is a pure function of (seed, s), so a resumed run sees the
same edges and augmentations as an uninterrupted one.

References: Cabannes et al. 2023, "Active Self-Supervised Learning: A Few
Low-Cost Relationships Are All You Need", arXiv 2303.15256, Algorithm 1
(minibatches of revealed pairs). ``ssljax.losses.edge_vic2_terms`` estimates the
degree-corrected form Σ_ij [G_ij‖z_i − z_j‖² + (z_iᵀz_j)² − (d_i‖z_i‖² +
d_j‖z_j‖²)/N] = ‖ZZᵀ − G‖² − ‖G‖² from these batches.
"""

from collections.abc import Iterator

import numpy as np
import tensorflow as tf

from ssljax.data.augment import VIEW_STREAM, augment_options, augment_rows

__all__ = ["SAMPLINGS", "edge_tables", "sample_edges", "edge_batches"]

SAMPLINGS = ("weighted", "uniform")
# Distinct from the pipeline's view stream, so edge draws never reuse its keys.
_EDGE_STREAM = 0xED6E


def edge_tables(graph, sampling: str = "weighted") -> dict[str, np.ndarray]:
  """Sampling probabilities and the per-row weights of the unbiased VIC² loss.

  With p_e the probability of drawing entry e = (i, j) and q_i = Σ_{e: row i}
  p_e the probability that a given endpoint of a drawn edge is row i (equal
  for both endpoints because G is stored symmetrically), and N_s the rows
  that have an edge (the support of G):

  Args:
    graph: an `ssljax.graphs.EdgeGraph`.
    sampling: "weighted" (p_e = G_e / ΣG) or "uniform" (p_e = 1/E).

  Returns:
    dict of numpy arrays:
      "cdf": (E,) float64 cumulative p_e (its last entry is 1);
      "pos": (E,) float64 G_e / (N_s² p_e), the weight of ‖z_i − z_j‖²;
      "degree": (N,) float64 d_i / N_s, d_i = Σ_j G_ij (the coefficient of
        ‖z_i‖² in the degree term of the VIC² pair form);
      "inv_q": (N,) float64 1/(N_s q_i) (0 for rows without an edge);
      "n_support": () int N_s.

  Raises:
    ValueError: unknown sampling, or a graph without edges.
  """
  if sampling not in SAMPLINGS:
    raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
  if graph.num_entries == 0:
    raise ValueError("the graph has no edges to sample")
  w_E = graph.weights.astype(np.float64)
  p_E = w_E / w_E.sum() if sampling == "weighted" else np.full(
      w_E.shape, 1.0 / w_E.size)
  q_N = np.bincount(graph.rows, weights=p_E, minlength=graph.n)
  n_s = int(np.count_nonzero(q_N))
  inv_q = np.where(q_N > 0, 1.0 / (n_s * np.where(q_N > 0, q_N, 1.0)), 0.0)
  cdf = np.cumsum(p_E)
  cdf /= cdf[-1]
  return {"cdf": cdf, "pos": w_E / (n_s**2 * p_E),
          "degree": graph.degree() / n_s, "inv_q": inv_q,
          "n_support": np.asarray(n_s)}


def _draw(cdf, batch_size, seed, step):
  """(B,) int64 entry indices of step ``step``: a pure function of (seed, step)."""
  base = tf.random.experimental.stateless_fold_in(
      tf.constant([seed, _EDGE_STREAM], tf.int64), step)
  u = tf.random.stateless_uniform([batch_size], seed=base, dtype=tf.float64)
  idx = tf.searchsorted(cdf, u, side="right", out_type=tf.int64)
  return tf.minimum(idx, tf.shape(cdf, out_type=tf.int64)[0] - 1)


def sample_edges(graph, *, batch_size: int, seed: int, step: int,
                 sampling: str = "weighted") -> np.ndarray:
  """The (B,) indices into graph.rows/cols drawn at ``step`` (as edge_batches).

  Raises:
    ValueError: as ``edge_tables``.
  """
  cdf = tf.constant(edge_tables(graph, sampling)["cdf"])
  return _draw(cdf, batch_size, seed, tf.constant(step, tf.int64)).numpy()


def edge_batches(images: np.ndarray, graph, *, batch_size: int, seed: int,
                 start_step: int = 0, num_steps: int,
                 sampling: str = "weighted", augment: bool = True,
                 augment_kwargs: dict | None = None, with_info: bool = False,
                 process_index: int = 0, process_count: int = 1,
                 prefetch: int = 2) -> Iterator:
  """Yields two views per drawn edge for steps [start_step, start_step + num_steps).

  Step s draws B entries i.i.d. with the stateless key (seed, s); process p
  of P keeps entries [p·B/P, (p+1)·B/P) and augments them with the draws a
  single process would use. View v uses key (seed, s, v) of the same stream
  as the grey-level views of ``ssljax.data.augment``.

  Args:
    images: uint8 (N, H, W, C), N = graph.n.
    graph: `ssljax.graphs.EdgeGraph` over the rows of ``images``.
    batch_size: global number of edges B >= 2, divisible by process_count.
    seed: int seed of the edge draws and the augmentation.
    start_step, num_steps: the steps to yield (>= 0).
    sampling: "weighted" (∝ G_ij) or "uniform" over stored entries.
    augment: augment both endpoints (else the raw images are the views).
    augment_kwargs: keyword arguments of ``ssljax.data.augment``.
    with_info: also yield the (3, 2, B/P) float32 loss weights of the rows:
      [0] d/N_s, [1] 1/(N_s q), [2] G_e/(N_s² p_e) (same for both views).
    process_index, process_count: this process p of P.
    prefetch: batches prepared ahead by tf.data.

  Returns:
    Iterator of float32 (2, B/P, H, W, C) arrays in [0, 1] (row b of view 0 and
      of view 1 are the endpoints of edge b), or (views, info) pairs.

  Raises:
    ValueError: images not uint8 (N, H, W, C) with N = graph.n, bad batch
      size, steps or process arguments, unknown sampling or augment key.
  """
  _check_args(images, graph, batch_size, start_step, num_steps,
              process_index, process_count)
  tables = edge_tables(graph, sampling)
  cdf = tf.constant(tables["cdf"])
  rows, cols = tf.constant(graph.rows), tf.constant(graph.cols)
  pos, degree, inv_q = (tf.constant(tables[k], tf.float32)
                        for k in ("pos", "degree", "inv_q"))
  data = tf.constant(images)
  aug = augment_options(augment_kwargs or {})
  local = batch_size // process_count
  first = process_index * local

  def make_batch(step):
    idx = _draw(cdf, batch_size, seed, step)[first:first + local]
    ends = (tf.gather(rows, idx), tf.gather(cols, idx))
    base = tf.random.experimental.stateless_fold_in(
        tf.constant([seed, VIEW_STREAM], tf.int64), step)
    keys = tf.random.experimental.stateless_split(base, 2)
    views = []
    for v, end in enumerate(ends):
      x = tf.cast(tf.gather(data, end), tf.float32) / 255
      views.append(augment_rows(x, keys[v], first, batch_size, **aug)
                   if augment else x)
    views = tf.stack(views)
    if not with_info:
      return views
    info = tf.stack([tf.stack([tf.gather(degree, e) for e in ends]),
                     tf.stack([tf.gather(inv_q, e) for e in ends]),
                     tf.stack([tf.gather(pos, idx)] * 2)])
    return views, info

  dataset = tf.data.Dataset.range(start_step, start_step + num_steps)
  dataset = dataset.map(make_batch, num_parallel_calls=tf.data.AUTOTUNE,
                        deterministic=True)
  return dataset.prefetch(prefetch).as_numpy_iterator()


def _check_args(images, graph, batch_size, start_step, num_steps,
                process_index, process_count):
  """Raises ValueError naming the first invalid ``edge_batches`` argument."""
  if not (isinstance(images, np.ndarray) and images.dtype == np.uint8
          and images.ndim == 4 and images.shape[0] == graph.n):
    raise ValueError(f"images must be uint8 (N, H, W, C) with N = graph.n = "
                     f"{graph.n}, got {getattr(images, 'dtype', None)} "
                     f"{getattr(images, 'shape', None)}")
  raise_first_invalid([
      ("batch_size", batch_size, batch_size >= 2, ">= 2"),
      *step_checks(batch_size, start_step, num_steps, process_index,
                   process_count)])


def step_checks(batch_size, start_step, num_steps, process_index,
                 process_count) -> list:
  """(name, value, ok, requirement) checks of a batch iterator's steps.

  For `edge_batches`; pass the list to `raise_first_invalid`. Raises
  nothing itself.
  """
  return [
      ("start_step", start_step, start_step >= 0, ">= 0"),
      ("num_steps", num_steps, num_steps >= 0, ">= 0"),
      ("process_count", process_count, process_count >= 1
       and batch_size % process_count == 0,
       f">= 1 and divide batch_size={batch_size}"),
      ("process_index", process_index, 0 <= process_index < process_count,
       f"in [0, process_count={process_count})"),
  ]


def raise_first_invalid(checks) -> None:
  """Raises ValueError naming the first (name, value, ok, requirement) not ok.

  Raises:
    ValueError: "{name} must be {requirement}, got {value}".
  """
  for name, value, ok, requirement in checks:
    if not ok:
      raise ValueError(f"{name} must be {requirement}, got {value}")
