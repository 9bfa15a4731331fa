"""ImageNet-1k (image folder): LeJEPA (ViT-L/14), I-JEPA and MAE (ViT-B/16)
as in their papers.

    python -m ssljax.main --config configs/imagenet_vit.py:mae \\
        --config.dataset.data_dir=/data/imagenet --workdir runs/in1k_mae

The argument is "method[,smoke]". ViT-B/16 (D 768, 12 blocks, 12 heads: the
``vit_small16`` class with those sizes) for both: the size both papers
report (I-JEPA Table 1: ViT-B/16, 600 epochs, 72.9 % linear; MAE Table 9 /
§4: ViT-B/16, 800-1600 epochs, 68.0 % linear, 83.6 % fine-tuned).

Sources: I-JEPA (Assran et al. 2023, arXiv 2301.08243, App. A: batch 2048,
AdamW lr 1e-3 with 15 warm-up epochs for the ViT-B/L schedule, 600 epochs
for ViT-B/16) and MAE (He et al. 2022, arXiv 2111.06377, App. A.1 Table 8:
batch 4096, base lr 1.5e-4 per 256, weight decay 0.05, 40 warm-up epochs,
800 epochs); heads, masks and views in configs/_masked_vit_recipes.py.
LeJEPA: ViT-L/14 (D 1024, 24 blocks, 16 heads) pretrained 100 epochs as in
the paper's ImageNet-1k rows (Balestriero & LeCun 2025, Table 2), 2 x 224 +
6 x 98 px crops and the official README's optimiser
(configs/_masked_vit_recipes.py ``set_lejepa``); batch 512 (not stated in
the sources read for this recipe).
DINOv2: ViT-L/16, the official train/vitl16_short.yaml recipe
(configs/_dinov2_recipe.py; Oquab et al. 2023, arXiv 2304.07193).
Data: ``DIR/train/<wnid>/*.JPEG``, ``DIR/test/<wnid>/*.JPEG`` (or
``--config.dataset.test_split=val``).
"""

from ml_collections import config_dict

from configs import _dinov2_recipe as dinov2
from configs import _masked_vit_recipes as masked
from configs import common

METHODS = ("lejepa", "dinov2") + masked.METHODS
VARIANT_WORDS = ("smoke",)
_VIT_B = dict(hidden_dim=768, depth=12, num_heads=12)


def parse_arg(arg: str | None) -> tuple[str, frozenset]:
  """"method[,smoke]" -> (method, words); checks the names."""
  parts = [p.strip() for p in (arg or "ijepa").split(",") if p.strip()]
  method, words = parts[0], frozenset(parts[1:])
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
  if words - set(VARIANT_WORDS):
    raise ValueError(f"unknown variant word(s) "
                     f"{sorted(words - set(VARIANT_WORDS))}; expected any of "
                     f"{VARIANT_WORDS}")
  return method, words


def all_args() -> list[str]:
  """Every valid config argument (for tests and the docs)."""
  return [m + extra for extra in ("", ",smoke") for m in METHODS]


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration for "method[,smoke]"."""
  method, words = parse_arg(arg)
  c = common.get_config()
  c.dataset.name = "image_folder"
  c.dataset.data_dir = config_dict.placeholder(str)  # REQUIRED: set it
  c.dataset.channels = 3
  c.dataset.threads = 16
  c.dataset.workers = -1  # auto: worker processes on hosts of >= 8 CPUs
  c.views.size = 224
  c.model.encoder = "vit_small16"
  c.model.encoder_kwargs = masked.vit_kwargs(method, patch_size=16, **_VIT_B)
  c.model.dtype = "bfloat16"
  if method == "lejepa":
    c.model.encoder_kwargs = config_dict.ConfigDict(dict(
        hidden_dim=1024, depth=24, num_heads=16))
    masked.set_lejepa(c, patch_size=14, local_size=98)
    c.optim.warmup_epochs = 10.0
    c.batch_size, c.epochs = 512, 100
  elif method == "dinov2":
    # DINOv2's train/vitl16_short.yaml: ViT-L/16 (student.arch vit_large,
    # patch_size 16), 64 per GPU on 4 nodes of 8 GPUs (the official README's
    # command) = 2048, 100 epochs; configs/_dinov2_recipe.py.
    c.model.encoder_kwargs = config_dict.ConfigDict(dict(
        hidden_dim=1024, depth=24, num_heads=16))
    dinov2.set_dinov2(c, batch_size=2048)
  elif method == "ijepa":
    masked.set_method(c, method, warmup_epochs=15.0)
    c.batch_size, c.epochs = 2048, 600
  else:
    masked.set_method(c, method, warmup_epochs=40.0)
    c.batch_size, c.epochs = 4096, 800
  c.checkpoint_every_steps = 1000
  c.log_every_steps = 100
  c.eval_inputs.batch_size = 500
  c.eval_inputs.baselines = False
  c.eval_inputs.crop_fraction = 0.875
  if "smoke" in words:
    common.smoke_image_folder(c, f"imagenet_vit_{method}", image_size=80,
                              view_size=64)
    if method == "lejepa":
      masked.set_lejepa_smoke(c)
    elif method == "dinov2":
      dinov2.set_smoke(c)
    else:
      masked.set_smoke(c, method)
  if method == "dinov2":
    # DINOv2's interpolate_pos_encoding for the local crops (offset 0.1).
    c.model.encoder_kwargs.pos_interpolation = "dino"
  return c
