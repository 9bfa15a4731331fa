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
import difflib
import inspect
import itertools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections

from ssljax import config_rules, models

__all__ = ["BatchSpec", "LossAux", "Method", "SingleNetworkMethod",
           "forward_views", "projector_network", "predictor_network",
           "two_view_problem", "loss_fields", "loss_key_problems", "loss_hparams",
           "encoder_of", "head_kwargs", "compute_dtype", "keyword_hparams"]


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


def forward_views(apply, variables_of, state_stats, views, *, train=True):
  """The views through one network, threading BatchNorm statistics.

  With BatchNorm in batch-statistics mode (``train`` and statistics in
  ``state_stats``), each view goes through the network on its own, so
  BatchNorm normalises per view, as in the official VICReg/BYOL code (global
  and local crops differ in size). Without it (a ViT with LayerNorm, or
  ``train=False``) samples do not interact, and consecutive views of one
  shape go through the network as one batch of n·B rows (as DINO's
  multi-crop wrapper does with the crops of one resolution): the same
  outputs, one copy of the network in the compiled step instead of n (the
  DINO ViT-S/16 step with 2 + 6 crops had 2,024 matrix products), and
  larger products for the accelerator. The views are interleaved sample by
  sample, so a batch sharded over devices stays where it is.

  Args:
    apply: ``apply(variables, x, train=..., mutable=...)`` of a flax module
      returning a dict of outputs, each (rows, ...).
    variables_of: ``variables_of(batch_stats) -> variables`` dict for apply.
    state_stats: BatchNorm statistics before the first view ({} or a tree
      without leaves: the network has none).
    views: sequence of V arrays (B, S_v, S_v, C).
    train: BatchNorm in batch-statistics mode (and statistics updated).

  Returns:
    (list of V output dicts, BatchNorm statistics after the last view).

  Raises:
    ValueError: an output of a grouped forward pass without one row per
      input row.
  """
  if train and jax.tree.leaves(state_stats):
    outs = []
    for x in views:  # V is static: unrolled
      out, updates = apply(variables_of(state_stats), x, train=True,
                           mutable=["batch_stats"])
      state_stats = updates.get("batch_stats", state_stats)
      outs.append(out)
    return outs, state_stats
  outs = []
  for _, group in itertools.groupby(views, key=lambda x: x.shape):
    group = list(group)
    n, b = len(group), group[0].shape[0]
    x = group[0] if n == 1 else jnp.stack(group, axis=1).reshape(
        n * b, *group[0].shape[1:])  # rows (sample, view)
    if train:
      out, _ = apply(variables_of(state_stats), x, train=True,
                     mutable=["batch_stats"])
    else:
      out = apply(variables_of(state_stats), x, train=False)
    if n == 1:
      outs.append(out)
      continue

    def per_view(a, n=n, b=b):
      if a.shape[:1] != (n * b,):
        raise ValueError(f"an output of shape {a.shape} of {n} views of "
                         f"{b} rows: expected {n * b} rows")
      return a.reshape(b, n, *a.shape[1:])

    stacked = jax.tree.map(per_view, out)
    outs += [jax.tree.map(lambda a, i=i: a[:, i], stacked) for i in range(n)]
  return outs, state_stats


class Method:
  """Base class of the methods: the protocol and its defaults.

  Subclasses set ``name``, ``forms`` (the loss forms they offer, first =
  the original paper's) and implement ``init``, ``loss`` and
  ``representation``; ``after_update`` defaults to no change. Each also
  declares the config fields it reads (``config_fields``, a dict of dotted
  path -> rule of `ssljax.config_rules`) and cross-field checks
  (``check_config``), which `ssljax.config_validation` calls before any data
  is loaded.

  A method object is static in jit (hashable by identity): all arrays live
  in ``params`` and ``state``.

  Attributes:
    config: the run's ConfigDict.
  """

  name: str = ""
  forms: tuple = ()

  def __init__(self, config: ml_collections.ConfigDict):
    self.config = config

  # ------------------------------------------------------------- config --
  @classmethod
  def config_fields(cls, config: ml_collections.ConfigDict) -> dict:
    """Dotted path -> rule of every method-specific field this method reads
    (besides the common fields of every config). ``config`` is the run's
    config, for fields whose presence depends on others."""
    del config
    return {}

  @classmethod
  def check_config(cls, config: ml_collections.ConfigDict) -> list:
    """Cross-field problems, one line each (fields already pass their
    rules); empty when the config is usable."""
    form = config.loss.form
    if form not in cls.forms:
      return [f"config.loss.form={form!r}: method {cls.name!r} offers "
              f"{', '.join(map(repr, cls.forms))}"]
    return []

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


# ------------------------------------------------------------------ helpers --
# Loss hyper-parameters by name (the keywords of ssljax.losses), their rules.
_LOSS_RULES = {
    "temperature": config_rules.real(0.0, lo_open=True),
    "eps": config_rules.real(0.0),
    "lambda_offdiag": config_rules.real(0.0),
    "whitening_size": config_rules.integer(2),
    "block_size": config_rules.integer(1, none_ok=True),
    "student_temperature": config_rules.real(0.0, lo_open=True),
    "teacher_temperature": config_rules.real(0.0, lo_open=True),
    "warmup_teacher_temperature": config_rules.real(0.0, lo_open=True),
    "teacher_temperature_warmup_epochs": config_rules.real(0.0),
    "center_momentum": config_rules.real(0.0, 1.0),
    "queue_size": config_rules.integer(1),
}


