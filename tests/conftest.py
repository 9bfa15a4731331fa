"""Shared fixtures and helpers.

Fixtures: a tfds data dir with fashion_mnist_local prepared once, float64
for one test, fast compiles, the persistent compilation cache's options
restored after a test. Helpers imported by test modules
(`from conftest import ...`): `lbfgs_minimize` (SciPy L-BFGS on a jax
function), `pad_bcoo` (BCOO padding slots) and `import_experiment`.
"""

import atexit
import functools
import os
import shutil
import tempfile

# One JAX compilation cache for the whole test session, shared with the
# subprocesses it starts (set before jax is imported): the many smoke runs
# of `python -m ssljax.main` compile the same programs, and a hit saved
# ~16 s of a 54 s smoke run here. A cache hit loads the same executable, so
# results (and bit-exactness checks) are unchanged. An outer setting wins.
# Only the process that makes the folder (not an xdist worker or a child
# that inherits the variable) makes it, and it removes it when it exits:
# each session's cache is about 50 MB.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _cache_dir = tempfile.mkdtemp(prefix="ssljax_test_jax_cache_")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache_dir
  atexit.register(functools.partial(shutil.rmtree, _cache_dir,
                                    ignore_errors=True))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")

import pytest  # noqa: E402

from ssljax import data  # noqa: E402


def lbfgs_minimize(fun, x0, *, ftol: float, gtol: float, maxiter: int):
  """L-BFGS-B (SciPy) on a jax scalar function of a flat float64 vector.

  Gradients by jax (jitted value_and_grad), history size 30. Returns
  (x, f(x)) at the optimiser's last iterate.
  """
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  import scipy.optimize  # pylint: disable=import-outside-toplevel
  vg = jax.jit(jax.value_and_grad(fun))

  def wrapped(x):
    v, g = vg(jnp.asarray(x))
    return float(v), np.asarray(g, dtype=np.float64)

  res = scipy.optimize.minimize(wrapped, np.asarray(x0), jac=True,
                                method="L-BFGS-B",
                                options={"maxiter": maxiter, "ftol": ftol,
                                         "gtol": gtol, "maxcor": 30})
  return res.x, res.fun


def import_experiment(name: str):
  """The module experiments/<name>.py (its folder goes on sys.path once).

  Experiments enable float64 when imported; `_restore_jax_x64` undoes that
  after the test that imported them.
  """
  import importlib  # pylint: disable=import-outside-toplevel
  import pathlib  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  folder = str(pathlib.Path(__file__).resolve().parents[1] / "experiments")
  if folder not in sys.path:
    sys.path.insert(0, folder)
  return importlib.import_module(name)


def pad_bcoo(g_sp, nse=64, dtype=None):
  """BCOO g with padding slots (index N, value 0) up to `nse` entries, so all
  test graphs share one compiled loss. dtype None means float64."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from jax.experimental import sparse  # pylint: disable=import-outside-toplevel
  dtype = jnp.float64 if dtype is None else dtype
  n, extra = g_sp.shape[0], nse - g_sp.nse
  return sparse.BCOO(
      (jnp.concatenate([g_sp.data.astype(dtype), jnp.zeros(extra, dtype)]),
       jnp.concatenate([g_sp.indices,
                        jnp.full((extra, 2), n, g_sp.indices.dtype)])),
      shape=g_sp.shape)


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


@pytest.fixture
def restore_compilation_cache():
  """Gives back the process's persistent-cache options after a test that
  turns the cache on elsewhere (`ssljax.compilation_cache.enable`), and
  resets JAX's cache object so later tests do not write into that test's
  folder."""
  # pylint: disable=import-outside-toplevel
  import jax
  from jax.experimental.compilation_cache import compilation_cache as jax_cc
  names = ("jax_compilation_cache_dir",
           "jax_persistent_cache_min_compile_time_secs",
           "jax_persistent_cache_min_entry_size_bytes")
  saved = {n: getattr(jax.config, n) for n in names}
  yield
  for n, v in saved.items():
    jax.config.update(n, v)
  jax_cc.reset_cache()


@pytest.fixture(scope="module")
def fast_compiles():
  """For modules of tiny programs, where XLA's optimisation passes cost more
  than they save: `pytestmark = pytest.mark.usefixtures("fast_compiles")`."""
  import jax  # pylint: disable=import-outside-toplevel
  previous = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", True)
  yield
  jax.config.update("jax_disable_most_optimizations", previous)
