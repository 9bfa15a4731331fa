"""End to end: main on a small subset, checkpoints, resume, determinism, errors."""

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from ssljax import data, inputs, methods, report, train, train_state

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from configs import vicreg as vicreg_config  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _smoke_config(data_dir, **overrides):
  config = vicreg_config.get_config("smoke")
  config.dataset.data_dir = data_dir
  config.eval_inputs.baselines = False
  for key, value in overrides.items():
    node = config
    *parents, leaf = key.split(".")
    for p in parents:
      node = node[p]
    node[leaf] = value
  return config


RESULT_KEYS = ("dataset", "method", "epochs", "steps", "wall_seconds",
               "evals")
ACCURACIES = ("probe/test_accuracy", "raw_pixel_probe/test_accuracy",
              "random_init_probe/test_accuracy", "knn/test_accuracy")


def test_main_writes_results_metrics_and_checkpoints(fmnist_data_dir, tmp_path):
  workdir = tmp_path / "run"
  cmd = [sys.executable, "-m", "ssljax.main", "--config",
         os.path.join(REPO, "configs", "vicreg.py") + ":smoke",
         f"--config.dataset.data_dir={fmnist_data_dir}", f"--workdir={workdir}"]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads((workdir / "results.json").read_text())
  for key in RESULT_KEYS:
    assert key in results, key
  assert results["steps"] == 6 and results["dataset"] == "fashion_mnist_local"
  for key in ACCURACIES:  # 10 classes: chance 0.1
    assert 0.1 < results["evals"][key] <= 1.0, (key, results["evals"][key])
  # The phase timings are disjoint parts of the run: they add up to at most
  # its wall time.
  phases = results["seconds"]
  evals = {f"eval/{name}" for name in ("probe", "knn", "raw_pixel_probe",
                                       "random_init_probe", "online_probe",
                                       "rankme", "sigreg")}
  assert set(phases) == {"setup", "train_steps", "checkpoint_save"} | evals
  assert all(v >= 0 for v in phases.values())
  assert sum(phases.values()) <= results["wall_seconds"]
  # Every evaluator's final values are in results.json; RankMe ran at step
  # 3 too (smoke: every 3 steps), in its own line.
  lines = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
  assert [l["step"] for l in lines] == [2, 3, 4, 6, 6]
  assert all(np.isfinite(l["loss"]) for l in lines if "loss" in l)
  assert "rankme/rankme" in lines[1] and "rankme/rankme" in lines[4]
  assert "probe/test_accuracy" in lines[4] and "loss" not in lines[4]
  assert (workdir / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert sorted(os.listdir(workdir / "checkpoints")) == ["3", "6"]
  assert os.listdir(workdir / "tensorboard")


def test_every_default_evaluator_runs_at_its_steps(fmnist_data_dir, tmp_path):
  """The main job's evaluators (and fine-tuning) on the smoke run: each
  yields its metrics after the last step, the periodic ones also at step 3,
  and report.png draws them."""
  config = _smoke_config(fmnist_data_dir)
  config.evals = vicreg_config.get_config().evals
  config.evals.probe.max_iter = 20
  config.evals.few_shot.shots = (1, 5)
  config.evals.fine_tune = vicreg_config.evals_entry(
      "fine_tune", fractions=(0.1,), steps=5, batch_size=32)
  for name in ("rankme", "alpha_req", "lidar", "spectrum", "theory",
               "sigreg"):
    config.evals[name].every_steps = 3
  results = train.train_and_evaluate(config, str(tmp_path))
  evals = results["evals"]
  for key in ("probe/test_accuracy", "knn/test_accuracy",
              "online_probe/test_accuracy", "few_shot/5shot",
              "rankme/rankme", "alpha_req/alpha_req", "lidar/lidar",
              "spectrum/top_fraction", "theory/gram_gap",
              "theory/top_eigenspace_fraction", "fine_tune/10pct_test_accuracy",
              "sigreg/sigreg_z", "sigreg/sigreg_z_standardized"):
    assert key in evals, key
  assert 0.0 <= evals["fine_tune/10pct_test_accuracy"] <= 1.0
  # RankMe of a K-column embedding lies in [1, K]; the spectrum is sorted.
  assert 1.0 <= evals["rankme/rankme_z"] <= config.model.projector[-1]
  eig = evals["spectrum/eigenvalues_z"]
  assert eig == sorted(eig, reverse=True)
  lines = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
  at3 = [l for l in lines if l["step"] == 3]
  assert len(at3) == 1 and "lidar/lidar" in at3[0] and "loss" not in at3[0]
  assert "probe/test_accuracy" not in at3[0]
  assert os.path.getsize(tmp_path / "report.png") > 10_000
  # The report's layout: one panel per kind, no text past the canvas.
  fig, titles = report.draw_report(str(tmp_path))
  assert titles == ["loss terms", "learning rate", "accuracies",
                    "accuracies during training", "label-free metrics",
                    "final values", "spectrum"]
  assert len([ax for ax in fig.axes if ax.get_title()]) == len(titles)
  assert report_text_outside(fig) == []


def report_text_outside(fig) -> list[str]:
  """What of a drawn figure reaches past its canvas: each panel's tight
  box (its title, labels, tick labels, legend, table, as drawn) and the
  figure's own texts (the title)."""
  fig.canvas.draw()
  renderer = fig.canvas.get_renderer()
  width, height = fig.canvas.get_width_height()
  boxes = [(ax.get_title() or "a panel", ax.get_tightbbox(renderer))
           for ax in fig.axes]
  boxes += [(t.get_text(), t.get_window_extent(renderer)) for t in fig.texts
            if t.get_visible() and t.get_text().strip()]
  return [name for name, box in boxes
          if box.x0 < -1 or box.y0 < -1 or box.x1 > width + 1
          or box.y1 > height + 1]


def test_create_train_state_equals_the_eager_initialisation(fmnist_data_dir):
  """One compiled program gives the arrays the method's own init gives op by
  op (same key use), the optimiser state of them and the zero probe."""
  config = _smoke_config(fmnist_data_dir)
  method, tx = methods.build(config), optax.adamw(1e-3)
  shapes = train.batch_spec(config, (28, 28, 1))
  key = jax.random.key(7)
  state = train_state.create_train_state(method, tx, key, shapes,
                                         num_classes=10,
                                         probe_tx=optax.sgd(0.1))
  params, method_state = method.init(key, shapes)
  expected = {"params": params, "method_state": method_state,
              "opt_state": tx.init(params)}
  for field, tree in expected.items():
    got = getattr(state, field)
    assert jax.tree.structure(got) == jax.tree.structure(tree), field
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(tree)):
      assert a.dtype == b.dtype and a.shape == b.shape, field
      np.testing.assert_allclose(np.asarray(a, np.float64),
                                 np.asarray(b, np.float64),
                                 rtol=1e-6, atol=1e-7, err_msg=field)
  assert int(state.step) == 0
  dim = state.probe["params"]["kernel"].shape[0]
  assert state.probe["params"]["kernel"].shape == (dim, 10)
  assert not np.any(np.asarray(state.probe["params"]["kernel"]))
  with pytest.raises(ValueError, match="probe_tx"):
    train_state.create_train_state(method, tx, key, shapes, num_classes=10)
  # A second state of the same method and optimisers reuses the program:
  # method.init is not traced again (another key, other values).
  traces, init = [], method.init
  method.init = lambda *a: traces.append(1) or init(*a)
  probe_tx = optax.sgd(0.1)
  first = train_state.create_train_state(method, tx, key, shapes,
                                         num_classes=10, probe_tx=probe_tx)
  second = train_state.create_train_state(method, tx, jax.random.key(8), shapes,
                                          num_classes=10, probe_tx=probe_tx)
  assert len(traces) == 1
  assert not all(np.array_equal(a, b) for a, b in zip(
      jax.tree.leaves(first.params), jax.tree.leaves(second.params)))


