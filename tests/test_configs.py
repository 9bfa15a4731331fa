"""The shipped configs and the config helpers: every config and variant
loads with the current field names, only the VICReg variants build on
configs/vicreg.py, and `ssljax.config_rules` / `ssljax.optimizers` /
`ssljax.data.view_spec` read the fields as configs/common.py names them.
"""

import ast
import importlib
import os
import pathlib
import pkgutil
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from ssljax import config_rules, data, optimizers

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import configs  # noqa: E402
from configs import common  # noqa: E402

JOINT = ("vicreg", "simclr", "barlow_twins", "spectral_contrastive", "frossl",
         "wmse")
PREDICTIVE = ("byol", "simsiam", "mocov3", "nnclr")
TEACHER = ("byol", "mocov3", "dino", "ijepa", "dinov2")
MASKED = ("ijepa", "mae")  # ViT heads instead of a projector


# Configs of services, not of training methods (their own tests below).
SERVICE_CONFIGS = ("pal_human",)


def _config_modules():
  """Names of the configs/ modules that are method configs (not helpers)."""
  return sorted(m.name for m in pkgutil.iter_modules(configs.__path__)
                if not m.name.startswith("_") and m.name != "common"
                and m.name not in SERVICE_CONFIGS)


def _all_configs():
  found = []
  for name in _config_modules():
    module = importlib.import_module(f"configs.{name}")
    args = (module.all_args() if hasattr(module, "all_args")
            else list(module.VARIANTS))
    found += [(name, arg) for arg in args]
  return found


ALL = _all_configs()


@pytest.mark.parametrize("name,arg", ALL, ids=[f"{n}:{a}" for n, a in ALL])
def test_every_config_and_variant_loads_with_current_names(name, arg):
  c = importlib.import_module(f"configs.{name}").get_config(arg)
  assert config_rules.renamed_problems(c) == []
  assert c.method and c.loss.form
  m = c.method
  assert ("graph" in c) == (m in JOINT), m
  assert ("teacher" in c) == (m in TEACHER), m
  assert ("projector" in c.model) == (m not in ("dino", "dinov2") + MASKED
                                      ), m
  assert ("jepa_predictor" in c.model) == (m == "ijepa"), m
  assert ("mae_decoder" in c.model) == (m == "mae"), m
  assert ("masks" in c) == (m in MASKED + ("dinov2",)), m
  assert ("predictor" in c.model) == (m in PREDICTIVE), m
  assert ("dino_head" in c.model) == (m in ("dino", "dinov2")), m
  if m in ("dino", "dinov2"):
    assert set(c.model.dino_head) == {"hidden_dim", "bottleneck_dim",
                                      "out_dim", "num_layers", "use_bn",
                                      "norm_last_layer"}
  # The online probe is an evals entry with its own optimiser settings.
  probe = c.evals.online_probe
  assert probe.type == "online_probe"
  assert (probe.learning_rate, probe.weight_decay) == (1e-2, 0.0)
  assert (probe.views, probe.ema_decay) == ("clean", 0.9)
  assert set(c.optim.lars) == {"momentum", "trust_coefficient",
                               "momentum_buffer", "trust_ratio", "clip"}


@pytest.mark.parametrize("arg", ["default", "smoke", "active", "passive", None])
def test_pal_human_variants(arg):
  from configs import pal_human  # pylint: disable=import-outside-toplevel
  c = pal_human.get_config(arg)
  assert c.strategy == ("active" if arg == "active" else "passive")
  assert c.server.host == "127.0.0.1" and c.server.max_body_bytes == 65536
  assert c.data.pool == (200 if arg == "smoke" else 2000)
  with pytest.raises(ValueError, match="unknown variant"):
    pal_human.get_config("nope")


@pytest.mark.parametrize("variant", common.VARIANTS)
def test_common_holds_only_shared_fields(variant):
  c = common.get_config(variant)
  for group in ("method", "loss", "graph", "teacher", "online_probe", "eval"):
    assert group not in c
  for field in ("projector", "predictor", "head", "head_kwargs", "dino_head"):
    assert field not in c.model
  assert (c.views.num_global, c.views.num_local) == (2, 0)
  with pytest.raises(ValueError, match="unknown variant"):
    common.get_config("tiny")


