"""Use what you trained: load a run's encoder and embed images
(ssljax.pretrained, python -m ssljax.embed).

One smoke run of the main job (6 steps, checkpoints at steps 3 and 6) is
made once for the module; every test reads it or a copy of it.
"""

import os
import shutil
import subprocess
import json
import sys
import warnings

import numpy as np
import orbax.checkpoint as ocp
import pytest

from ssljax import data, embed, inputs, pretrained, train
from ssljax import train_state
from ssljax.data import synthetic
from ssljax.evaluators import context as eval_context

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from configs import vicreg as vicreg_config  # noqa: E402  pylint: disable=g-import-not-at-top

# A failed orbax restore leaves a tensorstore read future that is collected
# later and reported as "unraisable"; the failure itself is what we test.
pytestmark = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning")


def _config(data_dir):
  config = vicreg_config.get_config("smoke")
  config.dataset.data_dir = data_dir
  config.eval_inputs.baselines = False
  for name in list(config.evals.keys()):
    if name != "probe":
      del config.evals[name]
  return config


@pytest.fixture(scope="module")
def run(fmnist_data_dir, tmp_path_factory):
  """(workdir, config) of a finished smoke run of VICReg on Fashion-MNIST."""
  workdir = str(tmp_path_factory.mktemp("run"))
  config = _config(fmnist_data_dir)
  train.train_and_evaluate(config, workdir)
  assert pretrained.checkpoint_steps(workdir) == [3, 6]
  return workdir, config


def _evaluators_state(workdir, step):
  """The state of ``step`` restored whole (optimiser state, probe and
  all), as a TrainState: not through ssljax.pretrained."""
  with ocp.CheckpointManager(os.path.join(workdir, "checkpoints")) as m:
    raw = m.restore(step, args=ocp.args.StandardRestore())
  model = pretrained.load(workdir, step=step)
  return train_state.TrainState(
      step=raw["step"], params=raw["params"], opt_state=raw["opt_state"],
      method_state=raw["method_state"], probe=raw["probe"],
      method=model.method, tx=None)


def test_embed_equals_the_evaluators_features(run):
  workdir, config = run
  model = pretrained.load(workdir)
  assert model.step == 6 and model.view_size == 28 and model.channels == 1
  assert model.config.method == "vicreg"
  train_source, test_source = inputs.open_sources(config)
  ctx = eval_context.RunContext(
      config, train.make_mesh(), train_source=train_source,
      test_source=test_source, total_steps=6, initial_state=None,
      view_size=28, seed=config.seed, shown=False, announce=lambda _: None)
  expected, labels = ctx.features(_evaluators_state(workdir, 6), "test")
  got = model.embed(test_source.images, batch_size=100)
  assert got.dtype == np.float32 and got.shape == expected.shape
  assert len(got) == len(test_source) == 256
  scale = np.abs(expected).max()
  np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * scale)
  # The source path gives the same features and the labels.
  streamed, streamed_labels = model.embed_source(test_source, batch_size=64)
  np.testing.assert_allclose(streamed, expected, rtol=0, atol=1e-5 * scale)
  np.testing.assert_array_equal(streamed_labels, labels)


def test_step_loads_that_checkpoint(run):
  workdir, _ = run
  images = data.open_split("fashion_mnist_local", "test[:32]").images
  early = pretrained.load(workdir, step=3)
  late = pretrained.load(workdir)
  assert early.step == 3 and late.step == 6
  assert not np.allclose(early.embed(images), late.embed(images))
  with pytest.raises(pretrained.PretrainedLoadError,
                     match=r"has no checkpoint step 99; its steps are 3, 6"):
    pretrained.load(workdir, step=99)


def test_a_relative_workdir_loads(run, monkeypatch):
  """``load("runs/x")`` as well as an absolute path (orbax found no
  checkpoint metadata under a relative one: every step was refused)."""
  workdir, _ = run
  monkeypatch.chdir(os.path.dirname(workdir))
  model = pretrained.load(os.path.basename(workdir))
  assert model.step == 6


def test_embed_refuses_images_it_cannot_take(run):
  model = pretrained.load(run[0])
  with pytest.raises(ValueError, match="uint8"):
    model.embed(np.zeros((2, 28, 28, 1), np.float32))
  with pytest.raises(ValueError, match="3 channels; the encoder .* on 1"):
    model.embed(np.zeros((2, 28, 28, 3), np.uint8))


def test_a_folder_that_is_not_a_run_is_refused(tmp_path):
  with pytest.raises(pretrained.PretrainedLoadError) as err:
    pretrained.load(str(tmp_path))
  assert str(err.value) == (f"{str(tmp_path)!r} is not a run of ssljax: it "
                            "has no config.json (give the --workdir of "
                            "python -m ssljax.main)")


def test_a_run_without_checkpoint_is_refused(run, tmp_path):
  shutil.copy(os.path.join(run[0], "config.json"), tmp_path)
  with pytest.raises(pretrained.PretrainedLoadError) as err:
    pretrained.load(str(tmp_path))
  message = str(err.value)
  assert "\n" not in message
  assert message.startswith(f"run {str(tmp_path)!r} has no checkpoint")


