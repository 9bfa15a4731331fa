"""Flax models: encoders chosen by name, projector heads.

Encoders map images (B, H, W, C) to representations (B, D); all take
``train`` (BatchNorm mode; unused by the ViTs) and ``dtype`` (computation
dtype, parameters stay float32). ``ENCODERS`` names them for configs:

- ``"mlp"``, ``"cnn"``: small encoders of ``ssljax.models.encoders``;
- ``"resnet18"`` (CIFAR stem by default, D = 512) and ``"resnet50"``
  (ImageNet stem by default, D = 2048) of ``ssljax.models.resnet``; pass
  ``stem="cifar"`` or ``stem="imagenet"`` in ``encoder_kwargs`` to change it;
- ``"vit_tiny16"`` (D = 192) and ``"vit_small16"`` (D = 384) of
  ``ssljax.models.vit``; position embeddings are sized at init and
  interpolated for other resolutions (multi-crop).

The projector (``ssljax.models.heads``) returns float32 embeddings even in
bf16 runs.
"""

import jax.numpy as jnp

from ssljax.models.dino_head import DINOHead
from ssljax.models.encoders import MLPEncoder, SmallCNN
from ssljax.models.heads import Projector, SSLNetwork
from ssljax.models.resnet import ResNet, ResNet18, ResNet50
from ssljax.models.vit import (VisionTransformer, ViTSmall16, ViTTiny16,
                               interpolate_pos_embed)

__all__ = ["MLPEncoder", "SmallCNN", "ResNet", "ResNet18", "ResNet50",
           "VisionTransformer", "ViTTiny16", "ViTSmall16",
           "interpolate_pos_embed", "Projector", "SSLNetwork", "ENCODERS",
           "HEADS", "make_network", "DINOHead"]

ENCODERS = {"mlp": MLPEncoder, "cnn": SmallCNN, "resnet18": ResNet18,
            "resnet50": ResNet50, "vit_tiny16": ViTTiny16,
            "vit_small16": ViTSmall16}


HEADS = ("projector", "dino")


def make_network(encoder_name: str, encoder_kwargs: dict,
                 projector_features, dtype=jnp.float32, *,
                 predictor_features=(), head: str = "projector",
                 head_kwargs: dict | None = None) -> SSLNetwork:
  """Builds encoder + head (+ predictor) from names and keyword arguments.

  Args:
    encoder_name: one of ``ENCODERS`` ("mlp", "cnn", "resnet18", "resnet50",
      "vit_tiny16", "vit_small16").
    encoder_kwargs: attributes of that encoder class (e.g. ``channels``,
      ``stem``).
    projector_features: widths of the projector layers; the last is K
      (head "projector").
    dtype: computation dtype of every part (jnp.float32 or jnp.bfloat16).
    predictor_features: widths of the predictor MLP on z (same layer form
      as the projector: Dense-BN-ReLU, last Dense); empty: no predictor.
    head: "projector" (`Projector`) or "dino" (`DINOHead`, ``head_kwargs``
      its attributes; ``projector_features`` unused).
    head_kwargs: attributes of the DINO head.

  Raises:
    ValueError: unknown encoder or head name.
  """
  if encoder_name not in ENCODERS:
    raise ValueError(
        f"unknown encoder {encoder_name!r}; expected one of {sorted(ENCODERS)}")
  if head not in HEADS:
    raise ValueError(f"unknown head {head!r}; expected one of {HEADS}")
  encoder = ENCODERS[encoder_name](dtype=dtype, **encoder_kwargs)
  if head == "dino":
    projector = DINOHead(dtype=dtype, **(head_kwargs or {}))
  else:
    projector = Projector(tuple(projector_features), dtype=dtype)
  predictor = (Projector(tuple(predictor_features), dtype=dtype)
               if len(predictor_features) else None)
  return SSLNetwork(encoder, projector, predictor)
