"""SimCLR / InfoNCE: graph form and two-view NT-Xent (Chen et al. 2020).

Rows are samples. The graph form `simclr(z, g)` weighs the InfoNCE log-term
of every pair (i, j) by G_ij; on the two-view graph it is exactly NT-Xent,
`simclr_two_view(z1, z2)` (dividing the graph form by Σ G_ij gives exactly
NT-Xent on the view-major two-view G).

Both forms take `block_size`: None computes the (N, N) cosine-similarity
matrix at once; an int B computes the row log-sum-exps over blocks of B
rows inside `lax.map`, with each block under `jax.checkpoint`, so neither
the forward nor the backward pass holds more than a (B, N) block of
similarities: memory O(N·B) instead of O(N²), same value and gradient.

References:
  Balestriero & LeCun 2022, "Contrastive and Non-Contrastive Self-Supervised
  Learning Recover Global and Local Spectral Embedding Methods", arXiv
  2205.11508, §2 SimCLR (graph form and code). Cabannes et al. 2023, arXiv
  2303.15256: eq. (3) is garbled (the log must sit inside Σ_i and the cross-view
  positive belongs in the denominator) and its App. C.1 code masks the diagonal
  with `logsumexp(cosim * mask)`, which leaves exp(0) = 1 for the self term; the
  mask must set the diagonal logit to −inf. Chen, Kornblith, Norouzi & Hinton,
  "A Simple Framework for Contrastive Learning of Visual Representations", ICML
  2020, arXiv:2002.05709, eq. (1) (NT-Xent); official code
  github.com/google-research/simclr (`objective.py`, `add_contrastive_loss`).
"""

from __future__ import annotations

import functools
import operator

import jax
from jax import lax
import jax.numpy as jnp

from ssljax import checks, graphs

__all__ = ["simclr", "simclr_terms", "simclr_two_view", "simclr_two_view_terms"]

# Floor on ‖z_i‖ (F.normalize / tf.math.l2_normalize): a zero row gives
# cosines 0 instead of NaN.
_NORM_FLOOR = 1e-12
_MIN_ROWS_WHY = "(every row needs another row in its softmax)"


# ---------------------------------------------------------------------------
# Shared pieces.
# ---------------------------------------------------------------------------


def _check_block_size(block_size) -> int | None:
  """None or an int >= 1 (static: it fixes the shapes of the blocks)."""
  if block_size is None:
    return None
  if isinstance(block_size, bool):
    raise ValueError(
        f"block_size must be None or an int >= 1, got {block_size!r}")
  try:
    b = operator.index(block_size)
  except TypeError:
    raise ValueError(
        f"block_size must be None or an int >= 1, got {block_size!r}") from None
  if b < 1:
    raise ValueError(f"block_size must be None or an int >= 1, got {b}")
  return b


def _masked_logits(u_BxK, u_NxK, rows_B, inv_tau):
  """(B, N) logits s_ik/τ of rows `rows_B`, with −inf at k = i (self)."""
  s_BxN = (u_BxK @ u_NxK.T) * inv_tau
  self_BxN = rows_B[:, None] == jnp.arange(u_NxK.shape[0])[None, :]
  return jnp.where(self_BxN, -jnp.inf, s_BxN)


