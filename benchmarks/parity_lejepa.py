"""LeJEPA's whole step against the authors' minimal training step
(Balestriero & LeCun 2025, arXiv 2511.08544; rbalestr-lab/lejepa,
MINIMAL.md), for ``benchmarks/step_parity.py --method lejepa``.

The official side is the Python code of the checkout's MINIMAL.md, read
from the file at run time and executed: its ``SIGReg``, ``ViTEncoder``
(timm ViT with a 512-wide head, torchvision ``MLP`` projector with
BatchNorm) and ``main`` (AdamW with the network and the online probe in two
groups, ``LinearLR`` then ``CosineAnnealingLR`` in ``SequentialLR``, the
loss ``sigreg·λ + invariance·(1 − λ)`` plus the probe's cross-entropy).
What is changed around it (nothing inside its functions):

* ``timm.create_model`` builds the small ViT (patch 7, width 48, 2 blocks,
  3 heads, 28 px, 1 channel) instead of ViT-S/8 at 128 px, and with
  ``drop_path_rate`` 0 instead of 0.1 (random; ssljax's ViT has no
  stochastic depth): the call's other arguments (``num_classes=512``) are
  theirs;
* ``HFDataset`` and ``DataLoader``: ssljax's views of each step (V views
  of B images, in [0, 1], not normalised) and the images' labels, in order;
* ``torch.randn`` (called only by ``SIGReg.forward``) returns the Gaussian
  matrix ssljax's step drew from its loss key, which both sides divide by
  its column norms: the same slice directions on both sides;
* ``ViTEncoder.__init__`` is followed by loading ssljax's initial weights
  (every leaf, `ssljax.export.torch_tensors` for the ViT, the projector's
  layers by hand; the projector's hidden ``Linear`` biases, which ssljax's
  projector does not have before BatchNorm, start at 0);
* ``wandb`` records the logged losses; ``torch.optim.AdamW`` records each
  step's learning rates; ``.to("cuda")`` stays on the CPU; with
  ``--float64`` torch's default dtype is float64 and MINIMAL.md's
  ``torch.float32`` buffers are made in float64.

bfloat16 autocast and ``GradScaler`` are theirs and switch themselves off
on a CPU (both sides in float32 or float64).
"""

from __future__ import annotations

import os
import re
import sys
import time
import types
import warnings

import numpy as np

from parity_common import (BATCH, STEPS_PER_EPOCH, commit, drift, override,
                           ssljax_setup, worst)

# MINIMAL.md's launch command: +lamb=0.02 +V=4 +proj_dim=16 +lr=2e-3
# (+bs=256 +epochs=800 there; here a batch of 16 and 5-step epochs).
LAMB, VIEWS, PROJ_DIM, LR = 0.02, 4, 16, 2e-3
# Fixed in MINIMAL.md's code: 256 slices, the head's width 512, the
# projector's hidden widths 2048, weight decay 5e-2, warm-up from 0.01 x lr
# over one epoch, cosine to an absolute 1e-3 over the other steps.
SLICES, HEAD, HIDDEN, WEIGHT_DECAY, ETA_MIN = 256, 512, 2048, 5e-2, 1e-3
VIT = dict(patch_size=7, hidden_dim=48, depth=2, num_heads=3)


def lejepa_config():
  """configs/lejepa.py (ViT) with MINIMAL.md's values at this size."""
  from configs import lejepa  # pylint: disable=import-outside-toplevel
  c = lejepa.get_config()
  c.model.encoder = "vit_tiny16"
  c.model.encoder_kwargs = dict(VIT, head_dim=HEAD)
  c.model.projector = (HIDDEN, HIDDEN, PROJ_DIM)
  c.views.num_global = VIEWS  # MINIMAL.md: V views of one kind, centred
  c.views.num_local = 0  # on all of them
  c.views.size = 28
  c.batch_size = BATCH
  c.lejepa.lam = LAMB
  c.lejepa.num_slices = SLICES
  c.lejepa.batch_norm_views = "joint"
  # ssljax's lr is per 256 samples: this peak is MINIMAL.md's 2e-3 at B.
  c.optim.learning_rate = LR * 256 / BATCH
  c.optim.weight_decay = WEIGHT_DECAY
  c.optim.weight_decay_mask = "all"
  c.optim.warmup_epochs = 1.0
  c.optim.warmup_start_factor = 0.01
  c.optim.end_lr_factor = ETA_MIN / LR
  c.evals = {}
  return c


