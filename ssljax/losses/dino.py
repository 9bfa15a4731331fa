"""DINO: self-distillation with no labels (Caron et al. 2021).

A student sees all V crops of each image (G global crops first, then the
local ones, view-major); an EMA teacher sees the G global crops. Teacher
logits are centred and sharpened into P_t = softmax((t − c)/τ_t) under
stop-gradient; the student gives log P_s = log_softmax(s/τ_s); the loss is
the cross-entropy H(P_t, P_s) = −Σ_k P_t,k log P_s,k averaged over the batch
and over every pair (teacher crop g, student crop v ≠ g) of one image.

Graph form: the same sum over a bipartite graph between the V·B student rows
and the G·B teacher rows, G_ij = 1 when they are different crops of one
image (`dino_crops_graph`, the original method's graph: every global crop
teaches all other crops of its image), divided by Σ G (`dino_graph`).
The centre (`dino_center_update`) and the teacher temperature
(`dino_teacher_temperature`) are state kept by the training loop.

References:
  Caron, Touvron, Misra, Jégou, Mairal, Bojanowski & Joulin 2021, "Emerging
  Properties in Self-Supervised Vision Transformers", arXiv 2104.14294,
  eq. (2)–(3), §3.1 (centring) and Algorithm 1; official DINOLoss (pairing,
  division by the number of pairs, teacher-temperature warm-up).
"""

from __future__ import annotations

import math

import jax
from jax.experimental import sparse as jsparse
import jax.numpy as jnp
import numpy as np

from ssljax import checks, graphs

__all__ = ["dino", "dino_terms", "dino_center_update",
           "dino_teacher_temperature", "dino_crops_graph", "dino_graph"]


def _check_center(center, k: int):
  c_K = checks.as_float(center)
  if c_K.shape != (k,):
    raise ValueError(f"center must have shape (K,) = ({k},) to match the K ="
                     f" {k} logits, got shape {c_K.shape}")
  checks.check_finite(c_K, "center")
  return c_K


def _check_temperatures(tau_s, tau_t) -> None:
  checks.check_positive(tau_s, "student_temperature")
  checks.check_positive(tau_t, "teacher_temperature")


def _check_nonnegative_int(value, name: str) -> None:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or (
      value < 0):
    raise ValueError(f"{name} must be an int >= 0, got {value!r}")


def _probabilities(student, teacher, center_K, tau_s, tau_t, dtype):
  """(log P_s, P_t, log P_t) over the last axis, teacher under stop-gradient."""
  s = student.astype(dtype)
  t = jax.lax.stop_gradient(teacher.astype(dtype))
  c = jax.lax.stop_gradient(center_K.astype(dtype))
  log_ps_NxK = jax.nn.log_softmax(s / jnp.asarray(tau_s, dtype), axis=-1)
  log_pt_MxK = jax.nn.log_softmax((t - c) / jnp.asarray(tau_t, dtype),
                                  axis=-1)
  return log_ps_NxK, jnp.exp(log_pt_MxK), log_pt_MxK


