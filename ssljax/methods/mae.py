"""MAE (He et al. 2022, arXiv 2111.06377) as a method.

Networks: a ViT encoder (with a class token) and MAE's light decoder
(`ssljax.models.MAENetwork`, `ssljax.models.MAEDecoder`). One view per
image. Each step removes ``masks.mask_ratio`` of the patches of every image
at random (`ssljax.methods.masks.random_masking`, from the step's key); the encoder
sees the visible patches, the decoder predicts the pixels of every patch,
and the loss (`ssljax.losses.mae`) is the per-patch mean squared error on
the removed patches, against per-patch normalised pixels when
``loss.norm_pix_loss``.

What is probed: the encoder on the whole image, with the encoder's
``representation`` (the configs use "avg_tokens": average-pooled tokens;
MAE's paper linear-probes its class token and reports average pooling as
equally good, App. A.1).
"""

import jax

from ssljax import config_rules as rules, losses, models

from ssljax.methods import masks
from ssljax.methods import (base, loss_config, masked_vit, networks,
                            single_network)

__all__ = ["Method"]


def _mse(pred, target, mask, *, norm_pix_loss: bool = True):
  return losses.mae(pred, target, mask, norm_pix_loss=norm_pix_loss)


class Method(single_network.SingleNetworkMethod):
  """MAE: reconstruct the removed patches' pixels."""

  name = "mae"
  FORMS = {"mse": _mse}
  HPARAM_RULES = {"norm_pix_loss": rules.boolean}

  def __init__(self, config):
    super().__init__(config)
    encoder = networks.encoder_of(config)
    head = config.model.mae_decoder
    decoder = models.MAEDecoder(head.width, head.depth, head.num_heads,
                                dtype=networks.compute_dtype(config))
    self.network = models.MAENetwork(encoder, decoder)
    self.encoder = encoder
    self.hparams = loss_config.loss_hparams(config)

  @classmethod
  def config_fields(cls, config):
    return {"masks.mask_ratio": rules.real(0.0, 1.0, hi_open=True),
            "optim.b2": rules.real(0.0, 1.0, hi_open=True),
            **masked_vit.head_fields("mae_decoder"),
            **super().config_fields(config)}

  @classmethod
  def check_config(cls, config):
    problems = (super().check_config(config)
                + masked_vit.vit_problems(config, cls.name, "mae_decoder"))
    if not problems and not config.model.encoder_kwargs.get("class_token",
                                                            True):
      problems.append("method 'mae' needs the encoder's class token (MAE's "
                      "decoder reads it): drop "
                      "config.model.encoder_kwargs.class_token=False")
    return problems

  def loss(self, params, state, batch, key, schedule):
    del schedule
    x = batch["views"][0]
    patch = self.encoder.patch_size
    grid = masked_vit.patch_grid(x, patch)
    m = masks.random_masking(key, x.shape[0], grid[0] * grid[1],
                             self.config.masks.mask_ratio)
    variables = {"params": params}
    latent = self.network.apply(variables, x, keep=m["keep"], output="tokens",
                                method=lambda mod, *a, **k: mod.encoder(*a, **k))
    pred = self.network.apply(variables, latent, m["ids_restore"], grid,
                              patch * patch * x.shape[3],
                              method=lambda mod, *a: mod.decoder(*a))
    loss = self.FORMS[self.config.loss.form](
        pred, models.patchify(x, patch), m["mask"], **self.hparams)
    rep = masked_vit.token_representation(self.encoder, latent,
                                          with_prefix=True)
    if rep is None:
      rep = self.representation(params, state, x)
    return loss, base.LossAux({"loss": loss}, state,
                              jax.lax.stop_gradient(rep))

  def embedding(self, params, state, images):
    h = self.representation(params, state, images)
    return h, h
