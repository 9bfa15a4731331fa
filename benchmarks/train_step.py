"""Train-step speed: JAX vs PyTorch eager, vs jit matmul, vs the input pipeline.

    python benchmarks/train_step.py               # full table (~10 min on 2 busy cores)
    python benchmarks/train_step.py --rounds 3    # quicker, noisier
    python benchmarks/train_step.py --no_torch    # JAX columns only

Every variant below is timed in the same process, interleaved: each round
runs every variant once (``--steps`` calls after warm-up) in turn, and the
table reports the median over ``--rounds`` rounds, so a change of machine
load hits all variants alike. Only the ratios are meant to be compared; the
``uptime`` load averages before and after are printed with them.

Variants (default config: batch B = 256 samples x V = 2 views, AdamW):
* JAX train steps (``ssljax.train.sharded_train_step`` on one device) of the
  default small CNN (16-32-64-512, avg pooling) and of an MLP encoder
  784-512-512, both with the 512-512 projector, for VICReg and SimCLR
  (two-view forms), in float32 and with ``model.dtype = "bfloat16"``; and the
  CNN with its ``nn.avg_pool`` (reduce_window) replaced by a reshape-mean
  2x2 pooling, the same numbers (``--no_pool_variant`` skips it).
* The same models, losses and optimiser in PyTorch eager (``torch`` is not a
  dependency of ssljax; without it the column is skipped with a message).
* A jit float32 (and bfloat16) 2048^3 matmul: this machine's dense peak.
* The host part of the input pipeline, ``ssljax.data.train_batches`` over
  the in-memory split (fixed-shape images: the host gathers rows; crops and
  the other view ops run inside the train step, so they are in its time).

FLOPs per step come from XLA's cost analysis of the compiled step
(``jitted.lower(...).compile().cost_analysis()["flops"]``: every op of the
step, optimiser included); the hand count of the model's convolutions and
matmuls (forward 2·MACs, backward twice that, no input gradient for the
first layer) is printed next to it as a check. Torch GFLOP/s use the XLA
count of the same step.
"""

import argparse
import functools
import os
import subprocess
import sys
import time

# The configs/ package sits at the repository root, next to benchmarks/.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # tf.data cost-model spam
# torch's OpenMP threads spin while they wait; on a shared machine the spinning
# competes with the other processes and made its MLP step 18x slower here.
# Passive waiting is the fair setting (read once, when torch loads libgomp).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import jax
import jax.numpy as jnp
import numpy as np

from configs import simclr as simclr_config
from configs import vicreg as vicreg_config
from ssljax import data, methods, optimizers, train, train_state
from ssljax.models import encoders

MLP_FEATURES = (512, 512)


# ------------------------------------------------------------------ configs --
def _config(method: str, encoder: str, dtype: str):
  """The default config of ``method`` with ``encoder`` ("cnn" | "mlp")."""
  module = {"vicreg": vicreg_config, "simclr": simclr_config}[method]
  c = module.get_config()
  c.model.dtype = dtype
  if encoder == "mlp":
    c.model.encoder = "mlp"
    c.model.encoder_kwargs = {"features": MLP_FEATURES}
  return c


def _model_flops(config, image_hw=(28, 28)) -> float:
  """Hand count of conv/matmul FLOPs of one train step (all V views)."""
  b, v = config.batch_size, config.views.num_global
  proj = (*((config.model.encoder_kwargs.channels[-1],)
            if config.model.encoder == "cnn" else (MLP_FEATURES[-1],)),
          *config.model.projector)
  layers = []  # (forward MACs per sample, is first layer)
  if config.model.encoder == "cnn":
    h, cin = image_hw[0], 1
    for i, cout in enumerate(config.model.encoder_kwargs.channels):
      h = h if i == 0 else h // 2
      layers.append(h * h * 9 * cin * cout)
      cin = cout
  else:
    widths = (image_hw[0] * image_hw[1], *MLP_FEATURES)
    layers += [a * c for a, c in zip(widths[:-1], widths[1:])]
  layers += [a * c for a, c in zip(proj[:-1], proj[1:])]
  # fwd 2·MACs; bwd: weight grad 2·MACs + input grad 2·MACs (not layer 0).
  flops = sum(6 * m for m in layers) - 2 * layers[0]
  return float(flops * b * v)


# --------------------------------------------------------------- jax steps --
def _xla_flops(compiled) -> float:
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost.get("flops", float("nan")))


