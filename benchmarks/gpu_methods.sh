#!/usr/bin/env bash
# Several method runs sharing one lent GPU, in one call, each with the
# methods benchmark's evaluators (benchmarks/methods_config.py) and the
# cross-validated probe.
#
# Prepare once, on the development machine, in the repository root:
#
#     make gpu-wheels                       # the packages the GPU image lacks
#     mkdir -p .gpudata && cp /usr/share/datasets/fashion-mnist/*.gz .gpudata/
#     echo /.gpudata/ >> .git/info/exclude
#
# then, on the GPU machine from the repository root, carrying .whl and
# .gpudata:
#
#     SPECS=benchmarks/gpu_methods.txt WINDOW=330 bash benchmarks/gpu_methods.sh
#
# SPECS is a file of runs, one per line: a name (letters, digits, '_', '-'),
# a config of benchmarks/methods_config.py (``<configs file>[:variant]``),
# then any ``--config.KEY=VALUE`` overrides; '#' starts a comment. Every run
# starts at once, gets XLA_PYTHON_CLIENT_MEM_FRACTION = 0.9 / (number of
# runs) of the GPU's memory, and is stopped WINDOW seconds after the start
# (a run stopped before its evaluators has no results.json). SEED (default
# 0) and CV_FOLDS (default 5: ``evals.probe.cv_folds`` and
# ``evals.random_init_probe.cv_folds``) apply to every run.
#
# CHECK=1 only validates every run's config and overrides as ssljax.main
# would, and exits (status 1 if any fails): run it on the development
# machine before spending GPU time.
#
# Files under $OUT: methods_runs.tar.gz (each run's results.json,
# config.json, final_evals.json, metrics.jsonl and log.txt, as
# <name>/seed<SEED>/..., no checkpoints) and methods_summary.txt (one line
# per run: the probe, CV probe, 20-NN, random-init probe, raw-pixel probe,
# RankMe, online probe).

set -u
OUT=${OUT:-/tmp/gpu_methods_out}
SPECS=${SPECS:-benchmarks/gpu_methods.txt}
WINDOW=${WINDOW:-330}
SEED=${SEED:-0}
CV_FOLDS=${CV_FOLDS:-5}
WORK=${WORK:-/tmp/gpu_methods_work}
mkdir -p "$OUT" "$WORK"
start=$(date +%s)
echo "gpu_methods.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), window ${WINDOW} s"

if [ -z "${SSLJAX_GPU_SITE_READY:-}${CHECK:-}" ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
export PYTHONUNBUFFERED=1
[ -d .gpudata ] && export SSLJAX_FASHION_MNIST_DIR=$PWD/.gpudata

mapfile -t lines < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$SPECS")
count=${#lines[@]}
[ "$count" -gt 0 ] || { echo "no runs in $SPECS"; exit 1; }
fraction=$(python3 -c "print(f'{0.9 / $count:.3f}')")
export XLA_PYTHON_CLIENT_MEM_FRACTION=$fraction
echo "$count runs, memory fraction $fraction each"

if [ -n "${CHECK:-}" ]; then
  status=0
  for line in "${lines[@]}"; do
    python3 - "$line" <<'CHECK_EOF' || status=1
import importlib, shlex, sys
name, config, *overrides = shlex.split(sys.argv[1])
sys.argv = ["check", "--config", f"benchmarks/methods_config.py:{config}",
            *overrides]
from absl import flags  # after sys.argv: config_flags reads it
from ml_collections import config_flags
config_flags.DEFINE_config_file("config")
from ssljax import config_validation
try:
  flags.FLAGS(sys.argv)
  defaults = importlib.import_module(
      "benchmarks.methods_config").get_config(config)
  config_validation.validate(flags.FLAGS.config, defaults=defaults)
except Exception as e:  # pylint: disable=broad-except
  print(f"{name}: {type(e).__name__}: {e}")
  sys.exit(1)
c = flags.FLAGS.config
print(f"{name}: ok (epochs {c.epochs}, batch {c.batch_size})")
CHECK_EOF
  done
  exit $status
fi

names=()
pids=()
for line in "${lines[@]}"; do
  read -r -a words <<< "$line"
  name=${words[0]}
  config=${words[1]}
  overrides=("${words[@]:2}")
  dir=$WORK/$name/seed$SEED
  mkdir -p "$dir"
  echo "$name: $config ${overrides[*]}"
  timeout --signal=TERM "$WINDOW" python3 -m ssljax.main \
    --config "benchmarks/methods_config.py:$config" \
    --config.seed="$SEED" \
    --config.evals.probe.cv_folds="$CV_FOLDS" \
    --config.evals.random_init_probe.cv_folds="$CV_FOLDS" \
    "${overrides[@]}" --workdir "$dir" > "$dir/log.txt" 2>&1 &
  names+=("$name")
  pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  echo "${names[$i]}: exit $? after $(( $(date +%s) - start )) s"
done

python3 - "$WORK" "$SEED" "${names[@]}" > "$OUT/methods_summary.txt" <<'EOF'
import json, os, sys
work, seed, names = sys.argv[1], sys.argv[2], sys.argv[3:]
keys = [("probe", "probe/test_accuracy"), ("cv", "probe/cv_accuracy"),
        ("knn", "knn/test_accuracy"),
        ("rand", "random_init_probe/test_accuracy"),
        ("rand_cv", "random_init_probe/cv_accuracy"),
        ("pixels", "raw_pixel_probe/test_accuracy"),
        ("rankme", "rankme/rankme"), ("online", "online_probe/test_accuracy")]
print("run " + " ".join(k for k, _ in keys) + " steps train_s")
for name in names:
  path = os.path.join(work, name, f"seed{seed}", "results.json")
  try:
    with open(path) as f:
      r = json.load(f)
  except (OSError, ValueError):
    print(f"{name} no results.json")
    continue
  ev = r.get("evals", {})
  cells = [f"{ev[k]:.4f}" if isinstance(ev.get(k), (int, float)) else "-"
           for _, k in keys]
  print(name, *cells, r.get("steps"),
        f"{r.get('seconds', {}).get('train_steps', float('nan')):.1f}")
EOF
cat "$OUT/methods_summary.txt"
(cd "$WORK" && find . -path '*/checkpoints' -prune -o -path '*/tensorboard' \
   -prune -o -type f \( -name results.json -o -name config.json -o \
   -name final_evals.json -o -name metrics.jsonl -o -name log.txt \) -print \
   | tar -czf "$OUT/methods_runs.tar.gz" -T -)
echo "gpu_methods.sh done after $(( $(date +%s) - start )) s"
