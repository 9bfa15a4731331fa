"""What ``benchmarks/step_parity.py``'s MoCo v3 and BYOL comparisons share:
ssljax's run of a method with a predictor and a momentum teacher, the main
job's small CNN written in PyTorch, and the conversion of the encoder and
MLP heads (every parameter and BatchNorm statistic) to PyTorch names.

The CNN (`ssljax.models.SmallCNN`, configs/common.py's encoder): per stage
a 3 x 3 convolution without bias (SAME padding), BatchNorm and ReLU, the
stages after the first preceded by 2 x 2 average pooling, then the global
average. In PyTorch it is `TorchCNN`, whose ``fc`` is the layer that the
official builders replace by their projector.
"""

from __future__ import annotations

import numpy as np

from parity_common import BATCH, drift, ssljax_setup


def ssljax_run(config, steps: int, seed: int = 0, float64: bool = False,
               prepare=None):
  """ssljax's train_step from its initial state on the views of each step
  (``prepare``: a function of the initial TrainState returning the one to
  start from, e.g. a leaf set as the official model starts it).

  Returns:
    (initial (params, method_state), views per step (tuple of float arrays
    (B, 28, 28, 1)), losses, the learning rate and teacher momentum each
    step used (NaN without a teacher), final (params, method_state)); in
    float64 throughout with
    ``float64`` (parameters, state, views and computation; needs
    ``jax_enable_x64``).
  """
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  run = ssljax_setup(config, steps, seed=seed, float64=float64,
                     image_shape=(28, 28, 1))
  lr_fn, state = run.lr_fn, run.state
  if prepare is not None:
    state = prepare(state)
  initial = jax.device_get((state.params, state.method_state))
  dtype, step, make_views = run.dtype, run.step, run.make_views
  images = run.images
  views, losses, momenta = [], [], []
  for k in range(steps):
    batch = {"images": images[k * BATCH:(k + 1) * BATCH]}
    v = make_views(batch, jax.random.fold_in(jax.random.key(seed + 1), k))
    v = tuple(np.asarray(x, dtype) for x in v)
    views.append(v)
    state, metrics = step(state, {"ready_views": v})
    losses.append(float(metrics["loss"]))
    momenta.append(float(metrics.get("teacher_momentum", float("nan"))))
  count = lambda k: jnp.asarray(k, jnp.int32)  # the jitted step's count
  schedules = {"lr": [float(lr_fn(count(k))) for k in range(steps)],
               "momentum": momenta}
  return initial, views, losses, schedules, jax.device_get(
      (state.params, state.method_state))


