"""Configuration errors: one line, exit status 2, before any data is loaded.

``ssljax.config_validation.validate`` is checked on every shipped config and
variant (all valid) and on bad values of each kind of rule; the entry point
is run on the bad command lines of the issue and others, each of which must
print exactly one line on stderr, exit with status 2 and write nothing.
"""

import os
import subprocess
import sys

import pytest

from ssljax import config_validation

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Every runnable training config (common.py is the shared part of the
# others; pal_human configures the annotation service, checked in
# tests/test_configs.py).
CONFIGS = sorted(f[:-3] for f in os.listdir(os.path.join(REPO, "configs"))
                 if f.endswith(".py") and not f.startswith("_")
                 and f not in ("common.py", "pal_human.py"))


def _config(name="vicreg", variant=None):
  module = __import__(f"configs.{name}", fromlist=["get_config"])
  return module.get_config(variant)


@pytest.mark.parametrize("name", CONFIGS)
def test_every_shipped_config_and_variant_is_valid(name):
  module = __import__(f"configs.{name}", fromlist=["get_config"])
  for variant in getattr(module, "VARIANTS", (None,)):
    config_validation.validate(module.get_config(variant))


@pytest.mark.parametrize("path,value,allowed", [
    ("epochs", -1, "> 0"),
    ("num_steps", -5, "-1"),
    ("num_steps", 0, "-1"),
    ("batch_size", 1, ">= 2"),
    ("seed", -3, ">= 0"),
    ("optim.name", "rmsprop", "'adamw', 'lars', 'sgd'"),
    ("optim.learning_rate", 0.0, "> 0"),
    ("optim.lars.momentum", 1.0, "[0.0, 1.0)"),
    ("views.crop_scale", (0.8, 0.2), "a <= b"),
    ("views.jitter_prob", 1.5, "[0.0, 1.0]"),
    ("views.crop", "center", "'random_resized'"),
    ("views.flip_prob", 1.5, "[0.0, 1.0]"),
    ("views.hue", 0.7, "[0.0, 0.5]"),
    ("views.blur_prob", (1.0, 1.5), "one such value per view"),
    ("views.blur_sigma", (2.0, 0.1), "a <= b"),
    ("views.solarize_prob", (0.0, 0.2, 0.3), "has 3 entries"),
    ("views.num_local", 2, "needs views.local_size > 0"),
    ("dataset.in_memory", "maybe", "'auto'"),
    ("dataset.channels", 4, "one of 1, 3"),
    ("dataset.workers", -2, "or -1 (auto"),
    ("model.dtype", "float16", "'bfloat16'"),
    ("model.projector", (512, 0), "layer widths > 0"),
    ("model.encoder", "vit", "'cnn'"),
    ("eval_inputs.view_samples", 1, ">= 2"),
    ("byol:model.predictor", (16, 0), "widths > 0"),
    ("byol:model.predictor", (), "non-empty"),
    ("dino:model.dino_head.num_layers", 0, ">= 1"),
    ("byol:teacher.momentum", 1.5, "[0.0, 1.0]"),
    ("mocov3:teacher.final_momentum", -0.1, "[0.0, 1.0]"),
    ("dino:loss.center_momentum", 2.0, "[0.0, 1.0]"),
    ("graph.kind", "knn", "'views'"),
    ("method", "swaw", "'vicreg'"),
    ("loss.var_weight", -1.0, ">= 0"),
])
def test_bad_value_named_with_what_is_allowed(path, value, allowed):
  name, _, path = path.rpartition(":")
  config = _config(name or "vicreg")
  *parents, leaf = path.split(".")
  node = config
  for p in parents:
    node = node[p]
  with node.ignore_type():
    node[leaf] = value
  with pytest.raises(config_validation.ConfigError) as err:
    config_validation.validate(config)
  message = str(err.value)
  assert "\n" not in message
  assert f"config.{path}={value!r}" in message and allowed in message, message


def test_every_problem_is_reported_in_one_line():
  config = _config()
  config.epochs, config.num_steps = -1, -5
  with pytest.raises(config_validation.ConfigError) as err:
    config_validation.validate(config)
  assert "config.epochs=-1" in str(err.value)
  assert "config.num_steps=-5" in str(err.value)


def test_loss_hyperparameters_are_checked_against_the_loss_function():
  config = _config("simclr")
  config.loss.temperature = -0.5
  with pytest.raises(config_validation.ConfigError, match="temperature=-0.5"):
    config_validation.validate(config)
  config = _config("simclr")
  with config.loss.unlocked():
    config.loss.temprature = 0.1
  with pytest.raises(config_validation.ConfigError,
                     match="did you mean 'config.loss.temperature'"):
    config_validation.validate(config)


def test_a_queue_smaller_than_the_batch_is_an_error():
  config = _config("nnclr")
  config.loss.queue_size = config.batch_size - 1
  with pytest.raises(config_validation.ConfigError,
                     match="config.loss.queue_size=.*must be >= config.batch_size"):
    config_validation.validate(config)


def test_suggest_finds_abbreviations_and_typos():
  config = _config()
  assert config_validation.suggest("optim.lr", config)[0] == "optim.learning_rate"
  # The words' initials first: "lr" is learning_rate, not layerwise_decay.
  assert config_validation.suggest("optim.wd", config)[0] == "optim.weight_decay"
  assert config_validation.suggest("optim.pelm", config)[0] == (
      "optim.patch_embed_lr_mult")
  assert config_validation.suggest("optim.learnig_rate", config)[0] == (
      "optim.learning_rate")
  assert config_validation.suggest("epoch", config)[0] == "epochs"
  assert config_validation.suggest("zzz.qqq", config) == []


def _main(*args, cwd=REPO):
  return subprocess.run([sys.executable, "-m", "ssljax.main", *args], cwd=cwd,
                        capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args,expected", [
    (["--config.foo=1"], "unknown field 'config.foo'"),
    (["--config.optim.lr=0.1"],
     "did you mean 'config.optim.learning_rate'"),
    (["--config.epochs=-1", "--config.num_steps=-5"],
     "config.epochs=-1: must be a number > 0"),
    (["--config.epochs=abc"], "config.epochs='abc': cannot be parsed"),
    (["--config.optim.name=rmsprop"], "config.optim.name='rmsprop'"),
    (["--config.views.crop_scale=(0.5,0.2)"], "config.views.crop_scale"),
    (["--config.views.num_views=3"],
     "config.views.num_views was renamed config.views.num_global"),
    (["--config.online_probe.enabled=False"],
     "replaced by the presence of the entry config.evals.online_probe"),
])
def test_entry_point_prints_one_line_and_exits_2(tmp_path, args, expected):
  workdir = tmp_path / "run"
  proc = _main("--config", os.path.join(REPO, "configs", "vicreg.py"),
               f"--workdir={workdir}", *args)
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
  assert expected in lines[0]
  assert not workdir.exists()  # nothing written, nothing loaded


