"""Evaluator plug-ins, the metric writer and the run report."""

import json
import os
import sys
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from ssljax import (config_validation, evaluators, methods, models, monitor,
                    report)
from ssljax.evaluators import base, fine_tune, online_probe

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # configs/
from configs import byol as byol_config  # noqa: E402  pylint: disable=wrong-import-position

BUILT_IN = ("linear_probe", "knn", "raw_pixel_probe", "random_init_probe",
            "online_probe", "fine_tune")


def separable(n=60, d=4, seed=0):
  """Two well separated Gaussian classes: (X float32 (n, d), y int32 (n,))."""
  rng = np.random.default_rng(seed)
  y = np.arange(n) % 2
  x = rng.normal(size=(n, d)) * 0.1 + 3.0 * (2 * y[:, None] - 1)
  return x.astype(np.float32), y.astype(np.int32)


def fake_context(features=None, total_steps=10, raw=None, images=None,
                 initial=None):
  """An EvalContext over fixed NumPy features (the state is ignored)."""
  train, test = features or (separable(seed=0), separable(seed=1))
  table = {"train": train, "test": test}
  return base.EvalContext(
      config=ml_collections.ConfigDict({"seed": 0}), mesh=None,
      total_steps=total_steps, num_classes=2,
      features=lambda state, split: table[split],
      view_embeddings=None,
      raw_pixels=lambda split: None if raw is None else raw[split],
      initial_state=lambda: initial, shown=False, labelled_images=images)


# ------------------------------------------------------------------ registry --
def test_available_types_lists_the_built_ins_but_not_base():
  types_ = evaluators.available_types()
  assert set(BUILT_IN) <= set(types_) and "base" not in types_


@pytest.mark.parametrize("entry, words", [
    ({"type": "no_such"}, ["evals.e.type", "linear_probe", "knn"]),
    ({"type": "Bad-Name"}, ["evals.e.type"]),
    ({}, ["evals.e.type is missing"]),
    ({"type": "knn", "kk": 3}, ["evals.e.kk", "temperature"]),
    ({"type": "knn", "every_steps": 0}, ["evals.e.every_steps", "> 0"]),
    ({"type": "knn", "every_steps": -5}, ["evals.e.every_steps"]),
    ({"type": "knn", "every_steps": 2.5}, ["evals.e.every_steps"]),
])
def test_validate_rejects_without_a_context(entry, words):
  with pytest.raises(ValueError) as e:
    evaluators.validate({"e": entry})
  assert all(w in str(e.value) for w in words), str(e.value)


def test_build_checks_options_before_anything_runs():
  ctx = fake_context()
  with pytest.raises(ValueError, match="evals.e.unknown"):
    evaluators.build({"e": {"type": "linear_probe", "unknown": 1}}, ctx)
  with pytest.raises(ValueError, match=r"evals\.e\.k=0"):
    evaluators.build({"e": {"type": "knn", "k": 0}}, ctx)
  with pytest.raises(ValueError, match=r"evals\.e\.val_fraction"):
    evaluators.build({"e": {"type": "linear_probe", "val_fraction": 1.0}},
                     ctx)
  with pytest.raises(ValueError, match=r"evals\.e\.fractions"):
    evaluators.build({"e": {"type": "fine_tune", "fractions": (0.0,)}}, ctx)


def test_build_makes_one_instance_per_entry_in_key_order():
  evals = ml_collections.ConfigDict({
      "probe": {"type": "linear_probe", "every_steps": None},
      "knn": {"type": "knn", "every_steps": 5, "k": 3}})
  built = evaluators.build(evals, fake_context())
  assert [e.name for e in built] == ["knn", "probe"]  # ConfigDict sorts
  assert built[0].k == 3 and built[0].every_steps == 5
  assert evaluators.build(None, fake_context()) == []
  evals.knn = None  # switched off
  assert [e.name for e in evaluators.build(evals, fake_context())] == [
      "probe"]


def test_config_validation_reports_evals_in_one_line():
  sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
  from configs import vicreg  # pylint: disable=import-outside-toplevel
  config = vicreg.get_config("smoke")
  config.evals = {"probe": {"type": "linear_probe", "every_steps": None},
                  "x": {"type": "nope"}}
  with pytest.raises(config_validation.ConfigError) as e:
    config_validation.validate(config)
  message = str(e.value)
  assert "\n" not in message and message.startswith("config.evals.x.type")
  config.evals = {"probe": {"type": "linear_probe", "every_steps": 100}}
  config_validation.validate(config)


