"""The networks of a method from ``config.model``: the encoder, the projector
and the predictor, in the compute dtype of the run.

Methods compose the building blocks of `ssljax.models`; these builders read
the fields every method shares (``model.encoder``, ``model.encoder_kwargs``,
``model.projector``, ``model.predictor``, ``model.projector_kwargs``,
``model.dtype``).
"""

import jax.numpy as jnp

from ssljax import models

__all__ = ["compute_dtype", "encoder_of", "head_kwargs", "HEAD_FORM_FIELDS",
           "projector_network", "predictor_network"]

# Optional fields of the heads' last layer (absent: a biased last Dense, no
# BatchNorm after it). MoCo v3's heads (Chen, Xie & He 2021, arXiv
# 2104.02057, official moco/builder.py ``_build_mlp``): no bias in any
# Linear, the projector ends with BatchNorm1d(affine=False), and so does the
# predictor of its ViT recipe (not of its ResNet recipe).
HEAD_FORM_FIELDS = {"model.head_last_bias": True,
                    "model.projector_last_bn": False,
                    "model.predictor_last_bn": False}


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


def _last_layer(config, part: str) -> dict:
  """``last_bias``, ``last_bn`` of the ``part`` ("projector" | "predictor")
  MLP from the optional HEAD_FORM_FIELDS; {} (the Projector's defaults)
  when the config sets none of them, so that such configs build the same
  modules as before."""
  model = config.model
  out = {}
  if "head_last_bias" in model:
    out["last_bias"] = bool(model.head_last_bias)
  if f"{part}_last_bn" in model:
    out["last_bn"] = bool(model[f"{part}_last_bn"])
  return out


def projector_network(config):
  """`ssljax.models.EncoderProjector` of ``config.model``: the encoder and
  the projector MLP of widths ``model.projector``."""
  dtype = compute_dtype(config)
  return models.EncoderProjector(
      encoder_of(config),
      models.Projector(tuple(config.model.projector), dtype=dtype,
                       **head_kwargs(config),
                       **_last_layer(config, "projector")))


def predictor_network(config):
  """`ssljax.models.EncoderProjectorPredictor` of ``config.model``: the
  predictor has the projector's layer form (Dense-BN-ReLU, last Dense; the
  last layer's bias and BatchNorm as HEAD_FORM_FIELDS say)."""
  dtype = compute_dtype(config)
  return models.EncoderProjectorPredictor(
      encoder_of(config),
      models.Projector(tuple(config.model.projector), dtype=dtype,
                       **head_kwargs(config),
                       **_last_layer(config, "projector")),
      models.Projector(tuple(config.model.predictor), dtype=dtype,
                       **head_kwargs(config),
                       **_last_layer(config, "predictor")))
