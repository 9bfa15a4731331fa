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
from typing import Any

import ml_collections

from ssljax import config_paths, config_rules
from ssljax.data import crops

__all__ = ["ConfigError", "validate", "field_paths", "suggest",
           "common_fields"]


class ConfigError(ValueError):
  """A configuration field has a value the run cannot use (one line)."""


# --------------------------------------------------------------- predicates --
# The shared rules (ssljax.config_rules), under short local names.
_int, _real, _bool = config_rules.integer, config_rules.real, config_rules.boolean
_one_of, _str, _pair = config_rules.one_of, config_rules.string, config_rules.pair
_per_view = config_rules.per_view


def _split(v):
  return None if isinstance(v, str) and v else "a tfds split name, e.g. 'train' or 'train[:10%]'"


def _num_steps(v):
  if isinstance(v, int) and not isinstance(v, bool) and (v > 0 or v == -1):
    return None
  return "an integer > 0 (an exact step count) or -1 (train config.epochs)"


_anything = config_rules.anything


def _workers(v):
  if _int(-1)(v) is None:
    return None
  return "an integer >= 0 (worker processes) or -1 (auto: data.host_workers)"


def _signals(v):
  names = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGHUP")
  if isinstance(v, (tuple, list)) and all(s in names for s in v):
    return None
  return f"a tuple of signal names among {names}"


# The common fields of every config (configs/common.py), with what they
# accept. A method's own fields (method, loss, heads, teacher, graph) are
# declared and checked by its module (ssljax.methods).
_RULES: dict[str, Callable[[Any], str | None]] = {
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
    "dataset.workers": _workers,
    "views.num_global": _int(1),
    "views.num_local": _int(0),
    "views.size": _int(0),
    "views.local_size": _int(0),
    "views.crop": _one_of(*crops.CROP_MODES),
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
    "model.dtype": _one_of("float32", "bfloat16"),
    "optim.name": _one_of("adamw", "lars", "sgd"),
    "optim.schedule_unit": _one_of("step", "epoch"),
    "optim.sgd.momentum": _real(0.0, 1.0, hi_open=True),
    "optim.learning_rate": _real(0.0, lo_open=True),
    "optim.weight_decay": _real(0.0),
    "optim.warmup_epochs": _real(0.0),
    "optim.end_lr_factor": _real(0.0, 1.0),
    "optim.lars.momentum": _real(0.0, 1.0, hi_open=True),
    "optim.lars.trust_coefficient": _real(0.0, lo_open=True),
    "optim.lars.momentum_buffer": _one_of("updates", "gradients"),
    "optim.lars.trust_ratio": _one_of("update", "larc"),
    "optim.lars.clip": _bool,
    "optim.clip_grad_norm": _real(0.0),
    "optim.clip_mode": _one_of("global", "per_tensor", "per_module"),
    "optim.weight_decay_schedule": _one_of("constant", "cosine"),
    "optim.final_weight_decay": _real(0.0),
    "optim.schedule_scale": _real(1.0),
    "optim.warmup_start_factor": _real(0.0, 1.0),
    "optim.schedule_offset": _int(0),
    "optim.adam_bias_correction": _one_of("optax", "accurate"),
    "optim.layerwise_decay": _real(0.0, 1.0, lo_open=True),
    "optim.patch_embed_lr_mult": _real(0.0, lo_open=True),
    "optim.bias_norm_lr_factor": _real(0.0, lo_open=True),
    "train.on_nonfinite": _one_of("stop", "skip"),
    "train.max_skipped": _int(1),
    "train.preemption_signals": _signals,
    "train.preempted_exit_status": _int(0),
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
    "distributed.heartbeat_timeout_seconds": _int(1),
    "distributed.initialization_timeout_seconds": _int(1),
    "compilation_cache_dir": _str(),  # "auto", a path, or "" (off)
    "eval_inputs.batch_size": _int(1),
    "eval_inputs.baselines": _bool,
    "eval_inputs.baseline_cache": _str(),  # "auto", a path, or "" (off)
    "eval_inputs.crop_fraction": _real(0.0, 1.0, lo_open=True),
    "eval_inputs.view_samples": _int(2),
}
# Fields whose keys are free (attributes of a class, evaluator options).
_FREE = ("model.encoder_kwargs.", "model.projector_kwargs.",
         "dataset.generate_kwargs.", "evals.")

def common_fields() -> dict:
  """Dotted path -> rule of the common fields of every config
  (configs/common.py), which every path reads unless `ssljax.config_paths`
  says otherwise."""
  return dict(_RULES)


def _view_problems(config) -> list[str]:
  """Per-view tuples of the wrong length; local views without a size."""
  views = config.views
  num_views = views.num_global + views.num_local
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
          f" for every view or one per view (V = views.num_global + "
          f"views.num_local = {num_views})")
  if config.dataset.name == "image_folder" and not views.size:
    problems.append("config.views.size=0: an image folder's images (of any "
                    "size) are cropped on the host to one side; set "
                    "views.size, e.g. --config.views.size=28")
  if config.dataset.name == "image_folder" and views.crop != "random_resized":
    problems.append(f"config.views.crop={views.crop!r}: needs images of one "
                    "size; an image folder takes 'random_resized'")
  if views.num_local and not views.local_size:
    problems.append(f"config.views.num_local={views.num_local!r}:"
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

  Candidates are the fields of the same parent first: those whose words'
  initials are the given name (``lr`` → ``learning_rate``, ``wd`` →
  ``weight_decay``), then those whose name contains the given name's
  letters in order, then spelling neighbours (difflib); then neighbours
  among all paths.

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
              if "".join(w[0] for w in name.lower().split("_") if w)
              == leaf.lower()]
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
def _name_problems(config) -> list[str]:
  """The encoder name against ``ssljax.models.ENCODERS``."""
  from ssljax import models  # pylint: disable=import-outside-toplevel
  encoder = config.model.encoder
  if encoder not in models.ENCODERS:
    return [f"config.model.encoder={encoder!r}: must be one of "
            f"{', '.join(map(repr, sorted(models.ENCODERS)))}"]
  return []


