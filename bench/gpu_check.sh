#!/usr/bin/env bash
# The GPU check, a script because only a GPU machine runs it: bench/gpu_check.py (its docstring
# has the parts) under a 5-minute limit; without CUDA a CPU dry run of the same code.
#
#   bench/gpu_check.sh [OUT_DIR] [--run-seconds S] [--budget S] [--cpu-dry-run]
#
# Writes gpu_check.json, .md, .log and async_run/'s three logs in OUT_DIR (the first argument unless
# it is a flag, else $OUT, else runs/gpu_check). PYTHON picks the interpreter.
set -u
cd "$(dirname "$0")/.."
source bench/_env.sh "$@"
check gpu_check 300 10 "$@"
