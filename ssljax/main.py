"""Entry point: python -m ssljax.main --config configs/vicreg.py --workdir DIR.

``--config.x=y`` overrides a field; the config is locked, so an unknown field
is an error. Library INFO logs (orbax, tfds) are hidden unless ``-v 0`` or
``--verbosity`` is given, so the progress bar stays readable.
"""

import json
import os

# Before TF loads: hide its C++ INFO/WARNING spam (e.g. a harmless cost-model
# warning for CropAndResize on every pipeline build). Errors still print.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402
import tensorflow as tf  # noqa: E402

from ssljax import train  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to a config file (configs/*.py[:variant]).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for checkpoints, metrics and results.json.")
flags.mark_flags_as_required(["config", "workdir"])

_SUMMARY_KEYS = ("dataset", "method", "epochs", "steps", "wall_seconds",
                 "probe_test_accuracy", "knn_test_accuracy",
                 "raw_pixel_probe_test_accuracy", "random_init_probe_test_accuracy")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  # TF only feeds data: keep it off accelerators that JAX needs.
  tf.config.set_visible_devices([], "GPU")
  results = train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  summary = {k: results[k] for k in _SUMMARY_KEYS if k in results}
  print(json.dumps(summary, indent=2))


if __name__ == "__main__":
  app.run(main)
