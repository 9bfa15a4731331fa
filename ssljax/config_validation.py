"""Checks of a run configuration, before any data is loaded.

``validate(config)`` checks every field of the main job's config (types,
ranges, allowed names, and the loss hyper-parameters against the method's
loss function) and raises one :class:`ConfigError` whose message is a single
line naming each bad field, the value given and what is allowed.
``suggest(path, config)`` finds the closest valid names for an unknown field.
The entry point (``ssljax.main``) turns these errors into one line on stderr
and exit status 2.
"""

from collections.abc import Callable, Iterator
import difflib
import inspect
import numbers
from typing import Any

import ml_collections

__all__ = ["ConfigError", "validate", "field_paths", "suggest"]


class ConfigError(ValueError):
  """A configuration field has a value the run cannot use (one line)."""


# --------------------------------------------------------------- predicates --
def _is_int(v) -> bool:
  return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v) -> bool:
  return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _int(lo=None, *, none_ok=False) -> Callable[[Any], str | None]:
  """An integer ≥ lo (or None when ``none_ok``)."""
  def check(v):
    if v is None and none_ok:
      return None
    if not _is_int(v) or (lo is not None and v < lo):
      what = "an integer" if lo is None else f"an integer >= {lo}"
      return what + (" or None" if none_ok else "")
    return None
  return check


def _real(lo=None, hi=None, *, lo_open=False, hi_open=False):
  """A real number in the stated interval."""
  def check(v):
    bad = not _is_real(v) or v != v  # NaN
    if not bad and lo is not None:
      bad = v <= lo if lo_open else v < lo
    if not bad and hi is not None:
      bad = v >= hi if hi_open else v > hi
    if not bad:
      return None
    if hi is None and lo is not None:
      return f"a number {'>' if lo_open else '>='} {lo}"
    left = "(" if lo_open else "["
    right = ")" if hi_open else "]"
    return (f"a number in {left}{'-inf' if lo is None else lo}, "
            f"{'inf' if hi is None else hi}{right}")
  return check


def _bool(v):
  return None if isinstance(v, bool) else "True or False"


def _one_of(*names):
  def check(v):
    return None if v in names else "one of " + ", ".join(map(repr, names))
  return check


def _str(*, empty_ok=True, none_ok=False):
  def check(v):
    if v is None and none_ok:
      return None
    if not isinstance(v, str) or (not empty_ok and not v):
      return "a non-empty string" if not empty_ok else "a string"
    return None
  return check


def _pair(lo, hi):
  """(a, b) with lo <= a <= b <= hi."""
  def check(v):
    ok = (isinstance(v, (tuple, list)) and len(v) == 2
          and all(_is_real(x) for x in v) and lo <= v[0] <= v[1] <= hi)
    return None if ok else f"a pair (a, b) with {lo} <= a <= b <= {hi}"
  return check


def _positive_ints(v):
  ok = (isinstance(v, (tuple, list)) and len(v) >= 1
        and all(_is_int(x) and x >= 1 for x in v))
  return None if ok else "a non-empty tuple of integers >= 1"


def _positive_reals(v):
  ok = (isinstance(v, (tuple, list)) and len(v) >= 1
        and all(_is_real(x) and x > 0 for x in v))
  return None if ok else "a non-empty tuple of numbers > 0"


def _per_view(rule, *, ranges=False):
  """``rule`` for one value, or for each entry of a tuple of values (one per
  view; the count is checked against V in `validate`). With ``ranges`` a
  value is itself a pair."""
  def check(v):
    many = isinstance(v, (tuple, list)) and (
        not ranges or (len(v) > 0 and isinstance(v[0], (tuple, list))))
    values = v if many else [v]
    why = next((w for w in map(rule, values) if w is not None), None)
    if why is None and not (many and len(v) == 0):
      return None
    return f"{why or 'non-empty'} (or a tuple with one such value per view)"
  check.per_view, check.ranges = True, ranges  # read by _view_problems
  return check


def _non_negative_widths(v):
  ok = isinstance(v, (tuple, list)) and all(_is_int(x) and x > 0 for x in v)
  return None if ok else "a tuple of layer widths > 0 (empty: no predictor)"


def _split(v):
  return None if isinstance(v, str) and v else "a tfds split name, e.g. 'train' or 'train[:10%]'"


