"""Closed-form kernel variant of PAL (002 §5, controlled experiments App. C.2).

Instead of SGD, the embedding is the spectral solution for the current
target graph T: the top-k eigenvectors v of T − K⁺ with K⁺ = λ·pinvh(K)
(eigenvalues of K below 1e-5/N discarded), and the features of a point x
are k(x, X)·pinvh(K)·v (these are v itself at the training points, up to
the discarded directions). A linear readout without bias maps the k
features to one-hot labels; error = 1 − accuracy of the argmax. This
follows the setup facts of the authors' notebooks given in issue 5.

Relation to FINDINGS (a) "Kernel regime": argmin_Z ‖ZZᵀ − G‖² +
ρ·Tr(ZᵀK⁻¹Z) is U_k·diag(√max(μ, 0)) for the top eigenpairs (μ, U) of
G − (ρ/2)K⁻¹, so the authors' λ is ρ/2. Their features use the unscaled
eigenvectors (`scale="none"`, the default), which give the same readout
error as the true optimum whenever the top-k eigenvalues are positive;
`scale="sqrt"` gives the optimum itself (negative eigenvalues clipped).

This is a local NumPy version: `ssljax.theory.spectral.kernel_embedding`
(a Cholesky-based solver that rejects singular K) was not committed when
this module was written, and the notebooks' pseudo-inverse with an
eigenvalue cut-off differs from it anyway.

References:
  002 §5 and App. C.2; FINDINGS (a) "Kernel regime", (b) 002 erratum 9.
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
    The error rate in [0, 1] of argmax(f_eval @ W) with
    W = argmin ‖f_fit W − onehot(y_fit)‖².

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
    scale: "none" (eigenvectors, the authors) or "sqrt" (√max(μ, 0)).

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
    self.kplus = ridge * kinv
    self._train_map = kmat @ kinv
    self._test_map = kern(x_test, x, sigma) @ kinv

  def embed(self, target) -> tuple[np.ndarray, np.ndarray]:
    """Top-k eigenpairs (μ (k,), v (N, k)) of target − K⁺, descending."""
    t = np.asarray(target, np.float64)
    if t.shape != (self.n, self.n):
      raise ValueError(f"target must be (N, N) = ({self.n}, {self.n}), got"
                       f" {t.shape}")
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
      {"oracle": error of a readout fitted on the test set itself (the
      authors' choice), "train": error of a readout fitted on the training
      features and labels}.
    """
    f_train, f_test = self.features(target)
    y_fit = y if y_fit is None else y_fit
    return {"oracle": readout_error(f_test, y_test, f_test, y_test,
                                    num_classes),
            "train": readout_error(f_train, y_fit, f_test, y_test,
                                   num_classes)}
