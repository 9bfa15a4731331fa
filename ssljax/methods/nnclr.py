"""NNCLR (Dwibedi et al. 2021, arXiv 2104.14548) as a method.

Network: encoder + projector + predictor
(`ssljax.models.EncoderProjectorPredictor`); state: a FIFO support queue
of ``config.loss.queue_size`` past projections (`ssljax.methods.queue`). Loss: the
positive of each view is the nearest neighbour of its projection in the
queue, contrasted against the other view's predictions (eq. (2),
Algorithm 1), symmetrised; then the first view's projections of the global
batch enter the queue. Forms: ``"two_view"`` (`losses.nnclr_two_view`) and
``"graph"``: InfoNCE on the 1-NN graph between the projections and the
queue (`losses.nnclr_graph`), equal to it.
"""

import jax

from ssljax import config_rules as rules, losses
from ssljax.methods import base, loss_config, student
from ssljax.methods import queue as support_queue

__all__ = ["Method"]


def _two_view(p_VxBxK, z_VxBxK, q_QxK, *, temperature: float = 0.1,
              queue_size: int = 65536):
  del queue_size  # sizes the queue at init
  return losses.nnclr_two_view(p_VxBxK[0], p_VxBxK[1], z_VxBxK[0],
                               z_VxBxK[1], q_QxK, temperature=temperature)


def _graph(p_VxBxK, z_VxBxK, q_QxK, *, temperature: float = 0.1,
           queue_size: int = 65536):
  del queue_size
  half = lambda p, z: losses.nnclr_graph(
      p, q_QxK, losses.support_knn_graph(z, q_QxK, 1, dtype=p.dtype),
      temperature=temperature)
  return 0.5 * half(p_VxBxK[1], z_VxBxK[0]) + 0.5 * half(p_VxBxK[0],
                                                          z_VxBxK[1])


class Method(student.PredictorMethod):
  """NNCLR: nearest neighbours from a support queue as positives."""

  name = "nnclr"
  FORMS = {"two_view": _two_view, "graph": _graph}
  HPARAM_RULES = {"temperature": rules.real(0.0, lo_open=True),
                  "queue_size": rules.integer(1)}

  def __init__(self, config):
    super().__init__(config)
    self.hparams = loss_config.loss_hparams(config)

  @classmethod
  def check_config(cls, config):
    problems = super().check_config(config)
    if not problems:
      problems = loss_config.two_view_problem(config, "method 'nnclr'")
    queue = config.loss.get("queue_size", 65536)
    if isinstance(queue, int) and queue < config.batch_size:
      problems.append(f"config.loss.queue_size={queue}: must be >= "
                      f"config.batch_size={config.batch_size} (each step "
                      "enqueues a whole batch)")
    return problems

  def init(self, key, batch_spec):
    params, state = super().init(key, batch_spec)
    queue = support_queue.queue_init(jax.random.fold_in(key, 1),
                                     self.hparams.get("queue_size", 65536),
                                     self.config.model.projector[-1])
    return params, {**state, "queue": queue}

  def loss(self, params, state, batch, key, schedule):
    del key, schedule
    outs, stats = self.forward(params, state["batch_stats"], batch["views"])
    p, z = student.stack(outs, "p"), student.stack(outs, "z")
    loss = self.FORMS[self.config.loss.form](p, z, state["queue"]["z"],
                                             **self.hparams)
    queue = support_queue.queue_push(state["queue"], z[0])
    return loss, base.LossAux({"loss": loss}, {**state, "batch_stats": stats,
                                               "queue": queue}, outs[0]["h"])
