"""Timings recorded on bigger hardware, for the course to set beside the student's own runs.

Source: one NVIDIA H200 with 16 CPU cores, the kit at bd662ce, 25-s CPU / 30-s GPU runs, seed 0
(:data:`SOURCE`). Those runs' placement is not today's default: the trainer did the reference
pass on every row it drained from the searchers, each async CPU process used 1 torch thread, and
on the GPU the trainer and all searchers shared the H200; so the trainer's reference time per
update grew with the number of searchers. Nothing here describes the automatic placement
(:mod:`tba_lab.actors.placement`); :mod:`tba_lab.lab.predict` predicts it from these runs.

:data:`H200_2026_12_04` holds one entry per leg, shaped like
:func:`tba_lab.lab.timeline.time_per_update`'s result so that
:func:`~tba_lab.lab.timeline.plot_time_per_update` draws both:

* ``trainer``: medians per update, seconds: ``update`` (``update_seconds``), ``reference``
  (``reference_seconds``), ``wait`` (``wait_seconds``);
* ``searcher``: medians per generation batch, seconds: ``generation`` (``gen_seconds``);
  ``scoring`` and ``sync`` were not part of the record (None);
* ``updates_per_minute`` and ``samples_per_minute``: ``summary.json``'s rates (per minute of
  the run's wall time, start-up included); ``staleness_mean``: ``summary.json``'s mean
  staleness of the rows trained on; ``run_seconds``: the training budget.

None marks a number the record does not have; none is estimated. The sync GRPO rate is
recorded to the nearest update per minute only. :data:`GPU_CHECK_2026_12_04` holds one more
run of that machine and date (``bench/gpu_check.sh``'s 60-s async run), rates only.

This module is the one copy of these figures: :data:`tba_lab.lab.predict.MEASURED_2026_12_04`
(the scaling prediction's validation targets) is read from it.
"""
from __future__ import annotations

SOURCE = ("measured 2026-12-04 on one NVIDIA H200 with 16 CPU cores, the kit at bd662ce "
          "(old default: the trainer scored every drained row, 1 torch thread per async process), "
          "25-s CPU / 30-s GPU runs, seed 0")
DATE = "2026-12-04"
MACHINE = "one NVIDIA H200, 16 CPU cores"
COMMIT = "bd662ce"
SEED = 0


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
    # GPU: the trainer and every searcher on the one H200
    "gpu_sync_tb": _leg("cuda", "sync", "tb", 1, 30.0, 158.94, 20344, 0.045, 0.019, 0.145, 0.136,
                        staleness_mean=0.0),
    "gpu_sync_grpo": _leg("cuda", "sync", "grpo", 1, 30.0, 169, None, 0.043, None, 0.136, None,
                          reference_pass=None),
    "gpu_async_tba_n3": _leg("cuda", "async", "tba", 3, 30.0, 400.66, 58684, 0.052, 0.025, None, 0.167,
                             staleness_mean=2.743),
    "gpu_async_tba_n6": _leg("cuda", "async", "tba", 6, 30.0, 243.56, 94543, 0.056, 0.081, None, 0.198,
                             staleness_mean=2.045),
}

# Source: bench/gpu_check.sh's 60-s async (TBA) run with the trainer and 3 searchers on the one
# H200, on the same machine and date as the legs above; its summary.json rates only. Twice the
# budget of the GPU legs above, so start-up weighs half as much.
GPU_CHECK_2026_12_04 = {
    "gpu_check_async_n3_60s": {"device": "cuda", "mode": "async", "algo": "tba",
                               "num_searchers": 3, "run_seconds": 60.0,
                               "updates_per_minute": 560.26, "samples_per_minute": 80615,
                               "staleness_mean": 2.854},
}

# The legs notebook 10 draws, with their bar labels: searchers added with the recorded placement.
CPU_LEGS = {"n1": "cpu_async_tb_n1", "n4": "cpu_async_tb_n4", "n8": "cpu_async_tb_n8"}
GPU_LEGS = {"sync TB": "gpu_sync_tb", "n3": "gpu_async_tba_n3", "n6": "gpu_async_tba_n6"}


def legs(names: dict) -> dict:
    """{label: leg} for ``names`` = {label: key of :data:`H200_2026_12_04`} (e.g.
    :data:`CPU_LEGS`), ready for :func:`tba_lab.lab.timeline.plot_time_per_update`."""
    return {label: H200_2026_12_04[key] for label, key in names.items()}
