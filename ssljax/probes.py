"""Offline evaluation of frozen representations: linear probe and k-NN.

Both take features as (N, D) arrays with rows as samples and integer labels
(N,). They are pure functions of their inputs (plus an explicit ``seed`` for
the validation split), so the same features give the same numbers.
"""

import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
import numpy as np
import optax
import tqdm

from ssljax import data

__all__ = ["linear_probe", "fit_logistic_regression", "lbfgs_minimize",
           "knn_accuracy", "extract_features", "source_features",
           "probe_splits",
           "column_moments", "DEFAULT_L2_GRID"]

# L2 strengths on ½‖W‖² added to the mean cross-entropy. 1e-6 is close to no
# regularisation for standardised features; 1e-1 shrinks hard.
DEFAULT_L2_GRID = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)


def _check_features(name, x, y, keep_integers=False):
  name = f"{name}_" if name else ""  # "train_features", or just "features"
  x = np.asarray(x)
  y = np.asarray(y)
  if x.ndim != 2:
    raise ValueError(f"{name}features must be (N, D), got shape {x.shape}")
  if y.shape != (x.shape[0],):
    raise ValueError(
        f"{name}labels must be ({x.shape[0]},) to match {name}features "
        f"{x.shape}, got shape {y.shape}")
  if not np.all(np.isfinite(x)):
    raise ValueError(f"{name}features contains NaN or Inf")
  if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
    raise ValueError(f"{name}labels must be non-negative integers, got "
                     f"dtype {y.dtype} and min {y.min()}")
  if not (keep_integers and np.issubdtype(x.dtype, np.integer)):
    x = x.astype(np.float32, copy=False)
  return x, y.astype(np.int32, copy=False)


def column_moments(x, chunk: int = 8192):
  """Mean and standard deviation of each column, in float64, without a
  float64 copy of ``x``.

  Args:
    x: (N, D) array of any real dtype (float features, uint8 pixels), N >= 1.
    chunk: rows converted to float64 at a time (>= 1).

  Returns:
    (mean, std): two float64 (D,) arrays; std is the population one (ddof
    0), the same as ``x.astype(np.float64).std(0)`` up to summation order.

  Raises:
    ValueError: x is not 2-D or has no rows.
  """
  if np.ndim(x) != 2 or len(x) == 0:
    raise ValueError(f"x must be (N, D) with N >= 1, got shape {np.shape(x)}")
  mean, squares = x.mean(0, dtype=np.float64), np.zeros(x.shape[1])
  for start in range(0, len(x), chunk):
    squares += np.square(x[start:start + chunk] - mean).sum(0)
  return mean, np.sqrt(squares / len(x))


def _logreg_objective(params, x_DxN, y, l2):
  """Mean cross-entropy + ½ l2 ‖W‖², from features stored as columns.

  The (C, N) logits Wᵀ X_DxN keep N as the long free dimension of both
  products (logits and the gradient X_DxN G_NxC): XLA:CPU contracts a
  row-major (N, D) matrix over its N rows about 6x slower than this, which
  made each L-BFGS iteration on 20,000 x 512 features 2.4x slower
  (benchmarks/probe_solver.py).
  """
  logits_CxN = params["w"].T @ x_DxN + params["b"][:, None]
  true_N = jnp.take_along_axis(logits_CxN, y[None, :], axis=0)[0]
  ce = jnp.mean(jax.nn.logsumexp(logits_CxN, axis=0) - true_N)
  return ce + 0.5 * l2 * jnp.sum(params["w"] ** 2)


