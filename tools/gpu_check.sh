#!/usr/bin/env bash
# The device check of pcmr on one CUDA GPU (`make gpu-check`; about 5 minutes on one GPU).
#
#   1. agreement: every score, the metrics and every re-ranker on CUDA against a float64 CPU reference
#      (tools/device_agreement.py);
#   2. the `cuda` tests: one tiny epoch of every recipe on cuda, `pcmr evaluate --device cuda`, the
#      study's evaluation on cuda, float64 scores equal to the CPU's, the fused match_prob tiles;
#   3. `pcmr demo --device cuda`, timed (wall clock);
#   4. `pcmr evaluate --device cuda` of the demo's pcme run;
#   5. one run of the uncertainty study (pcme, the `source` variant, seed 0, 2 epochs) on cuda;
#   6. training throughput (pairs/s) of pcme_mu_only on the uncertainty settings, with the GPU
#      utilisation nvidia-smi reports every 0.5 s (benchmarks/training_throughput.py);
#   7. match_prob against the product of its samples, eager and fused tiles
#      (benchmarks/match_prob_device.py).
#
# Everything is written to docs/benchmark_logs/gpu_check_<UTC date>.txt (GPU_CHECK_LOG overrides) and
# to the terminal; the exit status is 0 only when every step passed. Without CUDA it says so in one
# line and exits 2. PYTHON (default .venv/bin/python, else python3) is the interpreter with pcmr.
# GPU_CHECK_DEVICE=cpu runs the same steps on the CPU with small sizes (a dry run of this script; its
# figures say nothing about a GPU, and its log goes to a temporary file unless GPU_CHECK_LOG is set).
set -uo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
DEVICE=${GPU_CHECK_DEVICE:-cuda}
if [ "$DEVICE" = cuda ]; then
  if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    echo "gpu-check: CUDA is not available on this machine (torch.cuda.is_available() is False for $PYTHON); nothing was checked" >&2
    exit 2
  fi
  THROUGHPUT=(--steps 200)
  SHAPES=()
  DEMO=()
  STUDY=()
  STUDY_LABEL="2 epochs"
  DEFAULT_LOG=docs/benchmark_logs/gpu_check_$(date -u +%Y-%m-%d).txt
else
  THROUGHPUT=(--steps 6 --warmup 2 --quick)
  SHAPES=(--shapes 200,1000,64 --repeats 2)
  DEMO=(--set train.epochs=1 --set "data.options={num_train: 200, num_val: 50, num_test: 100}")
  STUDY=(--epochs 1 --max-steps 5)
  STUDY_LABEL="1 epoch of 5 steps"
  DEFAULT_LOG=$(mktemp "${TMPDIR:-/tmp}/pcmr-gpu-check-dry-run.XXXXXX")
fi

export HF_HUB_OFFLINE=1
LOG=${GPU_CHECK_LOG:-$DEFAULT_LOG}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pcmr-gpu-check.XXXXXX")
export PCMR_CACHE="$WORK/cache"
mkdir -p "$(dirname "$LOG")"
exec > >(tee "$LOG") 2>&1
TEE=$!

passed=0
failed=()
step() {  # step NAME COMMAND...: run, time and record one step
  local name=$1 start rc
  shift
  echo
  echo "== $name"
  echo "\$ $*"
  start=$(date +%s%N)
  "$@"
  rc=$?
  printf -- "-- %s: %s in %d s\n" "$name" "$([ $rc -eq 0 ] && echo passed || echo "FAILED (exit $rc)")" \
    "$(( ($(date +%s%N) - start) / 1000000000 ))"
  if [ $rc -eq 0 ]; then passed=$((passed + 1)); else failed+=("$name"); fi
}

started=$(date +%s%N)
echo "pcmr gpu-check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
"$PYTHON" -c 'import os, torch, pcmr; cuda = torch.cuda.is_available(); print(
    f"pcmr {pcmr.__version__}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
    + (f"{torch.cuda.get_device_name(0)} ({torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB), "
       f"{torch.cuda.device_count()} GPU(s)" if cuda else "no GPU") + f", {os.cpu_count()} CPU cores")'
[ "$DEVICE" = cuda ] && command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
[ "$DEVICE" = cuda ] || echo "DRY RUN on $DEVICE: the steps of the check, not GPU figures"

step "agreement: scores, metrics, re-rankers ($DEVICE float32 vs CPU float64)" \
  "$PYTHON" tools/device_agreement.py --device "$DEVICE"
step "cuda tests: every recipe's tiny epoch, evaluate, study evaluation, float64 scores, fused match_prob" \
  "$PYTHON" -m pytest -q -m cuda -p no:cacheprovider tests/test_cuda.py tests/study/test_study_device.py \
  tests/similarity/test_match_prob_fused.py tests/similarity/test_device_agreement.py
step "pcmr demo --device $DEVICE (wall time)" \
  "$PYTHON" -m pcmr demo --device "$DEVICE" "${DEMO[@]}" --out "$WORK/demo"
step "pcmr evaluate --device $DEVICE" \
  "$PYTHON" -m pcmr evaluate "$WORK/demo/pcme" --device "$DEVICE" --out "$WORK/evaluate"
"$PYTHON" tools/gpu_check_study.py "$WORK/uncertainty_check.yaml" --device "$DEVICE" "${STUDY[@]}"
step "uncertainty study: one pcme run on $DEVICE (source, seed 0, $STUDY_LABEL), trained and evaluated" \
  "$PYTHON" -m pcmr study "$WORK/uncertainty_check.yaml" --recipes pcme --only 0 --threads "$(nproc)" --out "$WORK/study"
step "training throughput with GPU utilisation" \
  "$PYTHON" benchmarks/training_throughput.py --device "$DEVICE" "${THROUGHPUT[@]}" --out "$WORK/throughput"
step "match_prob vs the product of its samples (eager and fused tiles)" \
  "$PYTHON" benchmarks/match_prob_device.py --device "$DEVICE" "${SHAPES[@]}"

echo
total=$(( ($(date +%s%N) - started) / 1000000000 ))
printf "gpu-check on %s: %d of %d steps passed in %d s" "$DEVICE" "$passed" "$((passed + ${#failed[@]}))" "$total"
if [ ${#failed[@]} -gt 0 ]; then printf "; failed: %s" "$(IFS=';'; echo "${failed[*]}")"; fi
printf "\nlog: %s (work folder %s)\n" "$LOG" "$WORK"
status=$([ ${#failed[@]} -eq 0 ] && echo 0 || echo 1)
exec >&- 2>&-
wait "$TEE" 2>/dev/null  # the log is complete before the command returns
exit "$status"
