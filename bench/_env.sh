# Sourced from the repository root by the bench/*.sh checks, with the caller's arguments: -h or
# --help prints the caller's header comment; else the interpreter (PYTHON, else .venv/bin/python,
# else python3), the repository on PYTHONPATH (nothing is installed), Hugging Face offline,
# unbuffered output (a check stopped at its limit still leaves its log) and no allocator setting
# that CUDA IPC cannot export (expandable segments; tba_lab/actors/weights.py refuses them).
case "${1:-}" in -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;; esac
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHON PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
for v in PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF; do
  [ -n "${!v:-}" ] && echo "$(basename "$0"): $v=${!v} was set; unset for this check"
  unset "$v"
done

# check NAME LIMIT_S KILL_S [OUT_DIR] [FLAGS...]: bench/NAME.py --out OUT_DIR FLAGS under `timeout`
# (SIGTERM at LIMIT_S, SIGKILL KILL_S later), its output also in OUT_DIR/NAME.log; OUT_DIR is the
# first argument unless it is a flag, else $OUT, else runs/NAME; returns the script's exit code
check() {
  local name="$1" limit="$2" kill="$3" out="${OUT:-runs/$1}" rc; shift 3
  if [ -n "${1:-}" ] && [ "${1#-}" = "$1" ]; then out="$1"; shift; fi
  mkdir -p "$out"
  timeout -k "$kill" "$limit" "$PYTHON" "bench/$name.py" --out "$out" "$@" 2>&1 \
    | tee "$out/$name.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 124 ] && echo "$name: stopped at the ${limit}-s limit; partial results in $out"
  return "$rc"
}
