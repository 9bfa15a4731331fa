"""Every loss's matrix products run at full float32 precision by default.

On GPUs (Ampere and later) JAX's default float32 product is TF32 and on TPUs
bfloat16 passes; a VICReg graph loss in float32 then differed from float64
by 2.9e-4 relative on an H200. The public functions of `ssljax.losses` wear
`ssljax.checks.float32_matmuls`, which traces them under
`jax.default_matmul_precision("highest")` unless the user set a precision.
CPU products are exact float32 whatever the setting, so the property is
tested on the jaxpr: every `dot_general` (also inside jit, scan, remat,
cond and custom-derivative sub-jaxprs, and in the gradient) has precision
HIGHEST, and HIGH (TF32) when the user asked for "tensorfloat32". Tracing
only, nothing is compiled.

`CASES` must hold one case per public name of every module of
`ssljax.losses` (`NOT_ARRAY_FUNCTIONS` lists the exceptions): a loss added
later without a case fails `test_every_public_function_has_a_case`, and one
without the decorator fails `test_every_public_function_is_decorated`.
"""

import functools
import importlib
import inspect
import pkgutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from ssljax import checks, graphs, losses
from ssljax.losses import pairwise

# The package's names `byol` and `sigreg` are the loss functions.
byol_module = importlib.import_module("ssljax.losses.byol")
sigreg_module = importlib.import_module("ssljax.losses.sigreg")

B, K, Q = 8, 4, 12
HIGHEST = (lax.Precision.HIGHEST, lax.Precision.HIGHEST)
HIGH = (lax.Precision.HIGH, lax.Precision.HIGH)  # "tensorfloat32"

# Public names that take or return no JAX arrays (NumPy quadrature) or are
# argument helpers of other losses, not losses.
NOT_ARRAY_FUNCTIONS = {"sigreg_quadrature", "sigreg_null_mean",
                       "check_directions"}


def _public_functions() -> dict:
  """name -> function, over the package's and every submodule's __all__."""
  found = {n: getattr(losses, n) for n in losses.__all__}
  for info in pkgutil.iter_modules(losses.__path__):
    module = importlib.import_module(f"ssljax.losses.{info.name}")
    for n in getattr(module, "__all__", []):
      found.setdefault(n, getattr(module, n))
  return {n: f for n, f in found.items() if callable(f)}


@functools.cache  # computed once, outside any precision setting
def _inputs() -> dict:
  keys = jax.random.split(jax.random.key(0), 8)
  z1 = jax.random.normal(keys[0], (B, K))
  z2 = z1 + 0.3 * jax.random.normal(keys[1], (B, K))
  return {
      "z1": z1, "z2": z2, "z": jnp.concatenate([z1, z2]),
      "p1": z2 + 0.5 * jax.random.normal(keys[2], (B, K)),
      "p2": z1 + 0.5 * jax.random.normal(keys[3], (B, K)),
      "queue": jax.random.normal(keys[4], (Q, K)),
      "student": 3 * jax.random.normal(keys[5], (4, B, K)),  # 2 global + 2 local
      "center": jnp.zeros((K,)),
      "directions": sigreg_module.sigreg_directions(keys[6], K, 6),
      "info": jnp.ones((3, 2, B)),
      "patches": jax.random.normal(keys[7], (2, 5, 6)),
      "step": jnp.asarray(3.0),
  }


G_2B = graphs.views_graph(B, 2)  # (2B, 2B): the two views of a sample
G_BCOO = graphs.to_bcoo(G_2B)
EYE_B = jnp.eye(B)  # the pairing of one view's rows with the other's
DINO_G = losses.dino_crops_graph(B, 2, 2)  # (4B, 2B)
LEJEPA_G = losses.lejepa_crops_graph(B, 2, 2)  # (4B, 4B)
PAIR_W = jnp.full((2 * B, 2 * B), 0.5)
MASK = jnp.asarray(np.arange(10).reshape(2, 5) % 2, jnp.float32)
LEJEPA = {"lam": 0.05}


def _dino(f):
  return lambda x: f(x["student"], x["student"][:2] * 0.5, x["center"])


def _dino_graph(x):
  s, t = x["student"], x["student"][:2] * 0.5
  return losses.dino_graph(s.reshape(-1, K), t.reshape(-1, K), x["center"],
                           DINO_G)


def _lejepa(f):
  return lambda x: f(x["student"], num_global=2, directions=x["directions"],
                     **LEJEPA)


def _lejepa_graph(f):
  return lambda x: f(x["student"].reshape(-1, K), LEJEPA_G, num_views=4,
                     directions=x["directions"], **LEJEPA)