@checks.float32_matmuls
def dino_terms(
    student: jax.typing.ArrayLike,
    teacher: jax.typing.ArrayLike,
    center: jax.typing.ArrayLike,
    *,
    student_temperature: float = 0.1,
    teacher_temperature: float = 0.04,
) -> dict[str, jax.Array]:
  """DINO loss over multi-crop logits, with two cheap collapse monitors.

  P_t[g, b] = softmax((teacher[g, b] − center)/τ_t) (stop-gradient) and
  log P_s[v, b] = log_softmax(student[v, b]/τ_s);

      loss = 1/(G(V − 1)) Σ_{g<G} Σ_{v≠g} (1/B) Σ_b H(P_t[g, b], P_s[v, b]),

  H(p, q) = −Σ_k p_k log q_k. Teacher crop g is student crop g (global crops
  come first), so the pair v = g is skipped: G(V − 1) pairs, as the official
  DINOLoss counts them.

  Monitors: "teacher_entropy", the mean H(P_t) of the G·B teacher rows
  (log K: uniform collapse; 0: one-hot collapse), and "kl" = loss −
  teacher_entropy, the mean KL(P_t ‖ P_s) over the pairs.

  Args:
    student: (V, B, K) student logits of all V crops, float32 or float64,
      the G global crops first, then the local ones (view-major).
    teacher: (G, B, K) teacher logits of the G global crops, 1 <= G <= V,
      G(V − 1) >= 1.
    center: (K,) centre subtracted from the teacher logits
      (`dino_center_update`; zeros at the start).
    student_temperature: τ_s > 0 (official 0.1).
    teacher_temperature: τ_t > 0 (official 0.04, warmed up to 0.07 in the
      paper; may be a traced scalar from `dino_teacher_temperature`).

  Returns:
    dict of 0-d arrays in the promoted dtype of student and teacher:
      "loss", "teacher_entropy", "kl".

  Raises:
    ValueError: if student or teacher is not rank 3, their (B, K) differ,
      G > V or V < 2, center is not (K,), a temperature is not finite > 0,
      or (concrete inputs only) an input has NaN/inf.

  References:
    Caron et al. 2021, "Emerging Properties in Self-Supervised Vision
    Transformers", arXiv 2104.14294, eq. (2)–(3) and Algorithm 1; official
    DINOLoss (pairs v ≠ g, mean over b, division by the number of pairs).

  Example:
    >>> s = jnp.zeros((3, 2, 4))              # 2 global + 1 local crop
    >>> t = jnp.zeros((2, 2, 4))
    >>> out = dino_terms(s, t, jnp.zeros(4))
    >>> [round(float(out[k]), 4) for k in ("loss", "teacher_entropy", "kl")]
    [1.3863, 1.3863, 0.0]
  """
  s_VxBxK = checks.as_float(student)
  t_GxBxK = checks.as_float(teacher)
  for x, name, what in ((s_VxBxK, "student", "(V, B, K)"),
                        (t_GxBxK, "teacher", "(G, B, K)")):
    if x.ndim != 3 or 0 in x.shape:
      raise ValueError(f"{name} must be a non-empty rank-3 {what} array, got"
                       f" shape {x.shape}")
  (v, b, k), g = s_VxBxK.shape, t_GxBxK.shape[0]
  if t_GxBxK.shape[1:] != (b, k) or not 1 <= g <= v or v < 2:
    raise ValueError(
        f"student (V, B, K) and teacher (G, B, K) must share B and K, with"
        f" 1 <= G <= V and V >= 2, got student {s_VxBxK.shape} and teacher"
        f" {t_GxBxK.shape}")
  c_K = _check_center(center, k)
  checks.check_finite(s_VxBxK, "student")
  checks.check_finite(t_GxBxK, "teacher")
  _check_temperatures(student_temperature, teacher_temperature)
  return _dino_core(s_VxBxK, t_GxBxK, c_K, student_temperature,
                    teacher_temperature)


@jax.jit
def _dino_core(s_VxBxK, t_GxBxK, c_K, tau_s, tau_t):
  """Official pairing on validated inputs."""
  dtype = jnp.result_type(s_VxBxK, t_GxBxK)
  (v, b, _), g = s_VxBxK.shape, t_GxBxK.shape[0]
  log_ps, pt, log_pt = _probabilities(s_VxBxK, t_GxBxK, c_K, tau_s, tau_t,
                                      dtype)
  # ce_GxV[g, v] = (1/B) Σ_b H(P_t[g, b], P_s[v, b]).
  ce_GxV = -jnp.einsum("gbk,vbk->gv", pt, log_ps) / b
  other_GxV = jnp.arange(g)[:, None] != jnp.arange(v)[None, :]
  loss = jnp.sum(jnp.where(other_GxV, ce_GxV, 0)) / (g * (v - 1))
  teacher_entropy = -jnp.sum(pt * log_pt) / (g * b)
  return {"loss": loss, "teacher_entropy": teacher_entropy,
          "kl": loss - teacher_entropy}


