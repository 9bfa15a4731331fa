"""The train step of the methods with state: EMA teacher, queue, centre, probe.

BYOL, SimSiam, MoCo v3, DINO and NNCLR through ``train.sharded_train_step``
on the small MLP encoder: the EMA teacher moves exactly by the cosine
momentum, the queue takes the first view's projections in FIFO order, the
centre moves towards the teacher's batch mean, the online probe gets no
gradient into the encoder; and a run resumed from a checkpoint equals the
uninterrupted run (teacher, queue and centre included).
"""

import json
import os
import shutil
import sys

import jax
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from ssljax import methods, online_probe, train, train_state

from ssljax.methods import ema

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # configs/

WITH_STATE = ("byol", "simsiam", "mocov3", "dino", "nnclr")


def _config(method, form=None):
  module = __import__(f"configs.{method}", fromlist=["get_config"])
  config = module.get_config("smoke")
  config.model.encoder = "mlp"
  config.model.encoder_kwargs = ml_collections.ConfigDict({"features": (32,)})
  config.views.local_size = 28  # the MLP takes one image size
  if form is not None:
    config.loss.form = form
  return config


def _views(config, batch=16, seed=0):
  """Host crops ("views": global and local groups of 28 px uint8) and the
  probe's labels, as the train step takes them."""
  rng = np.random.default_rng(seed)
  g, l = config.views.num_global, config.views.num_local
  views = [rng.uniform(size=(g, batch, 28, 28, 1)).astype(np.float32) * 255]
  if l:
    views.append(rng.uniform(size=(l, batch, 28, 28, 1)).astype(np.float32)
                 * 255)
  labels = rng.integers(0, 10, batch).astype(np.int32)
  return {"views": tuple(v.astype(np.uint8) for v in views),
          "labels": labels}


def _state(config, num_classes=10):
  return train_state.create_train_state(
      methods.build(config), optax.sgd(0.05), jax.random.key(0),
      methods.BatchSpec((28, 28, 1), config.views.num_global,
                        config.views.num_local),
      num_classes=num_classes, probe_tx=online_probe.create_optimizer(config))


def test_each_method_state_holds_what_the_method_needs():
  """Teacher for byol / mocov3 / dino (encoder + projector only), queue for
  nnclr, centre for dino, a predictor in the params of all but dino."""
  for name in WITH_STATE:
    state = _state(_config(name))
    ms = state.method_state
    assert ("teacher" in ms) == (name in ("byol", "mocov3", "dino"))
    assert ("queue" in ms) == (name == "nnclr")
    assert ("center" in ms) == (name == "dino")
    assert ("predictor" in state.params) == (name != "dino")
    if "teacher" in ms:
      assert set(ms["teacher"]["params"]) == {"encoder", "projector"}


