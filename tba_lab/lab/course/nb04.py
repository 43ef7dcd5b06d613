"""Notebook 04 (asynchronous searchers): exercises.

Exercises
    04.flatten_weights  all parameters into one flat vector (what SharedWeights publishes)
    04.busy_fraction    fraction of a time window an actor is busy, from its intervals
    04.staleness_bound  largest staleness of a batch drawn in recency mode, given its arrival lag
"""
from __future__ import annotations

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector

from tba_lab.lab.course import Exercise
from tba_lab.lab.timeline import busy_fraction, fresh_staleness_max


# ------------------------------------------------------- 04.flatten_weights
def flatten_weights_stub(tensors):
    """Concatenate every tensor of the list ``tensors`` (any shapes, one dtype), each
    flattened in row-major order, into ONE 1-D tensor of sum(t.numel()) elements, in list order."""
    # YOUR CODE HERE
    raise NotImplementedError


def flatten_weights_solution(tensors):
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def _flatten_reference(tensors):
    return parameters_to_vector(tensors).detach()


def _flatten_cases():
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(11, 4), torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    return [
        (([torch.randn(3, 4, generator=g), torch.randn(5, generator=g)],), {}),
        (([torch.randn(2, 3, 4, generator=g)],), {}),
        (([torch.randn(1, generator=g), torch.randn(7, 2, generator=g), torch.randn(3, generator=g)],), {}),
        ((list(model.parameters()),), {}),  # a real module's parameters (require grad)
    ]


FLATTEN_WEIGHTS = Exercise(
    name="04.flatten_weights",
    description="parameters to one flat vector, as SharedWeights publishes them",
    stub=flatten_weights_stub, solution=flatten_weights_solution, reference=_flatten_reference,
    cases=_flatten_cases, rtol=0.0, atol=0.0)


# --------------------------------------------------------- 04.busy_fraction
def busy_fraction_stub(intervals, window):
    """Fraction (float in [0, 1]) of ``window = (t0, t1)`` covered by ``intervals``, a list of
    (start, end) pairs in seconds. Intervals may overlap (count the overlap once), touch, or
    reach outside the window (count only the part inside)."""
    # YOUR CODE HERE
    raise NotImplementedError


def busy_fraction_solution(intervals, window):
    t0, t1 = window
    # clip every interval to the window, drop the empty ones, sort by start
    clipped = sorted((max(s, t0), min(e, t1)) for s, e in intervals)
    clipped = [(s, e) for s, e in clipped if e > s]
    busy, covered_until = 0.0, t0
    for s, e in clipped:
        start = max(s, covered_until)  # skip what an earlier interval already covered
        if e > start:
            busy += e - start
            covered_until = e
    return busy / (t1 - t0)


def _busy_cases():
    rng = np.random.default_rng(0)
    starts = np.sort(rng.uniform(0, 20, size=25))
    rand = [(float(s), float(s + d)) for s, d in zip(starts, rng.uniform(0.1, 2.0, size=25))]
    return [
        (([(0.0, 1.0), (2.0, 3.0)], (0.0, 4.0)), {}),                  # 0.5
        (([(0.0, 2.0), (1.0, 3.0)], (0.0, 4.0)), {}),                  # overlap counted once
        (([(1.0, 2.0), (2.0, 3.0)], (0.0, 4.0)), {}),                  # touching
        (([(-5.0, 1.0), (3.0, 10.0)], (0.0, 4.0)), {}),                # reaching outside
        (([(0.0, 10.0), (2.0, 3.0)], (1.0, 5.0)), {}),                 # nested, window inside
        (([(5.0, 6.0)], (0.0, 4.0)), {}),                              # entirely outside
        (([], (0.0, 1.0)), {}),                                        # idle
        (([(2.0, 3.0), (0.5, 1.5)], (0.0, 4.0)), {}),                  # not sorted
        ((rand, (2.0, 18.0)), {}),
    ]


BUSY_FRACTION = Exercise(
    name="04.busy_fraction",
    description="fraction of a window covered by (possibly overlapping) busy intervals",
    stub=busy_fraction_stub, solution=busy_fraction_solution, reference=busy_fraction,
    cases=_busy_cases)


# ------------------------------------------------------- 04.staleness_bound
def staleness_bound_stub(arrival_lag, k):
    """Largest staleness a generation batch can have when the trainer draws it in recency mode.

    Versions are multiples of k (weights are published when the update count reaches a multiple
    of k). A batch generated with version v arrives when the trainer has done v + arrival_lag
    updates; it stays "refreshed since the last sync" until the update count reaches the next
    multiple of k, so the last update that can draw it in recency mode begins one update before
    that. Return that update count minus v. Inputs are integer numpy arrays of one shape
    (or plain ints); return the same shape."""
    # YOUR CODE HERE
    raise NotImplementedError


def staleness_bound_solution(arrival_lag, k):
    a = np.asarray(arrival_lag)
    k = np.asarray(k)
    v = 0  # versions are multiples of k: the answer does not depend on which one, take v = 0
    received = v + a
    next_sync = (received // k + 1) * k  # first multiple of k strictly after the arrival
    last_recency_update = next_sync - 1
    return last_recency_update - v


def _bound_cases():
    a, k = np.meshgrid(np.arange(0, 13), np.arange(1, 6))
    return [((a.reshape(-1), k.reshape(-1)), {}),
            ((np.array([0, 1, 2, 3]), np.array([1, 1, 1, 1])), {}),   # k = 1: staleness = lag
            ((np.array([0, 3, 4, 7, 8]), np.array([4, 4, 4, 4, 4])), {}),
            ((np.array([5]), np.array([3])), {})]


STALENESS_BOUND = Exercise(
    name="04.staleness_bound",
    description="largest staleness of a batch drawn in recency mode, given arrival lag and k",
    stub=staleness_bound_stub, solution=staleness_bound_solution, reference=fresh_staleness_max,
    cases=_bound_cases, rtol=0.0, atol=0.0)


EXERCISES = [FLATTEN_WEIGHTS, BUSY_FRACTION, STALENESS_BOUND]
