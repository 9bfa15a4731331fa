"""Edge minibatches of a whole-dataset graph: B edges (i, j) per step.

``edge_batches`` is the large-graph counterpart of ``train_batches``: instead
of B samples, step s draws B entries (i_b, j_b) of an
`ssljax.graphs.EdgeGraph` i.i.d. (uniformly over the E stored entries, or
∝ their weight G_ij) and ships the raw endpoint images, uint8 (2, B, H, W,
C): row b of [0] is x_i, row b of [1] is x_j. The views are made on the
devices by the same engine and keys as every other path
(`ssljax.data.device_views`): view 0 is cut from the first endpoints, view 1
from the second, with the ``config.views`` fields of the run. The other
rows of the batch are the negatives. Memory is O(E) for the edge arrays;
the images are read per step from a random-access source, never (N, N).

Everything is stateless and keyed by (seed, step), like ``train_batches``: the
batch at step s is a pure function of (seed, s), so a resumed run sees the
same edges (and, on the devices, the same views) as an uninterrupted one.

References: Cabannes et al. 2023, "Active Self-Supervised Learning: A Few
Low-Cost Relationships Are All You Need", arXiv 2303.15256, Algorithm 1
(minibatches of revealed pairs). ``ssljax.losses.edge_vic2_terms`` estimates the
degree-corrected form Σ_ij [G_ij‖z_i − z_j‖² + (z_iᵀz_j)² − (d_i‖z_i‖² +
d_j‖z_j‖²)/N] = ‖ZZᵀ − G‖² − ‖G‖² from these batches.
"""

from collections.abc import Iterator

import grain
import numpy as np

from ssljax.data import batches
from ssljax.data.sources import ArraySource

__all__ = ["SAMPLINGS", "edge_tables", "sample_edges", "edge_batches"]

SAMPLINGS = ("weighted", "uniform")
# Distinct from the shuffle's (seed, epoch) streams, so edge draws never
# reuse their keys.
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


def _draw(cdf: np.ndarray, batch_size: int, seed: int, step: int):
  """(B,) int64 entry indices of step ``step``: a pure function of (seed, step)."""
  u = np.random.default_rng([seed, _EDGE_STREAM, step]).random(batch_size)
  return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)


def sample_edges(graph, *, batch_size: int, seed: int, step: int,
                 sampling: str = "weighted") -> np.ndarray:
  """The (B,) indices into graph.rows/cols drawn at ``step`` (as edge_batches).

  Raises:
    ValueError: as ``edge_tables``.
  """
  return _draw(edge_tables(graph, sampling)["cdf"], batch_size, seed, step)


def edge_batches(source, graph, *, batch_size: int, seed: int,
                 start_step: int = 0, num_steps: int,
                 sampling: str = "weighted", with_info: bool = False,
                 process_index: int = 0, process_count: int = 1,
                 threads: int = 4, prefetch: int = 4,
                 workers: int = 0) -> Iterator[dict]:
  """Yields the endpoint images of the edges drawn at steps
  [start_step, start_step + num_steps).

  Step s draws B entries i.i.d. with the stateless key (seed, s); process p
  of P keeps entries [p·B/P, (p+1)·B/P), the ones a single process would
  give those rows. The views are made from the images on the devices
  (`ssljax.data.device_views`), keyed by (seed, s) as on every path.

  Args:
    source: a random-access source of fixed-shape images (an
      `ssljax.data.ArraySource`, a tfds split...) with N = graph.n rows, or
      a uint8 (N, H, W, C) array.
    graph: `ssljax.graphs.EdgeGraph` over the rows of ``source``.
    batch_size: global number of edges B >= 2, divisible by process_count.
    seed: int seed of the edge draws.
    start_step, num_steps: the steps to yield (>= 0).
    sampling: "weighted" (∝ G_ij) or "uniform" over stored entries.
    with_info: also yield "edge_info", the (3, 2, B/P) float32 loss weights
      of the rows: [0] d/N_s, [1] 1/(N_s q), [2] G_e/(N_s² p_e) (same for
      both views).
    process_index, process_count: this process p of P.
    threads, prefetch, workers: grain threads, steps prepared ahead and
      worker processes (0: this process's threads; -1: chosen by
      `ssljax.data.batches.host_workers`, which gives 0 for these
      fixed-shape sources); the same batches
      (`ssljax.data.batches.host_iterator`).

  Returns:
    Iterator of dicts: "edge_images" uint8 (2, B/P, H, W, C) (row b of [0]
    and of [1] are the endpoints of edge b), "labels" int32 (B/P,) the
    source's labels of the first endpoints (−1: unknown; for the online
    probe, which sees view 0), "indices" int64 (2, B/P) the endpoint rows
    (not for the devices), and "edge_info" with ``with_info``.

  Raises:
    ValueError: a source of N != graph.n rows or of images of several
      shapes, bad batch size, steps or process arguments, unknown sampling.
  """
  if isinstance(source, np.ndarray):
    source = ArraySource(source)
  _check_args(source, graph, batch_size, start_step, num_steps,
              process_index, process_count)
  workers, threads = batches.host_workers(workers, threads, source)
  tables = edge_tables(graph, sampling)
  info_tables = {k: tables[k].astype(np.float32)
                 for k in ("pos", "degree", "inv_q")}
  local = batch_size // process_count
  first = process_index * local

  def make_batch(step: int) -> dict:
    idx = _draw(tables["cdf"], batch_size, seed, step)[first:first + local]
    ends = np.stack([graph.rows[idx], graph.cols[idx]]).astype(np.int64)
    (images_0, labels), (images_1, _) = (source.read(e) for e in ends)
    out = {"edge_images": np.stack([images_0, images_1]),
           "labels": np.asarray(labels, np.int32), "indices": ends}
    if with_info:
      out["edge_info"] = np.stack([
          info_tables["degree"][ends], info_tables["inv_q"][ends],
          np.stack([info_tables["pos"][idx]] * 2)])
    return out

  steps = grain.MapDataset.range(start_step, start_step + num_steps)
  return batches.host_iterator(steps.map(make_batch), source=source,
                               threads=threads, prefetch=prefetch,
                               workers=workers)


def _check_args(source, graph, batch_size, start_step, num_steps,
                process_index, process_count):
  """Raises ValueError naming the first invalid ``edge_batches`` argument."""
  if len(source) != graph.n:
    raise ValueError(f"the source has {len(source)} images, the graph "
                     f"{graph.n} nodes; they must be equal")
  if getattr(source, "image_shape", None) is None:
    raise ValueError("edge batches need images of one shape (the views are "
                     "cropped on the devices)")
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
