"""Tests for ssljax.methods: the registry, the protocol, batch graphs, the
loss forms and each method's config checks."""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import flax.linen as nn
import ml_collections
import pytest

from ssljax import config_validation, graphs, losses, methods
from ssljax.methods import loss_config, single_network

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # configs/


def _numpy_supervised(labels, num_views):
  """(1_V1_Vᵀ ⊗ YYᵀ) − I over view-major rows, unknown (−1) rows empty."""
  y = np.tile(labels, num_views)
  g = (y[:, None] == y[None, :]) & (y[:, None] >= 0)
  np.fill_diagonal(g, False)
  return g.astype(np.float64)


LABELS = np.array([0, 1, 0, 2, -1, 1, 0])


@pytest.mark.parametrize("num_views", [2, 3])
def test_supervised_batch_graph_matches_reference(num_views):
  g = np.asarray(graphs.batch_graph("supervised", num_views, len(LABELS),
                                     LABELS, normalize=False))
  np.testing.assert_array_equal(g, _numpy_supervised(LABELS, num_views))
  # Views of one sample are positives too: the SSL graph is inside it for
  # every known sample.
  g_views = np.asarray(graphs.views_graph(len(LABELS), num_views))
  known = np.tile(LABELS >= 0, num_views)
  assert np.all(g[known][:, known] >= g_views[known][:, known])


def test_normalized_label_graph_has_view_graph_mean_degree():
  num_views = 3
  g = np.asarray(graphs.batch_graph("supervised", num_views, len(LABELS), LABELS))
  known = np.tile(LABELS >= 0, num_views)
  np.testing.assert_allclose(g.sum(1)[known].mean(), num_views - 1, rtol=1e-6)
  np.testing.assert_array_equal(g.sum(1)[~known], 0.0)
  np.testing.assert_allclose(g, g.T)


def test_mixed_graph_interpolates():
  n, v, alpha = len(LABELS), 2, 0.25
  mixed = graphs.batch_graph("mixed", v, n, LABELS, alpha=alpha, normalize=False)
  expected = ((1 - alpha) * np.asarray(graphs.views_graph(n, v))
              + alpha * _numpy_supervised(LABELS, v))
  np.testing.assert_allclose(np.asarray(mixed), expected, rtol=1e-6)


def test_batch_graph_is_jittable_in_labels():
  fn = jax.jit(lambda y: graphs.batch_graph("supervised", 2, len(LABELS), y))
  np.testing.assert_allclose(
      fn(jnp.asarray(LABELS)),
      graphs.batch_graph("supervised", 2, len(LABELS), LABELS), rtol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    ({"kind": "knn"}, "graph kind"),
    ({"kind": "supervised", "labels": None}, "labels"),
    ({"kind": "supervised", "labels": np.zeros(3, int)}, "labels"),
    ({"kind": "mixed", "alpha": 1.5}, "alpha")])
def test_batch_graph_errors(kwargs, match):
  kwargs = {"labels": LABELS, **kwargs}
  with pytest.raises(ValueError, match=match):
    graphs.batch_graph(kwargs.pop("kind"), 2, len(LABELS), **kwargs)


MASKED_VIT = ("ijepa", "mae")


def _config(name, **overrides):
  module = __import__(f"configs.{name}", fromlist=["get_config"])
  config = module.get_config("smoke")
  if name not in MASKED_VIT:  # the ViT methods keep their 8-wide smoke ViT
    config.model.encoder = "mlp"
    config.model.encoder_kwargs = ml_collections.ConfigDict({"features": (8,)})
  config.views.local_size = 28
  for path, value in overrides.items():
    node = config
    *parents, leaf = path.split(".")
    for part in parents:
      node = node[part]
    node[leaf] = value
  return config


def test_joint_embedding_terms_match_the_library():
  z = jax.random.normal(jax.random.key(0), (2, 16, 4))
  two_view = methods.build(_config("vicreg")).terms(z)
  np.testing.assert_allclose(two_view["loss"],
                             losses.vicreg_two_view(z[0], z[1]), rtol=1e-6)
  graph = methods.build(_config("vicreg", **{"loss.form": "graph"})).terms(z)
  np.testing.assert_allclose(
      graph["loss"], losses.vicreg(z.reshape(32, 4), graphs.views_graph(16, 2)),
      rtol=1e-6)
  labels = jnp.arange(16) % 3
  sup = methods.build(_config("vicreg", **{
      "loss.form": "graph", "graph.kind": "supervised",
      "graph.normalize": False})).terms(z, labels=labels)
  g = graphs.batch_graph("supervised", 2, 16, labels, normalize=False)
  np.testing.assert_allclose(sup["loss"], losses.vicreg(z.reshape(32, 4), g),
                             rtol=1e-6)