def jax_step(config, views: np.ndarray):
  """(run one step and block, XLA flops) for ``config`` on a fixed batch."""
  mesh = train.make_mesh(jax.devices()[:1])
  method = methods.build(config)
  tx = optimizers.create_optimizer(config.optim, lambda step: 1e-3)
  state = train_state.create_train_state(
      method, tx, jax.random.key(0), train.batch_spec(config, views.shape[2:]))
  step_fn = train.sharded_train_step(config, mesh)
  batch = {"ready_views": jax.device_put(views)}  # views already augmented
  compiled = step_fn.lower(state, batch).compile()
  box = [state]

  def run():
    box[0], metrics = compiled(box[0], batch)
    jax.block_until_ready(metrics)
  run.compiled = compiled  # for benchmarks/profile_step.py (its HLO)
  return run, _xla_flops(compiled)


def _reshape_mean_pool(x, window_shape, strides=None, padding="VALID"):
  """``nn.avg_pool`` for 2x2/stride-2/VALID only, as a reshape and a mean
  (the same numbers; the suspected-faster form on XLA:CPU)."""
  assert tuple(window_shape) == (2, 2) and tuple(strides) == (2, 2)
  assert padding == "VALID"
  b, height, width, c = x.shape
  h, w = height // 2, width // 2
  return x[:, :2 * h, :2 * w].reshape(b, h, 2, w, 2, c).mean(axis=(2, 4))


def jax_step_reshape_pool(config, views):
  """``jax_step`` with SmallCNN's ``nn.avg_pool`` (a reduce_window) swapped
  for ``_reshape_mean_pool`` while the step is traced and compiled."""
  original = encoders.nn.avg_pool
  encoders.nn.avg_pool = _reshape_mean_pool  # looked up at trace time
  try:
    return jax_step(config, views)
  finally:
    encoders.nn.avg_pool = original


def matmul(n: int, dtype):
  """(run one jit n x n x n matmul and block, flops)."""
  a = jax.random.normal(jax.random.key(0), (n, n), dtype)
  b = jax.random.normal(jax.random.key(1), (n, n), dtype)
  fn = jax.jit(jnp.matmul).lower(a, b).compile()
  return (lambda: jax.block_until_ready(fn(a, b))), 2.0 * n**3


# ----------------------------------------------------------------- pipeline --
def pipeline(images, config, steps: int):
  """(run ``steps`` host batches of train_batches, 0): a fresh iterator per
  call (its first batch is drawn before timing)."""
  source = data.ArraySource(images)
  spec = data.view_spec(config.views)
  counter = [0]

  def make():
    counter[0] += 1
    it = data.train_batches(source, batch_size=config.batch_size, seed=0,
                            spec=spec, start_step=counter[0] * (steps + 1),
                            num_steps=steps + 1)
    next(it)
    return it
  return make


# -------------------------------------------------------------- torch steps --
def torch_step(config, views: np.ndarray):
  """(run one PyTorch eager step) of the same model, loss and optimiser."""
  import torch
  from torch import nn
  torch.manual_seed(0)

  def bn_relu(layer, width, bn):
    return [layer, bn(width), nn.ReLU()]

  if config.model.encoder == "cnn":
    mods, cin = [], 1
    for i, cout in enumerate(config.model.encoder_kwargs.channels):
      if i > 0:
        mods.append(nn.AvgPool2d(2))
      mods += bn_relu(nn.Conv2d(cin, cout, 3, padding=1, bias=False), cout,
                      nn.BatchNorm2d)
      cin = cout
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
  else:
    mods, cin = [nn.Flatten()], 28 * 28
    for cout in MLP_FEATURES:
      mods += bn_relu(nn.Linear(cin, cout, bias=False), cout, nn.BatchNorm1d)
      cin = cout
  for cout in config.model.projector[:-1]:
    mods += bn_relu(nn.Linear(cin, cout, bias=False), cout, nn.BatchNorm1d)
    cin = cout
  mods.append(nn.Linear(cin, config.model.projector[-1]))
  net = nn.Sequential(*mods)
  decay = [p for p in net.parameters() if p.ndim > 1]
  rest = [p for p in net.parameters() if p.ndim <= 1]
  opt = torch.optim.AdamW([{"params": decay, "weight_decay": 1e-4},
                           {"params": rest, "weight_decay": 0.0}], lr=1e-3)
  loss_fn = functools.partial(
      _torch_vicreg if config.method == "vicreg" else _torch_nt_xent, torch)
  x1, x2 = (torch.from_numpy(np.ascontiguousarray(v.transpose(0, 3, 1, 2)))
            for v in views)

  def run():
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(net(x1), net(x2))  # BatchNorm per view, as in ssljax
    loss.backward()
    opt.step()
  return run