def test_add_graph_adds_the_graph_group():
  c = common.get_config()
  common.add_graph(c)
  assert c.graph.kind == "views" and c.graph.knn_k == 16
  assert set(c.graph) == {
      "kind", "alpha", "label_fraction", "normalize", "knn_k",
      "knn_features", "knn_pca_dim", "supervised_per_node", "edge_list_path",
      "edge_sampling"}


def _imports_vicreg(path: pathlib.Path) -> bool:
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and node.module == "configs" and any(
        a.name == "vicreg" for a in node.names):
      return True
    if isinstance(node, ast.ImportFrom) and node.module == "configs.vicreg":
      return True
    if isinstance(node, ast.Import) and any(
        a.name == "configs.vicreg" for a in node.names):
      return True
  return False


def test_only_vicreg_variants_build_on_vicreg_config():
  importers = sorted(p.stem for p in (ROOT / "configs").glob("*.py")
                     if _imports_vicreg(p))
  assert importers, "the VICReg variants build on configs/vicreg.py"
  assert all(name.startswith("vicreg_") for name in importers), importers


def test_smoke_image_folder_handles_a_method_without_projector():
  c = importlib.import_module("configs.dino").get_config()
  common.smoke_image_folder(c, "test", image_size=40, view_size=32)
  assert "projector" not in c.model and c.num_steps == 3
  assert (c.eval_inputs.batch_size, c.eval_inputs.view_samples) == (32, 16)


# ---------------------------------------------------------------- rules --
@pytest.mark.parametrize("rule,good,bad", [
    (config_rules.integer(1), [1, 7], [0, 1.5, True, None, "2"]),
    (config_rules.integer(0, none_ok=True), [0, None], [-1, 0.5]),
    (config_rules.real(0.0, 1.0), [0, 0.5, 1.0], [-0.1, 1.1, float("nan"),
                                                   False, "0.5"]),
    (config_rules.real(0.0, 1.0, lo_open=True, hi_open=True), [0.5],
     [0.0, 1.0]),
    (config_rules.boolean, [True, False], [0, 1, None]),
    (config_rules.one_of("a", "b"), ["a", "b"], ["c", None]),
    (config_rules.string(), ["", "x"], [None, 3]),
    (config_rules.string(empty_ok=False, none_ok=True), ["x", None], [""]),
    (config_rules.pair(0.0, 1.0), [(0.2, 1.0), [0.0, 0.0]],
     [(0.5, 0.2), (0.2,), (0.0, 2.0), "ab"]),
    (config_rules.positive_ints, [(1,), (2, 3)], [(), (0,), (1.5,), 3]),
    (config_rules.positive_reals, [(0.1,), (1, 2.5)], [(), (0.0,), (-1,)]),
    (config_rules.widths, [(), (16, 8)], [(0,), (8, -1), (2.0,), None]),
    (config_rules.nonempty_widths, [(16,), (16, 8)], [(), (0,), None]),
    (config_rules.anything, [None, 1, "x", ()], []),
])
def test_rules_accept_and_reject(rule, good, bad):
  for value in good:
    assert rule(value) is None, value
  for value in bad:
    why = rule(value)
    assert isinstance(why, str) and why, value


def test_rule_phrases():
  assert config_rules.integer(1)(0) == "an integer >= 1"
  assert config_rules.integer(1, none_ok=True)(0) == "an integer >= 1 or None"
  assert config_rules.real(0.0, lo_open=True)(0.0) == "a number > 0.0"
  assert config_rules.real(0.0, 1.0, hi_open=True)(1.0) == (
      "a number in [0.0, 1.0)")
  assert config_rules.one_of("adamw", "lars")("sgd") == "one of 'adamw', 'lars'"


def test_check_fields_reports_missing_and_bad_values():
  c = ml_collections.ConfigDict(
      {"batch_size": 1, "optim": {"name": "sgd", "lars": {"momentum": 0.9}}})
  rules = {"batch_size": config_rules.integer(2),
           "optim.name": config_rules.one_of("adamw", "lars"),
           "optim.lars.momentum": config_rules.real(0.0, 1.0, hi_open=True),
           "optim.lars.trust_coefficient": config_rules.real(0.0),
           "views.num_global": config_rules.integer(1)}
  assert config_rules.check_fields(c, rules) == [
      "config.batch_size=1: must be an integer >= 2",
      "config.optim.name='sgd': must be one of 'adamw', 'lars'",
      "config.optim.lars.trust_coefficient is missing",
      "config.views.num_global is missing"]
  c.batch_size, c.optim.name = 2, "lars"
  c.optim.lars.trust_coefficient = 1e-3
  c.views = ml_collections.ConfigDict({"num_global": 2})
  assert config_rules.check_fields(c, rules) == []


