"""Which fields a run's path reads, and the refusal of the ones it does not.

Some fields matter only on some paths: ``views.local_size`` only with local
crops, ``views.pad`` only with the "pad_and_crop" crop, the jitter
strengths only where the jitter is on, ``optim.lars.*`` only with LARS,
``graph.knn_k`` only on the k-NN graph... A field the chosen path does not
read must keep its neutral value (the shipped default, which the path
ignores); any other value is refused by `unread_problems` before anything
loads, with one line naming the field and why, so no option is accepted
and then silently ignored. (``epochs`` is not among them: ``num_steps > 0``
overrides it by its documented meaning, and the smoke variants of long
recipes keep the recipe's epochs.)

`CONDITIONAL` holds the whole-config fields: dotted path -> (neutral value,
``when(config)``, which returns None when the path reads the field, else
the reason it does not). `PER_VIEW_SWITCHES` holds the per-view strengths
of `ssljax.data.view_ops` and the probability that switches each on, view
by view. `RGB_ONLY` are the view ops that do nothing to one-channel images.
"""

from collections.abc import Callable

from ssljax import config_rules

__all__ = ["CONDITIONAL", "PER_VIEW_SWITCHES", "RGB_ONLY", "ONE_CHANNEL",
           "neutral_value", "unread_reason", "unread_problems"]

_DATASET_GRAPHS = ("dataset_knn", "dataset_supervised", "edge_list")


def _needs(test: Callable, reason: str) -> Callable:
  """``when`` rule: None when ``test(config)``, else ``reason`` formatted
  with the config (``{c}``)."""
  return lambda c: None if test(c) else reason.format(c=c)


_NO_LOCAL = _needs(lambda c: c.views.num_local > 0,
                   "views.num_local=0 (no local crops)")
_GRAPH = "graph.kind={c.graph.kind!r}"

