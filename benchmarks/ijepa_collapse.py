"""I-JEPA at a 7x7 patch grid: where the context lies and what collapses.

    python benchmarks/ijepa_collapse.py masks
    python benchmarks/ijepa_collapse.py tokens runs/pA runs/pB
    python benchmarks/ijepa_collapse.py probe runs/q0 runs/q0:init

``masks``: the context patches after the batch-minimum cut of
`ssljax.methods.masks.multiblock_masks` (Assran et al. 2023, arXiv
2301.08243, official MaskCollator) on a 7x7 grid, 40 keys per setting:
mean/min/max count and how often each patch is in the context (1 = even).
``tokens``: for each run folder (``DIR:init``: its encoder re-initialised,
seed 0), the target encoder's layer-normalised tokens (no affine, eps 1e-5,
as the loss) of 512 test images: the image-dependent share of their
variance around the global mean token, the smooth-L1 of a predictor that
outputs each position's mean token, RankMe of the average-pooled tokens
(Garrido et al. 2023, arXiv 2210.02885), and, for blank patches (every
pixel 0) and the others, the image-dependent variance per element.
``probe``: for each run folder (``DIR:init``: its encoder re-initialised,
seed 0), RankMe of the representation of the first 10,000 train images,
uncentred (as the evaluator) and centred, and a quick linear probe on them
(scikit-learn logistic regression, C 1, standardised features, fit on the
first 8,000, accuracy on the other 2,000; the test split is not read): a
cheap check for short proxies, not the benchmark's probe.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np

from ssljax import metrics, pretrained
from ssljax.data import fashion_mnist
from ssljax.methods import masks

SETTINGS = [  # num_targets, target_scale, min_keep
    (4, (0.15, 0.2), 4), (2, (0.15, 0.2), 4), (1, (0.15, 0.2), 4),
    (4, (0.1, 0.15), 3)]


def mask_stats(batch=128, keys=40):
  """Prints the context statistics of SETTINGS at batch ``batch``."""
  for num_targets, scale, min_keep in SETTINGS:
    kw = dict(num_targets=num_targets, target_scale=scale,
              target_aspect=(0.75, 1.5), context_scale=(0.85, 1.0),
              min_keep=min_keep)
    draw = jax.jit(lambda k, kw=kw: masks.multiblock_masks(
        k, batch, (7, 7), **kw))
    counts, cover = [], np.zeros(49)
    for i in range(keys):
      m = draw(jax.random.PRNGKey(i))
      counts.append(int(m["num_context"]))
      for row, ok in zip(np.asarray(m["context"]),
                         np.asarray(m["context_valid"])):
        cover[row[ok]] += 1
    print(f"targets {num_targets} scale {scale} min_keep {min_keep}: context"
          f" mean {np.mean(counts):.1f} min {min(counts)} max {max(counts)}")
    print((cover / cover.sum() * 49).reshape(7, 7).round(2))


def _ln(t):
  t = t - t.mean(-1, keepdims=True)
  return t / np.sqrt(t.var(-1, keepdims=True) + 1e-5)


def token_stats(workdirs, n=512):
  """Prints the collapse statistics of each run folder's last checkpoint."""
  x, _ = _images("test", n)
  for arg in workdirs:
    p, variables, mode = _encoder(arg, x)
    tok = np.asarray(p.encoder.apply(variables, jnp.asarray(x),
                                     output="tokens"))  # (n, L, D)
    t = _ln(tok)
    pos_mean = t.mean(0, keepdims=True)
    share = (((t - pos_mean) ** 2).sum()
             / ((t - t.mean((0, 1), keepdims=True)) ** 2).sum())
    d = np.abs(t - pos_mean)
    sl1 = np.mean(np.where(d < 1, 0.5 * d * d, d - 0.5))
    # Blank patches (every pixel 0) against the others: the image-dependent
    # variance per element of the layer-normalised tokens (around each
    # position's mean), and the variance around the one global mean token.
    side = int(round(np.sqrt(t.shape[1])))
    ps = x.shape[1] // side
    blank = (x[..., 0].reshape(n, side, ps, side, ps).max((2, 4)) == 0
             ).reshape(n, side * side)
    dev = ((t - pos_mean) ** 2).mean(-1)
    total = ((t - t.mean((0, 1), keepdims=True)) ** 2).mean()
    print(f"{arg} step {0 if mode else p.step}: image-dependent share "
          f"{share:.3f}, "
          f"position-mean smooth-L1 {sl1:.4f}, "
          f"RankMe {_rankme(tok.mean(1)):.1f}; blank patches "
          f"{blank.mean():.2f}, image-dependent variance blank "
          f"{dev[blank].mean():.4f} other {dev[~blank].mean():.4f}, "
          f"variance around the mean token {total:.3f}")


def _images(split, n):
  """The first ``n`` Fashion-MNIST images of ``split`` in [0, 1] (n, 28, 28,
  1) float32, and their labels."""
  x, y = fashion_mnist.read_split(fashion_mnist.find_fashion_mnist_files(),
                                  split)
  x = np.asarray(x[:n], np.float32) / 255.0
  return (x[..., None] if x.ndim == 3 else x), np.asarray(y[:n])


def _encoder(arg, x):
  """``DIR[:init]``: the run's pretrained encoder, its last checkpoint's
  variables (``:init``: a fresh initialisation, key 0) and the mode."""
  wd, _, mode = arg.partition(":")
  p = pretrained.load(wd)
  variables = p.variables
  if mode == "init":
    variables = p.encoder.init(jax.random.PRNGKey(0), jnp.asarray(x[:2]),
                               train=False)
  return p, variables, mode


def _rankme(h):
  return float(metrics.rankme(jnp.asarray(h, jnp.float32)))


def quick_probe(args, n=10000, fit=8000):
  """Prints RankMe and a quick train-split probe of each ``DIR[:init]``."""
  # scikit-learn only here, so the other subcommands run without it.
  from sklearn import linear_model, preprocessing  # pylint: disable=C0415
  x, y = _images("train", n)
  for arg in args:
    p, variables, mode = _encoder(arg, x)
    f = jax.jit(lambda v, b, enc=p.encoder: enc.apply(v, b, train=False))
    h = np.concatenate([np.asarray(f(variables, jnp.asarray(x[i:i + 1000])))
                        for i in range(0, n, 1000)])
    sc = preprocessing.StandardScaler().fit(h[:fit])
    clf = linear_model.LogisticRegression(max_iter=500, C=1.0).fit(
        sc.transform(h[:fit]), y[:fit])
    acc = clf.score(sc.transform(h[fit:]), y[fit:])
    print(f"{arg} step {0 if mode else p.step}: RankMe {_rankme(h):.2f} "
          f"centred "
          f"{_rankme(h - h.mean(0)):.2f} quick probe ({fit} -> {n - fit} "
          f"train images) {acc:.4f}", flush=True)


if __name__ == "__main__":
  if sys.argv[1:2] == ["masks"]:
    mask_stats()
  elif sys.argv[1:2] == ["tokens"]:
    token_stats(sys.argv[2:])
  elif sys.argv[1:2] == ["probe"]:
    quick_probe(sys.argv[2:])
  else:
    sys.exit(__doc__)
