"""What BYOL, SimSiam, MoCo v3, DINO and NNCLR share: the student network
with a predictor and its config fields, the stacked and flattened view
outputs and the crop graph of multi-crop."""

import jax.numpy as jnp

from ssljax import config_rules as rules, losses
from ssljax.methods import networks, single_network

__all__ = ["PREDICTOR_FIELDS", "PredictorMethod", "flat", "crops_graph",
           "stack"]

PREDICTOR_FIELDS = {"model.projector": rules.nonempty_widths,
                    "model.predictor": rules.nonempty_widths}


def stack(outs, key):
  """(V, B, ·) array of output ``key`` of V per-view output dicts."""
  return jnp.stack([o[key] for o in outs])


def flat(x_VxBxK):
  """(V·B, K), view-major rows."""
  return x_VxBxK.reshape(-1, x_VxBxK.shape[-1])


def crops_graph(p_VxBxK, num_global):
  """The crop graph (V·B, G·B): row = a view, column = a global view, 1
  where they are different views of one image (`losses.dino_crops_graph`);
  with V = G = 2 it is ``graphs.views_graph(B, 2)``."""
  num_views, batch, _ = p_VxBxK.shape
  return losses.dino_crops_graph(batch, num_global, num_views - num_global,
                                 dtype=p_VxBxK.dtype)


class PredictorMethod(single_network.SingleNetworkMethod):
  """A method whose trained network is an encoder, a projector and a
  predictor (`ssljax.methods.networks.predictor_network`: BYOL, SimSiam,
  MoCo v3, NNCLR); it reads ``model.projector`` and ``model.predictor``."""

  def __init__(self, config):
    super().__init__(config)
    self.network = networks.predictor_network(config)

  @classmethod
  def config_fields(cls, config):
    # The heads' last-layer form: optional, checked where a config sets it.
    optional = {path: rules.boolean for path in networks.HEAD_FORM_FIELDS}
    return {**PREDICTOR_FIELDS, **rules.where_set(config, optional),
            **super().config_fields(config)}
