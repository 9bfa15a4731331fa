"""SSL methods as seen by the training loop: a loss over the embeddings of V views.

The loop hands ``loss_terms`` the projector outputs of all views, shaped
(V, B, K) (view v of sample i at [v, i]). ``form="two_view"`` applies the
original paper's two-view loss (V must be 2); ``form="graph"`` stacks the views
view-major into Z (V·B, K) and applies the graph loss with the V-view SSL graph
``views_graph(B, V)``, so V > 2 views work too.
"""

import jax

from ssljax import graphs, losses

__all__ = ["METHODS", "loss_terms"]

# method -> (graph-form terms, two-view terms). Each returns a dict of scalars
# with at least "loss".
METHODS = {
    "vicreg": (losses.vicreg_terms, losses.vicreg_two_view_terms),
}
FORMS = ("two_view", "graph")


def check_method(method: str, form: str, num_views: int) -> None:
  """Raises ValueError for an unknown method/form or a view count it cannot use."""
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; expected one of {sorted(METHODS)}")
  if form not in FORMS:
    raise ValueError(f"unknown loss form {form!r}; expected one of {FORMS}")
  if form == "two_view" and num_views != 2:
    raise ValueError(
        f"loss form 'two_view' needs num_views=2, got {num_views}; use form='graph'")


def loss_terms(method: str, z_VxBxK: jax.Array, *, form: str, **hparams) -> dict:
  """Loss terms of ``method`` on the embeddings of V views.

  Args:
    method: a key of ``METHODS`` (e.g. "vicreg").
    z_VxBxK: (V, B, K) float embeddings; [v, i] is view v of sample i.
    form: "two_view" (original paper, V = 2) or "graph" (loss over (Z, G) with
      the view-major V-view graph).
    **hparams: keyword hyper-parameters of the loss (e.g. ``inv_weight``).

  Returns:
    dict of scalar terms including "loss".

  Raises:
    ValueError: unknown method or form, or form="two_view" with V != 2.
  """
  num_views, batch, k = z_VxBxK.shape
  check_method(method, form, num_views)
  graph_fn, two_view_fn = METHODS[method]
  if form == "two_view":
    return two_view_fn(z_VxBxK[0], z_VxBxK[1], **hparams)
  g_NxN = graphs.views_graph(batch, num_views, dtype=z_VxBxK.dtype)
  return graph_fn(z_VxBxK.reshape(num_views * batch, k), g_NxN, **hparams)