# Dotted path -> (neutral value, when). The neutral values are the defaults
# of configs/common.py (tests/test_configs.py checks they agree).
CONDITIONAL: dict[str, tuple] = {
    "views.local_size": (0, _NO_LOCAL),
    "views.local_crop_scale": ((0.05, 0.4), _NO_LOCAL),
    "views.crop_scale": ((0.2, 1.0), _needs(
        lambda c: c.views.crop == "random_resized",
        "views.crop={c.views.crop!r} has no random box")),
    "views.crop_ratio": ((3 / 4, 4 / 3), _needs(
        lambda c: c.views.crop == "random_resized" or c.views.num_local > 0,
        "views.crop={c.views.crop!r} has no random box and there are no "
        "local crops")),
    "views.pad": (4, _needs(lambda c: c.views.crop == "pad_and_crop",
                            "views.crop={c.views.crop!r} does not pad")),
    "optim.clip_mode": ("global", _needs(
        lambda c: c.optim.clip_grad_norm > 0, "optim.clip_grad_norm=0 (no "
        "clipping)")),
    "optim.final_weight_decay": (0.0, _needs(
        lambda c: c.optim.weight_decay_schedule == "cosine",
        "optim.weight_decay_schedule={c.optim.weight_decay_schedule!r}")),
    "optim.sgd.momentum": (0.9, _needs(
        lambda c: c.optim.name == "sgd", "optim.name={c.optim.name!r}")),
    "optim.lars.momentum": (0.9, _needs(
        lambda c: c.optim.name == "lars", "optim.name={c.optim.name!r}")),
    "optim.lars.trust_coefficient": (1e-3, _needs(
        lambda c: c.optim.name == "lars", "optim.name={c.optim.name!r}")),
    "optim.lars.momentum_buffer": ("updates", _needs(
        lambda c: c.optim.name == "lars", "optim.name={c.optim.name!r}")),
    "optim.lars.trust_ratio": ("update", _needs(
        lambda c: c.optim.name == "lars", "optim.name={c.optim.name!r}")),
    "optim.lars.clip": (False, _needs(
        lambda c: c.optim.name == "lars"
        and c.optim.lars.get("trust_ratio", "update") == "larc",
        "optim.name={c.optim.name!r}, optim.lars.trust_ratio="
        "{c.optim.lars.trust_ratio!r}")),
    "dataset.download": (False, _needs(
        lambda c: c.dataset.name != "image_folder",
        "an image folder is never downloaded")),
    "dataset.channels": (3, _needs(
        lambda c: c.dataset.name == "image_folder",
        "only image folders are converted (dataset.name="
        "{c.dataset.name!r})")),
    "dataset.generate": (False, _needs(
        lambda c: c.dataset.name == "image_folder",
        "only image folders are generated (dataset.name="
        "{c.dataset.name!r})")),
    "dataset.generate_kwargs": ({}, _needs(
        lambda c: c.dataset.name == "image_folder" and c.dataset.generate,
        "dataset.generate is off")),
    "distributed.coordinator_address": (None, _needs(
        lambda c: c.distributed.enabled, "distributed.enabled=False")),
    "distributed.num_processes": (None, _needs(
        lambda c: c.distributed.enabled, "distributed.enabled=False")),
    "distributed.process_id": (None, _needs(
        lambda c: c.distributed.enabled, "distributed.enabled=False")),
    "graph.alpha": (0.5, _needs(lambda c: c.graph.kind == "mixed", _GRAPH)),
    "graph.label_fraction": (1.0, _needs(
        lambda c: c.graph.kind in ("supervised", "mixed",
                                   "dataset_supervised"), _GRAPH)),
    "graph.normalize": (True, _needs(
        lambda c: c.graph.kind in ("supervised", "mixed"), _GRAPH)),
    "graph.knn_k": (16, _needs(lambda c: c.graph.kind == "dataset_knn",
                               _GRAPH)),
    "graph.knn_features": ("pca", _needs(
        lambda c: c.graph.kind == "dataset_knn", _GRAPH)),
    "graph.knn_pca_dim": (50, _needs(
        lambda c: c.graph.kind == "dataset_knn"
        and c.graph.knn_features == "pca",
        _GRAPH + " with graph.knn_features={c.graph.knn_features!r}")),
    "graph.supervised_per_node": (16, _needs(
        lambda c: c.graph.kind == "dataset_supervised", _GRAPH)),
    "graph.edge_list_path": ("", _needs(
        lambda c: c.graph.kind == "edge_list", _GRAPH)),
    "graph.edge_sampling": ("weighted", _needs(
        lambda c: c.graph.kind in _DATASET_GRAPHS, _GRAPH)),
}

# Per-view strength -> (its switch, the neutral strength). The jitter
# strengths are also neutral at 0 (no jitter), besides their default.
PER_VIEW_SWITCHES: dict[str, tuple] = {
    "brightness": ("jitter_prob", 0.4),
    "contrast": ("jitter_prob", 0.4),
    "saturation": ("jitter_prob", 0.0),
    "hue": ("jitter_prob", 0.0),
    "blur_sigma": ("blur_prob", (0.1, 2.0)),
    "blur_kernel_fraction": ("blur_prob", 0.1),
    "solarize_threshold": ("solarize_prob", 0.5),
    "erase_scale": ("erase_prob", (0.02, 0.2)),
}
# View ops that leave one-channel images unchanged (neutral value 0).
RGB_ONLY = ("saturation", "hue", "grayscale_prob")
# Datasets whose images are known to have one channel before they load.
ONE_CHANNEL = ("fashion_mnist_local", "fashion_mnist", "mnist", "kmnist",
               "emnist")


def _same(a, b) -> bool:
  """Equal values, tuples and lists alike, floats to 1e-9."""
  if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
  if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not (
      isinstance(a, bool) or isinstance(b, bool)):
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))
  if hasattr(a, "to_dict"):
    a = a.to_dict()
  return a == b


def _view_values(config, name) -> list:
  """The V per-view values of ``views.<name>`` (`ssljax.data.views`)."""
  from ssljax.data import views  # pylint: disable=import-outside-toplevel
  spec = views.view_spec(config.views)
  return [dict(ops)[name] for ops in spec.ops]


