"""The official multi-crop forward (`ssljax.methods.single_network.
forward_multi_crop`): the encoder takes the crops of one resolution as one
batch, the head all crops as one batch, so BatchNorm normalises over those
rows; SwAV's ``ResNet.forward`` (Caron et al. 2020, arXiv 2006.09882) and
DINO's ``MultiCropWrapper`` (Caron et al. 2021, arXiv 2104.14294), whose
teacher takes its two global crops as one batch. Checked against the
network applied by hand to the concatenated crops (view-major, as the
official ``torch.cat``): BatchNorm's statistics do not depend on the row
order.
"""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax import methods, train
from ssljax.methods import single_network

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # configs/
from configs import dino, swav  # noqa: E402

pytestmark = pytest.mark.usefixtures("fast_compiles")
B = 16


def _by_hand(net, params, stats, groups):
  """h of each group through the encoder (one batch per group), then the
  head on all of them: (h (V·B, D), head outputs, statistics after)."""
  hs = []
  for group in groups:
    h, updates = net.apply({"params": params, "batch_stats": stats},
                           jnp.concatenate(group), train=True,
                           mutable=["batch_stats"], method=net.represent)
    stats = updates["batch_stats"]
    hs.append(h)
  out, updates = net.apply({"params": params, "batch_stats": stats},
                           jnp.concatenate(hs), train=True,
                           mutable=["batch_stats"], method=net.head)
  return jnp.concatenate(hs), out, updates["batch_stats"]


def _student_matches_by_hand(config, seed):
  """Builds the method of ``config`` and checks its forward on 2 global
  and 2 local crops against `_by_hand`; returns (method, params, state,
  views, outputs)."""
  method = methods.build(config)
  params, state = method.init(jax.random.key(0),
                              train.batch_spec(config, (28, 28, 1)))
  rng = np.random.default_rng(seed)
  views = tuple(jnp.asarray(rng.uniform(size=(B, s, s, 1)), jnp.float32)
                for s in (28, 28, 14, 14))
  outs, stats = method.forward(params, state["batch_stats"], views)
  h, want, stats_want = _by_hand(method.network, params,
                                 state["batch_stats"], (views[:2],
                                                        views[2:]))
  for i, out in enumerate(outs):
    np.testing.assert_allclose(out["z"], want["z"][i * B:(i + 1) * B],
                               atol=2e-5)
    np.testing.assert_allclose(out["h"], h[i * B:(i + 1) * B], atol=2e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-5),
               stats, stats_want)
  return method, params, state, views, outs


def test_swav_multi_crop_forward_is_the_official_grouping():
  # swav.batch_norm_views "multi_crop" (configs/swav.py): the encoder's
  # BatchNorm over the crops of one resolution as one batch (view-major
  # here, as the official torch.cat), the projector's over all crops.
  config = swav.get_config("smoke")
  config.views.num_local = 2
  config.views.local_size = 14
  config.batch_size = B
  assert config.swav.batch_norm_views == "multi_crop"
  _, params, state, views, outs = _student_matches_by_hand(config, seed=1)

  # Each view on its own (the solo-learn recipes' forward) is another
  # forward: BatchNorm's batches differ.
  config.swav.batch_norm_views = "per_view"
  per_view, _ = methods.build(config).forward(params, state["batch_stats"],
                                              views)
  assert float(jnp.max(jnp.abs(per_view[0]["z"] - outs[0]["z"]))) > 1e-3


def test_multi_crop_forward_refuses_views_of_different_batch_sizes():
  config = swav.get_config("smoke")
  method = methods.build(config)
  params, state = method.init(jax.random.key(0),
                              train.batch_spec(config, (28, 28, 1)))
  views = (jnp.zeros((4, 28, 28, 1)), jnp.zeros((3, 28, 28, 1)))
  with pytest.raises(ValueError, match="batch sizes"):
    single_network.forward_multi_crop(
        method.network.apply,
        lambda s: {"params": params, "batch_stats": s},
        state["batch_stats"], views,
        encoder_method=method.network.represent,
        head_method=method.network.head)


def test_dino_student_and_teacher_multi_crop_forward():
  config = dino.get_config("smoke")
  config.views.local_size = 14
  config.batch_size = B
  assert config.dino.batch_norm_views == "multi_crop"
  method, params, state, views, _ = _student_matches_by_hand(config, seed=2)

  # The teacher: its two global crops as one batch.
  teacher = state["teacher"]
  t_GxBxK, new_state = method.teacher_forward(state, views)
  _, want, stats_want = _by_hand(method.teacher_network, teacher["params"],
                                 teacher["batch_stats"], (views[:2],))
  np.testing.assert_allclose(t_GxBxK.reshape(2 * B, -1), want["z"],
                             atol=2e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-5),
               new_state["teacher"]["batch_stats"], stats_want)

  # One view at a time is another forward (BatchNorm's batches differ).
  config.dino.batch_norm_views = "per_view"
  per_view = methods.build(config)
  t_per_view, _ = per_view.teacher_forward(state, views)
  assert float(jnp.max(jnp.abs(t_per_view - t_GxBxK))) > 1e-4