def _patch_problems(config) -> list[str]:
  """With a ViT encoder: every view side the run sets (``views.size``, and
  ``views.local_size`` when there are local views) must be a multiple of
  the patch size (``model.encoder_kwargs.patch_size``, else the encoder's
  default), else the model raises at its first call, after the data is
  loaded. Side 0 (the images' own size) is checked when the data is read."""
  from ssljax import models  # pylint: disable=import-outside-toplevel
  encoder = models.ENCODERS[config.model.encoder]
  if not issubclass(encoder, models.VisionTransformer):
    return []
  kwargs = config.model.get("encoder_kwargs") or {}
  patch = kwargs.get("patch_size", encoder.patch_size)
  if not isinstance(patch, int) or isinstance(patch, bool) or patch < 1:
    return [f"config.model.encoder_kwargs.patch_size={patch!r}: must be an "
            "integer >= 1"]
  sides = [("views.size", config.views.size)]
  if config.views.num_local:
    sides.append(("views.local_size", config.views.local_size))
  return [f"config.{path}={side}: must be a multiple of the ViT's patch size "
          f"{patch} (model.encoder={config.model.encoder!r}), e.g. "
          f"{max(patch, side // patch * patch)}"
          for path, side in sides if side and side % patch]


def _unread_problems(config, method_fields: dict) -> list[str]:
  """Fields that neither the common part nor the method reads: refused, so
  no option is accepted and then silently ignored."""
  known = set(_RULES) | set(method_fields)
  problems = []
  for path in field_paths(config):
    if path in known or path.startswith(_FREE) or path.startswith("loss."):
      continue  # loss.* keys: the method's own check names them
    problems.append(f"config.{path} is not read by method "
                    f"{config.get('method')!r}; remove it")
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
  num_global = config.get("views", {}).get("num_global", 2)
  problems = []
  from ssljax import online_probe  # pylint: disable=import-outside-toplevel
  probe = online_probe.options(config)
  if probe is not None:
    name = next(n for n, e in config.evals.items()
                if e is not None and e.get("type") == "online_probe")
    for option, allowed in (("features", online_probe.FEATURES),
                            ("views", online_probe.VIEWS)):
      if probe[option] not in allowed:
        problems.append(f"config.evals.{name}.{option}={probe[option]!r}: "
                        "must be one of " + ", ".join(map(repr, allowed)))
    decay = probe["ema_decay"]
    if (isinstance(decay, bool) or not isinstance(decay, (int, float))
        or not 0 <= decay < 1):
      problems.append(f"config.evals.{name}.ema_decay={decay!r}: must be a "
                      "number in [0, 1)")
  for name, entry in config.evals.items():
    if entry is None:
      continue
    need = evaluators.load_type(entry["type"]).min_global_views
    if num_global < need:
      problems.append(
          f"config.evals.{name}: type {entry['type']!r} compares the "
          f"augmented views of each image and needs views.num_global >= "
          f"{need}, this config has {num_global}; set evals.{name}=None")
  return problems


def validate(config: ml_collections.ConfigDict, *,
             defaults: ml_collections.ConfigDict | None = None) -> None:
  """Checks every field of a main-job config; cheap, loads no data.

  In order: fields renamed since earlier versions (one line naming the new
  name), the common fields (`configs/common.py`), the encoder's name and,
  for a ViT, the view sizes against its patch size, the method's own fields
  and checks (`ssljax.methods.config_problems`), fields nothing reads,
  fields the run's path does not read set away from their neutral value
  (`ssljax.config_paths`), and ``config.evals``.

  Args:
    config: the run's ConfigDict (``configs/*.py`` after overrides).
    defaults: optional, the same config file's ConfigDict without the
      overrides: a field that the run's path does not read may then keep
      the file's value as well as its neutral one (`ssljax.config_paths`).

  Raises:
    ConfigError: one line naming every bad field as ``config.<path>=<value>:
      must be <what is allowed>`` (``; ``-separated), or a missing field.
  """
  from ssljax import methods  # pylint: disable=import-outside-toplevel
  problems = config_rules.renamed_problems(config)
  if problems:
    raise ConfigError("; ".join(problems))
  problems += config_rules.check_fields(config, _RULES)
  if not problems:
    problems += _view_problems(config)
  if not problems:
    problems += _name_problems(config)
  if not problems:
    problems += _patch_problems(config)
  if not problems:
    problems += methods.config_problems(config)
  if not problems:
    problems += _unread_problems(config, methods.config_fields(config))
  if not problems:
    problems += config_paths.unread_problems(config, defaults)
  problems += _evals_problems(config)
  if problems:
    raise ConfigError("; ".join(problems))