def lbfgs_minimize(fun, params, max_iter, tol):
  """Minimises ``fun`` from ``params`` with optax's L-BFGS: the linear
  probe's solver loop (`fit_logistic_regression`), open to other objectives.

  Runs ``while`` the iterations are below ``max_iter`` and the gradient norm
  of the last step is above ``tol`` (the first step always runs), as one
  `jax.lax.while_loop`: call it inside `jax.jit` (eagerly, each operation
  is dispatched on its own).

  Args:
    fun: ``fun(params) -> float`` 0-d, differentiable in ``params``.
    params: the start, a pytree of float arrays (e.g. {"w": float32 (D, C),
      "b": float32 (C,)}).
    max_iter: int (or int32 0-d) iteration budget, >= 1.
    tol: float (or float32 0-d) gradient-norm threshold.

  Returns:
    (the minimiser, a pytree of the structure, shapes and dtypes of
    ``params``; int32 0-d the iterations taken).

  Raises:
    TypeError: ``fun`` does not return a scalar, or ``params`` holds
      non-float leaves (from `jax.grad`).
  """
  solver = optax.lbfgs()
  value_and_grad = optax.value_and_grad_from_state(fun)

  def step(carry):
    params, state, _ = carry
    value, grad = value_and_grad(params, state=state)
    updates, state = solver.update(grad, state, params, value=value, grad=grad,
                                   value_fn=fun)
    return optax.apply_updates(params, updates), state, optax.tree.norm(grad)

  def keep_going(carry):
    _, state, grad_norm = carry
    return (optax.tree.get(state, "count") < max_iter) & (grad_norm > tol)

  init = (params, solver.init(params), jnp.asarray(jnp.inf))
  params, state, _ = jax.lax.while_loop(keep_going, step, init)
  return params, optax.tree.get(state, "count")


@jax.jit
def _fit_logreg(params, x_DxN, y, l2, max_iter, tol):
  """Minimises the L2-regularised multinomial log-loss with L-BFGS (optax),
  on (D, N) features stored as columns."""
  return lbfgs_minimize(lambda p: _logreg_objective(p, x_DxN, y, l2), params,
                        max_iter, tol)


def fit_logistic_regression(features, labels, *, l2: float,
                            num_classes: int | None = None,
                            max_iter: int = 500, tol: float = 1e-5,
                            init: dict | None = None) -> dict:
  """The linear probe's solver: L2-regularised multinomial logistic regression.

  Minimises mean_n CE(x_n W + b, y_n) + ½ l2 ‖W‖² (b unpenalised) with
  optax's L-BFGS, full batch in float32, until ``max_iter`` iterations or a
  gradient norm below ``tol``. It is the solver `linear_probe` runs once
  per L2 value and once for the refit; it does not standardise the
  features.

  Args:
    features: (N, D) float array (rows are samples).
    labels: (N,) integer class labels in [0, C).
    l2: L2 coefficient, >= 0, on ½‖W‖² added to the mean cross-entropy.
    num_classes: C; None uses max(labels) + 1.
    max_iter: L-BFGS iterations, >= 1.
    tol: stop when the gradient norm falls below it.
    init: {"w": (D, C), "b": (C,)} to start from (a warm start); None
      starts from zeros.

  Returns:
    dict with "w" (D, C) and "b" (C,) float32 jax arrays and "iterations"
    (int).

  Raises:
    ValueError: shapes that disagree, non-finite features, negative or
      non-integer labels, l2 < 0, max_iter < 1, labels >= num_classes, or
      an init of other shapes.

  References:
    Liu & Nocedal 1989, "On the limited memory BFGS method for large scale
    optimization", Mathematical Programming 45 (the solver).
  """
  x, y = _check_features("", features, labels)
  if not (np.isfinite(l2) and l2 >= 0):
    raise ValueError(f"l2 must be finite and >= 0, got {l2}")
  if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) \
      or max_iter < 1:
    raise ValueError(f"max_iter must be an int >= 1, got {max_iter!r}")
  c = int(y.max()) + 1 if num_classes is None else int(num_classes)
  if y.max() >= c:
    raise ValueError(f"labels reach {int(y.max())}, not below num_classes={c}")
  shapes = {"w": (x.shape[1], c), "b": (c,)}
  if init is None:
    init = {k: jnp.zeros(v, jnp.float32) for k, v in shapes.items()}
  elif {k: tuple(np.shape(init.get(k))) for k in shapes} != shapes:
    raise ValueError(f"init must hold w {shapes['w']} and b {shapes['b']}, "
                     f"got { {k: np.shape(v) for k, v in init.items()} }")
  params, iterations = _fit_logreg(
      {k: jnp.asarray(init[k], jnp.float32) for k in shapes}, jnp.asarray(x).T,
      jnp.asarray(y), jnp.float32(l2), int(max_iter), jnp.float32(tol))
  return {"w": params["w"], "b": params["b"], "iterations": int(iterations)}


