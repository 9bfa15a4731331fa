"""Encoder + heads as one flax module, the networks the methods compose.

Two compositions, with no optional parts: `EncoderProjector` (joint-embedding
methods, DINO's student and teacher with `DINOHead` as the projector, the EMA
teachers of BYOL and MoCo v3) and `EncoderProjectorPredictor` (BYOL, SimSiam,
MoCo v3, NNCLR). Outputs are named: {"h": representation (B, D), "z":
projector output (B, K)[, "p": prediction (B, K')]}; ``represent`` runs the
encoder alone (what the evaluators probe). The parameter trees are
{"encoder", "projector"[, "predictor"]}.
"""

import flax.linen as nn

__all__ = ["EncoderProjector", "EncoderProjectorPredictor"]


class EncoderProjector(nn.Module):
  """f_θ then g_φ: images (B, H, W, C) -> {"h": (B, D), "z": (B, K)}.

  Attributes:
    encoder: an encoder of `ssljax.models.ENCODERS` (images -> (B, D)).
    projector: a head on h (`Projector`, `DINOHead`) -> (B, K).
  """
  encoder: nn.Module
  projector: nn.Module

  def __call__(self, x, train: bool = True) -> dict:
    h = self.encoder(x, train=train)
    return {"h": h, "z": self.projector(h, train=train)}

  def represent(self, x, train: bool = False):
    """The encoder output h (B, D) alone."""
    return self.encoder(x, train=train)

  def head(self, h, train: bool = True) -> dict:
    """The projector on representations h (N, D): {"z": (N, K)}."""
    return {"z": self.projector(h, train=train)}


class EncoderProjectorPredictor(nn.Module):
  """f_θ, g_φ, then the predictor q_ψ on z (Grill et al. 2020, arXiv
  2006.07733, §3.1): images -> {"h": (B, D), "z": (B, K), "p": (B, K')}.

  Attributes:
    encoder, projector: as in `EncoderProjector`.
    predictor: a head on z (`Projector`).
  """
  encoder: nn.Module
  projector: nn.Module
  predictor: nn.Module

  def __call__(self, x, train: bool = True) -> dict:
    h = self.encoder(x, train=train)
    z = self.projector(h, train=train)
    return {"h": h, "z": z, "p": self.predictor(z, train=train)}

  def represent(self, x, train: bool = False):
    """The encoder output h (B, D) alone."""
    return self.encoder(x, train=train)
