"""CIFAR-10/100 pretraining with a CIFAR-stem ResNet-18: solo-learn's recipes.

    python -m ssljax.main --config configs/cifar_resnet18.py:vicreg,cifar10 \\
        --workdir runs/c10_vicreg

The argument is "method,dataset[,variant...]": method in METHODS, dataset in
DATASETS, variant words "smoke" (about a minute on a CPU: a small generated
RGB image folder, tiny widths, 3 steps, same code path) and "multicrop" (2
global crops of 32 px + 4 local crops of 16 px, for methods with a V-view
loss form: MULTICROP_METHODS). No argument means "vicreg,cifar10". The
teacher-student and predictor methods (byol, simsiam, mocov3, dino, nnclr) take their heads,
teacher, loss and optimiser from configs/_solo_learn_teacher_student.py.
Examples:
``configs/cifar_resnet18.py:barlow_twins,cifar100``,
``configs/cifar_resnet18.py:vicreg,cifar10,multicrop,smoke``.

LeJEPA ("lejepa") follows FAIR's eb_jepa CIFAR-10 setting instead of
solo-learn (sources in its comments below).

Source of every other value: solo-learn (da Costa et al. 2022, JMLR, arXiv
2108.01775), github.com/vturrisi/solo-learn at the stored snapshot, files
scripts/pretrain/cifar/{vicreg,barlow,simclr,wmse,byol,simsiam,mocov3,dino,
nnclr,swav}.yaml (SwAV: configs/_solo_learn_swav.py) and
scripts/pretrain/cifar/augmentations/{asymmetric,symmetric,
symmetric_weak}.yaml, plus the
defaults filled in by solo/methods/base.py and solo/args/pretrain.py. Paths
in the comments below are relative to that repository.

Where this library differs from solo-learn (said again next to the field):

* learning rate: solo-learn multiplies ``optimizer.lr`` by
  batch_size × devices / 256 (solo/args/pretrain.py, "adjust lr according to
  batch size"); its CIFAR yamls use 1 device and batch 256, so the yaml lr is
  both the per-256 value and the effective one. Ours is per 256 samples too
  (ssljax/train.py create_learning_rate_fn: peak = lr × batch / 256).
* LARS: solo-learn's LARS (solo/utils/lars.py: eta 0.02, ``clip_lr: True``,
  ``exclude_bias_n_norm: True``) is the same step here
  (configs/_solo_learn_lars.py: ``lars.trust_ratio = "larc"``,
  ``lars.clip``, the kernels-only mask, SGD's momentum buffer).
* schedule: solo-learn's warmup_cosine (solo/methods/base.py defaults) starts
  the warm-up at 3e-5 and ends at min_lr 0; ours starts at 0, ends at
  end_lr_factor × peak (0 here).
* precision: solo-learn trains in ``precision: 16-mixed``; model.dtype below
  is float32 ("bfloat16" is the nearest equivalent on accelerators).
* the projector (ssljax.models.heads.Projector) always has BatchNorm in its
  hidden layers; solo-learn's SimCLR projector has none.
* the linear probe here is an offline L-BFGS probe on frozen features
  (ssljax.probes), not solo-learn's online classifier (classifier_lr).
"""


from ml_collections import config_dict

from configs import _solo_learn_lars
from configs import _solo_learn_swav as swav
from configs import _solo_learn_teacher_student as teacher_student
from configs import common

METHODS = ("vicreg", "barlow_twins", "simclr", "wmse") + teacher_student.METHODS + (
    "lejepa", "swav")
DATASETS = ("cifar10", "cifar100")
VARIANT_WORDS = ("smoke", "multicrop")
# Methods whose loss accepts V > 2 views (ssljax.methods: the
# "graph" form takes the V-view graph, DINO's "multi_view" its own pairing;
# W-MSE, MoCo v3 and NNCLR only have "two_view" for V > 2).
MULTICROP_METHODS = ("vicreg", "barlow_twins", "simclr", "lejepa") + (
    teacher_student.MULTICROP_METHODS)


