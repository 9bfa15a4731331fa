"""Short I-JEPA proxy runs: ``configs/ijepa.py:<variant>`` with only RankMe.

    python -m ssljax.main --config benchmarks/ijepa_proxy_config.py:cpu \\
        --workdir runs/q0 [--config.KEY=VALUE ...]

The shipped config, unchanged but for: every evaluator except ``rankme``
removed, RankMe (Garrido et al. 2023, arXiv 2210.02885) every 25 steps,
and the run stopped after 100 steps of a 300-step schedule
(``optim.schedule_scale`` 3: the lr, weight-decay and EMA schedules are
those of a 300-step run). Used for the proxies of docs/guide/ijepa_mae.md
("A CPU variant of I-JEPA"); `benchmarks/ijepa_collapse.py probe` then
probes the checkpoint.
"""

import importlib


def get_config(arg: str | None = None):
  """The proxy config of ``configs/ijepa.py`` variant ``arg`` (default
  "cpu").

  Raises:
    ValueError: an unknown variant (configs/ijepa.py).
  """
  c = importlib.import_module("configs.ijepa").get_config(arg or "cpu")
  for key in list(c.evals.keys()):
    if key != "rankme":
      del c.evals[key]
  c.evals.rankme.every_steps = 25
  c.num_steps = 100
  c.optim.schedule_scale = 3.0
  c.checkpoint_every_steps = 100
  return c
