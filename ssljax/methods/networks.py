"""The networks of a method from ``config.model``: the encoder, the projector
and the predictor, in the compute dtype of the run.

Methods compose the building blocks of `ssljax.models`; these builders read
the fields every method shares (``model.encoder``, ``model.encoder_kwargs``,
``model.projector``, ``model.predictor``, ``model.projector_kwargs``,
``model.dtype``).
"""

import jax.numpy as jnp

from ssljax import models

__all__ = ["compute_dtype", "encoder_of", "head_kwargs", "projector_network",
           "predictor_network"]


def compute_dtype(config):
  """jnp dtype of ``config.model.dtype``: "float32" or "bfloat16" (the
  runs' choices), or "float64" (exactness tests under ``jax_enable_x64``;
  not accepted by the run's config validation).

  Raises:
    KeyError: another name.
  """
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
