"""benchmarks/first_epoch.py: the weight conversion, the effects table, and,
where torch is installed (the ``bench`` extra), ssljax's train step against
the PyTorch job's on the same weights and views.

The conversion is held to the network's own layout (every parameter and
statistic of the main job's VICReg network, with its shape) and to the
convolution itself: PyTorch's OIHW kernel on NCHW images equals the
converted HWIO kernel in flax's Conv on NHWC images.
"""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from benchmarks import first_epoch  # noqa: E402


def torch_layout_arrays(rng):
  """state_dict-like arrays of the PyTorch job's model (names and shapes)."""
  arrays = {}
  for index, (cin, cout) in zip((0, 4, 8, 12),
                                ((1, 16), (16, 32), (32, 64), (64, 512))):
    arrays[f"init/0.{index}.weight"] = rng.normal(size=(cout, cin, 3, 3))
    for name in ("weight", "bias", "running_mean", "running_var"):
      arrays[f"init/0.{index + 1}.{name}"] = rng.normal(size=(cout,))
  arrays["init/1.0.weight"] = rng.normal(size=(512, 512))
  for name in ("weight", "bias", "running_mean", "running_var"):
    arrays[f"init/1.1.{name}"] = rng.normal(size=(512,))
  arrays["init/1.3.weight"] = rng.normal(size=(512, 512))
  arrays["init/1.3.bias"] = rng.normal(size=(512,))
  return {k: v.astype(np.float32) for k, v in arrays.items()}


def test_converted_weights_fill_the_main_jobs_network():
  _, _, state, _ = first_epoch.ssljax_job(0)
  arrays = torch_layout_arrays(np.random.default_rng(0))
  converted = first_epoch.with_weights(state, arrays)
  shapes = lambda tree: jax.tree.map(lambda a: a.shape, tree)
  assert shapes(converted.params) == shapes(state.params)
  assert shapes(converted.method_state) == shapes(state.method_state)
  # Every array lands somewhere: the leaves are the inputs, none left over.
  leaves = jax.tree.leaves((converted.params, converted.method_state))
  assert len(leaves) == len(arrays)
  assert sorted(float(np.sum(a)) for a in leaves) == pytest.approx(
      sorted(float(np.sum(a)) for a in arrays.values()), rel=1e-5)
  dense = converted.params["projector"]["Dense_1"]["kernel"]
  np.testing.assert_array_equal(dense, arrays["init/1.3.weight"].T)


def test_converted_conv_kernel_computes_pytorchs_convolution():
  rng = np.random.default_rng(1)
  oihw = rng.normal(size=(8, 3, 3, 3)).astype(np.float32)
  nchw = rng.normal(size=(2, 3, 10, 10)).astype(np.float32)
  # PyTorch's Conv2d(3, 8, 3, padding=1, bias=False) is this correlation.
  theirs = jax.lax.conv_general_dilated(
      nchw, oihw, (1, 1), ((1, 1), (1, 1)),
      dimension_numbers=("NCHW", "OIHW", "NCHW"))
  arrays = {"init/0.0.weight": oihw}
  kernel = first_epoch.flax_variables(
      {**torch_layout_arrays(rng), **arrays}, "init")[0]["encoder"][
          "Conv_0"]["kernel"]
  conv = nn.Conv(8, (3, 3), use_bias=False)
  ours = conv.apply({"params": {"kernel": kernel}},
                    jnp.asarray(nchw.transpose(0, 2, 3, 1)))
  np.testing.assert_allclose(ours, np.asarray(theirs).transpose(0, 2, 3, 1),
                             rtol=1e-5, atol=1e-5)


def test_effects_are_paired_by_seed_and_the_other_piece():
  records = []
  for seed, base in ((0, 0.80), (1, 0.82), (2, 0.81)):
    for views in ("ssljax", "pytorch"):
      for init in ("ssljax", "pytorch"):
        # PyTorch's views add 0.01 (+ a seed-dependent 0.001·seed), its
        # weights nothing.
        probe = base + (0.01 + 0.001 * seed if views == "pytorch" else 0)
        records.append({"seed": seed, "views": views, "init": init,
                        "probe": probe, "knn": base})
  table = first_epoch.crossed_table(records)
  assert "probe, PyTorch's views − ssljax's: +0.0110 (standard error " \
         "0.0004, 6 pairs)" in table
  assert "probe, PyTorch's initial weights − ssljax's: +0.0000" in table
  assert "knn, PyTorch's views − ssljax's: +0.0000" in table


def test_train_step_equals_the_pytorch_jobs_on_its_weights_and_views(
    tmp_path):
  pytest.importorskip(
      "torch", reason="torch is not installed (the optional bench extra)")
  path = str(tmp_path / "dump.npz")
  first_epoch.dump(0, path, steps=3, train=True, num_workers=0)
  arrays = np.load(path)
  _, _, state, step = first_epoch.ssljax_job(0)
  state = first_epoch.with_weights(state, arrays)
  ours = []
  for views in arrays["views"]:
    state, metrics = step(state, first_epoch.torch_views(views))
    ours.append(float(metrics["loss"]))
  np.testing.assert_allclose(ours, arrays["losses"], rtol=1e-5)
