"""Notebook 05 (where the time goes): exercises, and the helpers that set up, draw and print.

Exercises
    05.share_cores       the step of the event loop (:func:`tba_lab.lab.simulate.pipeline`) that
                         advances time while n busy processes share c cores
    05.async_throughput  the loop's closed form: trainer updates and searcher batches per minute
                         with n searchers on c cores under the replay bound

Both references live in :mod:`tba_lab.lab.simulate`, beside the event loop the notebook prints
and runs with the student's step. The notebook's own cells train the three runs, run the loop
and compare; the helpers below only set up, draw and print.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tba_lab.lab.course import Exercise
from tba_lab.lab.simulate import async_throughput, plot_sim_timeline, share_cores

SMOKE_NOTE = "SMOKE: start-up dominated (3 updates per run), these rates are not results"


@dataclass
class Setup:
    """The notebook's settings.

    Attributes:
        out: the output folder (figures, metrics.json, ``runs/<name>/``).
        smoke: the tiny configuration (3 updates per run on B = 8 prompts x K = 4).
        seed: every run's seed.
        cores: CPU cores this process may use.
        run_seconds: training budget of each measured run, seconds (start-up and the
            50-problem evaluations before and after come on top).
        run_overrides: config overrides every measured run adds (SMOKE's small batches).
        sim_seconds: simulated seconds per event-loop run.
    """
    out: Path
    smoke: bool
    seed: int
    cores: int
    run_seconds: float
    run_overrides: dict = field(default_factory=dict)
    sim_seconds: float = 120.0


def setup(output_dir, smoke: bool, seed: int) -> Setup:
    """Create the output folder, print the machine, return the notebook's :class:`Setup`."""
    from tba_lab.actors.placement import available_cores

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    smoke_run = {"training": {"max_steps": 3, "num_prompts_per_step": 8, "num_generations": 4},
                 "buffer": {"initial_fill": 32}}
    s = Setup(out=out, smoke=smoke, seed=seed, cores=available_cores(),
              run_seconds=60 if smoke else 40, run_overrides=smoke_run if smoke else {},
              sim_seconds=30 if smoke else 120)
    print(f"{s.cores} CPU cores; runs of {s.run_seconds} s of training"
          + (" (SMOKE: 3 updates each)" if smoke else "") + f"; 1-minute load average now "
          f"{os.getloadavg()[0]:.1f} (above {s.cores}: other programs compete for the cores)")
    return s


def time_split(s: Setup, names) -> dict:
    """Split each run's time per update into its parts (:func:`tba_lab.lab.timeline.time_per_update`),
    draw them (time_per_update.png) and print the table. Returns the split by run name."""
    import matplotlib.pyplot as plt

    from tba_lab.lab.timeline import format_time_per_update, plot_time_per_update, time_per_update

    split = {name: time_per_update(s.out / "runs" / name) for name in names}
    axes = plot_time_per_update(split, title=f"this machine ({s.cores} cores)")
    axes[0].figure.tight_layout()
    axes[0].figure.savefig(s.out / "time_per_update.png", dpi=110)
    plt.show()
    print(format_time_per_update(split))
    if s.smoke:
        print(SMOKE_NOTE)
    return split


def plot_measured_and_simulated(s: Setup, name: str, sim, seconds: float = 4.0) -> None:
    """The last ``seconds`` of run ``name`` as logged (top) and of its simulation (bottom),
    drawn alike (timelines.png)."""
    import matplotlib.pyplot as plt

    from tba_lab.lab.timeline import load_timeline, plot_timeline

    run_dir = s.out / "runs" / name
    wall = load_timeline(run_dir)["wall_seconds"]
    fig, axes = plt.subplots(2, 1, figsize=(10, 4.6))
    plot_timeline(run_dir, ax=axes[0], window=(max(0.0, wall - seconds), wall), legend=False,
                  title=f"{name}, measured: the last {seconds:.0f} s")
    plot_sim_timeline(sim, ax=axes[1], window=(sim.duration - seconds, sim.duration),
                      title=f"{name}, simulated from its durations: the last {seconds:.0f} s")
    fig.tight_layout()
    fig.savefig(s.out / "timelines.png", dpi=110)
    plt.show()


def plot_searchers(s: Setup, ns, curves: dict, measured: dict) -> None:
    """Trainer updates per minute against the searcher count: ``curves`` {label: [rate per n]}
    (solid: the event loop, dashed: labels starting "closed form") and ``measured`` {n: rate}
    as points (searchers.png)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (label, ys) in enumerate(curves.items()):
        closed = label.startswith("closed form")
        ax.plot(ns, ys, "--" if closed else "o-", color=f"C{i // 2}", alpha=0.6 if closed else 1,
                label=label)
    ax.plot(list(measured), list(measured.values()), "k*", ms=12, label="measured (steady)")
    ax.set(xlabel="searchers n", ylabel="trainer updates / min", xticks=list(ns), ylim=(0, None))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(s.out / "searchers.png", dpi=110)
    plt.show()


# ---------------------------------------------------------------- 05.share_cores
def share_cores_stub(remaining, cores, until):
    """Advance the busy processes to the next event when they share ``cores`` cores.

    Args:
        remaining: list of floats, the work left in each busy process's current job, in
            seconds of that job running alone (each > 0; the list may be empty).
        cores: the number of cores they share, or None (a device each).
        until: the longest step allowed, wall seconds.

    Each process runs at speed min(1, cores / n) for n busy processes (speed 1 when cores is
    None): never faster than alone.

    Returns:
        (dt, left): dt (float) = wall seconds until the first job ends, or ``until`` if that
        is sooner; left (list of floats, same order and length as ``remaining``) = each job's
        work after dt. An empty ``remaining`` returns (until, []).
    """
    # YOUR CODE HERE
    raise NotImplementedError


def _compare_step(got, want) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"expected a pair (dt, left), got {type(got).__name__}"
    dt, left = got
    if not np.isclose(float(dt), want[0], rtol=1e-6, atol=1e-9):
        return f"dt = {float(dt):.6g}, expected {want[0]:.6g}"
    if len(left) != len(want[1]):
        return f"left has {len(left)} entries, expected {len(want[1])}"
    if not np.allclose(np.asarray(left, dtype=float), want[1], rtol=1e-6, atol=1e-9):
        return f"left = {[round(float(x), 6) for x in left]}, expected {[round(x, 6) for x in want[1]]}"
    return None


def _step_cases():
    rng = np.random.default_rng(5)
    return [
        (([0.3, 0.6, 0.9], 2, 10.0), {}),   # 3 processes on 2 cores: speed 2/3
        (([0.3, 0.6], 4, 10.0), {}),        # fewer processes than cores: speed 1, not 2
        (([0.5, 0.2, 0.4], 1, 10.0), {}),   # not sorted: keep the order
        (([0.3, 0.8], None, 0.1), {}),      # the run ends before any job does
        (([0.4, 0.4], 2, 10.0), {}),        # both end at once
        (([], 2, 5.0), {}),                 # nobody busy
        ((list(rng.uniform(0.1, 1.0, 5)), 3, 100.0), {}),
    ]


SHARE_CORES = Exercise(
    name="05.share_cores",
    description="processor sharing: advance n busy processes on c cores to the next event",
    stub=share_cores_stub, reference=share_cores,
    cases=_step_cases, compare=_compare_step)


# ---------------------------------------------------------------- 05.async_throughput
def async_throughput_stub(gen_seconds, score_seconds, update_seconds, num_searchers, cores,
                          max_replay_ratio=0.0):
    """Steady-state rates of the asynchronous pipeline: n searchers and one trainer, every
    process busy all the time, sharing ``cores`` cores (None: a device each).

    Each process slows down by s = max(1, (n + 1) / cores) (s = 1 when cores is None). The n
    searchers deliver n * 60 / ((gen_seconds + score_seconds) * s) batches per minute. The
    trainer could make 60 / (update_seconds * s) updates per minute; with max_replay_ratio
    rho > 0 it makes at most rho updates per batch delivered (rho = 0: no bound).

    Returns:
        (trainer updates per minute, searcher batches per minute), two floats.
    """
    # YOUR CODE HERE
    raise NotImplementedError


def _async_cases():
    return [
        ((0.26, 0.09, 0.20), {"num_searchers": 1, "cores": 2}),   # fits, no bound
        ((0.26, 0.09, 0.20), {"num_searchers": 2, "cores": 2}),   # 3 busy on 2 cores
        ((0.26, 0.09, 0.20), {"num_searchers": 1, "cores": 2, "max_replay_ratio": 1.0}),  # short of data
        ((0.26, 0.09, 0.20), {"num_searchers": 2, "cores": 2, "max_replay_ratio": 1.0}),
        ((0.20, 0.05, 0.40), {"num_searchers": 2, "cores": 2, "max_replay_ratio": 1.0}),  # trainer-bound
        ((0.5, 0.1, 0.3), {"num_searchers": 7, "cores": None, "max_replay_ratio": 2.0}),
        ((2.0, 0.5, 1.0), {"num_searchers": 3, "cores": 8, "max_replay_ratio": 0.0}),
    ]


ASYNC_THROUGHPUT = Exercise(
    name="05.async_throughput",
    description="async updates and batches per minute with n searchers on c cores, replay bound",
    stub=async_throughput_stub, reference=async_throughput,
    cases=_async_cases)


EXERCISES = [SHARE_CORES, ASYNC_THROUGHPUT]
