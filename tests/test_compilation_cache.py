"""ssljax.compilation_cache: where the persistent cache goes, and that a
compiled program is written there."""

import os

import jax
import jax.numpy as jnp

from ssljax import compilation_cache


def test_off_with_empty_string(restore_compilation_cache):
  before = jax.config.jax_compilation_cache_dir
  assert compilation_cache.enable("") is None
  assert compilation_cache.enable(None) is None
  assert jax.config.jax_compilation_cache_dir == before


def test_auto_respects_xdg_cache_home(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  assert compilation_cache.default_dir() == os.path.join(
      str(tmp_path), "ssljax", "jax")
  monkeypatch.setenv("XDG_CACHE_HOME", "")
  assert compilation_cache.default_dir() == os.path.join(
      os.path.expanduser("~"), ".cache", "ssljax", "jax")


def test_auto_keeps_a_directory_the_process_set(tmp_path,
                                                restore_compilation_cache):
  jax.config.update("jax_compilation_cache_dir", str(tmp_path / "mine"))
  assert compilation_cache.enable("auto") == str(tmp_path / "mine")


def test_a_compiled_program_is_written(tmp_path, restore_compilation_cache):
  # This process has compiled programs before with no cache (the full
  # suite): enable must still take effect.
  jax.jit(lambda x: x * 7.654321)(jnp.arange(3.0)).block_until_ready()
  cache_dir = compilation_cache.enable(str(tmp_path / "cache"))
  assert cache_dir == str(tmp_path / "cache")
  assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
  # A program this process has not compiled before (the constant makes
  # its HLO unique to this test).
  jax.jit(lambda x: jnp.sin(x) * 1.2345678)(jnp.arange(7.0)).block_until_ready()
  assert os.listdir(cache_dir)


def test_threefry_gpu_kernel_is_what_a_gpu_program_calls():
  """Lowered for CUDA (no GPU needed), a random draw becomes one call of
  JAX's threefry kernel once the option is set, and element-wise XLA
  operations before."""
  name = "jax_threefry_gpu_kernel_lowering"
  saved = getattr(jax.config, name)
  draw = jax.jit(lambda key: jax.random.normal(key, (64,)))

  def cuda_text():
    return draw.trace(jax.random.key(0)).lower(
        lowering_platforms=("cuda",)).as_text()

  try:
    jax.config.update(name, False)
    assert "cu_threefry2x32" not in cuda_text()
    assert compilation_cache.use_threefry_gpu_kernel()
    assert "cu_threefry2x32" in cuda_text()
    cpu = draw(jax.random.key(0))  # and the CPU draw is unchanged
    jax.config.update(name, False)
    assert jnp.array_equal(cpu, draw(jax.random.key(0)))
  finally:
    jax.config.update(name, saved)