def _problems(config):
  try:
    config_validation.validate(config)
  except config_validation.ConfigError as e:
    return str(e)
  return ""


@pytest.mark.parametrize("name, overrides, match", [
    ("vicreg", {"method": "swaw"}, "config.method='swaw': must be one of"),
    ("mocov3", {"loss.form": "graph"}, "loss.form='graph': must be one of"),
    ("vicreg", {"loss.form": "pairs"}, "config.loss.form='pairs'"),
    ("vicreg", {"views.num_global": 3}, "needs 2 views"),
    ("vicreg", {"graph.kind": "supervised"}, "needs loss form 'graph'"),
    ("vicreg", {"views.num_global": 1, "loss.form": "graph"},
     "at least 2 views"),
    ("byol", {"model.predictor": ()}, "config.model.predictor=()"),
    ("byol", {"loss.temperature": 0.1}, "not a hyper-parameter"),
    ("dino", {"model.dino_head.out_dim": 0}, "dino_head.out_dim=0"),
    ("nnclr", {"loss.queue_size": 8}, "queue_size=8: must be >="),
    ("lejepa", {"lejepa.lam": 1.5}, "config.lejepa.lam=1.5"),
    ("lejepa", {"lejepa.num_slices": 0}, "config.lejepa.num_slices=0"),
    ("lejepa", {"loss.form": "two_view"}, "loss.form='two_view'"),
    # Each method's own hyper-parameter rules (Method.HPARAM_RULES).
    ("simclr", {"loss.temperature": 0.0}, "config.loss.temperature=0.0"),
    ("mocov3", {"loss.temperature": -1.0}, "config.loss.temperature=-1.0"),
    ("nnclr", {"loss.queue_size": 0}, "config.loss.queue_size=0"),
    ("barlow_twins", {"loss.lambda_offdiag": -1.0},
     "config.loss.lambda_offdiag=-1.0"),
    ("wmse", {"loss.whitening_size": 1}, "config.loss.whitening_size=1"),
    ("dino", {"loss.center_momentum": 1.5}, "config.loss.center_momentum=1.5"),
    ("vicreg", {"loss.var_weight": -1.0}, "config.loss.var_weight=-1.0"),
])
def test_each_method_refuses_its_bad_configs_in_one_line(name, overrides,
                                                         match):
  message = _problems(_config(name, **overrides))
  assert match in message and "\n" not in message, message


def test_a_field_no_one_reads_is_refused():
  config = _config("byol")
  with config.unlocked():
    config.graph = ml_collections.ConfigDict({"kind": "views"})
  assert "config.graph.kind is not read by method 'byol'" in _problems(config)


@pytest.mark.parametrize("old, new", [
    ("views.num_views", "views.num_global"),
    ("views.num_local_views", "views.num_local")])
def test_an_old_field_name_names_the_new_one(old, new):
  config = _config("vicreg")
  parent, leaf = old.split(".")
  with config.unlocked():
    config[parent][leaf] = 2
  message = _problems(config)
  assert old in message and new in message and "\n" not in message


def test_each_hyper_parameter_rule_names_a_keyword_of_a_form():
  """A rule under a name no form accepts would never apply."""
  for name in methods.available():
    cls = methods.get(name)
    accepted = set().union(*(loss_config.keyword_hparams(fn) for fn in
                             cls.hparam_signatures().values()))
    assert set(cls.HPARAM_RULES) <= accepted, (name, cls.HPARAM_RULES)


def test_mae_refuses_a_norm_pix_loss_that_is_not_a_bool():
  config = _config("mae")
  with config.unlocked():
    del config.loss["norm_pix_loss"]  # its type (bool) would refuse 1
    config.loss.norm_pix_loss = 1
  assert "config.loss.norm_pix_loss=1" in _problems(config)


def test_only_methods_with_an_edge_estimate_take_form_graph_on_edges():
  config = _config("vicreg", **{"graph.kind": "dataset_knn",
                                "loss.form": "graph"})
  assert ("which method 'vicreg' does not have (methods with one: "
          "spectral_contrastive)") in _problems(config)


def test_registry_lists_every_method_module():
  assert methods.available() == sorted([
      "barlow_twins", "byol", "dino", "dinov2", "frossl", "ijepa", "lejepa",
      "mae",
      "mocov3", "nnclr", "simclr", "simsiam", "spectral_contrastive", "swav",
      "vicreg", "wmse"])
  with pytest.raises(ValueError, match="unknown method 'swaw'"):
    methods.get("swaw")


