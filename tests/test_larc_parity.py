"""ssljax's LARS with ``lars.trust_ratio = "larc"`` against the optimiser
classes it stands for, run in PyTorch on the same weights and gradients:

- apex's ``LARC`` around ``torch.optim.SGD`` (SwAV's main_swav.py:
  ``LARC(SGD(momentum=0.9, weight_decay=wd), trust_coefficient=0.001,
  clip=False)`` on every parameter), and its clipping mode;
- solo-learn's ``LARS`` (solo/utils/lars.py) with its SwAV recipes'
  ``clip_lr: True`` and ``exclude_bias_n_norm: True``.

Runs where torch is importable and the checkouts are given by
``SSLJAX_APEX_PEER`` (holding apex/parallel/LARC.py, which apex removed in
its commit cb65b8e) and ``SSLJAX_SOLO_LEARN_PEER`` (holding
solo/utils/lars.py); skipped elsewhere, CI included. tests/test_optimizers.py
holds the same rule against a NumPy transcription, in CI.
"""

import importlib.util
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from ssljax import optimizers

APEX = os.environ.get("SSLJAX_APEX_PEER", "")
SOLO = os.environ.get("SSLJAX_SOLO_LEARN_PEER", "")
APEX_FILE = os.path.join(APEX, "apex", "parallel", "LARC.py")
SOLO_FILE = os.path.join(SOLO, "solo", "utils", "lars.py")

pytestmark = pytest.mark.slow

LRS = [0.0, 0.05, 0.1, 0.3, 0.2, 0.1, 0.05, 0.01]  # warm-up, then decay


def _load(path, name):
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _problem(seed=0):
  """Parameters (a kernel, a bias, a BatchNorm scale, a zero-initialised
  kernel that the ratio leaves alone at first) and 8 steps of gradients."""
  rng = np.random.default_rng(seed)
  params = {"conv": {"kernel": rng.normal(size=(3, 3, 2, 4))},
            "dense": {"kernel": rng.normal(size=(6, 5)) * 0.1,
                      "bias": rng.normal(size=(5,))},
            "norm": {"scale": 1.0 + rng.normal(size=(4,)) * 0.1},
            "head": {"kernel": np.zeros((5, 3))}}
  grads = [jax.tree.map(lambda p: rng.normal(size=p.shape)
                        * (0.01 if p.ndim == 1 else 1.0), params)
           for _ in LRS]
  return params, grads


def _ssljax(params, grads, *, weight_decay, eta, clip, mask):
  optim = ml_collections.ConfigDict(dict(
      name="lars", learning_rate=1.0, weight_decay=weight_decay,
      clip_grad_norm=0.0, weight_decay_mask=mask,
      lars=dict(momentum=0.9, trust_coefficient=eta, trust_ratio="larc",
                clip=clip, momentum_buffer="gradients")))
  tx = optimizers.create_optimizer(optim, lambda k: jnp.asarray(LRS)[k])
  p = jax.tree.map(jnp.asarray, params)
  state = tx.init(p)
  for g in grads:
    updates, state = tx.update(jax.tree.map(jnp.asarray, g), state, p)
    p = optax.apply_updates(p, updates)
  return jax.tree.map(np.asarray, p)


def _torch(params, grads, make_optimizer):
  torch = pytest.importorskip("torch")
  leaves, treedef = jax.tree.flatten(params)
  tensors = [torch.nn.Parameter(torch.tensor(x, dtype=torch.float64))
             for x in leaves]
  optimizer = make_optimizer(tensors)
  for step, g in enumerate(grads):
    for group in optimizer.param_groups:
      group["lr"] = LRS[step]
    for t, x in zip(tensors, jax.tree.leaves(g)):
      t.grad = torch.tensor(x, dtype=torch.float64)
    optimizer.step()
  return jax.tree.unflatten(treedef, [t.detach().numpy() for t in tensors])


def _assert_same(ours, theirs, start):
  for (path, a), b, s in zip(jax.tree_util.tree_leaves_with_path(ours),
                             jax.tree.leaves(theirs), jax.tree.leaves(start)):
    moved = np.linalg.norm(b - s)
    assert moved > 0, path
    assert np.linalg.norm(a - b) / moved < 1e-12, path


@pytest.mark.skipif(not os.path.isfile(APEX_FILE),
                    reason="set SSLJAX_APEX_PEER to an NVIDIA/apex checkout "
                           "with apex/parallel/LARC.py")
@pytest.mark.parametrize("clip", [False, True])
def test_larc_equals_apexs_larc_around_sgd(clip):
  torch = pytest.importorskip("torch")
  larc = _load(APEX_FILE, "apex_larc").LARC
  params, grads = _problem()
  weight_decay, eta = 1e-2, 1e-3
  with jax.enable_x64(True):
    ours = _ssljax(params, grads, weight_decay=weight_decay, eta=eta,
                   clip=clip, mask="all")
  theirs = _torch(params, grads, lambda ts: larc(
      torch.optim.SGD(ts, lr=LRS[0], momentum=0.9,
                      weight_decay=weight_decay),
      trust_coefficient=eta, clip=clip))
  _assert_same(ours, theirs, params)


@pytest.mark.skipif(not os.path.isfile(SOLO_FILE),
                    reason="set SSLJAX_SOLO_LEARN_PEER to a solo-learn "
                           "checkout")
@pytest.mark.parametrize("clip,mask", [(True, "kernels"), (False, "all")])
def test_larc_equals_solo_learns_lars(clip, mask):
  lars = _load(SOLO_FILE, "solo_lars").LARS
  params, grads = _problem(1)
  weight_decay, eta = 1e-2, 0.02
  with jax.enable_x64(True):
    ours = _ssljax(params, grads, weight_decay=weight_decay, eta=eta,
                   clip=clip, mask=mask)
  theirs = _torch(params, grads, lambda ts: lars(
      ts, lr=LRS[0], momentum=0.9, weight_decay=weight_decay, eta=eta,
      clip_lr=clip, exclude_bias_n_norm=mask == "kernels"))
  _assert_same(ours, theirs, params)
