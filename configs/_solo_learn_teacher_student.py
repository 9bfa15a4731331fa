"""solo-learn's ResNet-18 recipes for the teacher-student and predictor methods: BYOL, SimSiam,
MoCo v3, DINO and NNCLR (heads, teacher, loss, optimiser).

Not a config itself: configs/cifar_resnet18.py and
configs/imagenet100_resnet18.py call `set_method` (and `set_smoke` in their
smoke variants) after their own data and view fields; the views, batch size,
epochs and schedule stay in those files.

Source of every value: github.com/vturrisi/solo-learn at the stored
snapshot (da Costa et al. 2022, arXiv 2108.01775), the files
scripts/pretrain/{cifar,imagenet-100}/{byol,simsiam,mocov3,dino,nnclr}.yaml
and the defaults of solo/methods/{byol,simsiam,mocov3,dino,nnclr}.py and
solo/methods/base.py. The CIFAR and ImageNet-100 yamls give the same values
except where a ``recipe == "imagenet100"`` branch says otherwise.

Heads: ssljax's Projector / predictor is Dense-BN-ReLU per hidden layer and
a plain last Dense. solo-learn's heads differ in these details (not
reproduced): SimSiam's projector has bias-free hidden layers and a final
BatchNorm1d(affine=False); MoCo v3's ResNet projector has bias-free layers
and a final BatchNorm1d(affine=False); NNCLR's projector ends with a
BatchNorm1d. BYOL's and DINO's heads are the same layer forms as ours.
"""

from ml_collections import config_dict

from configs import _solo_learn_lars

METHODS = ("byol", "simsiam", "mocov3", "dino", "nnclr")
# Methods with a loss form over V > 2 views (their "graph" or "multi_view" forms):
# "graph" for BYOL and SimSiam, DINO's own "multi_view" pairing.
MULTICROP_METHODS = ("byol", "simsiam", "dino")
# solo-learn's view recipe of each method: augmentations/asymmetric.yaml
# (BYOL's asymmetric views) except SimSiam on CIFAR, which uses
# augmentations/symmetric_weak.yaml (cifar/simsiam.yaml defaults).
CIFAR_SYMMETRIC_WEAK = ("simsiam",)