def test_due_at_the_period_and_always_at_the_last_step():
  ctx = fake_context(total_steps=10)
  every = base.Evaluator("a", ctx, every_steps=3)
  final = base.Evaluator("b", ctx, every_steps=None)
  assert [s for s in range(1, 11) if every.due(s)] == [3, 6, 9, 10]
  assert [s for s in range(1, 11) if final.due(s)] == [10]


# --------------------------------------------------------------- built-ins --
def test_linear_probe_separates_separable_features():
  (probe,) = evaluators.build({"p": {"type": "linear_probe",
                                     "max_iter": 30}}, fake_context())
  out = dict(probe.run(None))
  assert set(out) == {"p/test_accuracy", "p/val_accuracy", "p/l2"}
  assert out["p/test_accuracy"] == 1.0


def test_knn_on_separable_features():
  (knn,) = evaluators.build({"k": {"type": "knn", "k": 3}}, fake_context())
  assert dict(knn.run(None)) == {"k/test_accuracy": 1.0}


def test_raw_pixel_probe_skips_streamed_splits_and_probes_pixels(capsys):
  (skip,) = evaluators.build({"r": {"type": "raw_pixel_probe"}},
                             fake_context())
  assert list(skip.run(None)) == []
  raw = {"train": separable(seed=2), "test": separable(seed=3)}
  (probe,) = evaluators.build({"r": {"type": "raw_pixel_probe",
                                     "max_iter": 30}}, fake_context(raw=raw))
  assert dict(probe.run(None))["r/test_accuracy"] == 1.0


def test_random_init_probe_uses_the_initial_state():
  seen = []
  train, test = separable(seed=0), separable(seed=1)
  ctx = fake_context()
  ctx.initial_state = lambda: "init"
  ctx.features = lambda state, split: seen.append(state) or (
      train if split == "train" else test)
  (probe,) = evaluators.build({"b": {"type": "random_init_probe",
                                     "max_iter": 30}}, ctx)
  assert dict(probe.run("trained"))["b/test_accuracy"] == 1.0
  assert seen == ["init", "init"]


def test_online_probe_accuracy_is_exact():
  x = np.array([[1, 0], [0, 1], [1, 0], [0, 1]], np.float32)
  y = np.array([0, 1, 1, 1], np.int32)  # the third row is misclassified
  ctx = fake_context(features=((x, y), (x[:2], y[:2])))
  state = types.SimpleNamespace(probe={"params": {
      "kernel": jnp.eye(2), "bias": jnp.zeros(2)}})
  (ev,) = evaluators.build({"o": {"type": "online_probe"}}, ctx)
  assert dict(ev.run(state)) == {"o/test_accuracy": 1.0,
                                 "o/train_accuracy": 0.75}
  assert online_probe.accuracy(state.probe["params"], x, 1 - y) == 0.25
  assert list(ev.run(types.SimpleNamespace())) == []  # no probe: skipped


def test_balanced_rows_take_a_fraction_of_each_class():
  labels = np.repeat(np.arange(3), [10, 20, 40])
  rows = fine_tune.balanced_rows(labels, 0.1, seed=0)
  assert np.bincount(labels[rows]).tolist() == [1, 2, 4]
  assert len(set(rows)) == len(rows)


def test_fine_tune_changes_a_copy_of_the_encoder():
  rng = np.random.default_rng(0)
  y = np.arange(16) % 2
  images = (rng.integers(0, 60, (16, 4, 4, 1)) + 150 * y[:, None, None, None]
            ).astype(np.uint8)
  config = byol_config.get_config("smoke")  # a method with a predictor
  config.model.encoder = "mlp"
  config.model.encoder_kwargs = ml_collections.ConfigDict({"features": (8,)})
  method = methods.build(config)
  params, method_state = method.init(jax.random.key(0),
                                     methods.BatchSpec((4, 4, 1)))
  state = types.SimpleNamespace(method=method, params=params,
                                method_state=method_state)
  before = jax.tree.map(np.array, state.params)
  ctx = fake_context(
      features=((None, y), (None, y)),
      images=lambda split, rows: (images, y) if rows is None
      else (images[rows], y[rows]))
  (ev,) = evaluators.build({"f": {
      "type": "fine_tune", "fractions": (0.5,), "steps": 3,
      "batch_size": 4, "learning_rate": 0.1, "eval_batch_size": 8}}, ctx)
  rows = fine_tune.balanced_rows(y, 0.5, seed=0)
  params, _, _ = ev.fine_tune(state, images[rows], y[rows], 2, seed=0)
  moved = jax.tree.map(lambda a, b: float(np.abs(np.asarray(a) - b).max()),
                       params["net"]["encoder"], before["encoder"])
  assert max(jax.tree.leaves(moved)) > 0
  jax.tree.map(np.testing.assert_array_equal, state.params, before)
  out = dict(ev.run(state))
  assert list(out) == ["f/50pct_test_accuracy"]
  assert 0.0 <= out["f/50pct_test_accuracy"] <= 1.0


