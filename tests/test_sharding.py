"""Data parallelism is exact: 8 CPU devices give the 1-device numbers.

For every method and loss form of ``ssljax.methods`` (and the label
graphs "supervised" and "mixed", whose G spans all devices), two train steps
of ``train.sharded_train_step`` on the same global batch are run on a mesh of
1 and of 8 devices, in float32 and in float64. Compared: every loss term of
both steps, the gradients of both steps, and the parameters, BatchNorm
statistics and optimiser state after them. A loss with per-device statistics
(SimCLR negatives from one device, per-device covariances or whitening) is
off by O(1), not by round-off.

The same comparison runs across processes: two processes on 127.0.0.1
(``jax.distributed`` over gloo), 4 CPU devices each, every process handing
over only its own rows of each global batch
(``jax.make_array_from_process_local_data``), against 1 device of process 0.

The worker runs in subprocesses (``python tests/test_sharding.py``) because
the device count is fixed when JAX starts; it prints one JSON line per case
and the test checks the tolerances. ``pytest -s`` prints the table.
"""

import json
import os
import re
import itertools
import socket
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
import ml_collections
import numpy as np
import optax
import pytest

from ssljax import distributed, inputs, methods, train, train_state

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # configs/
NUM_DEVICES = 8

# (method, form, V, graph kind). Every form of every method; the label graphs
# on all four graph-form methods, "views" graphs with V = 3 where it matters.
CASES = (
    ("vicreg", "two_view", 2, "views"),
    ("vicreg", "graph", 3, "views"),
    ("vicreg", "graph", 2, "supervised"),
    ("vicreg", "graph", 2, "mixed"),
    ("simclr", "two_view", 2, "views"),
    ("simclr", "graph", 3, "views"),
    ("simclr", "graph", 2, "supervised"),
    ("barlow_twins", "two_view", 2, "views"),
    ("barlow_twins", "graph", 2, "mixed"),
    ("spectral_contrastive", "two_view", 2, "views"),
    ("spectral_contrastive", "graph", 2, "supervised"),
    ("frossl", "multi_view", 3, "views"),
    ("wmse", "two_view", 2, "views"),
    # Predictive methods: the teacher's EMA, NNCLR's queue and DINO's centre
    # must be updated from the global batch, identically on every device.
    ("byol", "two_view", 2, "views"),
    ("byol", "graph", 2, "views"),
    ("simsiam", "two_view", 2, "views"),
    ("simsiam", "graph", 2, "views"),
    ("mocov3", "two_view", 2, "views"),
    ("dino", "multi_view", 4, "views"),  # 2 global + 2 local crops
    ("dino", "graph", 4, "views"),
    ("nnclr", "two_view", 2, "views"),
    ("nnclr", "graph", 2, "views"),
    # SwAV: Sinkhorn-Knopp sums over the global batch, the queue's pushes.
    ("swav", "multi_crop", 4, "views"),  # 2 global + 2 local crops
    # DINOv2: the masks drawn from the step's key over the global batch,
    # the EMA teacher, the lazy centres, KoLeo within each crop's batch.
    ("dinov2", "dinov2", 4, "views"),
    # LeJEPA: SIGReg's characteristic function is a mean over the global
    # batch (lightly once scaled its gradient by 1/world_size), the
    # directions are drawn from (seed, step) on every device.
    ("lejepa", "multi_view", 4, "views"),  # 2 global + 2 local crops
    ("lejepa", "graph", 4, "views"),
    # Masked-token ViTs (one view): the masks drawn in the step from its key,
    # I-JEPA's EMA target encoder.
    ("ijepa", "smooth_l1", 1, "views"),
    ("mae", "mse", 1, "views"),
)

# The default suite runs four of them: the smoke CNN's BatchNorm with
# VICReg's covariances, SimCLR's negatives over a label graph, W-MSE's
# whitening of sub-batches that span devices, and DINO's teacher and centre
# over multi-crop. ``-m slow`` runs every case (NNCLR's queue among them).
# XLA compiles are nearly the whole cost: ~7 s of CPU per case and dtype
# here (a 1- and an 8-device program), ~300 s for all 22 cases.
FAST_CASES = (CASES[0], CASES[6], CASES[12], CASES[18])