def _num_steps(v):
  if _is_int(v) and (v > 0 or v == -1):
    return None
  return "an integer > 0 (an exact step count) or -1 (train config.epochs)"


def _anything(v):
  return None


# Every field of the main job's configs (configs/vicreg.py and the configs
# built on it), with what it accepts. Fields not listed here are checked by
# the rules after this table (loss hyper-parameters, encoder attributes).
_RULES: dict[str, Callable[[Any], str | None]] = {
    "method": _str(empty_ok=False),  # names checked against ssljax.methods
    "seed": _int(0),
    "dataset.name": _str(empty_ok=False),
    "dataset.data_dir": _str(none_ok=True),
    "dataset.download": _bool,
    "dataset.train_split": _split,
    "dataset.test_split": _split,
    "dataset.in_memory": _one_of("auto", "yes", "no"),
    "dataset.channels": _one_of(1, 3),
    "dataset.generate": _bool,
    "dataset.generate_kwargs": _anything,
    "dataset.threads": _int(1),
    "dataset.prefetch": _int(1),
    "views.num_views": _int(1),
    "views.num_local_views": _int(0),
    "views.size": _int(0),
    "views.local_size": _int(0),
    "views.crop": _one_of("random_resized", "pad_and_crop", "none"),
    "views.crop_scale": _pair(0.0, 1.0),
    "views.local_crop_scale": _pair(0.0, 1.0),
    "views.crop_ratio": _pair(1e-6, 1e6),
    "views.pad": _int(0),
    # Per view: one value for every view, or a tuple with one per view.
    "views.flip_prob": _per_view(_real(0.0, 1.0)),
    "views.jitter_prob": _per_view(_real(0.0, 1.0)),
    "views.brightness": _per_view(_real(0.0)),
    "views.contrast": _per_view(_real(0.0)),
    "views.saturation": _per_view(_real(0.0)),
    "views.hue": _per_view(_real(0.0, 0.5)),
    "views.grayscale_prob": _per_view(_real(0.0, 1.0)),
    "views.blur_prob": _per_view(_real(0.0, 1.0)),
    "views.blur_sigma": _per_view(_pair(1e-6, 1e3), ranges=True),
    "views.blur_kernel_fraction": _per_view(_real(0.0, 1.0, lo_open=True)),
    "views.solarize_prob": _per_view(_real(0.0, 1.0)),
    "views.solarize_threshold": _per_view(_real(0.0, 1.0)),
    "views.erase_prob": _per_view(_real(0.0, 1.0)),
    "views.erase_scale": _per_view(_pair(0.0, 1.0), ranges=True),
    "views.noise_std": _per_view(_real(0.0)),
    "model.encoder": _str(empty_ok=False),  # names checked against ssljax.models
    "model.encoder_kwargs": _anything,
    "model.projector": _positive_ints,
    "model.dtype": _one_of("float32", "bfloat16"),
    "loss.form": _one_of("two_view", "multi_view", "graph"),
    "graph.kind": _str(empty_ok=False),  # names checked against ssljax.methods
    "graph.alpha": _real(0.0, 1.0),
    "graph.label_fraction": _real(0.0, 1.0),
    "graph.normalize": _bool,
    "graph.knn_k": _int(1),
    "graph.knn_features": _one_of("pixels", "pca"),
    "graph.knn_pca_dim": _int(1),
    "graph.supervised_per_node": _int(1),
    "graph.edge_list_path": _str(),
    "graph.edge_sampling": _one_of("weighted", "uniform"),
    "graph.augment_edges": _bool,
    "optim.name": _one_of("adamw", "lars"),
    "optim.learning_rate": _real(0.0, lo_open=True),
    "optim.weight_decay": _real(0.0),
    "optim.warmup_epochs": _real(0.0),
    "optim.end_lr_factor": _real(0.0, 1.0),
    "optim.momentum": _real(0.0, 1.0, hi_open=True),
    "optim.trust_coefficient": _real(0.0, lo_open=True),
    "batch_size": _int(2),
    "epochs": _real(0.0, lo_open=True),
    "num_steps": _num_steps,
    "log_every_steps": _int(1),
    "checkpoint_every_steps": _int(1),
    "keep_checkpoints": _int(1, none_ok=True),
    "distributed.enabled": _bool,
    "distributed.coordinator_address": _str(none_ok=True),
    "distributed.num_processes": _int(1, none_ok=True),
    "distributed.process_id": _int(0, none_ok=True),
    "eval.batch_size": _int(1),
    "eval.baselines": _bool,
    "eval.crop_fraction": _real(0.0, 1.0, lo_open=True),
    "eval.view_samples": _int(2),
    "model.predictor": _non_negative_widths,
    "model.head": _one_of("projector", "dino"),
    "model.head_kwargs": _anything,
    "teacher.momentum": _real(0.0, 1.0),
    "teacher.final_momentum": _real(0.0, 1.0),
    "online_probe.enabled": _bool,
    "online_probe.learning_rate": _real(0.0, lo_open=True),
    "online_probe.weight_decay": _real(0.0),
}