def torch_cnn_class():
  """`TorchCNN`: ssljax's SmallCNN (``downsample="avg"``, BatchNorm) in
  PyTorch, ``TorchCNN(channels, in_chans, num_classes)``; ``features``
  holds the stages, ``fc`` a Linear from the representation to
  ``num_classes`` (replaced by the official builders)."""
  from torch import nn  # pylint: disable=import-outside-toplevel

  class TorchCNN(nn.Module):
    """x (B, C, H, W) -> fc(global average of the last stage)."""

    def __init__(self, channels, in_chans=1, num_classes=1000):
      super().__init__()
      layers, cin = [], in_chans
      for i, width in enumerate(channels):
        if i:
          layers.append(nn.AvgPool2d(2))
        layers += [nn.Conv2d(cin, width, 3, padding=1, bias=False),
                   nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
        cin = width
      self.features = nn.Sequential(*layers)
      self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
      return self.fc(self.features(x).mean(dim=(2, 3)))

  return TorchCNN


class Leaves:
  """ssljax's (params, batch_stats) of one network as torch tensors, each
  leaf taken once: `unused` lists the leaves no torch name took, so a
  conversion that forgets one fails."""

  def __init__(self, params: dict, stats: dict):
    self.params, self.stats = params, stats
    self.taken = set()

  def get(self, kind: str, *path):
    self.taken.add((kind,) + path)
    node = self.params if kind == "params" else self.stats
    for p in path:
      node = node[p]
    return np.asarray(node)

  def unused(self) -> list:
    out = []
    for kind, tree in (("params", self.params), ("stats", self.stats)):
      def walk(node, path, kind=kind):
        if isinstance(node, dict):
          for k, v in node.items():
            walk(v, path + (k,))
        elif (kind,) + path not in self.taken:
          out.append("/".join((kind,) + path))
      walk(tree, ())
    return out


def _bn(leaves: Leaves, prefix: str, part: str, name: str, affine=True,
        step: int = 0) -> dict:
  out = {}
  if affine:
    out[f"{prefix}.weight"] = leaves.get("params", part, name, "scale")
    out[f"{prefix}.bias"] = leaves.get("params", part, name, "bias")
  out[f"{prefix}.running_mean"] = leaves.get("stats", part, name, "mean")
  out[f"{prefix}.running_var"] = leaves.get("stats", part, name, "var")
  out[f"{prefix}.num_batches_tracked"] = np.asarray(step, np.int64)
  return out


def cnn_tensors(leaves: Leaves, prefix: str, num_stages: int,
                step: int = 0) -> dict:
  """The encoder's leaves as `TorchCNN.features` tensors under ``prefix``
  (conv kernels (3, 3, in, out) -> (out, in, 3, 3))."""
  out, index = {}, 0
  for i in range(num_stages):
    if i:
      index += 1  # the pooling
    kernel = leaves.get("params", "encoder", f"Conv_{i}", "kernel")
    out[f"{prefix}.{index}.weight"] = kernel.transpose(3, 2, 0, 1)
    out.update(_bn(leaves, f"{prefix}.{index + 1}", "encoder",
                   f"BatchNorm_{i}", step=step))
    index += 3
  return out


def mlp_tensors(leaves: Leaves, part: str, prefix: str, num_layers: int, *,
                hidden_bias: bool, last_bias: bool, last_bn: bool,
                step: int = 0) -> dict:
  """A `ssljax.models.Projector` ``part`` as an ``nn.Sequential`` of
  (Linear, BatchNorm1d, ReLU) per hidden layer, a Linear and, with
  ``last_bn``, a BatchNorm1d(affine=False), under ``prefix``. A PyTorch
  hidden Linear with a bias (``hidden_bias``) gets zeros: ssljax's has
  none, the BatchNorm after it removes it."""
  out = {}
  for j in range(num_layers):
    kernel = leaves.get("params", part, f"Dense_{j}", "kernel")
    out[f"{prefix}.{3 * j}.weight"] = kernel.T
    last = j == num_layers - 1
    if last and last_bias:
      out[f"{prefix}.{3 * j}.bias"] = leaves.get("params", part,
                                                 f"Dense_{j}", "bias")
    elif not last and hidden_bias:
      out[f"{prefix}.{3 * j}.bias"] = np.zeros(kernel.shape[1], kernel.dtype)
    if not last:
      out.update(_bn(leaves, f"{prefix}.{3 * j + 1}", part, f"BatchNorm_{j}",
                     step=step))
    elif last_bn:
      out.update(_bn(leaves, f"{prefix}.{3 * j + 1}", part, f"BatchNorm_{j}",
                     affine=False, step=step))
  return out


def cnn_mlp_tensors(params: dict, stats: dict, cnn_prefix: str,
                    num_stages: int, heads) -> dict:
  """One network's every leaf as PyTorch tensors: the CNN under
  ``cnn_prefix`` (`cnn_tensors`), then each head of ``heads``, tuples
  (ssljax part, torch prefix, number of layers, `mlp_tensors` keywords).

  Raises:
    ValueError: a leaf of ``params`` or ``stats`` that no name took.
  """
  leaves = Leaves(params, stats)
  state = cnn_tensors(leaves, cnn_prefix, num_stages)
  for part, prefix, num_layers, kwargs in heads:
    state.update(mlp_tensors(leaves, part, prefix, num_layers, **kwargs))
  unused = leaves.unused()
  if unused:
    raise ValueError(f"ssljax leaves without a PyTorch name: {unused}")
  return state


def split(state: dict, keys) -> dict:
  """The tensors of ``keys`` grouped: "parameters" (weights and biases)
  and the BatchNorm "running means" and "running variances"."""
  groups = {"parameters": [], "bn_means": [], "bn_vars": []}
  for k in keys:
    if k.endswith("num_batches_tracked"):
      continue
    group = ("bn_means" if k.endswith("running_mean") else
             "bn_vars" if k.endswith("running_var") else "parameters")
    groups[group].append(k)
  return groups


def unbiased_running_vars(state: dict, start: dict, counts: dict,
                          updates: int, momentum: float = 0.9) -> dict:
  """``state`` with each BatchNorm running variance as PyTorch keeps it.

  flax's BatchNorm averages the biased batch variance, PyTorch's the
  unbiased one (n/(n − 1) times it, n the values per channel); after U
  updates from r₀ the running variance is m^U r₀ + Σ (1 − m) m^j v_j, so
  the PyTorch value is m^U r₀ + n/(n − 1) (r − m^U r₀).

  Args:
    state: PyTorch-named tensors (ssljax's, converted).
    start: the same names at step 0.
    counts: running_var name -> n.
    updates: U, forward passes in train mode since step 0.
    momentum: m, the weight of the old average (flax's 0.9).
  """
  out = dict(state)
  for k, n in counts.items():
    decayed = momentum ** updates * np.asarray(start[k], np.float64)
    out[k] = decayed + n / (n - 1) * (np.asarray(state[k], np.float64)
                                      - decayed)
  return out


def compare_tensors(ours: dict, official: dict, reference: dict,
                    start: dict, keys, counts: dict | None = None,
                    updates: int = 0) -> tuple[dict, dict]:
  """(ssljax's drift from the official run, the rounding reference's) per
  group of `split` over ``keys``, and, with ``counts`` (running_var name ->
  values per channel), the running variances again with ssljax's made
  unbiased after ``updates`` forward passes (`unbiased_running_vars`)."""
  parts = split(official, keys)
  tensors = {p: drift(ours, official, start, k) for p, k in parts.items()}
  rounding = {p: drift(reference, official, start, k)
              for p, k in parts.items()}
  if counts:
    name = "bn_vars, ssljax's made unbiased"
    tensors[name] = drift(unbiased_running_vars(ours, start, counts, updates),
                          official, start, parts["bn_vars"])
    rounding[name] = rounding["bn_vars"]
  return tensors, rounding


def cnn_counts(prefix: str, channels, size: int, batch: int) -> dict:
  """running_var name -> values per channel of `cnn_tensors`' BatchNorms
  (batch × the stage's map, 2 x 2 pooling flooring the side)."""
  out, index = {}, 0
  for i in range(len(channels)):
    if i:
      index += 1
      size //= 2
    out[f"{prefix}.{index + 1}.running_var"] = batch * size * size
    index += 3
  return out


def mlp_counts(prefix: str, num_layers: int, last_bn: bool,
               batch: int) -> dict:
  """running_var name -> values per channel (the batch) of `mlp_tensors`'
  BatchNorms."""
  out = {f"{prefix}.{3 * j + 1}.running_var": batch
         for j in range(num_layers - 1)}
  if last_bn:
    out[f"{prefix}.{3 * (num_layers - 1) + 1}.running_var"] = batch
  return out
