"""SSL methods as seen by the training loop: a loss over the embeddings of V views.

The loop hands ``loss_terms`` the projector outputs of all views, shaped
(V, B, K) (view v of sample i at [v, i]), and optionally the batch labels.
Each method offers some of three forms:

* ``"two_view"``: the original paper's two-view loss (V must be 2);
* ``"multi_view"``: the original paper's loss over V >= 2 views (FroSSL);
* ``"graph"``: the loss over (Z, G) with Z the views stacked view-major,
  (V·B, K), and G the batch graph of ``batch_graph``: the V-view SSL graph,
  the supervised graph of the batch labels, or a mixture of the two.

The predictive methods (BYOL, SimSiam, MoCo v3, DINO, NNCLR) read more than
the projector outputs: predictions, a momentum teacher's outputs, a support
queue or a centre. Their forms are the adapters of `ssljax.predictive`
(``predictive_terms`` calls them); ``Method.predictor`` / ``teacher`` /
``queue`` / ``center`` say what the network and the train state must hold.

Adding a method = one entry in ``METHODS``.
"""

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp

from ssljax import graphs, losses, predictive

__all__ = ["METHODS", "FORMS", "GRAPH_KINDS", "DATASET_GRAPH_KINDS", "Method",
           "check_method",
           "batch_graph", "loss_terms", "predictive_terms"]


def _as_terms(fn: Callable) -> Callable:
  """Wraps a scalar loss so it returns {"loss": value} like the *_terms forms."""
  def terms(*args, **kwargs):
    return {"loss": fn(*args, **kwargs)}
  terms.__name__ = getattr(fn, "__name__", "loss") + "_terms"
  return terms


def _terms_of(name: str) -> Callable:
  """``losses.<name>_terms`` if the library has it, else ``losses.<name>``."""
  return getattr(losses, name + "_terms", None) or _as_terms(getattr(losses, name))


@dataclasses.dataclass(frozen=True)
class Method:
  """The loss forms a method offers; each returns a dict with "loss".

  graph: (z (N, K), g (N, N), **hparams); two_view: (z1, z2, **hparams);
  multi_view: (views (V, B, K), **hparams).
  """
  graph: Callable | None = None
  two_view: Callable | None = None
  multi_view: Callable | None = None
  # Predictive methods: the forms are `ssljax.predictive` adapters.
  predictor: bool = False  # the network has a predictor head on z
  teacher: bool = False  # an EMA (momentum) teacher gives the targets
  queue: bool = False  # a FIFO support queue of embeddings (NNCLR)
  center: bool = False  # a running centre of the teacher outputs (DINO)

  @property
  def predictive(self) -> bool:
    """Whether the forms are `ssljax.predictive` adapters."""
    return self.predictor or self.teacher or self.queue or self.center


METHODS = {
    "vicreg": Method(graph=_terms_of("vicreg"),
                     two_view=_terms_of("vicreg_two_view")),
    "simclr": Method(graph=_terms_of("simclr"),
                     two_view=_terms_of("simclr_two_view")),
    "barlow_twins": Method(graph=_terms_of("barlow_twins"),
                           two_view=_terms_of("barlow_twins_two_view")),
    "spectral_contrastive": Method(
        graph=_terms_of("spectral_contrastive"),
        two_view=_terms_of("spectral_contrastive_two_view")),
    "frossl": Method(multi_view=_terms_of("frossl")),
    "wmse": Method(two_view=_terms_of("wmse_two_view")),
    **{name: Method(**forms, **predictive.NEEDS[name])
       for name, forms in predictive.FORMS.items()},
}
FORMS = ("two_view", "multi_view", "graph")
GRAPH_KINDS = ("views", "supervised", "mixed")
# Graphs over the whole train set, trained on sampled edges
# (ssljax.graphs.edges, ssljax.data.edge_batches): the two views of a batch
# row are the endpoints of one edge. Form "two_view" uses the method's
# original loss on the edge pairs; form "graph" is the unbiased edge
# estimate of VIC² (losses.edge_vic2_terms), spectral_contrastive only.
DATASET_GRAPH_KINDS = ("dataset_knn", "dataset_supervised", "edge_list")


