"""Entry point: python -m ssljax.main --config configs/vicreg.py --workdir DIR.

``--config.x=y`` overrides a field; the config is locked, so an unknown field
is an error.
"""

from absl import app, flags, logging
from ml_collections import config_flags
import tensorflow as tf

from ssljax import train

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to a config file (configs/*.py[:variant]).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for checkpoints, metrics and results.json.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  # TF only feeds data: keep it off accelerators that JAX needs.
  tf.config.set_visible_devices([], "GPU")
  logging.info("config:\n%s", _CONFIG.value)
  results = train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  logging.info("results: %s", results)


if __name__ == "__main__":
  app.run(main)
