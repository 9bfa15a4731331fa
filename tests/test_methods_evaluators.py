"""Every evaluator on every method: the methods × evaluators table.

Each method's smoke config trains two steps and then runs one entry of
every evaluator type of `ssljax.evaluators` on the trained state. Before
the method interface, `fine_tune` crashed on every method with a predictor
(the network's outputs were a positional tuple read by index) and no
results.json was written; now every cell must produce its metrics.
"""

import json
import os
import sys

import pytest

from ssljax import evaluators, methods, train

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # configs/
from configs import common  # noqa: E402  pylint: disable=wrong-import-position

# Cheap options for each evaluator type (the table's rows).
OPTIONS = {
    "linear_probe": dict(max_iter=5, l2_grid=(1e-4,)),
    "knn": dict(k=3),
    "raw_pixel_probe": dict(max_iter=5, l2_grid=(1e-4,)),
    "random_init_probe": dict(max_iter=5, l2_grid=(1e-4,)),
    "online_probe": dict(),
    "few_shot": dict(shots=(1,), draws=1, val_per_class=1),
    "fine_tune": dict(fractions=(0.1,), steps=2, batch_size=16,
                      eval_batch_size=64),
    "rankme": dict(),
    "lidar": dict(),
    "alpha_req": dict(),
    "spectrum": dict(),
    "theory": dict(),
    "sigreg": dict(num_slices=8),
}


# Evaluators that read several views of an image (LiDAR's per-image view
# clouds, the theory diagnostic's views graph): not defined for the
# one-view methods (I-JEPA, MAE), whose configs leave them out.
MULTI_VIEW = ("lidar", "theory")


def test_options_cover_every_evaluator_type():
  assert sorted(OPTIONS) == evaluators.available_types()


def _config(method):
  module = __import__(f"configs.{method}", fromlist=["get_config"])
  config = module.get_config("smoke")
  config.dataset.train_split = "train[:256]"
  config.dataset.test_split = "test[:128]"
  config.num_steps = 2
  config.checkpoint_every_steps = 2
  config.log_every_steps = 1
  config.eval_inputs.view_samples = 32
  for name in list(config.evals.keys()):
    del config.evals[name]
  for kind, options in OPTIONS.items():
    if config.views.num_global + config.views.num_local > 1 or (
        kind not in MULTI_VIEW):
      config.evals[kind] = common.evals_entry(kind, **options)
  return config


# In the default suite: a joint-embedding method (BatchNorm only) and a
# teacher-student one (EMA teacher, centre, DINO head), about 15 s each
# here; ``-m slow`` runs the others (BYOL's predictor and NNCLR's queue
# also run through the main job in tests/test_teacher_queue_centre.py).
DEFAULT = ("vicreg", "dino")


@pytest.mark.parametrize("method", [
    m if m in DEFAULT else pytest.param(m, marks=pytest.mark.slow)
    for m in methods.available()])
def test_every_evaluator_runs_on_every_method(method, tmp_path):
  results = train.train_and_evaluate(_config(method), str(tmp_path))
  names = {key.split("/")[0] for key in results["evals"]}
  expected = set(OPTIONS) - (set(MULTI_VIEW) if method in ("ijepa", "mae")
                             else set())
  assert names == expected, sorted(expected - names)
  on_disk = json.loads((tmp_path / "results.json").read_text())
  assert on_disk["evals"].keys() == results["evals"].keys()