def test_checkpoint_restores_the_saved_state_exactly(fmnist_data_dir, tmp_path):
  config = _smoke_config(fmnist_data_dir)
  method, tx = methods.build(config), optax.adamw(1e-3)
  shapes = train.batch_spec(config, (28, 28, 1))
  state = train_state.create_train_state(method, tx, jax.random.key(3), shapes)
  state = state.replace(step=5)
  with ocp.CheckpointManager(str(tmp_path / "ckpt")) as mngr:
    mngr.save(5, args=ocp.args.StandardSave(state))
    mngr.wait_until_finished()
    blank = train_state.create_train_state(method, tx, jax.random.key(4),
                                           shapes)
    restored = mngr.restore(mngr.latest_step(), args=ocp.args.StandardRestore(blank))
  assert int(restored.step) == 5
  for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(restored)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _final_params(workdir):
  with ocp.CheckpointManager(os.path.abspath(os.path.join(workdir, "checkpoints"))) as m:
    return m.restore(m.latest_step(), args=ocp.args.StandardRestore())["params"]


def test_resume_equals_uninterrupted_run_and_same_seed_same_numbers(
    fmnist_data_dir, tmp_path):
  config = _smoke_config(fmnist_data_dir)
  first = train.train_and_evaluate(config, str(tmp_path / "a"))
  second = train.train_and_evaluate(config, str(tmp_path / "b"))
  # Interrupted run: drop the final checkpoint so the rerun resumes at step 3.
  shutil.copytree(tmp_path / "a", tmp_path / "c")
  shutil.rmtree(tmp_path / "c" / "checkpoints" / "6")
  resumed = train.train_and_evaluate(config, str(tmp_path / "c"))
  assert first["resumed_from_step"] == 0 and resumed["resumed_from_step"] == 3
  for other in (second, resumed):
    assert other["steps"] == first["steps"]
    for key in ("probe/test_accuracy", "knn/test_accuracy"):
      assert other["evals"][key] == first["evals"][key], key
  pa, pc = (_final_params(tmp_path / d) for d in ("a", "c"))
  for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pc)):
    np.testing.assert_array_equal(x, y)
  # metrics.jsonl of the resumed run has each step once.
  steps = [json.loads(l)["step"] for l in open(tmp_path / "c" / "metrics.jsonl")]
  assert steps == [2, 3, 4, 6, 6]  # step 3: the periodic evaluators
  # A finished run rerun with its workdir resumes at the end: no extra steps.
  again = train.train_and_evaluate(config, str(tmp_path / "a"))
  assert again["resumed_from_step"] == 6 and again["evals"]["probe/test_accuracy"] == first["evals"]["probe/test_accuracy"]
  # ... and its final evaluators replace their line instead of adding one.
  lines = [json.loads(l) for l in open(tmp_path / "a" / "metrics.jsonl")]
  assert [l["step"] for l in lines] == [2, 3, 4, 6, 6]
  pairs = [(l["step"], k) for l in lines for k in l if k != "step"]
  assert len(pairs) == len(set(pairs))


