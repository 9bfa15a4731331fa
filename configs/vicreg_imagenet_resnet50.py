"""VICReg on ImageNet-1k with a ResNet-50 (Bardes, Ponce & LeCun 2022).

    python -m ssljax.main --config configs/vicreg_imagenet_resnet50.py \\
        --config.dataset.data_dir=/data/tfds --workdir runs/in1k_vicreg_r50

Variants: ``:smoke`` (about a minute on a CPU: a small generated RGB image
folder, 64 px views, a tiny ResNet-50 (bottleneck blocks, ImageNet stem,
stage widths 8-64), 3 steps, same optimiser and views).

Data: tfds ``imagenet2012``, streamed from ArrayRecord files
(``dataset.in_memory = "no"``). Prepare it once, with the manual download
(ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar in
``<data_dir>/downloads/manual``)::

    tfds build imagenet2012 --file_format=array_record --data_dir=/data/tfds

Sources: the paper (arXiv 2105.04906, Sec. 4.1 and App. C) and its official
code github.com/facebookresearch/vicreg (stored snapshot; main_vicreg.py,
augmentations.py, README.md's 1000-epoch command ``--epochs 1000
--batch-size 2048 --base-lr 0.2``). Library differences: the official LARS
is ours (the trust ratio η‖w‖ / ‖g + λw‖, no weight decay and no trust
ratio on biases and BatchNorm, i.e. its ``exclude_bias_and_norm`` filters;
eta 0.001; its momentum buffer of trust-scaled gradients); the
probe is ssljax's offline L-BFGS probe, not the paper's linear evaluation
protocol.
"""


from ml_collections import config_dict

from configs import common
from configs import vicreg

VARIANTS = ("default", "smoke")


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  variant = arg or "default"
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
  c = vicreg.get_config()
  c.method = "vicreg"

  # ---------------------------------------------------------------- data --
  c.dataset.name = "imagenet2012"  # tfds name (1.28M train, 50k val)
  c.dataset.data_dir = config_dict.placeholder(str)  # None: tfds default dir
  c.dataset.train_split = "train"
  c.dataset.test_split = "validation"  # tfds's val split, probe test split
  c.dataset.in_memory = "no"  # stream ArrayRecord (1.28M JPEGs: too big)
  c.dataset.threads = 16  # JPEG decoding + crops on the host
  c.dataset.workers = -1  # auto: worker processes on hosts of >= 8 CPUs
  c.dataset.prefetch = 4

  # -------------------------------------------------------------- views --
  # BYOL's asymmetric views (paper App. C; official augmentations.py
  # TrainTransform: transform / transform_prime).
  v = c.views
  v.num_global = 2
  v.size = 224  # RandomResizedCrop(224, bicubic)
  v.crop = "random_resized"
  v.crop_scale = (0.08, 1.0)  # torchvision default scale
  v.crop_ratio = (3 / 4, 4 / 3)  # torchvision default ratio
  v.flip_prob = 0.5  # RandomHorizontalFlip(p=0.5)
  v.jitter_prob = 0.8  # RandomApply([ColorJitter(...)], p=0.8)
  v.brightness, v.contrast = 0.4, 0.4  # ColorJitter(0.4, 0.4, 0.2, 0.1)
  v.saturation, v.hue = 0.2, 0.1
  v.grayscale_prob = 0.2  # RandomGrayscale(p=0.2)
  v.blur_sigma = (0.1, 2.0)  # sigma = rand * 1.9 + 0.1 (PIL GaussianBlur)
  v.blur_kernel_fraction = 0.1  # 23 px at 224 (PIL's blur is untruncated)
  v.solarize_threshold = 0.5  # ImageOps.solarize default threshold 128
  with v.ignore_type():  # per-view tuples replace the float fields
    v.blur_prob = (1.0, 0.1)  # GaussianBlur(p=1.0) / GaussianBlur(p=0.1)
    v.solarize_prob = (0.0, 0.2)  # Solarization(p=0.0) / Solarization(p=0.2)
  v.erase_prob = 0.0  # no random erasing in the paper
  v.noise_std = 0.0

  # -------------------------------------------------------------- model --
  c.model.encoder = "resnet50"  # --arch resnet50 (D = 2048)
  c.model.encoder_kwargs = config_dict.ConfigDict({"stem": "imagenet"})
  c.model.projector = (8192, 8192, 8192)  # --mlp 8192-8192-8192 (Sec. 4.1)
  c.model.dtype = "bfloat16"  # bf16 compute on accelerators (params float32)

  c.loss = config_dict.ConfigDict()
  c.loss.form = "two_view"
  c.loss.inv_weight = 25.0  # λ, --sim-coeff 25
  c.loss.var_weight = 25.0  # μ, --std-coeff 25
  c.loss.cov_weight = 1.0  # ν, --cov-coeff 1
  c.loss.eps = 1e-4  # sqrt(x.var(dim=0) + 0.0001) in main_vicreg.py

  # ---------------------------------------------------------------- optim --
  c.batch_size = 2048  # --batch-size 2048
  c.epochs = 1000  # --epochs 1000 (README's 1000-epoch command)
  c.optim.name = "lars"  # LARS (Sec. 4.1)
  # lr = batch_size / 256 × base_lr with base_lr 0.2 (Sec. 4.1, --base-lr);
  # ours scales learning_rate by batch/256 the same way (ssljax/train.py
  # create_learning_rate_fn), so 0.2 gives the paper's peak 1.6 at 2048.
  c.optim.learning_rate = 0.2
  c.optim.weight_decay = 1e-6  # --wd 1e-6
  c.optim.warmup_epochs = 10.0  # warmup_steps = 10 * len(loader)
  c.optim.end_lr_factor = 1e-3  # end_lr = base_lr * 0.001 (main_vicreg.py)
  c.optim.lars.momentum = 0.9  # LARS momentum 0.9 (main_vicreg.py)
  c.optim.lars.trust_coefficient = 1e-3  # LARS eta=0.001 (main_vicreg.py)
  # main_vicreg.py's LARS.step: mu = momentum·mu + dp, p -= lr·mu (the
  # momentum of trust-scaled gradients, times the current lr).
  c.optim.lars.momentum_buffer = "gradients"

  c.log_every_steps = 100
  c.checkpoint_every_steps = 2500  # ~4 epochs at 626 steps per epoch
  c.keep_checkpoints = 2

  c.eval_inputs.batch_size = 500
  c.eval_inputs.baselines = False  # raw-pixel probe on 150k-d inputs: too big
  c.eval_inputs.crop_fraction = 0.875  # resize 256, centre crop 224
  c.evals.probe.search_rows = 20000

  if variant == "smoke":
    # Same code path at toy size on a generated ~80 px RGB image folder:
    # ResNet-50's bottleneck blocks and stem with tiny widths (D = 4 × 64);
    # model.dtype stays "bfloat16", so the smoke run exercises bf16 compute.
    common.smoke_image_folder(c, "vicreg_imagenet_resnet50", image_size=80,
                              view_size=64)
  return c
