"""Joint-embedding methods: a loss of the projector outputs Z and a graph G.

VICReg, SimCLR, Barlow Twins, spectral contrastive, FroSSL and W-MSE see only
the embeddings of the V views, z (V, B, K) (view v of sample i at [v, i]).
Each offers some of three loss forms of `ssljax.losses`:

* ``"two_view"``: the original paper's two-view loss (V = 2);
* ``"multi_view"``: the original paper's loss over V >= 2 views (FroSSL);
* ``"graph"``: the loss over (Z, G), Z the views stacked view-major
  (V·B, K) and G the batch graph of `batch_graph`: the V-view SSL graph,
  the supervised graph of the batch labels, or a mixture of the two.

`JointEmbeddingMethod` is their shared implementation (one network
`ssljax.models.EncoderProjector`, state = BatchNorm statistics); a method
module sets its name and its forms. ``config.graph`` chooses G: a batch
graph (GRAPH_KINDS) or a whole-dataset graph trained on sampled edges
(graphs.DATASET_GRAPH_KINDS).
"""

import jax.numpy as jnp

from ssljax import config_rules as rules, graphs, losses
from ssljax.methods import base, loss_config, networks, single_network

__all__ = ["JointEmbeddingMethod", "terms_of"]

GRAPH_FIELDS = {
    "graph.kind": rules.one_of(*graphs.BATCH_GRAPH_KINDS,
                               *graphs.DATASET_GRAPH_KINDS),
    "graph.alpha": rules.real(0.0, 1.0),
    "graph.label_fraction": rules.real(0.0, 1.0),
    "graph.normalize": rules.boolean,
    "graph.knn_k": rules.integer(1),
    "graph.knn_features": rules.one_of("pixels", "pca"),
    "graph.knn_pca_dim": rules.integer(1),
    "graph.supervised_per_node": rules.integer(1),
    "graph.edge_list_path": rules.anything,
    "graph.edge_sampling": rules.one_of("weighted", "uniform"),
}


def terms_of(name: str):
  """``losses.<name>_terms`` if the library has it, else ``losses.<name>``
  wrapped to return {"loss": value}."""
  fn = getattr(losses, name + "_terms", None)
  if fn is not None:
    return fn
  scalar = getattr(losses, name)

  def terms(*args, **kwargs):
    return {"loss": scalar(*args, **kwargs)}
  terms.__wrapped__ = scalar
  return terms


def _with_edge_estimate() -> list:
  """Names of the registered methods that have an edge estimate."""
  from ssljax import methods  # pylint: disable=import-outside-toplevel
  return [name for name in methods.available()
          if getattr(methods.get(name), "EDGE_ESTIMATE", None) is not None]


class JointEmbeddingMethod(single_network.SingleNetworkMethod):
  """A loss of the embeddings alone; subclasses set ``name``, ``FORMS``
  {form: loss function} (two_view: (z1, z2, **hparams); multi_view: (views
  (V, B, K), **hparams); graph: (z (N, K), g (N, N), **hparams)) and the
  rules of their hyper-parameters (``HPARAM_RULES``).

  Attributes:
    EDGE_ESTIMATE: for form "graph" on a whole-dataset graph, the unbiased
      estimate of the loss from a batch of sampled edges,
      ``fn(z (2, B, K), edge_info (3, 2, B)) -> terms``; None (the default):
      the method has none, and takes such graphs with form "two_view" only.
  """

  EDGE_ESTIMATE = None

  def __init__(self, config):
    super().__init__(config)
    self.network = networks.projector_network(config)
    self.form = config.loss.form
    self.hparams = loss_config.loss_hparams(config)
    self.graph_kwargs = {"kind": config.graph.kind,
                         "alpha": config.graph.alpha,
                         "normalize": config.graph.normalize}

  @classmethod
  def config_fields(cls, config):
    return {"model.projector": rules.nonempty_widths, **GRAPH_FIELDS,
            **super().config_fields(config)}

  @classmethod
  def check_config(cls, config):
    problems = super().check_config(config)
    if problems:
      return problems
    num_views = config.views.num_global + config.views.num_local
    why = cls.form_problem(config.loss.form, num_views, config.graph.kind)
    if why:
      return [f"config.loss.form/views/graph.kind: {why}"]
    if (config.graph.kind in graphs.DATASET_GRAPH_KINDS
        and config.dataset.in_memory == "no"):
      return [f"config.dataset.in_memory='no': graph.kind "
              f"{config.graph.kind!r} builds its graph from the train split "
              "held in memory; use 'auto' or 'yes'"]
    return []

  @classmethod
  def form_problem(cls, form: str, num_views: int, graph_kind: str):
    """Why a (form, V, graph kind) does not fit this method, or None (the
    form is one of ``FORMS``; form "two_view" has V = 2)."""
    if num_views < 2:
      return f"SSL losses need at least 2 views, got {num_views}"
    if graph_kind in graphs.DATASET_GRAPH_KINDS:
      if num_views != 2:
        return (f"graph kind {graph_kind!r} samples edges, whose two "
                f"endpoints are the views: needs 2 views (views.num_global "
                f"+ views.num_local), got {num_views}")
      if form == "graph" and cls.EDGE_ESTIMATE is None:
        return (f"graph kind {graph_kind!r} with form 'graph' needs an "
                "unbiased edge estimate of the loss, which method "
                f"{cls.name!r} does not have (methods with one: "
                f"{', '.join(_with_edge_estimate())}); use form 'two_view'")
      if form == "multi_view":
        return (f"graph kind {graph_kind!r} needs form 'two_view' or "
                "'graph', got 'multi_view'")
      return None
    if graph_kind != "views" and form != "graph":
      return f"graph kind {graph_kind!r} needs loss form 'graph', got {form!r}"
    return None

  def loss(self, params, state, batch, key, schedule):
    del key, schedule
    outs, batch_stats = self.forward(params, state["batch_stats"],
                                     batch["views"])
    z_VxBxK = jnp.stack([o["z"] for o in outs])
    terms = self.terms(z_VxBxK, labels=batch.get("labels"),
                       edge_info=batch.get("edge_info"))
    return terms["loss"], base.LossAux(terms, {**state,
                                               "batch_stats": batch_stats},
                                       outs[0]["h"])

  def terms(self, z_VxBxK, *, labels=None, edge_info=None) -> dict:
    """Loss terms of the configured form on the embeddings of V views.

    Args:
      z_VxBxK: (V, B, K) float embeddings; [v, i] is view v of sample i.
      labels: int (B,) batch labels (−1 unknown) for label-defined graphs.
      edge_info: (3, 2, B) float row weights of an edge batch, for form
        "graph" on a dataset graph (z[0], z[1] are the edge endpoints).

    Returns:
      dict of scalar terms including "loss".
    """
    num_views, batch, k = z_VxBxK.shape
    fn = self.FORMS[self.form]
    if self.form == "two_view":
      return fn(z_VxBxK[0], z_VxBxK[1], **self.hparams)
    if self.form == "multi_view":
      return fn(z_VxBxK, **self.hparams)
    graph = dict(self.graph_kwargs)
    if graph["kind"] in graphs.DATASET_GRAPH_KINDS:
      return self.EDGE_ESTIMATE(z_VxBxK, edge_info)
    g_NxN = graphs.batch_graph(graph.pop("kind"), num_views, batch, labels,
                               dtype=z_VxBxK.dtype, **graph)
    return fn(z_VxBxK.reshape(num_views * batch, k), g_NxN, **self.hparams)
