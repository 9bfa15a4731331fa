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
  interpolated for other resolutions (multi-crop). ``encoder_kwargs``
  ``representation`` picks what they return ("cls", "avg_tokens",
  "cls_last2", "cls_last4", "cls_last4_avg";
  `ssljax.models.vit.VisionTransformer`).

Masked-token methods: `patchify`/`unpatchify` (MAE's patch order),
I-JEPA's `JEPAPredictor` and MAE's `MAEDecoder` (`ssljax.models.masked`).

Heads: the projector/predictor MLP (``ssljax.models.heads.Projector``) and
the DINO head (``DINOHead``) return float32 embeddings even in bf16 runs.
The methods (`ssljax.methods`) compose encoder and heads with
``EncoderProjector`` or ``EncoderProjectorPredictor``.
"""

import jax.numpy as jnp

from ssljax.models.dino_head import DINOHead
from ssljax.models.encoders import MLPEncoder, SmallCNN
from ssljax.models.heads import Projector
from ssljax.models.networks import EncoderProjector, EncoderProjectorPredictor
from ssljax.models.resnet import ResNet, ResNet18, ResNet50
from ssljax.models.masked import (IJEPANetwork, JEPAPredictor, MAEDecoder,
                                  MAENetwork, patchify, unpatchify)
from ssljax.models.vit import (REPRESENTATIONS, VisionTransformer, ViTSmall16,
                               ViTTiny16, interpolate_pos_embed,
                               sincos_pos_embed_2d)

__all__ = ["MLPEncoder", "SmallCNN", "ResNet", "ResNet18", "ResNet50",
           "VisionTransformer", "ViTTiny16", "ViTSmall16",
           "interpolate_pos_embed", "Projector", "ENCODERS", "make_encoder",
           "DINOHead", "EncoderProjector", "EncoderProjectorPredictor",
           "patchify", "unpatchify", "JEPAPredictor", "MAEDecoder",
           "IJEPANetwork", "MAENetwork",
           "sincos_pos_embed_2d", "REPRESENTATIONS"]

ENCODERS = {"mlp": MLPEncoder, "cnn": SmallCNN, "resnet18": ResNet18,
            "resnet50": ResNet50, "vit_tiny16": ViTTiny16,
            "vit_small16": ViTSmall16}


def make_encoder(name: str, kwargs: dict, dtype=jnp.float32):
  """The encoder ``ENCODERS[name](dtype=dtype, **kwargs)``.

  Args:
    name: one of ``ENCODERS`` ("mlp", "cnn", "resnet18", "resnet50",
      "vit_tiny16", "vit_small16").
    kwargs: attributes of that encoder class (e.g. ``channels``, ``stem``).
    dtype: computation dtype (jnp.float32 or jnp.bfloat16; parameters stay
      float32).

  Raises:
    ValueError: an unknown encoder name.
  """
  if name not in ENCODERS:
    raise ValueError(
        f"unknown encoder {name!r}; expected one of {sorted(ENCODERS)}")
  return ENCODERS[name](dtype=dtype, **kwargs)