@checks.float32_matmuls
def dino(
    student: jax.typing.ArrayLike,
    teacher: jax.typing.ArrayLike,
    center: jax.typing.ArrayLike,
    *,
    student_temperature: float = 0.1,
    teacher_temperature: float = 0.04,
) -> jax.Array:
  """DINO loss (Caron et al. 2021); `dino_terms(...)["loss"]`.

  loss = mean over the G(V − 1) pairs (teacher crop g, student crop v ≠ g)
  of (1/B) Σ_b H(softmax((t_gb − c)/τ_t), softmax(s_vb/τ_s)), teacher under
  stop-gradient. Equal to `dino_graph` on `dino_crops_graph(B, G, V − G)`.

  Arguments, errors, references: as `dino_terms`. Returns its 0-d "loss".

  Example:
    >>> s = jnp.array([[[1., 0.]], [[0., 1.]]])   # V = 2 crops, B = 1, K = 2
    >>> t = jnp.array([[[1., 0.]], [[0., 1.]]])   # G = 2
    >>> round(float(dino(s, t, jnp.zeros(2), teacher_temperature=1.0,
    ...                  student_temperature=1.0)), 4)
    1.0443
  """
  return dino_terms(student, teacher, center,
                    student_temperature=student_temperature,
                    teacher_temperature=teacher_temperature)["loss"]


@checks.float32_matmuls
def dino_center_update(
    center: jax.typing.ArrayLike,
    teacher: jax.typing.ArrayLike,
    *,
    momentum: float = 0.9,
) -> jax.Array:
  """EMA of the teacher logits: c ← m·c + (1 − m)·mean of the teacher rows.

  The mean runs over all G·B teacher rows of the global batch. The official
  code all-reduces its per-process sums; in ssljax's single global jit the
  arrays already hold the whole batch, so no all-reduce is needed.
  Gradients are stopped (the centre is state).

  Args:
    center: (K,) current centre (zeros at the start).
    teacher: (G, B, K) or (M, K) teacher logits.
    momentum: m in [0, 1] (official 0.9); may be traced.

  Returns:
    (K,) new centre in the promoted dtype of center and teacher.

  Raises:
    ValueError: if teacher is not rank 2 or 3 or has no rows, center is not
      (K,), momentum is outside [0, 1] (concrete only), or (concrete only)
      an input has NaN/inf.

  References:
    Caron et al. 2021, arXiv 2104.14294, §3.1 (centring) and Algorithm 1
    (C = m·C + (1 − m)·cat([t1, t2]).mean(dim=0)).

  Example:
    >>> t = jnp.array([[[1., 3.]], [[3., 5.]]])   # G = 2, B = 1, K = 2
    >>> dino_center_update(jnp.zeros(2), t, momentum=0.5).tolist()
    [1.0, 2.0]
  """
  t = checks.as_float(teacher)
  if t.ndim not in (2, 3) or t.size == 0:
    raise ValueError(f"teacher must be a non-empty (G, B, K) or (M, K)"
                     f" array, got shape {t.shape}")
  c_K = _check_center(center, t.shape[-1])
  checks.check_finite(t, "teacher")
  if checks.is_concrete(momentum):
    m = float(momentum)
    if not (math.isfinite(m) and 0 <= m <= 1):
      raise ValueError(f"momentum must be in [0, 1], got {momentum!r}")
  return _center_core(c_K, t.reshape(-1, t.shape[-1]), momentum)


@jax.jit
def _center_core(c_K, t_MxK, momentum):
  dtype = jnp.result_type(c_K, t_MxK)
  m = jnp.asarray(momentum, dtype)
  batch_center_K = jnp.mean(jax.lax.stop_gradient(t_MxK).astype(dtype),
                            axis=0)
  return m * jax.lax.stop_gradient(c_K).astype(dtype) + (1 - m) * batch_center_K