# The ViT methods' protocol runs compile a transformer op by op (~3 min each
# on the loaded 2-core machine): in -m slow; their jitted train step is in
# tests/test_sharding.py and tests/test_masked_methods.py.
@pytest.mark.parametrize("name", sorted([
    "barlow_twins", "byol", "dino", "frossl", "mocov3",
    "nnclr", "simclr", "simsiam", "spectral_contrastive", "swav", "vicreg",
    "wmse"]) + [
        pytest.param(m, marks=pytest.mark.slow)
        for m in (*MASKED_VIT, "lejepa", "dinov2")])
def test_protocol(name):
  """init -> loss (finite, differentiable) -> after_update -> representation,
  with the shapes the protocol promises."""
  config = _config(name)
  method = methods.build(config)
  spec = methods.BatchSpec((28, 28, 1), config.views.num_global,
                           config.views.num_local)
  params, state = method.init(jax.random.key(0), spec)
  rng = np.random.default_rng(0)
  batch = 32  # W-MSE's smoke whitening size
  views = tuple(jnp.asarray(rng.uniform(size=(batch, 28, 28, 1)), jnp.float32)
                for _ in range(spec.num_views))
  schedule = {"step": jnp.zeros((), jnp.int32), "total_steps": 10,
              "steps_per_epoch": 5}
  (loss, aux), grads = jax.value_and_grad(method.loss, has_aux=True)(
      params, state, {"views": views}, jax.random.key(1), schedule)
  assert np.isfinite(float(loss)) and float(loss) == float(aux.metrics["loss"])
  assert jax.tree.structure(aux.state) == jax.tree.structure(state)
  assert aux.representation.shape == (batch, 8)
  assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))
  new_state, _ = method.after_update(aux.state, params, schedule)
  assert jax.tree.structure(new_state) == jax.tree.structure(state)
  h = method.representation(params, new_state, views[0])
  h2, z = method.embedding(params, new_state, views[0])
  np.testing.assert_allclose(h, h2, rtol=1e-6)
  assert h.shape == (batch, 8) and z.ndim == 2 and z.shape[0] == batch


class _TokenNet(nn.Module):
  """Per-sample network (LayerNorm, no BatchNorm), or with BatchNorm."""
  batch_norm: bool = False

  @nn.compact
  def __call__(self, x, train=True):
    h = nn.Dense(6)(x.reshape(x.shape[0], -1, x.shape[-1]).mean(1))
    h = (nn.BatchNorm(use_running_average=not train)(h) if self.batch_norm
         else nn.LayerNorm()(h))
    return {"h": h, "z": nn.Dense(3)(jnp.tanh(h))}


@pytest.mark.parametrize("batch_norm", [False, True])
def test_forward_views_groups_views_only_where_samples_are_independent(
    batch_norm):
  """Without BatchNorm statistics, each run of views of one size is one
  forward pass whose outputs equal the per-view passes; with them, every
  view has its own pass (per-view batch statistics, threaded in order)."""
  net = _TokenNet(batch_norm)
  rng = np.random.default_rng(0)
  sizes = (12, 12, 6, 6, 6)  # 2 global + 3 local crops
  views = [jnp.asarray(rng.normal(size=(5, s, s, 2)), jnp.float32)
           for s in sizes]
  variables = net.init(jax.random.key(0), views[0], train=False)
  params, stats = variables["params"], variables.get("batch_stats", {})
  calls = []

  def apply(v, x, **kw):
    calls.append(x.shape)
    return net.apply(v, x, **kw)

  outs, new_stats = single_network.forward_views(
      apply, lambda s: {"params": params, "batch_stats": s}, stats, views)
  expected, s = [], stats
  for x in views:
    out, upd = net.apply({"params": params, "batch_stats": s}, x, train=True,
                         mutable=["batch_stats"])
    s = upd.get("batch_stats", s)
    expected.append(out)
  assert len(calls) == (len(views) if batch_norm else 2)
  if not batch_norm:
    assert calls == [(10, 12, 12, 2), (15, 6, 6, 2)]
  for got, want in zip(outs, expected):
    for key in ("h", "z"):
      np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6)
  for a, b in zip(jax.tree.leaves(new_stats), jax.tree.leaves(s)):
    np.testing.assert_allclose(a, b, rtol=1e-6)
  # Inference mode: samples never interact, so views are grouped.
  calls.clear()
  eval_outs, _ = single_network.forward_views(
      apply, lambda s: {"params": params, "batch_stats": s}, stats, views,
      train=False)
  assert len(calls) == 2
  for x, got in zip(views, eval_outs):
    want = net.apply({"params": params, "batch_stats": stats}, x, train=False)
    np.testing.assert_allclose(got["z"], want["z"], rtol=1e-5, atol=1e-6)
