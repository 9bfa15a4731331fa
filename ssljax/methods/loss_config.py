"""The ``config.loss`` vocabulary of a method: its forms and their
hyper-parameters.

A method offers loss forms (``Method.FORMS``, {form name: loss callable}); the
keyword-only parameters of a form's callable are the ``config.loss`` fields
that form accepts, named as in `ssljax.losses`. Each method declares the rules
of its own hyper-parameters (``Method.HPARAM_RULES``, rules of
`ssljax.config_rules`); a field it does not list is a real >= 0 when its name
ends in "weight" and unchecked otherwise. `ssljax.methods.base.Method` uses
these functions for its default ``config_fields`` and ``check_config``.
"""

import difflib
import inspect

from ssljax import config_rules

__all__ = ["keyword_hparams", "loss_fields", "loss_key_problems",
           "loss_hparams", "two_view_problem"]


def keyword_hparams(fn) -> set:
  """Names of the keyword-only parameters of a loss form (its
  hyper-parameters), through `functools.wraps` wrappers."""
  sig = inspect.signature(inspect.unwrap(fn))
  return {n for n, p in sig.parameters.items() if p.kind == p.KEYWORD_ONLY}


def loss_fields(config, forms: dict, rules: dict) -> dict:
  """Rules of ``loss.form`` and of the ``loss.*`` hyper-parameters present in
  ``config`` that the chosen form accepts.

  Args:
    config: the run's ConfigDict (reads ``config.loss``).
    forms: {form name: callable whose keyword-only parameters are the form's
      hyper-parameters}.
    rules: {hyper-parameter name: rule} of the method; a name not in it gets
      `ssljax.config_rules.real` (>= 0) if it ends in "weight", else
      `ssljax.config_rules.anything`.

  Returns:
    {dotted path: rule}, ``"loss.form"`` included.
  """
  fields = {"loss.form": config_rules.one_of(*forms)}
  fn = forms.get(config.loss.get("form"))
  accepted = keyword_hparams(fn) if fn is not None else set()
  for key in config.loss.keys():
    if key in accepted:
      default = (config_rules.real(0.0) if key.endswith("weight")
                 else config_rules.anything)
      fields[f"loss.{key}"] = rules.get(key, default)
  return fields


def loss_key_problems(config, name: str, forms: dict) -> list:
  """One line per ``config.loss`` key the chosen form does not accept (with
  the near names it does), or one line if the form is not one of ``forms``.

  Args:
    config: the run's ConfigDict.
    name: the method's name, for the messages.
    forms: as in `loss_fields`.
  """
  form = config.loss.form
  if form not in forms:
    return [f"config.loss.form={form!r}: method {name!r} offers "
            f"{', '.join(map(repr, forms))}"]
  accepted = keyword_hparams(forms[form])
  problems = []
  for key in config.loss.keys():
    if key != "form" and key not in accepted:
      near = difflib.get_close_matches(key, sorted(accepted), n=2, cutoff=0.6)
      hint = (f"; did you mean "
              f"{' or '.join(repr('config.loss.' + m) for m in near)}?"
              if near else "")
      problems.append(
          f"config.loss.{key} is not a hyper-parameter of method {name!r} "
          f"(form {form!r}); it accepts "
          f"{', '.join(sorted(accepted)) or 'none'}{hint}")
  return problems


def loss_hparams(config) -> dict:
  """``config.loss`` without "form", as keyword arguments of the form."""
  return {k: v for k, v in config.loss.to_dict().items() if k != "form"}


def two_view_problem(config, what: str) -> list:
  """[one line] when ``what`` (e.g. "method 'mocov3'") needs V = 2 views and
  the config has another count (``views.num_global + views.num_local``),
  else []."""
  num_views = config.views.num_global + config.views.num_local
  if num_views == 2:
    return []
  return [f"{what} needs 2 views (views.num_global + views.num_local), got "
          f"{num_views}"]
