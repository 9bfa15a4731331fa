"""Closed-form kernel variant of PAL (Cabannes et al. 2023 §5, App. C.2).

Instead of SGD, the embedding is the spectral solution for the current
target graph T: the top-k eigenvectors v of T − K⁺ with K⁺ = λ·pinvh(K)
(eigenvalues of K below 1e-5/N discarded), and the features of a point x
are k(x, X)·pinvh(K)·v (these are v itself at the training points, up to
the discarded directions). A linear readout without bias maps the k
features to one-hot labels; error = 1 − accuracy of the argmax. This
follows the setup facts of the authors' notebooks given in issue 5.

Relation to the theory solver `ssljax.theory.spectral.kernel_embedding`
(Cabannes et al. 2023 §5): it returns argmin_Z ‖ZZᵀ − G‖² + ρ·Tr(ZᵀK⁻¹Z) =
U_k·diag(√max(μ, 0)) for the top eigenpairs (μ, U) of M = G − (ρ/2)K⁻¹, so the
authors' λ is ρ/2 and T − K⁺ = M for ρ = 2λ when no eigenvalue of K is cut.
Where the maths coincide this module calls it:

* `scale="sqrt"` (the optimum itself) is `kernel_embedding(K, T, k, 2λ,
  method="eigh")` in float64 whenever no eigenvalue of K is below the
  cut-off (K⁺ = λK⁻¹ then); the features k(x, X)·K⁻¹·Z* are its
  `kernel_embedding_features`. If the cut-off removes eigenvalues (K
  singular to working precision), `kernel_embedding` would reject K, and
  the local pinvh path below is used.
* `scale="none"` (the default, the authors' notebooks, every experiment in
  experiments/pal_fig*.py) is not the theory optimum and stays local: its
  features are the *unscaled* top-k eigenvectors of T − K⁺, including those
  whose eigenvalue is ≤ 0 (e.g. the 5th direction of a 4-class signed graph
  2·1{y_i=y_j} − 1, eigenvalue ≈ −λ/κ for an eigenvalue κ of K), which
  the optimum clips to zero columns. A least-squares readout without bias
  is invariant to positive column scalings, so both give the same readout error
  when the top-k eigenvalues are all positive, and may differ otherwise (one
  draw of the 4-class mixture, N = 150, full signed graph: 0.021 vs 0.022). The
  unscaled eigenvectors of a cluster of equal non-positive eigenvalues are also
  only defined up to a rotation, which the local NumPy eigh fixes
  deterministically; the eigenvalues themselves agree with `kernel_embedding`'s
  to ~1e-14 (tested). The pseudo-inverse with an eigenvalue cut-off (1e-5/N) is
  the authors' choice too; for the Laplacian kernels of the experiments it never
  triggers (smallest eigenvalue of K about 3e-3 or more in the draws checked),
  so K⁺ = λK⁻¹.

JAX is imported only on the `scale="sqrt"` path; the default path is
NumPy/SciPy only (float64).

References:
  Cabannes et al. 2023, "Active Self-Supervised Learning: A Few Low-Cost
  Relationships Are All You Need", arXiv 2303.15256, §5 and App. C.2. For the
  regulariser λTr(ZᵀK⁻¹Z) the matrix to decompose is G − (λ/2)K⁻¹ (the paper
  prints G − λK⁻¹), with negative eigenvalues clipped to 0.
  ssljax.theory.spectral.kernel_embedding.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

__all__ = ["laplacian_kernel", "gaussian_kernel", "KernelPAL",
           "readout_error"]


def _pairwise_dist(x, y) -> np.ndarray:
  x = np.asarray(x, np.float64)
  y = np.asarray(y, np.float64)
  if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
    raise ValueError(f"x and y must be (N, D) and (M, D), got {x.shape} and"
                     f" {y.shape}")
  d2 = (x**2).sum(1)[:, None] + (y**2).sum(1)[None, :] - 2.0 * x @ y.T
  return np.sqrt(np.maximum(d2, 0.0))


def laplacian_kernel(x, y, sigma: float) -> np.ndarray:
  """(N, M) Laplacian kernel exp(−‖x_i − y_j‖/σ) (distance not squared)."""
  if not sigma > 0:
    raise ValueError(f"sigma must be > 0, got {sigma!r}")
  return np.exp(-_pairwise_dist(x, y) / sigma)


def gaussian_kernel(x, y, sigma: float) -> np.ndarray:
  """(N, M) Gaussian kernel exp(−‖x_i − y_j‖²/(2σ²))."""
  if not sigma > 0:
    raise ValueError(f"sigma must be > 0, got {sigma!r}")
  return np.exp(-_pairwise_dist(x, y)**2 / (2.0 * sigma**2))


def readout_error(f_fit, y_fit, f_eval, y_eval, num_classes: int) -> float:
  """1 − accuracy of a least-squares linear readout without bias.

  Args:
    f_fit: (N, k) features to fit the readout on.
    y_fit: (N,) int labels for them.
    f_eval: (M, k) features to evaluate on.
    y_eval: (M,) int labels.
    num_classes: C (one-hot width).

  Returns:
    The error rate in [0, 1] of argmax(f_eval @ W) with W = argmin ‖f_fit W −
      onehot(y_fit)‖².

  Raises:
    ValueError: if the shapes disagree.
  """
  f_fit, f_eval = np.asarray(f_fit), np.asarray(f_eval)
  y_fit, y_eval = np.asarray(y_fit), np.asarray(y_eval)
  if (f_fit.ndim != 2 or f_eval.ndim != 2 or f_fit.shape[1] != f_eval.shape[1]
      or y_fit.shape != (f_fit.shape[0],)
      or y_eval.shape != (f_eval.shape[0],)):
    raise ValueError(f"f_fit (N, k), y_fit (N,), f_eval (M, k), y_eval (M,)"
                     f" expected, got {f_fit.shape}, {y_fit.shape},"
                     f" {f_eval.shape}, {y_eval.shape}")
  onehot = np.eye(num_classes)[y_fit]
  w = np.linalg.lstsq(f_fit, onehot, rcond=None)[0]
  return float(np.mean(np.argmax(f_eval @ w, axis=1) != y_eval))


class KernelPAL:
  """Kernel solver for a fixed training and test set; one call per graph.

  Args:
    x: (N, D) training inputs.
    x_test: (M, D) test inputs.
    sigma: kernel bandwidth.
    ridge: λ of K⁺ = λ·pinvh(K) (the authors' λ; see module docstring).
    k: number of eigenvectors (the paper uses k = C + 1 = 5).
    kernel: "laplacian" or "gaussian".
    cutoff: eigenvalues of K below cutoff/N are discarded by pinvh.
    scale: "none" (eigenvectors, the authors) or "sqrt" (the optimum
      U·√max(μ, 0), from `theory.spectral.kernel_embedding`).

  Raises:
    ValueError: on bad shapes, k not in [1, N], unknown kernel or scale.

  Example:
    >>> x = np.linspace(0, 1, 6)[:, None]
    >>> kp = KernelPAL(x, x, sigma=0.5, ridge=1e-3, k=2)
    >>> kp.features(np.eye(6))[0].shape
    (6, 2)
  """

  def __init__(self, x, x_test, *, sigma: float, ridge: float, k: int = 5,
               kernel: str = "laplacian", cutoff: float = 1e-5,
               scale: str = "none"):
    x, x_test = np.asarray(x, np.float64), np.asarray(x_test, np.float64)
    kern = {"laplacian": laplacian_kernel, "gaussian": gaussian_kernel}.get(
        kernel)
    if kern is None:
      raise ValueError(f"kernel must be 'laplacian' or 'gaussian', got"
                       f" {kernel!r}")
    if scale not in ("none", "sqrt"):
      raise ValueError(f"scale must be 'none' or 'sqrt', got {scale!r}")
    n = x.shape[0]
    if int(k) != k or not 1 <= k <= n:
      raise ValueError(f"k must be an integer in [1, N={n}], got {k!r}")
    if not ridge >= 0:
      raise ValueError(f"ridge must be >= 0, got {ridge!r}")
    self.n, self.k, self.scale = n, int(k), scale
    kmat = kern(x, x, sigma)
    kinv = scipy.linalg.pinvh(kmat, atol=cutoff / n, rtol=0.0)
    self.ridge = float(ridge)
    self.kplus = ridge * kinv
    # K for the theory solver (scale="sqrt") when pinvh(K) = K⁻¹ exactly.
    self._kmat = None
    if scale == "sqrt" and scipy.linalg.eigvalsh(
        kmat, subset_by_index=(0, 0))[0] > cutoff / n:
      self._kmat = kmat
    self._train_map = kmat @ kinv
    self._test_map = kern(x_test, x, sigma) @ kinv

  def embed(self, target) -> tuple[np.ndarray, np.ndarray]:
    """Top-k eigenpairs of target − K⁺, descending.

    Args:
      target: (N, N) symmetric graph T.

    Returns:
      (μ (k,), v (N, k)) float64: the top-k eigenvalues of T − K⁺ and, for
        scale="none", their orthonormal eigenvectors; for scale="sqrt",
        v·diag(√max(μ, 0)), computed by `theory.spectral.kernel_embedding`
        (ridge 2λ, float64) when K had no eigenvalue below the cut-off.

    Raises:
      ValueError: if target is not (N, N) (or, on the theory path, not
        finite and symmetric).
    """
    t = np.asarray(target, np.float64)
    if t.shape != (self.n, self.n):
      raise ValueError(f"target must be (N, N) = ({self.n}, {self.n}), got"
                       f" {t.shape}")
    if self._kmat is not None:
      import jax  # pylint: disable=import-outside-toplevel
      from ssljax.theory import spectral  # pylint: disable=import-outside-toplevel
      with jax.enable_x64(True):
        emb = spectral.kernel_embedding(self._kmat, t, self.k,
                                        2.0 * self.ridge, method="eigh")
        return (np.asarray(emb.eigenvalues, np.float64),
                np.asarray(emb.z, np.float64))
    mu, v = scipy.linalg.eigh(t - self.kplus,
                              subset_by_index=(self.n - self.k, self.n - 1))
    mu, v = mu[::-1], v[:, ::-1]
    if self.scale == "sqrt":
      v = v * np.sqrt(np.maximum(mu, 0.0))[None, :]
    return mu, v

  def features(self, target) -> tuple[np.ndarray, np.ndarray]:
    """((N, k) train features, (M, k) test features) for the target graph."""
    v = self.embed(target)[1]
    return self._train_map @ v, self._test_map @ v

  def errors(self, target, y, y_test, num_classes: int,
             y_fit=None) -> dict:
    """Test errors of the two readouts for the target graph.

    Args:
      target: (N, N) graph T.
      y: (N,) int training labels (used by the "train" readout).
      y_test: (M,) int test labels.
      num_classes: C.
      y_fit: optional training labels to fit on instead of y (e.g. noisy).

    Returns:
      {"oracle": error of a readout fitted on the test set itself (the authors'
        choice), "train": error of a readout fitted on the training features and
        labels}.
    """
    f_train, f_test = self.features(target)
    y_fit = y if y_fit is None else y_fit
    return {"oracle": readout_error(f_test, y_test, f_test, y_test,
                                    num_classes),
            "train": readout_error(f_train, y_fit, f_test, y_test,
                                   num_classes)}