def test_unknown_config_key_is_an_error(tmp_path):
  cmd = [sys.executable, "-m", "ssljax.main", "--config",
         os.path.join(REPO, "configs", "vicreg.py") + ":smoke",
         "--config.optim.learnig_rate=0.1", f"--workdir={tmp_path}"]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0
  assert "learnig_rate" in proc.stderr
  assert not os.listdir(tmp_path)  # nothing written


def test_unavailable_dataset_fails_fast_with_instructions(tmp_path):
  config = _smoke_config(str(tmp_path / "empty"), **{"dataset.name": "mnist"})
  with pytest.raises(data.DatasetUnavailableError, match="mnist"):
    train.train_and_evaluate(config, str(tmp_path / "run"))


def test_bad_config_values_are_rejected(fmnist_data_dir, tmp_path):
  for key, value, match in [("optim.name", "sgdd", "optim.name='sgdd'"),
                            ("loss.form", "three_view", "form"),
                            ("method", "byol", "method"),
                            ("views.num_global", 3, "needs 2 views"),
                            ("graph.kind", "knn", "graph.kind='knn'"),
                            ("graph.kind", "supervised", "form")]:
    config = _smoke_config(fmnist_data_dir, **{key: value})
    with pytest.raises(ValueError, match=match):
      train.train_and_evaluate(config, str(tmp_path / key))


def test_graph_form_with_three_views_trains(fmnist_data_dir, tmp_path):
  config = _smoke_config(fmnist_data_dir, **{"views.num_global": 3,
                                             "loss.form": "graph"})
  results = train.train_and_evaluate(config, str(tmp_path / "run"))
  assert results["steps"] == 6 and np.isfinite(results["evals"]["probe/test_accuracy"])


