"""Every docstring example in the library runs and prints what it says."""

import doctest
import importlib
import pkgutil

import pytest

import ssljax

MODULES = sorted(m.name for m in pkgutil.walk_packages(ssljax.__path__, "ssljax.")
                 if m.name != "ssljax.main")  # main parses absl flags on import


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
  module = importlib.import_module(name)
  # Examples may use the names their package re-exports (e.g. a private
  # graphs module's example calling graphs.views_graph).
  package = importlib.import_module(name.rsplit(".", 1)[0])
  public = {k: getattr(package, k) for k in getattr(package, "__all__", [])}
  result = doctest.testmod(module, extraglobs=public,
                           optionflags=doctest.ELLIPSIS
                           | doctest.NORMALIZE_WHITESPACE)
  assert result.failed == 0, f"{result.failed} doctest failures in {name}"
