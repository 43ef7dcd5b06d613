#!/usr/bin/env bash
# The prepared scaling check (bench/scaling_check.py): 30-s runs of async TBA with 1, 3 and 6
# searchers, sync TB and sync GRPO with the trainer and searchers on one GPU (cuda:0), and async
# TBA with 1, 2, 4 and 8 searchers and sync TB as CPU processes; per leg the update and sample
# rates, staleness, the trainer's busy fraction, median step times, accuracy over time and the
# time to 40% / 45%. At most 6 minutes (a hard `timeout`; the script's --deadline, 330 s by
# default, skips the legs that no longer fit and says so). Needs only torch and transformers (no
# network); the repository is put on PYTHONPATH, nothing is installed. Without CUDA, or with
# --cpu-dry-run, it runs a CPU dry run of the same code (2 tiny legs, about a minute on 2 cores).
#
#   bench/scaling_check.sh [OUT_DIR] [--seconds S] [--legs L ...] [--seeds N ...]
#                          [--deadline S] [--cpu-dry-run] [more: bench/scaling_check.py --help]
#
# Writes scaling_check.json, scaling_check.md, scaling_runs.tgz (each leg's logs) and
# scaling_check.log in OUT_DIR (the first argument, else $OUT, else runs/scaling_check; 4 files;
# the run folders stay in a temporary folder that is removed). PYTHON picks the interpreter;
# SCALING_CHECK_LIMIT (seconds, default 360) the hard limit.
set -u
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/.."
# the first argument is the output folder unless it is a flag
if [ -n "${1:-}" ] && [ "${1#-}" = "$1" ]; then OUT_DIR="$1"; shift; else OUT_DIR="${OUT:-runs/scaling_check}"; fi
CHECK=scaling_check source bench/_env.sh  # PYTHON, PYTHONPATH, offline, no expandable segments
LIMIT="${SCALING_CHECK_LIMIT:-360}"
mkdir -p "$OUT_DIR"
set -o pipefail
# SIGTERM at the limit lets the script stop the running leg and write its reports; SIGKILL 20 s later
timeout -k 20 "$LIMIT" "$PYTHON" bench/scaling_check.py --out "$OUT_DIR" "$@" 2>&1 | tee "$OUT_DIR/scaling_check.log"
rc=$?
[ $rc -eq 124 ] && echo "scaling_check: stopped at the ${LIMIT}-s limit; partial results in $OUT_DIR"
exit $rc