def test_missing_config_file_and_bad_variant(tmp_path):
  missing = _main("--config", str(tmp_path / "nope.py"), f"--workdir={tmp_path}")
  assert missing.returncode == 2
  assert missing.stderr.strip().splitlines() == [
      f"error: config file '{tmp_path / 'nope.py'}' not found "
      f"(--config={tmp_path / 'nope.py'})"]
  variant = _main("--config", os.path.join(REPO, "configs", "vicreg.py") + ":smok",
                  f"--workdir={tmp_path / 'run'}")
  assert variant.returncode == 2
  line, = variant.stderr.strip().splitlines()
  assert "unknown variant 'smok'" in line and "'smoke'" in line


def test_verbosity_keeps_the_traceback(tmp_path):
  proc = _main("--config", os.path.join(REPO, "configs", "vicreg.py"),
               f"--workdir={tmp_path / 'run'}", "--config.epochs=-1",
               "--verbosity=1")
  assert proc.returncode != 0 and "Traceback" in proc.stderr
  assert "ConfigError" in proc.stderr


def test_unusable_workdir_is_one_line(tmp_path):
  blocker = tmp_path / "a_file"
  blocker.write_text("")
  proc = _main("--config", os.path.join(REPO, "configs", "vicreg.py") + ":smoke",
               f"--workdir={blocker / 'run'}")
  assert proc.returncode == 2
  line, = proc.stderr.strip().splitlines()
  assert line.startswith(f"error: --workdir={blocker / 'run'}: cannot be used")


@pytest.mark.parametrize("kind", ["lidar", "theory"])
def test_view_comparing_evaluator_refused_on_one_view_config(kind):
  """LiDAR and the theory diagnostics compare the views of one image: on a
  one-view config (MAE) they are refused before any data loads, in one line
  naming the entry, instead of failing after training."""
  config = _config("mae")
  with config.unlocked():
    config.evals[kind] = {"type": kind}
  with pytest.raises(config_validation.ConfigError) as info:
    config_validation.validate(config)
  message = str(info.value)
  assert f"config.evals.{kind}:" in message and "num_global >= 2" in message
  assert "\n" not in message
  config.evals[kind] = None
  config_validation.validate(config)  # the shipped config itself is fine