def _torch_vicreg(torch, z1, z2, eps=1e-4):
  """VICReg.forward of facebookresearch/vicreg (weights 25, 25, 1)."""
  n, k = z1.shape
  inv = torch.nn.functional.mse_loss(z1, z2)
  z1, z2 = z1 - z1.mean(0), z2 - z2.mean(0)
  std = lambda z: torch.sqrt(z.var(0) + eps)
  var = (torch.relu(1 - std(z1)).mean() + torch.relu(1 - std(z2)).mean()) / 2
  off = lambda c: (c.pow(2).sum() - c.diagonal().pow(2).sum()) / k
  cov = off(z1.T @ z1 / (n - 1)) + off(z2.T @ z2 / (n - 1))
  return 25 * inv + 25 * var + cov


def _torch_nt_xent(torch, z1, z2, temperature=0.5):
  """NT-Xent over the 2N rows, self-similarity masked."""
  n = z1.shape[0]
  u = torch.nn.functional.normalize(torch.cat([z1, z2]), dim=1)
  s = u @ u.T / temperature
  s = s.masked_fill(torch.eye(2 * n, dtype=torch.bool), float("-inf"))
  target = torch.cat([torch.arange(n, 2 * n), torch.arange(n)])
  return torch.nn.functional.cross_entropy(s, target)


# ------------------------------------------------------------------- timing --
def _time_calls(run, steps: int) -> float:
  """Seconds per call of ``run`` over ``steps`` calls."""
  start = time.perf_counter()
  for _ in range(steps):
    run()
  return (time.perf_counter() - start) / steps


def _time_pipeline(make, steps: int) -> float:
  it = make()
  start = time.perf_counter()
  for _ in range(steps):
    next(it)
  return (time.perf_counter() - start) / steps


def interleaved(variants: dict, rounds: int, steps: int) -> dict:
  """name -> median over rounds of seconds per call; variants run in turn."""
  for name, v in variants.items():  # warm-up (compile, caches, oneDNN)
    (_time_pipeline if v["pipeline"] else _time_calls)(v["run"], 1)
  times = {name: [] for name in variants}
  for r in range(rounds):
    for name, v in variants.items():
      fn = _time_pipeline if v["pipeline"] else _time_calls
      times[name].append(fn(v["run"], v.get("steps", steps)))
    print(f"round {r + 1}/{rounds} done  ({_load()})", flush=True)
  return {name: float(np.median(t)) for name, t in times.items()}


def _load() -> str:
  return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


# --------------------------------------------------------------------- main --
def _try_torch(threads: int):
  try:
    import torch
  except ImportError:
    print("torch is not installed: skipping the PyTorch column (install the "
          "CPU wheel with `.venv/bin/pip install torch==2.13.0 --index-url "
          "https://download.pytorch.org/whl/cpu`).")
    return None
  torch.set_num_threads(threads)
  print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
  return torch


def build_variants(args, images, views):
  """name -> {"run", "pipeline", "flops", "model_flops", "config"}."""
  variants = {}
  cases = [(m, e) for e in ("cnn", "mlp") for m in ("vicreg", "simclr")]
  for method, encoder in cases:
    for dtype in ("float32", "bfloat16"):
      if dtype == "bfloat16" and method != "vicreg":
        continue  # bf16 measured on VICReg only: the loss part is small
      c = _config(method, encoder, dtype)
      run, flops = jax_step(c, views)
      variants[f"jax {encoder} {method} {dtype}"] = dict(
          run=run, pipeline=False, flops=flops, model_flops=_model_flops(c),
          config=c)
  if not args.no_pool_variant:
    c = _config("vicreg", "cnn", "float32")
    run, flops = jax_step_reshape_pool(c, views)
    variants["jax cnn vicreg float32 reshape pool"] = dict(
        run=run, pipeline=False, flops=flops, model_flops=_model_flops(c),
        config=c)
  if args.torch is not None:
    for method, encoder in cases:
      c = _config(method, encoder, "float32")
      variants[f"torch {encoder} {method} float32"] = dict(
          run=torch_step(c, views), pipeline=False, config=c)
  for dtype in (jnp.float32, jnp.bfloat16):
    run, flops = matmul(args.matmul_n, dtype)
    variants[f"matmul {args.matmul_n}^3 {jnp.dtype(dtype).name}"] = dict(
        run=run, pipeline=False, flops=flops)
  c = vicreg_config.get_config()  # crops, flips, jitter 0.4, erasing 0.5
  variants["pipeline default views"] = dict(
      run=pipeline(images, c, args.pipeline_steps), pipeline=True, config=c,
      steps=args.pipeline_steps)
  c = vicreg_config.get_config()
  c.views.brightness, c.views.contrast, c.views.erase_prob = 0.0, 0.0, 0.0
  variants["pipeline crops+flips only"] = dict(
      run=pipeline(images, c, args.pipeline_steps), pipeline=True, config=c,
      steps=args.pipeline_steps)
  return variants