@pytest.mark.parametrize("kind", ["supervised", "mixed"])
def test_label_graphs_train(fmnist_data_dir, tmp_path, kind):
  config = _smoke_config(fmnist_data_dir, **{
      "loss.form": "graph", "graph.kind": kind, "graph.label_fraction": 0.5})
  results = train.train_and_evaluate(config, str(tmp_path / "run"))
  assert results["graph"] == kind and np.isfinite(results["evals"]["probe/test_accuracy"])


def test_known_labels_hides_a_seeded_fraction():
  config = vicreg_config.get_config("smoke")
  labels = np.arange(1000) % 10
  config.graph.label_fraction = 0.3
  known = inputs.known_labels(labels, config)
  assert np.sum(known >= 0) == 300
  np.testing.assert_array_equal(known[known >= 0], labels[known >= 0])
  np.testing.assert_array_equal(known, inputs.known_labels(labels, config))
  config.graph.label_fraction = 1.5
  with pytest.raises(ValueError, match="label_fraction"):
    inputs.known_labels(labels, config)


@pytest.mark.parametrize("kind", ["views", "supervised"])
def test_train_batches_carry_true_labels_and_the_graphs_own(kind):
  """Every host batch has the rows' true "labels" (the online probe's);
  "graph_labels", what the loss graph may see of them, only with a graph
  built from labels; probe_labels= is deprecated and changes nothing."""
  config = vicreg_config.get_config("smoke")
  config.graph.kind, config.graph.label_fraction = kind, 0.5
  config.batch_size, config.dataset.threads = 16, 1
  truth = (np.arange(64) % 10).astype(np.int32)
  source = data.ArraySource(np.zeros((64, 28, 28, 1), np.uint8), truth)
  run = lambda **kw: list(inputs.train_iterator(
      config, source, data.view_spec(config.views), start_step=0,
      num_steps=2, process_index=0, process_count=1, **kw))
  batches = run()
  known = inputs.known_labels(truth, config)
  for batch in batches:
    np.testing.assert_array_equal(batch["labels"], truth[batch["indices"]])
    assert ("graph_labels" in batch) == (kind == "supervised")
    if kind == "supervised":
      np.testing.assert_array_equal(batch["graph_labels"],
                                    known[batch["indices"]])
  with pytest.warns(DeprecationWarning, match="probe_labels"):
    again = run(probe_labels=True)
  for a, b in zip(batches, again):
    assert sorted(a) == sorted(b)
    np.testing.assert_array_equal(a["labels"], b["labels"])


def test_config_variants_and_unknown_variant():
  assert vicreg_config.get_config().method == "vicreg"
  assert vicreg_config.get_config("long").epochs > vicreg_config.get_config().epochs
  with pytest.raises(ValueError, match="variant"):
    vicreg_config.get_config("huge")


CONFIGS = ("vicreg", "simclr", "barlow_twins", "wmse",
           # The label graphs train in test_label_graphs_train; spectral
           # contrastive and FroSSL are joint-embedding losses like VICReg's
           # (their methods: tests/test_methods.py). The teacher-student
           # methods: DINO and NNCLR run through the main job in
           # tests/test_teacher_queue_centre.py (resume), every step form in
           # test_sharding.py. These full smoke runs are slow.
           *(pytest.param(name, marks=pytest.mark.slow)
             for name in ("vicreg_supervised_graph", "vicreg_mixed_graph",
                          "spectral_contrastive", "frossl", "byol", "simsiam",
                          "mocov3")))


@pytest.mark.parametrize("name", CONFIGS)
def test_every_config_runs_its_smoke_variant(fmnist_data_dir, tmp_path, name):
  module = __import__(f"configs.{name}", fromlist=["get_config"])
  config = module.get_config("smoke")
  config.dataset.data_dir = fmnist_data_dir
  config.eval_inputs.baselines = False
  config.num_steps = 3
  results = train.train_and_evaluate(config, str(tmp_path / name))
  assert results["method"] == config.method and results["steps"] == 3
  assert 0.0 <= results["evals"]["probe/test_accuracy"] <= 1.0
  lines = [json.loads(l) for l in open(tmp_path / name / "metrics.jsonl")]
  assert all(np.isfinite(l["loss"]) for l in lines if "loss" in l)


