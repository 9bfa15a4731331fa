"""What I-JEPA and MAE share: a ViT encoder on one view, its patch grid,
the config fields of their transformer heads, and the representation of
the training forward pass."""

import jax.numpy as jnp

from ssljax import config_rules as rules, models

__all__ = ["head_fields", "vit_problems", "patch_grid", "token_representation"]


def head_fields(group: str) -> dict:
  """Rules of ``config.model.<group>.{width, depth, num_heads}``."""
  return {f"model.{group}.width": rules.integer(4),
          f"model.{group}.depth": rules.integer(1),
          f"model.{group}.num_heads": rules.integer(1)}


def vit_problems(config, name: str, group: str) -> list:
  """One line per problem: the encoder is not a ViT, the run has other than
  one view, the head's width is not divisible by its heads or by 4 (its
  sine-cosine positions). A view size that is not a multiple of the
  patch is refused for every ViT run (`ssljax.config_validation`)."""
  problems = []
  encoder = models.ENCODERS[config.model.encoder]
  if not issubclass(encoder, models.VisionTransformer):
    problems.append(f"method {name!r} needs a ViT encoder (config.model."
                    f"encoder = 'vit_tiny16' or 'vit_small16'), got "
                    f"{config.model.encoder!r}")
    return problems
  if (config.views.num_global, config.views.num_local) != (1, 0):
    problems.append(f"method {name!r} reads one view per image: set "
                    "config.views.num_global = 1 and views.num_local = 0, got "
                    f"{config.views.num_global} and {config.views.num_local}")
  head = config.model[group]
  if head.width % head.num_heads or head.width % 4:
    problems.append(f"config.model.{group}.width={head.width} must be "
                    f"divisible by num_heads={head.num_heads} and by 4")
  return problems


def patch_grid(images, patch: int) -> tuple:
  """(gh, gw) of images (B, H, W, C) (static)."""
  return (images.shape[1] // patch, images.shape[2] // patch)


def token_representation(encoder, tokens, *, with_prefix: bool):
  """The encoder's representation from its output tokens when it can be
  read off them ("cls" with the class token present, "avg_tokens"), else
  None. ``tokens``: (B, n + K, D) with the class token first when
  ``with_prefix`` and the encoder has one (n = 1), else (B, K, D)."""
  n_prefix = int(encoder.class_token and with_prefix)
  if encoder.representation == "cls":
    return tokens[:, 0] if n_prefix else None
  if encoder.representation == "avg_tokens":
    wide = models.vit.wide_dtype(tokens.dtype)
    return jnp.mean(tokens[:, n_prefix:].astype(wide), axis=1
                    ).astype(tokens.dtype)
  return None
