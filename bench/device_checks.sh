#!/usr/bin/env bash
# Every device check in one command, a script because only a GPU machine (one H200, 16 cores, no
# network) runs it: under 9 minutes, each part under its own `timeout`, a failing part never
# stopping the next: 1. wheels (papermill, ipykernel) from .whl/ into /tmp/site, for part 4;
# 2. bench/gpu_check.sh; 3. bench/scaling_check.sh with a --deadline of what part 4 leaves;
# 4. notebook 10 (the instructor's copy, worked solutions in) through papermill with SMOKE=True.
#
#   bench/device_checks.sh [OUT_DIR]     (the first argument, else $OUT, else runs/device_checks)
#   DRY=1 bench/device_checks.sh /tmp/dc (CPU dry run of every part; a few minutes on 2 cores)
#
# Writes at most 7 files in OUT_DIR: device_checks.md (each part's status, seconds, notes),
# gpu_check.md/.json, scaling_check.md/.json, 10_multi_gpu.ipynb and device_checks_logs.tgz (the
# logs, the notebook's metrics and figures). Environment: PYTHON, PARTS (default "wheels
# gpu_check scaling nb10"), TOTAL (seconds, 540), DRY=1, WHEELS=1 (install even when papermill
# imports), SCALING_ARGS (more scaling flags).
set -u
cd "$(dirname "$0")/.."
REPO="$PWD"
DRY="${DRY:-0}"
[ "$DRY" = 1 ] || PYTHON="${PYTHON:-python3}"
source bench/_env.sh "$@"
OUT_DIR="${1:-${OUT:-runs/device_checks}}"
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
TOTAL="${TOTAL:-540}"
PARTS="${PARTS:-wheels gpu_check scaling nb10}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/device_checks.XXXXXX")"  # run folders and logs; removed at the end
LOGS="$WORK/logs"
mkdir -p "$LOGS"
trap 'rm -rf "$WORK"' EXIT
SITE=/tmp/site
ROWS=()   # "| part | rc | seconds | note |" lines for device_checks.md
FAILED=0

