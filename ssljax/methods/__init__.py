"""SSL methods by name: one module per method, one protocol.

``config.method`` names a module ``ssljax.methods.<name>`` that defines one
class ``Method`` (a subclass of `ssljax.methods.base.Method`): it owns its
networks, its trainable parameters and its state (EMA teacher, queue,
centre), and its loss call; the train step only calls ``init``, ``loss``,
``after_update`` and ``representation`` (see `ssljax.methods.base` for the
protocol and the batch contract). ``build(config)`` makes the method of a
run; ``config_problems(config)`` runs its config checks.

Methods: joint-embedding losses of the embeddings and a graph (vicreg,
simclr, barlow_twins, spectral_contrastive, frossl, wmse;
`ssljax.methods.joint_embedding`), the teacher–student / predictor
methods (byol, simsiam, mocov3, dino, nnclr), SwAV (swav: Sinkhorn-Knopp
codes over prototypes), LeJEPA (lejepa: invariance plus SIGReg, no teacher) and the masked-token ViT methods (ijepa, mae;
`ssljax.methods.masked_vit`).

Adding a method = one module here (the registry finds it) + its config +
its tests + one docs entry, and its loss in `ssljax.losses` or its network
in `ssljax.models` when it brings a new one (docs/guide/new_method.md).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from ssljax import config_rules, deprecation
from ssljax.methods.base import BatchSpec, LossAux, Method

__all__ = ["BatchSpec", "LossAux", "Method", "available", "get", "build",
           "config_fields", "config_problems"]

__getattr__ = deprecation.moved_names(__name__, {
    "GRAPH_KINDS": "ssljax.graphs.BATCH_GRAPH_KINDS",
    "DATASET_GRAPH_KINDS": "ssljax.graphs.DATASET_GRAPH_KINDS",
    "batch_graph": "ssljax.graphs.batch_graph",
})

def available() -> list[str]:
  """Sorted method names: the modules of this package that define a class
  ``Method`` (a subclass of `ssljax.methods.base.Method`); the shared parts
  (``base``, ``joint_embedding``, ``ema``, ``masks``, ...) define none."""
  return list(_method_modules())


@functools.cache
def _method_modules() -> tuple:
  names = []
  for info in pkgutil.iter_modules(__path__):
    if info.name.startswith("_"):
      continue
    module = importlib.import_module(f"{__name__}.{info.name}")
    cls = getattr(module, "Method", None)
    if isinstance(cls, type) and issubclass(cls, Method) and cls is not Method:
      names.append(info.name)
  return tuple(sorted(names))


def get(name: str) -> type:
  """The ``Method`` class of method ``name``.

  Raises:
    ValueError: an unknown name (listing the available ones).
  """
  if name not in available():
    raise ValueError(f"unknown method {name!r}; expected one of "
                     f"{', '.join(map(repr, available()))}")
  return importlib.import_module(f"ssljax.methods.{name}").Method


def build(config) -> Method:
  """The method of a run: ``get(config.method)(config)``.

  Raises:
    ValueError: an unknown ``config.method``.
  """
  return get(config.method)(config)


def config_fields(config) -> dict:
  """Dotted path -> rule of the fields ``config.method`` reads beyond the
  common ones ({} for an unknown method)."""
  if config.get("method") not in available():
    return {}
  return {"method": config_rules.anything,
          **get(config.method).config_fields(config)}


def config_problems(config) -> list[str]:
  """One line per problem of the method's own fields: an unknown method,
  a missing field or one that breaks its rule, then the method's cross-field
  checks (only when every field passes its rule)."""
  name = config.get("method")
  if name not in available():
    return [f"config.method={name!r}: must be one of "
            f"{', '.join(map(repr, available()))}"]
  cls = get(name)
  if "loss" not in config or "form" not in config.loss:
    return ["config.loss.form is missing (a method config must set it)"]
  problems = [p + f" (method {name!r} reads it)" if p.endswith("missing")
              else p
              for p in config_rules.check_fields(config,
                                                 cls.config_fields(config))]
  return problems or cls.check_config(config)
