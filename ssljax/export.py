"""Export a run's encoder: its weights as a portable file, for JAX or PyTorch.

    python -m ssljax.export --workdir RUN --out FILE \
        [--format safetensors|torch] [--step STEP]

Two formats:

* ``safetensors`` (the default): the encoder's flax variables, each tensor
  named by its flax path ("params/Conv_0/kernel",
  "batch_stats/BatchNorm_0/mean") in flax's layout, written with
  `safetensors` (no torch needed). Every encoder can be exported so.
  `load_file` reads it back as ``(encoder, variables)``:
  ``encoder.apply(variables, images, train=False)`` is the representation.
* ``torch``: a PyTorch ``state_dict`` of the same weights in PyTorch's names
  and layouts, which loads with ``strict=True`` into

  - torchvision's ``resnet18``/``resnet34``/``resnet50``/``resnet101``/
    ``resnet152`` whose ``fc`` is set to ``torch.nn.Identity()``, for the
    ResNets with the ImageNet stem and torchvision's stage widths;
  - timm's ``VisionTransformer`` (``vit_tiny_patch16_224``,
    ``vit_small_patch16_224``, ``vit_base_patch16_224`` with the run's
    ``img_size``, ``patch_size`` and ``in_chans``; any other width or depth
    through the same constructor's keyword arguments) for the ViTs.

  The file is safetensors (``safetensors.torch.load_file``) unless ``--out``
  ends in ``.pt`` or ``.pth``, which `torch.save` writes (torch must be
  installed). The CIFAR-stem ResNet, the small CNN and the MLP have no
  torchvision or timm counterpart: they are exported as safetensors only,
  and ``--format torch`` refuses them in one line.

Both files carry metadata (safetensors' header; ``__metadata__`` of a
``.pt`` dict is not written, the command prints it): "ssljax" (JSON: the
method, encoder name and attributes, checkpoint step, view size, channels,
representation and expected input) and, for ``torch``, "torch_model"
(JSON: the library, constructor and keyword arguments to build the PyTorch
model the state_dict loads into). Inputs are float32 images in [0, 1] at the
view size, without mean/std normalisation, NHWC for JAX and NCHW for
PyTorch; the evaluation centre crop is the user's
(`ssljax.pretrained.Pretrained.embed` applies it in JAX).

A user error (no run, no checkpoint, an encoder without a PyTorch
counterpart) is one line on stderr and exit status 2; nothing is written
then, and an existing ``--out`` is replaced only once the new file is
complete.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from typing import Any

import numpy as np

__all__ = ["FORMATS", "ExportError", "flax_tensors", "torch_tensors",
           "no_torch_counterpart",
           "export", "load_file", "main", "USAGE_ERROR"]

FORMATS = ("safetensors", "torch")
USAGE_ERROR = 2  # exit status of a user error

# torchvision's constructors by (block, blocks per stage).
_TORCHVISION_RESNETS = {
    ("basic", (2, 2, 2, 2)): "resnet18",
    ("basic", (3, 4, 6, 3)): "resnet34",
    ("bottleneck", (3, 4, 6, 3)): "resnet50",
    ("bottleneck", (3, 4, 23, 3)): "resnet101",
    ("bottleneck", (3, 8, 36, 3)): "resnet152",
}
_TORCHVISION_WIDTHS = (64, 128, 256, 512)

# timm's ViT constructors by (width D, heads).
_TIMM_VITS = {(192, 3): "vit_tiny_patch16_224",
              (384, 6): "vit_small_patch16_224",
              (768, 12): "vit_base_patch16_224"}


class ExportError(ValueError):
  """The encoder cannot be written in the format asked for (no PyTorch
  counterpart, or a view size the position embeddings need is unknown).
  The message is one line naming the encoder and what to do instead."""


def flax_tensors(variables: dict) -> dict[str, np.ndarray]:
  """The leaves of flax variables as a flat dict named by their path.

  Args:
    variables: {"params": ..., ["batch_stats": ...]}: nested dicts of
      arrays (jax or numpy).

  Returns:
    {"params/Conv_0/kernel": float32 numpy array, ...}: every leaf, in
    flax's layout (conv kernels (kh, kw, in, out), dense kernels
    (in, out)), keys sorted.

  Raises:
    ExportError: a key containing "/" (it would make the names ambiguous).
  """
  out = {}

  def walk(prefix, node):
    if isinstance(node, dict) or hasattr(node, "items"):
      for key, value in node.items():
        if "/" in str(key):
          raise ExportError(f"variable name {key!r} contains '/'")
        walk(f"{prefix}/{key}" if prefix else str(key), value)
    else:
      out[prefix] = np.asarray(node)

  walk("", variables)
  return dict(sorted(out.items()))


def _unflatten(tensors: dict[str, np.ndarray]) -> dict:
  tree: dict = {}
  for name, value in tensors.items():
    node = tree
    *parents, leaf = name.split("/")
    for part in parents:
      node = node.setdefault(part, {})
    node[leaf] = value
  return tree


def _conv(kernel) -> np.ndarray:
  """flax conv kernel (kh, kw, in, out) -> torch weight (out, in, kh, kw)."""
  return np.ascontiguousarray(np.transpose(np.asarray(kernel), (3, 2, 0, 1)))


def _dense(kernel) -> np.ndarray:
  """flax dense kernel (in, out) -> torch weight (out, in)."""
  return np.ascontiguousarray(np.asarray(kernel).T)


def _batch_norm(out, name, params, stats, count):
  out[f"{name}.weight"] = np.asarray(params["scale"])
  out[f"{name}.bias"] = np.asarray(params["bias"])
  out[f"{name}.running_mean"] = np.asarray(stats["mean"])
  out[f"{name}.running_var"] = np.asarray(stats["var"])
  out[f"{name}.num_batches_tracked"] = np.asarray(count, np.int64)


def no_torch_counterpart(encoder) -> str | None:
  """Why ``encoder`` cannot be exported with ``format="torch"``, or None
  when it can (a ResNet with the ImageNet stem and torchvision's widths and
  block counts, or a ViT)."""
  from ssljax import models  # pylint: disable=import-outside-toplevel
  if isinstance(encoder, models.VisionTransformer):
    what = {"cls_last2": "two concatenated class tokens",
            "cls_last4": "four concatenated class tokens",
            "cls_last4_avg": "four class tokens and the patch mean"}.get(
                encoder.representation)
    if encoder.head_dim and what:
      return (f"a ViT with a head on {what} has no timm counterpart "
              "(timm's head reads one token or the patch mean)")
    return None
  if isinstance(encoder, models.ResNet):
    kind = (encoder.block, tuple(encoder.stage_sizes))
    if encoder.stem != "imagenet":
      what = "a ResNet with the CIFAR stem (3x3 conv, no max-pool)"
    elif (kind not in _TORCHVISION_RESNETS
          or tuple(encoder.stage_widths) != _TORCHVISION_WIDTHS):
      what = (f"a ResNet of {encoder.block} blocks {kind[1]} and widths "
              f"{tuple(encoder.stage_widths)}")
    else:
      return None
    return f"{what} has no torchvision counterpart"
  return (f"the {type(encoder).__name__} encoder has no torchvision or timm "
          "counterpart")


def _resnet_torch(encoder, variables, step: int):
  name = _TORCHVISION_RESNETS[(encoder.block, tuple(encoder.stage_sizes))]
  params, stats = variables["params"], variables["batch_stats"]
  out: dict[str, np.ndarray] = {}
  out["conv1.weight"] = _conv(params["Conv_0"]["kernel"])
  _batch_norm(out, "bn1", params["BatchNorm_0"], stats["BatchNorm_0"], step)
  block_type = "_BasicBlock" if encoder.block == "basic" else "_Bottleneck"
  convs = 2 if encoder.block == "basic" else 3
  index = 0
  for stage, size in enumerate(encoder.stage_sizes):
    for j in range(size):
      ours = f"{block_type}_{index}"
      theirs = f"layer{stage + 1}.{j}"
      p, s = params[ours], stats[ours]
      for c in range(convs):
        out[f"{theirs}.conv{c + 1}.weight"] = _conv(p[f"Conv_{c}"]["kernel"])
        _batch_norm(out, f"{theirs}.bn{c + 1}", p[f"BatchNorm_{c}"],
                    s[f"BatchNorm_{c}"], step)
      if f"Conv_{convs}" in p:  # the projection shortcut
        out[f"{theirs}.downsample.0.weight"] = _conv(
            p[f"Conv_{convs}"]["kernel"])
        _batch_norm(out, f"{theirs}.downsample.1", p[f"BatchNorm_{convs}"],
                    s[f"BatchNorm_{convs}"], step)
      index += 1
  target = {"library": "torchvision", "constructor": f"torchvision.models.{name}",
            "kwargs": {"weights": None},
            "load": "model.fc = torch.nn.Identity(); "
                    "model.load_state_dict(state_dict, strict=True)",
            "output": "model(x): the representation (B, D)"}
  return out, target


def _vit_torch(encoder, variables, image_size: int, channels: int):
  from ssljax.models import vit  # pylint: disable=import-outside-toplevel
  params = variables["params"]
  p, dim = encoder.patch_size, encoder.hidden_dim
  prefix = int(encoder.class_token)
  if encoder.pos_embedding == "learned":
    pos = np.asarray(params["pos_embed"])
    side = math.isqrt(pos.shape[1] - prefix)
    image_size = side * p
  else:
    if not image_size:
      raise ExportError(
          "the run's view size is unknown here (its train data is not on "
          "this machine and views.size is 0), and the ViT's sine-cosine "
          "position embeddings need it: export it with --format safetensors")
    grid = image_size // p
    table = np.asarray(vit.sincos_pos_embed_2d(dim, (grid, grid)))
    pos = np.concatenate([np.zeros((prefix, dim), np.float32), table])[None]
  out: dict[str, np.ndarray] = {}
  out["patch_embed.proj.weight"] = _conv(params["patch_embed"]["kernel"])
  out["patch_embed.proj.bias"] = np.asarray(params["patch_embed"]["bias"])
  if encoder.class_token:
    out["cls_token"] = np.asarray(params["cls_token"])
  out["pos_embed"] = np.ascontiguousarray(pos)  # the parameter's dtype
  for i in range(encoder.depth):
    ours, theirs = params[f"block_{i}"], f"blocks.{i}"
    for norm in ("norm1", "norm2"):
      out[f"{theirs}.{norm}.weight"] = np.asarray(ours[norm]["scale"])
      out[f"{theirs}.{norm}.bias"] = np.asarray(ours[norm]["bias"])
    for part, layer in (("attn", "qkv"), ("attn", "proj"), ("mlp", "fc1"),
                        ("mlp", "fc2")):
      out[f"{theirs}.{part}.{layer}.weight"] = _dense(
          ours[part][layer]["kernel"])
      out[f"{theirs}.{part}.{layer}.bias"] = np.asarray(
          ours[part][layer]["bias"])
  out["norm.weight"] = np.asarray(params["norm"]["scale"])
  out["norm.bias"] = np.asarray(params["norm"]["bias"])
  if encoder.head_dim:  # timm's classifier head (num_classes)
    out["head.weight"] = _dense(params["head"]["kernel"])
    out["head.bias"] = np.asarray(params["head"]["bias"])
  pool = "avg" if encoder.representation == "avg_tokens" else "token"
  kwargs = {"pretrained": False, "num_classes": encoder.head_dim,
            "img_size": image_size,
            "patch_size": p, "in_chans": channels, "embed_dim": dim,
            "depth": encoder.depth, "num_heads": encoder.num_heads,
            "mlp_ratio": encoder.mlp_ratio, "class_token": encoder.class_token,
            "global_pool": pool}
  if pool == "avg":
    kwargs["fc_norm"] = False  # the final LayerNorm before pooling, as ours
  output = {
      "cls": "model(x): the class token after the final LayerNorm (B, D)",
      "avg_tokens": "model(x): the mean of the patch tokens after the final "
                    "LayerNorm (B, D)",
      "cls_last2": "the class tokens of the last two blocks, each through "
                   "model.norm, concatenated (B, 2D); model(x) is the second "
                   "half",
      "cls_last4": "the class tokens of the last four blocks, each through "
                   "model.norm, concatenated (B, 4D); model(x) is the last "
                   "quarter",
      "cls_last4_avg": "the class tokens of the last four blocks, each "
                       "through model.norm, then the mean of model.norm of "
                       "the last block's patch tokens, concatenated (B, 5D); "
                       "model(x) is the fourth fifth",
  }[encoder.representation]
  if encoder.head_dim:
    output += f", then model.head (B, {encoder.head_dim})"
  name = _TIMM_VITS.get((dim, encoder.num_heads), "vit_base_patch16_224")
  target = {"library": "timm", "constructor": f"timm.create_model({name!r}, "
                                              "**kwargs)",
            "kwargs": kwargs,
            "load": "model.load_state_dict(state_dict, strict=True)",
            "output": output}
  return out, target


def torch_tensors(encoder, variables: dict, *, image_size: int = 0,
                  channels: int = 3, step: int = 0
                  ) -> tuple[dict[str, np.ndarray], dict]:
  """An encoder's weights as a PyTorch state_dict of numpy arrays.

  Args:
    encoder: a `ssljax.models.ResNet` (ImageNet stem, torchvision's widths
      and block counts) or `ssljax.models.VisionTransformer`.
    variables: its flax variables {"params"[, "batch_stats"]}.
    image_size: side of the images the encoder takes (the run's view size);
      needed only for a ViT with sine-cosine position embeddings (0:
      unknown). A learned position table gives it itself.
    channels: image channels (timm's ``in_chans``).
    step: written as BatchNorm's ``num_batches_tracked`` (read by PyTorch
      only when a BatchNorm has ``momentum=None``).

  Returns:
    (state_dict, target): state_dict maps torchvision's or timm's names to
    float32 arrays in PyTorch's layout (conv (out, in, kh, kw), linear
    (out, in)) and int64 scalars for ``num_batches_tracked``; target says
    how to build the model it loads into with ``strict=True`` ("library",
    "constructor", "kwargs", "load", "output").

  Raises:
    ExportError: an encoder with no torchvision or timm counterpart (the
      CIFAR-stem ResNet, the small CNN, the MLP, a ResNet of other widths),
      or a sine-cosine ViT with ``image_size`` 0.

  The ViT's sine-cosine position embeddings (MAE, I-JEPA) are fixed in
  ssljax and a parameter in timm: the table is written as timm's
  ``pos_embed`` (0 at the class token). Names follow torchvision's
  ``ResNet`` (He et al. 2016, arXiv 1512.03385) and timm's
  ``VisionTransformer`` (Dosovitskiy et al. 2021, arXiv 2010.11929).
  """
  from ssljax import models  # pylint: disable=import-outside-toplevel
  reason = no_torch_counterpart(encoder)
  if reason:
    raise ExportError(f"{reason}: export it with --format safetensors")
  if isinstance(encoder, models.ResNet):
    return _resnet_torch(encoder, variables, step)
  return _vit_torch(encoder, variables, image_size, channels)


def _describe(model) -> dict:
  config = model.config
  encoder = model.encoder
  return {
      "ssljax_version": _version(),
      "method": config.method,
      "encoder": config.model.encoder,
      "encoder_kwargs": config.model.encoder_kwargs.to_dict(),
      "representation": getattr(encoder, "representation", "h"),
      "step": int(model.step),
      "view_size": int(model.view_size),
      "channels": model.channels,
      "input": "float32 images in [0, 1] at view_size x view_size, no "
               "mean/std normalisation; NHWC in JAX, NCHW in PyTorch",
  }


def _version() -> str:
  from ssljax import __version__  # pylint: disable=import-outside-toplevel
  return __version__


def export(model, path: str, *, format: str = "safetensors"  # pylint: disable=redefined-builtin
           ) -> dict:
  """Writes a loaded run's encoder to ``path``.

  Args:
    model: a `ssljax.pretrained.Pretrained` (`ssljax.pretrained.load`).
    path: the file to write. It is written next to its final place and
      renamed there only when complete. For ``format="torch"``, a path
      ending in ".pt" or ".pth" is written with ``torch.save`` (torch must
      be installed); any other with safetensors.
    format: "safetensors" (flax names and layout; every encoder) or "torch"
      (a state_dict for torchvision's ResNets or timm's ViTs).

  Returns:
    the metadata written: {"format": ..., "ssljax": JSON str[,
    "torch_model": JSON str]}.

  Raises:
    ValueError: an unknown format.
    ExportError: ``format="torch"`` for an encoder without a PyTorch
      counterpart (`torch_tensors`).
    ImportError: a ".pt" path without torch installed.
  """
  if format not in FORMATS:
    raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
  encoder = model.encoder
  variables = {k: _to_numpy(v) for k, v in model.variables.items()}
  metadata = {"format": "flax" if format == "safetensors" else "torch",
              "ssljax": json.dumps(_describe(model), sort_keys=True)}
  if format == "safetensors":
    tensors = flax_tensors(variables)
  else:
    tensors, target = torch_tensors(
        encoder, variables, image_size=model.view_size,
        channels=model.channels or 3, step=model.step)
    metadata["torch_model"] = json.dumps(target, sort_keys=True)
  _write(tensors, metadata, os.fspath(path),
         pickle=format == "torch" and str(path).endswith((".pt", ".pth")))
  return metadata


def _to_numpy(tree):
  import jax  # pylint: disable=import-outside-toplevel
  return jax.tree.map(lambda a: np.asarray(jax.device_get(a)), tree)


def _write(tensors, metadata, path, *, pickle: bool):
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".export-",
                             suffix=os.path.splitext(path)[1])
  os.close(fd)
  try:
    if pickle:
      try:
        import torch  # pylint: disable=import-outside-toplevel
      except ImportError as e:
        raise ImportError(
            f"writing {os.path.basename(path)!r} (.pt/.pth) needs torch, "
            "which is not installed: give a .safetensors path instead "
            "(safetensors.torch.load_file reads it as the same "
            "state_dict)") from e
      torch.save({k: torch.from_numpy(np.array(v)) for k, v in
                  tensors.items()}, tmp)
    else:
      from safetensors import numpy as st  # pylint: disable=import-outside-toplevel
      st.save_file(tensors, tmp, metadata=metadata)
    os.replace(tmp, path)
  except BaseException:
    os.unlink(tmp)
    raise


def load_file(path: str) -> tuple[Any, dict]:
  """Reads an export of ``format="safetensors"`` back into JAX.

  Args:
    path: a file written by `export` (or ``python -m ssljax.export``) with
      the "safetensors" format.

  Returns:
    (encoder, variables): the flax module (float32, built from the file's
    metadata by `ssljax.models.make_encoder`) and its variables
    {"params"[, "batch_stats"]} as numpy arrays;
    ``encoder.apply(variables, images_NxHxWxC, train=False)`` gives the
    representation (N, D) of float32 images in [0, 1].

  Raises:
    ValueError: the file is not a flax export of ssljax (no or other
      metadata, e.g. a ``--format torch`` file).
  """
  from safetensors import numpy as st  # pylint: disable=import-outside-toplevel
  from safetensors import safe_open  # pylint: disable=import-outside-toplevel
  from ssljax import models  # pylint: disable=import-outside-toplevel
  with safe_open(path, framework="numpy") as f:
    metadata = f.metadata() or {}
  if metadata.get("format") != "flax" or "ssljax" not in metadata:
    raise ValueError(f"{path!r} is not a flax export of ssljax (format "
                     f"{metadata.get('format')!r}): write it with "
                     "python -m ssljax.export --format safetensors")
  info = json.loads(metadata["ssljax"])
  encoder = models.make_encoder(info["encoder"], info["encoder_kwargs"])
  return encoder, _unflatten(st.load_file(path))


def _parse(argv):
  parser = argparse.ArgumentParser(
      prog="python -m ssljax.export",
      description="Write a run's encoder as safetensors (flax names) or as "
                  "a PyTorch state_dict (torchvision ResNet, timm ViT).")
  parser.add_argument("--workdir", required=True,
                      help="the run (the --workdir of python -m ssljax.main)")
  parser.add_argument("--out", required=True, help="the file to write")
  parser.add_argument("--format", default="safetensors", choices=FORMATS)
  parser.add_argument("--step", type=int, default=None,
                      help="checkpoint step (default: the newest intact one)")
  return parser.parse_args(argv)


def main(argv=None) -> int:
  """The command line; returns the exit status (0, or USAGE_ERROR with one
  line on stderr)."""
  args = _parse(argv)
  from ssljax import pretrained  # pylint: disable=import-outside-toplevel
  try:
    model = pretrained.load(args.workdir, step=args.step)
    metadata = export(model, args.out, format=args.format)
  except (ValueError, ImportError) as e:
    print(f"python -m ssljax.export: {e}", file=sys.stderr)
    return USAGE_ERROR
  info = json.loads(metadata["ssljax"])
  print(f"wrote {args.out}: the {info['encoder']} encoder of {args.workdir} "
        f"(method {info['method']}, step {info['step']}), format "
        f"{args.format}")
  if "torch_model" in metadata:
    target = json.loads(metadata["torch_model"])
    print(f"load it with {target['constructor']}, kwargs "
          f"{json.dumps(target['kwargs'])}; then {target['load']}; "
          f"output: {target['output']}")
  else:
    print("load it with ssljax.export.load_file(path) -> (encoder, "
          "variables)")
    reason = no_torch_counterpart(model.encoder)
    if reason:
      print(f"safetensors only: {reason}, so --format torch is refused")
  return 0


if __name__ == "__main__":
  sys.exit(main())