def test_online_probe_trains_on_the_chosen_representation():
  """The probe's step sees the evaluated representation (inference mode, the
  state before the step) of the clean images by default, or the training
  forward pass's h of view 0; either way the encoder's step is the same
  (the probe is detached), and the scored average moves by 1 − ema_decay
  towards the new weights. LeJEPA-CNN: its multi-crop BatchNorm makes the
  two differ. (One step of each, compiled once, checked both ways.)"""
  from configs import lejepa  # pylint: disable=import-outside-toplevel
  from ssljax import online_probe  # pylint: disable=import-outside-toplevel
  config = lejepa.get_config("cnn,smoke")
  method, tx = methods.build(config), optax.adamw(1e-3)
  shapes = train.batch_spec(config, (28, 28, 1))
  probe_tx = optax.sgd(0.5)
  state = train_state.create_train_state(method, tx, jax.random.key(0),
                                         shapes, num_classes=10,
                                         probe_tx=probe_tx)
  rng = np.random.default_rng(0)
  batch = {"images": jax.numpy.asarray(rng.integers(0, 256, (16, 28, 28, 1),
                                                    dtype=np.uint8)),
           "labels": jax.numpy.asarray(np.arange(16) % 10, np.int32)}
  spec = data.view_spec(config.views)

  def step(chosen):
    fn = jax.jit(lambda s, b: train.train_step(
        s, b, spec=spec, probe_tx=probe_tx, probe_features=chosen,
        probe_views="clean", probe_ema_decay=0.5))
    return fn(state, batch)[0]

  got = {f: step(f) for f in ("inference", "train_forward")}
  for a, b in zip(jax.tree.leaves((got["inference"].params,
                                   got["inference"].method_state)),
                  jax.tree.leaves((got["train_forward"].params,
                                   got["train_forward"].method_state))):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  views = data.device_views(batch, jax.random.fold_in(jax.random.key(0), 0),
                            spec)
  outs, _ = method.forward(state.params, state.method_state["batch_stats"],
                           views)
  clean = batch["images"].astype(np.float32) / 255.0
  h = {"inference": state.representation(clean),
       "train_forward": outs[0]["h"]}
  for features, new_state in got.items():
    expected, _ = online_probe.update(state.probe, h[features],
                                      batch["labels"], probe_tx, 0.5)
    for part in ("params", "average"):
      np.testing.assert_allclose(
          np.asarray(new_state.probe[part]["kernel"]),
          np.asarray(expected[part]["kernel"]), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(  # zero at step 0: half the new weights
        np.asarray(new_state.probe["average"]["kernel"]),
        0.5 * np.asarray(new_state.probe["params"]["kernel"]), rtol=1e-6)
  assert not np.allclose(
      np.asarray(got["inference"].probe["params"]["kernel"]),
      np.asarray(got["train_forward"].probe["params"]["kernel"]),
      rtol=1e-3, atol=1e-5)


def test_clean_images_are_the_evaluation_crops():
  """The online probe's clean images: the batch's images / 255 at the view
  size, else the evaluation centre crop (`ssljax.data.crops.center_crop`,
  up to the two resizers' difference), None without whole images."""
  from ssljax.data import crops  # pylint: disable=import-outside-toplevel
  images = np.random.default_rng(0).integers(0, 256, (2, 28, 28, 1), np.uint8)
  got = train.clean_images({"images": jax.numpy.asarray(images)}, 28)
  np.testing.assert_allclose(np.asarray(got),  # XLA: x * (1/255), 1 ulp
                             images.astype(np.float32) / 255.0, rtol=1e-6)
  smooth = np.repeat(np.repeat(np.linspace(0, 255, 14, dtype=np.uint8)[
      None, :, None] * np.ones((14, 1, 1), np.uint8), 2, 0), 2, 1)[None]
  got = train.clean_images({"images": jax.numpy.asarray(smooth)}, 16)
  want = crops.center_crop(smooth[0], 16) / 255.0
  assert got.shape == (1, 16, 16, 1)
  np.testing.assert_allclose(np.asarray(got[0]), want, atol=0.05)
  assert train.clean_images({"views": ()}, 28) is None
