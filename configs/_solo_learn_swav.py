"""SwAV's fields of solo-learn's recipes, shared by configs/cifar_resnet18.py
and configs/imagenet100_resnet18.py (not a config itself).

Source: github.com/vturrisi/solo-learn (stored snapshot; da Costa et al.
2022, arXiv 2108.01775), scripts/pretrain/{cifar,imagenet-100}/swav.yaml
(their method_kwargs and optimizer are the same) with
augmentations/symmetric.yaml, and the defaults of solo/methods/swav.py
(sk_iters 3, sk_epsilon 0.05). SwAV: Caron et al. 2020, arXiv 2006.09882.
"""

from ml_collections import config_dict

from configs import _solo_learn_lars


def set_swav(c):
  """Loss, heads, views and LARS of solo-learn's SwAV on ``c`` (in place);
  the caller sets the encoder, batch and epochs."""
  c.method = "swav"
  c.loss = config_dict.ConfigDict(dict(
      form="multi_crop",
      temperature=0.1,  # method_kwargs.temperature
      epsilon=0.05,  # sk_epsilon default (solo/methods/swav.py)
      num_iterations=3,  # sk_iters default
      crops_for_assign=(0, 1),  # both crops (solo/methods/swav.py)
      queue_length=3840,  # method_kwargs.queue_size (15 batches of 256)
      epoch_queue_starts=50.0))  # method_kwargs.epoch_queue_starts
  # proj_hidden_dim 2048, proj_output_dim 128 (Linear-BN-ReLU-Linear).
  c.model.projector = (2048, 128)
  c.model.num_prototypes = 3000  # method_kwargs.num_prototypes
  c.optim.normalize_last_layer = True  # prototypes renormalised every step
  c.optim.freeze_last_layer_epochs = 2.0  # freeze_prototypes_epochs
  # optimizer: lars, eta 0.02, clip_lr, exclude_bias_n_norm
  _solo_learn_lars.set_lars(c.optim)
  c.optim.learning_rate = 0.6  # optimizer.lr (per 256; effective at 256)
  c.optim.weight_decay = 1e-6  # optimizer.weight_decay
  # augmentations/symmetric.yaml: 2 crops, min scale 0.08, jitter 0.8
  # (0.8, 0.8, 0.8, 0.2), grey 0.2, blur 0.5, no solarisation, flip 0.5.
  v = c.views
  v.num_global, v.num_local = 2, 0
  v.crop_scale = (0.08, 1.0)
  v.jitter_prob = 0.8
  v.brightness, v.contrast, v.saturation, v.hue = 0.8, 0.8, 0.8, 0.2
  v.grayscale_prob = 0.2
  with v.ignore_type():  # a float again where a recipe set per-view tuples
    v.blur_prob = 0.5
    v.solarize_prob = 0.0
  v.flip_prob = 0.5


def set_smoke(c):
  """Tiny heads and a queue of 2 smoke batches from the start."""
  c.model.projector = (16, 8)
  c.model.num_prototypes = 16
  c.loss.queue_length = 2 * c.batch_size
  c.loss.epoch_queue_starts = 0.0
