"""ImageNet-100 pretraining, ResNet-18 (ImageNet stem): solo-learn's recipes.

    python -m ssljax.main --config configs/imagenet100_resnet18.py:vicreg \\
        --config.dataset.data_dir=/data/imagenet100 --workdir runs/in100_vicreg

The argument is "method[,variant...]": method in METHODS ("vicreg",
"barlow_twins", and the teacher-student "byol", "simsiam", "mocov3", "dino",
"nnclr", whose heads, teacher, loss and optimiser come from
configs/_solo_learn_teacher_student.py); variant words "asymmetric" (VICReg
with the asymmetric BYOL-style views of Barlow Twins, see below) and
"smoke" (about a minute on a CPU on a small generated RGB image folder, 64
px views, tiny widths, 3 steps, same code path). No argument means
"vicreg"; "swav" from swav.yaml (configs/_solo_learn_swav.py). Predictive methods: the library differences of their heads and
SimSiam's optimiser are listed in configs/_solo_learn_teacher_student.py.

Data: tfds has no ImageNet-100, so the split is read from an image folder
(``dataset.name = "image_folder"``). Set ``dataset.data_dir`` (None here: a
run fails until it is set) to a directory laid out as::

    DIR/train/<wnid>/*.JPEG   # 100 class folders (solo-learn's class list)
    DIR/test/<wnid>/*.JPEG    # the 5,000 ImageNet val images of those classes

Suffixes .jpg/.jpeg/.png match in any case, so ImageNet's ``.JPEG`` files
are read as they are; labels are the sorted class-folder names' indices. A
folder named ``val`` instead of ``test`` works with
``--config.dataset.test_split=val``. ``dataset.in_memory`` does not apply to
folders (images are decoded on the fly by the host threads).

Sources (github.com/vturrisi/solo-learn, stored snapshot; da Costa et al.
2022, arXiv 2108.01775): scripts/pretrain/imagenet-100/vicreg.yaml with
augmentations/vicreg.yaml, {barlow,byol,simsiam,mocov3,dino,nnclr}.yaml with
augmentations/asymmetric.yaml (all of them: on ImageNet-100 SimSiam uses the
asymmetric views too, and DINO 2 crops, no local ones), and the defaults
of solo/methods/base.py and solo/args/pretrain.py. Note:
solo-learn's ImageNet-100 VICReg recipe uses its symmetric vicreg.yaml views
(blur 0.5 and solarization 0.1 on both crops, min scale 0.2), not the
asymmetric BYOL-style views; those are Barlow Twins' recipe and the
"asymmetric" variant word here. The library differences (lr scaling,
schedule ends, BatchNorm in the projector, precision,
Barlow's scale_loss) are those listed in configs/cifar_resnet18.py.
"""


from ml_collections import config_dict

from configs import _solo_learn_lars
from configs import _solo_learn_swav as swav
from configs import _solo_learn_teacher_student as teacher_student
from configs import common

METHODS = ("vicreg", "barlow_twins") + teacher_student.METHODS + ("swav",)
VARIANT_WORDS = ("asymmetric", "smoke")


def parse_arg(arg: str | None) -> tuple[str, frozenset]:
  """"method[,word...]" -> (method, words); checks the names."""
  parts = [p.strip() for p in (arg or "vicreg").split(",") if p.strip()]
  method, words = parts[0], frozenset(parts[1:])
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
  if words - set(VARIANT_WORDS):
    raise ValueError(f"unknown variant word(s) "
                     f"{sorted(words - set(VARIANT_WORDS))}; expected any of "
                     f"{VARIANT_WORDS}")
  if "asymmetric" in words and method != "vicreg":
    raise ValueError(f"'asymmetric' applies to vicreg ({method} already "
                     "uses the asymmetric views)")
  return method, words


