"""A shipped method config with the evaluators of the methods benchmark.

    python -m ssljax.main --config benchmarks/methods_config.py:lejepa:cnn ...

The argument is ``<config>`` or ``<config>:<variant>``: a file of
``configs/`` (without ``.py``) and its variant. The config is the shipped
one, unchanged, except for ``config.evals``: only the evaluators of the
table of `benchmarks/methods.py` are kept (``KEPT``), each run once, after
the last step, so that a 1-epoch run on a CPU spends its time training.
The evaluators do not touch training (the online probe trains in the train
step whatever evaluators run), so the trained encoder is the shipped
config's.
"""

import importlib

# The evaluators the methods table reports (benchmarks/methods.py).
KEPT = ("probe", "knn", "random_init_probe", "raw_pixel_probe", "rankme",
        "online_probe")


def get_config(arg: str | None = None):
  """The config ``configs/<name>.py`` (variant optional) with only the
  evaluators of ``KEPT``, each after the last step only.

  Args:
    arg: "<name>" or "<name>:<variant>", e.g. "vicreg", "lejepa:cnn".

  Raises:
    ValueError: no argument, or a name that is not a file of configs/.
  """
  if not arg:
    raise ValueError("give a config name, e.g. methods_config.py:vicreg")
  name, _, variant = arg.partition(":")
  if not name.isidentifier() or name in ("common", "pal_human"):
    raise ValueError(f"not a method config of configs/: {name!r}")
  module = importlib.import_module(f"configs.{name}")
  config = module.get_config(variant or None)
  for key in list(config.evals.keys()):
    if key not in KEPT:
      del config.evals[key]
    elif config.evals[key] is not None and "every_steps" in config.evals[key]:
      config.evals[key].every_steps = None
  return config