def keyword_hparams(fn) -> set:
  """Names of the keyword-only parameters of a loss form (its
  hyper-parameters)."""
  sig = inspect.signature(inspect.unwrap(fn))
  return {n for n, p in sig.parameters.items() if p.kind == p.KEYWORD_ONLY}


def loss_fields(config, forms: dict) -> dict:
  """Rules of ``loss.form`` and of the ``loss.*`` hyper-parameters the chosen
  form accepts (those present in the config); a weight is a real >= 0."""
  fields = {"loss.form": config_rules.one_of(*forms)}
  fn = forms.get(config.loss.get("form"))
  accepted = keyword_hparams(fn) if fn is not None else set()
  for key in config.loss.keys():
    if key in accepted:
      rule = _LOSS_RULES.get(key) or (config_rules.real(0.0)
                                      if key.endswith("weight") else
                                      config_rules.anything)
      fields[f"loss.{key}"] = rule
  return fields


def loss_key_problems(config, name: str, forms: dict) -> list:
  """One line per ``config.loss`` key the chosen form does not accept."""
  form = config.loss.form
  if form not in forms:
    return [f"config.loss.form={form!r}: method {name!r} offers "
            f"{', '.join(map(repr, forms))}"]
  accepted = keyword_hparams(forms[form])
  problems = []
  for key in config.loss.keys():
    if key != "form" and key not in accepted:
      near = difflib.get_close_matches(key, sorted(accepted), n=2, cutoff=0.6)
      hint = (f"; did you mean "
              f"{' or '.join(repr('config.loss.' + m) for m in near)}?"
              if near else "")
      problems.append(
          f"config.loss.{key} is not a hyper-parameter of method {name!r} "
          f"(form {form!r}); it accepts "
          f"{', '.join(sorted(accepted)) or 'none'}{hint}")
  return problems


def loss_hparams(config) -> dict:
  """``config.loss`` without "form", as keyword arguments."""
  return {k: v for k, v in config.loss.to_dict().items() if k != "form"}


def compute_dtype(config):
  """jnp dtype of ``config.model.dtype``: "float32" or "bfloat16" (the
  runs' choices), or "float64" (exactness tests under ``jax_enable_x64``;
  not accepted by the run's config validation)."""
  return {"float32": jnp.float32, "bfloat16": jnp.bfloat16,
          "float64": jnp.float64}[config.model.dtype]


def encoder_of(config):
  """The encoder of ``config.model`` (`ssljax.models.make_encoder`)."""
  return models.make_encoder(config.model.encoder,
                             config.model.encoder_kwargs.to_dict(),
                             compute_dtype(config))


def head_kwargs(config) -> dict:
  """Attributes of the projector/predictor MLPs besides their widths
  (``weight_init``, ``bn_momentum``, ``bn_epsilon`` of
  `ssljax.models.Projector`): ``config.model.projector_kwargs``, {} when the
  config has none."""
  kwargs = config.model.get("projector_kwargs", None)
  return kwargs.to_dict() if kwargs is not None else {}


def projector_network(config):
  """`ssljax.models.EncoderProjector` of ``config.model``: the encoder and
  the projector MLP of widths ``model.projector``."""
  dtype = compute_dtype(config)
  return models.EncoderProjector(
      encoder_of(config),
      models.Projector(tuple(config.model.projector), dtype=dtype,
                       **head_kwargs(config)))


def predictor_network(config):
  """`ssljax.models.EncoderProjectorPredictor` of ``config.model``: the
  predictor has the projector's layer form (Dense-BN-ReLU, last Dense)."""
  dtype = compute_dtype(config)
  return models.EncoderProjectorPredictor(
      encoder_of(config),
      models.Projector(tuple(config.model.projector), dtype=dtype,
                       **head_kwargs(config)),
      models.Projector(tuple(config.model.predictor), dtype=dtype,
                       **head_kwargs(config)))


def two_view_problem(config, what: str) -> list:
  """[one line] when ``what`` (e.g. "method 'mocov3'") needs V = 2 views and
  the config has another count, else []."""
  num_views = config.views.num_global + config.views.num_local
  if num_views == 2:
    return []
  return [f"{what} needs 2 views (views.num_global + views.num_local), got "
          f"{num_views}"]


class SingleNetworkMethod(Method):
  """A method whose trained parameters are one network (``self.network``,
  a `ssljax.models.EncoderProjector` or `EncoderProjectorPredictor`):
  ``init``, ``representation`` and ``embedding`` from it; ``forward``
  passes views through it in train mode."""

  network: Any = None

  def init(self, key, batch_spec):
    x = jnp.zeros((2, *batch_spec.view_shape), jnp.float32)
    variables = self.network.init(key, x, train=False)
    return variables["params"], {"batch_stats":
                                 variables.get("batch_stats", {})}

  def forward(self, params, batch_stats, views):
    """(list of V output dicts, new batch_stats), train mode, per view."""
    return forward_views(
        self.network.apply,
        lambda stats: {"params": params, "batch_stats": stats},
        batch_stats, views)

  def representation(self, params, state, images):
    return self.network.apply(
        {"params": params, "batch_stats": state["batch_stats"]}, images,
        train=False, method=self.network.represent)

  def train_representation(self, params, state, images):
    h, updates = self.network.apply(
        {"params": params, "batch_stats": state["batch_stats"]}, images,
        train=True, mutable=["batch_stats"], method=self.network.represent)
    return h, {**state, "batch_stats": {**state["batch_stats"],
                                        **updates.get("batch_stats", {})}}

  def embedding(self, params, state, images):
    out = self.network.apply(
        {"params": params, "batch_stats": state["batch_stats"]}, images,
        train=False)
    return out["h"], out["z"]
