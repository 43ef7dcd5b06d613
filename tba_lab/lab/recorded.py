"""Timings recorded on one NVIDIA H200 with 16 CPU cores (:data:`SOURCE`), the one copy of these
figures: beside the student's own runs, and the check of the scaling prediction
(:func:`tba_lab.lab.simulate.predict`). Their placement is not today's default: the trainer did
the reference pass on every row it drained, 1 torch thread per async CPU process, and on the GPU
all processes shared the H200. :data:`H200_2026_12_04`'s legs are shaped like
:func:`tba_lab.lab.timeline.time_per_update`'s result (medians, seconds), with the summary's
rates (per minute of wall time, start-up included) and ``run_seconds``, the budget; None: not
recorded (nothing is estimated).
"""
from __future__ import annotations

DATE = "2026-12-04"
MACHINE = "one NVIDIA H200, 16 CPU cores"
COMMIT = "bd662ce"
SEED = 0
SOURCE = (f"measured {DATE} on {MACHINE}, the kit at {COMMIT} (old default: the trainer "
          "scored every drained row, 1 torch thread per async process), 25-s CPU / 30-s GPU runs, "
          f"seed {SEED}")


def _leg(device, mode, algo, n, run_seconds, upm, spm, update, reference, wait, generation,
         reference_pass="trainer (every drained row)", staleness_mean=None):
    return {"device": device, "mode": mode, "algo": algo, "num_searchers": n,
            "run_seconds": run_seconds, "reference_pass": reference_pass,
            "updates_per_minute": upm, "samples_per_minute": spm, "staleness_mean": staleness_mean,
            "trainer": {"update": update, "reference": reference, "wait": wait},
            "searcher": {"generation": generation, "scoring": None, "sync": None}}


H200_2026_12_04 = {
    # CPU: async TB, searchers and trainer as CPU processes on the 16 cores
    "cpu_async_tb_n1": _leg("cpu", "async", "tb", 1, 25.0, 75.59, 9676, 0.292, 0.099, 0.002, 0.381,
                            staleness_mean=0.969),
    "cpu_async_tb_n4": _leg("cpu", "async", "tb", 4, 25.0, 44.19, 21135, 0.316, 0.431, 0.005, 0.435,
                            staleness_mean=0.967),
    "cpu_async_tb_n8": _leg("cpu", "async", "tb", 8, 25.0, 35.71, 28952, 0.313, 0.688, 0.008, 0.462,
                            staleness_mean=0.983),
    # GPU: the trainer and every searcher on the one H200 (sync GRPO: to the nearest update/min)
    "gpu_sync_tb": _leg("cuda", "sync", "tb", 1, 30.0, 158.94, 20344, 0.045, 0.019, 0.145, 0.136,
                        staleness_mean=0.0),
    "gpu_sync_grpo": _leg("cuda", "sync", "grpo", 1, 30.0, 169, None, 0.043, None, 0.136, None,
                          reference_pass=None),
    "gpu_async_tba_n3": _leg("cuda", "async", "tba", 3, 30.0, 400.66, 58684, 0.052, 0.025, None, 0.167,
                             staleness_mean=2.743),
    "gpu_async_tba_n6": _leg("cuda", "async", "tba", 6, 30.0, 243.56, 94543, 0.056, 0.081, None, 0.198,
                             staleness_mean=2.045),
}

# bench/gpu_check.sh's 60-s async (TBA) run, trainer and 3 searchers on the H200, same machine
# and date; its summary.json rates only (twice the budget: start-up weighs half as much).
GPU_CHECK_2026_12_04 = {
    "gpu_check_async_n3_60s": {"device": "cuda", "mode": "async", "algo": "tba",
                               "num_searchers": 3, "run_seconds": 60.0,
                               "updates_per_minute": 560.26, "samples_per_minute": 80615,
                               "staleness_mean": 2.854},
}

# The scaling prediction's inputs (tba_lab.lab.simulate.predict_leg), seconds: run_timings() of
# the two 1-searcher runs; the GPU's overhead is the CPU run's (a sync run has no async loop).
CALIBRATION_2026_12_04 = {
    "cpu": {"run": "cpu_async_tb_n1", "gen_seconds": 0.3808, "score_seconds": 0.0020,
            "update_only_seconds": 0.2919, "ref_seconds": 0.0964, "overhead_seconds": 0.001,
            "handover_seconds": 0.0068, "jitter": 0.124, "searcher_start_seconds": 12.0482,
            "searcher_warmup_seconds": 0.0, "stop_seconds": 0.4},
    "cuda": {"run": "gpu_sync_tb", "gen_seconds": 0.1357, "score_seconds": 0.0014,
            "update_only_seconds": 0.0453, "ref_seconds": 0.0189, "overhead_seconds": 0.001,
            "handover_seconds": 0.0072, "jitter": 0.1721, "searcher_start_seconds": 12.5771,
            "searcher_warmup_seconds": 0.4668, "stop_seconds": 0.2},
}
ROWS_PER_BATCH = 128  # B x K = 16 prompts x 8 responses in every leg

# The legs notebook 10 draws, with their bar labels: searchers added with the recorded placement.
CPU_LEGS = {"n1": "cpu_async_tb_n1", "n4": "cpu_async_tb_n4", "n8": "cpu_async_tb_n8"}
GPU_LEGS = {"sync TB": "gpu_sync_tb", "n3": "gpu_async_tba_n3", "n6": "gpu_async_tba_n6"}


def legs(names: dict) -> dict:
    """{label: leg} for ``names`` = {label: key of :data:`H200_2026_12_04`} (e.g.
    :data:`CPU_LEGS`), ready for :func:`tba_lab.lab.timeline.plot_time_per_update`."""
    return {label: H200_2026_12_04[key] for label, key in names.items()}
