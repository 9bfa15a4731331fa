"""solo-learn's LARS, shared by its recipes (configs/cifar_resnet18.py,
configs/imagenet100_resnet18.py and their method helpers; not a config
itself).

Source: github.com/vturrisi/solo-learn (stored snapshot; da Costa et al.
2022, arXiv 2108.01775): every LARS yaml of scripts/pretrain/cifar and
scripts/pretrain/imagenet-100 sets ``optimizer.kwargs`` eta 0.02,
``clip_lr: True`` and ``exclude_bias_n_norm: True``; the momentum is 0.9
(solo/args/pretrain.py's default). Its LARS (solo/utils/lars.py) is LARC's
rule: the trust ratio η‖w‖ / (‖g‖ + λ‖w‖ + 1e-8), capped at the learning
rate (clip_lr), applied with the weight decay to tensors with more than one
dimension only (the default ``optim.weight_decay_mask``), then SGD's momentum of those updates times the current
learning rate (ssljax.optimizers.scale_by_larc).
"""

from ml_collections import config_dict


def set_lars(optim: config_dict.ConfigDict) -> None:
  """solo-learn's LARS on ``optim`` (in place); the caller sets the
  learning rate and weight decay of its yaml."""
  optim.name = "lars"  # optimizer.name
  optim.lars.trust_coefficient = 0.02  # optimizer.kwargs.eta
  optim.lars.momentum = 0.9  # kwargs.momentum default (solo/args/pretrain.py)
  optim.lars.trust_ratio = "larc"  # solo/utils/lars.py's ratio
  optim.lars.clip = True  # optimizer.kwargs.clip_lr
  optim.lars.momentum_buffer = "gradients"  # SGD's buffer, times the lr
  # optimizer.kwargs.exclude_bias_n_norm: the default weight-decay mask
  # ("kernels": tensors of more than one dimension) is the same set.
