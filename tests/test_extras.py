"""What each part of ssljax imports, and the one-line missing-extra errors.

Properties: importing a core subpackage in a fresh interpreter imports no
TensorFlow, torch, tensorflow-datasets, grain, orbax, scikit-learn or
matplotlib (the core install has none of them); the main job and the PAL
service, started with one of their extra's modules missing, print one line
naming the extra and exit 2; the metric writer's TensorBoard files read
back with TensorBoard's own reader, and without ``tensorboard`` the run keeps
metrics.jsonl alone. The main job without TensorFlow is run by
tests/test_checkpoints.py (and the slow test here on an image folder).

``python tests/test_extras.py`` prints the third-party top-level modules
each core subpackage imports (one fresh interpreter each).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ssljax import extras, monitor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HIDE_DIR = os.path.join(REPO, "tests", "hide_modules")

# Core subpackages and, for the lazy ssljax.pal, names touched after import.
CORE = {
    "ssljax": [], "ssljax.losses": [], "ssljax.graphs": [],
    "ssljax.theory": [], "ssljax.metrics": [], "ssljax.models": [],
    "ssljax.pal": ["KernelPAL", "SSLOracle", "PairGraph",
                   "pal_minibatch_loss", "uniform_pair_weights"],
}
FORBIDDEN = {"tensorflow", "torch", "tensorflow_datasets", "grain", "optax",
             "orbax", "sklearn", "matplotlib", "clu"}

_PROBE = """
import json, sys
new = {}
for arg in sys.argv[1:]:
  name, *touch = arg.split(":")
  before = set(sys.modules)
  module = __import__(name, fromlist=["_"])
  for attr in touch:
    getattr(module, attr)
  tops = {m.partition(".")[0] for m in set(sys.modules) - before}
  new[name] = sorted(m for m in tops if not m.startswith("_") and m != "ssljax"
                     and m not in sys.stdlib_module_names)
print(json.dumps(new))
"""


def env_with_hidden(modules) -> dict:
  """os.environ with ``modules`` hidden (tests/hide_modules) and this repo
  first on PYTHONPATH."""
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
      [HIDE_DIR, REPO] + [p for p in [env.get("PYTHONPATH")] if p])
  env["SSLJAX_HIDE_MODULES"] = ",".join(modules)
  return env


def third_party_imports(packages) -> dict:
  """{subpackage: third-party top-level modules it adds}, the subpackages
  imported in this order in one fresh interpreter (so a list holds what the
  earlier ones did not import already)."""
  args = [":".join([name, *CORE[name]]) for name in packages]
  proc = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=REPO,
                        env=env_with_hidden([]), capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_core_subpackages_import_no_training_or_tensorflow_module():
  # One interpreter for all (what one imports, all import): the union of
  # the lists has none of the forbidden modules.
  imported = third_party_imports(list(CORE))
  union = set().union(*imported.values())
  assert not FORBIDDEN & union, imported
  assert imported["ssljax"] == []  # the package itself imports nothing
  assert {"jax", "numpy", "scipy"} <= set(imported["ssljax.losses"])
  assert {"diffrax", "flax"} <= union


def _run(module, args, hidden):
  return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO,
                        env=env_with_hidden(hidden), capture_output=True,
                        text=True, timeout=300)


@pytest.mark.parametrize("module, hidden, extra", [
    ("ssljax.main", "grain", "train"),
    ("ssljax.main", "ml_collections", "train"),
    ("ssljax.pal.serve", "starlette", "serve"),
])
def test_missing_extra_is_one_line_and_exit_status_2(tmp_path, module, hidden,
                                                     extra):
  args = ["--workdir", str(tmp_path)]
  if module == "ssljax.main":
    args += ["--config", os.path.join(REPO, "configs", "vicreg.py") + ":smoke"]
  proc = _run(module, args, [hidden])
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr.strip() == (
      f"error: python -m {module} needs the '{extra}' extra: pip install "
      f"'ssljax[{extra}]' (no module '{hidden}')")
  assert os.listdir(tmp_path) == []  # refused before anything was written


def test_extras_helpers():
  assert extras.extra_of("grain.python") == "train"
  assert extras.extra_of("tensorflow_datasets") == "tfds"
  assert extras.extra_of("numpy") is None
  extras.require("train", "x", ["numpy"])
  with pytest.raises(extras.MissingExtraError,
                     match=r"^x needs the 'tfds' extra: pip install "
                           r"'ssljax\[tfds\]' \(no module 'no_such_mod_xyz'\)$"):
    extras.require("tfds", "x", ["no_such_mod_xyz"])
  with pytest.raises(ModuleNotFoundError) as info:  # not an extra's module
    extras.import_module("no_such_mod_xyz", "x")
  assert not isinstance(info.value, extras.MissingExtraError)


def test_tfds_dataset_and_pal_loop_without_their_modules_are_one_line():
  code = ("import sys\nfrom ssljax import data, extras, pal\n"
          "for f in (lambda: data.open_split('mnist', 'train'),\n"
          "          lambda: pal.run_pal):\n"
          "  try:\n    f()\n"
          "  except extras.MissingExtraError as e:\n    print(e)\n"
          "print(sorted(m for m in sys.modules if m.startswith('tensorflow')))")
  proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, text=True,
                        capture_output=True, timeout=300,
                        env=env_with_hidden(["tensorflow",
                                             "tensorflow_datasets", "optax"]))
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.splitlines() == [
      "dataset 'mnist' needs the 'tfds' extra: pip install 'ssljax[tfds]' "
      "(no module 'tensorflow_datasets')",
      "ssljax.pal.run_pal needs the 'train' extra: pip install "
      "'ssljax[train]' (no module 'optax')", "[]"]


# ------------------------------------------------------------- TensorBoard --
_TENSORBOARD_ROUND_TRIP = """
import sys
import numpy as np
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.util import tensor_util
from ssljax import monitor
writer = monitor.MetricWriter(sys.argv[1], 0)
for step in (1, 2, 3):
  writer.write(step, {"loss": 10.0 / step})