def parse_arg(arg: str | None) -> tuple[str, str, frozenset]:
  """"method,dataset[,word...]" -> (method, dataset, words); checks names."""
  parts = [p.strip() for p in (arg or "vicreg,cifar10").split(",") if p.strip()]
  if len(parts) < 2:
    raise ValueError(f"config argument {arg!r}: expected 'method,dataset"
                     f"[,{'|'.join(VARIANT_WORDS)}...]'")
  method, dataset, words = parts[0], parts[1], frozenset(parts[2:])
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
  if dataset not in DATASETS:
    raise ValueError(f"unknown dataset {dataset!r}; expected one of {DATASETS}")
  if words - set(VARIANT_WORDS):
    raise ValueError(f"unknown variant word(s) "
                     f"{sorted(words - set(VARIANT_WORDS))}; expected any of "
                     f"{VARIANT_WORDS}")
  if "multicrop" in words and method not in MULTICROP_METHODS:
    raise ValueError(f"'multicrop' needs a loss over V > 2 views; {method!r} "
                     "has only the two-view form (allowed: "
                     f"{MULTICROP_METHODS})")
  return method, dataset, words


def all_args() -> list[str]:
  """Every valid config argument (for tests and the docs)."""
  args = []
  for m in METHODS:
    for d in DATASETS:
      for extra in ("", ",smoke", ",multicrop", ",multicrop,smoke"):
        if "multicrop" in extra and m not in MULTICROP_METHODS:
          continue
        args.append(f"{m},{d}{extra}")
  return args