# iBOT / DINOv2: 5 masked patches over the 2B = 16 global crops of 3 patches.
IBOT_MASKS = jnp.asarray(np.isin(np.arange(48), [0, 4, 5, 20, 46])
                         .reshape(16, 3))


def _dinov2_terms(centering):
  def case(x):
    s = x["student"]
    kwargs = ({} if centering == "sinkhorn_knopp" else
              {"dino_center": x["center"], "ibot_center": x["center"]})
    return losses.dinov2_terms(
        s[:2], s[2:], 0.5 * s[:2], x["p1"][:5], x["p2"][:5], IBOT_MASKS,
        s[:2], centering=centering, teacher_temperature=0.07, **kwargs)
  return case


def _nnclr_graph(x):
  g = losses.support_knn_graph(x["z1"], x["queue"])
  return losses.nnclr_graph(x["p1"], x["queue"], g)


# name -> function of the input dict. Extra keys ("name:variant") trace
# other code paths of one loss (sparse G, blockwise SimCLR).
CASES = {
    "vicreg": lambda x: losses.vicreg(x["z"], G_2B),
    "vicreg_terms": lambda x: losses.vicreg_terms(x["z"], G_2B),
    "vicreg:bcoo": lambda x: losses.vicreg(x["z"], G_BCOO),
    "vicreg_two_view": lambda x: losses.vicreg_two_view(x["z1"], x["z2"]),
    "vicreg_two_view_terms": lambda x: losses.vicreg_two_view_terms(
        x["z1"], x["z2"]),
    "simclr": lambda x: losses.simclr(x["z"], G_2B),
    "simclr:bcoo": lambda x: losses.simclr(x["z"], G_BCOO),
    "simclr:blocks": lambda x: losses.simclr(x["z"], G_2B, block_size=4),
    "simclr_terms": lambda x: losses.simclr_terms(x["z"], G_2B),
    "simclr_two_view": lambda x: losses.simclr_two_view(x["z1"], x["z2"]),
    "simclr_two_view_terms": lambda x: losses.simclr_two_view_terms(
        x["z1"], x["z2"], block_size=4),
    "frossl": lambda x: losses.frossl((x["z1"], x["z2"])),
    "frossl_terms": lambda x: losses.frossl_terms((x["z1"], x["z2"], x["p1"])),
    "wmse_two_view": lambda x: losses.wmse_two_view(x["z1"], x["z2"]),
    "wmse_two_view_terms": lambda x: losses.wmse_two_view_terms(
        x["z1"], x["z2"]),
    "wmse_whiten": lambda x: losses.wmse_whiten(x["z1"]),
    "barlow_twins": lambda x: losses.barlow_twins(x["z"], G_2B),
    "barlow_twins_terms": lambda x: losses.barlow_twins_terms(x["z"], G_BCOO),
    "barlow_twins_two_view": lambda x: losses.barlow_twins_two_view(
        x["z1"], x["z2"]),
    "barlow_twins_two_view_terms": lambda x: (
        losses.barlow_twins_two_view_terms(x["z1"], x["z2"])),
    "spectral_contrastive": lambda x: losses.spectral_contrastive(x["z"], G_2B),
    "spectral_contrastive_terms": lambda x: losses.spectral_contrastive_terms(
        x["z"], G_BCOO),
    "spectral_contrastive_two_view": lambda x: (
        losses.spectral_contrastive_two_view(x["z1"], x["z2"])),
    "edge_vic2_terms": lambda x: losses.edge_vic2_terms(
        jnp.stack([x["z1"], x["z2"]]), x["info"]),
    "byol": lambda x: losses.byol(x["p1"], x["z2"]),
    "byol_two_view": lambda x: losses.byol_two_view(x["p1"], x["p2"],
                                                    x["z1"], x["z2"]),
    "byol_graph": lambda x: losses.byol_graph(x["p1"], x["z2"], EYE_B),
    "byol_graph:bcoo": lambda x: losses.byol_graph(
        x["p1"], x["z2"], graphs.to_bcoo(EYE_B)),
    "graph_cosine": lambda x: byol_module.graph_cosine(x["p1"], x["z2"], EYE_B),
    "simsiam": lambda x: losses.simsiam(x["p1"], x["z2"]),
    "simsiam_two_view": lambda x: losses.simsiam_two_view(x["p1"], x["p2"],
                                                          x["z1"], x["z2"]),
    "simsiam_graph": lambda x: losses.simsiam_graph(x["p1"], x["z2"], EYE_B),
    "mocov3": lambda x: losses.mocov3(x["p1"], x["z2"]),
    "mocov3_two_view": lambda x: losses.mocov3_two_view(x["p1"], x["p2"],
                                                        x["z1"], x["z2"]),
    "mocov3_graph": lambda x: losses.mocov3_graph(x["p1"], x["z2"], EYE_B),
    "mocov3_graph:bcoo": lambda x: losses.mocov3_graph(
        x["p1"], x["z2"], graphs.to_bcoo(EYE_B)),
    "dino": _dino(losses.dino),
    "dino_terms": _dino(losses.dino_terms),
    "dino_center_update": lambda x: losses.dino_center_update(
        x["center"], x["student"][:2].reshape(-1, K)),
    "dino_teacher_temperature": lambda x: losses.dino_teacher_temperature(
        x["step"], 10),
    "dino_crops_graph": lambda x: losses.dino_crops_graph(B, 2, 2),
    "dino_graph": _dino_graph,
    "nearest_neighbour": lambda x: losses.nearest_neighbour(x["z1"],
                                                            x["queue"]),
    "nnclr": lambda x: losses.nnclr(x["p1"], x["z2"], x["queue"]),
    "nnclr_two_view": lambda x: losses.nnclr_two_view(
        x["p1"], x["p2"], x["z1"], x["z2"], x["queue"]),
    "support_knn_graph": lambda x: losses.support_knn_graph(x["z1"],
                                                            x["queue"], 2),
    "nnclr_graph": _nnclr_graph,
    "sigreg": lambda x: losses.sigreg(x["z1"], x["directions"]),
    "sigreg_directions": lambda x: losses.sigreg_directions(
        jax.random.key(1), K, 3),
    "statistic_of_projections": lambda x: (
        sigreg_module.statistic_of_projections(x["z1"][:, :3])),
    "lejepa": _lejepa(losses.lejepa),
    "lejepa_terms": _lejepa(losses.lejepa_terms),
    "lejepa_graph": _lejepa_graph(losses.lejepa_graph),
    "lejepa_graph_terms": _lejepa_graph(losses.lejepa_graph_terms),
    "lejepa_crops_graph": lambda x: losses.lejepa_crops_graph(B, 2, 2),
    "ijepa": lambda x: losses.ijepa(x["patches"], 2.0 * x["patches"] + 1.0),
    "target_layer_norm": lambda x: losses.target_layer_norm(x["patches"]),
    "mae": lambda x: losses.mae(x["patches"], 0.5 * x["patches"], MASK,
                                norm_pix_loss=True),
    "normalize_patches": lambda x: losses.normalize_patches(x["patches"]),
    "vic2_pair_terms": lambda x: pairwise.vic2_pair_terms(
        x["z"], G_2B, jnp.sum(G_2B, axis=1), 2 * B),
    "paper_pairwise_terms": lambda x: pairwise.paper_pairwise_terms(x["z"],
                                                                    G_2B),
    "pal_minibatch_loss": lambda x: pairwise.pal_minibatch_loss(
        x["z"], G_2B, jnp.sum(G_2B, axis=1), 2 * B, PAIR_W),
    "paper_minibatch_loss": lambda x: pairwise.paper_minibatch_loss(
        x["z"], G_2B, PAIR_W),
    "vic2_offset_loss": lambda x: pairwise.vic2_offset_loss(x["z"], G_2B),
    "sinkhorn_knopp": lambda x: losses.sinkhorn_knopp(x["z1"],
                                                      temperature=0.05),
    "swav": lambda x: losses.swav(x["student"]),
    "swav:queue": lambda x: losses.swav(
        x["student"], queue=jnp.stack([x["queue"], x["queue"]])),
    "koleo": lambda x: losses.koleo(x["z1"]),
    "ibot": lambda x: losses.ibot(x["p1"][:5], jax.nn.softmax(x["p2"][:5]),
                                  IBOT_MASKS),
    "dinov2_terms": _dinov2_terms("sinkhorn_knopp"),
    "dinov2_terms:centering": _dinov2_terms("centering"),
    "gram_anchoring": lambda x: losses.gram_anchoring(x["patches"],
                                                      0.5 * x["patches"]),
    "gram_anchoring:img_level": lambda x: losses.gram_anchoring(
        x["patches"], x["patches"] + 1.0, img_level=True, remove_neg=True),
}