def test_unread_field_may_keep_the_config_files_own_value():
  """With the file's config as ``defaults``, a field the path does not read
  may keep the file's value (the main job's crop range under crop='none');
  a value the user set is still refused, naming both accepted values."""
  config, shipped = _config(), _config()
  assert tuple(shipped.views.crop_scale) != (0.2, 1.0)  # not common's
  config.views.crop = "none"
  with pytest.raises(config_validation.ConfigError, match="crop_scale"):
    config_validation.validate(config)  # no defaults: common's value only
  config_validation.validate(config, defaults=shipped)
  config.views.crop_scale = (0.5, 1.0)
  with pytest.raises(config_validation.ConfigError) as info:
    config_validation.validate(config, defaults=shipped)
  own = tuple(shipped.views.crop_scale)
  assert f"leave it at (0.2, 1.0) (or the config file's {own!r})" in str(
      info.value)


def test_entry_point_judges_unread_fields_against_the_config_file(tmp_path):
  """``--config.views.crop=none`` on the main job refuses only the field the
  user set (pad), not the file's own crop range, which the run ignores."""
  workdir = tmp_path / "run"
  proc = _main("--config", os.path.join(REPO, "configs", "vicreg.py"),
               f"--workdir={workdir}", "--config.views.crop=none",
               "--config.views.pad=8")
  line, = proc.stderr.strip().splitlines()
  assert proc.returncode == 2
  assert "config.views.pad=8 is not read" in line
  assert "crop_scale" not in line
  assert not workdir.exists()


# Runs ssljax.main with config_validation.validate counted and
# train.train_and_evaluate replaced by a stub that records its keywords.
_COUNTING_MAIN = """
import runpy, sys
from ssljax import config_validation, train
calls, runs = [], []
real = config_validation.validate
def counted(*args, **kwargs):
  calls.append(1)
  return real(*args, **kwargs)
config_validation.validate = counted
train.train_and_evaluate = lambda config, workdir, **kw: runs.append(kw) or {}
try:
  runpy.run_module("ssljax.main", run_name="__main__")
finally:
  print("validate", len(calls), "runs", runs)
"""


def test_the_entry_point_validates_once_and_tells_the_run(tmp_path):
  """main checks the config at its entry and hands the run validated=True,
  so train_and_evaluate does not check it again."""
  proc = subprocess.run(
      [sys.executable, "-c", _COUNTING_MAIN, "--config",
       os.path.join(REPO, "configs", "vicreg.py") + ":smoke",
       f"--workdir={tmp_path / 'run'}"],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "validate 1 runs [{'validated': True}]" in proc.stdout


def test_train_and_evaluate_validates_unless_told(tmp_path, monkeypatch):
  """Called from Python, the run checks its config first (before any data
  is opened); validated=True skips the check."""
  from ssljax import data, train  # pylint: disable=import-outside-toplevel
  checked = []
  monkeypatch.setattr(config_validation, "validate",
                      lambda config, defaults=None: checked.append(config))
  config = _config("vicreg", "smoke")
  config.dataset.name, config.dataset.data_dir = "mnist", str(tmp_path / "no")
  for validated, expected in ((False, 1), (True, 1)):
    with pytest.raises(data.DatasetUnavailableError):
      train.train_and_evaluate(config, str(tmp_path / "run"),
                               validated=validated)
    assert len(checked) == expected


# ------------------------------------- refused before the data (issue 44) --
@pytest.mark.parametrize("overrides,expected", [
    ({"views.local_size": 3},
     "config.views.local_size=3: must be a multiple of the ViT's patch "
     "size 7"),
    ({"views.size": 30}, "config.views.size=30: must be a multiple"),
    ({"model.encoder_kwargs.patch_size": 4, "views.local_size": 14},
     "config.views.local_size=14: must be a multiple of the ViT's patch "
     "size 4"),
])
def test_view_size_not_a_multiple_of_the_vit_patch_is_refused(overrides,
                                                              expected):
  """A ViT's view sides must be multiples of its patch: refused at
  validation, not by the model's ValueError after the data is loaded."""
  config = _config("lejepa")
  with config.unlocked():
    for path, value in overrides.items():
      node = config
      *parents, leaf = path.split(".")
      for part in parents:
        node = node[part]
      node[leaf] = value
  with pytest.raises(config_validation.ConfigError) as info:
    config_validation.validate(config)
  assert expected in str(info.value) and "\n" not in str(info.value)
  assert "; " not in str(info.value)  # one problem, the bad side only


def test_local_size_is_not_checked_without_local_views():
  """A CNN, or a ViT without local views, has no patch constraint on the
  local side."""
  config = _config("lejepa", "cnn")
  with config.unlocked():
    config.views.local_size = 3
  config_validation.validate(config)
  config = _config("lejepa")
  with config.unlocked():
    config.views.num_local = 0
    config.views.local_size = 3
  with pytest.raises(config_validation.ConfigError, match="local_size"):
    config_validation.validate(config)  # read by nothing: refused as unread


def test_lejepa_patch_mismatch_on_the_command_line(tmp_path):
  """Issue 44's command: one line, exit 2, nothing written."""
  workdir = tmp_path / "run"
  proc = _main("--config", os.path.join(REPO, "configs", "lejepa.py"),
               "--config.views.local_size=3", f"--workdir={workdir}")
  assert proc.returncode == 2, proc.stderr[-2000:]
  line, = proc.stderr.strip().splitlines()
  assert line == ("error: config.views.local_size=3: must be a multiple of "
                  "the ViT's patch size 7 (model.encoder='vit_tiny16'), "
                  "e.g. 7 (config configs/lejepa.py)".replace(
                      "configs/lejepa.py",
                      os.path.join(REPO, "configs", "lejepa.py")))
  assert not workdir.exists()


def test_batch_larger_than_an_image_folder_is_one_line(tmp_path):
  """40 images and batch_size 64: one line naming config.batch_size and the
  split's size, exit 2, before any JAX work (no traceback from
  data.steps_per_epoch)."""
  from PIL import Image  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  for i in range(40):
    folder = tmp_path / "images" / "train" / f"class_{i % 2}"
    folder.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, (8, 8, 3), np.uint8)).save(
        folder / f"{i}.png")
  proc = _main("--config", os.path.join(REPO, "configs", "vicreg.py"),
               "--config.dataset.name=image_folder",
               f"--config.dataset.data_dir={tmp_path / 'images'}",
               "--config.views.size=8", "--config.batch_size=64",
               f"--workdir={tmp_path / 'run'}")
  assert proc.returncode == 2, proc.stderr[-2000:]
  line, = proc.stderr.strip().splitlines()
  assert line.startswith(
      "error: config.batch_size=64: larger than the 40 images of split "
      "'train' of dataset 'image_folder'"), line
  assert "--config.batch_size <= 40" in line
  assert not (tmp_path / "run" / "config.json").exists()