def all_args() -> list[str]:
  """Every valid config argument (for tests and the docs)."""
  args = []
  for extra in ("", ",smoke"):
    args += [f"vicreg{extra}", f"vicreg,asymmetric{extra}"]
    args += [f"{m}{extra}" for m in METHODS if m != "vicreg"]
  return args


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration for "method[,variant...]"."""
  method, words = parse_arg(arg)
  c = common.get_config()
  c.method = method

  # ---------------------------------------------------------------- data --
  c.dataset.name = "image_folder"  # data.format: dali (image folders)
  c.dataset.data_dir = config_dict.placeholder(str)  # REQUIRED: set it
  c.dataset.train_split = "train"  # DIR/train (data.train_path)
  c.dataset.test_split = "test"  # DIR/test (data.val_path .../val)
  c.dataset.in_memory = "auto"  # not used by image folders
  c.dataset.channels = 3
  c.dataset.threads = 8  # host decoding threads (num_workers: 4 per GPU x 2)
  c.dataset.workers = -1  # auto: worker processes on hosts of >= 8 CPUs
  c.dataset.prefetch = 4

  # -------------------------------------------------------------- views --
  v = c.views
  v.num_global = 2  # num_crops: 2 (or 2 x num_crops: 1 in asymmetric.yaml)
  v.size = 224  # crop_size: 224
  v.crop = "random_resized"  # rrc: enabled
  v.crop_ratio = (3 / 4, 4 / 3)  # torchvision RandomResizedCrop default
  v.flip_prob = 0.5  # horizontal_flip.prob
  v.jitter_prob = 0.8  # color_jitter.prob
  v.brightness, v.contrast = 0.4, 0.4  # color_jitter brightness/contrast
  v.saturation, v.hue = 0.2, 0.1  # color_jitter saturation/hue
  v.grayscale_prob = 0.2  # grayscale.prob
  v.blur_sigma = (0.1, 2.0)  # GaussianBlur sigma (pretrain_dataloader.py)
  # 23 px at 224 (BYOL's kernel); solo-learn's PIL blur is untruncated.
  v.blur_kernel_fraction = 0.1
  v.solarize_threshold = 0.5  # ImageOps.solarize threshold 128
  v.erase_prob = 0.0  # no random erasing in solo-learn's recipes
  v.noise_std = 0.0
  if method == "vicreg" and "asymmetric" not in words:
    # imagenet-100/vicreg.yaml = augmentations/vicreg.yaml (symmetric).
    v.crop_scale = (0.2, 1.0)  # rrc.crop_min_scale 0.2
    v.blur_prob = 0.5  # gaussian_blur.prob 0.5 on both crops
    v.solarize_prob = 0.1  # solarization.prob 0.1 on both crops
  else:
    # imagenet-100/augmentations/asymmetric.yaml (BYOL's views, Grill et al.
    # 2020): min scale 0.08; blur 1.0 / 0.1; solarization 0.0 / 0.2.
    v.crop_scale = (0.08, 1.0)  # rrc.crop_min_scale 0.08
    with v.ignore_type():  # per-view tuples replace the float fields
      v.blur_prob = (1.0, 0.1)  # gaussian_blur.prob of crop 1, crop 2
      v.solarize_prob = (0.0, 0.2)  # solarization.prob of crop 1, crop 2

  # -------------------------------------------------------------- model --
  c.model.encoder = "resnet18"  # backbone.name: resnet18
  # torchvision's ResNet-18 (7x7/2 conv + max-pool) for non-CIFAR datasets
  # (solo/methods/base.py only swaps the stem for cifar10/100).
  c.model.encoder_kwargs = config_dict.ConfigDict({"stem": "imagenet"})
  c.model.dtype = "float32"  # solo-learn: precision 16-mixed ("bfloat16")
  if method not in teacher_student.METHODS + ("swav",):
    # vicreg.yaml / barlow.yaml: proj_hidden_dim 2048, proj_output_dim 2048,
    # 3-layer projector (solo/methods/{vicreg,barlow_twins}.py).
    c.model.projector = (2048, 2048, 2048)
    common.add_graph(c)  # G of the "graph" loss form

  c.loss = config_dict.ConfigDict()
  c.loss.form = "two_view"
  if method == "vicreg":
    c.loss.inv_weight = 25.0  # sim_loss_weight
    c.loss.var_weight = 25.0  # var_loss_weight
    c.loss.cov_weight = 1.0  # cov_loss_weight
    c.loss.eps = 1e-4  # solo/losses/vicreg.py: sqrt(var + 1e-4)
  elif method == "barlow_twins":
    # lamb default 0.0051 (solo/methods/barlow_twins.py); barlow.yaml's
    # scale_loss 0.1 is not mapped (no loss scale here).
    c.loss.lambda_offdiag = 0.0051

  # ---------------------------------------------------------------- optim --
  # optimizer: lars, batch_size 128 per device on devices [0, 1] = 256,
  # lr 0.3 scaled by 256/256 (solo/args/pretrain.py): effective 0.3, which is
  # our per-256 value 0.3 at batch 256.
  c.batch_size = 256
  # The teacher-student methods set their own (SimSiam: SGD).
  if method not in teacher_student.METHODS:
    _solo_learn_lars.set_lars(c.optim)  # lars, eta 0.02, clip_lr, ...
  c.optim.learning_rate = 0.3
  c.optim.weight_decay = 1e-4  # optimizer.weight_decay
  c.optim.warmup_epochs = 10.0  # scheduler warmup_epochs default (base.py)
  c.optim.end_lr_factor = 0.0  # scheduler min_lr default 0.0
  c.epochs = 400  # max_epochs: 400 (all seven yamls)
  if method in teacher_student.METHODS:
    # imagenet-100/{method}.yaml: heads, momentum, loss, optimizer lr /
    # weight_decay (batch_size 128 x devices [0, 1] = 256, lr per 256 as
    # above).
    teacher_student.set_method(c, method, "imagenet100")
  if method == "swav":
    # imagenet-100/swav.yaml: batch_size 128 x devices [0, 1] = 256, lr 0.6
    # per 256; configs/_solo_learn_swav.py (symmetric.yaml views).
    swav.set_swav(c)
  c.checkpoint_every_steps = 1000
  c.log_every_steps = 50

  c.eval_inputs.batch_size = 500
  c.eval_inputs.baselines = False  # raw-pixel probe on 150k-d inputs: too big
  # Resize 256, centre crop 224 (solo-learn val).
  c.eval_inputs.crop_fraction = 0.875

  if "smoke" in words:
    # Same code path at toy size: a generated RGB folder of ~80 px images,
    # 64 px views, ImageNet stem with tiny widths.
    common.smoke_image_folder(c, "imagenet100_resnet18", image_size=80,
                              view_size=64)
    if method in teacher_student.METHODS:
      teacher_student.set_smoke(c, method)
    if method == "swav":
      swav.set_smoke(c)
  return c