def test_renamed_problems_name_the_new_fields():
  old = ml_collections.ConfigDict({
      "views": {"num_views": 2, "num_local_views": 0},
      "optim": {"momentum": 0.9, "trust_coefficient": 1e-3},
      "eval": {"batch_size": 1000, "baselines": True},
      "online_probe": {"enabled": True},
      "model": {"head": "dino", "head_kwargs": {}}})
  assert config_rules.renamed_problems(old) == [
      "config.views.num_views was renamed config.views.num_global",
      "config.views.num_local_views was renamed config.views.num_local",
      "config.eval was renamed config.eval_inputs",
      "config.online_probe was replaced by the entry config.evals."
      "online_probe (delete it to train without the probe)",
      "config.optim.momentum was renamed config.optim.lars.momentum",
      "config.optim.trust_coefficient was renamed "
      "config.optim.lars.trust_coefficient",
      "config.model.head was replaced by config.model.dino_head (DINO; the "
      "other methods' head is config.model.projector)",
      "config.model.head_kwargs was renamed config.model.dino_head"]
  assert config_rules.renamed_problems(common.get_config()) == []
  for path, hint in config_rules.RENAMED.items():
    assert hint and "\n" not in hint, path


# ----------------------------------------------------------- optimisers --
def _optim(name, **lars):
  c = common.get_config().optim
  c.name = name
  c.lars.update(lars)
  return c


@pytest.mark.parametrize("name", ["adamw", "lars"])
def test_create_optimizer_builds_and_steps(name):
  params = {"kernel": jnp.ones((3, 2)), "bias": jnp.ones((2,))}
  tx = optimizers.create_optimizer(_optim(name), lambda step: 1e-2)
  grads = jax.tree.map(jnp.ones_like, params)
  updates, _ = tx.update(grads, tx.init(params), params)
  assert all(np.all(np.isfinite(u)) and np.any(u != 0)
             for u in jax.tree.leaves(updates))


def test_lars_reads_the_lars_group():
  params = {"kernel": jnp.ones((3, 2))}
  grads = {"kernel": jnp.full((3, 2), 0.5)}

  def first_update(**lars):
    tx = optimizers.create_optimizer(_optim("lars", **lars), 1.0)
    return tx.update(grads, tx.init(params), params)[0]["kernel"]
  # The trust ratio scales the step by η: a 10x η gives a 10x first step.
  small = first_update(trust_coefficient=1e-3)
  big = first_update(trust_coefficient=1e-2)
  np.testing.assert_allclose(big, 10 * small, rtol=1e-5)


def test_create_optimizer_rejects_an_unknown_name():
  with pytest.raises(ValueError, match="unknown optimiser 'rmsprop'"):
    optimizers.create_optimizer(_optim("rmsprop"), 1e-3)


def test_learning_rate_schedule_scales_and_ends():
  optim = _optim("adamw")  # 2e-3 per 256, 1 warm-up epoch, end 0.01 x peak
  fn = optimizers.create_learning_rate_fn(optim, batch_size=512,
                                          steps_per_epoch=10, total_steps=100)
  assert float(fn(0)) == 0.0
  assert float(fn(10)) == pytest.approx(4e-3)
  assert float(fn(100)) == pytest.approx(4e-5)


# ---------------------------------------------------------------- views --
def test_view_spec_reads_num_global_and_num_local():
  views = importlib.import_module("configs.dino").get_config().views
  spec = data.view_spec(views)
  assert (spec.num_global, spec.num_local, spec.num_views) == (2, 4, 6)
  assert data.view_spec({}).num_views == 2


@pytest.mark.parametrize("old,new", [("num_views", "num_global"),
                                     ("num_local_views", "num_local")])
def test_view_spec_rejects_the_old_names(old, new):
  with pytest.raises(ValueError, match=f"views.{old} was renamed views.{new}"):
    data.view_spec({old: 2})


