#!/usr/bin/env bash
# One lent GPU, one call: every measurement of the same-work comparison.
#
# Prepare once, on the development machine, in the repository root:
#
#     make gpu-wheels        # grain, array-record, ml-collections, dm-pix,
#                            # portpicker (grain imports it) into .whl/
#
# then run this script on the GPU machine from the repository root, carrying
# .whl (the GPU machine reaches no package registry; its own python3 has jax,
# jaxlib, flax, optax, torch and torchvision), with a ~540 s limit:
#
#     bash benchmarks/gpu_session.sh          # writes everything under $OUT
#
# What it runs (benchmarks/accelerator.py --parts fair, one process per row
# group): the measured bf16 matrix peak (8192^3 in jax); ssljax's ResNet-50
# two-view VICReg step on views given ready and on views made on the GPU,
# then its PyTorch twin under torch.compile, both view modes; ssljax's
# ViT-B/16 MAE step in both view modes, then its PyTorch twin (torchvision's
# ViT-B/16 blocks, MAE decoder and loss, AdamW) under torch.compile; then
# the eager PyTorch rows of both models (last, so that a stop at BUDGET
# loses them first). A profile of --profile_steps steps of every ssljax and
# torch.compile row (eager rows untraced: time). Each row's FLOPs per image
# and MFU are in the table. The files are rewritten after every row, so
# what finished before BUDGET seconds survives a stop. Expected: about 8
# minutes in all, most of it compilation (torch.compile took 98 s + 25 s
# for ResNet-50 on an H200; ssljax 29 s + 25 s).
#
# Environment: OUT (default /tmp/gpu_session_out), BUDGET (seconds for the
# benchmark itself, default 450), STEPS / REPEATS / WARMUP (default 10 / 2 /
# 3), MODELS (default r50_in1k,vitb16_mae), COMMIT (the commit to print;
# default git rev-parse), SSLJAX_GPU_SITE_READY (set: the wheels are already
# installed and on PYTHONPATH, as benchmarks/gpu_methods.sh also reads).
#
# Files under $OUT (at most 8, flat): accelerator.md (the table),
# accelerator.json (every number), profile_summary.txt (top ops of every
# row), gpu_session.log (all output), env.txt (GPU, driver, versions),
# profiles.tar.gz (the traces; the jax .xplane.pb files are left out when
# the archive would pass 15 MiB).

set -u
OUT=${OUT:-/tmp/gpu_session_out}
BUDGET=${BUDGET:-450}
STEPS=${STEPS:-10}
REPEATS=${REPEATS:-2}
WARMUP=${WARMUP:-3}
MODELS=${MODELS:-r50_in1k,vitb16_mae}
WORK=/tmp/gpu_session_work
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/gpu_session.log") 2>&1
start=$(date +%s)
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
echo "gpu_session.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $COMMIT"

if [ -n "${SSLJAX_GPU_SITE_READY:-}" ]; then
  :  # installed by the caller, on PYTHONPATH
elif ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
else
  echo "no .whl/ (make gpu-wheels, and carry .whl): imports may fail"
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
export PYTHONUNBUFFERED=1
# The parent process only spawns; each row's process allocates what it uses
# (no 75 % preallocation held by one process while the next starts).
export XLA_PYTHON_CLIENT_PREALLOCATE=false

{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm \
    --format=csv
  python3 -c 'import sys, jax, jaxlib, torch, torchvision, flax, optax
print("python", sys.version.split()[0])
print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())
print("torch", torch.__version__, "torchvision", torchvision.__version__,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA")
print("flax", flax.__version__, "optax", optax.__version__)'
  nproc
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

timeout --signal=TERM "$BUDGET" python3 benchmarks/accelerator.py \
  --out "$WORK" --parts fair --models "$MODELS" \
  --torch_modes compile,eager --steps "$STEPS" --repeats "$REPEATS" \
  --warmup "$WARMUP" --model_timeout 300 --profile "$WORK/profile" \
  --profile_torch_modes compile
echo "accelerator.py exit $? after $(( $(date +%s) - start )) s"

# Whatever was written, also after a stop: the table again from the JSON.
python3 - "$WORK" <<'EOF' || true
import json, os, sys
sys.path.insert(0, os.getcwd())
from benchmarks import accelerator
work = sys.argv[1]
path = os.path.join(work, "accelerator.json")
if os.path.exists(path):
  with open(path) as f:
    result = json.load(f)
  with open(os.path.join(work, "accelerator.md"), "w") as f:
    f.write(accelerator.markdown(result))
  if os.path.isdir(os.path.join(work, "profile")) and result.get("fair"):
    accelerator.write_profile_summary(os.path.join(work, "profile"),
                                      result["fair"]["rows"])
EOF
for f in accelerator.md accelerator.json; do
  [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/"
done
[ -f "$WORK/profile/profile_summary.txt" ] && \
  cp "$WORK/profile/profile_summary.txt" "$OUT/"
if [ -d "$WORK/profile" ]; then
  tar -C "$WORK" -czf "$OUT/profiles.tar.gz" profile
  if [ "$(stat -c %s "$OUT/profiles.tar.gz")" -gt 15728640 ]; then
    tar -C "$WORK" -czf "$OUT/profiles.tar.gz" --exclude='*.xplane.pb' profile
  fi
  if [ "$(stat -c %s "$OUT/profiles.tar.gz")" -gt 15728640 ]; then
    tar -C "$WORK" -czf "$OUT/profiles.tar.gz" --exclude='*.xplane.pb' \
      --exclude='*.trace.json.gz' profile
  fi
fi
[ -f "$OUT/accelerator.md" ] && cat "$OUT/accelerator.md"
echo "gpu_session.sh done after $(( $(date +%s) - start )) s"