@jax.jit
def _hits(params, x_DxN, y):
  logits_CxN = params["w"].T @ x_DxN + params["b"][:, None]
  return jnp.sum(jnp.argmax(logits_CxN, 0) == y)


def _accuracy(params, x_DxN, y):
  return int(_hits(params, x_DxN, y)) / len(y)


# Jitted: an eager jnp.zeros buffer is not donated to _put_columns (copied).
_zeros = jax.jit(lambda d, n: jnp.zeros((d, n), jnp.float32),
                 static_argnums=(0, 1))


@functools.partial(jax.jit, donate_argnums=0)
def _put_columns(x_DxN, rows, start, mean, std):
  return jax.lax.dynamic_update_slice(x_DxN, ((rows - mean) / std).T,
                                      (0, start))


def _standardised_columns(x, mean, std, chunk=8192):
  """((x − mean) / std)ᵀ: a (D, N) float32 device array written in place,
  ``chunk`` rows at a time: no standardised (N, D) copy on the host and no
  transposed copy in the solver (a 60,000 × 784 probe peaked 0.17 GiB
  lower)."""
  n, out = len(x), _zeros(x.shape[1], x.shape[0])
  chunk = min(chunk, n)
  for start in range(0, n, chunk):
    start = min(start, n - chunk)  # the last chunk overlaps: one shape
    out = _put_columns(out, x[start:start + chunk], start, mean, std)
  return out