# ------------------------------------------- every field read or refused --
# A valid non-neutral value of each field that some path does not read.
_OTHER = {
    "views.local_size": 9, "views.local_crop_scale": (0.1, 0.3),
    "views.crop_scale": (0.5, 1.0), "views.crop_ratio": (0.5, 2.0),
    "views.pad": 2, "views.brightness": 0.2, "views.contrast": 0.2,
    "views.saturation": 0.3, "views.hue": 0.1, "views.grayscale_prob": 0.5,
    "views.blur_sigma": (0.5, 1.0), "views.blur_kernel_fraction": 0.3,
    "views.solarize_threshold": 0.7, "views.erase_scale": (0.1, 0.3),
    "optim.sgd.momentum": 0.5,
    "optim.lars.momentum": 0.5, "optim.lars.trust_coefficient": 0.01,
    "optim.lars.momentum_buffer": "gradients", "optim.lars.trust_ratio": "larc",
    "optim.lars.clip": True,
    "optim.clip_mode": "per_tensor", "optim.final_weight_decay": 0.3,
    "dataset.download": True, "dataset.channels": 1, "dataset.generate": True,
    "distributed.coordinator_address": "host:1234",
    "distributed.num_processes": 2, "distributed.process_id": 1,
    "graph.alpha": 0.25, "graph.label_fraction": 0.5, "graph.normalize": False,
    "graph.knn_k": 3, "graph.knn_features": "pixels", "graph.knn_pca_dim": 7,
    "graph.supervised_per_node": 3, "graph.edge_list_path": "edges.npy",
    "graph.edge_sampling": "uniform",
}


def _set(config, path, value):
  node, _, leaf = path.rpartition(".")
  for part in filter(None, node.split(".")):
    config = config[part]
  config[leaf] = value


def walk_fields(configs_to_walk):
  """For every field of every (name, arg) config: "read" (the path reads
  it), "free" (evaluator options and class attributes, checked by their
  owners), or "refused" (the path does not read it and a non-neutral value
  is refused, naming it). Returns the counts; fails on any other field."""
  from ssljax import config_paths, config_validation, methods  # pylint: disable=import-outside-toplevel
  counts = {"read": 0, "free": 0, "refused": 0}
  for name, arg in configs_to_walk:
    config = importlib.import_module(f"configs.{name}").get_config(arg)
    declared = (set(config_validation.common_fields())
                | set(methods.config_fields(config)))
    for path in config_validation.field_paths(config):
      if path.startswith(("evals.", "model.encoder_kwargs.",
                          "model.projector_kwargs.",
                          "dataset.generate_kwargs.", "loss.")):
        counts["free"] += 1
        continue
      assert path in declared, f"{name}:{arg}: config.{path} is read nowhere"
      # config_paths' "read" is held to a traced run by
      # test_fields_config_paths_calls_read_are_read_by_a_run below.
      if config_paths.unread_reason(config, path) is None:
        counts["read"] += 1
        continue
      other = config.copy_and_resolve_references()
      _set(other, path, _OTHER[path])
      with pytest.raises(config_validation.ConfigError,
                         match=f"config.{path}=.* is not read: "):
        config_validation.validate(other)
      counts["refused"] += 1
  return counts


@pytest.mark.slow  # 26 s on the shared 2-core machine
def test_every_field_of_every_config_is_read_or_refused():
  counts = walk_fields(ALL)
  print(f"fields walked over {len(ALL)} configs: {counts}")
  assert counts["refused"] > 0 and counts["read"] > 0


def test_every_field_of_each_config_module_is_read_or_refused():
  """The walk above on the first variant of each configs/ module."""
  first = list({name: (name, arg) for name, arg in reversed(ALL)}.values())
  counts = walk_fields(first)
  print(f"fields walked over {len(first)} configs: {counts}")
  assert counts["refused"] > 0 and counts["read"] > 0


# ------------------------------ config_paths against a traced real run --
# The walk above trusts `ssljax.config_paths.unread_reason` on which fields
# a path reads. Here a real (shortened) run records every field its code
# looks up, and config_paths' "read" must be among them: a field the run
# never looks at must be called unread (else a value set there would be
# accepted and silently ignored). Looked up is not the same as used (view_spec
# reads every views field), so the converse is not asserted.
_VALIDATORS = ("config_validation.py", "config_rules.py", "config_paths.py")


def _subconfig_paths(config) -> dict:
  """{frozenset of a sub-config's keys: its dotted prefix}. The key set
  names a sub-config across the copies a run makes of it; key sets that
  several sub-configs share (e.g. the evaluators' probe entries) are left
  out."""
  found = {}

  def walk(node, prefix):
    found.setdefault(frozenset(node.keys()), []).append(prefix)
    for key in node.keys():
      if isinstance(node[key], ml_collections.ConfigDict):
        walk(node[key], f"{prefix}{key}.")

  walk(config, "")
  return {keys: prefixes[0] for keys, prefixes in found.items()
          if len(prefixes) == 1}


