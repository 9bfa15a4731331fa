"""PAL with people: the annotation service of `ssljax.pal.serve`.

    python -m ssljax.pal.serve --config configs/pal_human.py --workdir DIR
    python -m ssljax.pal.serve add-annotator --workdir DIR NAME

People answer "are these two images the same kind of thing?" on the page
at http://127.0.0.1:8000/; every `server.train_every` answers a background
round trains the PAL loss (Cabannes et al. 2023, arXiv 2303.15256,
Algorithm 1) on the graph the answers build, and the active strategy asks
its next pairs with the new model. Variants: "default" (Fashion-MNIST,
2,000 train images, uniform random pairs), "smoke" (200 images, tiny
rounds: tests), "active" (the paper's active strategy instead of random
pairs), "passive" (the default's strategy, named). `--config.x=y`
overrides a field; an unknown field is an error.
"""

from ml_collections import config_dict

VARIANTS = ("default", "smoke", "active", "passive")


def get_config(arg: str | None = None) -> config_dict.ConfigDict:
  """Returns the service configuration; ``arg`` picks a variant of VARIANTS.

  Raises:
    ValueError: an unknown variant.
  """
  variant = arg or "default"
  if variant not in VARIANTS:
    raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
  smoke = variant == "smoke"
  c = config_dict.ConfigDict()
  c.seed = 0  # seeds the pool subset, the strategy's draws and the rounds

  c.data = config_dict.ConfigDict()
  # "fashion_mnist_local" (Debian's IDX files), any tfds name ssljax.data
  # opens, "image_folder" (data.path: a folder, class sub-folders optional)
  # or "npz" (data.path: arrays images (N, H, W, C) uint8, labels (N,) int;
  # optional test_images, test_labels).
  c.data.name = "fashion_mnist_local"
  c.data.path = ""  # folder or .npz file for "image_folder" / "npz"
  c.data.data_dir = config_dict.placeholder(str)  # tfds data dir (None: default)
  c.data.pool = 200 if smoke else 2000  # train images people see (0: all)
  c.data.test = 200 if smoke else 2000  # test images of each round's probe
  c.data.image_size = 0  # image_folder: resize to this square side (0: keep)
  c.data.num_classes = 10  # C: classes the active strategy looks for

  c.server = config_dict.ConfigDict()
  c.server.host = "127.0.0.1"  # bind address (loopback only by default)
  c.server.port = 8000  # 0: a free port (printed and written to DIR/port)
  # SQLAlchemy URL; "" is sqlite:///DIR/pal.sqlite. PostgreSQL:
  # postgresql://user@host:port/dbname (psycopg driver).
  c.server.db = ""
  c.server.train_every = 100 if smoke else 200  # answers between rounds
  c.server.query_timeout_s = 300.0  # a pending query is re-issued after this
  c.server.votes_per_pair = 1  # answers wanted per pair (>1: majority vote)
  c.server.max_body_bytes = 64 * 1024  # larger request bodies get 413

  # "active": Algorithm 3 of the paper asked one pair at a time (templates,
  # least-known class first, classifier-guided by the current model);
  # "passive": uniform random pairs. Passive by default: with a network
  # trained on the mixed graph, active was never above passive beyond
  # noise at 500 or 1,000 answers, 0 % or 10 % flipped, for any of six
  # graph constructions (5-10 seeds each), and below it in most cells;
  # the paper's ordering holds in its kernel setting (experiments/
  # pal_active_vs_passive.py, docs/guide/pal_people.md).
  c.strategy = "active" if variant == "active" else "passive"
  # Answers asked uniformly before the active strategy takes over.
  c.passive_first = 0
  # Whom the active strategy compares a sample with: "template" (the class
  # template, Algorithm 3) or "member" (a random member of its component).
  c.active_partner = "template"

  c.model = config_dict.ConfigDict()
  c.model.hidden = (32,) if smoke else (256, 256)  # MLP widths (BatchNorm, ReLU)
  c.model.k = 8 if smoke else 16  # embedding dimension K

  c.train = config_dict.ConfigDict()
  c.train.steps = 30 if smoke else 300  # SGD steps per round
  c.train.batch = 64 if smoke else 256  # minibatch rows B (uniform over the pool)
  c.train.lr = 1e-3  # Adam on the network
  c.train.scale_lr = 0.05  # Adam on the learned output scale exp(s)
  c.train.signed = True  # "different" answers enter G as -1 (eq. 15), else 0
  # The round's graph. "mixed": G = (1 - alpha) G_ssl + alpha G_answers over
  # `views` augmented views of each pool image (Cabannes et al. 2023 App.
  # C.2.3: with few labels, mix them with the SSL graph of augmentations);
  # "answers": the answers alone on the clean images (most pairs unknown).
  c.train.graph = "mixed"
  # Weight of the answers. The paper gives no single value: its Fig. 4 finds
  # a small alpha better than the naive 1/2 when few relations are known
  # (App. C.2.3); 0.1 is the small value experiments/pal_neural.py uses.
  c.train.alpha = 0.1
  # Weight w of the pairs known only by transitive completion (an answered
  # pair is +-1, a deduced one +-w; 1: the completed graph of the paper).
  # 0: measured (experiments/pal_active_vs_passive.py, docs/guide/
  # pal_people.md): with w = 1 the active answers' dense blocks outweigh the
  # augmentations 3 to 1 at 1,000 answers and active fell below passive;
  # with w = 0 active >= passive at 1,000 answers, 0 % and 10 % noise. The
  # strategy still uses the completion to choose pairs.
  c.train.complete_weight = 0.0
  c.train.views = 2  # V augmented views per pool image ("mixed")
  c.train.augment = config_dict.ConfigDict(  # `ssljax.data.view_spec` fields
      {"crop": "random_resized", "crop_scale": (0.3, 1.0), "flip_prob": 0.5})
  return c