def loss_key(seed: int, step: int):
  """The key `ssljax.train.train_step` gives the method's loss at
  ``step`` (the step's key folded with 2**20)."""
  import jax  # pylint: disable=import-outside-toplevel
  key = jax.random.fold_in(jax.random.key(seed), step)
  return jax.random.fold_in(key, 1 << 20)


def ssljax_lejepa(config, steps: int, seed: int = 0, float64: bool = False):
  """(initial params and state, views and labels per step, the Gaussian
  draws of the slice directions per step, losses, learning rates, final
  params and state) of ssljax's train_step."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  run = ssljax_setup(config, steps, seed=seed, float64=float64,
                     image_shape=(28, 28, 1))
  lr_fn, state = (run.lr_fn, run.state)
  initial, dtype, step, make_views = (run.initial, run.dtype, run.step,
                                      run.make_views)
  images = run.images
  labels = run.labels
  draw = jax.jit(lambda k: jax.random.normal(
      k, (config.model.projector[-1], config.lejepa.num_slices), dtype))
  views, gaussians, losses = [], [], []
  for k in range(steps):
    rows = slice(k * BATCH, (k + 1) * BATCH)
    v = make_views({"images": images[rows]},
                   jax.random.fold_in(jax.random.key(seed + 1), k))
    v = tuple(np.asarray(x, dtype) for x in v)
    views.append((v, labels[rows]))
    gaussians.append(np.asarray(draw(loss_key(seed, k))))
    state, metrics = step(state, {"ready_views": v})
    losses.append({name: float(metrics[name])
                   for name in ("loss", "sigreg", "invariance")})
  count = lambda k: jnp.asarray(k, jnp.int32)
  lrs = [float(lr_fn(count(k))) for k in range(steps)]
  final = jax.device_get((state.params, state.method_state))
  return initial, views, gaussians, losses, lrs, final


def _projector_tensors(head: dict, stats: dict) -> dict:
  """ssljax's Projector -> torchvision ``MLP``'s state_dict (Linear, BN,
  ReLU, Dropout per hidden layer; Linear, Dropout last). The hidden
  Linears' biases are 0: ssljax has none before BatchNorm."""
  out, i = {}, 0
  while f"Dense_{i}" in head:
    kernel = np.asarray(head[f"Dense_{i}"]["kernel"])
    out[f"{4 * i}.weight"] = np.ascontiguousarray(kernel.T)
    out[f"{4 * i}.bias"] = np.asarray(
        head[f"Dense_{i}"].get("bias", np.zeros(kernel.shape[1],
                                                kernel.dtype)))
    if f"BatchNorm_{i}" in head:
      bn, st = head[f"BatchNorm_{i}"], stats[f"BatchNorm_{i}"]
      out[f"{4 * i + 1}.weight"] = np.asarray(bn["scale"])
      out[f"{4 * i + 1}.bias"] = np.asarray(bn["bias"])
      out[f"{4 * i + 1}.running_mean"] = np.asarray(st["mean"])
      out[f"{4 * i + 1}.running_var"] = np.asarray(st["var"])
      out[f"{4 * i + 1}.num_batches_tracked"] = np.asarray(0, np.int64)
    i += 1
  return out


def torch_state(config, params: dict, state: dict) -> dict:
  """ssljax's network -> MINIMAL.md ``ViTEncoder``'s state_dict."""
  from ssljax import export  # pylint: disable=import-outside-toplevel
  from ssljax.methods import networks  # pylint: disable=import-outside-toplevel
  encoder = networks.encoder_of(config)
  backbone, _ = export.torch_tensors(encoder, {"params": params["encoder"]},
                                     image_size=28, channels=1)
  out = {f"backbone.{k}": v for k, v in backbone.items()}
  out.update({f"proj.{k}": v for k, v in _projector_tensors(
      params["projector"], state["batch_stats"]["projector"]).items()})
  return out


