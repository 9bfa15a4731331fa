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

import re  # noqa: E402
import sys  # noqa: E402

from ssljax import extras  # noqa: E402

# Before the first third-party import: a missing 'train' extra is one line.
if __name__ == "__main__":
  extras.exit_if_missing("train", "python -m ssljax.main")

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to a config file (configs/*.py[:variant]).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for checkpoints, metrics and results.json.")
flags.mark_flags_as_required(["config", "workdir"])

_SUMMARY_KEYS = ("dataset", "method", "epochs", "steps", "wall_seconds")
USAGE_ERROR = 2  # exit status of a user error (bad flag, config or file)
RUN_ERROR = 1  # exit status of a run that failed (data, checkpoints, NaN)
EVAL_ERROR = 3  # training finished, but an evaluator failed (results.json)
# A preempted run exits with config.train.preempted_exit_status (0 default).


def _verbose(argv) -> bool:
  """``--verbosity=N`` / ``-v N`` with N >= 1 asks for tracebacks. Read from
  argv by hand: it must work when flag parsing itself fails."""
  for i, arg in enumerate(argv):
    m = re.fullmatch(r"--?(?:verbosity|v)(?:=(-?\d+))?", arg)
    if m:
      value = m.group(1) or (argv[i + 1] if i + 1 < len(argv) else "0")
      try:
        return int(value) >= 1
      except ValueError:
        return False
  return False


def _fail(message: str, status: int):
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(status)


def _config_arg(argv) -> str | None:
  for i, arg in enumerate(argv):
    if arg.startswith("--config="):
      return arg.split("=", 1)[1]
    if arg == "--config" and i + 1 < len(argv):
      return argv[i + 1]
  return None


def _flag_error_message(exc: BaseException, argv) -> str:
  """One line for an error raised while parsing the flags."""
  from ssljax import config_validation  # pylint: disable=import-outside-toplevel
  spec = _config_arg(argv)
  if spec is not None:
    path = spec.partition(":")[0]
    if not os.path.isfile(path):
      return f"config file {path!r} not found (--config={spec})"
  text = str(exc).strip()
  # An override of a field the config does not have.
  if isinstance(exc, (AttributeError, KeyError)) and spec is not None:
    unknown = [a.split("=", 1)[0][len("--config."):] for a in argv
               if a.startswith("--config.")]
    try:
      config = _load_config(spec)
    except Exception:  # pylint: disable=broad-except
      config = None
    if config is not None:
      known = set(config_validation.field_paths(config))
      from ssljax import config_rules  # pylint: disable=import-outside-toplevel
      for path in unknown:
        if path not in known and path in config_rules.RENAMED:
          return f"config.{path} was {config_rules.RENAMED[path]} ({spec})"
      for path in unknown:
        node_ok = path in known or any(k.startswith(path + ".") for k in known)
        if not node_ok:
          near = config_validation.suggest(path, config)
          hint = (f"; did you mean {' or '.join(repr('config.' + n) for n in near)}?"
                  if near else "")
          return f"unknown field 'config.{path}' in {spec}{hint}"
  m = re.search(r"flag --config\.([\w.]+)=(.*?): (.*)", text, re.S)
  if m:  # a value of the wrong type
    field, value, why = m.groups()
    why = why.splitlines()[0]
    return (f"config.{field}={value!r}: cannot be parsed ({why}); give a value "
            "of the field's type (see the config file)")
  root = exc  # the innermost cause, e.g. get_config's ValueError
  while root.__cause__ is not None or root.__context__ is not None:
    root = root.__cause__ or root.__context__
  lines = str(root).strip().splitlines()
  first = lines[0] if lines else ""
  if root is exc and isinstance(exc, flags.Error):
    return first
  return f"cannot load config {spec!r}: {type(root).__name__}: {first}"


def _load_config(spec: str):
  """The config of ``path[:variant]``, without overrides."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  path, _, variant = spec.partition(":")
  module_spec = importlib.util.spec_from_file_location("_ssljax_config", path)
  module = importlib.util.module_from_spec(module_spec)
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(path))))
  try:
    module_spec.loader.exec_module(module)
  finally:
    sys.path.pop(0)
  return module.get_config(variant or None)


def parse_flags(argv):
  """absl's flag parsing, with user errors as one line and exit status 2."""
  try:
    return flags.FLAGS(argv)
  except SystemExit:
    raise
  except Exception as e:  # pylint: disable=broad-except
    if _verbose(argv):
      raise
    _fail(_flag_error_message(e, argv), USAGE_ERROR)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  from ssljax import config_validation  # pylint: disable=import-outside-toplevel
  try:  # the config file is loaded here (lazily, by the flag's value)
    spec = _config_arg(sys.argv)
    if spec is not None and not os.path.isfile(spec.partition(":")[0]):
      raise FileNotFoundError(spec)
    config = _CONFIG.value
    config.keys()  # a lazily loaded config raises its loading error here
  except Exception as e:  # pylint: disable=broad-except
    if flags.FLAGS.verbosity >= 1:
      raise
    _fail(_flag_error_message(e, sys.argv), USAGE_ERROR)
  # The run's one check of every field (train_and_evaluate does not repeat
  # it), before any data is loaded, anything written or a multi-process run
  # joined.
  try:
    # The file's own values of fields the run does not read are no choice
    # of the user's (e.g. its crop range with --config.views.crop=none).
    defaults = _load_config(spec) if spec is not None else None
    config_validation.validate(config, defaults=defaults)
  except config_validation.ConfigError as e:
    if flags.FLAGS.verbosity >= 1:
      raise
    _fail(f"{e} (config {spec})", USAGE_ERROR)
  try:  # a workdir that cannot be written is a user error too
    os.makedirs(_WORKDIR.value, exist_ok=True)
    if not os.access(_WORKDIR.value, os.W_OK | os.X_OK):
      raise PermissionError(f"no write permission on {_WORKDIR.value!r}")
  except OSError as e:
    _fail(f"--workdir={_WORKDIR.value}: cannot be used ({e})", USAGE_ERROR)
  import jax  # pylint: disable=import-outside-toplevel
  try:
    train = extras.import_module("ssljax.train", "python -m ssljax.main")
  except extras.MissingExtraError as e:
    _fail(str(e), USAGE_ERROR)
  from ssljax import checkpoints, data, distributed, preemption  # pylint: disable=import-outside-toplevel
  # Only if something imported TensorFlow already (tfds builders that need
  # it hide the GPUs themselves, ssljax.data.splits): it stays off the GPUs.
  data.splits.hide_gpus_from_tensorflow()
  try:
    # Before anything creates JAX's backend: a multi-process run joins
    # here, and every process must run the same config and code.
    if distributed.initialize(config.distributed):
      distributed.check_same_run(config)
    results = train.train_and_evaluate(config, _WORKDIR.value,
                                       validated=True)
  except (extras.MissingExtraError,  # e.g. a tfds dataset, no tfds
          config_validation.ConfigError) as e:  # e.g. a batch > the split
    if flags.FLAGS.verbosity >= 1:
      raise
    _fail(f"{e} (config {spec})" if isinstance(
        e, config_validation.ConfigError) else str(e), USAGE_ERROR)
  except preemption.Preempted as e:
    if jax.process_index() == 0:
      print(str(e), file=sys.stderr, flush=True)
    sys.exit(e.exit_status)
  except jax.errors.JaxRuntimeError as e:
    if jax.process_count() == 1 or flags.FLAGS.verbosity >= 1:
      raise
    # A collective failed: another process of the run died. Leave at once:
    # jax's exit handler would wait for the dead process at a shutdown
    # barrier until the heartbeat timeout and then abort.
    print(f"error: process {jax.process_index()}: {distributed.lost_peer(e)}",
          file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(RUN_ERROR)  # pylint: disable=protected-access
  except (data.DatasetUnavailableError, checkpoints.CheckpointRestoreError,
          checkpoints.CheckpointSaveError, distributed.MismatchError,
          FloatingPointError, OSError) as e:
    if flags.FLAGS.verbosity >= 1:
      raise
    _fail(str(e).replace("\n", " "), RUN_ERROR)
  summary = {k: results[k] for k in _SUMMARY_KEYS if k in results}
  # Every evaluator's test accuracy (the scalars; spectra stay in the file).
  summary.update({k: v for k, v in results.get("evals", {}).items()
                  if k.endswith("test_accuracy")})
  print(json.dumps(summary, indent=2))
  if results.get("failed_evaluators"):
    _fail(f"evaluator(s) {', '.join(results['failed_evaluators'])} failed "
          "(error and message under their names in results.json); rerun the "
          "same command to run only the evaluators without a result",
          EVAL_ERROR)


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
