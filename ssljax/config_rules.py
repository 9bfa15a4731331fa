"""Rules for config fields, and the fields that were renamed.

A rule is a function ``rule(value) -> None | str``: None when the value is
allowed, else a phrase saying what the value must be ("an integer >= 1").
The constructors here (`integer`, `real`, `one_of`, ...) build them;
`check_fields` applies a table of rules to a config and returns one line
per bad or missing field.

`RENAMED` maps each old dotted path of a config to a one-line hint about
its new place; `renamed_problems` lists the old paths a config still has.
"""

from collections.abc import Callable, Mapping
import numbers
from typing import Any

__all__ = ["Rule", "integer", "real", "boolean", "one_of", "string", "pair",
           "positive_ints", "positive_reals", "widths", "nonempty_widths",
           "anything", "per_view", "check_fields", "RENAMED",
           "renamed_problems"]

Rule = Callable[[Any], "str | None"]


def _is_int(v) -> bool:
  return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v) -> bool:
  return isinstance(v, numbers.Real) and not isinstance(v, bool)


# --------------------------------------------------------------------- rules --
def integer(lo=None, *, none_ok=False) -> Rule:
  """An integer (not a bool) >= ``lo`` (no bound: None); None allowed when
  ``none_ok``."""
  def check(v):
    if v is None and none_ok:
      return None
    if not _is_int(v) or (lo is not None and v < lo):
      what = "an integer" if lo is None else f"an integer >= {lo}"
      return what + (" or None" if none_ok else "")
    return None
  return check


def real(lo=None, hi=None, *, lo_open=False, hi_open=False) -> Rule:
  """A real number (int or float, not a bool, not NaN) in the interval from
  ``lo`` to ``hi`` (None: unbounded), each end open when ``*_open``."""
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


def boolean(v) -> str | None:
  """True or False (not 0 / 1)."""
  return None if isinstance(v, bool) else "True or False"


def one_of(*names) -> Rule:
  """One of ``names`` (compared with ==)."""
  def check(v):
    return None if v in names else "one of " + ", ".join(map(repr, names))
  return check


def string(*, empty_ok=True, none_ok=False) -> Rule:
  """A str (non-empty unless ``empty_ok``); None allowed when ``none_ok``."""
  def check(v):
    if v is None and none_ok:
      return None
    if not isinstance(v, str) or (not empty_ok and not v):
      return "a non-empty string" if not empty_ok else "a string"
    return None
  return check


def pair(lo, hi) -> Rule:
  """A tuple or list (a, b) of numbers with lo <= a <= b <= hi."""
  def check(v):
    ok = (isinstance(v, (tuple, list)) and len(v) == 2
          and all(_is_real(x) for x in v) and lo <= v[0] <= v[1] <= hi)
    return None if ok else f"a pair (a, b) with {lo} <= a <= b <= {hi}"
  return check


def positive_ints(v) -> str | None:
  """A non-empty tuple or list of integers >= 1."""
  ok = (isinstance(v, (tuple, list)) and len(v) >= 1
        and all(_is_int(x) and x >= 1 for x in v))
  return None if ok else "a non-empty tuple of integers >= 1"


def positive_reals(v) -> str | None:
  """A non-empty tuple or list of numbers > 0."""
  ok = (isinstance(v, (tuple, list)) and len(v) >= 1
        and all(_is_real(x) and x > 0 for x in v))
  return None if ok else "a non-empty tuple of numbers > 0"


def widths(v) -> str | None:
  """Layer widths: a tuple or list of integers > 0; empty allowed (no
  layers, e.g. no predictor)."""
  ok = isinstance(v, (tuple, list)) and all(_is_int(x) and x > 0 for x in v)
  return None if ok else "a tuple of layer widths > 0 (empty: no layers)"


def nonempty_widths(v) -> str | None:
  """Layer widths with at least one layer: integers > 0."""
  ok = (isinstance(v, (tuple, list)) and len(v) >= 1
        and all(_is_int(x) and x > 0 for x in v))
  return None if ok else "a non-empty tuple of layer widths > 0"


def anything(v) -> None:
  """Any value (a field checked elsewhere, or free-form)."""
  del v