# Relative tolerances on max|a − b| / max|b| within each compared group (loss
# terms of both steps, gradients of both steps, final parameters + BatchNorm
# statistics + optimiser state). The runs differ only in the order of the
# cross-device sums (all-reduce vs one device's reduction), i.e. round-off,
# amplified by the network: BatchNorm of the nearly constant features that
# random images give the CNN amplifies it most. Measured maxima (2 steps,
# seed 0): float32 5.5e-5 (smoke CNN), <= 1e-5 (MLP cases); float64 8.6e-14
# (CNN), <= 3e-15 (MLP). The bounds leave >= 10x margin. Statistics taken
# per device instead (mean of the losses of 8 blocks of 8 rows, random
# Z (64, 16)) move the loss by 73% (VICReg), 59% (SimCLR: 7 instead of 63
# negatives per view) and 158% (Barlow Twins): orders of magnitude above.
RTOL = {"float32": 1e-3, "float64": 1e-11}


def _expected_methods_and_forms():
  return {(name, form) for name in methods.available()
          for form in methods.get(name).FORMS}


def test_cases_cover_every_method_and_form():
  covered = {(m, f) for m, f, _, _ in CASES}
  assert covered == _expected_methods_and_forms()
  assert {"supervised", "mixed"} <= {k for *_, k in CASES}


# Wall limit of a worker run: all 13 cases across 2 processes took 26.6 min
# on the 2 cores shared with other jobs (load 7–11), mostly compiles.
TIMEOUT_S = 3600


