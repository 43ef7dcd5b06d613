#!/usr/bin/env bash
# The prepared GPU check (bench/gpu_check.py): CUDA IPC weight round trip, sync latency of a
# 0.5B bf16 model, sampler/trainer log-prob agreement, and a 2-minute async TBA run with the
# trainer and 3 searchers on one GPU. At most 5 minutes. Needs only torch and transformers (no
# network, no datasets/vLLM/Ray); the repository is put on PYTHONPATH, nothing is installed.
# Without CUDA it runs a CPU dry run of the same code (under a minute).
#
#   bench/gpu_check.sh [OUT_DIR] [extra gpu_check.py flags]
#
# Writes OUT_DIR/gpu_check.json and OUT_DIR/gpu_check.md (OUT_DIR: the first argument, else
# $OUT, else runs/gpu_check) and prints the summary. PYTHON picks the interpreter.
set -u
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-runs/gpu_check}}"
shift || true
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT_DIR"
timeout -k 10 300 "$PYTHON" bench/gpu_check.py --out "$OUT_DIR" "$@"
rc=$?
[ $rc -eq 124 ] && echo "gpu_check: stopped at the 5-minute limit; partial results in $OUT_DIR"
exit $rc
