"""Shared fixtures: a tfds data dir with fashion_mnist_local prepared once."""

import pytest

from ssljax import data


@pytest.fixture(scope="session")
def fmnist_data_dir(tmp_path_factory):
  """Data dir holding fashion_mnist_local, prepared from Debian's IDX files."""
  if data.find_fashion_mnist_files() is None:
    pytest.fail("Fashion-MNIST IDX files missing: apt-get install -y "
                "dataset-fashion-mnist (the README's test command does)")
  data_dir = str(tmp_path_factory.mktemp("tfds"))
  data.load_split("fashion_mnist_local", "test[:1]", data_dir=data_dir)
  return data_dir


@pytest.fixture(autouse=True)
def _restore_jax_x64():
  """Experiments enable float64 globally when imported (their numbers are
  float64 checks); undo that after each test so later tests keep JAX's
  default float32 semantics."""
  import jax  # pylint: disable=import-outside-toplevel
  x64 = jax.config.jax_enable_x64
  yield
  jax.config.update("jax_enable_x64", x64)


@pytest.fixture
def x64():
  """float64 for one test (a context, so it does not leak to other tests)."""
  import jax  # pylint: disable=import-outside-toplevel
  with jax.enable_x64(True):
    yield


@pytest.fixture(scope="module")
def fast_compiles():
  """For modules of tiny programs, where XLA's optimisation passes cost more
  than they save: `pytestmark = pytest.mark.usefixtures("fast_compiles")`."""
  import jax  # pylint: disable=import-outside-toplevel
  previous = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", True)
  yield
  jax.config.update("jax_disable_most_optimizations", previous)