def _minimal_blocks(peer: str) -> dict:
  """MINIMAL.md's Python blocks: the imports, the modules, ``main``."""
  with open(os.path.join(peer, "MINIMAL.md"), encoding="utf-8") as f:
    text = f.read()
  blocks = re.findall(r"```python\n(.*?)```", text, re.S)
  found = {}
  for name, marker in (("imports", "import timm"),
                       ("modules", "class SIGReg"), ("main", "def main(")):
    hits = [b for b in blocks if marker in b]
    if len(hits) != 1:
      raise RuntimeError(f"MINIMAL.md: expected one Python block with "
                         f"{marker!r}, found {len(hits)}")
    found[name] = hits[0]
  return found


class _Config(dict):
  """A dict read by attribute, for ``cfg.V`` where omegaconf is absent."""

  def __getattr__(self, name):
    try:
      return self[name]
    except KeyError as e:
      raise AttributeError(name) from e


class _TorchProxy(types.ModuleType):
  """``torch`` as MINIMAL.md's code sees it: every attribute torch's, but
  ``randn`` hands out the queued draws, ``float32`` is the run's dtype and
  ``optim.AdamW`` records its learning rates."""

  def __init__(self, torch, dtype, draws, adamw):
    super().__init__("torch")
    self._torch, self._draws = torch, draws
    self.float32 = dtype
    self.optim = types.SimpleNamespace(AdamW=adamw)

  def randn(self, *size, **kwargs):
    del kwargs  # device="cuda"
    a = self._draws.pop(0)
    if tuple(size) != a.shape:
      raise RuntimeError(f"randn{size}: expected the directions' {a.shape}")
    return self._torch.from_numpy(a.copy())

  def __getattr__(self, name):
    return getattr(self._torch, name)