def print_table(variants, seconds, matmul_name):
  """Absolute numbers, then the ratios the issue asks for."""
  views_per_step = 256 * 2
  peak = variants[matmul_name]["flops"] / seconds[matmul_name]
  print(f"\n{'variant':40s} {'ms/call':>9s} {'steps/s':>8s} {'views/s':>8s}"
        f" {'GFLOP/s':>8s} {'XLA GFLOP':>9s} {'hand GFLOP':>10s}")
  for name, v in variants.items():
    t = seconds[name]
    flops = v.get("flops") or variants.get(
        name.replace("torch", "jax"), {}).get("flops", float("nan"))
    hand = v.get("model_flops", float("nan"))
    per_step = views_per_step if not name.startswith("matmul") else float("nan")
    print(f"{name:40s} {1e3 * t:9.1f} {1 / t:8.2f} {per_step / t:8.0f}"
          f" {flops / t / 1e9:8.1f} {flops / 1e9:9.2f} {hand / 1e9:10.2f}")

  print(f"\nratios (peak = {matmul_name}: {peak / 1e9:.1f} GFLOP/s)")
  print(f"{'case':26s} {'jax/torch':>9s} {'% of peak':>9s} {'bf16 x':>7s}"
        f" {'pipe/step img/s':>15s}")
  pipe = seconds["pipeline default views"]
  for enc in ("cnn", "mlp"):
    for method in ("vicreg", "simclr"):
      key = f"jax {enc} {method} float32"
      t = seconds[key]
      torch_t = seconds.get(f"torch {enc} {method} float32")
      speedup = f"{torch_t / t:9.2f}" if torch_t else f"{'-':>9s}"
      pct = 100 * variants[key]["flops"] / t / peak
      bf = seconds.get(f"jax {enc} {method} bfloat16")
      bf_s = f"{t / bf:7.2f}" if bf else f"{'-':>7s}"
      print(f"{enc + ' ' + method:26s} {speedup} {pct:9.1f} {bf_s}"
            f" {t / pipe:15.2f}")
  other = seconds.get("jax cnn vicreg float32 reshape pool")
  if other:
    print(f"\ncnn vicreg step, nn.avg_pool / reshape-mean pooling: "
          f"{seconds['jax cnn vicreg float32'] / other:.2f}x")
  f32, bf16 = (seconds[k] for k in variants if k.startswith("matmul"))
  print(f"matmul bf16 speed-up over f32: {f32 / bf16:.2f}x")
  print("pipeline default / crops+flips only: "
        f"{pipe / seconds['pipeline crops+flips only']:.2f}x time per batch")


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--steps", type=int, default=3, help="calls per round")
  parser.add_argument("--pipeline_steps", type=int, default=6)
  parser.add_argument("--matmul_n", type=int, default=2048)
  parser.add_argument("--threads", type=int, default=os.cpu_count())
  parser.add_argument("--no_torch", action="store_true")
  parser.add_argument("--no_pool_variant", action="store_true")
  args = parser.parse_args()
  args.torch = None if args.no_torch else _try_torch(args.threads)
  print(f"jax {jax.__version__}, devices {jax.devices()}, "
        f"{os.cpu_count()} CPUs\nload before: {_load()}")
  images, _ = data.load_split("fashion_mnist_local", "train")
  c = vicreg_config.get_config()
  # One batch of augmented views (the step variants time the network and
  # loss on these "ready" views, as the PyTorch step does).
  spec = data.view_spec(c.views)
  first = next(data.train_batches(data.ArraySource(images),
                                  batch_size=c.batch_size, seed=0, spec=spec,
                                  num_steps=1))
  views = np.stack(jax.device_get(data.device_views(
      {"images": first["images"]}, jax.random.key(0), spec)))
  variants = build_variants(args, images, views)
  seconds = interleaved(variants, args.rounds, args.steps)
  print(f"load after: {_load()}")
  print_table(variants, seconds, f"matmul {args.matmul_n}^3 float32")


if __name__ == "__main__":
  main()
