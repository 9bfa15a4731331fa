"""Methods whose loss reads more than the projector outputs of the views.

BYOL, SimSiam, MoCo v3, DINO and NNCLR as the train step sees them. Each
loss form here is an adapter ``form(out, memory, schedule, **hparams) ->
(terms, memory)`` around the pure losses of `ssljax.losses`:

* ``out["p"]``: (V, B, K') predictor outputs of the V views (global crops
  first), or the projector outputs for a method without a predictor;
* ``out["z"]``: (V, B, K) projector (DINO: head) outputs of the V views;
* ``out["t"]``: (G, B, K) the momentum teacher's outputs on the G global
  views, or None for a method without a teacher;
* ``memory``: what the train state carries between steps for the method: a
  support queue {"z", "ptr"} (NNCLR) or a centre (K,) (DINO); the adapter
  returns its new value;
* ``schedule``: {"step", "total_steps", "steps_per_epoch"} (step traced).

The targets always come from the G global views, as in the papers'
multi-crop recipes: the G·B target rows are matched to every other view of
the same image by the crop graph `ssljax.losses.dino_crops_graph` (rows:
all V·B views, columns: the G·B global views, 1 where row and column are
different views of one image). With V = G = 2 that is the two-view graph
``graphs.views_graph(B, 2)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ssljax import losses, queue as support_queue

__all__ = ["init_memory", "FORMS", "NEEDS"]


def _flat(x_VxBxK):
  return x_VxBxK.reshape(-1, x_VxBxK.shape[-1])


def _graph_of(out, targets_GxBxK):
  num_views, batch, _ = out["p"].shape
  num_global = targets_GxBxK.shape[0]
  return losses.dino_crops_graph(batch, num_global, num_views - num_global,
                                 dtype=out["p"].dtype)


# --------------------------------------------------------------------- BYOL --
def byol_two_view(out, memory, schedule):
  """BYOL's symmetrised loss (Grill et al. 2020, arXiv 2006.07733, §3.1):
  each view's prediction against the teacher projection of the other view."""
  p, t = out["p"], out["t"]
  return {"loss": losses.byol_two_view(p[0], p[1], t[0], t[1])}, memory


def byol_graph(out, memory, schedule):
  """BYOL over the crop graph, times 2 so that V = G = 2 gives exactly
  `byol_two_view` (the symmetrised sum of two means)."""
  t = out["t"]
  loss = losses.byol_graph(_flat(out["p"]), _flat(t), _graph_of(out, t))
  return {"loss": 2.0 * loss}, memory


# ------------------------------------------------------------------ SimSiam --
def simsiam_two_view(out, memory, schedule):
  """SimSiam's symmetrised negative cosine (Chen & He 2021, arXiv
  2011.10566, eq. (2)); the targets are the online projections under
  stop-gradient (no teacher)."""
  p, z = out["p"], out["z"]
  return {"loss": losses.simsiam_two_view(p[0], p[1], z[0], z[1])}, memory


def simsiam_graph(out, memory, schedule):
  """SimSiam over the crop graph (targets: the global views' projections);
  equal to `simsiam_two_view` for V = G = 2."""
  num_global = out["num_global"]
  z = out["z"][:num_global]
  loss = losses.simsiam_graph(_flat(out["p"]), _flat(z), _graph_of(out, z))
  return {"loss": loss}, memory


# ------------------------------------------------------------------ MoCo v3 --
def mocov3_two_view(out, memory, schedule, *, temperature: float = 0.2):
  """MoCo v3 (Chen, Xie & He 2021, arXiv 2104.02057, Algorithm 1): queries
  of one view against the momentum keys of the other, InfoNCE over the
  global batch, ×2τ, symmetrised. τ = 0.2 is the paper's value."""
  p, t = out["p"], out["t"]
  return {"loss": losses.mocov3_two_view(p[0], p[1], t[0], t[1],
                                         temperature=temperature)}, memory


# --------------------------------------------------------------------- DINO --
def _dino_temperatures(schedule, teacher_temperature, warmup_teacher_temperature,
                       teacher_temperature_warmup_epochs):
  warmup = int(round(teacher_temperature_warmup_epochs
                     * schedule["steps_per_epoch"]))
  return losses.dino_teacher_temperature(
      schedule["step"], warmup, start=warmup_teacher_temperature,
      end=teacher_temperature)