writer.write(3, {"spectrum/eigenvalues": np.array([4.0, 2.0, 1.0, 0.5])})
writer.close()
acc = ea.EventAccumulator(sys.argv[1] + "/tensorboard",
                          size_guidance={ea.TENSORS: 0})
acc.Reload()
print(sorted(acc.Tags()["tensors"]))
print([(e.step, round(float(tensor_util.make_ndarray(e.tensor_proto)), 4))
       for e in acc.Tensors("loss")])
print(acc.SummaryMetadata("loss").plugin_data.plugin_name,
      acc.SummaryMetadata("spectrum/eigenvalues").plugin_data.plugin_name)
(event,) = acc.Tensors("spectrum/eigenvalues")
buckets = tensor_util.make_ndarray(event.tensor_proto)  # (left, right, count)
print(event.step, buckets.shape, buckets[:, 2].sum(), buckets[0, 0],
      buckets[-1, 1])
print("tensorflow" in sys.modules)
"""


def test_tensorboard_files_read_back_without_tensorflow(tmp_path):
  """Written and read back by TensorBoard's own reader, TensorFlow hidden."""
  proc = subprocess.run(
      [sys.executable, "-c", _TENSORBOARD_ROUND_TRIP, str(tmp_path)],
      cwd=REPO, text=True, capture_output=True, timeout=300,
      env=env_with_hidden(["tensorflow"]))
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.splitlines() == [
      "['loss', 'spectrum/eigenvalues']",
      "[(1, 10.0), (2, 5.0), (3, 3.3333)]",
      "scalars histograms",
      "3 (30, 3) 4.0 0.5 4.0",
      "False"]


def test_without_tensorboard_metrics_jsonl_alone(tmp_path):
  code = ("import sys\nfrom ssljax import monitor\n"
          f"w = monitor.MetricWriter({str(tmp_path)!r}, 0)\n"
          "w.write(1, {'loss': 2.0}); w.close()\n"
          "print(w.tensorboard, 'tensorflow' in sys.modules)")
  proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, text=True,
                        capture_output=True, timeout=300,
                        env=env_with_hidden(["tensorboard", "tensorflow"]))
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.split() == ["None", "False"]
  assert "no TensorBoard files" in proc.stderr
  assert os.listdir(tmp_path) == ["metrics.jsonl"]
  assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1, "loss": 2.0}\n'


if __name__ == "__main__":
  for package in CORE:  # a fresh interpreter each: the whole list
    print(f"{package}: {' '.join(third_party_imports([package])[package])}")


# ------------------------------------------------------ main job, no TF (slow) --
def _main_without(tmp_path, hidden, *overrides, config="vicreg.py:smoke"):
  env = env_with_hidden(hidden)
  env["SSLJAX_MODULES_AT_EXIT"] = str(tmp_path / "modules.txt")
  proc = subprocess.run(
      [sys.executable, "-m", "ssljax.main", "--config",
       os.path.join(REPO, "configs", config), f"--workdir={tmp_path / 'run'}",
       "--config.eval_inputs.baselines=False", *overrides],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads((tmp_path / "run" / "results.json").read_text())
  assert results["steps"] > 0
  assert any(k.endswith("test_accuracy") for k in results["evals"]), results
  return set((tmp_path / "modules.txt").read_text().split())


@pytest.mark.slow
def test_main_job_streams_array_record_without_tensorflow(tmp_path,
                                                          monkeypatch):
  """A tfds ArrayRecord split (built here, with TensorFlow) is streamed by
  the main job with TensorFlow hidden: tfds alone reads it."""
  from test_data import _synthetic, _write_idx  # pylint: disable=import-outside-toplevel
  from ssljax.data import fashion_mnist, fashion_mnist_tfds  # pylint: disable=import-outside-toplevel
  idx = tmp_path / "idx"
  idx.mkdir()
  for split, num, offset in (("train", 600, 0), ("test", 300, 1000)):
    images, labels = _synthetic(num, offset)
    names = fashion_mnist.FASHION_MNIST_FILES[split]
    _write_idx(idx / names[0], images)
    _write_idx(idx / names[1], labels)
  monkeypatch.setenv(fashion_mnist.FASHION_MNIST_ENV_VAR, str(idx))
  fashion_mnist_tfds.FashionMnistLocal(
      data_dir=str(tmp_path / "tfds"),
      file_format="array_record").download_and_prepare()
  modules = _main_without(tmp_path, ["tensorflow", "clu"],
                          f"--config.dataset.data_dir={tmp_path / 'tfds'}",
                          "--config.dataset.in_memory=no")
  assert "tensorflow_datasets" in modules and "array_record" in modules
  assert not {"tensorflow", "clu"} & modules


@pytest.mark.slow
def test_main_job_on_an_image_folder_without_tensorflow(tmp_path):
  modules = _main_without(tmp_path, ["tensorflow", "tensorflow_datasets", "clu"],
                          config="cifar_resnet18.py:vicreg,cifar10,smoke")
  assert "PIL" in modules
  assert not {"tensorflow", "tensorflow_datasets", "clu"} & modules