def per_view(rule: Rule, *, ranges=False) -> Rule:
  """``rule`` for one value, or for each entry of a tuple of values (one per
  view; the count is checked against V elsewhere). With ``ranges`` a single
  value is itself a pair, so a tuple of pairs is the per-view form. The
  returned rule has attributes ``per_view`` (True) and ``ranges``."""
  def check(v):
    many = isinstance(v, (tuple, list)) and (
        not ranges or (len(v) > 0 and isinstance(v[0], (tuple, list))))
    values = v if many else [v]
    why = next((w for w in map(rule, values) if w is not None), None)
    if why is None and not (many and len(v) == 0):
      return None
    return f"{why or 'non-empty'} (or a tuple with one such value per view)"
  check.per_view, check.ranges = True, ranges
  return check


# -------------------------------------------------------------------- checks --
_MISSING = object()


def value_at(config, path: str, default=_MISSING):
  """The value at dotted ``path`` of a ConfigDict or mapping, or
  ``default`` where it is absent."""
  node = config
  for part in path.split("."):
    if not isinstance(node, Mapping) and not hasattr(node, "keys"):
      return default
    if part not in node:
      return default
    node = node[part]
  return node


def where_set(config, rules: Mapping[str, Rule]) -> dict[str, Rule]:
  """The entries of ``rules`` (dotted path -> rule) whose path ``config``
  sets: the optional fields of a method, checked where a config sets them
  and absent (their old behaviour) elsewhere."""
  return {path: rule for path, rule in rules.items()
          if value_at(config, path, _MISSING) is not _MISSING}


def check_fields(config, rules: Mapping[str, Rule]) -> list[str]:
  """Applies ``rules`` (dotted path -> rule) to ``config``.

  Args:
    config: a ConfigDict (or nested mappings).
    rules: for each dotted path (no "config." prefix), its rule.

  Returns:
    one line per problem, in the order of ``rules``: ``config.<path> is
    missing`` for an absent field, ``config.<path>=<value!r>: must be
    <what>`` for a value its rule rejects; [] when every field passes.
  """
  problems = []
  for path, rule in rules.items():
    value = value_at(config, path)
    if value is _MISSING:
      problems.append(f"config.{path} is missing")
      continue
    why = rule(value)
    if why is not None:
      problems.append(f"config.{path}={value!r}: must be {why}")
  return problems


# ------------------------------------------------------------------ renames --
# Old dotted path -> where the field went (one line, after "was ").
RENAMED: dict[str, str] = {
    "views.num_views": "renamed config.views.num_global",
    "views.num_local_views": "renamed config.views.num_local",
    "eval": "renamed config.eval_inputs",
    "eval.batch_size": "renamed config.eval_inputs.batch_size",
    "eval.crop_fraction": "renamed config.eval_inputs.crop_fraction",
    "eval.view_samples": "renamed config.eval_inputs.view_samples",
    "eval.baselines": "renamed config.eval_inputs.baselines",
    "online_probe": ("replaced by the entry config.evals.online_probe "
                     "(delete it to train without the probe)"),
    "online_probe.enabled": ("replaced by the presence of the entry "
                             "config.evals.online_probe (delete it to train "
                             "without the probe)"),
    "online_probe.learning_rate":
        "renamed config.evals.online_probe.learning_rate",
    "online_probe.weight_decay":
        "renamed config.evals.online_probe.weight_decay",
    "optim.momentum": "renamed config.optim.lars.momentum",
    "optim.trust_coefficient": "renamed config.optim.lars.trust_coefficient",
    "model.head": ("replaced by config.model.dino_head (DINO; the other "
                   "methods' head is config.model.projector)"),
    "model.head_kwargs": "renamed config.model.dino_head",
    "graph.augment_edges": (
        "removed: the edge endpoints get the config.views of every path "
        "(for raw endpoints set views.crop='none' and the op "
        "probabilities, e.g. views.flip_prob, to 0)"),
}


def renamed_problems(config) -> list[str]:
  """One line per old field path still in ``config``.

  A renamed group (``eval``, ``online_probe``) gives one line for the group,
  not one per field inside it.

  Returns:
    lines such as ``config.views.num_views was renamed
    config.views.num_global``, in `RENAMED`'s order; [] when none is left.
  """
  present = [p for p in RENAMED if value_at(config, p) is not _MISSING]
  return [f"config.{p} was {RENAMED[p]}" for p in present
          if p.rpartition(".")[0] not in present]