def _set_per_view(views, name, value):
  """Sets views.<name> to a per-view tuple (the base field is a float)."""
  with views.ignore_type():
    setattr(views, name, value)


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration for "method,dataset[,variant...]"."""
  method, dataset, words = parse_arg(arg)
  c = common.get_config()
  c.method = method

  # ---------------------------------------------------------------- data --
  c.dataset.name = dataset  # tfds "cifar10" | "cifar100" (tfds build <name>)
  c.dataset.in_memory = "auto"  # 50k 32x32x3 images: 150 MB, held in memory

  # -------------------------------------------------------------- views --
  # Common to all four recipes (scripts/pretrain/cifar/*.yaml and
  # augmentations/*.yaml): 2 crops of 32 px, RandomResizedCrop with
  # torchvision's default ratio (3/4, 4/3), jitter p 0.8, grayscale 0.2,
  # flip 0.5, no equalization; solarization threshold 128/255 (PIL
  # ImageOps.solarize default, solo/data/pretrain_dataloader.py).
  v = c.views
  v.num_global = 2  # num_crops: 2 (or 2 x num_crops: 1 in asymmetric.yaml)
  v.size = 32  # crop_size: 32
  v.crop = "random_resized"  # rrc: enabled
  v.crop_ratio = (3 / 4, 4 / 3)  # torchvision RandomResizedCrop default
  v.flip_prob = 0.5  # horizontal_flip.prob
  v.jitter_prob = 0.8  # color_jitter.prob
  v.grayscale_prob = 0.2  # grayscale.prob
  v.blur_prob = 0.0  # gaussian_blur.prob (0 except SimCLR's symmetric.yaml)
  v.blur_sigma = (0.1, 2.0)  # GaussianBlur sigma (pretrain_dataloader.py)
  # PIL's GaussianBlur(radius=σ) has no truncated kernel; 13 px at 32 px
  # covers ±3σ at σ = 2 (our blur needs a kernel size; not in solo-learn).
  v.blur_kernel_fraction = 0.4
  v.solarize_threshold = 0.5  # ImageOps.solarize threshold 128
  v.erase_prob = 0.0  # solo-learn's CIFAR recipes do no random erasing
  v.noise_std = 0.0  # nor additive noise
  if method in ("vicreg", "lejepa"):  # scripts/pretrain/cifar/vicreg.yaml
    # (inline augs). LeJEPA: eb_jepa's own CIFAR transforms
    # (examples/image_jepa/dataset.py) were not read; solo-learn's VICReg
    # views stand in for them.
    v.crop_scale = (0.2, 1.0)  # rrc.crop_min_scale 0.2, crop_max_scale 1.0
    v.brightness, v.contrast = 0.4, 0.4  # color_jitter.brightness/contrast
    v.saturation, v.hue = 0.2, 0.1  # color_jitter.saturation/hue
    v.solarize_prob = 0.1  # solarization.prob 0.1 on both crops
  elif method == "barlow_twins":  # barlow.yaml -> augmentations/asymmetric.yaml
    v.crop_scale = (0.08, 1.0)  # rrc.crop_min_scale 0.08
    v.brightness, v.contrast = 0.4, 0.4
    v.saturation, v.hue = 0.2, 0.1
    _set_per_view(v, "solarize_prob", (0.0, 0.2))  # first crop 0.0, second 0.2
  elif method == "simclr":  # simclr.yaml -> augmentations/symmetric.yaml
    v.crop_scale = (0.08, 1.0)  # rrc.crop_min_scale 0.08
    v.brightness, v.contrast = 0.8, 0.8  # color_jitter 0.8/0.8/0.8/0.2
    v.saturation, v.hue = 0.8, 0.2
    # symmetric.yaml sets gaussian_blur.prob 0.5 even for CIFAR (the other
    # CIFAR recipes use none).
    v.blur_prob = 0.5
    v.solarize_prob = 0.0  # solarization.prob 0.0
  elif method == "wmse":  # scripts/pretrain/cifar/wmse.yaml (inline augs)
    v.crop_scale = (0.2, 1.0)  # rrc.crop_min_scale 0.2
    v.brightness, v.contrast = 0.8, 0.8  # color_jitter 0.8/0.8/0.8/0.2
    v.saturation, v.hue = 0.8, 0.2
    v.solarize_prob = 0.0  # solarization.prob 0.0
  elif method in teacher_student.CIFAR_SYMMETRIC_WEAK:
    # simsiam.yaml -> augmentations/symmetric_weak.yaml (2 identical crops)
    v.crop_scale = (0.08, 1.0)  # rrc.crop_min_scale 0.08
    v.brightness, v.contrast = 0.4, 0.4  # color_jitter 0.4/0.4/0.4/0.1
    v.saturation, v.hue = 0.4, 0.1
    v.blur_prob = 0.5  # gaussian_blur.prob 0.5
    v.solarize_prob = 0.0  # solarization.prob 0.0
  elif method == "swav":
    pass  # set with the loss below (configs/_solo_learn_swav.py)
  else:
    # {byol,mocov3,dino,nnclr}.yaml -> augmentations/asymmetric.yaml, the
    # same views as Barlow Twins above (2 crops, no local crops: DINO's
    # CIFAR recipe has num_small_crops 0).
    v.crop_scale = (0.08, 1.0)  # rrc.crop_min_scale 0.08
    v.brightness, v.contrast = 0.4, 0.4
    v.saturation, v.hue = 0.2, 0.1
    _set_per_view(v, "solarize_prob", (0.0, 0.2))  # first crop 0.0, second 0.2
  if v.blur_prob == 0.0 and method != "swav":  # no blur: its kernel size is not read
    v.blur_kernel_fraction = 0.1

  # -------------------------------------------------------------- model --
  c.model.encoder = "resnet18"  # backbone.name: resnet18
  # solo/methods/base.py replaces conv1 by a 3x3 stride-1 conv and removes
  # the max-pool for cifar10/cifar100: our "cifar" stem. Widths 64-512, D=512.
  c.model.encoder_kwargs = config_dict.ConfigDict({"stem": "cifar"})
  c.model.dtype = "float32"  # solo-learn: precision 16-mixed (see docstring)

  # ---------------------------------------------------------------- loss --
  c.loss = config_dict.ConfigDict()
  c.loss.form = "two_view"  # the papers' two-view losses (V = 2)
  if method == "vicreg":
    # solo/methods/vicreg.py projector: Linear-BN-ReLU-Linear-BN-ReLU-Linear,
    # proj_hidden_dim 2048, proj_output_dim 2048 (cifar/vicreg.yaml).
    c.model.projector = (2048, 2048, 2048)
    c.loss.inv_weight = 25.0  # sim_loss_weight
    c.loss.var_weight = 25.0  # var_loss_weight
    c.loss.cov_weight = 1.0  # cov_loss_weight
    c.loss.eps = 1e-4  # solo/losses/vicreg.py: sqrt(var + 1e-4)
  elif method == "barlow_twins":
    # solo/methods/barlow_twins.py: same 3-layer projector, 2048-2048-2048.
    c.model.projector = (2048, 2048, 2048)
    # lamb: solo/methods/barlow_twins.py default 0.0051 (not in the yaml).
    c.loss.lambda_offdiag = 0.0051
    # Not mapped: barlow.yaml scale_loss 0.1 multiplies solo-learn's loss;
    # our loss has no scale. With LARS the kernels' trust-ratio step is
    # nearly scale-free, but bias/BatchNorm steps are 10x larger here.
  elif method == "simclr":
    # solo/methods/simclr.py projector Linear-ReLU-Linear, hidden 2048,
    # output 256 (simclr.yaml); ours adds BatchNorm to the hidden layer.
    c.model.projector = (2048, 256)
    c.loss.temperature = 0.2  # method_kwargs.temperature
    c.loss.block_size = config_dict.placeholder(int)  # dense logits
  elif method == "wmse":
    # solo/methods/wmse.py projector Linear-BN-ReLU-Linear, 1024 -> 64.
    c.model.projector = (1024, 64)
    c.loss.eps = 0.0  # whitening_eps default 0.0 (solo/methods/wmse.py)
    c.loss.whitening_size = 128  # method_kwargs.whitening_size
    # whitening_iters default 1 (solo/methods/wmse.py): one pass, as ours.
  elif method == "lejepa":
    # FAIR's eb_jepa CIFAR-10 setting (github.com/facebookresearch/eb_jepa,
    # examples/image_jepa: README "SIGReg (BCS)" rows, cfgs/default.yaml,
    # main.py): ResNet-18 with the CIFAR stem, 2 views of batch 256, 300
    # epochs, projector Linear-BN-ReLU x2 then Linear, 2048-2048-128 (its
    # best "2048 x 128"), reported 91.02 % online linear-probe accuracy.
    c.model.projector = (2048, 2048, 128)
    c.loss.form = "multi_view"  # 2 global views: invariance to their mean
    c.lejepa = config_dict.ConfigDict()
    # eb_jepa weighs inv + λ·SIGReg with λ = 10 (its best); the same
    # direction of the gradient is (1 − λ')·inv + λ'·SIGReg with
    # λ' = 10/11 (an overall factor 11 is not mapped: LARS's trust ratio
    # makes the kernels' step nearly scale-free). Its BCS loss code was not
    # read: whether its invariance is ‖z1 − z2‖² (4x ours for 2 views) or
    # the distance to the views' mean is not checked.
    c.lejepa.lam = 10.0 / 11.0
    c.lejepa.num_slices = 1024  # the official LeJEPA README's example
  elif method == "swav":
    # scripts/pretrain/cifar/swav.yaml, configs/_solo_learn_swav.py (its
    # symmetric.yaml views with blur 0.5: the 13-px kernel above).
    swav.set_swav(c)
  else:
    teacher_student.set_method(c, method, "cifar")
  if method not in teacher_student.METHODS + ("lejepa", "swav"):
    common.add_graph(c)  # G of the "graph" form (the multicrop variant)

  # ---------------------------------------------------------------- optim --
  c.batch_size = 256  # optimizer.batch_size 256 on devices: [0]
  c.epochs = 1000  # max_epochs: 1000
  if method == "lejepa":
    c.epochs = 300  # eb_jepa optim.epochs: 300
  c.optim.warmup_epochs = 10.0  # scheduler warmup_epochs default 10 (base.py)
  c.optim.end_lr_factor = 0.0  # scheduler min_lr default 0.0 (base.py)
  if method in teacher_student.METHODS + ("swav",):
    pass  # optimiser set by set_method / set_swav: {method}.yaml optimizer.*
  elif method == "wmse":
    # wmse.yaml: optimizer adam, lr 2e-3, weight_decay 1e-6 (torch Adam adds
    # wd·p to the gradient; ours is AdamW's decoupled decay on kernels only).
    c.optim.name = "adamw"
    c.optim.learning_rate = 2e-3  # per 256 = effective at batch 256
    c.optim.weight_decay = 1e-6
  else:
    # eb_jepa (LeJEPA): LARS lr 0.3, weight decay 1e-4, eta 0.02, clip_lr,
    # bias/norm excluded, momentum 0.9, 10 warm-up epochs, min_lr 0 (its
    # cfgs/default.yaml and main.py): solo-learn's VICReg values.
    _solo_learn_lars.set_lars(c.optim)  # lars, eta 0.02, clip_lr, ...
    # optimizer.lr: 0.3 (VICReg, Barlow Twins), 0.4 (SimCLR); per 256 samples
    # in both libraries, so the effective lr at batch 256 is the same.
    c.optim.learning_rate = 0.4 if method == "simclr" else 0.3
    c.optim.weight_decay = 1e-4  # optimizer.weight_decay 1e-4

  c.checkpoint_every_steps = 1000
  c.log_every_steps = 50

  # ---------------------------------------------------------- multi-crop --
  if "multicrop" in words:
    # Not from solo-learn's CIFAR scripts (they use 2 crops): 2 x 32 px
    # global + 4 x 16 px local crops (local scale (0.05, 0.4), ours/DINO's
    # default). The two-view losses need V = 2, so the loss switches to the
    # "graph" form over the V-view graph (ssljax.methods: form "graph"
    # accepts any V >= 2; for V = 2 VICReg/SimCLR graph forms are the
    # papers' losses up to their normalisation). DINO keeps "multi_view":
    # the teacher sees the 2 global crops, the student all 6 (Caron et al.).
    v.num_local = 4
    v.local_size = 16
    v.local_crop_scale = (0.05, 0.4)
    if method not in ("dino", "lejepa"):  # their own V-view forms
      c.loss.form = "graph"
    if not isinstance(v.solarize_prob, float):
      # Asymmetric views: local crops get the first (unsolarized) crop's
      # ops, V = 6 values.
      _set_per_view(v, "solarize_prob", (0.0, 0.2, 0.0, 0.0, 0.0, 0.0))

  # ---------------------------------------------------------------- eval --
  c.eval_inputs.batch_size = 1000
  c.eval_inputs.baselines = True  # raw-pixel and random-init probes too

  # --------------------------------------------------------------- smoke --
  if "smoke" in words:
    # Same code path at toy size on a generated ~40 px RGB image folder.
    common.smoke_image_folder(c, "cifar_resnet18", image_size=40,
                              view_size=32)
    if method == "wmse":
      c.model.projector = (32, 8)
      c.loss.whitening_size = 16  # > K = 8 rows per whitened sub-batch
    if method in teacher_student.METHODS:
      teacher_student.set_smoke(c, method)
    if method == "lejepa":
      c.lejepa.num_slices = 16
    if method == "swav":
      swav.set_smoke(c)
    c.eval_inputs.baselines = False
  return c