def official_lejepa(peer: str, config, initial, views, gaussians,
                    threads: int | None, float64: bool = False):
  """MINIMAL.md's ``main`` from ssljax's initial weights on the same views
  and slice directions; (logged losses per step, learning rates per step,
  final state_dict of the network)."""
  import torch  # pylint: disable=import-outside-toplevel
  if threads:
    torch.set_num_threads(threads)
  dtype = torch.float64 if float64 else torch.float32
  blocks = _minimal_blocks(peer)
  logs, lrs, nets = [], [], []

  # Modules MINIMAL.md imports that are not installed or not wanted here.
  wandb = types.ModuleType("wandb")
  wandb.init = lambda **kw: None
  wandb.log = logs.append
  wandb.finish = lambda: None
  datasets = types.ModuleType("datasets")
  datasets.load_dataset = None
  stubs = {"wandb": wandb, "datasets": datasets}
  # hydra and omegaconf (not in ssljax's bench extra): their own when
  # installed, else @hydra.main as the identity and a dict for DictConfig.
  try:
    import hydra  # pylint: disable=import-outside-toplevel,unused-import
    from omegaconf import OmegaConf  # pylint: disable=import-outside-toplevel
    make_cfg = OmegaConf.create
  except ImportError:
    hydra = types.ModuleType("hydra")
    hydra.main = lambda **kw: (lambda f: f)
    omegaconf = types.ModuleType("omegaconf")
    omegaconf.DictConfig = _Config
    stubs.update(hydra=hydra, omegaconf=omegaconf)
    make_cfg = _Config
  saved = {m: sys.modules.get(m) for m in stubs}
  sys.modules.update(stubs)

  class AdamW(torch.optim.AdamW):
    def step(self, *args, **kwargs):
      lrs.append([g["lr"] for g in self.param_groups])
      return super().step(*args, **kwargs)

  tensor_to, module_to = torch.Tensor.to, torch.nn.Module.to

  def on_cpu(original):
    def to(self, *args, **kwargs):
      args = tuple("cpu" if a == "cuda" else a for a in args)
      return original(self, *args, **kwargs)
    return to

  old_threads, old_dtype = torch.get_num_threads(), torch.get_default_dtype()
  torch.Tensor.to, torch.nn.Module.to = on_cpu(tensor_to), on_cpu(module_to)
  torch.set_default_dtype(dtype)
  try:
    ns = {"__name__": "minimal_md"}
    exec(compile(blocks["imports"], "MINIMAL.md", "exec"), ns)  # pylint: disable=exec-used
    timm = ns["timm"]

    def create_model(name, **kwargs):  # their call, our size
      kwargs.update(img_size=28, in_chans=1, drop_path_rate=0.0,
                    patch_size=VIT["patch_size"],
                    embed_dim=VIT["hidden_dim"], depth=VIT["depth"],
                    num_heads=VIT["num_heads"])
      return timm.create_model(name, **kwargs)

    ns["timm"] = types.SimpleNamespace(create_model=create_model)
    ns["torch"] = _TorchProxy(torch, dtype, list(gaussians), AdamW)
    ns["tqdm"] = types.SimpleNamespace(tqdm=lambda it, total=None: it)
    exec(compile(blocks["modules"], "MINIMAL.md", "exec"), ns)  # pylint: disable=exec-used
    their_encoder = ns["ViTEncoder"]
    start = torch_state(config, initial[0], initial[1])

    class ViTEncoder(their_encoder):
      def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.load_state_dict({k: torch.from_numpy(np.array(v))
                              for k, v in start.items()}, strict=True)
        nets.append(self)

    batches = [(torch.from_numpy(np.ascontiguousarray(
        np.stack(v, axis=1).transpose(0, 1, 4, 2, 3))),
                torch.from_numpy(y.astype(np.int64))) for v, y in views]

    class HFDataset:
      """The steps' views and labels, one epoch per pass (the test split:
      the first batch's first view, for the end-of-epoch accuracy)."""

      def __init__(self, split, V=1):
        del V
        self.train = split == "train"
        self.batches = batches if self.train else [
            (x[:, :1], y) for x, y in batches[:1]]
        self.epoch = 0

      def __len__(self):  # the loader's length: steps per epoch
        return STEPS_PER_EPOCH if self.train else 1

      def __iter__(self):
        if not self.train:
          return iter(self.batches)
        first = self.epoch * STEPS_PER_EPOCH
        self.epoch += 1
        return iter(self.batches[first:first + STEPS_PER_EPOCH])

    ns["ViTEncoder"], ns["HFDataset"] = ViTEncoder, HFDataset
    ns["DataLoader"] = lambda ds, **kw: ds
    exec(compile(blocks["main"], "MINIMAL.md", "exec"), ns)  # pylint: disable=exec-used
    cfg = make_cfg(dict(V=VIEWS, bs=BATCH, proj_dim=PROJ_DIM, lamb=LAMB,
                        lr=LR, epochs=len(views) // STEPS_PER_EPOCH))
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")  # GradScaler, autocast: no CUDA
      ns["main"](cfg)
  finally:
    torch.Tensor.to, torch.nn.Module.to = tensor_to, module_to
    torch.set_default_dtype(old_dtype)
    torch.set_num_threads(old_threads)
    for name, module in saved.items():
      if module is None:
        sys.modules.pop(name, None)
      else:
        sys.modules[name] = module
  train_logs = [r for r in logs if "train/lejepa" in r]
  state = {k: v.detach().numpy().copy() for k, v in nets[0].state_dict().items()}
  return train_logs, lrs, state


def null_gradient(theirs: dict) -> list:
  """Tensors whose gradient is 0 but for rounding: a shift of their output
  is removed by the projector's first BatchNorm (the final LayerNorm's
  bias, the head's bias) or by the next one (a hidden Linear's bias, which
  ssljax's projector does not have). Their update is rounding noise turned
  into steps by Adam, so their drift is noise over noise."""
  bias = [k for k in theirs if re.fullmatch(r"proj\.\d+\.bias", k)
          and f"proj.{int(k.split('.')[1]) + 1}.running_mean" in theirs]
  return ["backbone.norm.bias", "backbone.head.bias", *bias]


def _parts(ours: dict, theirs: dict, start: dict) -> dict:
  """Drift of the network's parameters (those with a gradient); running
  statistics (largest difference over largest value)."""
  null = null_gradient(theirs)
  params = [k for k in theirs if k not in null and "running" not in k
            and "num_batches" not in k]
  out = {"network": drift(ours, theirs, start, params)}
  for stat in ("running_mean", "running_var"):
    keys = [k for k in theirs if k.endswith(stat)]
    out[f"batch_norm_{stat}"] = max(worst(ours[k], theirs[k]) for k in keys)
  return out


def compare(args):
  from ssljax import __version__  # pylint: disable=import-outside-toplevel
  if args.local:
    raise ValueError("MINIMAL.md has no local crops: its V views are of "
                     "one kind (--local 0)")
  if args.steps < 2 * STEPS_PER_EPOCH:
    raise ValueError(f"--steps {args.steps}: MINIMAL.md's cosine runs over "
                     f"the epochs after the first (T_max = 0 otherwise); "
                     f"use >= {2 * STEPS_PER_EPOCH}")
  config = lejepa_config()
  official_config = lejepa_config()
  override(config, args.set)
  if args.float64:
    import jax  # pylint: disable=import-outside-toplevel
    jax.config.update("jax_enable_x64", True)
    config.model.dtype = "float64"
    official_config.model.dtype = "float64"
  started = time.time()
  initial, views, gaussians, ours, our_lrs, final = ssljax_lejepa(
      config, args.steps, float64=args.float64)
  logs, lrs, net = official_lejepa(args.peer, official_config, initial, views,
                                   gaussians, threads=None,
                                   float64=args.float64)
  ref_logs, _, ref_net = official_lejepa(args.peer, official_config, initial,
                                         views, gaussians, threads=1,
                                         float64=args.float64)
  theirs = [r["train/lejepa"] for r in logs]
  reference = [r["train/lejepa"] for r in ref_logs]
  rows = []
  for k in range(args.steps):
    loss = ours[k]["loss"]
    rows.append({"step": k, "ssljax": loss, "official": theirs[k],
                 "official_1_thread": reference[k],
                 "relative": abs(loss - theirs[k]) / abs(theirs[k]),
                 "rounding": abs(reference[k] - theirs[k]) / abs(theirs[k]),
                 "ssljax_sigreg": ours[k]["sigreg"],
                 "official_sigreg": logs[k]["train/sigreg"],
                 "ssljax_invariance": ours[k]["invariance"],
                 "official_invariance": logs[k]["train/inv"],
                 "official_probe": logs[k]["train/probe"]})
  start = torch_state(official_config, initial[0], initial[1])
  our_net = torch_state(config, final[0], final[1])
  tensors = _parts(our_net, net, start)
  rounding = _parts(ref_net, net, start)
  moved = lambda tree, k: float(np.abs(np.asarray(tree[k], np.float64)
                                       - start[k]).max())
  lr_net = [g[0] for g in lrs]
  result = {"method": "lejepa", "peer": os.path.abspath(args.peer),
            "peer_commit": commit(args.peer), "ssljax": __version__,
            "steps": args.steps, "local_crops": 0,
            "ssljax_overrides": list(args.set or ()),
            "float64": args.float64,
            "losses": rows, "after_K_steps": tensors,
            "rounding_after_K_steps": rounding,
            "learning_rate": {"ssljax": our_lrs, "official": lr_net,
                              "official_probe": [g[1] for g in lrs],
                              "worst_relative": worst(our_lrs, lr_net)},
            "null_gradient_largest_move": {
                k: {"official": moved(net, k), "ssljax": moved(our_net, k)}
                for k in null_gradient(net)},
            "wall_s": round(time.time() - started, 1)}
  return result
