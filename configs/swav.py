"""SwAV (Caron et al. 2020, arXiv 2006.09882) on Fashion-MNIST: swapped
prediction of Sinkhorn-Knopp cluster codes over unit-norm prototypes, with
multi-crop.

    python -m ssljax.main --config configs/swav.py --workdir runs/swav

Variants as in configs/common.py. Two global crops and four local crops of
14 px; codes from the two global crops, predicted by every other crop.
"""

from ml_collections import config_dict

from configs import common

VARIANTS = common.VARIANTS


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the run configuration; ``arg`` picks a variant from VARIANTS."""
  c = common.get_config(arg)
  c.method = "swav"
  c.loss = config_dict.ConfigDict()
  c.loss.form = "multi_crop"
  # Official main_swav.py defaults: τ 0.1, ε 0.05, 3 Sinkhorn iterations,
  # codes of crops 0 and 1.
  c.loss.temperature = 0.1
  c.loss.epsilon = 0.05
  c.loss.num_iterations = 3
  c.loss.crops_for_assign = (0, 1)
  # No queue. The official small-batch recipe (swav_200ep_bs256_pretrain.sh)
  # adds a queue of 3840 embeddings at epoch 15 of 200, once the network
  # moves slowly; here, at epoch 1 of 4 under AdamW, the loss rose from 6.28
  # to 7.05 when it started and the run collapsed (RankMe of z 3.2, probe
  # 0.8200, below random init), the failure the official README's "Training
  # gets unstable when using the queue" describes (its advice: a smaller
  # queue or a later start). Without it, 400 steps reach a 5-fold CV probe
  # of 0.8839 (docs/guide/dinov2_swav.md). queue_length > 0 turns it on.
  c.loss.queue_length = 0
  c.loss.epoch_queue_starts = 1.0
  # Official: projector 2048-128 (BatchNorm, ReLU), 3000 prototypes; 1000
  # here for Fashion-MNIST's 60,000 images.
  c.model.projector = (2048, 128)
  c.model.num_prototypes = 1000
  # Prototypes renormalised every step and frozen for the first epoch
  # (official freeze_prototypes_niters 313, one epoch at batch 4096).
  c.optim.normalize_last_layer = True
  c.optim.freeze_last_layer_epochs = 1.0
  # The official forward (src/resnet50.py ResNet.forward): the encoder's
  # BatchNorm over the crops of one resolution together, the projector's
  # over all crops together (ssljax.methods.swav).
  c.swav = config_dict.ConfigDict(dict(batch_norm_views="multi_crop"))
  # The frozen prototypes get no gradient (p.grad = None), so PyTorch's
  # optimisers skip them: no moments, and Adam's per-parameter step count
  # starts when they thaw.
  c.optim.frozen_adam_count = "hold"
  # Multi-crop: official 2 x 224 px (scale 0.14-1) + 6 x 96 px (0.05-0.14).
  c.views.num_local = 4
  c.views.local_size = 14
  c.views.crop_scale = (0.14, 1.0)
  c.views.local_crop_scale = (0.05, 0.14)
  if arg == "smoke":
    c.model.projector = (16, 8)
    c.model.num_prototypes = 16
    c.views.num_local = 2
    c.loss.queue_length = 2 * c.batch_size
    c.loss.epoch_queue_starts = 0.0
  return c