# Loss hyper-parameters by name (the names of ssljax.losses' keywords).
_LOSS_RULES = {
    "temperature": _real(0.0, lo_open=True),
    "eps": _real(0.0),
    "lambda_offdiag": _real(0.0),
    "whitening_size": _int(2),
    "block_size": _int(1, none_ok=True),
    "student_temperature": _real(0.0, lo_open=True),
    "teacher_temperature": _real(0.0, lo_open=True),
    "warmup_teacher_temperature": _real(0.0, lo_open=True),
    "teacher_temperature_warmup_epochs": _real(0.0),
    "center_momentum": _real(0.0, 1.0),
    "queue_size": _int(1),
}


def _view_problems(config) -> list[str]:
  """Per-view tuples of the wrong length; local views without a size."""
  views = config.views
  num_views = views.num_views + views.num_local_views
  problems = []
  for path, rule in _RULES.items():
    if not getattr(rule, "per_view", False):
      continue
    value, ranges = _get(config, path), rule.ranges
    many = isinstance(value, (tuple, list)) and (
        not ranges or isinstance(value[0], (tuple, list)))
    if many and len(value) not in (1, num_views):
      problems.append(
          f"config.{path}={value!r}: has {len(value)} entries; give one value"
          f" for every view or one per view (V = views.num_views + "
          f"views.num_local_views = {num_views})")
  if views.num_local_views and not views.local_size:
    problems.append(f"config.views.num_local_views={views.num_local_views!r}:"
                    f" needs views.local_size > 0 (the local crop side), got "
                    f"{views.local_size!r}")
  return problems


# ------------------------------------------------------------------- paths --
def field_paths(config: ml_collections.ConfigDict, prefix: str = ""
                ) -> Iterator[str]:
  """Dotted paths of every leaf field of ``config`` (sub-configs recursed;
  ``model.encoder_kwargs`` and other dict-valued fields included as leaves
  of their own keys)."""
  for key in config.keys():
    value = config[key]
    path = f"{prefix}{key}"
    if isinstance(value, ml_collections.ConfigDict):
      yield from field_paths(value, path + ".")
    else:
      yield path


def _is_subsequence(short: str, long: str) -> bool:
  it = iter(long)
  return all(c in it for c in short)


def suggest(path: str, config: ml_collections.ConfigDict, n: int = 3
            ) -> list[str]:
  """Closest valid field paths to an unknown ``path`` (no "config." prefix).

  Candidates are the fields of the same parent first: those whose name
  contains the given name's letters in order (``lr`` → ``learning_rate``),
  then spelling neighbours (difflib); then neighbours among all paths.

  Returns:
    up to ``n`` dotted paths, best first.
  """
  paths = list(field_paths(config))
  parent, _, leaf = path.rpartition(".")
  siblings = [p for p in paths if p.rpartition(".")[0] == parent]
  leaves = {p.rpartition(".")[2]: p for p in siblings}
  found = []
  if leaf:
    found += [leaves[name] for name in leaves
              if _is_subsequence(leaf.lower(), name.lower())
              and name[0] == leaf[0]]
    found += [leaves[name] for name in
              difflib.get_close_matches(leaf, list(leaves), n=n, cutoff=0.6)]
    found += [leaves[name] for name in leaves
              if _is_subsequence(leaf.lower(), name.lower())]
  found += difflib.get_close_matches(path, paths, n=n, cutoff=0.7)
  unique = list(dict.fromkeys(found))
  return unique[:n]


def _get(config, path):
  node = config
  for part in path.split("."):
    node = node[part]
  return node