def dino_multi_view(out, memory, schedule, *, student_temperature: float = 0.1,
                    teacher_temperature: float = 0.04,
                    warmup_teacher_temperature: float = 0.04,
                    teacher_temperature_warmup_epochs: float = 0.0,
                    center_momentum: float = 0.9):
  """DINO's loss over all crops (Caron et al. 2021, arXiv 2104.14294,
  eq. (3)), the teacher temperature warmed up linearly from
  ``warmup_teacher_temperature`` to ``teacher_temperature`` over
  ``teacher_temperature_warmup_epochs``, then the centre's EMA update."""
  tau_t = _dino_temperatures(schedule, teacher_temperature,
                             warmup_teacher_temperature,
                             teacher_temperature_warmup_epochs)
  terms = losses.dino_terms(out["z"], out["t"], memory["center"],
                            student_temperature=student_temperature,
                            teacher_temperature=tau_t)
  center = losses.dino_center_update(memory["center"], out["t"],
                                     momentum=center_momentum)
  return {**terms, "teacher_temperature": tau_t}, {**memory, "center": center}


def dino_graph(out, memory, schedule, *, student_temperature: float = 0.1,
               teacher_temperature: float = 0.04,
               warmup_teacher_temperature: float = 0.04,
               teacher_temperature_warmup_epochs: float = 0.0,
               center_momentum: float = 0.9):
  """DINO as Σ_ij G_ij H(P_t,j, P_s,i) / Σ G over the crop graph; equal to
  `dino_multi_view`."""
  tau_t = _dino_temperatures(schedule, teacher_temperature,
                             warmup_teacher_temperature,
                             teacher_temperature_warmup_epochs)
  t = out["t"]
  loss = losses.dino_graph(_flat(out["z"]), _flat(t), memory["center"],
                           _graph_of(out, t),
                           student_temperature=student_temperature,
                           teacher_temperature=tau_t)
  center = losses.dino_center_update(memory["center"], t,
                                     momentum=center_momentum)
  return ({"loss": loss, "teacher_temperature": tau_t},
          {**memory, "center": center})


# -------------------------------------------------------------------- NNCLR --
def nnclr_two_view(out, memory, schedule, *, temperature: float = 0.1,
                   queue_size: int = 65536):
  """NNCLR (Dwibedi et al. 2021, arXiv 2104.14548, eq. (2)): the positive of
  each view is the nearest neighbour of its projection in the support queue;
  then the first view's projections of the global batch enter the queue."""
  del queue_size  # sets the queue's size at initialisation
  p, z, q = out["p"], out["z"], memory["queue"]
  loss = losses.nnclr_two_view(p[0], p[1], z[0], z[1], q["z"],
                               temperature=temperature)
  return {"loss": loss}, {**memory,
                          "queue": support_queue.queue_push(q, z[0])}


def nnclr_graph(out, memory, schedule, *, temperature: float = 0.1,
                queue_size: int = 65536):
  """NNCLR as InfoNCE on the 1-NN graph between each view's projections and
  the support queue (`ssljax.losses.nnclr_graph`), symmetrised; equal to
  `nnclr_two_view`."""
  del queue_size
  p, z, q = out["p"], out["z"], memory["queue"]
  half = lambda p_, z_: losses.nnclr_graph(
      p_, q["z"], losses.support_knn_graph(z_, q["z"], 1, dtype=p.dtype),
      temperature=temperature)
  loss = 0.5 * half(p[1], z[0]) + 0.5 * half(p[0], z[1])
  return {"loss": loss}, {**memory,
                          "queue": support_queue.queue_push(q, z[0])}


# A method's forms, and what its train state holds.
FORMS = {
    "byol": {"two_view": byol_two_view, "graph": byol_graph},
    "simsiam": {"two_view": simsiam_two_view, "graph": simsiam_graph},
    "mocov3": {"two_view": mocov3_two_view},
    "dino": {"multi_view": dino_multi_view, "graph": dino_graph},
    "nnclr": {"two_view": nnclr_two_view, "graph": nnclr_graph},
}
NEEDS = {  # predictor head, momentum teacher, support queue, centre
    "byol": dict(predictor=True, teacher=True, queue=False, center=False),
    "simsiam": dict(predictor=True, teacher=False, queue=False, center=False),
    "mocov3": dict(predictor=True, teacher=True, queue=False, center=False),
    "dino": dict(predictor=False, teacher=True, queue=False, center=True),
    "nnclr": dict(predictor=True, teacher=False, queue=True, center=False),
}


def init_memory(method: str, key: jax.Array, dim: int, *,
                queue_size: int = 65536, **unused) -> dict:
  """The method's memory at step 0: {} or {"queue": ...} / {"center": ...}.

  Args:
    method: a key of FORMS.
    key: PRNG key (the queue starts with random unit rows).
    dim: width K of the projector / head outputs.
    queue_size: rows Q of the NNCLR support queue.

  Raises:
    ValueError: an unknown method.
  """
  del unused
  if method not in NEEDS:
    raise ValueError(f"unknown predictive method {method!r}; expected one of "
                     f"{sorted(NEEDS)}")
  memory = {}
  if NEEDS[method]["queue"]:
    memory["queue"] = support_queue.queue_init(key, queue_size, dim)
  if NEEDS[method]["center"]:
    memory["center"] = jnp.zeros((dim,), jnp.float32)
  return memory