@checks.float32_matmuls
def dino_teacher_temperature(
    step: jax.typing.ArrayLike,
    warmup_steps: int,
    *,
    start: float = 0.04,
    end: float = 0.07,
) -> jax.Array:
  """Teacher temperature: linear from `start` to `end`, then constant.

  τ_t(step) = start + (end − start)·min(step/warmup_steps, 1) for
  step >= 0 (negative steps give `start`); warmup_steps = 0 gives `end`
  at once. The official schedule is np.linspace(start, end, W) per epoch
  followed by `end`, which reaches `end` at epoch W − 1: it is this one
  with warmup_steps = W − 1.

  Args:
    step: current step (epoch), int or float, scalar or array (elementwise),
      may be traced.
    warmup_steps: length of the warm-up, int >= 0 (static).
    start: τ_t at step 0 (official `warmup_teacher_temp` 0.04).
    end: τ_t after the warm-up (official `teacher_temp`, 0.04 by default,
      0.07 in the paper's ViT-S/16 runs, warmed up over 30 epochs).

  Returns:
    array of step's shape, default float dtype (float32 unless x64 is on).

  Raises:
    ValueError: if warmup_steps is not an int >= 0, or start or end is not
      a finite number > 0.

  References:
    Caron et al. 2021, arXiv 2104.14294, implementation details (τ_t warm-up
    from 0.04 to 0.07 during the first 30 epochs); official
    `warmup_teacher_temp`, `teacher_temp`, `warmup_teacher_temp_epochs`.

  Example:
    >>> temps = dino_teacher_temperature(np.array([0, 15, 30, 99]), 30)
    >>> [round(float(x), 4) for x in np.asarray(temps)]
    [0.04, 0.055, 0.07, 0.07]
  """
  _check_nonnegative_int(warmup_steps, "warmup_steps")
  checks.check_positive(start, "start")
  checks.check_positive(end, "end")
  step = jnp.asarray(step, jnp.result_type(float))
  frac = (jnp.ones_like(step) if warmup_steps == 0
          else jnp.clip(step / warmup_steps, 0, 1))
  return start + (end - start) * frac


