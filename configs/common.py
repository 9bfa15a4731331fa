"""The fields every method shares: data, views, encoder, optimiser, schedule,
checkpoints, multi-host setup and evaluation (docs/guide/configs.md).

Not a config itself: each method's config (configs/vicreg.py, configs/byol.py,
...) starts from ``common.get_config(variant)`` and adds its own fields:
``method``, ``loss`` (``form`` and the loss hyper-parameters), its heads
(``model.projector``, ``model.predictor`` or ``model.dino_head``), the
momentum teacher (``teacher``) and, for the joint-embedding methods, the
graph of the "graph" loss form (``add_graph``).

Variants: "default" (Fashion-MNIST, a small CNN, 4 epochs), "smoke" (seconds
on a CPU, for tests), "long" (30 epochs).
"""

import os
import tempfile

from ml_collections import config_dict

VARIANTS = ("default", "smoke", "long")


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the shared fields; ``arg`` picks a variant from VARIANTS.

  Raises:
    ValueError: an unknown variant.
  """
  variant = arg or "default"
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
  c = config_dict.ConfigDict()
  c.seed = 0  # seeds parameters, shuffling and augmentation

  c.dataset = config_dict.ConfigDict()
  # Any tfds dataset with "image" and "label" features. fashion_mnist_local is
  # built offline from Debian's dataset-fashion-mnist files.
  c.dataset.name = "fashion_mnist_local"
  c.dataset.data_dir = config_dict.placeholder(str)  # None: tfds default dir
  c.dataset.download = False  # let tfds download a missing dataset (internet)
  c.dataset.train_split = "train"  # pretraining and probe-training split
  c.dataset.test_split = "test"  # probe test split

  # Records: "auto" holds a split of fixed-shape images in memory when it
  # decodes to at most 2 GiB (Fashion-MNIST: 47 MB), else streams it from
  # tfds's ArrayRecord files; "yes" | "no" force either.
  c.dataset.in_memory = "auto"
  c.dataset.channels = 3  # image_folder: images converted to 1 or 3 channels
  # image_folder only: write a small generated folder at data_dir first if
  # it has no train split (the recipes' smoke variants; ssljax.data.synthetic).
  c.dataset.generate = False
  c.dataset.generate_kwargs = config_dict.ConfigDict()  # write_image_folder args
  c.dataset.threads = 4  # host threads preparing batches (grain)
  c.dataset.prefetch = 4  # batches prepared ahead
  # Worker processes preparing batches, each with `threads` threads (0: the
  # threads of the main process). For decoded sources (image folders) on
  # many-core hosts, where one process's threads share its interpreter lock;
  # -1 (auto, the ImageNet-scale recipes): cpus - 4 workers of one thread
  # for images of several sizes on a host of >= 8 CPUs, else 0
  # (ssljax.data.batches.host_workers).
  c.dataset.workers = 0

  # The views (ssljax.data.view_spec): num_global global crops and num_local
  # local crops; every op below takes one value for all views or a tuple
  # with one per view (global views first), so asymmetric recipes (BYOL,
  # Barlow Twins) are configs.
  c.views = config_dict.ConfigDict()
  c.views.num_global = 2  # G global crops (V = G + L)
  c.views.num_local = 0  # L local crops (multi-crop)
  c.views.size = 0  # global crop side in pixels; 0: the images' own size
  c.views.local_size = 0  # local crop side in pixels
  c.views.crop = "random_resized"  # "random_resized" | "pad_and_crop" | "none"
  c.views.crop_scale = (0.2, 1.0)  # area fraction of global crops
  c.views.local_crop_scale = (0.05, 0.4)  # area fraction of local crops
  c.views.crop_ratio = (3 / 4, 4 / 3)  # aspect-ratio range of the crops
  c.views.pad = 4  # pixels of zero padding for "pad_and_crop"
  c.views.flip_prob = 0.5  # horizontal flip
  # Grey-level colour jitter and random erasing: with them the 4-epoch probe
  # rose from 0.8702 to 0.8759 and k-NN from 0.7958 to 0.8402 (README).
  c.views.jitter_prob = 0.8  # probability of the colour jitter (SimCLR: 0.8)
  c.views.brightness = 0.4  # brightness factor in [1 − b, 1 + b]
  c.views.contrast = 0.4  # contrast factor in [1 − c, 1 + c]
  c.views.saturation = 0.0  # saturation factor (RGB only)
  c.views.hue = 0.0  # hue shift in [−h, h] turns (RGB only)
  c.views.grayscale_prob = 0.0  # ITU-R 601 luma (RGB only)
  c.views.blur_prob = 0.0  # Gaussian blur
  c.views.blur_sigma = (0.1, 2.0)  # its σ range in pixels
  c.views.blur_kernel_fraction = 0.1  # kernel side / image side (23 px at 224)
  c.views.solarize_prob = 0.0  # x >= threshold -> 1 − x
  c.views.solarize_threshold = 0.5  # in [0, 1] pixel units
  c.views.erase_prob = 0.5  # random erasing (Zhong et al. 2020)
  c.views.erase_scale = (0.02, 0.2)  # erased area fraction range
  c.views.noise_std = 0.0  # std of additive Gaussian noise (pixels in [0, 1])

  # The encoder only: the heads (model.projector, model.predictor,
  # model.dino_head) are fields of each method's config.
  c.model = config_dict.ConfigDict()
  c.model.encoder = "cnn"  # key of ssljax.models.ENCODERS
  c.model.encoder_kwargs = config_dict.ConfigDict()  # attributes of the encoder
  # Four 3x3 stages at 28, 14, 7, 3 pixels; the wide last stage gives a
  # 512-d representation (probe accuracy grows with it). A 2x256-image step
  # took 0.19-0.22 s on 2 quiet CPU cores (2026-11-26) and 0.6 s under load.
  c.model.encoder_kwargs.channels = (16, 32, 64, 512)
  c.model.encoder_kwargs.downsample = "avg"
  # PyTorch's default init, U(±1/√fan_in) (ssljax.models.initializers), and
  # BatchNorm running averages with momentum 0.9 (PyTorch's 0.1): after 1
  # epoch the probe rose from 0.8740 to 0.8825 with them (docs/results.md).
  c.model.encoder_kwargs.weight_init = "uniform_fan_in"
  c.model.encoder_kwargs.bn_momentum = 0.9
  c.model.dtype = "float32"  # "float32" | "bfloat16" computation dtype

  c.optim = config_dict.ConfigDict()
  c.optim.name = "adamw"  # "adamw" | "lars" | "sgd" (ssljax.optimizers)
  c.optim.learning_rate = 2e-3  # peak, per batch of 256 (scaled linearly)
  c.optim.weight_decay = 1e-4  # on kernels only (not biases, BatchNorm)
  c.optim.warmup_epochs = 1.0  # linear warm-up, then cosine decay
  c.optim.end_lr_factor = 0.01  # final lr = factor × peak
  # Rescale the gradient to this L2 norm when larger (0: off): the global
  # norm ("global") or each tensor's ("per_tensor", DINO's official clipping).
  c.optim.clip_grad_norm = 0.0
  c.optim.clip_mode = "global"
  # Weight decay "constant", or "cosine" from weight_decay to
  # final_weight_decay (DINO's and I-JEPA's 0.04 -> 0.4).
  c.optim.weight_decay_schedule = "constant"
  c.optim.final_weight_decay = 0.0  # read only with the cosine schedule
  # The lr, weight-decay and EMA schedules run over schedule_scale x the
  # run's steps (I-JEPA's ipe_scale: 1.25 would stop a run at 80 % of them;
  # its official configs use 1.0).
  c.optim.schedule_scale = 1.0
  # The warm-up starts at warmup_start_factor x the peak lr (I-JEPA's
  # start_lr / lr: 0.2); update k reads the lr and weight-decay schedules at
  # k + schedule_offset (I-JEPA's schedulers step before the update: 1).
  c.optim.warmup_start_factor = 0.0
  c.optim.schedule_offset = 0
  # Adam's bias corrections 1 - beta^t: "optax" (in the parameters' float
  # type: 1.3e-5 off at t = 1 in float32) or "accurate" (PyTorch's AdamW,
  # which computes them in float64; ssljax.optimizers).
  c.optim.adam_bias_correction = "optax"
  # A ViT's block i of L learns at layerwise_decay^(L - i) x the lr, its
  # embeddings at layerwise_decay^(L + 1), the patch embedding also x
  # patch_embed_lr_mult (DINOv2: 0.9 and 0.2); 1 and 1: one lr for all.
  c.optim.layerwise_decay = 1.0
  c.optim.patch_embed_lr_mult = 1.0
  # The learning rate of one-dimensional parameters (biases, normalisation
  # scales and offsets) over the others': 1, one rate; Barlow Twins'
  # official 0.0048 / 0.2 = 0.024.
  c.optim.bias_norm_lr_factor = 1.0
  # "step": the schedule moves every step; "epoch": held through each epoch
  # at its first step's value (SimSiam's official per-epoch cosine).
  c.optim.schedule_unit = "step"
  # SGD only: read when optim.name == "sgd" (PyTorch's SGD: coupled weight
  # decay, dampening 0).
  c.optim.sgd = config_dict.ConfigDict()
  c.optim.sgd.momentum = 0.9
  # LARS only: read when optim.name == "lars", ignored by adamw.
  c.optim.lars = config_dict.ConfigDict()
  c.optim.lars.momentum = 0.9  # heavy-ball momentum of LARS
  c.optim.lars.trust_coefficient = 1e-3  # η of the layer-wise trust ratio
  # "updates": optax.lars's momentum of lr-scaled steps; "gradients": the
  # PyTorch LARS of MoCo v3, VICReg and solo-learn, a momentum of
  # trust-scaled gradients times the current lr (they differ when lr moves).
  c.optim.lars.momentum_buffer = "updates"
  # "update": η‖w‖ / ‖g + λw‖ (optax, VICReg, BYOL); "larc": η‖w‖ /
  # (‖g‖ + λ‖w‖ + 1e-8), the SGD inside apex's LARC (SwAV) and solo-learn's
  # LARS, with the "gradients" buffer; clip ("larc" only): the ratio capped
  # at the learning rate (LARC's clip, solo-learn's clip_lr).
  c.optim.lars.trust_ratio = "update"
  c.optim.lars.clip = False

  c.batch_size = 256  # global batch of samples (each with V views)
  # Pretraining epochs over the train split: 4 fit in 15 min on 2 CPU cores
  # (probe 0.8759); 6 reach 0.8882 in 18 min; ":long" (30) 0.8981 (README).
  c.epochs = 4
  c.num_steps = -1  # > 0 overrides epochs with an exact step count

  c.log_every_steps = 20  # metrics.jsonl / TensorBoard / progress bar
  c.checkpoint_every_steps = 200  # orbax checkpoint period
  c.keep_checkpoints = 2  # newest checkpoints kept

  # Faults during training (docs/guide/checkpoints.md).
  c.train = config_dict.ConfigDict()
  # A step whose loss terms or gradients hold a NaN/Inf: "stop" the run
  # (naming the step and the last good checkpoint) or "skip" its update
  # (state unchanged, counted in metrics.jsonl as "skipped_steps").
  c.train.on_nonfinite = "stop"
  c.train.max_skipped = 10  # "skip": stop after this many skips in a row
  # Signals that preempt the run: finish the step, checkpoint it, exit.
  # SLURM's `--signal=USR1@90` needs "SIGUSR1" added here.
  c.train.preemption_signals = ("SIGTERM", "SIGINT")
  # Exit status after a preemption (0; or e.g. a scheduler's requeue code).
  c.train.preempted_exit_status = 0

  # Multi-process (multi-host) runs: ssljax.distributed, README "Multi-host".
  # Each None falls back to the environment variable named, then to jax's
  # cluster detection (SLURM srun, Open MPI, Cloud TPU pod slices).
  c.distributed = config_dict.ConfigDict()
  c.distributed.enabled = False  # call jax.distributed.initialize at start
  # "host:port" of process 0's coordinator ($JAX_COORDINATOR_ADDRESS)
  c.distributed.coordinator_address = config_dict.placeholder(str)
  c.distributed.num_processes = config_dict.placeholder(int)  # $JAX_NUM_PROCESSES
  c.distributed.process_id = config_dict.placeholder(int)  # $JAX_PROCESS_ID
  # Seconds without a heartbeat before the coordination service declares a
  # process dead and every other process stops (jax's default: 100).
  c.distributed.heartbeat_timeout_seconds = 30
  # Seconds to wait for every process to join at start (jax's: 300).
  c.distributed.initialization_timeout_seconds = 300

  # JAX's persistent compilation cache (ssljax.compilation_cache): "auto" =
  # $XDG_CACHE_HOME/ssljax/jax (~/.cache/ssljax/jax), a path, or "" (off).
  # A second run of the same config reads its XLA programs from there.
  c.compilation_cache_dir = "auto"

  # What the evaluators read: feature extraction and the view samples.
  c.eval_inputs = config_dict.ConfigDict()
  c.eval_inputs.batch_size = 1000  # feature-extraction batch
  # Images of other sizes than the views: shorter side resized to
  # views.size / crop_fraction, then the central square (ImageNet: 256, 224).
  c.eval_inputs.crop_fraction = 0.875
  # Train images whose views the label-free metrics see.
  c.eval_inputs.view_samples = 512
  # Run the baseline evaluators (raw-pixel and random-init probes).
  c.eval_inputs.baselines = True
  # Where the baselines' probe results are kept and reused when a later run
  # probes the same inputs (ssljax.evaluators.baseline_cache): "auto" is
  # $XDG_CACHE_HOME/ssljax/baselines (else ~/.cache/ssljax/baselines), a
  # path, or "" (off: probe every time).
  c.eval_inputs.baseline_cache = "auto"

  # Evaluators by name (ssljax.evaluators; docs/guide/evaluators.md): "type"
  # is a module of ssljax.evaluators, every_steps None = after the last step
  # only; the other fields are the type's options.
  c.evals = config_dict.ConfigDict()
  # L2 on ½‖W‖², chosen on val. Up to 1e-2: on the 4-epoch encoder a grid
  # ending at 1e-3 picked its strongest value.
  probe = dict(l2_grid=(1e-6, 1e-5, 1e-4, 1e-3, 1e-2),
               val_fraction=0.1,  # of the train split, for choosing L2
               max_iter=100,  # L-BFGS iterations per fit
               search_rows=20000,  # train rows used while choosing L2
               # k >= 2: also <name>/cv_accuracy, stratified k-fold on the
               # train split (k more fits): the score to choose settings by.
               cv_folds=0)
  c.evals.probe = evals_entry("linear_probe", **probe)
  c.evals.knn = evals_entry("knn", k=20, temperature=0.07)  # weighted, cosine
  c.evals.raw_pixel_probe = evals_entry("raw_pixel_probe", **probe)
  c.evals.random_init_probe = evals_entry("random_init_probe", **probe)
  # Online linear probe: a classifier on the stop-gradient, standardised
  # representation (option features: "inference", the one the evaluators
  # probe, by default; ssljax.online_probe) of the clean train images
  # (views: "clean"; "augmented": view 0), trained in the train step by its
  # own AdamW (learning_rate, weight_decay; labels reach only it) and scored,
  # as an EMA of its weights (ema_decay), on the test split. This entry is
  # its only switch: delete it to train without.
  c.evals.online_probe = evals_entry("online_probe", learning_rate=1e-2,
                                     weight_decay=0.0, views="clean",
                                     ema_decay=0.9)
  c.evals.few_shot = evals_entry("few_shot")  # ridge, 1/5/10/25 per class
  # Label-free metrics and the theory diagnostic, about once an epoch (on
  # the test features and on eval_inputs.view_samples train images' views).
  for name in ("rankme", "alpha_req", "lidar", "spectrum", "theory"):
    c.evals[name] = evals_entry(name, every_steps=200)
  # SIGReg statistic of z (distance to the isotropic Gaussian that LeJEPA's
  # theory says is optimal; ssljax.evaluators.sigreg): milliseconds, so on
  # in every variant, smoke included. M fixed directions from the seed.
  c.evals.sigreg = evals_entry("sigreg", every_steps=200, num_slices=256)

  if variant == "smoke":  # a CPU-seconds run for tests
    c.dataset.train_split = "train[:512]"
    c.dataset.test_split = "test[:256]"
    c.model.encoder_kwargs.channels = (4, 8)
    c.batch_size = 64
    c.num_steps = 6
    c.log_every_steps = 2
    c.checkpoint_every_steps = 3
    c.eval_inputs.batch_size = 128
    c.eval_inputs.view_samples = 64
    c.evals.probe.max_iter = 20
    c.evals.knn.k = 5
    # The tests run this variant many times: the cheap evaluators only, and
    # one periodic (every 3 steps) to exercise that path.
    for name in ("few_shot", "alpha_req", "lidar", "spectrum", "theory"):
      del c.evals[name]
    c.evals.rankme.every_steps = 3
  elif variant == "long":
    # Past 0.88: probe 0.8981, k-NN 0.8613 (random-init 0.8745, raw pixels
    # 0.8434 with this probe) in 82 min on 2 shared CPU cores (README).
    c.epochs = 30
    # A longer probe fit and a grid reaching stronger L2 (on the 4-epoch
    # encoder the default grid picked its strongest value, 1e-3).
    c.evals.probe.max_iter = 500
    c.evals.probe.l2_grid = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2)
    for name in ("rankme", "alpha_req", "lidar", "spectrum", "theory"):
      c.evals[name].every_steps = 1000
  return c


def add_graph(c: config_dict.ConfigDict) -> None:
  """Adds ``c.graph``, the graph G of the "graph" loss form, in place.

  For the joint-embedding methods (vicreg, simclr, barlow_twins,
  spectral_contrastive, frossl, wmse); the teacher-student and predictor methods pair their
  crops themselves and have no such group.
  """
  # The graph G of the "graph" loss form (ssljax.methods). "views": the
  # V-view SSL graph; "supervised": same-label rows of the batch; "mixed":
  # (1 − alpha)·views + alpha·supervised. Label graphs need form = "graph".
  # Graphs over the WHOLE train set (README "Large graphs"), trained on
  # batches of sampled edges whose endpoints are the two views:
  # "dataset_knn" | "dataset_supervised" | "edge_list" (configs/vicreg_knn_graph.py).
  c.graph = config_dict.ConfigDict()
  c.graph.kind = "views"  # "views" | "supervised" | "mixed" | dataset kinds
  c.graph.alpha = 0.5  # α of the mixed graph
  c.graph.label_fraction = 1.0  # fraction of train labels known to the graph
  c.graph.normalize = True  # scale the label graph to mean degree V − 1
  c.graph.knn_k = 16  # dataset_knn: neighbours per image, before symmetrising
  c.graph.knn_features = "pca"  # dataset_knn: "pixels" | "pca" (of pixels)
  c.graph.knn_pca_dim = 50  # dataset_knn: principal components kept
  c.graph.supervised_per_node = 16  # dataset_supervised: partners per image
  c.graph.edge_list_path = ""  # edge_list: .npy (E, 2) or .npz edges/weights
  c.graph.edge_sampling = "weighted"  # dataset kinds: "weighted" (∝ G_ij) | "uniform"


def evals_entry(kind: str, every_steps: int | None = None,
                **options) -> config_dict.ConfigDict:
  """One ``config.evals`` entry: evaluator ``kind`` (a module of
  ssljax.evaluators), run every ``every_steps`` steps and after the last
  (None: after the last only; still overridable from the command line)."""
  entry = config_dict.ConfigDict({"type": kind, **options})
  entry.every_steps = (config_dict.placeholder(int) if every_steps is None
                       else every_steps)
  return entry


def smoke_image_folder(c: config_dict.ConfigDict, recipe: str, *,
                       image_size: int, view_size: int) -> None:
  """Shrinks a recipe config ``c`` in place to its ``smoke`` variant.

  The recipe's own code path (its views, optimiser and encoder kind) at toy
  size, on a small generated RGB image folder
  (`ssljax.data.synthetic.write_image_folder`, written on first use under the
  temp dir, one per recipe): images of about ``image_size`` px, global views
  of ``view_size`` px, ResNet stage widths 8-16-32-64, a 32-wide projector
  of the recipe's depth (when the method has one), 3 steps of batch 16.
  Call it after the method's heads are set.
  """
  c.dataset.name = "image_folder"
  c.dataset.generate = True
  c.dataset.data_dir = os.path.join(tempfile.gettempdir(),
                                    f"ssljax_smoke_images_{recipe}")
  c.dataset.generate_kwargs = config_dict.ConfigDict(
      {"num_train": 64, "num_test": 32, "num_classes": 4, "size": image_size})
  c.dataset.train_split = "train"
  c.dataset.test_split = "test"
  c.dataset.threads = 2
  c.dataset.prefetch = 2
  c.dataset.workers = 0  # 64 small images: no worker processes to start
  c.views.size = view_size
  c.model.encoder_kwargs.stage_widths = (8, 16, 32, 64)
  if "projector" in c.model:
    c.model.projector = (32,) * len(c.model.projector)
  c.batch_size = 16
  c.num_steps = 3
  c.log_every_steps = 1
  c.checkpoint_every_steps = 3
  c.eval_inputs.batch_size = 32
  c.eval_inputs.view_samples = 16
  c.evals.knn.k = 5
  c.evals.probe.max_iter = 20
  # The cheap evaluators only (as the main job's smoke variant).
  for name in ("few_shot", "alpha_req", "lidar", "spectrum", "theory"):
    if name in c.evals:
      del c.evals[name]
