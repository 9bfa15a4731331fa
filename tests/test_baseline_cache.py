"""ssljax.evaluators.baseline_cache: a baseline probe's result is reused only
for the same inputs and options, equals the computed one, and a damaged or
absent entry is recomputed."""

import json
import os

import ml_collections
import numpy as np
import pytest

from ssljax import probes, evaluators
from ssljax.evaluators import base, baseline_cache


def blobs(seed, n=200, d=6):
  rng = np.random.default_rng(seed)
  y = rng.integers(0, 3, n)
  x = rng.normal(size=(n, d)) + 1.5 * np.eye(3, d)[y]
  return x.astype(np.float32), y.astype(np.int32)


def context(cache, raw):
  config = ml_collections.ConfigDict(
      {"seed": 0, "eval_inputs": {"baseline_cache": cache}})
  return base.EvalContext(
      config=config, mesh=None, total_steps=1, num_classes=3,
      features=lambda state, split: raw[split], view_embeddings=None,
      raw_pixels=lambda split: raw[split], initial_state=lambda: None,
      shown=False)


def run(cache, raw, **options):
  (probe,) = evaluators.build(
      {"r": {"type": "raw_pixel_probe", "max_iter": 20, **options}},
      context(cache, raw))
  return dict(probe.run(None))


@pytest.fixture
def counted(monkeypatch):
  calls = []
  real = probes.linear_probe
  monkeypatch.setattr(probes, "linear_probe",
                      lambda *a, **k: calls.append(1) or real(*a, **k))
  return calls


def test_second_run_reuses_the_result_and_equals_it(tmp_path, counted):
  raw = {"train": blobs(0), "test": blobs(1)}
  first = run(str(tmp_path), raw)
  assert len(counted) == 1 and len(os.listdir(tmp_path)) == 1
  again = run(str(tmp_path), raw)
  assert len(counted) == 1  # not probed again
  assert again == pytest.approx(first, rel=1e-6)


def test_other_inputs_or_options_are_probed_again(tmp_path, counted):
  raw = {"train": blobs(0), "test": blobs(1)}
  run(str(tmp_path), raw)
  changed = {"train": (raw["train"][0].copy(), raw["train"][1]),
             "test": raw["test"]}
  changed["train"][0][0, 0] += 1e-3  # one value of one feature
  run(str(tmp_path), changed)
  run(str(tmp_path), raw, l2_grid=(1e-3,))
  run(str(tmp_path), raw, seed=1)
  assert len(counted) == 4 and len(os.listdir(tmp_path)) == 4


def test_off_and_damaged_entries_probe(tmp_path, counted):
  raw = {"train": blobs(0), "test": blobs(1)}
  run("", raw)
  assert len(counted) == 1 and not os.listdir(tmp_path)
  run(str(tmp_path), raw)
  (entry,) = os.listdir(tmp_path)
  with open(tmp_path / entry, "w") as f:
    f.write("{not json")
  out = run(str(tmp_path), raw)
  assert len(counted) == 3
  with open(tmp_path / entry) as f:  # rewritten whole
    assert json.load(f)["test_accuracy"] == pytest.approx(
        out["r/test_accuracy"])


def test_the_trained_probe_never_uses_the_cache(tmp_path, counted):
  raw = {"train": blobs(0), "test": blobs(1)}
  for _ in range(2):
    (probe,) = evaluators.build({"p": {"type": "linear_probe",
                                       "max_iter": 20}},
                                context(str(tmp_path), raw))
    dict(probe.run(None))
  assert len(counted) == 2 and not os.listdir(tmp_path)


def test_auto_is_next_to_the_compilation_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  assert baseline_cache.cache_dir("auto") == os.path.join(
      str(tmp_path), "ssljax", "baselines")
  assert baseline_cache.cache_dir("") is None


def init_context(cache, raw, feats, seen, **config_fields):
  ctx = context(cache, raw)
  ctx.config = ml_collections.ConfigDict(
      {"seed": 0, "epochs": 1, "model": {"width": 8},
       "eval_inputs": {"baseline_cache": cache}, **config_fields})
  ctx.initial_state = lambda: "init"
  ctx.features = lambda state, split: seen.append(split) or feats[split]
  return ctx


def run_init(ctx):
  (probe,) = evaluators.build(
      {"b": {"type": "random_init_probe", "max_iter": 20}}, ctx)
  return dict(probe.run("trained"))


def test_random_init_probe_reuses_its_result_without_the_features(
    tmp_path, counted, monkeypatch):
  """Same config (but its length), code and pixels: the second run neither
  extracts features nor probes; any other config, pixels or a run of
  several processes extracts them again."""
  raw = {"train": blobs(10), "test": blobs(11)}
  feats = {"train": blobs(0), "test": blobs(1)}
  seen = []
  first = run_init(init_context(str(tmp_path), raw, feats, seen))
  assert seen == ["train", "test"] and len(counted) == 1
  assert len(os.listdir(tmp_path)) == 2  # the feature key and the setup key
  again = run_init(init_context(str(tmp_path), raw, feats, seen, epochs=4))
  assert seen == ["train", "test"] and len(counted) == 1
  assert again == pytest.approx(first, rel=1e-6)
  # Another model: features again (the feature key then finds the probe).
  run_init(init_context(str(tmp_path), raw, feats, seen,
                        model={"width": 16}))
  assert len(seen) == 4
  changed = {"train": (raw["train"][0].copy(), raw["train"][1]),
             "test": raw["test"]}
  changed["train"][0][3, 2] += 1.0
  run_init(init_context(str(tmp_path), changed, feats, seen))
  assert len(seen) == 6
  import jax  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(jax, "process_count", lambda: 2)
  run_init(init_context(str(tmp_path), raw, feats, seen))
  assert len(seen) == 8 and len(counted) == 1  # probes: by feature key