def _row_logsumexp(u_NxK, inv_tau, block_size):
  """(N,) lse_i = log Σ_{k≠i} exp(s_ik/τ), dense or over row blocks."""
  n = u_NxK.shape[0]
  if block_size is None or block_size >= n:  # one block: dense
    return jax.nn.logsumexp(
        _masked_logits(u_NxK, u_NxK, jnp.arange(n), inv_tau), axis=1)

  b = block_size
  n_blocks = -(-n // b)
  u_pad_PxK = jnp.pad(u_NxK, ((0, n_blocks * b - n), (0, 0)))

  # checkpoint: the backward pass recomputes each (B, N) block instead of
  # storing all n_blocks of them (which would be the full N² matrix again).
  @jax.checkpoint
  def block_lse(u_pad_PxK, u_NxK, start):
    u_BxK = lax.dynamic_slice_in_dim(u_pad_PxK, start, b, axis=0)
    rows_B = start + jnp.arange(b)
    return jax.nn.logsumexp(_masked_logits(u_BxK, u_NxK, rows_B, inv_tau), axis=1)

  starts = jnp.arange(n_blocks) * b
  lse_CxB = lax.map(lambda s: block_lse(u_pad_PxK, u_NxK, s), starts)
  return lse_CxB.reshape(-1)[:n]  # padded rows (index >= N) are dropped


def _dense_if_one_block(block_size, n):
  """A single block of >= N rows is the dense computation (one compile)."""
  return None if block_size is not None and block_size >= n else block_size


def _offdiag_edges(g):
  """(rows, cols, weights) of the off-diagonal stored entries of a BCOO.

  Diagonal and padding entries (an index >= N) get weight 0 and a clipped,
  valid index; duplicates stay separate (their sum is what counts).
  """
  n = g.shape[0]
  rows_E, cols_E = g.indices[:, 0], g.indices[:, 1]
  keep_E = (rows_E < n) & (cols_E < n) & (rows_E != cols_E)
  w_E = jnp.where(keep_E, g.data, 0)
  return jnp.clip(rows_E, 0, n - 1), jnp.clip(cols_E, 0, n - 1), w_E


# ---------------------------------------------------------------------------
# Graph form (Balestriero & LeCun 2022).
# ---------------------------------------------------------------------------


@checks.float32_matmuls
def simclr_terms(
    z: jax.typing.ArrayLike,
    g,
    *,
    temperature: float = 0.5,
    block_size: int | None = None,
) -> dict[str, jax.Array]:
  """InfoNCE over a graph: the two parts of the loss and their sum.

  With cosine similarities s_ij = z_iᵀz_j/(‖z_i‖‖z_j‖), τ = temperature,
  lse_i = log Σ_{k≠i} exp(s_ik/τ) and the off-diagonal degrees
  d_i = Σ_{j≠i} G_ij,

      loss = −Σ_{i≠j} G_ij log softmax_{k≠i}(s_ik/τ)_j / Σ_{i≠j} G_ij
           = positive + logsumexp,
      positive  = −Σ_{i≠j} G_ij s_ij/τ / Σ_{i≠j} G_ij
      logsumexp =  Σ_i d_i lse_i    / Σ_{i≠j} G_ij.

  The softmax of row i excludes k = i, so a self pair can never be a
  positive: the diagonal of G is ignored (a graph with self loops gives the
  same loss as without). With the two-view graph `views_graph(n, 2)` this
  is NT-Xent, `simclr_two_view` (Balestriero & LeCun 2022 §2; their code sums
  instead of dividing by Σ G_ij).

  For a BCOO g the positive part is a sum over the stored edges,
  Σ_e G_e(s_{i_e j_e}/τ − lse_{i_e}), in O(nnz·K) memory; the lse_i are
  computed as for a dense g (all N rows, or in blocks).

  Args:
    z: (N, K) embeddings, float32 or float64 (ints are promoted), N >= 2.
      Rows are normalised here (a zero row gets cosine 0 with every row).
    g: (N, N) symmetric graph, dense (any real dtype, cast to z's dtype) or
      2-D `jax.experimental.sparse.BCOO`, with Σ_{i≠j} G_ij > 0; e.g.
      `ssljax.graphs.views_graph(n, v)` with N = n·v. Weights may be any
      real numbers (the usual graphs are 0/1).
    temperature: τ > 0.
    block_size: None (dense (N, N) logits) or an int B >= 1: row blocks of
      B rows, memory O(N·B) in both passes; same value and gradient up to
      rounding. B need not divide N.

  Returns:
    dict with 0-d arrays of z's dtype: "positive", "logsumexp" and "loss".

  Raises:
    ValueError: if z is not rank 2 or has N < 2 rows, g is not (N, N) (or
      is a BCOO with batch/dense dimensions), temperature <= 0, block_size
      is not None or an int >= 1, or (concrete inputs only) z or g has
      NaN/inf, g is not symmetric within 1e-6, or Σ_{i≠j} G_ij <= 0.

  References:
    Balestriero & LeCun 2022, arXiv 2205.11508, §2 SimCLR: −Σ G_ij log
    softmax_{k≠i}(s_ik/τ)_j, G with zero diagonal. Cabannes et al. 2023, arXiv
    2303.15256, eq. (3) and App. C.1 (garbled; see the module docstring). Chen
    et al. 2020, arXiv:2002.05709, eq. (1).

  Example:
    >>> from ssljax.graphs import views_graph
    >>> z = jnp.array([[1., 0.], [0., 1.], [1., 0.], [0., 1.]])
    >>> t = simclr_terms(z, views_graph(2, 2), temperature=1.0)
    >>> [round(float(t[k]), 4) for k in ("positive", "logsumexp", "loss")]
    [-1.0, 1.5514, 0.5514]
  """
  z_NxK = checks.as_float(z)
  checks.check_matrix(z_NxK, "z", min_rows=2, why=_MIN_ROWS_WHY)
  n = z_NxK.shape[0]
  graphs.validate_graph(g, n, name="g")
  checks.check_positive(temperature, "temperature")
  block_size = _dense_if_one_block(_check_block_size(block_size), n)
  if graphs.is_bcoo(g):
    _check_total_weight_bcoo(g)
    return _simclr_bcoo_core(z_NxK, g, temperature, block_size=block_size)
  g_NxN = jnp.asarray(g)
  _check_total_weight_dense(g_NxN)
  return _simclr_dense_core(z_NxK, g_NxN, temperature, block_size=block_size)


def _raise_total_weight(total: float) -> None:
  if not total > 0:
    raise ValueError(
        "g must have a positive total off-diagonal weight Σ_{i≠j} G_ij (the"
        f" loss divides by it), got {total:.6g}")


def _check_total_weight_dense(g_NxN) -> None:
  """Σ_{i≠j} G_ij > 0, reduced on g's device (one scalar to the host)."""
  if checks.is_concrete(g_NxN):
    with jax.ensure_compile_time_eval():  # also when called while tracing
      total = float(jnp.sum(g_NxN) - jnp.trace(g_NxN))
    _raise_total_weight(total)


def _check_total_weight_bcoo(g) -> None:
  """As `_check_total_weight_dense` over the stored off-diagonal entries."""
  if checks.is_concrete(g):
    n = g.shape[0]
    with jax.ensure_compile_time_eval():  # also when called while tracing
      rows, cols = g.indices[:, 0], g.indices[:, 1]
      keep = (rows < n) & (cols < n) & (rows != cols)
      total = float(jnp.sum(jnp.where(keep, g.data, 0)))
    _raise_total_weight(total)


def _finish(pos_sum, lse_weighted_sum, total):
  positive = -pos_sum / total
  logsumexp = lse_weighted_sum / total
  return {"positive": positive, "logsumexp": logsumexp,
          "loss": positive + logsumexp}


@functools.partial(jax.jit, static_argnames=("block_size",))
def _simclr_dense_core(z_NxK, g_NxN, temperature, *, block_size):
  """Graph form with a dense g on validated inputs."""
  dtype = z_NxK.dtype
  inv_tau = 1.0 / jnp.asarray(temperature, dtype)
  g_NxN = g_NxN.astype(dtype)
  u_NxK = checks.unit_rows(z_NxK, floor=_NORM_FLOOR)
  lse_N = _row_logsumexp(u_NxK, inv_tau, block_size)
  # The diagonal is subtracted, not masked, so that no (N, N) array other
  # than g itself is built: d_i = Σ_{j≠i} G_ij and
  # Σ_{i≠j} G_ij u_iᵀu_j = Tr(uᵀGu) − Σ_i G_ii‖u_i‖² (one (N, N)·(N, K)
  # product).
  g_diag_N = jnp.diagonal(g_NxN)
  d_N = jnp.sum(g_NxN, axis=1) - g_diag_N
  sq_norms_N = jnp.sum(u_NxK**2, axis=1)
  pos_sum = (jnp.sum(u_NxK * (g_NxN @ u_NxK))
             - jnp.dot(g_diag_N, sq_norms_N)) * inv_tau
  return _finish(pos_sum, jnp.dot(d_N, lse_N), jnp.sum(d_N))


@functools.partial(jax.jit, static_argnames=("block_size",))
def _simclr_bcoo_core(z_NxK, g, temperature, *, block_size):
  """Graph form with a BCOO g: sums over the stored edges."""
  dtype = z_NxK.dtype
  inv_tau = 1.0 / jnp.asarray(temperature, dtype)
  u_NxK = checks.unit_rows(z_NxK, floor=_NORM_FLOOR)
  lse_N = _row_logsumexp(u_NxK, inv_tau, block_size)
  rows_E, cols_E, w_E = _offdiag_edges(g)
  w_E = w_E.astype(dtype)
  s_E = jnp.sum(u_NxK[rows_E] * u_NxK[cols_E], axis=1) * inv_tau
  return _finish(jnp.dot(w_E, s_E), jnp.dot(w_E, lse_N[rows_E]), jnp.sum(w_E))


@checks.float32_matmuls
def simclr(
    z: jax.typing.ArrayLike,
    g,
    *,
    temperature: float = 0.5,
    block_size: int | None = None,
) -> jax.Array:
  """InfoNCE loss over a graph; `simclr_terms(...)["loss"]`.

  loss = −Σ_{i≠j} G_ij log softmax_{k≠i}(s_ik/τ)_j / Σ_{i≠j} G_ij,
  s = cosine similarity of the rows of z. On `views_graph(n, 2)` with
  z = concat([z1, z2]) it equals `simclr_two_view(z1, z2)` (NT-Xent).
  See `simclr_terms`.

  Arguments, errors and references: as `simclr_terms`, which documents them in
  full. Returns the 0-d "loss" entry, in z's dtype.

  Example:
    >>> from ssljax.graphs import views_graph
    >>> z = jnp.array([[1., 0.], [0., 1.], [1., 0.], [0., 1.]])
    >>> round(float(simclr(z, views_graph(2, 2), temperature=1.0)), 4)
    0.5514
  """
  return simclr_terms(z, g, temperature=temperature,
                      block_size=block_size)["loss"]


# ---------------------------------------------------------------------------
# Two-view form: NT-Xent (Chen et al. 2020).
# ---------------------------------------------------------------------------


@checks.float32_matmuls
def simclr_two_view_terms(
    z1: jax.typing.ArrayLike,
    z2: jax.typing.ArrayLike,
    *,
    temperature: float = 0.5,
    block_size: int | None = None,
) -> dict[str, jax.Array]:
  """NT-Xent of SimCLR (Chen et al. 2020): its two parts and the loss.

  The 2N anchors are the rows of u = concat([z1, z2]) / row norms; anchor i
  has positive p(i) = i ± N (the other view of the same sample) and its
  softmax runs over the 2N − 1 other rows:

      loss = (1/2N) Σ_i −log[exp(s_{i,p(i)}/τ) / Σ_{k≠i} exp(s_ik/τ)]
           = positive + logsumexp,
      positive  = −(1/N) Σ_i cos(z1_i, z2_i)/τ
      logsumexp = (1/2N) Σ_i log Σ_{k≠i} exp(s_ik/τ).

  This is L of the paper (eq. (1), Algorithm 1: mean over the 2N anchors).
  The official `add_contrastive_loss` returns the batch mean of the two
  directions' cross-entropies added, i.e. 2× this value (same gradient
  direction; it masks the self logit by subtracting 1e9, here by −inf).
  It equals `simclr_terms(concat([z1, z2]), views_graph(N, 2))`.

  Args:
    z1: (N, K) embeddings of view 1, float32 or float64, N >= 1.
    z2: (N, K) embeddings of view 2, row i paired with row i of z1.
    temperature: τ > 0 (official default 0.1 for ImageNet; 0.5 for
      CIFAR-10 in the paper's App. B.9).
    block_size: None or an int B >= 1: lse over blocks of B of the 2N rows,
      memory O(N·B).

  Returns:
    dict with 0-d arrays of the inputs' (promoted) dtype: "positive",
      "logsumexp" and "loss".

  Raises:
    ValueError: if z1 or z2 is not rank 2, the shapes differ, temperature
      <= 0, block_size is invalid, or (concrete inputs only) an input has
      NaN/inf.

  References:
    Chen et al., ICML 2020, arXiv:2002.05709, eq. (1) and Algorithm 1;
    github.com/google-research/simclr `objective.py`. Graph form: Balestriero &
    LeCun 2022, arXiv 2205.11508, §2.

  Example:
    >>> z1 = jnp.array([[1., 0.], [0., 1.]])
    >>> t = simclr_two_view_terms(z1, z1, temperature=1.0)
    >>> round(float(t["loss"]), 4)
    0.5514
  """
  z1_NxK = checks.as_float(z1)
  z2_NxK = checks.as_float(z2)
  checks.check_matrix(z1_NxK, "z1")
  checks.check_same_shape(z1_NxK, z2_NxK, "z1", "z2")
  checks.check_matrix(z2_NxK, "z2")
  checks.check_positive(temperature, "temperature")
  block_size = _dense_if_one_block(_check_block_size(block_size),
                                  2 * z1_NxK.shape[0])
  return _simclr_two_view_core(z1_NxK, z2_NxK, temperature,
                               block_size=block_size)


@functools.partial(jax.jit, static_argnames=("block_size",))
def _simclr_two_view_core(z1_NxK, z2_NxK, temperature, *, block_size):
  """NT-Xent on validated inputs: one positive per anchor, no G."""
  dtype = jnp.result_type(z1_NxK, z2_NxK)
  inv_tau = 1.0 / jnp.asarray(temperature, dtype)
  u1_NxK = checks.unit_rows(z1_NxK.astype(dtype), floor=_NORM_FLOOR)
  u2_NxK = checks.unit_rows(z2_NxK.astype(dtype), floor=_NORM_FLOOR)
  lse_2N = _row_logsumexp(jnp.concatenate([u1_NxK, u2_NxK]), inv_tau,
                          block_size)
  positive = -jnp.mean(jnp.sum(u1_NxK * u2_NxK, axis=1)) * inv_tau
  logsumexp = jnp.mean(lse_2N)
  return {"positive": positive, "logsumexp": logsumexp,
          "loss": positive + logsumexp}


@checks.float32_matmuls
def simclr_two_view(
    z1: jax.typing.ArrayLike,
    z2: jax.typing.ArrayLike,
    *,
    temperature: float = 0.5,
    block_size: int | None = None,
) -> jax.Array:
  """NT-Xent loss (Chen et al. 2020); `simclr_two_view_terms(...)["loss"]`.

  loss = (1/2N) Σ_{i=1}^{2N} −log[exp(s_{i,p(i)}/τ) / Σ_{k≠i} exp(s_ik/τ)]
  over the 2N rows of concat([z1, z2]), s = cosine similarity, p(i) the
  other view of row i. Equal to `simclr` on `views_graph(N, 2)`.

  Arguments, errors and references: as `simclr_two_view_terms`, which
  documents them in full. Returns the 0-d "loss" entry, in z1's dtype.

  Example:
    >>> z1 = jnp.array([[1., 0.], [0., 1.]])
    >>> round(float(simclr_two_view(z1, z1, temperature=1.0)), 4)
    0.5514
  """
  return simclr_two_view_terms(z1, z2, temperature=temperature,
                               block_size=block_size)["loss"]
