"""Entry point: python -m ssljax.main --config configs/vicreg.py --workdir DIR.

With ``--config.distributed.enabled=True`` every process of a multi-process
run calls ``jax.distributed.initialize`` first (README "Multi-host").
``--config.x=y`` overrides a field; the config is locked, so an unknown field
is an error. Library INFO logs (orbax, tfds) are hidden unless ``-v 0`` or
``--verbosity`` is given, so the progress bar stays readable.
"""

import json
import os

# Before TF loads: hide its C++ INFO/WARNING spam (e.g. a harmless cost-model
# warning for CropAndResize on every pipeline build). Errors still print.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Before NumPy/SciPy load OpenBLAS: one BLAS thread. jaxlib runs LAPACK
# (W-MSE's Cholesky and triangular solves) through SciPy's OpenBLAS inside
# XLA's own thread pool, and OpenBLAS's extra threads only fight XLA's for
# the cores: W-MSE loss+grad at (512, 128) took 154 ms with OpenBLAS's
# default threads and 21 ms with one on the 2-core machine. Probe and k-NN
# run in JAX, so nothing else here uses BLAS threads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402
import tensorflow as tf  # noqa: E402

from ssljax import distributed, train  # noqa: E402

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
  # Before anything creates JAX's backend: a multi-process run joins here.
  distributed.initialize(_CONFIG.value.distributed)
  results = train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  summary = {k: results[k] for k in _SUMMARY_KEYS if k in results}
  print(json.dumps(summary, indent=2))


if __name__ == "__main__":
  app.run(main)