def _damage(step_dir):
  """Truncates every array-data file of a step."""
  for root, _, names in os.walk(step_dir):
    for name in names:
      if os.sep + "d" + os.sep in os.path.join(root, name):
        os.truncate(os.path.join(root, name), 10)


def _snapshot(directory):
  return sorted((os.path.relpath(os.path.join(r, f), directory),
                 os.path.getsize(os.path.join(r, f)))
                for r, _, fs in os.walk(directory) for f in fs)


def test_a_damaged_newest_checkpoint_falls_back_with_a_warning(run, tmp_path):
  workdir = str(tmp_path / "run")
  shutil.copytree(run[0], workdir)
  _damage(os.path.join(workdir, "checkpoints", "6"))
  before = _snapshot(workdir)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model = pretrained.load(workdir)
  assert model.step == 3
  lines = [str(w.message) for w in caught
           if issubclass(w.category, RuntimeWarning)]
  assert len(lines) == 1 and "\n" not in lines[0], lines
  assert lines[0].startswith(f"checkpoint step 6 of {workdir} is damaged (")
  assert lines[0].endswith("; loading step 3 instead")
  assert _snapshot(workdir) == before  # nothing moved aside or written
  # Asked for by its step, the damaged one is refused.
  with pytest.raises(pretrained.PretrainedLoadError,
                     match=r"^checkpoint step 6 of run .* cannot be read \("):
    pretrained.load(workdir, step=6)
  # Every step damaged: one line listing each.
  _damage(os.path.join(workdir, "checkpoints", "3"))
  with pytest.raises(pretrained.PretrainedLoadError) as err:
    pretrained.load(workdir)
  message = str(err.value)
  assert "\n" not in message and "step 6: " in message
  assert "step 3: " in message


def test_cli_embeds_an_image_folder(run, tmp_path):
  folder = synthetic.write_image_folder(tmp_path / "images", num_train=8,
                                        num_test=12, num_classes=3, size=36)
  out = tmp_path / "feats.npz"
  cmd = [sys.executable, "-m", "ssljax.embed", f"--workdir={run[0]}",
         f"--data={folder}", f"--out={out}", "--batch_size=8"]
  result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                          timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  saved = np.load(out)
  model = pretrained.load(run[0])
  assert saved["features"].dtype == np.float32
  dim = model.embed(np.zeros((1, 28, 28, 1), np.uint8)).shape[1]
  assert saved["features"].shape == (12, dim)
  source = data.open_split("image_folder", "test", data_dir=str(folder),
                           channels=1)
  assert list(saved["names"]) == source.files
  assert saved["names"][0] == os.path.join("class_0", "000000.jpg")
  np.testing.assert_array_equal(saved["labels"], source.labels)
  expected, _ = model.embed_source(source, batch_size=8)
  np.testing.assert_allclose(saved["features"], expected, rtol=0,
                             atol=1e-5 * np.abs(expected).max())


def test_cli_unlabelled_folder_and_refusal(run, tmp_path):
  folder = synthetic.write_image_folder(tmp_path / "images", num_train=1,
                                        num_test=5, num_classes=1)
  flat = tmp_path / "flat"
  shutil.copytree(folder / "test" / "class_0", flat)
  out = tmp_path / "feats.npz"
  assert embed.main([f"--workdir={run[0]}", f"--data={flat}",
                     f"--out={out}"]) == 0
  saved = np.load(out)
  assert saved["features"].shape[0] == 5 and "labels" not in saved
  assert list(saved["names"]) == sorted(os.listdir(flat))
  result = subprocess.run(
      [sys.executable, "-m", "ssljax.embed", f"--workdir={tmp_path}",
       f"--data={flat}", f"--out={out}"], cwd=REPO, capture_output=True,
      text=True, timeout=300)
  assert result.returncode == embed.USAGE_ERROR
  assert result.stderr.strip().splitlines() == [
      f"error: {str(tmp_path)!r} is not a run of ssljax: it has no "
      "config.json (give the --workdir of python -m ssljax.main)"]


def test_checkpoint_steps_ignore_what_is_not_a_step(tmp_path):
  for name in ("3", "6.corrupt", "9.orbax-checkpoint-tmp-1", "12"):
    os.makedirs(tmp_path / "checkpoints" / name)
  assert pretrained.checkpoint_steps(str(tmp_path)) == [3, 12]


def test_a_run_whose_train_data_is_not_here_warns_of_the_view_size(
    run, tmp_path):
  workdir = str(tmp_path / "run")
  shutil.copytree(run[0], workdir)
  path = os.path.join(workdir, "config.json")
  config = json.load(open(path))
  config["dataset"]["name"] = "no_such_dataset"  # not on this machine
  with open(path, "w") as f:
    json.dump(config, f)
  with pytest.warns(RuntimeWarning, match="the view size is unknown"):
    model = pretrained.load(workdir)
  assert model.view_size == 0 and model.channels is None
  assert model.step == 6
  images = data.open_split("fashion_mnist_local", "test[:8]").images
  np.testing.assert_allclose(model.embed(images),
                             pretrained.load(run[0]).embed(images),
                             rtol=0, atol=1e-6)