def linear_probe(train_features, train_labels, test_features, test_labels, *,
                 l2_grid=DEFAULT_L2_GRID, val_fraction=0.1, max_iter=500,
                 tol=1e-5, max_search_rows=None, seed=0,
                 progress: bool = False) -> dict:
  """Linear evaluation: multinomial logistic regression on frozen features.

  The standard offline probe: features are standardised with the training
  mean and standard deviation; the L2 strength is chosen by accuracy on a
  held-out ``val_fraction`` of the training set (never the test set), scanning
  ``l2_grid`` from strong to weak with warm starts (on at most
  ``max_search_rows`` training rows, to bound the cost of the search); the
  chosen strength is then refit on the whole training set, warm-started, and
  scored once on the test set. Solved
  full-batch with L-BFGS (optax) in float32, which takes seconds where
  scikit-learn's solver takes minutes on 60k×1024 features.

  Args:
    train_features: (N, D) float array, or integer (e.g. uint8 pixels:
      standardised on the device without a float copy on the host).
    train_labels: (N,) integer class labels in [0, C).
    test_features: (M, D) float (or integer) array.
    test_labels: (M,) integer labels.
    l2_grid: L2 coefficients on ½‖W‖² added to the mean cross-entropy.
    val_fraction: fraction of the training rows held out for the choice of L2.
    max_iter: L-BFGS iterations per fit.
    tol: stop when the gradient norm falls below it.
    max_search_rows: if set, the L2 search fits on this many (random) rows of
      the non-validation training set; None uses all of them.
    seed: seed of the random train/validation split.
    progress: show a progress bar (one tick per fit: the grid, then the
      refit) on stderr.

  Returns:
    dict with ``test_accuracy``, ``train_accuracy``, ``val_accuracy`` (of the
    chosen strength), ``l2`` (chosen), ``val_accuracies`` (one per grid entry),
    ``l2_grid``, ``iterations`` (of the final fit).

  Raises:
    ValueError: shapes that disagree, non-finite features, negative or
      non-integer labels, an empty grid or a val_fraction outside (0, 1).
  """
  xtr, ytr = _check_features("train", train_features, train_labels,
                             keep_integers=True)
  xte, yte = _check_features("test", test_features, test_labels,
                             keep_integers=True)
  if xte.shape[1] != xtr.shape[1]:
    raise ValueError(f"test_features has D={xte.shape[1]}, train_features "
                     f"has D={xtr.shape[1]}")
  if not 0.0 < val_fraction < 1.0:
    raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
  if len(l2_grid) == 0:
    raise ValueError("l2_grid is empty")
  if max_search_rows is not None and max_search_rows < 1:
    raise ValueError(f"max_search_rows must be >= 1 or None, got {max_search_rows}")
  num_classes = int(max(ytr.max(), yte.max())) + 1

  if np.issubdtype(xtr.dtype, np.integer):  # pixels: no float copy
    mean, std = column_moments(xtr)
    mean, std = mean.astype(np.float32), (std + 1e-6).astype(np.float32)
  else:
    mean, std = xtr.mean(0), xtr.std(0) + 1e-6
  # The inputs are the caller's (never changed); the solver reads columns.
  ctr = _standardised_columns(xtr, mean, std)
  cte = _standardised_columns(xte, mean, std)
  ytr = jnp.asarray(ytr)
  perm = np.random.default_rng(seed).permutation(len(xtr))
  n_val = max(1, int(round(val_fraction * len(xtr))))
  val, fit = perm[:n_val], perm[n_val:]
  search = fit if max_search_rows is None else fit[:max_search_rows]

  def fit_from(params, x_DxN, y, l2):
    return _fit_logreg(params, x_DxN, y, jnp.float32(l2), max_iter,
                       jnp.float32(tol))

  params = {"w": jnp.zeros((xtr.shape[1], num_classes), jnp.float32),
            "b": jnp.zeros((num_classes,), jnp.float32)}
  grid = sorted(float(l) for l in l2_grid)[::-1]  # strong → weak: warm starts
  val_accuracies, fitted = [], []
  with tqdm.tqdm(total=len(grid) + 1, desc="linear probe", unit="fit",
                 disable=not progress) as bar:
    for l2 in grid:
      params, _ = fit_from(params, ctr[:, search], ytr[search], l2)
      fitted.append(params)
      val_accuracies.append(_accuracy(params, ctr[:, val], ytr[val]))
      bar.update()
    best = int(np.argmax(val_accuracies))
    params, iterations = fit_from(fitted[best], ctr, ytr, grid[best])
    bar.update()
  return {
      "test_accuracy": _accuracy(params, cte, yte),
      "train_accuracy": _accuracy(params, ctr, ytr),
      "val_accuracy": val_accuracies[best],
      "l2": grid[best],
      "l2_grid": grid,
      "val_accuracies": val_accuracies,
      "iterations": int(iterations),
  }