def check_method(method: str, form: str, num_views: int,
                 graph_kind: str = "views") -> None:
  """Raises ValueError for an unknown method, form or graph kind, a form the
  method does not offer, or a view count the form cannot use."""
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; expected one of {sorted(METHODS)}")
  if form not in FORMS:
    raise ValueError(f"unknown loss form {form!r}; expected one of {FORMS}")
  offered = [f for f in FORMS if getattr(METHODS[method], f) is not None]
  if form not in offered:
    raise ValueError(f"method {method!r} has no {form!r} form; it offers {offered}")
  if form == "two_view" and num_views != 2:
    raise ValueError(
        f"loss form 'two_view' needs num_views=2, got {num_views}; use form="
        f"{'graph' if 'graph' in offered else 'multi_view'!r}")
  if num_views < 2:
    raise ValueError(f"SSL losses need num_views >= 2, got {num_views}")
  if METHODS[method].predictive and graph_kind != "views":
    raise ValueError(f"method {method!r} trains on the views of each image "
                     f"(its crop graph); graph kind {graph_kind!r} is not "
                     "available for it, use 'views'")
  if graph_kind in DATASET_GRAPH_KINDS:
    _check_dataset_graph(method, form, num_views, graph_kind)
    return
  if graph_kind not in GRAPH_KINDS:
    raise ValueError(f"unknown graph kind {graph_kind!r}; expected one of "
                     f"{GRAPH_KINDS + DATASET_GRAPH_KINDS}")
  if graph_kind != "views" and form != "graph":
    raise ValueError(f"graph kind {graph_kind!r} needs loss form 'graph', got "
                     f"{form!r}")


def _check_dataset_graph(method: str, form: str, num_views: int,
                         graph_kind: str) -> None:
  """Edge-sampled training: two views (the endpoints), two_view or VIC²."""
  if num_views != 2:
    raise ValueError(f"graph kind {graph_kind!r} samples edges, whose two "
                     f"endpoints are the views: needs num_views=2, got "
                     f"{num_views}")
  if form == "graph" and method != "spectral_contrastive":
    raise ValueError(f"graph kind {graph_kind!r} with form 'graph' is the "
                     "unbiased edge estimate of VIC² (method "
                     f"'spectral_contrastive'), got method {method!r}; use "
                     "form 'two_view'")
  if form == "multi_view":
    raise ValueError(f"graph kind {graph_kind!r} needs form 'two_view' or "
                     "'graph', got 'multi_view'")


def batch_graph(kind: str, num_views: int, batch: int, labels=None, *,
                alpha: float = 0.5, normalize: bool = True,
                dtype=jnp.float32) -> jax.Array:
  """The graph G over the V·B view-major rows of a training batch.

  * "views": the V-view SSL graph ``graphs.views_graph(B, V)``: the views of
    one sample are positives (degree V − 1).
  * "supervised": rows with the same known label are positives, across views
    and samples; no self loops; a label −1 (unknown) gives an empty row. This
    is (1_V1_Vᵀ ⊗ YYᵀ) − I restricted to known labels (Cabannes et al. 2023
    (arXiv 2303.15256): "SSL is a G away from supervised learning").
  * "mixed": (1 − α)·views + α·supervised (Cabannes et al. 2023 §3).

  With ``normalize`` the label part is rescaled so that its mean degree over
  the known rows is V − 1, the degree of the views graph: the loss weights
  tuned for SSL then keep their balance (a convention of ours, not of the
  papers; the supervised degree otherwise grows with the batch size).

  Args:
    kind: one of GRAPH_KINDS.
    num_views, batch: V and B; G is (V·B, V·B).
    labels: int (B,) batch labels, −1 = unknown; required unless kind="views".
      May be a tracer (this runs inside the jitted train step).
    alpha: mixing weight α in [0, 1] for "mixed".
    normalize: rescale the label part as above.
    dtype: dtype of G.

  Returns:
    (V·B, V·B) symmetric array of ``dtype``.

  Raises:
    ValueError: unknown kind, missing labels or a bad label shape, α outside
      [0, 1].
  """
  if kind not in GRAPH_KINDS:
    raise ValueError(f"unknown graph kind {kind!r}; expected one of {GRAPH_KINDS}")
  g_views = graphs.views_graph(batch, num_views, dtype=dtype)
  if kind == "views":
    return g_views
  if labels is None or jnp.shape(labels) != (batch,):
    raise ValueError(f"graph kind {kind!r} needs labels of shape ({batch},), "
                     f"got {None if labels is None else jnp.shape(labels)}")
  if not 0.0 <= alpha <= 1.0:
    raise ValueError(f"alpha must be in [0, 1], got {alpha}")
  y_N = jnp.tile(jnp.asarray(labels), num_views)  # view-major rows
  same_NxN = (y_N[:, None] == y_N[None, :]) & (y_N[:, None] >= 0)
  g_sup = jnp.where(jnp.eye(num_views * batch, dtype=bool), False,
                    same_NxN).astype(dtype)
  if normalize:
    known = jnp.sum(y_N >= 0)
    mean_degree = jnp.sum(g_sup) / jnp.maximum(known, 1)
    g_sup = g_sup * (num_views - 1) / jnp.maximum(mean_degree, 1e-12)
  if kind == "supervised":
    return g_sup
  return (1.0 - alpha) * g_views + alpha * g_sup


