"""Notebook 05 (where the time goes): its exercises, 05.share_cores (the step of the event loop
:func:`tba_lab.lab.simulate.simulate`: n busy processes sharing c cores) and 05.async_throughput
(the loop's closed form), both referenced in :mod:`tba_lab.lab.simulate`; and the helpers that
set up, draw and print (the notebook's own cells train the runs, run the loop and compare).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tba_lab.lab.course import exercise, output_folder, show_figure
from tba_lab.lab.simulate import async_throughput, share_cores

SMOKE_NOTE = "SMOKE: start-up dominated (3 updates per run), these rates are not results"


@dataclass
class Setup:
    """The notebook's settings: ``out`` (figures, metrics.json, ``runs/<name>/``), ``smoke``
    (3 updates per run on B = 8 x K = 4), ``seed``, ``cores`` usable, ``run_seconds`` of
    training per measured run (start-up and evaluations on top), ``run_overrides`` every
    measured run adds, ``sim_seconds`` simulated per event-loop run."""
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

    smoke_run = {"training": {"max_steps": 3, "num_prompts_per_step": 8, "num_generations": 4},
                 "buffer": {"initial_fill": 32}}
    s = Setup(out=output_folder(output_dir), smoke=smoke, seed=seed, cores=available_cores(),
              run_seconds=60 if smoke else 40, run_overrides=smoke_run if smoke else {},
              sim_seconds=30 if smoke else 120)
    print(f"{s.cores} CPU cores; runs of {s.run_seconds} s of training"
          + (" (SMOKE: 3 updates each)" if smoke else "") + f"; 1-minute load average now "
          f"{os.getloadavg()[0]:.1f} (above {s.cores}: other programs compete for the cores)")
    return s


def show_time_split(s: Setup, split: dict) -> None:
    """Draw each run's time per update split into its parts (time_per_update.png) and print
    the table; ``split``: run name -> :func:`tba_lab.lab.timeline.time_per_update`."""
    from tba_lab.lab.timeline import format_time_per_update, plot_time_per_update

    axes = plot_time_per_update(split, title=f"this machine ({s.cores} cores)")
    show_figure(axes[0].figure, s.out / "time_per_update.png")
    print(format_time_per_update(split))
    if s.smoke:
        print(SMOKE_NOTE)


def plot_measured_and_simulated(s: Setup, name: str, sim, seconds: float = 4.0) -> None:
    """The last ``seconds`` of run ``name`` as logged (top) and of its simulation ``sim`` (a
    :class:`~tba_lab.lab.simulate.SimResult`, bottom), drawn alike by
    :func:`tba_lab.lab.timeline.plot_timeline` (timelines.png)."""
    import matplotlib.pyplot as plt

    from tba_lab.lab.timeline import plot_timeline

    fig, axes = plt.subplots(2, 1, figsize=(10, 4.6))
    plot_timeline(s.out / "runs" / name, ax=axes[0], last=seconds, legend=False,
                  title=f"{name}, measured: the last {seconds:.0f} s")
    plot_timeline(sim, ax=axes[1], last=seconds,
                  title=f"{name}, simulated from its durations: the last {seconds:.0f} s")
    show_figure(fig, s.out / "timelines.png")


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
    show_figure(fig, s.out / "searchers.png")


# ---------------------------------------------------------------- 05.share_cores
@exercise("05.share_cores",
          "processor sharing: advance n busy processes on c cores to the next event",
          share_cores, lambda: [
              (([0.3, 0.6, 0.9], 2, 10.0), {}),   # 3 processes on 2 cores: speed 2/3
              (([0.3, 0.6], 4, 10.0), {}),        # fewer processes than cores: speed 1, not 2
              (([0.5, 0.2, 0.4], 1, 10.0), {}),   # not sorted: keep the order
              (([0.3, 0.8], None, 0.1), {}),      # the run ends before any job does
              (([0.4, 0.4], 2, 10.0), {}),        # both end at once
              (([], 2, 5.0), {}),                 # nobody busy
              ((list(np.random.default_rng(5).uniform(0.1, 1.0, 5)), 3, 100.0), {})],
          rtol=1e-6, atol=1e-9)
def share_cores_stub(remaining, cores, until):
    """(dt, left): n busy processes, each at speed min(1, cores / n) (1 when cores is None), run
    until the first job of ``remaining`` (work left, seconds alone) ends or ``until``; left =
    each job's work after dt, in order. An empty ``remaining`` returns (until, [])."""
    # YOUR CODE HERE
    raise NotImplementedError


# ---------------------------------------------------------------- 05.async_throughput
@exercise("05.async_throughput",
          "async updates and batches per minute with n searchers on c cores, replay bound",
          async_throughput, lambda: [
              ((0.26, 0.09, 0.20), {"num_searchers": 1, "cores": 2}),   # fits, no bound
              ((0.26, 0.09, 0.20), {"num_searchers": 2, "cores": 2}),   # 3 busy on 2 cores
              ((0.26, 0.09, 0.20),                                      # short of data
               {"num_searchers": 1, "cores": 2, "max_replay_ratio": 1.0}),
              ((0.26, 0.09, 0.20), {"num_searchers": 2, "cores": 2, "max_replay_ratio": 1.0}),
              ((0.20, 0.05, 0.40),                                      # trainer-bound
               {"num_searchers": 2, "cores": 2, "max_replay_ratio": 1.0}),
              ((0.5, 0.1, 0.3), {"num_searchers": 7, "cores": None, "max_replay_ratio": 2.0}),
              ((2.0, 0.5, 1.0), {"num_searchers": 3, "cores": 8, "max_replay_ratio": 0.0})])
def async_throughput_stub(gen_seconds, score_seconds, update_seconds, num_searchers, cores,
                          max_replay_ratio=0.0):
    """(trainer updates per minute, searcher batches per minute) of n searchers and the trainer,
    all busy on ``cores`` cores (None: a device each), at most ``max_replay_ratio`` updates per
    batch delivered (0: no bound)."""
    # YOUR CODE HERE
    raise NotImplementedError
