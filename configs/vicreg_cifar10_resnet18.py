"""VICReg on CIFAR-10 with a CIFAR ResNet-18 (solo-learn-style recipe), for GPUs.

    python -m ssljax.main --config configs/vicreg_cifar10_resnet18.py --workdir runs/c10

Needs tfds's ``cifar10`` prepared in the data dir (``tfds build cifar10``) or
``--config.dataset.download=True`` with internet. On a CPU a ResNet-18 step
takes tens of seconds: use the ``smoke`` variant only to check the wiring.
The views use crops and flips only (no colour jitter yet), so accuracy will
sit below the published VICReg CIFAR-10 numbers.
"""

from configs import vicreg

VARIANTS = ("default", "smoke")


def get_config(arg: str | None = None):
  """Returns the CIFAR-10 / ResNet-18 config; ``arg`` picks a variant."""
  variant = arg or "default"
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
  c = vicreg.get_config()
  c.dataset.name = "cifar10"
  c.views.crop_scale = (0.08, 1.0)
  c.model.encoder = "resnet18"
  c.model.encoder_kwargs = {}  # ResNet18 defaults: widths 64-128-256-512
  c.model.projector = (2048, 2048, 2048)
  c.optim.name = "lars"
  c.optim.learning_rate = 0.3  # per 256 samples
  c.optim.weight_decay = 1e-4
  c.optim.warmup_epochs = 10.0
  c.batch_size = 256
  c.epochs = 400
  c.checkpoint_every_steps = 1000
  if variant == "smoke":
    c.dataset.train_split = "train[:256]"
    c.dataset.test_split = "test[:128]"
    c.batch_size = 32
    c.num_steps = 2
  return c