def loss_terms(method: str, z_VxBxK: jax.Array, *, form: str, labels=None,
               graph: dict | None = None, edge_info=None, **hparams) -> dict:
  """Loss terms of ``method`` on the embeddings of V views.

  Args:
    method: a key of ``METHODS`` (e.g. "vicreg").
    z_VxBxK: (V, B, K) float embeddings; [v, i] is view v of sample i.
    form: one of FORMS offered by the method.
    labels: int (B,) batch labels (−1 unknown) for label-defined graphs.
    graph: keyword arguments of ``batch_graph`` besides the sizes ("kind",
      "alpha", "normalize"); None means the V-view SSL graph.
    edge_info: (3, 2, B) float row weights of an edge batch
      (``ssljax.data.edge_batches(with_info=True)``), for form "graph" with a
      kind of DATASET_GRAPH_KINDS; there z[0], z[1] are the edge endpoints.
    **hparams: keyword hyper-parameters of the loss (e.g. ``inv_weight``).

  Returns:
    dict of scalar terms including "loss".

  Raises:
    ValueError: see ``check_method`` and ``batch_graph``.
  """
  num_views, batch, k = z_VxBxK.shape
  graph = dict(graph or {})
  check_method(method, form, num_views, graph.get("kind", "views"))
  spec = METHODS[method]
  if spec.predictive:
    raise ValueError(f"method {method!r} needs predictions and targets, not "
                     "only the embeddings of the views; use predictive_terms")
  if form == "two_view":
    return spec.two_view(z_VxBxK[0], z_VxBxK[1], **hparams)
  if form == "multi_view":
    return spec.multi_view(z_VxBxK, **hparams)
  if graph.get("kind") in DATASET_GRAPH_KINDS:
    if edge_info is None:
      raise ValueError("form 'graph' on a dataset graph needs edge_info")
    return losses.edge_vic2_terms(z_VxBxK, edge_info)
  g_NxN = batch_graph(graph.pop("kind", "views"), num_views, batch, labels,
                      dtype=z_VxBxK.dtype, **graph)
  return spec.graph(z_VxBxK.reshape(num_views * batch, k), g_NxN, **hparams)


def predictive_terms(method: str, form: str, out: dict, memory: dict,
                     schedule: dict, **hparams) -> tuple[dict, dict]:
  """Loss terms and new memory of a predictive method (`ssljax.predictive`).

  Args:
    method: a key of ``METHODS`` whose ``Method.predictive`` is true.
    form: a form the method offers.
    out: {"p" (V, B, K'), "z" (V, B, K), "t" (G, B, K) or None,
      "num_global": G}: predictions, projections, teacher outputs.
    memory: the method's state between steps (queue, centre) or {}.
    schedule: {"step", "total_steps", "steps_per_epoch"}.
    **hparams: the method's keyword hyper-parameters (``config.loss``).

  Returns:
    (dict of scalar terms including "loss", new memory).

  Raises:
    ValueError: see ``check_method``; a method that is not predictive.
  """
  num_views = out["z"].shape[0]
  check_method(method, form, num_views)
  spec = METHODS[method]
  if not spec.predictive:
    raise ValueError(f"method {method!r} is not predictive; use loss_terms")
  return getattr(spec, form)(out, memory, schedule, **hparams)