def _worker_rows(cases, processes=1):
  """Runs the worker on ``cases`` in ``processes`` subprocesses that share
  NUM_DEVICES CPU devices; returns the JSON rows process 0 prints."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=(
      f"--xla_force_host_platform_device_count={NUM_DEVICES // processes}"))
  args = [sys.executable, os.path.abspath(__file__),
          ",".join(str(CASES.index(c)) for c in cases)]
  if processes > 1:
    with socket.socket() as sock:
      sock.bind(("127.0.0.1", 0))
      port = sock.getsockname()[1]
    args += [f"127.0.0.1:{port}", str(processes)]
  procs = [subprocess.Popen(args + ([str(p)] if processes > 1 else []),
                            env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
           for p in range(processes)]
  deadline = time.monotonic() + TIMEOUT_S
  try:  # kill every process on a failure or a timeout: CI never hangs
    outs = [p.communicate(timeout=max(deadline - time.monotonic(), 1))[0]
            for p in procs]
  except subprocess.TimeoutExpired:
    outs = []
  finally:
    for p in procs:
      p.kill()
  assert len(outs) == processes, f"timed out after {TIMEOUT_S} s"
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out[-6000:]
  rows = [json.loads(l) for l in outs[0].splitlines() if l.startswith("{")]
  print("\n" + "\n".join(_table_line(r) for r in rows))
  assert len(rows) == len(cases) * len(RTOL)
  assert all(r["processes"] == processes for r in rows)
  return rows


def _table_line(row):
  diffs = " ".join(f"{k}={v:.1e}" for k, v in row["rel_diff"].items())
  return (f"{row['dtype']:7s} P={row['processes']} {row['method']:20s} "
          f"{row['form']:10s} V={row['views']} {row['graph']:10s} {diffs} "
          f"gathered={row['all_gathers']}")


def _check(rows):
  """Tolerances, and data parallelism in the compiled 8-device program:
  gradients all-reduced, images never gathered. Only embeddings may be
  gathered: the graph form gathers Z (V, B, K) and, for label graphs, the
  labels; SimCLR's two-view form the unit rows (2B, K); W-MSE the rows of a
  whitening sub-batch. That is O(N·K) per device, nothing of image size."""
  for row in rows:
    assert max(row["rel_diff"].values()) <= RTOL[row["dtype"]], _table_line(row)
    assert row["has_all_reduce"], _table_line(row)
    for shape in row["all_gathers"]:
      assert 28 not in shape, _table_line(row)  # no (.., 28, 28, ..) images


def test_eight_devices_equal_one_device():
  _check(_worker_rows(FAST_CASES))


@pytest.mark.slow
def test_every_method_and_form_eight_devices_equal_one_device():
  _check(_worker_rows(CASES))


def test_two_processes_equal_one_device():
  """SimCLR on a label graph across 2 processes × 4 devices (gloo): negatives
  and positives on the other process. An MLP case: it compiles quickly."""
  _check(_worker_rows(FAST_CASES[1:2], processes=2))


@pytest.mark.slow
def test_every_method_and_form_two_processes_equal_one_device():
  _check(_worker_rows(CASES, processes=2))


# ------------------------------------------------------------------ worker --
def _record_grads():
  """An optax transformation that keeps the last gradient in its state."""
  return optax.GradientTransformation(
      init=lambda params: jax.tree.map(jnp.zeros_like, params),
      update=lambda grads, state, params=None: (grads, grads))


def _config(method, form, views, graph):
  """Smoke config of ``method`` with the case's form, V and graph.

  The smoke CNN only for VICReg's two-view case: an MLP encoder compiles
  several times faster and has the same cross-device statistics (BatchNorm
  over the global batch), so the 52 compiles stay affordable.
  """
  module = __import__(f"configs.{method}", fromlist=["get_config"])
  config = module.get_config("smoke")
  if (method, form) != ("vicreg", "two_view") and method not in (
      "ijepa", "mae", "dinov2"):
    config.model.encoder = "mlp"
    config.model.encoder_kwargs = ml_collections.ConfigDict({"features": (32,)})
  config.loss.form, config.views.num_global = form, views
  if method in ("dino", "lejepa", "swav", "dinov2"):  # 2 global, rest local
    config.views.num_global, config.views.num_local = 2, views - 2
    config.views.local_size = 28
  if "graph" in config:
    config.graph.kind = graph
  return config


def _batches(views, labelled, dtype, steps=2, batch=64):
  """``steps`` global batches: views (V, B, 28, 28, 1) [+ the loss graph's
  labels "graph_labels" (B,)]."""
  rng = np.random.default_rng(0)
  out = []
  for _ in range(steps):
    x = rng.uniform(size=(views, batch, 28, 28, 1)).astype(dtype)
    # Labels of 10 classes, a quarter unknown (−1): rows and positives of the
    # label graph fall on every device.
    y = np.where(rng.uniform(size=batch) < 0.25, -1,
                 rng.integers(0, 10, batch)).astype(np.int32)
    out.append({"ready_views": x} | ({"graph_labels": y} if labelled
                                     else {}))
  return out


def _initial_state(config, dtype):
  """Host (numpy) TrainState of ``dtype``, shared by the 1- and 8-device runs."""
  with config.unlocked():  # computation dtype of every network
    config.model.dtype = np.dtype(dtype).name
  method = methods.build(config)
  # Plain SGD on the clipped gradient: the update is a smooth function of the
  # gradient (Adam's g/sqrt(v) would blow a round-off-only gradient up to
  # ±lr), and clipping keeps losses of large scale (‖ZZᵀ − G‖² on a label
  # graph) from diverging in two steps.
  tx = optax.chain(_record_grads(), optax.clip_by_global_norm(1.0),
                   optax.sgd(0.05))
  state = jax.device_get(train_state.create_train_state(
      method, tx, jax.random.key(0), train.batch_spec(config, (28, 28, 1))))
  cast = lambda tree: jax.tree.map(
      lambda a: np.asarray(a, dtype) if np.issubdtype(
          np.asarray(a).dtype, np.floating) else np.asarray(a), tree)
  params = cast(state.params)  # flax keeps float32 parameters by default
  return state.replace(params=params, method_state=cast(state.method_state),
                       opt_state=tx.init(params))


def _run(config, state, devices, batches):
  """Two steps on a mesh over ``devices``; returns numpy results and HLO."""

  mesh = train.make_mesh(devices)
  replicated = NamedSharding(mesh, P())
  state = jax.tree.map(lambda a: _put(np.asarray(a), replicated), state)
  put = lambda b: jax.tree.map(_put, b, inputs.batch_shardings(b, mesh))
  step = train.sharded_train_step(config, mesh)
  compiled = step.lower(state, put(batches[0])).compile()
  _barrier(mesh)
  losses, grads = [], []
  for batch in batches:
    state, metrics = compiled(state, put(batch))
    losses.append(jax.device_get(metrics))
    grads.append(jax.device_get(state.opt_state[0]))
  final = jax.device_get((state.params, state.method_state,
                          state.opt_state))
  return {"loss terms": losses, "gradients": grads, "final state": final,
          "hlo": compiled.as_text()}


# Barrier ids must be unique; every process passes the barriers in one order.
_BARRIER_IDS = itertools.count(1)


def _barrier(mesh):
  """Waits (up to 10 min) until every process has compiled the program of a
  mesh that spans processes. gloo gives up on its first collective after
  ~30 s, which a process that compiles slowly on a loaded machine exceeds.
  The coordination service's barrier (jax-private API) has its own timeout."""
  if len({d.process_index for d in mesh.devices.flat}) == 1:
    return
  from jax._src import distributed as jax_distributed  # pylint: disable=import-outside-toplevel
  jax_distributed.global_state.client.wait_at_barrier(
      f"ssljax_test_sharding_{next(_BARRIER_IDS)}", 600_000)