def knn_accuracy(train_features, train_labels, test_features, test_labels, *,
                 k=20, temperature=0.07, block_size=128,
                 progress: bool = False) -> float:
  """Weighted k-nearest-neighbour accuracy with cosine similarity.

  The k-NN monitor of Wu et al. 2018 (InstDisc) used by DINO and solo-learn:
  each test point votes with its k most cosine-similar training points, vote
  weight exp(s/τ). Evaluated in blocks of test rows so memory is
  O(block_size · N), never the full (M, N) similarity matrix.

  Args:
    train_features: (N, D) float array; test_features: (M, D).
    train_labels: (N,) integer labels; test_labels: (M,).
    k: number of neighbours (1 ≤ k ≤ N).
    temperature: τ > 0 of the vote weights.
    block_size: test rows per block (128: on 2 CPU cores, 10,000 test
      against 60,000 train rows of 512-d took 3.4 s and about 100 MB less
      peak memory than with blocks of 1,024, which took 4.1 s).
    progress: show a progress bar (one tick per block) on stderr.

  Returns:
    accuracy in [0, 1] as a Python float.

  Raises:
    ValueError: bad shapes, non-finite features, k out of range, τ ≤ 0.
  """
  xtr, ytr = _check_features("train", train_features, train_labels)
  xte, yte = _check_features("test", test_features, test_labels)
  if not 1 <= k <= len(xtr):
    raise ValueError(f"k must be in [1, {len(xtr)}], got {k}")
  if temperature <= 0:
    raise ValueError(f"temperature must be > 0, got {temperature}")
  num_classes = int(max(ytr.max(), yte.max())) + 1
  normalise = lambda x: x / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-12)
  # Arguments, not constants closed over: a closed-over (N, D) array would
  # be copied into the compiled program (memory, compile time).
  xtr_n = jnp.asarray(normalise(xtr))
  ytr_j = jnp.asarray(ytr)
  del xtr
  xte_n = normalise(xte)
  correct = 0
  for start in tqdm.trange(0, len(xte_n), block_size, desc="k-NN",
                           unit="block", disable=not progress):
    block = xte_n[start:start + block_size]
    pad = block_size - len(block)  # pad the last block: one compiled shape
    pred = _knn_predict(jnp.asarray(np.pad(block, ((0, pad), (0, 0)))),
                        xtr_n, ytr_j, jnp.float32(temperature), k=k,
                        num_classes=num_classes)
    correct += int(np.sum(np.asarray(pred)[:len(block)] == yte[start:start + block_size]))
  return correct / len(xte)


@functools.partial(jax.jit, static_argnames=("k", "num_classes"))
def _knn_predict(block, xtr_n, ytr, temperature, *, k, num_classes):
  """Class of each row of ``block``: the exp(s/τ)-weighted vote of its k
  most cosine-similar rows of ``xtr_n`` (rows already unit-norm)."""
  sims, idx = jax.lax.top_k(block @ xtr_n.T, k)
  votes = jax.nn.one_hot(ytr[idx], num_classes) * jnp.exp(
      sims / temperature)[..., None]
  return jnp.argmax(votes.sum(1), -1)