# Cases whose functions compute no matrix product (elementwise maths, graph
# builders, schedules): their jaxpr must hold no dot_general at all. Every
# other case must hold at least one, so that its check cannot pass vacuously.
NO_PRODUCT = {"ijepa", "target_layer_norm", "mae", "normalize_patches",
              "dino_crops_graph", "lejepa_crops_graph",
              "dino_teacher_temperature", "dino_center_update",
              "sigreg_directions", "byol", "simsiam", "simsiam_two_view",
              "byol_two_view", "sinkhorn_knopp", "ibot"}
# Not differentiable (keys, integer graph builders): value jaxpr only.
NO_GRAD = {"dino_crops_graph", "lejepa_crops_graph", "sigreg_directions"}


def dot_precisions(jaxpr) -> list:
  """The `precision` of every dot_general in a (closed) jaxpr, walking the
  sub-jaxprs in the equations' parameters (jit, scan, cond, remat, custom
  derivatives)."""
  jaxpr = getattr(jaxpr, "jaxpr", jaxpr)  # ClosedJaxpr -> Jaxpr
  found = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "dot_general":
      found.append(eqn.params["precision"])
    for value in eqn.params.values():
      for sub in value if isinstance(value, (tuple, list)) else (value,):
        if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None),
                                           "eqns"):
          found += dot_precisions(sub)
  return found