wanted() { case " $PARTS " in *" $1 "*) return 0;; *) return 1;; esac; }
# descendants PID: PID and every process below it, one a line, from /proc (whatever session or
# group they made for themselves: scaling_check's legs, papermill's kernel)
descendants() {
  local f st ppid
  echo "$1"
  for f in /proc/[0-9]*/stat; do
    st=$(cat "$f" 2>/dev/null) || continue
    read -r _ ppid _ <<< "${st##*) }"
    [ "$ppid" = "$1" ] && f=${f#/proc/} && descendants "${f%/stat}"
  done
}
# run NAME LIMIT_S NOTE CMD...: CMD under `timeout LIMIT_S`, in a session of its own, its output
# in $LOGS/NAME.log (the last lines printed); if anything of it is still running 25 s after the
# limit, SIGTERM to the whole process tree, SIGKILL 20 s later
run() {
  local name="$1" limit="$2" note="$3"; shift 3
  local t=$SECONDS pid rc left
  echo "=== device_checks: $name (limit ${limit} s, $SECONDS s in): $*"
  setsid -w timeout -k 20 "$limit" "$@" > "$LOGS/$name.log" 2>&1 < /dev/null &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && [ $(( SECONDS - t )) -lt $(( limit + 25 )) ]; do sleep 1; done
  if kill -0 "$pid" 2>/dev/null; then
    left=$(descendants "$pid")
    echo "device_checks: $name still running past its limit; stopping processes" $left
    kill -TERM $left 2>/dev/null; sleep 20; kill -KILL $left 2>/dev/null
  fi
  wait "$pid"; rc=$?
  local s=$(( SECONDS - t ))
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && note="$note; STOPPED at its ${limit}-s limit"
  [ $rc -ne 0 ] && FAILED=1
  ROWS+=("| $name | $rc | $s | $note |")
  tail -n 25 "$LOGS/$name.log"
  echo "=== device_checks: $name ended rc=$rc after ${s} s ==="
  collect
  return 0
}
skip() { ROWS+=("| $1 | - | 0 | skipped: $2 |"); echo "=== device_checks: $1 skipped: $2 ==="; }

# collect: the reports into OUT_DIR (at most 7 files), rewritten after every part so that a
# stopped run still returns what it did
collect() {
  cp "$WORK"/gpu_check/gpu_check.{md,json} "$WORK"/scaling/scaling_check.{md,json} \
    "$WORK/10_multi_gpu.ipynb" "$OUT_DIR/" 2>/dev/null
  {
    printf '# Device checks (%s)\n\n' "$([ "$DRY" = 1 ] && echo 'CPU dry run' || nvidia-smi -L 2>/dev/null | head -1 | cut -d'(' -f1)"
    printf '%s, %s cores, %s s in all (limit %s s). Python: %s.\n\n| part | rc | seconds | note |\n|---|---|---|---|\n' \
      "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(nproc)" "$SECONDS" "$TOTAL" "$PYTHON"
    printf '%s\n' "${ROWS[@]}"
    if [ -f "$WORK/nb10/metrics.json" ]; then
      printf '\nNotebook 10 metrics.json (device "cuda" = its GPU branch ran):\n\n```\n%s\n```\n' "$(cat "$WORK/nb10/metrics.json")"
    elif wanted nb10; then
      printf '\nNotebook 10 wrote no metrics.json (see nb10.log in device_checks_logs.tgz).\n'
    fi
    for f in gpu_check scaling; do
      [ -f "$LOGS/$f.log" ] && grep -q -E "Traceback|Error|failed" "$LOGS/$f.log" && {
        echo; echo "$f.log, the last lines naming an error:"; echo '```'
        grep -E -A3 "Traceback|Error|failed" "$LOGS/$f.log" | tail -15; echo '```'; }
    done
  } > "$OUT_DIR/device_checks.md"
  cp "$OUT_DIR/device_checks.md" "$LOGS/" 2>/dev/null
  # everything small: logs, gpu_check's async run logs, scaling_runs.tgz, the notebook's figures
  ( cd "$WORK" && tar czf "$OUT_DIR/device_checks_logs.tgz" logs \
      $(ls -d gpu_check 2>/dev/null) \
      $(ls scaling/scaling_runs.tgz scaling/scaling_check.log 2>/dev/null) \
      $(ls nb10/*.json nb10/*.png 2>/dev/null) 2>/dev/null )
}

# ---------------------------------------------------------------- 0. the environment
{
  date; echo "DRY=$DRY PARTS=$PARTS TOTAL=$TOTAL PYTHON=$PYTHON"; uname -a; nproc
  nvidia-smi -L 2>&1 | head -4
  "$PYTHON" -c "import sys, torch, transformers; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), 'transformers', transformers.__version__)" 2>&1
  free -g 2>/dev/null | head -2
} 2>&1 | tee "$LOGS/env.txt"

# ---------------------------------------------------------------- 1. wheels (for part 4)
NB_PYTHONPATH="$REPO"
if wanted wheels; then
  if ! ls .whl/*.whl >/dev/null 2>&1; then
    skip wheels "no .whl/ folder (carry .whl)"
  elif "$PYTHON" -c "import papermill, ipykernel" >/dev/null 2>&1 && [ "${WHEELS:-0}" != 1 ]; then
    skip wheels "$PYTHON already imports papermill and ipykernel"
  else
    rm -rf "$SITE"
    run wheels 90 "$(ls .whl/*.whl | wc -l) wheels into $SITE" \
      "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
    NB_PYTHONPATH="$REPO:$SITE"  # only what this run installed (an older /tmp/site may not fit $PYTHON)
  fi
fi

# ---------------------------------------------------------------- 2. the GPU check
if wanted gpu_check; then
  if [ "$DRY" = 1 ]; then flags=(--cpu-dry-run) limit=240; else flags=(--run-seconds 30 --budget 110) limit=150; fi
  run gpu_check $limit "${flags[*]}" bash bench/gpu_check.sh "$WORK/gpu_check" "${flags[@]}"
fi

# ---------------------------------------------------------------- 3. the scaling check
NB_RESERVE=140  # part 4's limit (130 s) and the collection
if wanted scaling; then
  # legs must end by the deadline; 30 s on top for the last leg's stop and the reports
  left=$(( TOTAL - SECONDS - 30 ))
  wanted nb10 && left=$(( left - NB_RESERVE ))
  cap=330; [ "$DRY" = 1 ] && cap=150
  deadline=$(( left < cap ? left : cap ))
  if [ "$deadline" -lt 45 ]; then
    skip scaling "only ${deadline} s would be left for its legs"
  else
    dry_flag=(); [ "$DRY" = 1 ] && dry_flag=(--cpu-dry-run)
    run scaling $(( deadline + 50 )) "--deadline $deadline" \
      env SCALING_CHECK_LIMIT=$(( deadline + 25 )) bash bench/scaling_check.sh "$WORK/scaling" --deadline "$deadline" "${dry_flag[@]}" ${SCALING_ARGS:-}
  fi
fi

# ---------------------------------------------------------------- 4. notebook 10
if wanted nb10; then
  limit=$(( TOTAL - SECONDS - 10 )); [ $limit -gt 130 ] && limit=130
  if [ $limit -lt 30 ]; then
    skip nb10 "only ${limit} s left"
  else
    mkdir -p "$WORK/nb10" "$WORK/jupyter" "$WORK/ipython"
    # the kernel, its runtime files and IPython's profile stay in $WORK (home may be read-only)
    export JUPYTER_RUNTIME_DIR="$WORK/jupyter/runtime" IPYTHONDIR="$WORK/ipython" JUPYTER_PLATFORM_DIRS=1
    # python3 is ipykernel's native kernel (the running interpreter); register it only if missing
    PYTHONPATH="$NB_PYTHONPATH" "$PYTHON" -c "import sys; from jupyter_client.kernelspec import KernelSpecManager as K; sys.exit('python3' not in K().find_kernel_specs())" >/dev/null 2>&1 \
      || PYTHONPATH="$NB_PYTHONPATH" "$PYTHON" -m ipykernel install --user --name python3 >> "$LOGS/nb10_kernel.log" 2>&1
    run nb10 "$limit" "SMOKE=True RUN_SECONDS=20" \
      env PYTHONPATH="$NB_PYTHONPATH" "$PYTHON" -m papermill notebooks/10_multi_gpu.ipynb "$WORK/10_multi_gpu.ipynb" -k python3 \
        --cwd "$REPO" --log-output --no-progress-bar \
        -p SMOKE True -p SEED 0 -p RUN_SECONDS 20 -p OUTPUT_DIR "$WORK/nb10"
  fi
fi

collect
echo
cat "$OUT_DIR/device_checks.md"
[ -f "$OUT_DIR/scaling_check.md" ] && cat "$OUT_DIR/scaling_check.md"
echo "device_checks: $(ls "$OUT_DIR" | wc -l) files in $OUT_DIR, $SECONDS s in all"
exit $FAILED