def extract_features(state, images, batch_size, mesh,
                     desc: str | None = None,
                     total: int | None = None) -> np.ndarray:
  """Encoder representations of a train state's network, batched over a mesh.

  Args:
    state: a ``ssljax.train.TrainState`` (``state.representation``: the
      method's representation h, BatchNorm in inference mode).
    images: uint8 (N, H, W, C) images, or an iterable of uint8 chunks
      (n_i, H, W, C) with n_i <= batch_size (a streamed split); scaled here
      to [0, 1].
    batch_size: images per forward pass, rounded down to a multiple of the
      mesh size; the last batch is padded so one program serves all.
    mesh: the ``jax.sharding.Mesh`` with a "data" axis to shard batches over.
    desc: if given, a progress bar with this label (one tick per batch).
    total: number of chunks, for the progress bar of an iterable.

  Returns:
    float32 (N, D) encoder outputs (before the projector), rows as images.

  Raises:
    ValueError: a chunk larger than batch_size (rounded to the mesh).
  """
  sharding = NamedSharding(mesh, P("data"))
  fn = _jitted_representations(NamedSharding(mesh, P()))
  batch_size -= batch_size % mesh.size  # divisible over the devices
  if isinstance(images, np.ndarray):
    chunks = (images[i:i + batch_size] for i in range(0, len(images),
                                                      batch_size))
    total = -(-len(images) // batch_size)
  else:
    chunks = images
  out, pending = [], None  # pending: the batch in flight, fetched one late
  for chunk in tqdm.tqdm(chunks, total=total, desc=desc, unit="batch",
                         disable=desc is None):
    if len(chunk) > batch_size:
      raise ValueError(f"a chunk of {len(chunk)} images exceeds batch_size "
                       f"{batch_size}")
    # Scaled on the host, as the features have always been (the same bits).
    chunk = np.asarray(chunk).astype(np.float32) / 255.0
    n = len(chunk)
    pad = batch_size - n  # one compiled shape for every batch
    chunk = np.pad(chunk, ((0, pad),) + ((0, 0),) * (chunk.ndim - 1))
    # Fetched one batch late: the host prepares the next chunk while this
    # one runs.
    h = fn(state, jax.device_put(chunk, sharding))
    if pending is not None:
      out.append(_fetch(*pending))
    pending = (h, n)
  if pending is not None:
    out.append(_fetch(*pending))
  return np.concatenate(out) if len(out) > 1 else out[0].copy()


def _fetch(h, n):
  return np.asarray(jax.device_get(h), np.float32)[:n]


def source_features(state, source, *, batch_size: int, size: int,
                    crop_fraction: float, mesh, desc: str | None = None):
  """Features and labels of every image of a source, as the evaluators
  compute them: `ssljax.data.eval_batches` (the evaluation centre crop at
  the run's view size), then `extract_features`. Only one batch of images
  is in memory at a time.

  Args:
    state: as in `extract_features`.
    source: a source of `ssljax.data.sources`, N >= 1 images.
    batch_size: images per forward pass (rounded down to a multiple of the
      mesh size, >= the mesh size).
    size, crop_fraction: the view size S (pixels) and the centre crop's
      fraction of the image side (`ssljax.data.eval_batches`).
    mesh, desc: as in `extract_features`.

  Returns:
    (float32 (N, D) features, int32 (N,) labels, −1 where unknown), in the
    source's index order.

  Raises:
    ValueError: batch_size smaller than the mesh.
  """
  if batch_size < mesh.size:
    raise ValueError(f"batch_size must be >= the {mesh.size} devices, got "
                     f"{batch_size}")
  batch_size -= batch_size % mesh.size
  labels = []

  def chunks():
    for images, chunk_labels in data.eval_batches(
        source, batch_size=batch_size, size=size,
        crop_fraction=crop_fraction):
      labels.append(chunk_labels)
      yield images

  features = extract_features(state, chunks(), batch_size, mesh, desc=desc,
                              total=-(-len(source) // batch_size))
  return features, np.concatenate(labels).astype(np.int32)


@functools.lru_cache(maxsize=8)
def _jitted_representations(out_sharding):
  """One jitted feature extractor per output sharding: the method's
  representation h (BatchNorm in inference mode) in float32."""
  return jax.jit(lambda state, x: state.representation(x).astype(
      jnp.float32), out_shardings=out_sharding)


def probe_splits(train_source, test_source, *, seed: int, announce=print):
  """Which labelled rows the probe and k-NN fit and score.

  Args:
    train_source, test_source: sources (`ssljax.data.sources`); test may be
      None.
    seed: seeds the split of a test set used for both roles.
    announce: called with one line when the probe cannot use the usual
      splits.

  Returns:
    (fit source, fit rows or None for all, test source, test rows or None):
    the train and test splits when both are labelled; the two halves of a
    random permutation of the test split when only it is labelled; None
    (probe skipped) when no split is labelled.
  """
  labelled = lambda src: src is not None and bool(
      (data.source_labels(src) >= 0).all()) and len(src) > 1
  if labelled(train_source) and labelled(test_source):
    return train_source, None, test_source, None
  if labelled(test_source):
    rows = np.random.default_rng([seed, 2]).permutation(len(test_source))
    half = len(rows) // 2
    announce("probe: the train split has no labels; the probe and k-NN fit "
             f"on {half} images of the labelled test split and are scored "
             f"on the other {len(rows) - half}")
    return test_source, rows[:half], test_source, rows[half:]
  announce("probe: skipped (no labelled split: give the images class "
           "folders, DIR/train/<class>/ or DIR/test/<class>/)")
  return None