# ------------------------------------------------------------------ writer --
def test_writer_resume_never_duplicates_a_metric(tmp_path):
  writer = monitor.MetricWriter(str(tmp_path), 0)
  for step in (1, 2, 3, 4):
    writer.write(step, {"loss": float(step)})
  writer.write(4, {"probe/test_accuracy": 0.5})
  writer.close()
  # Resumed at 2: steps 3 and 4 are written again, then the final eval.
  writer = monitor.MetricWriter(str(tmp_path), 2)
  writer.write(2, {"probe/test_accuracy": 0.25})  # an eval re-run at 2
  for step in (3, 4):
    writer.write(step, {"loss": float(step)})
  writer.write(4, {"probe/test_accuracy": 0.75,
                   "spectrum/eigenvalues": np.array([3.0, 2.0, 1.0])})
  writer.close()
  rows = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
  pairs = [(r["step"], k) for r in rows for k in r if k != "step"]
  assert len(pairs) == len(set(pairs)), rows
  assert [r["loss"] for r in rows if "loss" in r] == [1.0, 2.0, 3.0, 4.0]
  final = [r for r in rows if "spectrum/eigenvalues" in r]
  assert final == [{"step": 4, "probe/test_accuracy": 0.75,
                    "spectrum/eigenvalues": [3.0, 2.0, 1.0]}]


def test_arrays_never_reach_tensorboard_scalars(tmp_path):
  writer = monitor.MetricWriter(str(tmp_path), 0)
  calls = {"scalars": [], "histograms": []}
  writer.tensorboard.write_scalars = lambda step, v: calls["scalars"].append(
      set(v))
  writer.tensorboard.write_histograms = (
      lambda step, v, num_buckets=None: calls["histograms"].append(set(v)))
  writer.write(1, {"loss": 1.0, "s/eigenvalues": np.arange(3.0),
                   "s/bad": np.array([1.0, np.nan])})
  assert calls == {"scalars": [{"loss"}], "histograms": [{"s/eigenvalues"}]}
  with pytest.raises(ValueError, match="shape"):
    writer.write(2, {"m": np.zeros((2, 2))})
  writer.close()
  assert os.listdir(tmp_path / "tensorboard")


# ------------------------------------------------------------------ report --
def _png_ok(path):
  with open(path, "rb") as f:
    head = f.read(8)
  return head == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) > 5000


@pytest.mark.parametrize("with_evals", [False, True])
def test_write_report_draws_a_png(tmp_path, with_evals):
  lines = []
  for step in range(1, 21):
    row = {"step": step, "loss": 10.0 / step, "invariance": 1.0 / step,
           "variance": 0.5, "learning_rate": 1e-3 * step,
           "host_peak_rss_mib": 100.0}
    if with_evals and step % 10 == 0:
      row.update({"knn/test_accuracy": 0.5 + step / 100,
                  "spectrum/eigenvalues": list(1.0 / np.arange(1, 9)),
                  "theory/eigenvalue_0": 1.0 / step,
                  "theory/ode_eigenvalue_0": 1.1 / step})
    lines.append(json.dumps(row))
  if with_evals:
    lines.append(json.dumps({"step": 20, "probe/test_accuracy": 0.9}))
    (tmp_path / "results.json").write_text(json.dumps(
        {"method": "vicreg", "probe_test_accuracy": 0.9}))
  (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
  path = report.write_report(str(tmp_path))
  assert path == str(tmp_path / "report.png") and _png_ok(path)


def test_write_report_without_metrics(tmp_path):
  path = report.write_report(str(tmp_path), str(tmp_path / "r.png"))
  assert _png_ok(path)
