#!/usr/bin/env bash
# The scaling check, a script because only a GPU machine runs it: bench/scaling_check.py (its
# docstring has the legs) under a hard limit, SCALING_CHECK_LIMIT seconds (default 360; its
# --deadline, 330 s, skips the legs that no longer fit). Without CUDA a CPU dry run.
#
#   bench/scaling_check.sh [OUT_DIR] [--seconds S] [--legs L ...] [--seeds N ...]
#                          [--deadline S] [--cpu-dry-run]
#
# Writes scaling_check.json, .md, .log and scaling_runs.tgz in OUT_DIR (the first argument unless
# it is a flag, else $OUT, else runs/scaling_check). PYTHON picks the interpreter.
set -u
cd "$(dirname "$0")/.."
source bench/_env.sh "$@"
# SIGTERM at the limit lets the script stop the running leg and write its reports
check scaling_check "${SCALING_CHECK_LIMIT:-360}" 20 "$@"