def _neutral(path: str, value) -> bool:
  """Whether ``value`` is a neutral value of field ``path``."""
  name = path.removeprefix("views.")
  if name in ("brightness", "contrast") and _same(value, 0.0):
    return True
  return _same(value, neutral_value(path))


def unread_reason(config, path: str) -> str | None:
  """Why the path of ``config`` does not read field ``path`` (None: it is
  read, or its reading does not depend on other fields).

  For a per-view strength the reason holds when no view that sets it to a
  non-neutral value has its switch on; for the RGB-only ops, when the
  images are known to have one channel."""
  if path in CONDITIONAL:
    return CONDITIONAL[path][1](config)
  name = path.removeprefix("views.")
  if path.startswith("views.") and name in RGB_ONLY and _one_channel(config):
    return (f"the images of {config.dataset.name!r} have one channel "
            "(this op changes colours only)")
  if path.startswith("views.") and name in PER_VIEW_SWITCHES:
    switch = PER_VIEW_SWITCHES[name][0]
    values = _view_values(config, name)
    switches = _view_values(config, switch)
    set_ = [v for v, x in enumerate(values) if not _neutral(path, x)]
    on = [v for v in set_ if switches[v] > 0]
    if set_ and not on:
      return (f"views.{switch} is 0 on the views that set it "
              f"({', '.join(map(str, set_))})")
    if not any(p > 0 for p in switches):
      return f"views.{switch} is 0 on every view"
  return None


def _one_channel(config) -> bool:
  d = config.dataset
  if d.name == "image_folder":
    return d.channels == 1
  return d.name in ONE_CHANNEL


def neutral_value(path: str):
  """The value an unread field must keep: `CONDITIONAL`'s, 0 for the
  RGB-only ops, the `PER_VIEW_SWITCHES` neutral strength."""
  if path in CONDITIONAL:
    return CONDITIONAL[path][0]
  name = path.removeprefix("views.")
  if name in PER_VIEW_SWITCHES:
    return PER_VIEW_SWITCHES[name][1]
  return 0.0


def unread_problems(config, defaults=None) -> list[str]:
  """One line per field that the path of ``config`` does not read and that
  is set to something else than its neutral value.

  Args:
    config: the run's config.
    defaults: optional, the same config as its file ships it (before
      command-line overrides). An unread field that keeps the file's value
      is accepted too: the user did not set it (e.g. ``--config.views.crop=
      none`` on a config file whose own crop range is not common's).

  Returns:
    lines such as ``config.views.saturation=0.4 is not read: views.
    jitter_prob is 0 on every view; leave it at 0.0 or change that``; []
    when every set field is read.
  """
  problems = []
  paths = list(CONDITIONAL) + [f"views.{n}" for n in
                               (*PER_VIEW_SWITCHES, *RGB_ONLY)]
  for path in dict.fromkeys(paths):
    node, _, leaf = path.rpartition(".")
    parent = config
    for part in filter(None, node.split(".")):
      parent = parent.get(part) if hasattr(parent, "get") else None
    if parent is None or leaf not in parent:
      continue
    value, neutral = parent[leaf], neutral_value(path)
    shipped = config_rules.value_at(defaults or {}, path, None)
    if shipped is not None and _same(value, shipped):
      continue
    if path.startswith("views.") and path.removeprefix("views.") in (
        *PER_VIEW_SWITCHES, *RGB_ONLY):
      if all(_neutral(path, x) for x in _view_values(config, leaf)):
        continue
    elif _neutral(path, value):
      continue
    why = unread_reason(config, path)
    if why is not None:
      keep = repr(neutral)
      if shipped is not None and not _same(shipped, neutral):
        keep += f" (or the config file's {shipped!r})"
      problems.append(f"config.{path}={value!r} is not read: {why}; leave it"
                      f" at {keep} or change that")
  return problems
