"""Names and modules that moved keep working for one minor version and
warn in one line, naming the new home (docs/public_api.md's policy)."""

import importlib
import sys

import pytest

from ssljax import (data, graphs, inputs, methods, online_probe,
                    optimizers, probes, train_state)
from ssljax.evaluators import context
from ssljax.methods import ema, masks, queue

MOVED_MODULES = [("ssljax.evaluate", probes), ("ssljax.ema", ema),
                 ("ssljax.queue", queue), ("ssljax.masks", masks)]


@pytest.mark.parametrize("old, new", MOVED_MODULES)
def test_a_moved_module_warns_and_serves_the_new_one(old, new):
  sys.modules.pop(old, None)
  with pytest.warns(DeprecationWarning) as record:
    module = importlib.import_module(old)
  message = str(record[0].message)
  assert message == (f"{old} is deprecated, use {new.__name__} "
                     "(removed in 0.4)")
  assert module.__all__ == new.__all__
  for name in new.__all__:
    assert getattr(module, name) is getattr(new, name)


@pytest.mark.parametrize("module, old, new", [
    ("ssljax.inputs", "source_labels", data.source_labels),
    ("ssljax.methods", "GRAPH_KINDS", graphs.BATCH_GRAPH_KINDS),
    ("ssljax.methods", "DATASET_GRAPH_KINDS", graphs.DATASET_GRAPH_KINDS),
    ("ssljax.methods", "batch_graph", graphs.batch_graph),
    ("ssljax.evaluators.online_probe", "online_probe_update",
     online_probe.update),
    ("ssljax.evaluators.online_probe", "STATS_EPS", online_probe.STATS_EPS),
    ("ssljax.train_state", "create_probe_optimizer",
     online_probe.create_optimizer),
    ("ssljax.train_state", "online_probe_options", online_probe.options),
    ("ssljax.train_state", "create_optimizer", optimizers.create_optimizer),
    ("ssljax.train_state", "create_learning_rate_fn",
     optimizers.create_learning_rate_fn),
    ("ssljax.train", "create_probe_optimizer", online_probe.create_optimizer),
    ("ssljax.evaluators.context", "make_context", context.RunContext),
    # ssljax.train's re-exports, each now read from its home module.
    ("ssljax.train", "TrainState", train_state.TrainState),
    ("ssljax.train", "create_train_state", train_state.create_train_state),
    ("ssljax.train", "create_learning_rate_fn",
     optimizers.create_learning_rate_fn),
    ("ssljax.train", "create_optimizer", optimizers.create_optimizer),
    ("ssljax.train", "uses_labels", inputs.uses_labels),
    ("ssljax.train", "uses_edges", inputs.uses_edges),
    ("ssljax.train", "dataset_graph", inputs.dataset_graph),
    ("ssljax.train", "known_labels", inputs.known_labels),
    ("ssljax.train", "extract_features", probes.extract_features),
])
def test_a_moved_name_warns_and_is_the_same_object(module, old, new):
  with pytest.warns(DeprecationWarning, match=f"{module}.{old} is deprecated"):
    got = getattr(importlib.import_module(module), old)
  assert got is new


def test_an_unknown_name_is_still_an_attribute_error():
  with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
    getattr(methods, "no_such_name")


def test_moved_names_stay_out_of_all():
  """A name served only for compatibility is not part of the module's API."""
  import ssljax.train  # pylint: disable=import-outside-toplevel
  assert not {"TrainState", "create_train_state", "create_optimizer",
              "known_labels", "extract_features"} & set(ssljax.train.__all__)
