"""SwAV (Caron et al. 2020, arXiv 2006.09882) as a method.

Network: encoder, projector MLP (``config.model.projector``, its last width
the feature dimension), L2 normalisation, and K prototypes: a bias-free
Dense layer named ``last_layer`` (``config.model.num_prototypes``) whose
columns are kept at unit norm (at init, then after every optimiser step:
``optim.normalize_last_layer``, `ssljax.optimizers.unit_columns_after`), as
the official code renormalises them at the start of each iteration. The
prototypes do not move during ``optim.freeze_last_layer_epochs`` (official
``freeze_prototypes_niters``, about one epoch).

Loss: `ssljax.losses.swav` on the (V, B, K) prototype scores of all crops:
codes by Sinkhorn-Knopp on the crops of ``crops_for_assign`` under
stop-gradient, predicted by every other crop. Optional queue
(``queue_length`` > 0): from epoch ``epoch_queue_starts`` the normalised
embeddings of the assigned crops are pushed, newest first, into a FIFO of
``queue_length`` rows per assigned crop; once it is full (the official test:
its last row is not zero) its scores against the current prototypes join the
Sinkhorn batch. State: the queue and the number of rows pushed.

BatchNorm (``config.swav.batch_norm_views``): "multi_crop" is the official
forward (`ssljax.methods.single_network.forward_multi_crop`): the encoder
takes the crops of one resolution as one batch, the projector all crops as
one batch, as facebookresearch/swav's ``ResNet.forward``; "per_view" (the
default when the field is absent, as solo-learn's SwAV) normalises each view
on its own (`ssljax.methods.single_network.forward_views`).
``configs/swav.py`` sets "multi_crop"; its whole step (prototype
normalisation, forward, codes, loss, the prototypes' freeze, AdamW) equals
the official ``main_swav.train`` given the same optimiser
(``benchmarks/step_parity.py --method swav``). The official optimiser is
SGD with apex's LARC (adaptive rate η‖w‖ / (‖g‖ + λ‖w‖), on every
parameter), which ssljax does not have: its LARS masks weight decay and
trust ratios to kernels.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from ssljax import config_rules as rules, losses, models
from ssljax.methods import base, loss_config, networks, single_network, student

__all__ = ["Method"]


class _Network(nn.Module):
  """images -> {"h": (B, D), "e": (B, F) unit rows, "z": (B, K) scores}."""
  encoder: nn.Module
  projector: nn.Module
  num_prototypes: int
  dtype: jnp.dtype = jnp.float32

  def setup(self):
    # Scores in float32 at least: Sinkhorn-Knopp divides them by ε = 0.05.
    self.last_layer = nn.Dense(
        self.num_prototypes, use_bias=False,
        dtype=jnp.promote_types(self.dtype, jnp.float32))

  def __call__(self, x, train: bool = True) -> dict:
    h = self.encoder(x, train=train)
    return {"h": h, **self.head(h, train=train)}

  def head(self, h, train: bool = True) -> dict:
    """Representations h (N, D) -> {"e": (N, F) unit rows, "z": (N, K)
    prototype scores}: projector, L2 normalisation, prototypes."""
    f = self.projector(h, train=train)
    f = f.astype(jnp.promote_types(f.dtype, jnp.float32))  # bf16 -> f32
    e = f / jnp.maximum(jnp.linalg.norm(f, axis=-1, keepdims=True), 1e-12)
    z = self.last_layer(e)
    return {"e": e, "z": z.astype(e.dtype)}

  def represent(self, x, train: bool = False):
    """The encoder output h (B, D) alone."""
    return self.encoder(x, train=train)


def _multi_crop(scores_VxBxK, queue_scores, *, temperature: float = 0.1,
                epsilon: float = 0.05, num_iterations: int = 3,
                crops_for_assign: tuple = (0, 1), queue_length: int = 0,
                epoch_queue_starts: float = 15.0):
  """`losses.swav` on the scores (queue scores None: no queue)."""
  del queue_length, epoch_queue_starts  # the queue's size and start
  return losses.swav(scores_VxBxK, temperature=temperature, epsilon=epsilon,
                     num_iterations=num_iterations,
                     crops_for_assign=tuple(crops_for_assign),
                     queue=queue_scores)


def _unit_columns(kernel):
  return kernel / jnp.maximum(
      jnp.sqrt(jnp.sum(kernel * kernel, axis=0, keepdims=True)), 1e-12)


# Read where present; absent, "per_view" (the solo-learn recipes' forward),
# "advance" (optax's one Adam count) and "kernels" (decay on kernels only;
# "all": every parameter, as the official SGD and LARC, or AdamW, decay).
OPTIONAL_FIELDS = {
    "swav.batch_norm_views": rules.one_of(*single_network.BATCH_NORM_VIEWS),
    "optim.frozen_adam_count": rules.one_of("advance", "hold"),
    "optim.weight_decay_mask": rules.one_of("kernels", "all")}


class Method(single_network.SingleNetworkMethod):
  """SwAV: swapped prediction of Sinkhorn-Knopp cluster codes."""

  name = "swav"
  FORMS = {"multi_crop": _multi_crop}
  HPARAM_RULES = {
      "temperature": rules.real(0.0, lo_open=True),
      "epsilon": rules.real(0.0, lo_open=True),
      "num_iterations": rules.integer(1),
      "crops_for_assign": rules.anything,
      "queue_length": rules.integer(0),
      "epoch_queue_starts": rules.real(0.0),
  }

  def __init__(self, config):
    super().__init__(config)
    dtype = networks.compute_dtype(config)
    self.network = _Network(
        networks.encoder_of(config),
        models.Projector(tuple(config.model.projector), dtype=dtype,
                         **networks.head_kwargs(config)),
        config.model.num_prototypes, dtype=dtype)
    self.hparams = loss_config.loss_hparams(config)
    self.multi_crop = single_network.uses_multi_crop(config, "swav")

  @classmethod
  def config_fields(cls, config):
    return {**rules.where_set(config, OPTIONAL_FIELDS),
            "model.projector": rules.nonempty_widths,
            "model.num_prototypes": rules.integer(1),
            "optim.freeze_last_layer_epochs": rules.real(0.0),
            "optim.normalize_last_layer": rules.boolean,
            **super().config_fields(config)}

  @classmethod
  def check_config(cls, config):
    problems = super().check_config(config)
    if problems:
      return problems
    num_views = config.views.num_global + config.views.num_local
    assign = config.loss.get("crops_for_assign", (0, 1))
    if (not isinstance(assign, (tuple, list)) or not assign
        or len(set(assign)) != len(assign)
        or not all(isinstance(c, int) and not isinstance(c, bool)
                   and 0 <= c < num_views for c in assign)):
      problems.append(f"config.loss.crops_for_assign={assign!r}: must be"
                      f" distinct view indices in [0, {num_views})")
    queue = config.loss.get("queue_length", 0)
    if queue % config.batch_size:
      problems.append(f"config.loss.queue_length={queue}: must be a multiple"
                      f" of config.batch_size={config.batch_size} (the"
                      " official code rounds it down to one)")
    if not config.optim.get("normalize_last_layer", False):
      problems.append("config.optim.normalize_last_layer must be True for"
                      " method 'swav' (unit-norm prototypes)")
    return problems

  def init(self, key, batch_spec):
    params, state = super().init(key, batch_spec)
    params = {**params, "last_layer": {
        "kernel": _unit_columns(params["last_layer"]["kernel"])}}
    length = self.hparams.get("queue_length", 0)
    if length:
      num_assign = len(self.hparams.get("crops_for_assign", (0, 1)))
      state = {**state,
               # float32 (float64 under jax_enable_x64)
               "queue": jnp.zeros((num_assign, length,
                                   self.config.model.projector[-1]),
                                  jax.dtypes.canonicalize_dtype(
                                      jnp.float64)),
               "queue_rows": jnp.zeros((), jnp.int32)}
    return params, state

  def loss(self, params, state, batch, key, schedule):
    del key
    outs, stats = self.forward(params, state["batch_stats"], batch["views"])
    scores = student.stack(outs, "z")
    form = self.FORMS[self.config.loss.form]
    new = {**state, "batch_stats": stats}
    if "queue" not in state:
      loss = form(scores, None, **self.hparams)
      return loss, base.LossAux({"loss": loss}, new, outs[0]["h"])
    queue_AxQxF, rows = state["queue"], state["queue_rows"]
    length, b = queue_AxQxF.shape[1], scores.shape[1]
    start = jnp.round(self.hparams.get("epoch_queue_starts", 15.0)
                      * schedule["steps_per_epoch"]).astype(jnp.int32)
    started = schedule["step"] >= start
    use = started & (rows >= length)
    kernel = jax.lax.stop_gradient(params["last_layer"]["kernel"])
    queue_scores = jnp.einsum("aqf,fk->aqk", queue_AxQxF,
                              kernel.astype(queue_AxQxF.dtype))
    loss = jnp.where(use, form(scores, queue_scores, **self.hparams),
                     form(scores, None, **self.hparams))
    assign = tuple(self.hparams.get("crops_for_assign", (0, 1)))
    embeddings = jax.lax.stop_gradient(student.stack(outs, "e"))
    pushed = jnp.stack([
        jnp.concatenate([embeddings[c].astype(queue_AxQxF.dtype),
                         queue_AxQxF[i]])[:length]
        for i, c in enumerate(assign)])
    new["queue"] = jnp.where(started, pushed, queue_AxQxF)
    new["queue_rows"] = jnp.where(started, jnp.minimum(rows + b, length),
                                  rows)
    return loss, base.LossAux(
        {"loss": loss, "queue_in_use": use.astype(jnp.float32)}, new,
        outs[0]["h"])