def test_batch_larger_than_an_array_split_is_refused():
  """The same check on any source (here a sliced in-memory split), and a
  batch the devices cannot share."""
  from ssljax import train  # pylint: disable=import-outside-toplevel
  config = _config("vicreg")
  with config.unlocked():
    config.batch_size = 64
    config.dataset.train_split = "train[:40]"
  with pytest.raises(config_validation.ConfigError,
                     match=r"config.batch_size=64: larger than the 40 images "
                           r"of split 'train\[:40\]'"):
    train._check_batch_size(config, 40, 1)  # pylint: disable=protected-access
  with pytest.raises(config_validation.ConfigError, match="divisible by the 3"):
    train._check_batch_size(config, 100, 3)  # pylint: disable=protected-access
  train._check_batch_size(config, 64, 2)  # pylint: disable=protected-access


def test_online_probe_features_checked_before_the_data():
  config = _config("vicreg")
  with config.unlocked():
    config.evals.online_probe.features = "train_forward"
  config_validation.validate(config)
  with config.unlocked():
    config.evals.online_probe.features = "clean"
  with pytest.raises(config_validation.ConfigError,
                     match=r"config.evals.online_probe.features='clean': "
                           r"must be one of 'inference', 'train_forward'"):
    config_validation.validate(config)
  with config.unlocked():
    config.evals.online_probe.features = "inference"
    config.evals.online_probe.views = "centre"
  with pytest.raises(config_validation.ConfigError,
                     match=r"config.evals.online_probe.views='centre': "
                           r"must be one of 'clean', 'augmented'"):
    config_validation.validate(config)
  with config.unlocked():
    config.evals.online_probe.views = "augmented"
    config.evals.online_probe.ema_decay = 1.0
  with pytest.raises(config_validation.ConfigError,
                     match=r"ema_decay=1.0: must be a number in \[0, 1\)"):
    config_validation.validate(config)


def test_where_set_keeps_only_the_rules_of_fields_the_config_sets():
  from ml_collections import config_dict  # pylint: disable=import-outside-toplevel
  from ssljax import config_rules  # pylint: disable=import-outside-toplevel
  c = config_dict.ConfigDict({"optim": {"b2": 0.95, "mask": None}})
  rules = {"optim.b2": config_rules.real(0.0, 1.0),
           "optim.mask": config_rules.one_of("kernels", "all"),
           "optim.absent": config_rules.boolean, "model.absent": None}
  assert set(config_rules.where_set(c, rules)) == {"optim.b2", "optim.mask"}
