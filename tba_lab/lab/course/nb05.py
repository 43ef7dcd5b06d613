"""Exercises of notebook 05 (scaling): closed-form throughput of the sync and async pipelines.

References live in :mod:`tba_lab.lab.simulate` (the simulator refines both with events, a queue
and the replay buffer).
"""
from __future__ import annotations

import numpy as np

from tba_lab.lab.course import Exercise
from tba_lab.lab.simulate import async_throughput, sync_updates_per_minute


# ---------------------------------------------------------------- 05.sync_throughput
def sync_throughput_stub(gen_seconds, score_seconds, update_seconds):
    """Trainer updates per minute when the searcher and the trainer strictly alternate.

    Args:
        gen_seconds, score_seconds: one searcher batch (generate, then score), seconds.
        update_seconds: one trainer update, seconds.
        (floats, or numpy arrays of the same shape)
    Returns:
        updates per minute (float or array).
    """
    # YOUR CODE HERE
    raise NotImplementedError


def sync_throughput_solution(gen_seconds, score_seconds, update_seconds):
    # one cycle: generate + score, then update; nothing overlaps
    cycle = gen_seconds + score_seconds + update_seconds
    return 60.0 / cycle


def _sync_cases():
    rng = np.random.default_rng(5)
    return [
        ((0.26, 0.09, 0.20), {}),
        ((1.0, 0.0, 1.0), {}),
        ((rng.uniform(0.1, 2, 6), rng.uniform(0, 0.5, 6), rng.uniform(0.05, 1, 6)), {}),
    ]


SYNC_THROUGHPUT = Exercise(
    name="05.sync_throughput",
    description="updates per minute of strict alternation: 60 / (gen + score + update)",
    stub=sync_throughput_stub, solution=sync_throughput_solution,
    reference=sync_updates_per_minute, cases=_sync_cases)


# ---------------------------------------------------------------- 05.async_throughput
def async_throughput_stub(gen_seconds, score_seconds, update_seconds, num_searchers, cores):
    """Steady-state rates of the asynchronous pipeline: n searchers and one trainer, all busy
    all the time, sharing ``cores`` cores (``cores=None``: one device per actor).

    Each actor slows down by s = max(1, (n + 1) / cores) (s = 1 when cores is None).
    Returns:
        (trainer updates per minute, searcher batches per minute), two floats:
        the trainer needs update_seconds * s per update; each of the n searchers needs
        (gen_seconds + score_seconds) * s per batch.
    """
    # YOUR CODE HERE
    raise NotImplementedError


def async_throughput_solution(gen_seconds, score_seconds, update_seconds, num_searchers, cores):
    busy = num_searchers + 1  # the searchers plus the trainer
    if cores is None or busy <= cores:
        slowdown = 1.0
    else:
        slowdown = busy / cores
    updates = 60.0 / (update_seconds * slowdown)
    batches = num_searchers * 60.0 / ((gen_seconds + score_seconds) * slowdown)
    return updates, batches


def _async_cases():
    return [
        ((0.26, 0.09, 0.20), {"num_searchers": 1, "cores": 2}),   # fits: no slowdown
        ((0.26, 0.09, 0.20), {"num_searchers": 2, "cores": 2}),   # 3 busy on 2 cores
        ((0.5, 0.1, 0.3), {"num_searchers": 7, "cores": 2}),
        ((0.5, 0.1, 0.3), {"num_searchers": 7, "cores": None}),   # one GPU each
        ((2.0, 0.5, 1.0), {"num_searchers": 3, "cores": 8}),
    ]


ASYNC_THROUGHPUT = Exercise(
    name="05.async_throughput",
    description="async updates and batches per minute with n searchers on c cores",
    stub=async_throughput_stub, solution=async_throughput_solution, reference=async_throughput,
    cases=_async_cases)


EXERCISES = [SYNC_THROUGHPUT, ASYNC_THROUGHPUT]