def set_method(c: config_dict.ConfigDict, method: str, recipe: str) -> None:
  """Sets model heads, teacher, loss and optimiser of `method` in place.

  Args:
    c: a recipe config (method, views and data already set).
    method: one of METHODS.
    recipe: "cifar" or "imagenet100" (which solo-learn yaml to follow).
  """
  imagenet = recipe == "imagenet100"
  c.loss = config_dict.ConfigDict()
  c.loss.form = "two_view"  # solo-learn's symmetrised two-crop losses
  o = c.optim
  # optimizer.name: lars (SimSiam: sgd, see below), eta 0.02, clip_lr,
  # exclude_bias_n_norm, momentum 0.9 (configs/_solo_learn_lars.py).
  if method != "simsiam":
    _solo_learn_lars.set_lars(o)
  if method in ("byol", "mocov3", "dino"):
    c.teacher = config_dict.ConfigDict()  # the momentum teacher, set below
    c.teacher.schedule = "cosine"  # solo-learn's cosine momentum updater
  if method == "byol":
    # method_kwargs proj_hidden_dim 4096, proj_output_dim 256;
    # pred_hidden_dim 4096 (cifar/byol.yaml), 8192 (imagenet-100/byol.yaml).
    c.model.projector = (4096, 256)
    c.model.predictor = (8192 if imagenet else 4096, 256)
    c.teacher.momentum = 0.99  # momentum.base_tau 0.99
    c.teacher.final_momentum = 1.0  # momentum.final_tau 1.0
    # optimizer.lr 1.0 (cifar), 0.5 (imagenet-100); weight_decay 1e-5
    # (cifar), 1e-6 (imagenet-100).
    o.learning_rate = 0.5 if imagenet else 1.0
    o.weight_decay = 1e-6 if imagenet else 1e-5
  elif method == "simsiam":
    # proj_hidden_dim 2048, proj_output_dim 2048: solo/methods/simsiam.py
    # builds 3 Linear layers (2048-2048-2048); pred_hidden_dim 512.
    c.model.projector = (2048, 2048, 2048)
    c.model.predictor = (512, 2048)
    # The yaml's method_kwargs.temperature 0.2 is not read by SimSiam.
    # optimizer.name: sgd (torch.optim.SGD), momentum 0.9
    # (solo/args/pretrain.py's default), every parameter decayed
    # (exclude_bias_n_norm_wd default False).
    o.name = "sgd"
    o.sgd.momentum = 0.9
    o.weight_decay_mask = "all"
    o.learning_rate = 0.5  # optimizer.lr 0.5
    o.weight_decay = 1e-5  # optimizer.weight_decay 1e-5
    # Not reproduced: the predictor's static_lr (solo/methods/simsiam.py
    # keeps its lr fixed, no cosine decay).
  elif method == "mocov3":
    # proj_hidden_dim 4096, proj_output_dim 256, pred_hidden_dim 4096; the
    # ResNet branch of solo/methods/mocov3.py: 2-layer projector/predictor.
    c.model.projector = (4096, 256)
    c.model.predictor = (4096, 256)
    c.loss.temperature = 0.2  # method_kwargs.temperature 0.2
    c.teacher.momentum = 0.99  # momentum.base_tau 0.99
    c.teacher.final_momentum = 1.0  # momentum.final_tau 1.0
    o.learning_rate = 0.3  # optimizer.lr 0.3
    o.weight_decay = 1e-6  # optimizer.weight_decay 1e-6
  elif method == "dino":
    # DINOHead(hidden_dim=proj_hidden_dim 2048, bottleneck_dim=
    # proj_output_dim 256, num_prototypes 4096); num_layers 3, use_bn_in_head
    # False and norm_last_layer True are solo/methods/dino.py defaults.
    # The DINO head replaces the projector (ssljax.models.DINOHead).
    c.model.dino_head = config_dict.ConfigDict(
        {"hidden_dim": 2048, "bottleneck_dim": 256, "out_dim": 4096,
         "num_layers": 3, "use_bn": False, "norm_last_layer": True})
    c.loss.form = "multi_view"  # DINOLoss over all (teacher, student) pairs
    # DINO's last head layer frozen for its first epoch (Caron et al. 2021,
    # arXiv 2104.14294, official code's freeze_last_layer=1).
    c.optim.freeze_last_layer_epochs = 1.0
    c.optim.frozen_adam_count = "advance"  # LARS: no Adam count to hold
    # solo/methods/dino.py defaults: student 0.1, teacher 0.07, warm-up
    # start 0.04; solo/losses/dino.py center_momentum 0.9.
    c.loss.student_temperature = 0.1
    c.loss.teacher_temperature = 0.07
    c.loss.warmup_teacher_temperature = 0.04
    # warmup_teacher_temperature_epochs: default 0 (cifar/dino.yaml), 50
    # (imagenet-100/dino.yaml). solo-learn's per-epoch np.linspace(0.04,
    # 0.07, 50) reaches 0.07 at epoch 49: ours is linear per step, so 49.
    c.loss.teacher_temperature_warmup_epochs = 49.0 if imagenet else 0.0
    c.loss.center_momentum = 0.9
    c.teacher.momentum = 0.9995  # momentum.base_tau 0.9995
    c.teacher.final_momentum = 1.0  # momentum.final_tau 1.0
    o.learning_rate = 0.3  # optimizer.lr 0.3
    o.weight_decay = 1e-6  # optimizer.weight_decay 1e-6
    # Not reproduced: freeze_last_layer 1 (the prototypes are not updated
    # in epoch 0, solo/methods/dino.py default) and clip_grad (default 0:
    # off, as here).
  elif method == "nnclr":
    # proj_hidden_dim 2048, proj_output_dim 256: solo/methods/nnclr.py has a
    # 3-layer projector 2048-2048-256; pred_hidden_dim 4096.
    c.model.projector = (2048, 2048, 256)
    c.model.predictor = (4096, 256)
    c.loss.temperature = 0.2  # method_kwargs.temperature 0.2
    c.loss.queue_size = 65536  # method_kwargs.queue_size 65536
    o.learning_rate = 0.4  # optimizer.lr 0.4
    o.weight_decay = 1e-5  # optimizer.weight_decay 1e-5
  else:
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


def set_smoke(c: config_dict.ConfigDict, method: str) -> None:
  """Tiny heads for a smoke variant (after common.smoke_image_folder, which
  makes the projector 32 wide): same layer structure, toy widths."""
  if c.model.get("predictor"):
    c.model.predictor = (32, 32)  # last width = the projector's 32
  if method == "dino":
    c.model.dino_head.hidden_dim = 32
    c.model.dino_head.bottleneck_dim = 16
    c.model.dino_head.out_dim = 64
  if method == "nnclr":
    c.loss.queue_size = 64  # 4 batches of 16
