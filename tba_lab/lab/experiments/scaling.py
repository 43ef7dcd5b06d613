"""Experiment ``scaling``: more searchers, wall-clock time to a target accuracy.

Decoupled searchers speed post-training up and scale data generation (TBA, Sec. 4). Here:
async TB with n in {1, 2, 4} searchers for the same budget: time to ``target``, updates and
samples per minute, and the simulator's prediction from the same seed's run with the fewest
searchers. On CPUs every searcher takes a core from the trainer. Claims, for each n above the
fewest: its updates and its samples per minute over the same seed's fewest-searcher run's,
minus 1 (a busier hour slowing both cancels); predicted positive, smallest effect 10%. The
paper's searchers run on hardware of their own, so each claim's premise is that the run gave
the trainer and every searcher a core of its own (n + 1 usable cores); on fewer it is 'not
testable here'.
"""
from __future__ import annotations

import math
from pathlib import Path

from tba_lab.actors.placement import available_cores
from tba_lab.config import merge
from tba_lab.lab.experiments.common import (BATCH, PAPER, RATE_DELTA, core_overrides, fixed, paired,
                                            paper_claim, pct, premise, sized)

NAME = "scaling"
TITLE = "Searcher scaling: wall-clock time to a target accuracy"
CLAIM = (f"{PAPER}, abstract and Sec. 4: decoupling search from training speeds post-training "
         f"up in wall-clock time (4x or more, abstract), and more searchers generate more data "
         f"in parallel.")
DEPARTURES = [
    "Searchers and trainer share this machine's CPU cores instead of each having GPUs, so a "
    "searcher beyond the spare cores slows every process down (processor sharing).",
    "Time to target is interpolated linearly between held-out evaluations; the evaluations "
    "pause the trainer inside its budget, alike for every n.",
    "The simulator models neither those pauses nor other programs on the machine.",
]
PAPER_SEARCHERS = ("abstract and Sec. 4: searchers on GPUs of their own scale data generation "
                   "and speed post-training up")


def settings(smoke: bool) -> dict:
    return sized(smoke, searchers=([1, 2], [1, 2, 4]), train_seconds=(8.0, 90.0),
                 eval_every=(3.0, 15.0), eval_size=(50, 200), target=0.40, **BATCH)


def variants(s: dict) -> list[tuple[str, dict]]:
    base = core_overrides({**s, "max_minutes": s["train_seconds"] / 60.0, "max_steps": 0})
    return [(f"n{n}", merge(base, {"algo": "tb", "async": {"mode": "async",
                                                           "num_searchers": int(n)}}))
            for n in s["searchers"]]


def metrics(s: dict) -> dict:
    return {"time_to_target": (f"seconds to {pct(s['target'], 0)} held-out accuracy "
                               f"(interpolated)", fixed(0)),
            "accuracy_after": ("held-out accuracy after training", pct),
            "updates_per_minute": ("trainer updates per minute", fixed(0)),
            "samples_per_minute": ("samples generated per minute", fixed(0)),
            "predicted_steady_upm": ("simulator's steady updates per minute", fixed(0))}


def _finite(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    """Measured durations, and the simulator's prediction from the durations of this seed's
    run with the fewest searchers."""
    from tba_lab.lab.simulate import run_timings, simulate_run

    t = run_timings(run_dir)
    row = {"searchers": int(t["num_searchers"]), "predicted_steady_upm": None,
           "timings": {k: _finite(v) for k, v in t.items()}}
    same_seed = [r for r in runs if r["seed"] == summary["seed"]] + [row]
    base = min(same_seed, key=lambda r: r["searchers"])["timings"]  # None where not finite
    if all(base[k] is not None for k in ("gen_seconds", "score_seconds", "update_seconds")):
        sim = simulate_run(t, timings=base, cores=available_cores(), seed=int(summary["seed"]))
        row["predicted_steady_upm"] = _finite(sim.steady_updates_per_minute)
    return row


def claims(runs: list[dict], s: dict) -> list[dict]:
    """The claims of the module docstring; a seed whose base run made none gives no ratio."""
    ns = sorted(s["searchers"])
    cores = [r.get("cores_available") for r in runs]
    usable = None if not cores or None in cores else min(cores)
    return [paper_claim(
        f"scaling.{key}.n{n}", f"{n} searchers make more {what} per minute than {ns[0]}",
        PAPER_SEARCHERS, f"mean over seeds of the {n}-searcher run's {what} per minute over the "
        f"{ns[0]}-searcher run's minus 1, same seed, same wall-clock budget",
        paired(runs, f"n{n}", f"n{ns[0]}", key, lambda a, b: a / b - 1 if b else None), +1,
        RATE_DELTA, f"% relative to {ns[0]} searcher{'s' if ns[0] > 1 else ''}", scale=100.0,
        missing_reason="a run is missing, or the one with fewer searchers made none",
        premise=premise(
            f"the trainer and each of the {n} searchers have a core of their own ({n + 1} "
            f"usable cores)", usable is not None and usable >= n + 1,
            f"{usable if usable is not None else 'unrecorded'} usable cores",
            f"{n + 1} or more cores, or a GPU per searcher (`bash bench/scaling_check.sh` on a "
            f"GPU machine)"))
        for n in ns[1:] for key, what in (("updates_per_minute", "trainer updates"),
                                          ("samples_per_minute", "samples generated"))]
