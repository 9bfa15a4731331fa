"""The method protocol: what the train step and the evaluators ask of a method.

A method (`ssljax.methods.<name>`) is one object built from the run's config
by its module's ``Method(config)``. It owns its networks (composed from the
building blocks of `ssljax.models`), its trainable parameters, its
non-trainable state (BatchNorm statistics, an EMA teacher, a queue, a
centre) and its loss call. The generic train step (`ssljax.train`) calls

    params, state = method.init(key, batch_spec)
    loss, aux = method.loss(params, state, batch, key, schedule)   # grad
    state, metrics = method.after_update(aux.state, new_params, schedule)
    h = method.representation(params, state, images)               # evals

and nothing else; it never asks which method it runs.

The batch contract (``batch`` of ``loss``), a dict:

* ``"views"``: tuple of V float32 arrays (B, S_v, S_v, C) in [0, 1], the
  augmented views made on the devices from (seed, step); the G global
  crops first, then the L local crops; row i of every view is sample i;
* ``"labels"``: int32 (B,) labels the loss graph may read (−1: unknown),
  present only when the config's graph is built from labels;
* ``"edge_info"``: float32 (3, 2, B) per-row weights of a dataset-graph edge
  batch, present only for the VIC² edge estimate.

``schedule`` is {"step": int32 0-d (traced), "total_steps": int,
"steps_per_epoch": int}: what schedules (EMA momentum, temperatures) read.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import ml_collections

from ssljax import deprecation
from ssljax.methods import loss_config

__all__ = ["BatchSpec", "LossAux", "Method"]

# Helpers that lived here before the protocol was split from them.
__getattr__ = deprecation.moved_names(__name__, {
    **{name: f"ssljax.methods.single_network.{name}"
       for name in ("forward_views", "SingleNetworkMethod")},
    **{name: f"ssljax.methods.loss_config.{name}"
       for name in ("keyword_hparams", "loss_fields", "loss_key_problems",
                    "loss_hparams", "two_view_problem")},
    **{name: f"ssljax.methods.networks.{name}"
       for name in ("compute_dtype", "encoder_of", "head_kwargs",
                    "projector_network", "predictor_network")},
})


@dataclasses.dataclass(frozen=True)
class BatchSpec:
  """Shapes of a run's views: what ``Method.init`` sizes its networks by.

  Attributes:
    view_shape: (S, S, C) of the global views (the networks are initialised
      at this size; ViTs interpolate their position embeddings for others).
    num_global: G >= 1 global crops.
    num_local: L >= 0 local crops.
  """
  view_shape: tuple
  num_global: int = 2
  num_local: int = 0

  @property
  def num_views(self) -> int:
    """V = G + L."""
    return self.num_global + self.num_local


class LossAux(NamedTuple):
  """What ``Method.loss`` returns beside the scalar loss.

  Attributes:
    metrics: dict of scalar loss terms (float32 0-d), "loss" included.
    state: the method's new non-trainable state (BatchNorm statistics of this
      forward pass, an updated queue or centre); the EMA teacher moves in
      ``after_update``.
    representation: (B, D) representation h of the first global view from
      the training forward pass (train mode), under stop-gradient by its
      reader: the online probe trains on it at no extra forward pass.
  """
  metrics: dict
  state: Any
  representation: jax.Array


class Method:
  """Base class of the methods: the protocol and its defaults.

  Subclasses set ``name`` and ``FORMS`` (the loss forms they offer, the
  original paper's first) and implement ``init``, ``loss`` and
  ``representation``; ``after_update`` defaults to no change. Each also
  declares the config fields it reads (``config_fields``, a dict of dotted
  path -> rule of `ssljax.config_rules`; by default those of ``config.loss``)
  and cross-field checks (``check_config``), which
  `ssljax.config_validation` calls before any data is loaded.

  A method object is static in jit (hashable by identity): all arrays live
  in ``params`` and ``state``.

  Attributes:
    name: the method's name, ``config.method`` (its module's name).
    FORMS: {form name: loss callable}, ``config.loss.form`` picks one; the
      keyword-only parameters of the callable are the ``config.loss``
      hyper-parameters the form accepts (`hparam_signatures`).
    HPARAM_RULES: {hyper-parameter name: rule} of this method's
      ``config.loss`` fields (`ssljax.methods.loss_config.loss_fields` says
      what an unlisted one gets).
    config: the run's ConfigDict.
  """

  name: str = ""
  FORMS: dict = {}
  HPARAM_RULES: dict = {}

  def __init__(self, config: ml_collections.ConfigDict):
    self.config = config

  # ------------------------------------------------------------- config --
  @classmethod
  def hparam_signatures(cls) -> dict:
    """{form: callable whose keyword-only parameters are the form's
    ``config.loss`` hyper-parameters}: ``FORMS`` itself unless a method's
    hyper-parameters act outside its forms (DINO's temperature schedule)."""
    return cls.FORMS

  @classmethod
  def config_fields(cls, config: ml_collections.ConfigDict) -> dict:
    """Dotted path -> rule of every method-specific field this method reads
    (besides the common fields of every config): here ``loss.form`` and the
    chosen form's hyper-parameters; subclasses add their own. ``config`` is
    the run's config, for fields whose presence depends on others."""
    return loss_config.loss_fields(config, cls.hparam_signatures(),
                                   cls.HPARAM_RULES)

  @classmethod
  def check_config(cls, config: ml_collections.ConfigDict) -> list:
    """Cross-field problems, one line each (fields already pass their
    rules); empty when the config is usable. Here: a form the method does
    not offer, a ``config.loss`` key the form does not accept, and form
    "two_view" with other than 2 views; subclasses add their own."""
    problems = loss_config.loss_key_problems(config, cls.name,
                                             cls.hparam_signatures())
    if not problems and config.loss.form == "two_view":
      others = [f for f in cls.FORMS if f != "two_view"]
      problems = loss_config.two_view_problem(
          config, f"config.loss.form='two_view' of method {cls.name!r}"
          + (f" (use {others[0]!r} for more views)" if others else ""))
    return problems

  # ----------------------------------------------------------- protocol --
  def init(self, key: jax.Array, batch_spec: BatchSpec) -> tuple:
    """(params, state) at step 0.

    Args:
      key: PRNG key (parameters; e.g. NNCLR's initial queue).
      batch_spec: the shapes of the run's views.

    Returns:
      params: pytree of float32 trainable parameters of every network the
        method trains (the optimiser's input);
      state: pytree of everything else it carries between steps, with
        "batch_stats" (BatchNorm statistics of the trained networks) and,
        depending on the method, "teacher", "queue", "center".
    """
    raise NotImplementedError

  def loss(self, params, state, batch: dict, key: jax.Array,
           schedule: dict) -> tuple:
    """(scalar loss, `LossAux`) of one batch; differentiable in params.

    Args:
      params, state: as returned by ``init`` (or the last step).
      batch: the batch contract of this module's docstring.
      key: PRNG key of this step (methods that draw masks or directions).
      schedule: {"step", "total_steps", "steps_per_epoch"}.
    """
    raise NotImplementedError

  def after_update(self, state, params, schedule: dict) -> tuple:
    """(state, metrics) after the optimiser step, e.g. the EMA teacher.

    Args:
      state: the state ``loss`` returned.
      params: the parameters after the optimiser step.
      schedule: as in ``loss``.
    """
    del params, schedule
    return state, {}

  def representation(self, params, state, images: jax.Array) -> jax.Array:
    """h (B, D): what the evaluators probe (BatchNorm in inference mode).

    Args:
      images: float32 (B, S, S, C) in [0, 1].
    """
    raise NotImplementedError

  def encoder_variables(self, params, state) -> tuple:
    """(encoder, variables): the flax module that computes
    ``representation`` on its own, and its variables.

    ``encoder.apply(variables, images, train=False)`` equals
    ``representation(params, state, images)``; this is what
    `ssljax.pretrained` hands to users and `ssljax.export` writes.

    Returns:
      (a flax module of `ssljax.models.ENCODERS`, {"params": ...[,
      "batch_stats": ...]}: float32 pytrees, BatchNorm statistics only
      where the encoder has BatchNorm).
    """
    raise NotImplementedError

  def train_representation(self, params, state, images: jax.Array) -> tuple:
    """(h (B, D), new state): the representation in train mode (BatchNorm
    on batch statistics, its running statistics updated); what fine-tuning
    trains through (`ssljax.evaluators.fine_tune`)."""
    raise NotImplementedError

  def embedding(self, params, state, images: jax.Array) -> tuple:
    """(h (B, D), z (B, K)): the representation and the embedding the loss
    sees (projector or head output), BatchNorm in inference mode; the
    label-free metrics and the theory diagnostics read z."""
    raise NotImplementedError