@pytest.mark.parametrize("method", WITH_STATE)
def test_one_step_moves_teacher_queue_centre_and_probe_as_defined(method):
  config = _config(method)
  total = 10
  mesh = train.make_mesh(jax.devices()[:1])
  step = train.sharded_train_step(config, mesh, total_steps=total,
                                  steps_per_epoch=5)
  state = _state(config)
  before = jax.tree.map(np.asarray, jax.device_get(state))
  batch = _views(config)
  state, metrics = step(state, jax.device_put(batch))
  after = jax.tree.map(np.asarray, jax.device_get(state))
  assert np.isfinite(float(metrics["loss"]))
  b_ms, a_ms = before.method_state, after.method_state
  if "teacher" in a_ms:
    # τ of step 0, or of step 1 where the teacher moves with the next
    # step's momentum (MoCo v3's key encoder, teacher.momentum_step).
    k = int(config.teacher.get("momentum_step", "done") == "next")
    m = float(ema.cosine_momentum(k, total, base=config.teacher.momentum,
                                  final=config.teacher.final_momentum))
    assert float(metrics["teacher_momentum"]) == pytest.approx(m, rel=1e-6)
    student = {k: after.params[k] for k in ("encoder", "projector")}
    for t0, p1, t1 in zip(jax.tree.leaves(b_ms["teacher"]["params"]),
                          jax.tree.leaves(student),
                          jax.tree.leaves(a_ms["teacher"]["params"])):
      np.testing.assert_allclose(t1, m * t0 + (1 - m) * p1, rtol=1e-5,
                                 atol=1e-7)
    # The teacher is not the online network after a step.
    assert any(not np.array_equal(a, b) for a, b in zip(
        jax.tree.leaves(a_ms["teacher"]["params"]), jax.tree.leaves(student)))
  if "queue" in a_ms:
    q0, q1 = b_ms["queue"], a_ms["queue"]
    assert int(q1["ptr"]) == (int(q0["ptr"]) + 16) % q0["z"].shape[0]
    np.testing.assert_array_equal(q1["z"][16:], q0["z"][16:])
    assert not np.allclose(q1["z"][:16], q0["z"][:16])
  if "center" in a_ms:
    assert not np.allclose(a_ms["center"], b_ms["center"])
    assert float(metrics["teacher_temperature"]) == pytest.approx(
        config.loss.warmup_teacher_temperature)
  # The online probe trained; its loss and accuracy are logged.
  assert not np.allclose(after.probe["params"]["kernel"],
                         before.probe["params"]["kernel"])
  assert 0.0 <= float(metrics["online_probe_train_accuracy"]) <= 1.0


