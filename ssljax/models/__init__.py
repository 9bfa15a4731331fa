"""Flax models: encoders chosen by name, projector heads."""

import jax.numpy as jnp

from ssljax.models.encoders import MLPEncoder, ResNet18, SmallCNN
from ssljax.models.heads import Projector, SSLNetwork

__all__ = ["MLPEncoder", "SmallCNN", "ResNet18", "Projector", "SSLNetwork",
           "ENCODERS", "make_network"]

ENCODERS = {"mlp": MLPEncoder, "cnn": SmallCNN, "resnet18": ResNet18}


def make_network(encoder_name: str, encoder_kwargs: dict,
                 projector_features, dtype=jnp.float32) -> SSLNetwork:
  """Builds encoder + projector from names and keyword arguments.

  Args:
    encoder_name: one of ``ENCODERS`` ("mlp", "cnn", "resnet18").
    encoder_kwargs: attributes of that encoder class (e.g. ``channels``).
    projector_features: widths of the projector layers; the last is K.
    dtype: computation dtype of both parts (jnp.float32 or jnp.bfloat16).

  Raises:
    ValueError: unknown encoder name.
  """
  if encoder_name not in ENCODERS:
    raise ValueError(
        f"unknown encoder {encoder_name!r}; expected one of {sorted(ENCODERS)}")
  encoder = ENCODERS[encoder_name](dtype=dtype, **encoder_kwargs)
  return SSLNetwork(encoder, Projector(tuple(projector_features), dtype=dtype))