@checks.float32_matmuls
def dino_crops_graph(batch: int, num_global: int, num_local: int, *,
                     dtype=jnp.float32, sparse: bool = False):
  """The DINO graph between student rows and teacher rows.

  Student row i = v·B + b is crop v of image b (V = G + L crops, global
  first); teacher row j = g·B + b' is global crop g of image b'. G_ij = 1
  iff b = b' and v ≠ g: every global crop teaches all the other crops of
  its image (Caron et al. 2021, eq. (3)); Σ G = B·G·(V − 1).

  Args:
    batch: B, images per batch, int >= 1.
    num_global: G, global crops, int >= 1.
    num_local: L, local crops, int >= 0; G + L >= 2.
    dtype: dtype of the entries.
    sparse: if True, a BCOO with B·G·(V − 1) stored entries.

  Returns:
    (V·B, G·B) 0/1 matrix of `dtype` (BCOO if `sparse`).

  Raises:
    ValueError: if batch or num_global is not an int >= 1, num_local is
      not an int >= 0, or there is a single crop.

  References:
    Caron et al. 2021, arXiv 2104.14294, eq. (3) (x ∈ {x1g, x2g}, x' ≠ x).

  Example:
    >>> dino_crops_graph(1, 2, 1).astype(int).tolist()
    [[0, 1], [1, 0], [1, 1]]
  """
  b = checks.check_positive_int(batch, "batch")
  g = checks.check_positive_int(num_global, "num_global")
  _check_nonnegative_int(num_local, "num_local")
  v = g + int(num_local)
  if v < 2:
    raise ValueError(f"num_global + num_local must be >= 2 (a crop never"
                     f" teaches itself), got {g} + {num_local}")
  student_N, teacher_M = np.arange(v * b), np.arange(g * b)
  keep_NxM = ((student_N[:, None] % b == teacher_M[None, :] % b)
              & (student_N[:, None] // b != teacher_M[None, :] // b))
  if not sparse:
    return jnp.asarray(keep_NxM, dtype=dtype)
  rows, cols = np.nonzero(keep_NxM)  # row-major order
  return jsparse.BCOO(
      (jnp.ones(rows.size, dtype),
       jnp.asarray(np.stack([rows, cols], axis=1).astype(np.int32))),
      shape=(v * b, g * b), indices_sorted=True, unique_indices=True)


@checks.float32_matmuls
def dino_graph(
    student: jax.typing.ArrayLike,
    teacher: jax.typing.ArrayLike,
    center: jax.typing.ArrayLike,
    g,
    *,
    student_temperature: float = 0.1,
    teacher_temperature: float = 0.04,
) -> jax.Array:
  """DINO cross-entropy over a student × teacher graph.

      loss = Σ_ij G_ij H(P_t,j, P_s,i) / Σ_ij G_ij,

  P_t,j = softmax((teacher_j − center)/τ_t) (stop-gradient), P_s,i =
  softmax(student_i/τ_s). On `dino_crops_graph(B, G, L)`, with
  student = s.reshape(V·B, K) and teacher = t.reshape(G·B, K) (view-major),
  it equals `dino(s, t, center)`: the original method's graph links every
  global crop to all other crops of its image.

  A dense g costs an (N, M)·(M, K) product; a BCOO g O(nnz·K) memory
  (padding entries, index >= the shape, are ignored).

  Args:
    student: (N, K) student logits, float32 or float64.
    teacher: (M, K) teacher logits.
    center: (K,) centre.
    g: (N, M) weights, dense (any real dtype) or 2-D BCOO, Σ G > 0.
    student_temperature, teacher_temperature: τ_s, τ_t > 0.

  Returns:
    0-d array in the promoted dtype of student and teacher.

  Raises:
    ValueError: if student or teacher is not (N, K) / (M, K) with the same
      K, center is not (K,), g is not (N, M) (or a BCOO with batch/dense
      dimensions), a temperature is not finite > 0, or (concrete only) an
      input has NaN/inf or Σ G <= 0.

  References:
    Caron et al. 2021, arXiv 2104.14294, eq. (3); graph view of SSL losses:
    Balestriero & LeCun 2022, arXiv 2205.11508, §2.

  Example:
    >>> s = jnp.array([[1., 0.], [0., 1.]])       # 2 crops of one image
    >>> t = jnp.array([[1., 0.], [0., 1.]])
    >>> g = dino_crops_graph(1, 2, 0)
    >>> round(float(dino_graph(s, t, jnp.zeros(2), g, teacher_temperature=1.0,
    ...                        student_temperature=1.0)), 4)
    1.0443
  """
  s_NxK, t_MxK = checks.as_float(student), checks.as_float(teacher)
  checks.check_matrix(s_NxK, "student")
  checks.check_matrix(t_MxK, "teacher")
  if s_NxK.shape[1] != t_MxK.shape[1]:
    raise ValueError(f"student and teacher must have the same K, got"
                     f" {s_NxK.shape} and {t_MxK.shape}")
  c_K = _check_center(center, s_NxK.shape[1])
  _check_temperatures(student_temperature, teacher_temperature)
  g = graphs.check_cross_graph(g, s_NxK.shape[0], t_MxK.shape[0],
                               what="student rows, teacher rows")
  return _dino_graph_core(s_NxK, t_MxK, c_K, g, student_temperature,
                          teacher_temperature)


@jax.jit
def _dino_graph_core(s_NxK, t_MxK, c_K, g, tau_s, tau_t):
  """−Σ_ik log P_s,ik (G P_t)_ik / Σ G, i.e. Σ_ij G_ij H(P_t,j, P_s,i) / Σ G."""
  dtype = jnp.result_type(s_NxK, t_MxK)
  log_ps_NxK, pt_MxK, _ = _probabilities(s_NxK, t_MxK, c_K, tau_s, tau_t,
                                         dtype)
  if graphs.is_bcoo(g):  # sum over the stored entries: O(nnz·K)
    rows_E, cols_E, w_E = graphs.edge_arrays(g)
    w_E = w_E.astype(dtype)
    gpt_NxK = jax.ops.segment_sum(w_E[:, None] * pt_MxK[cols_E], rows_E,
                                  num_segments=s_NxK.shape[0])
  else:
    w_E = g.astype(dtype)
    gpt_NxK = w_E @ pt_MxK
  return -jnp.sum(log_ps_NxK * gpt_NxK) / jnp.sum(w_E)
