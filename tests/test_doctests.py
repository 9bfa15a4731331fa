"""Every docstring example in the library runs and prints what it says.

Examples print rounded floats, and the last printed digit (or the sign of a
zero: ``-0.0``) depends on the CPU, the BLAS and the summation order. The
checker below therefore compares the numbers in an example's output with a
stated tolerance, one unit in the last digit the example prints, and treats
``-0.0`` as ``0.0``; everything that is not a number must match as text.
"""

import doctest
import importlib
import pkgutil
import re

import pytest

import ssljax

MODULES = sorted(m.name for m in pkgutil.walk_packages(ssljax.__path__, "ssljax.")
                 if m.name != "ssljax.main")  # main parses absl flags on import

OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
_NUMBER = re.compile(r"-?\d+\.\d*(?:[eE][-+]?\d+)?|-?\d+(?:[eE][-+]?\d+)?")
# A relative tolerance on top of the last-digit one, for outputs printed in
# full precision (no rounding in the example).
RTOL = 1e-6


def _last_digit_unit(text: str) -> float:
  """One unit in the last printed digit of a number written as ``text``."""
  mantissa, _, exponent = text.lower().partition("e")
  decimals = len(mantissa.partition(".")[2])
  return 10.0 ** (-decimals + (int(exponent) if exponent else 0))


def numbers_match(want: str, got: str) -> bool:
  """True when ``got`` equals ``want`` up to the numbers in them.

  Non-numeric text must be equal after whitespace normalisation; integers
  must be equal; each pair of floats may differ by one unit in the last digit printed in ``want`` plus
  ``RTOL`` relative, so ``-0.0`` matches ``0.0`` and ``0.5514`` matches
  ``0.5513``.
  """
  split = lambda s: _NUMBER.split(" ".join(s.split()))
  if split(want) != split(got):
    return False
  wants, gots = _NUMBER.findall(" ".join(want.split())), _NUMBER.findall(
      " ".join(got.split()))
  if len(wants) != len(gots):
    return False
  for w, g in zip(wants, gots):
    a, b = float(w), float(g)
    if not any(c in w for c in ".eE"):  # an integer: counts, shapes, indices
      if a != b:
        return False
    elif abs(a - b) > _last_digit_unit(w) * (1 + 1e-9) + RTOL * abs(a):
      return False
  return True


class NumericOutputChecker(doctest.OutputChecker):
  """doctest's checker, falling back to :func:`numbers_match`."""

  def check_output(self, want, got, optionflags):
    if super().check_output(want, got, optionflags):
      return True
    return numbers_match(want, got)


def run_doctests(module) -> doctest.TestResults:
  """Runs ``module``'s examples with the numeric checker; returns the counts."""
  package = importlib.import_module(module.__name__.rsplit(".", 1)[0])
  # Examples may use the names their package re-exports (e.g. a private
  # graphs module's example calling graphs.views_graph).
  globs = {k: getattr(package, k) for k in getattr(package, "__all__", [])}
  globs.update(vars(module))
  runner = doctest.DocTestRunner(checker=NumericOutputChecker(),
                                 optionflags=OPTIONS)
  for test in doctest.DocTestFinder().find(module, module.__name__,
                                           globs=globs):
    runner.run(test)
  return runner.summarize(verbose=False)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
  result = run_doctests(importlib.import_module(name))
  assert result.failed == 0, f"{result.failed} doctest failures in {name}"


@pytest.mark.parametrize("want,got,same", [
    ("0.0", "-0.0", True),                      # sign of zero
    ("[1.0, 0.0]", "[1.0, -0.0]", True),
    ("0.5514", "0.5513", True),                 # last printed digit
    ("0.5514", "0.5512", False),                # two units off
    ("-1.3863", "1.3863", False),               # a real sign change
    ("2.114", "2.1140000001", True),
    ("(6, 2)", "(6, 3)", False),                # integers are exact
    ("(True, [True, False], 3)", "(True, [True, True], 3)", False),
    ("[0.0, 0.0]", "[0.0, 0.0, 0.0]", False),   # shape differs
])
def test_numeric_checker(want, got, same):
  assert numbers_match(want, got) is same