def _put(x, sharding):
  """Global array of the host array ``x`` (same on every process), sharded
  on its batch axis (the last one it names): each process hands over only
  the contiguous rows of its own devices, as ``ssljax.train`` does."""
  if sharding.is_fully_addressable:
    return jax.device_put(x, sharding)
  if not sharding.spec:  # replicated: every process holds all of x
    return jax.make_array_from_callback(x.shape, sharding, lambda i: x[i])
  axis = len(sharding.spec) - 1
  spans = {(i[axis].start or 0, i[axis].stop or x.shape[axis]) for i in
           sharding.addressable_devices_indices_map(x.shape).values()}
  lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
  assert sum(b - a for a, b in spans) == hi - lo  # contiguous rows
  local = np.take(x, np.arange(lo, hi), axis=axis)
  return jax.make_array_from_process_local_data(sharding, local, x.shape)


def _rel_diff(a, b):
  """(max|a − b| / max|b| over all leaves of two pytrees, path of the leaf
  with the largest |a − b|)."""
  la, _ = jax.tree_util.tree_flatten_with_path(a)
  lb = jax.tree.leaves(b)
  assert len(la) == len(lb)
  diffs = [float(np.max(np.abs(np.asarray(x, np.float64) - y), initial=0.0))
           for (_, x), y in zip(la, lb)]
  scale = max(float(np.max(np.abs(y), initial=0.0)) for y in lb)
  worst = int(np.argmax(diffs))
  return max(diffs) / scale, jax.tree_util.keystr(la[worst][0])


def _all_gather_shapes(hlo):
  """Result shapes of the all-gathers in compiled HLO text."""
  shapes = []
  for line in hlo.splitlines():
    if "all-gather(" in line or "all-gather-start(" in line:
      match = re.search(r"=\s*\(?\w+\[([\d,]*)\]", line)
      shapes.append([int(d) for d in match.group(1).split(",") if d])
  return shapes


def _worker(cases):
  # XLA's optimisation passes cost more than they save on these tiny
  # programs; they reorder nothing across devices that the check relies on.
  jax.config.update("jax_disable_most_optimizations", True)
  assert jax.device_count() == NUM_DEVICES, jax.devices()
  lead = jax.process_index() == 0
  for dtype_name in RTOL:
    with jax.enable_x64(dtype_name == "float64"):
      dtype = np.dtype(dtype_name)
      for method, form, views, graph in cases:
        config = _config(method, form, views, graph)
        batches = _batches(views, graph != "views", dtype)
        state = _initial_state(config, dtype)
        # Every process runs the 1-device reference on its own first device
        # (only process 0's is compared), so all reach the 8-device
        # program at about the same time.
        one = _run(config, state, jax.local_devices()[:1], batches)
        many = _run(config, state, jax.devices(), batches)
        if not lead:
          continue
        rel = {k: _rel_diff(many[k], one[k])
               for k in ("loss terms", "gradients", "final state")}
        worst = {k: v[1] for k, v in rel.items()}
        rel = {k: v[0] for k, v in rel.items()}
        print(json.dumps({
            "dtype": dtype_name, "processes": jax.process_count(),
            "method": method, "form": form,
            "views": views, "graph": graph, "rel_diff": rel, "worst_leaf": worst,
            "loss": float(one["loss terms"][0]["loss"]),
            "has_all_reduce": "all-reduce" in many["hlo"],
            "all_gathers": _all_gather_shapes(many["hlo"])}), flush=True)


if __name__ == "__main__":
  # argv: case indices [coordinator process_count process_id]
  if len(sys.argv) > 2:
    distributed.initialize(ml_collections.ConfigDict(dict(
        enabled=True, coordinator_address=sys.argv[2],
        num_processes=int(sys.argv[3]), process_id=int(sys.argv[4]))))
  _worker([CASES[int(i)] for i in sys.argv[1].split(",")])
