"""Closed-form optimal embeddings given a graph G.

Rows are samples: G is (N, N) symmetric, embeddings Z are (N, k). Each
solver returns one minimiser; the losses are invariant under Z → ZR for
orthogonal R (and BarlowTwins also under positive column scalings), so
compare solutions through ZZᵀ, spans or principal angles, not entrywise.

* `optimal_embedding(g, k, loss=...)`: free Z ("interpolation regime").
* `linear_optimal_weights(x, g, k)`: Z = X W for a linear map W.
* `kernel_embedding(kernel_matrix, g, k, ridge)`: Z in an RKHS with the
  Tikhonov penalty ridge·Tr(ZᵀK⁻¹Z), plus `kernel_embedding_features` for
  the out-of-sample map; `gaussian_kernel` and `laplacian_kernel` build K.

Dense eigendecompositions use `jnp.linalg.eigh`. For large N,
`kernel_embedding` switches to a shift-inverted block subspace iteration
that finds only the top k eigenpairs and needs only Cholesky
factorisations (of K, then K⁻¹ from it; of a shifted M; and of a deflated
shifted M that certifies how many eigenvalues are kept): N = 4000 in a
few seconds on 2 CPU cores (`benchmarks/theory.py`), where a full eigh
takes tens of seconds.

References:
  Balestriero & LeCun 2022, "Contrastive and Non-Contrastive Self-Supervised
  Learning Recover Global and Local Spectral Embedding Methods", arXiv
  2205.11508 (closed forms). Cabannes et al. 2023, "Active Self-Supervised
  Learning: A Few Low-Cost Relationships Are All You Need", arXiv 2303.15256,
  Theorem 1, Theorem 2, App. B, §5. Corrections used here: App. B.1.1's eqs.
  (9)–(10) equal VIC² + const only when D = NI; Theorem 2 for BarlowTwins holds
  for the class-size normalised graph, not YYᵀ; §5 decomposes G − (λ/2)K⁻¹
  (printed G − λK⁻¹), negative eigenvalues clipped.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ssljax import checks, graphs
from ssljax.theory import linalg
# The kernel regime lives in ssljax.theory.kernel; re-exported here so that
# `ssljax.theory.spectral.kernel_embedding` keeps working.
from ssljax.theory.kernel import KernelEmbedding
from ssljax.theory.kernel import gaussian_kernel
from ssljax.theory.kernel import kernel_embedding
from ssljax.theory.kernel import kernel_embedding_eigh
from ssljax.theory.kernel import kernel_embedding_features
from ssljax.theory.kernel import kernel_embedding_subspace
from ssljax.theory.kernel import laplacian_kernel

__all__ = [
    "CLOSED_FORM_LOSSES",
    "KernelEmbedding",
    "optimal_embedding",
    "linear_optimal_weights",
    "kernel_embedding",
    "kernel_embedding_eigh",
    "kernel_embedding_subspace",
    "kernel_embedding_features",
    "gaussian_kernel",
    "laplacian_kernel",
]

# All three have the minimisers of ‖ZZᵀ − G‖² (they differ by constants).
_VIC2_LOSSES = ("spectral_contrastive", "vic2", "vicreg_squared")
CLOSED_FORM_LOSSES = _VIC2_LOSSES + ("barlow_twins",)
_NO_CLOSED_FORM = {
    "vicreg": (
        "the hinge variance term relu(1 − std) with finite weights has no"
        " closed-form minimiser (the optimum trades the hinge against the"
        " invariance); use loss='vicreg_squared', whose squared-variance form"
        " equals ‖ZZᵀ − G‖² up to a constant"),
    "simclr": (
        "the InfoNCE softmax has no closed-form minimiser for a general G;"
        " only special cases are known (supervised balanced G: a regular"
        " simplex of class directions)"),
}


# ---------------------------------------------------------------------------
# Boundary checks.
# ---------------------------------------------------------------------------


def _check_loss(loss: str, allowed: tuple[str, ...]) -> str:
  if loss in _NO_CLOSED_FORM:
    raise ValueError(
        f"loss={loss!r} has no closed-form optimum: {_NO_CLOSED_FORM[loss]}")
  if loss not in allowed:
    raise ValueError(f"loss must be one of {allowed}, got {loss!r}")
  return loss


# ---------------------------------------------------------------------------
# Free embedding.
# ---------------------------------------------------------------------------


def optimal_embedding(g, k: int, *, loss: str = "spectral_contrastive",
                      atol: float = 1e-6) -> jax.Array:
  """A minimiser Z* (N, k) of an SSL loss over free embeddings, given G.

  * "spectral_contrastive", "vic2", "vicreg_squared": the graph forms
    ‖ZZᵀ − G‖² (VIC², Cabannes et al. 2023 Thm 1 and eq. (5) via App. B.1.1) and
    the squared-variance VICReg ‖ZᵀZ/N − I_K‖² + (2/N²)Tr(Zᵀ(NI − G)Z), which is
    (‖ZZᵀ − G‖² + N²K − ‖G‖²)/N² (exact identity). By Eckart–Young on the PSD
    part of G, Z* = U_k diag(√max(μ_k, 0)) for the top-k eigenpairs (μ_k, U_k)
    of G, negative eigenvalues clipped to 0 (their columns are 0). Unique up to
    Z → ZR (R orthogonal) iff μ_k > μ_{k+1} or μ_k <= 0. For G = YYᵀ
    (supervised, rows) and k >= C this is Y R with RRᵀ = I_C (Cabannes et al.
    2023 Thm 2; singular values √N_c); for k < C the minimum is the Eckart–Young
    tail Σ_{i>k} N_{c_i}².
  * "barlow_twins": the graph form ‖Z̃ᵀGZ̃ − I‖² with unit-norm columns
    Z̃ (Cabannes et al. 2023 Thm 1). Z* is k orthonormal eigenvectors of G
    (column scale is free: any Z*D, D positive diagonal, is also optimal). It is
    a minimiser in two cases, else ValueError:
      (a) G has the eigenvalue 1 with multiplicity >= k: Z̃ᵀGZ̃ = I_k and the
          loss is 0 for every off-diagonal weight. This covers
          `graphs.normalized_supervised_graph` (G_n = Y diag(1/N_c) Yᵀ, a
          projector of rank C) with k <= C, and views_graph(n, V)/(V − 1)
          with k <= n.
      (b) G is an orthogonal projector of rank r < k (eigenvalues in
          {0, 1}): Z* = [r eigenvectors of eigenvalue 1, k − r of eigenvalue
          0], loss k − r, the minimum for off-diagonal weight 1 (for K > C the
          loss is >= K − C).
    Under the un-normalised G = YYᵀ neither holds: the loss at Z = Y is
    Σ_c (N_c − 1)² and zero-loss Z exist outside span(Y) (contrary to Cabannes
    et al. 2023 Theorem 2 / App. B.2.4), so there is no span(Y) closed form and
    a ValueError is raised.
  * "vicreg" (hinge) and "simclr": ValueError; no closed form exists (the
    hinge VICReg optimum depends on the finite weights; SimCLR's only on
    special graphs, e.g. a simplex for balanced supervised G).

  Args:
    g: (N, N) symmetric graph, dense or BCOO (densified).
    k: embedding dimension, 1 <= k <= N.
    loss: one of `CLOSED_FORM_LOSSES`.
    atol: tolerance on eigenvalues for the BarlowTwins conditions.

  Returns:
    (N, k) array in g's floating dtype (float32 for integer/bool g).

  Raises:
    ValueError: if g is not a finite symmetric (N, N) graph, k is not in
      [1, N], loss is unknown or has no closed form, or (barlow_twins) G
      satisfies neither (a) nor (b).

  References:
    Cabannes et al. 2023, arXiv 2303.15256, Theorem 1, Theorem 2 and App. B.2
    (the minimisers of VIC² with G = YYᵀ, K >= C, are exactly YR with RRᵀ = I_C;
    Prop. 1's printed argmin set is C×K, not N×K). Balestriero & LeCun 2022,
    arXiv 2205.11508, closed-form optimal representations.

  Example:
    >>> from ssljax.graphs import supervised_graph
    >>> z = optimal_embedding(supervised_graph(jnp.array([0, 0, 1])), 2)
    >>> jnp.round(z @ z.T, 4).tolist()
    [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
  """
  g_NxN = linalg.dense_graph(g)
  n = g_NxN.shape[0]
  k = linalg.check_k(k, n)
  loss = _check_loss(loss, CLOSED_FORM_LOSSES)
  mu_N, u_NxN = linalg.sorted_eigh(g_NxN)
  if loss in _VIC2_LOSSES:
    return linalg.sqrt_clipped(u_NxN[:, :k], mu_N[:k], jnp.max(jnp.abs(mu_N)))
  # BarlowTwins.
  mu_np = np.asarray(jax.device_get(mu_N), dtype=np.float64)
  is_one = np.abs(mu_np - 1.0) <= atol
  is_zero = np.abs(mu_np) <= atol
  if np.count_nonzero(is_one) >= k:
    return u_NxN[:, np.flatnonzero(is_one)[:k]]
  if np.all(is_one | is_zero):
    r = int(np.count_nonzero(is_one))
    cols = np.concatenate([np.flatnonzero(is_one),
                           np.flatnonzero(is_zero)[:k - r]])
    return u_NxN[:, cols]
  raise ValueError(
      "loss='barlow_twins' has a closed-form minimiser only if g has the"
      f" eigenvalue 1 with multiplicity >= k = {k} or g is an orthogonal"
      f" projector; got {np.count_nonzero(is_one)} eigenvalue(s) equal to 1"
      f" and eigenvalues in [{mu_np[-1]:.4g}, {mu_np[0]:.4g}]. Normalise the"
      " graph (e.g. graphs.normalized_supervised_graph, or views_graph/(V−1));"
      " with the un-normalised YYᵀ the minimisers are not in span(Y)")


# ---------------------------------------------------------------------------
# Linear regime.
# ---------------------------------------------------------------------------


def linear_optimal_weights(x, g, k: int, *,
                           loss: str = "spectral_contrastive") -> jax.Array:
  """Closed-form W (D, k) minimising ‖(XW)(XW)ᵀ − G‖² for Z = XW.

  Derivation. Let X = P S Qᵀ be the thin SVD restricted to the r non-zero
  singular values (P: N×r, Q: D×r). Any W gives XW = P A with A = S QᵀW
  (r×k), and every A is reached (W = Q S⁻¹ A); the part of W orthogonal to
  span(Q) does not change Z. With P⊥ the complement of P,

      ‖P A AᵀPᵀ − G‖² = ‖A Aᵀ − PᵀGP‖² + ‖G‖² − ‖PᵀGP‖²,

  so A Aᵀ must be the best rank-k PSD approximation of M = PᵀGP (r×r):
  A = E_k diag(√max(μ_k, 0)) for its top-k eigenpairs (Eckart–Young), and

      W* = Q S⁻¹ E_k diag(√max(μ_k, 0)),   Z* = X W* = P E_k √μ₊,

  the minimum-norm minimiser. Columns beyond r (or with μ <= 0) are 0. The
  same W minimises the squared-variance VICReg (equal up to a constant and
  a factor 1/N²). Verified against gradient descent in
  tests/test_theory_spectral.py.

  Args:
    x: (N, D) inputs (rows = samples), float32 or float64. No bias is
      added: append a column of ones to x for an affine map.
    g: (N, N) symmetric graph, dense or BCOO.
    k: output dimension, 1 <= k <= N.
    loss: "spectral_contrastive", "vic2" or "vicreg_squared" (other losses
      raise: no linear closed form is verified for them).

  Returns:
    (D, k) array W* in the promoted floating dtype of x and g.

  Raises:
    ValueError: if x is not a finite non-empty (N, D) array, g is not a
      symmetric (N, N) graph, k is not in [1, N], or loss is not supported.

  References:
    Balestriero & LeCun 2022, arXiv 2205.11508, closed-form optimal network
    parameters in the linear regime (VIC² and squared-variance VICReg, which
    differ by a constant).
  """
  x_NxD = jnp.asarray(x)
  if not jnp.issubdtype(x_NxD.dtype, jnp.floating):
    x_NxD = x_NxD.astype(jnp.result_type(float))
  if x_NxD.ndim != 2 or 0 in x_NxD.shape:
    raise ValueError(f"x must be a non-empty rank-2 (N, D) array, got shape"
                     f" {x_NxD.shape}")
  checks.check_finite(x_NxD, "x")
  n = x_NxD.shape[0]
  g_NxN = linalg.dense_graph(g, n=n)
  k = linalg.check_k(k, n)
  _check_loss(loss, _VIC2_LOSSES)
  dtype = jnp.result_type(x_NxD, g_NxN)
  x_NxD, g_NxN = x_NxD.astype(dtype), g_NxN.astype(dtype)
  p_Nxm, s_m, qt_mxD = jnp.linalg.svd(x_NxD, full_matrices=False)
  tol = float(jnp.max(s_m)) * max(x_NxD.shape) * float(jnp.finfo(dtype).eps)
  r = int(np.count_nonzero(np.asarray(jax.device_get(s_m)) > tol))
  w_DxK = jnp.zeros((x_NxD.shape[1], k), dtype)
  if r == 0:
    return w_DxK
  p_Nxr, s_r, q_Dxr = p_Nxm[:, :r], s_m[:r], qt_mxD[:r].T
  mu_r, e_rxr = linalg.sorted_eigh(p_Nxr.T @ g_NxN @ p_Nxr)
  kk = min(k, r)
  a_rxkk = linalg.sqrt_clipped(e_rxr[:, :kk], mu_r[:kk], jnp.max(jnp.abs(mu_r)))
  return w_DxK.at[:, :kk].set(q_Dxr @ (a_rxkk / s_r[:, None]))
