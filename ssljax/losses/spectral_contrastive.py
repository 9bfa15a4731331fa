"""Spectral contrastive loss: graph form VIC² and two-view form (HaoChen).

Rows are samples. The graph form `spectral_contrastive(z, g)` is
‖ZZᵀ − G‖²_F, the "VIC²" loss of Cabannes et al. 2023 Theorem 1, computed
without the (N, N) matrix ZZᵀ. The two-view form
`spectral_contrastive_two_view(z1, z2)` is the mini-batch estimator of HaoChen
et al. 2021, −(2/N)Σ z₁ᵢᵀz₂ᵢ + (1/(N(N−1)))Σ_{i≠j}(z₁ᵢᵀz₂ⱼ)² (Cabannes et al.
2023 eq. (5) mixes a sum in the first term with a 1/N in the second).

References:
  Cabannes et al. 2023, "Active Self-Supervised Learning: A Few Low-Cost
  Relationships Are All You Need", arXiv 2303.15256, Theorem 1, eq. (5), App.
  B.1.1. HaoChen, Wei, Gaidon & Ma, "Provable guarantees for self-supervised
  deep learning with spectral contrastive loss", NeurIPS 2021, arXiv:2106.04156.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssljax import checks, graphs

__all__ = ["spectral_contrastive", "spectral_contrastive_terms",
           "spectral_contrastive_two_view"]


# ---------------------------------------------------------------------------
# Graph form: ‖ZZᵀ − G‖²_F (VIC²).
# ---------------------------------------------------------------------------


@checks.float32_matmuls
def spectral_contrastive_terms(z, g) -> dict[str, jax.Array]:
  """VIC² ‖ZZᵀ − G‖²_F (Cabannes et al. 2023 Thm 1) and its three trace terms.

  Expanding the square (G symmetric),

      ‖ZZᵀ − G‖² = ‖ZᵀZ‖² − 2 Tr(ZᵀGZ) + ‖G‖²,

  so the loss costs O(N·K²) for the (K, K) Gram ZᵀZ plus O(nnz(G)·K) for
  G @ Z; the (N, N) matrix ZZᵀ is never formed. For a dense G the matmul is
  O(N²K), still without an (N, N) intermediate besides G itself.

  float32 cancellation: near an optimum the three terms are each of size
  ~‖G‖² and cancel to a small loss, so the value carries an absolute error
  of roughly eps_f32·(‖ZᵀZ‖² + ‖G‖²) ≈ 1e-7·2‖G‖² (e.g. ~1e-4 for the
  2-view graph on N = 512 rows, where ‖G‖² = N; more for dense supervised
  graphs, ‖G‖² = Σ_c N_c²). Use float64 when the loss itself must be
  resolved below that level. The gradient 4(Z(ZᵀZ) − GZ) involves no ‖G‖²
  and only cancels like the direct form 4(ZZᵀ − G)Z does.

  Relation to VICReg with a squared variance (exact identity): ‖ZᵀZ − NI_K‖² +
  2Tr(Zᵀ(NI_N − G)Z) = ‖ZZᵀ − G‖² + N²K − ‖G‖².

  Args:
    z: (N, K) embeddings, float32 or float64 (ints are promoted), N >= 2.
    g: (N, N) symmetric graph, dense or 2-D BCOO, any real dtype (cast to
      z's dtype); e.g. `graphs.supervised_graph(labels)` or `views_graph`.

  Returns:
    dict of 0-d arrays of z's dtype: "gram" = ‖ZᵀZ‖², "alignment" = Tr(ZᵀGZ) =
      Σ_ij G_ij z_iᵀz_j, "graph" = ‖G‖² (constant in Z), and "loss" = gram −
      2·alignment + graph.

  Raises:
    ValueError: if z is not rank 2 with N >= 2 and K >= 1, g is not (N, N)
      (or a BCOO with batch/dense dims), or (concrete inputs only) z or g
      has NaN/inf or g is not symmetric within 1e-6.

  References:
    Cabannes et al. 2023, arXiv 2303.15256, Theorem 1 (VIC² = ‖ZZᵀ − G‖²) and
    App. B.1.1, whose "+N³" is +N²K and whose ‖ZᵀZ − NI_N‖ is ‖ZᵀZ − NI_K‖.
    Pairwise form: ‖ZZᵀ − G‖² − ‖G‖² = Σ_ij [−2G_ij z_iᵀz_j + (z_iᵀz_j)²].

  Example:
    >>> from ssljax.graphs import views_graph
    >>> t = spectral_contrastive_terms(jnp.eye(4, 2), views_graph(2, 2))
    >>> [float(t[k]) for k in ("gram", "alignment", "graph", "loss")]
    [2.0, 0.0, 4.0, 6.0]
  """
  z_NxK = checks.as_float(z)
  checks.check_embeddings(z_NxK, "z")
  graphs.validate_graph(g, z_NxK.shape[0], name="g")
  return _spectral_terms_core(z_NxK, graphs.as_graph(g))


@jax.jit
def _spectral_terms_core(z_NxK, g_NxN):
  """Trace form of ‖ZZᵀ − G‖² on validated inputs (one compile per shape)."""
  gram_KxK = z_NxK.T @ z_NxK
  gram = jnp.sum(gram_KxK**2)
  alignment = graphs.graph_quadratic(g_NxN, z_NxK)
  graph = graphs.graph_sq_norm(g_NxN, z_NxK.dtype)
  return {"gram": gram, "alignment": alignment, "graph": graph,
          "loss": gram - 2 * alignment + graph}


@checks.float32_matmuls
def spectral_contrastive(z, g) -> jax.Array:
  """VIC² loss ‖ZZᵀ − G‖²_F (Cabannes et al. 2023 Thm 1), without ZZᵀ.

  Plain sum over all N² entries, no normalisation; computed as
  ‖ZᵀZ‖² − 2Tr(ZᵀGZ) + ‖G‖² in O(N·K² + nnz(G)·K). See
  `spectral_contrastive_terms` for the float32 cancellation caveat.

  With G = YYᵀ (`graphs.supervised_graph`) and K >= C the minimisers are
  exactly Z = YR with RRᵀ = I_C (loss 0; singular values √N_c = √(N p_c);
  Cabannes et al. 2023 Theorem 2, and Prop. 1 whose printed argmin set is
  C×K instead of these N×K matrices).

  Arguments, errors and references: as `spectral_contrastive_terms`, which
  documents them in full. Returns the 0-d "loss" entry, in z's dtype.

  Example:
    >>> from ssljax.graphs import supervised_graph
    >>> y = jnp.array([[1., 0.], [0., 1.], [1., 0.]])
    >>> float(spectral_contrastive(y, supervised_graph(jnp.array([0, 1, 0]))))
    0.0
  """
  return spectral_contrastive_terms(z, g)["loss"]


# ---------------------------------------------------------------------------
# Two-view form (HaoChen et al. 2021, arXiv 2106.04156).
# ---------------------------------------------------------------------------


@checks.float32_matmuls
def spectral_contrastive_two_view(z1, z2) -> jax.Array:
  """HaoChen et al.'s mini-batch spectral contrastive loss on two views.

      L = −(2/N) Σ_i z1_iᵀz2_i + (1/(N(N−1))) Σ_{i≠j} (z1_iᵀz2_j)²

  Row i of z1 and row i of z2 are two views of sample i (positives); all
  cross pairs i ≠ j are treated as independent draws (negatives). The
  negative sum is computed as ⟨Z1ᵀZ1, Z2ᵀZ2⟩_F − Σ_i (z1_iᵀz2_i)², O(N·K²),
  without the (N, N) matrix Z1Z2ᵀ; this has the same float32 cancellation
  caveat as `spectral_contrastive_terms` when the diagonal dominates.

  This is not the graph form on concat([z1, z2]) with `views_graph(n, 2)`
  up to a constant. There, ‖ZZᵀ − G‖² = ‖Z1Z1ᵀ‖² + ‖Z2Z2ᵀ‖² +
  2‖Z1Z2ᵀ − I_n‖² also penalises within-view products, and the cross block
  ‖Z1Z2ᵀ − I‖² = Σ_{i≠j}(z1_iᵀz2_j)² + Σ_i (z1_iᵀz2_i − 1)² weighs
  negatives and positives 1 : 1 instead of 1/(N(N−1)) : 2/N and keeps the
  (z1_iᵀz2_i)² term (checked in tests/test_losses_spectral.py).

  Args:
    z1: (N, K) embeddings of view 1, float32 or float64, N >= 2.
    z2: (N, K) embeddings of view 2, row i paired with row i of z1.

  Returns:
    0-d array of the inputs' (promoted) dtype.

  Raises:
    ValueError: if z1 or z2 is not rank 2, the shapes differ, N < 2, or
      (concrete inputs only) an input has NaN/inf.

  References:
    HaoChen et al. 2021, arXiv:2106.04156, eq. (5) / Lemma 3.2 estimator;
    Cabannes et al. 2023, arXiv 2303.15256, eq. (5), with the normalisations
    above (the printed eq. mixes a sum and a 1/N).

  Example:
    >>> z = jnp.array([[1., 0.], [0., 1.]])
    >>> float(spectral_contrastive_two_view(z, z))
    -2.0
  """
  z1_NxK, z2_NxK = checks.check_two_views(z1, z2)
  return _spectral_two_view_core(z1_NxK, z2_NxK)


@jax.jit
def _spectral_two_view_core(z1_NxK, z2_NxK):
  dtype = jnp.result_type(z1_NxK, z2_NxK)
  z1_NxK, z2_NxK = z1_NxK.astype(dtype), z2_NxK.astype(dtype)
  n = z1_NxK.shape[0]
  pos_N = jnp.sum(z1_NxK * z2_NxK, axis=1)  # z1_iᵀz2_i
  all_pairs = jnp.sum((z1_NxK.T @ z1_NxK) * (z2_NxK.T @ z2_NxK))
  negatives = all_pairs - jnp.sum(pos_N**2)  # Σ_{i≠j} (z1_iᵀz2_j)²
  return -2.0 / n * jnp.sum(pos_N) + negatives / (n * (n - 1))