def traced_fields_read(config, workdir, monkeypatch) -> set:
  """Dotted paths of the fields that ``train_and_evaluate(config)`` looks up
  by name (``c.x``, ``c["x"]``, ``c.get("x")``) outside the config checks.
  Bulk reads (to_dict, items, copies, to_json) do not count: they touch
  every field."""
  from ml_collections.config_dict import config_dict as cd  # pylint: disable=import-outside-toplevel
  from ssljax import train  # pylint: disable=import-outside-toplevel
  library = os.path.dirname(cd.__file__)
  prefixes = _subconfig_paths(config)
  seen = set()
  getitem = cd.ConfigDict.__getitem__

  def traced(self, key):
    frame, via = sys._getframe(1), None  # pylint: disable=protected-access
    while frame is not None and frame.f_code.co_filename.startswith(library):
      via, frame = frame.f_code.co_name, frame.f_back
    if (frame is not None and isinstance(key, str) and "." not in key
        and via in (None, "__getattr__", "get")
        and not frame.f_code.co_filename.endswith(_VALIDATORS)):
      prefix = prefixes.get(frozenset(self.keys()))
      if prefix is not None:
        seen.add(prefix + key)
    return getitem(self, key)

  monkeypatch.setattr(cd.ConfigDict, "__getitem__", traced)
  train.train_and_evaluate(config, str(workdir))
  monkeypatch.setattr(cd.ConfigDict, "__getitem__", getitem)
  return seen


def _ruled_paths(config) -> list:
  """The fields whose reading config_paths decides, present in config."""
  from ssljax import config_paths  # pylint: disable=import-outside-toplevel
  paths = list(config_paths.CONDITIONAL) + [
      f"views.{n}" for n in (*config_paths.PER_VIEW_SWITCHES,
                             *config_paths.RGB_ONLY)]
  present = []
  for path in dict.fromkeys(paths):
    node, _, leaf = path.rpartition(".")
    parent = config
    for part in filter(None, node.split(".")):
      parent = parent[part] if part in parent else None
      if parent is None:
        break
    if parent is not None and leaf in parent:
      present.append(path)
  return present


@pytest.mark.parametrize("name,arg", [
    ("vicreg", "smoke"),
    pytest.param("vicreg_knn_graph", "smoke", marks=pytest.mark.slow),
    pytest.param("imagenet100_resnet18", "byol,smoke",
                 marks=pytest.mark.slow),
])
def test_fields_config_paths_calls_read_are_read_by_a_run(
    name, arg, tmp_path, monkeypatch):
  from ssljax import config_paths  # pylint: disable=import-outside-toplevel
  config = importlib.import_module(f"configs.{name}").get_config(arg)
  # One step, no evaluators: the rest of the run reads the same fields.
  config.num_steps = 1
  config.evals = ml_collections.ConfigDict()
  if config.dataset.get("generate"):
    # A fresh folder: an existing one is reused without reading the
    # generator's settings.
    config.dataset.data_dir = str(tmp_path / "images")
  ruled = _ruled_paths(config)
  claimed = {p for p in ruled if config_paths.unread_reason(config, p) is None}
  read = traced_fields_read(config, tmp_path / "run", monkeypatch)
  # The trace sees the run's reads at all (else the check below is empty).
  assert {"batch_size", "optim.name", "views.crop"} <= read
  assert claimed - read == set(), (
      f"{name}:{arg}: config_paths calls these read, the run never looks"
      f" them up: {sorted(claimed - read)}")
  # Both states occur: some ruled fields read, some not (the check is not
  # vacuous on either side for this config).
  assert claimed and set(ruled) - claimed


def test_neutral_values_are_the_common_defaults():
  from ssljax import config_paths  # pylint: disable=import-outside-toplevel
  c = common.get_config()
  common.add_graph(c)
  for path in config_paths.CONDITIONAL:
    node = c
    for part in path.split("."):
      node = node[part]
    if hasattr(node, "to_dict"):
      node = node.to_dict()
    assert config_paths.neutral_value(path) == (
        tuple(node) if isinstance(node, list) else node), path
  for name in (*config_paths.PER_VIEW_SWITCHES, *config_paths.RGB_ONLY):
    assert config_paths.neutral_value(f"views.{name}") == c.views[name], name
