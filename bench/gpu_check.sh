#!/usr/bin/env bash
# The prepared GPU check (bench/gpu_check.py): CUDA IPC weight round trip, sync latency of a
# 0.5B bf16 model, sampler/trainer log-prob agreement, and a 2-minute async TBA run with the
# trainer and 3 searchers on one GPU. At most 5 minutes. Needs only torch and transformers (no
# network, no datasets/vLLM/Ray); the repository is put on PYTHONPATH, nothing is installed.
# Without CUDA it runs a CPU dry run of the same code (under a minute).
#
#   bench/gpu_check.sh [OUT_DIR] [extra gpu_check.py flags]
#
# Writes gpu_check.json, gpu_check.md, gpu_check.log and async_run/'s three logs in OUT_DIR (the
# first argument, else $OUT, else runs/gpu_check; 6 files) and prints the summary. PYTHON picks
# the interpreter.
set -u
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-runs/gpu_check}}"
shift || true
CHECK=gpu_check source bench/_env.sh  # PYTHON, PYTHONPATH, offline, no expandable segments
mkdir -p "$OUT_DIR"
set -o pipefail
timeout -k 10 300 "$PYTHON" bench/gpu_check.py --out "$OUT_DIR" "$@" 2>&1 | tee "$OUT_DIR/gpu_check.log"
rc=$?
[ $rc -eq 124 ] && echo "gpu_check: stopped at the 5-minute limit; partial results in $OUT_DIR"
exit $rc
