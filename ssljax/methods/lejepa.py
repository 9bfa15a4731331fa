"""LeJEPA (Balestriero & LeCun 2025, arXiv 2511.08544) as a method.

One network (`ssljax.models.EncoderProjector`: any encoder of
``config.model.encoder``, ViT, ResNet or the small CNN, then the projector
``config.model.projector``), no teacher, no predictor, no stop-gradient. All
V views (``views.num_global`` global crops, then ``views.num_local`` local
crops) go through the same network; the loss (`ssljax.losses.lejepa`) pulls
every view's embedding to the centre of the global views' embeddings and
regularises each view's embedding towards N(0, I_K) with SIGReg:

    L = (1 − λ)·invariance + λ·(1/V) Σ_v SIGReg(z_v).

Hyper-parameters (``config.lejepa``): ``lam`` (λ, the paper's single
trade-off; 0.05 is the default of the official implementation, the paper
sweeps 0.01–0.1) and ``num_slices`` (M directions; 1024 in the official
README's example). The M directions are drawn inside the jitted loss from
the step's loss key, itself derived from (seed, step): identical on every
device and process, and replayed exactly on resume.

``batch_norm_views`` says how the views meet the projector's (and a CNN
encoder's) BatchNorm: "joint" (the views of one size as one batch, so
each BatchNorm normalises over all their rows, as the official minimal
example's one batch of N·V rows) or "per_view" (one batch per view, as the
other methods here).

Forms: ``"multi_view"`` (`losses.lejepa_terms`, the official code) and
``"graph"`` (`losses.lejepa_graph_terms` over the crop graph
`losses.lejepa_crops_graph`, equal to it).
"""

from ssljax import config_rules as rules, losses
from ssljax.methods import base, networks, single_network, student

__all__ = ["Method"]

FIELDS = {"model.projector": rules.nonempty_widths,
          "lejepa.lam": rules.real(0.0, 1.0),
          "lejepa.num_slices": rules.integer(1)}

# Read where present; absent, each is its old behaviour ("per_view",
# "kernels", 0.0), so the LeJEPA recipes that do not set them keep their
# steps. configs/lejepa.py sets all three (MINIMAL.md's behaviour).
OPTIONAL_FIELDS = {
    "lejepa.batch_norm_views": rules.one_of("joint", "per_view"),
    "optim.weight_decay_mask": rules.one_of("kernels", "all"),
    "optim.warmup_start_factor": rules.real(0.0, 1.0)}


# The forms take λ and the directions from config.lejepa and the step's key,
# not from config.loss: no keyword-only hyper-parameters.
def _multi_view(z_VxBxK, a_KxM, num_global, lam):
  return losses.lejepa_terms(z_VxBxK, num_global=num_global, lam=lam,
                             directions=a_KxM)


def _graph(z_VxBxK, a_KxM, num_global, lam):
  num_views, batch, _ = z_VxBxK.shape
  g_NxN = losses.lejepa_crops_graph(batch, num_global, num_views - num_global)
  return losses.lejepa_graph_terms(student.flat(z_VxBxK), g_NxN,
                                   num_views=num_views, lam=lam,
                                   directions=a_KxM)


class Method(single_network.SingleNetworkMethod):
  """LeJEPA: invariance to the global views' centre + SIGReg per view."""

  name = "lejepa"
  FORMS = {"multi_view": _multi_view, "graph": _graph}

  def __init__(self, config):
    super().__init__(config)
    self.network = networks.projector_network(config)
    self.form = config.loss.form
    self.lam = float(config.lejepa.lam)
    self.num_slices = int(config.lejepa.num_slices)
    self.num_global = int(config.views.num_global)
    self.joint_batch_norm = (
        config.lejepa.get("batch_norm_views", "per_view") == "joint")

  @classmethod
  def config_fields(cls, config):
    return {**FIELDS, **rules.where_set(config, OPTIONAL_FIELDS),
            **super().config_fields(config)}

  @classmethod
  def check_config(cls, config):
    extra = sorted(k for k in config.loss.keys() if k != "form")
    if extra and config.loss.form in cls.FORMS:
      return [f"config.loss.{extra[0]} is not a hyper-parameter of method "
              "'lejepa' (its loss reads only loss.form; λ and M are "
              "config.lejepa.lam and config.lejepa.num_slices)"]
    problems = super().check_config(config)
    num_views = config.views.num_global + config.views.num_local
    if num_views < 2:
      problems.append("method 'lejepa' needs at least 2 views "
                      f"(views.num_global + views.num_local), got {num_views}")
    return problems

  def terms(self, z_VxBxK, key) -> dict:
    """Loss terms of the configured form on (V, B, K) embeddings, with the
    step's directions drawn from ``key``."""
    # In the embeddings' dtype: float32 in float32 and bfloat16 runs (the
    # projector's output is float32), float64 in the float64 checks.
    a_KxM = losses.sigreg_directions(key, z_VxBxK.shape[-1], self.num_slices,
                                     dtype=z_VxBxK.dtype)
    return self.FORMS[self.form](z_VxBxK, a_KxM, self.num_global, self.lam)

  def forward(self, params, batch_stats, views):
    """(list of V output dicts, new batch_stats), train mode; the views
    of one size as one batch when ``batch_norm_views`` is "joint"."""
    return single_network.forward_views(
        self.network.apply,
        lambda stats: {"params": params, "batch_stats": stats},
        batch_stats, views, joint_batch_norm=self.joint_batch_norm)

  def loss(self, params, state, batch, key, schedule):
    del schedule
    outs, batch_stats = self.forward(params, state["batch_stats"],
                                     batch["views"])
    terms = self.terms(student.stack(outs, "z"), key)
    return terms["loss"], base.LossAux(terms, {**state,
                                               "batch_stats": batch_stats},
                                       outs[0]["h"])
