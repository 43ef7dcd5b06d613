# Sourced (from the repository root) by bench/gpu_check.sh and bench/scaling_check.sh: the
# interpreter (PYTHON, else .venv/bin/python, else python3), the repository on PYTHONPATH
# (nothing is installed), Hugging Face offline, unbuffered output (a run stopped at its limit
# still leaves its output in the log), and no allocator setting that CUDA IPC cannot export
# (expandable segments; tba_lab/actors/weights.py refuses them). CHECK names the caller in what
# it prints.
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONUNBUFFERED=1
for v in PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF; do
  [ -n "${!v:-}" ] && echo "${CHECK:-bench}: $v=${!v} was set; unset for this check"
  unset "$v"
done