def test_online_probe_sends_no_gradient_into_the_encoder():
  """The same step with and without the probe gives identical encoder
  parameters, and the probe's labels change nothing but the probe."""
  config = _config("byol")
  mesh = train.make_mesh(jax.devices()[:1])
  step = train.sharded_train_step(config, mesh, total_steps=4)
  batch = _views(config)
  with_probe, _ = step(_state(config), jax.device_put(batch))
  without, _ = step(_state(config, num_classes=0), jax.device_put(batch))
  other = dict(batch, labels=(batch["labels"] + 3) % 10)
  relabelled, _ = step(_state(config), jax.device_put(other))
  for a, b, c in zip(jax.tree.leaves(with_probe.params),
                     jax.tree.leaves(without.params),
                     jax.tree.leaves(relabelled.params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
  assert not np.array_equal(np.asarray(with_probe.probe["params"]["kernel"]),
                            np.asarray(relabelled.probe["params"]["kernel"]))


@pytest.mark.parametrize("method,form", [("byol", "graph"),
                                         ("simsiam", "graph"),
                                         ("dino", "graph"),
                                         ("nnclr", "graph")])
def test_graph_form_equals_original_form_in_the_train_step(method, form):
  """One step of the crop-graph form gives the original form's loss and
  parameters (DINO with its local crops)."""
  results = []
  for f in (None, form):
    config = _config(method, f)
    mesh = train.make_mesh(jax.devices()[:1])
    step = train.sharded_train_step(config, mesh, total_steps=4)
    results.append(step(_state(config), jax.device_put(_views(config))))
  (s1, m1), (s2, m2) = results
  np.testing.assert_allclose(float(m1["loss"]), float(m2["loss"]), rtol=1e-5)
  for a, b in zip(jax.tree.leaves(s1.params), jax.tree.leaves(s2.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4,
                               atol=1e-6)


def _checkpoint_state(workdir, step):
  with ocp.CheckpointManager(os.path.abspath(
      os.path.join(workdir, "checkpoints"))) as m:
    return m.restore(step, args=ocp.args.StandardRestore())


@pytest.mark.parametrize("method", ["nnclr", "dino"])
def test_resume_with_teacher_queue_and_centre_equals_uninterrupted_run(
    method, fmnist_data_dir, tmp_path):
  """A run resumed from step 3 ends with the uninterrupted run's state, bit
  for bit: parameters, teacher, queue, centre, online probe. On the small
  MLP encoder (`_config`), which compiles several times faster than the
  smoke CNN; the CNN's resume is checked in tests/test_train.py and
  tests/test_checkpoints.py."""
  config = _config(method)
  if not config.views.num_local:
    config.views.local_size = 0  # not read without local crops
  config.dataset.data_dir = fmnist_data_dir
  config.eval_inputs.baselines = False
  for name in list(config.evals.keys()):
    if name not in ("probe", "online_probe"):
      del config.evals[name]
  first = train.train_and_evaluate(config, str(tmp_path / "a"))
  shutil.copytree(tmp_path / "a", tmp_path / "c")
  shutil.rmtree(tmp_path / "c" / "checkpoints" / "6")
  resumed = train.train_and_evaluate(config, str(tmp_path / "c"))
  assert resumed["resumed_from_step"] == 3
  a, c = (_checkpoint_state(tmp_path / d, 6) for d in ("a", "c"))
  assert set(a) >= {"params", "method_state", "probe"}
  assert set(a["method_state"]) >= {"batch_stats"} | (
      {"queue"} if method == "nnclr" else {"teacher", "center"})
  for key in ("params", "method_state", "probe", "opt_state"):
    for x, y in zip(jax.tree.leaves(a[key]), jax.tree.leaves(c[key])):
      np.testing.assert_array_equal(x, y)
  assert (resumed["evals"]["probe/test_accuracy"]
          == first["evals"]["probe/test_accuracy"])
  steps = [json.loads(l)["step"] for l in open(tmp_path / "c" / "metrics.jsonl")]
  assert steps == [2, 4, 6, 6]  # the last line: the final evaluators


def test_online_probe_reaches_the_offline_probe_on_a_frozen_encoder(
    fmnist_data_dir, tmp_path):
  """With the encoder frozen (learning rate ~0) and no augmentation, the
  online probe (300 steps of AdamW on standardised features, batch
  statistics: 37 passes over the 512 images) and the offline L-BFGS probe
  read the same representation of the same images: the online one must
  come within 0.05 of the offline test accuracy (measured: 0.6914 both;
  after 100 steps 0.609 against 0.688, still fitting). With the default
  views the online probe also pays for the gap between augmented train
  views and clean test images."""
  from configs import vicreg  # pylint: disable=import-outside-toplevel
  config = vicreg.get_config("smoke")
  config.dataset.data_dir = fmnist_data_dir
  config.model.encoder = "mlp"
  config.model.encoder_kwargs = ml_collections.ConfigDict({"features": (64,)})
  config.optim.learning_rate = 1e-12  # the encoder stays at its init
  config.views.crop = "none"
  # The crop range is not read without a random box, so it must be left
  # at its neutral value (configs/vicreg.py sets its own).
  config.views.crop_scale = (0.2, 1.0)
  for op in ("flip_prob", "jitter_prob", "erase_prob"):
    config.views[op] = 0.0
  config.num_steps = 300
  config.checkpoint_every_steps = 300
  config.log_every_steps = 50
  config.eval_inputs.baselines = False
  for name in list(config.evals.keys()):
    if name not in ("probe", "online_probe"):
      del config.evals[name]
  results = train.train_and_evaluate(config, str(tmp_path))
  online, offline = (results["evals"]["online_probe/test_accuracy"],
                     results["evals"]["probe/test_accuracy"])
  assert online >= offline - 0.05, (online, offline)


def test_the_online_probe_has_one_switch_its_evals_entry():
  """With an ``evals`` entry of type online_probe the step trains a probe
  (and the evaluator scores it); without one there is no probe at all."""
  config = _config("simsiam")
  assert online_probe.create_optimizer(config) is not None
  del config.evals["online_probe"]
  assert online_probe.create_optimizer(config) is None
  mesh = train.make_mesh(jax.devices()[:1])
  step = train.sharded_train_step(config, mesh, total_steps=4)
  state, metrics = step(_state(config, num_classes=0),
                        jax.device_put(_views(config)))
  assert state.probe == {} and "online_probe_loss" not in metrics