def _scalar(out):
  leaves = [l for l in jax.tree.leaves(out)
            if jnp.issubdtype(jnp.result_type(l), jnp.inexact)]
  return sum(jnp.sum(l) for l in leaves)


def _traced_precisions(name: str) -> list:
  """Precisions of the products of case `name` and of its gradient."""
  case, x = CASES[name], _inputs()
  found = dot_precisions(jax.make_jaxpr(case)(x))
  if name not in NO_GRAD:
    found += dot_precisions(jax.make_jaxpr(
        jax.grad(lambda x: _scalar(case(x))))(x))
  return found


def test_every_public_function_has_a_case():
  names = set(_public_functions()) - NOT_ARRAY_FUNCTIONS
  cased = {n.split(":")[0] for n in CASES}
  assert not names - cased, f"add a case for {sorted(names - cased)}"
  assert not cased - names, f"no such public function: {sorted(cased - names)}"


def test_every_public_function_is_decorated():
  """Covers also the functions with no product today (a product added to
  them later is then HIGHEST as well)."""
  wrapper_code = checks.float32_matmuls(lambda: None).__code__
  bare = [n for n, f in _public_functions().items()
          if n not in NOT_ARRAY_FUNCTIONS and f.__code__ is not wrapper_code]
  assert not bare, f"not decorated with checks.float32_matmuls: {bare}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_products_are_float32_by_default(name):
  assert jax.config.jax_default_matmul_precision is None, (
      "run without JAX_DEFAULT_MATMUL_PRECISION set")
  found = _traced_precisions(name)
  if name.split(":")[0] in NO_PRODUCT:
    assert not found
  else:
    assert found, "no dot_general traced: move the case to NO_PRODUCT?"
  assert all(p == HIGHEST for p in found), found


@pytest.mark.parametrize("name", ["vicreg", "simclr:blocks", "nnclr_graph",
                                  "wmse_two_view", "dino_graph",
                                  "lejepa_graph"])
def test_the_users_precision_is_kept(name):
  with jax.default_matmul_precision("tensorfloat32"):
    found = _traced_precisions(name)
  # JAX's own Cholesky and triangular-solve derivative rules pin HIGHEST on
  # their products whatever the setting; W-MSE's gradient has them.
  allowed = {HIGH, HIGHEST} if name == "wmse_two_view" else {HIGH}
  assert HIGH in found and set(found) <= allowed, found


def test_the_users_global_setting_is_kept():
  jax.config.update("jax_default_matmul_precision", "bfloat16")
  try:
    found = _traced_precisions("spectral_contrastive")
  finally:
    jax.config.update("jax_default_matmul_precision", None)
  default = (lax.Precision.DEFAULT, lax.Precision.DEFAULT)
  assert found and all(p == default for p in found), found


def test_float32_under_an_outer_jit_and_shard_map():
  """The precision is fixed when the loss is traced, wherever that is."""
  x = _inputs()
  mesh = jax.make_mesh((1,), ("data",))
  spec = jax.sharding.PartitionSpec()
  sharded = jax.shard_map(lambda z: losses.vicreg(z, G_2B), mesh=mesh,
                          in_specs=spec, out_specs=spec)
  for f in (jax.jit(lambda z: losses.vicreg(z, G_2B)), sharded,
            jax.jit(jax.grad(sharded))):
    found = dot_precisions(jax.make_jaxpr(f)(x["z"]))
    assert found and all(p == HIGHEST for p in found), found


def test_decorator_keeps_name_docstring_and_signature():
  f = losses.vicreg
  assert f.__name__ == "vicreg" and f.__doc__ == f.__wrapped__.__doc__
  assert inspect.signature(f) == inspect.signature(f.__wrapped__)
  assert "inv_weight" in inspect.signature(f).parameters
  # The precision holds only inside the call.
  losses.vicreg(_inputs()["z"], G_2B)
  assert jax.config.jax_default_matmul_precision is None