# ---------------------------------------------------------------- validate --
def _loss_function(method: str, form: str):
  from ssljax import methods  # pylint: disable=import-outside-toplevel
  spec = methods.METHODS.get(method)
  return None if spec is None else getattr(spec, form, None)


def _loss_problems(config) -> list[str]:
  problems = []
  loss = config.get("loss")
  if loss is None:
    return ["config.loss is missing"]
  form = loss.get("form")
  fn = _loss_function(config.get("method"), form)
  params = None
  if fn is not None:
    target = inspect.unwrap(fn)
    try:
      sig = inspect.signature(target)
      if not any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
        params = {name for name, p in sig.parameters.items()
                  if p.kind == p.KEYWORD_ONLY}
    except (TypeError, ValueError):
      params = None
  for key in loss.keys():
    if key == "form":
      continue
    value = loss[key]
    if params is not None and key not in params:
      near = difflib.get_close_matches(key, sorted(params), n=2, cutoff=0.6)
      hint = f"; did you mean {' or '.join(repr('config.loss.' + m) for m in near)}?" if near else ""
      problems.append(
          f"config.loss.{key} is not a hyper-parameter of method "
          f"{config.method!r} (form {form!r}); it accepts "
          f"{', '.join(sorted(params)) or 'none'}{hint}")
      continue
    rule = _LOSS_RULES.get(key)
    if rule is None and key.endswith("weight"):
      rule = _real(0.0)
    if rule is not None and (why := rule(value)) is not None:
      problems.append(f"config.loss.{key}={value!r}: must be {why}")
  return problems


def _name_problems(config) -> list[str]:
  """Names that must be keys of the library's registries."""
  from ssljax import methods, models  # pylint: disable=import-outside-toplevel
  problems = []
  if config.get("method") not in methods.METHODS:
    problems.append(f"config.method={config.get('method')!r}: must be one of "
                    f"{', '.join(map(repr, sorted(methods.METHODS)))}")
  encoders = getattr(models, "ENCODERS", None)
  model = config.get("model")
  if model is not None and encoders is not None and model.get("encoder") not in encoders:
    problems.append(f"config.model.encoder={model.get('encoder')!r}: must be one "
                    f"of {', '.join(map(repr, sorted(encoders)))}")
  kinds = methods.GRAPH_KINDS + methods.DATASET_GRAPH_KINDS
  graph = config.get("graph")
  if graph is not None and graph.get("kind") not in kinds:
    problems.append(f"config.graph.kind={graph.get('kind')!r}: must be one of "
                    f"{', '.join(map(repr, kinds))}")
  if not problems:  # combinations, once every name is known
    try:
      methods.check_method(config.method, config.loss.form,
                           config.views.num_views + config.views.num_local_views,
                           config.graph.kind)
    except ValueError as e:
      problems.append(f"config.method/loss.form/views.num_views/graph.kind: {e}")
  return problems


def _evals_problems(config) -> list[str]:
  """``config.evals`` (optional): names, types, every_steps, option names."""
  if "evals" not in config:
    return []
  from ssljax import evaluators  # pylint: disable=import-outside-toplevel
  try:
    evaluators.validate(config.evals)
  except ValueError as e:
    return [f"config.{e}"]
  return []


def validate(config: ml_collections.ConfigDict) -> None:
  """Checks every field of a main-job config; cheap, loads no data.

  Args:
    config: the run's ConfigDict (``configs/*.py`` after overrides).

  Raises:
    ConfigError: one line naming every bad field as ``config.<path>=<value>:
      must be <what is allowed>`` (``; ``-separated), or a missing field.
  """
  problems = []
  for path, rule in _RULES.items():
    try:
      value = _get(config, path)
    except (KeyError, AttributeError):
      problems.append(f"config.{path} is missing (a config file must define it)")
      continue
    why = rule(value)
    if why is not None:
      problems.append(f"config.{path}={value!r}: must be {why}")
  if not problems:
    problems += _view_problems(config)
  if not problems:
    problems += _name_problems(config)
  if not problems:
    problems += _loss_problems(config)
  queue = config.loss.get("queue_size") if not problems else None
  if isinstance(queue, int) and queue < config.batch_size:
    problems.append(f"config.loss.queue_size={queue}: must be >= "
                    f"config.batch_size={config.batch_size} (each step "
                    "enqueues a whole batch)")
  problems += _evals_problems(config)
  if problems:
    raise ConfigError("; ".join(problems))
