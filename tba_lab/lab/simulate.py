"""Event simulators of the searcher / trainer timeline, and the closed form they refine.

Why: before buying machines or starting a long run, estimate what more searchers, a longer sync
period k or a bigger queue do to trainer updates per minute and to staleness.

Two simulators, both from a few measured durations (:func:`run_timings` reads them from a run
directory):

* :func:`pipeline`, the event loop on one screen that notebook 05 shows and the student runs
  with their own processor-sharing step (:func:`share_cores`): searchers, queues, the buffer as
  a list of versions, the trainer with its initial fill and replay bound, n + 1 processes
  sharing c cores. Its closed form is :func:`async_throughput`.
* :func:`simulate`, which replays the kit's loop (``tba_lab.trainer.train``,
  ``tba_lab.actors.searcher``) in more detail (its docstring lists every input):

  * a searcher pulls the newest weights, generates B x K responses (``gen_seconds``), scores
    them (``score_seconds``), and puts the batch on its own queue of ``queue_size``; with the
    queue full it waits, idle, before generating, as the kit's searcher does;
  * the trainer drains the queues into a real :class:`~tba_lab.buffer.ReplayBuffer` of fake
    rollouts; async, once ``initial_fill`` rollouts are in, it samples and updates
    (``update_seconds``); sync, it trains on exactly the batch of the current version. Every
    k-th update publishes weights;
  * the reference pass (:data:`REFERENCE_PASSES`) runs in the trainer or in each searcher;
  * the busy actors' torch threads share ``cores`` (processor sharing), or one GPU time-sliced
    (``gpu_slowdown``), and scale with threads by Amdahl's law (:func:`actor_rates`,
    :func:`amdahl_speedup`).

Durations are wall-clock seconds of one actor running alone with the thread count it was
measured with (``timing_threads`` says how they were measured). Departures: constant durations
unless ``jitter``; ideal processor sharing, with memory bandwidth and caches not modelled; one
slowdown factor per extra process on a GPU; messages and weight copies free unless given; all
responses distinct unless ``unique_fraction`` < 1 (a de-duplicating buffer). Calibration on a
machine's runs and predictions for the automatic placement: :mod:`tba_lab.lab.predict`.

Also here: :func:`measure_run` (train and read the timings), :func:`simulate_run` (simulate a
measured run), :func:`plot_sim_timeline` and :func:`format_table`.
"""
from __future__ import annotations

import json
import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tba_lab.lab.timeline import trainer_seconds
from tba_lab.runlog import read_jsonl_rows

# ----------------------------------------------------------------------------------------------
# What a simulation returns
# ----------------------------------------------------------------------------------------------


@dataclass
class SimResult:
    """What :func:`simulate` predicts.

    Attributes:
        duration: simulated training seconds (the trainer's budget).
        updates: trainer updates done within ``duration``.
        updates_per_minute: ``60 * updates / duration`` (initial fill included, like
            ``summary.json``'s ``updates_per_minute``).
        steady_updates_per_minute: rate between the first and the last update (no warm-up).
        batches: generation batches the trainer received (drained from the queue).
        batches_per_minute: ``60 * batches / duration``.
        staleness: (N,) int array, the staleness of every rollout the trainer trained on
            (trainer updates before this one minus the rollout's version).
        intervals: actor name ("trainer", "searcher 0", ...) -> list of (start, end, what),
            seconds since training began; what is "update", "generate", "score", "reference"
            or "blocked".
        blocked_fraction: per searcher, fraction of its time blocked on a full queue.
        updates_begun: updates begun within ``duration`` (``updates`` plus the one in progress
            at the end, if any): what the kit counts, since its loop finishes an update begun
            before the deadline.
        trainer_busy_fraction: fraction of the time from the first update's start to the end
            that the trainer worked (update or reference pass), NaN before any update.
            (``update / (update + wait)`` per logged update leaves the reference pass out of
            both terms; both say how little the trainer waits.)
        trainer_reference_seconds: seconds the trainer spent on reference passes in all.
        trainer_update_fraction: as ``trainer_busy_fraction``, counting updates only
            (``bench/scaling_check.py``'s ``trainer_busy``: update / (update + wait + reference)).
    """
    duration: float
    updates: int
    updates_per_minute: float
    steady_updates_per_minute: float
    batches: int
    batches_per_minute: float
    staleness: np.ndarray
    intervals: dict = field(default_factory=dict)
    blocked_fraction: list = field(default_factory=list)
    updates_begun: int = 0
    trainer_busy_fraction: float = float("nan")
    trainer_reference_seconds: float = 0.0
    trainer_update_fraction: float = float("nan")

    @property
    def staleness_mean(self) -> float:
        return float(self.staleness.mean()) if self.staleness.size else float("nan")

    @property
    def staleness_max(self) -> int:
        return int(self.staleness.max()) if self.staleness.size else 0

    def row(self) -> dict:
        """The headline numbers as a plain dict (for tables)."""
        return {"updates_per_minute": round(self.updates_per_minute, 1),
                "steady_updates_per_minute": round(self.steady_updates_per_minute, 1),
                "batches_per_minute": round(self.batches_per_minute, 1),
                "staleness_mean": round(self.staleness_mean, 2), "staleness_max": self.staleness_max}


# ----------------------------------------------------------------------------------------------
# The pipeline in one screen (notebook 05): processor sharing, the event loop, its closed form
# ----------------------------------------------------------------------------------------------


def share_cores(remaining: list[float], cores: int | None, until: float) -> tuple[float, list[float]]:
    """Advance the busy processes to the next event when they share ``cores`` cores.

    Processor sharing: with n busy processes on c cores each runs at speed min(1, c / n) of a
    core (one core at most: a process measured alone on one core goes no faster with more);
    ``cores=None`` gives every process a device of its own (speed 1).

    Args:
        remaining: the work left in each busy process's current job, in seconds of that job
            running alone (all > 0; may be empty).
        cores: cores shared by the busy processes, or None.
        until: the longest step allowed, wall seconds (what is left of the run).

    Returns:
        (dt, left): dt = wall seconds until the first job ends, or ``until`` if that comes
        first; left = each job's work remaining after dt, in the order of ``remaining``.
    """
    if not remaining:
        return until, []
    speed = 1.0 if cores is None else min(1.0, cores / len(remaining))
    dt = min(min(remaining) / speed, until)
    return dt, [r - dt * speed for r in remaining]


def pipeline(gen_seconds: float, update_seconds: float, num_searchers: int = 1,
             cores: int | None = None, *, mode: str = "async", duration: float = 60.0,
             initial_fill: int = 1, max_replay_ratio: float = 1.0, queue_size: int = 1,
             step=share_cores) -> SimResult:
    """Searchers -> queues -> replay buffer -> trainer, one job at a time (a discrete-event loop).

    Each searcher pulls the newest weights (version = the trainer's updates so far, sync period
    k = 1), generates and scores one batch of B x K rows (``gen_seconds``) and puts it on its
    queue; it starts the next batch only while its queue holds fewer than ``queue_size`` batches.
    The free trainer drains every queue into its buffer; in ``"async"`` mode it then updates
    (``update_seconds``, the reference pass included) once the buffer holds ``initial_fill``
    batches, unless that update would train on more than ``max_replay_ratio`` rows per row
    received (0: no bound); in ``"sync"`` mode it updates only on the batch of its own version,
    and the one searcher waits for new weights before the next batch. The busy processes share
    ``cores`` through ``step`` (:func:`share_cores`, or a student's version of it).
    Left out: start-up, the sync period, the sampler's choice (the trainer's batch is taken as
    the newest received: staleness = updates so far - its version), hand-over latency, and
    variation between batches. :func:`simulate` models them, with its own loop.

    Returns:
        :class:`SimResult` (``blocked_fraction`` empty; ``intervals`` has "generate" and "update").
    """
    if not (gen_seconds > 0 and update_seconds > 0):  # also NaN: a run with no batch or update
        raise ValueError(f"gen_seconds={gen_seconds}, update_seconds={update_seconds}: must be > 0")
    sync = mode == "sync"
    names = ["trainer"] + [f"searcher {i}" for i in range(1 if sync else num_searchers)]
    job = {a: None for a in names}        # [kind, start, work left] of each actor; None = idle
    queued = {a: [] for a in names[1:]}   # versions of the batches in each searcher's queue
    version = {a: -1 for a in names[1:]}  # the version each searcher generates (or last did)
    received: list[int] = []              # versions of the batches drained into the buffer
    intervals = {a: [] for a in names}
    t, updates, staleness, ends = 0.0, 0, [], []

    def start_jobs():
        """Every idle actor starts its next job if the rules let it."""
        if job["trainer"] is None:
            for a in names[1:]:  # drain the queues: their searchers have room again
                received.extend(queued[a])
                queued[a].clear()
            if sync:
                ready = bool(received) and received[-1] == updates
            else:
                ready = len(received) >= initial_fill and (
                    not max_replay_ratio or updates + 1 <= max_replay_ratio * len(received))
            if ready:
                staleness.append(updates - max(received))
                job["trainer"] = ["update", t, update_seconds]
        for a in names[1:]:
            if job[a] is None and len(queued[a]) < queue_size and not (sync and version[a] == updates):
                version[a] = updates  # pull the newest weights
                job[a] = ["generate", t, gen_seconds]

    start_jobs()
    while t < duration:
        busy = [a for a in names if job[a] is not None]
        dt, left = step([job[a][2] for a in busy], cores, duration - t)
        t += dt
        for a, work in zip(busy, left):
            job[a][2] = work
            if work <= 1e-9:  # this job ended at t
                intervals[a].append((job[a][1], t, job[a][0]))
                job[a] = None
                if a == "trainer":
                    updates += 1
                    ends.append(t)
                else:
                    queued[a].append(version[a])
        start_jobs()
    steady = (60.0 * (len(ends) - 1) / (ends[-1] - ends[0]) if len(ends) >= 2 else float("nan"))
    return SimResult(duration=duration, updates=updates,
                     updates_per_minute=60.0 * updates / duration,
                     steady_updates_per_minute=steady, batches=len(received),
                     batches_per_minute=60.0 * len(received) / duration,
                     staleness=np.array(staleness, dtype=np.int64), intervals=intervals)


def async_throughput(gen_seconds: float, score_seconds: float, update_seconds: float,
                     num_searchers: int, cores: int | None,
                     max_replay_ratio: float = 0.0) -> tuple[float, float]:
    """Steady-state rates of the asynchronous pipeline with n searchers on c cores, every
    process busy all the time (the closed form of :func:`pipeline`).

    n + 1 processes share c cores, so each slows down by ``s = max(1, (n + 1) / c)``
    (``cores=None``: one device per process, s = 1). The searchers deliver
    ``n * 60 / ((gen + score) * s)`` batches per minute; the trainer could make
    ``60 / (update * s)`` updates per minute, but with a replay bound rho > 0
    (``buffer.max_replay_ratio``; one update trains on one batch's worth of rows) at most rho
    per batch delivered.

    Returns:
        (trainer updates per minute, searcher batches per minute, all searchers together).

    Assumes no searcher ever waits on a full queue: when the trainer is the slower side they
    do, which frees cores; :func:`pipeline` and :func:`simulate` model it.
    """
    busy = num_searchers + 1
    slowdown = 1.0 if cores is None else max(1.0, busy / cores)
    updates = 60.0 / (update_seconds * slowdown)
    batches = 60.0 * num_searchers / ((gen_seconds + score_seconds) * slowdown)
    if max_replay_ratio:
        updates = min(updates, max_replay_ratio * batches)
    return updates, batches


# ----------------------------------------------------------------------------------------------
# The full simulator: start-up, sync period, the real buffer's sampler, threads, GPUs
# ----------------------------------------------------------------------------------------------


REFERENCE_PASSES = ("none", "trainer_drained", "trainer_sampled", "searcher")
"""Where :func:`simulate` puts the reference pass (``reference_pass``):

* ``"none"``: nowhere (no loss reads it, or its cost is already inside the given durations);
* ``"trainer_drained"``: the trainer scores every batch it drains from the queues before it
  enters the buffer, ``ref_seconds`` per batch (the placement of the recorded GPU-machine
  runs, :mod:`tba_lab.lab.recorded`, so :mod:`tba_lab.lab.predict` can calibrate on them);
* ``"trainer_sampled"``: the trainer scores the rows of the batch it samples that were never
  scored, just before the loss, each row at most once (``async.reference_pass: trainer``,
  :mod:`tba_lab.actors.placement`): at most one batch's worth of work per update, whatever the
  number of searchers;
* ``"searcher"``: each searcher scores its own batch after generating it (its job grows by
  ``ref_seconds``).
"""

JOB_KINDS = ("handover", "generate", "score", "reference", "update")
"""Kinds of work in :func:`simulate`'s jobs. ``handover`` is a searcher's time per batch outside
generating and scoring (noticing room in its queue, pulling weights, sending the batch): mostly
waiting and inter-process copies, so it neither slows nor is slowed by the other processes."""


def amdahl_speedup(threads: float, parallel_fraction: float) -> float:
    """Speed-up of a job on ``threads`` threads over 1 thread when a fraction
    ``parallel_fraction`` (p, in [0, 1]) of its 1-thread time divides evenly among threads and
    the rest does not (Amdahl's law): ``1 / ((1 - p) + p / threads)``.

    A model, not a measurement: real torch ops also lose to thread start-up and memory
    bandwidth, so the curve flattens earlier for small matrices than p alone says.

    Raises:
        ValueError: ``threads`` < 1 or ``parallel_fraction`` outside [0, 1].
    """
    if threads < 1:
        raise ValueError(f"threads={threads}: must be >= 1")
    if not 0.0 <= parallel_fraction <= 1.0:
        raise ValueError(f"parallel_fraction={parallel_fraction}: must be in [0, 1]")
    return 1.0 / ((1.0 - parallel_fraction) + parallel_fraction / threads)


def actor_rates(busy: list[tuple[str, int]], cores: int | None = None,
                timing_threads: int | None = None, parallel_fraction: float | dict = 0.0,
                gpu_slowdown: float | None = None) -> list[float]:
    """How fast each busy actor works, as a multiple of the speed its durations were measured at.

    Args:
        busy: one (job kind, threads) per busy actor; a kind from :data:`JOB_KINDS`.
        cores: CPU cores all actors share; None = a device each (no CPU contention).
        timing_threads: torch threads the durations were measured with (t0); None = each
            actor's own count (no thread scaling).
        parallel_fraction: Amdahl p of every kind, or {kind: p} (missing kinds: 0).
        gpu_slowdown: None = no GPU; else all busy actors share one GPU by time-slicing and
            each runs ``1 + gpu_slowdown * (busy - 1)`` times slower.

    Returns:
        one rate per entry of ``busy`` (1.0 = as measured; always 1.0 for ``"handover"``, which
        also does not count as busy for the others), the product of

        * processor sharing: the busy actors' threads all want a core; with D threads in all on
          ``cores`` cores each thread gets ``min(1, cores / D)`` of one (an actor with t
          threads counts t: torch's OpenMP threads spin between parallel regions and hold
          their cores, so idle threads are not given away; the kernel's scheduler is taken as
          ideal);
        * thread scaling: ``S(t) / S(t0)`` with :func:`amdahl_speedup`'s S for the job's kind;
        * GPU time-slicing, as above (a linear slowdown per extra busy process; real GPUs
          overlap small kernels of several processes only partly, and the factor is one
          number for every kind of job).
    """
    def p_of(kind: str) -> float:
        return float(parallel_fraction.get(kind, 0.0) if isinstance(parallel_fraction, dict)
                     else parallel_fraction)

    working = [(kind, t) for kind, t in busy if kind != "handover"]
    demand = sum(t for _, t in working)
    share = 1.0 if cores is None or demand <= cores else cores / demand
    gpu = 1.0 if gpu_slowdown is None else 1.0 / (1.0 + gpu_slowdown * max(0, len(working) - 1))
    rates = []
    for kind, t in busy:
        if kind == "handover":
            rates.append(1.0)
            continue
        t0 = t if timing_threads is None else timing_threads
        p = p_of(kind)
        rates.append(share * gpu * amdahl_speedup(t, p) / amdahl_speedup(t0, p))
    return rates


class _Actor:
    """One simulated actor: its current job is a list of (what, remaining work seconds)."""

    def __init__(self, name: str, threads: int = 1):
        self.name = name
        self.threads = threads
        self.phases: list[list] = []  # [[what, remaining], ...]; empty = not working
        self.phase_start = 0.0
        self.blocked_since: float | None = None
        self.version = -1    # searcher: version of the weights it holds
        self.last_generated = -1
        self.update_job = False  # trainer: the current job ends in an update

    @property
    def busy(self) -> bool:
        return bool(self.phases)


def simulate(gen_seconds: float, score_seconds: float, update_seconds: float, *,
             num_searchers: int = 1, sync_period: int = 1, queue_size: int = 1,
             cores: int | None = 2, mode: str = "async", duration: float = 60.0,
             max_steps: int = 0, initial_fill: int = 256, num_prompts: int = 16,
             num_generations: int = 8, recency_prob: float = 0.8, inv_temp: float = 0.0,
             max_prompts: int = 256, capacity_per_prompt: int = 32, unique_fraction: float = 1.0,
             max_replay_ratio: float = 0.0,
             overhead_seconds: float = 0.0, publish_seconds: float = 0.0,
             searcher_start_seconds: float = 0.0, jitter: float = 0.0,
             num_train_prompts: int = 20000, seed: int = 0,
             ref_seconds: float = 0.0, reference_pass: str = "none",
             ref_fixed_fraction: float = 0.0, trainer_threads: int = 1,
             searcher_threads: int = 1, timing_threads: int | None = None,
             parallel_fraction: float | dict = 0.0,
             gpu_slowdown: float | None = None, handover_seconds: float = 0.0) -> SimResult:
    """Simulate one training run's timeline; see the module docstring for the model.

    Args:
        gen_seconds, score_seconds: one searcher batch (B x K responses), seconds, actor alone
            (``score_seconds``: rewards, and the reference pass only if it is not modelled
            apart with ``reference_pass``).
        update_seconds: one trainer update, seconds, actor alone (without the reference pass
            when ``reference_pass`` models it).
        num_searchers: n searcher processes (sync mode: 1).
        sync_period: k, publish weights every k updates (sync mode: 1).
        queue_size: batches each searcher's queue holds; at that many it waits to start.
        cores: CPU cores (or devices) shared by all actors; None = one each (no contention).
        mode: "async" or "sync".
        duration: training seconds to simulate; ``max_steps`` > 0 also stops at that many updates.
        initial_fill: rollouts in the buffer before the first async update.
        num_prompts, num_generations: B and K.
        recency_prob, inv_temp, max_prompts, capacity_per_prompt: the buffer's settings.
        max_replay_ratio: rho, async: the trainer waits rather than train on more than rho rows
            per row generated (``buffer.max_replay_ratio``); 0 = it never waits for data (the
            default here: the course's trainer that replays whenever it is free).
        unique_fraction: fraction of each group's K responses that are distinct token sequences;
            below 1.0 the simulated buffer de-duplicates (``buffer.dedup: true``) and keeps one
            copy of each; 1.0 = all distinct.
        overhead_seconds: trainer work per update outside ``update_seconds`` (draining, sampling,
            logging; in sync mode also the hand-over latency: publish, pull, message);
            ``run_timings`` estimates it.
        publish_seconds: trainer time per weight publication (k matters when this is large).
        searcher_start_seconds: when searchers start working, seconds since training began
            (process spawn and model load; negative = before the trainer's budget starts).
        jitter: relative standard deviation of every job's duration (0 = constant).
        num_train_prompts: size of the prompt set each searcher walks through (shuffled).
        seed: seeds the buffer, the prompt order and the jitter.
        ref_seconds: the reference pass over one batch of B x K rows, seconds, actor alone
            (measured with ``timing_threads`` threads, like the other durations).
        reference_pass: who does it and on which rows, one of :data:`REFERENCE_PASSES`
            (default "none": not modelled apart, part of ``score_seconds``).
        ref_fixed_fraction: for "trainer_sampled", the part of ``ref_seconds`` that does not
            shrink with fewer rows (one pass over r rows costs ``ref_seconds * (f + (1 - f) *
            r / (B*K))``): about 0 on a CPU (work grows with rows), near 1 on a GPU that a
            small model leaves idle (launch-bound).
        trainer_threads, searcher_threads: torch threads of each process (processor sharing
            counts them; with ``timing_threads`` they also scale the durations).
        timing_threads: threads the durations were measured with; None = each process's own
            (no scaling).
        parallel_fraction: Amdahl p for thread scaling, one number or {kind: p} for the kinds
            of :data:`JOB_KINDS` (see :func:`actor_rates`).
        gpu_slowdown: None = processes on CPU cores only; a number = all share one GPU, each
            slowed by that fraction per other busy process (:func:`actor_rates`).
        handover_seconds: each searcher job's time before it generates, seconds: noticing room
            in its queue (``wait_for_room`` sleeps 1 to 10 ms between checks), pulling the
            weights and, folded in here, the batch's trip to the trainer; not slowed by, and
            not slowing, the others (kind ``"handover"``). 0 = instant.

    Returns:
        :class:`SimResult`.

    Raises:
        ValueError: an argument out of range.
    """
    from tba_lab.buffer import ReplayBuffer, Rollout

    if mode not in ("async", "sync"):
        raise ValueError(f"mode={mode!r}: choose async or sync")
    if not all(math.isfinite(x) for x in (gen_seconds, score_seconds, update_seconds, ref_seconds,
                                          handover_seconds)) or handover_seconds < 0:
        raise ValueError(f"durations must be finite numbers, got gen={gen_seconds}, "
                         f"score={score_seconds}, update={update_seconds}, ref={ref_seconds}, "
                         f"handover={handover_seconds} (a run with no batches or no updates has "
                         "no medians)")
    if min(gen_seconds, score_seconds, update_seconds, ref_seconds) < 0 \
            or gen_seconds + score_seconds <= 0 or update_seconds <= 0:
        raise ValueError("durations must be >= 0, with gen + score > 0 and update > 0")
    if num_searchers < 1 or sync_period < 1 or queue_size < 1:
        raise ValueError("num_searchers, sync_period and queue_size must be >= 1")
    if cores is not None and cores <= 0:
        raise ValueError(f"cores={cores}: give a positive number or None")
    if not 0 < unique_fraction <= 1:
        raise ValueError(f"unique_fraction={unique_fraction}: must be in (0, 1]")
    if reference_pass not in REFERENCE_PASSES:
        raise ValueError(f"reference_pass={reference_pass!r}: choose one of {REFERENCE_PASSES}")
    if not 0.0 <= ref_fixed_fraction <= 1.0:
        raise ValueError(f"ref_fixed_fraction={ref_fixed_fraction}: must be in [0, 1]")
    if trainer_threads < 1 or searcher_threads < 1 or (timing_threads is not None
                                                        and timing_threads < 1):
        raise ValueError("trainer_threads, searcher_threads and timing_threads must be >= 1")
    if gpu_slowdown is not None and not gpu_slowdown >= 0:
        raise ValueError(f"gpu_slowdown={gpu_slowdown}: give a number >= 0 or None")
    actor_rates([(k, 1) for k in JOB_KINDS], parallel_fraction=parallel_fraction)  # p in [0, 1]
    sync = mode == "sync"
    if sync:
        num_searchers, sync_period = 1, 1
    rng = np.random.default_rng(seed)
    B, K = num_prompts, num_generations
    n_unique = max(1, round(unique_fraction * K))
    buffer = ReplayBuffer(capacity_per_prompt, recency_prob, inv_temp, seed=seed,
                          max_prompts=max_prompts or None, dedup=unique_fraction < 1)
    streams = [np.random.default_rng(seed * 1000 + i + 1).permutation(num_train_prompts)
               for i in range(num_searchers)]
    stream_pos = [0] * num_searchers
    unscored = None if reference_pass == "trainer_sampled" else [0.0]

    def work(seconds: float) -> float:
        return max(1e-6, seconds * (1.0 + jitter * rng.standard_normal())) if jitter else seconds

    def make_batch(i: int, version: int) -> list:
        rows = []
        for _ in range(B):
            pid = int(streams[i][stream_pos[i] % num_train_prompts])
            stream_pos[i] += 1
            for j in range(K):
                rows.append(Rollout(prompt_id=pid, prompt_ids=[0], response_ids=[j % n_unique],
                                    reward=float(rng.random() < 0.3), ref_token_logps=unscored,
                                    behaviour_token_logps=[0.0], version=version))
        return rows

    trainer = _Actor("trainer", trainer_threads)
    searchers = [_Actor(f"searcher {i}", searcher_threads) for i in range(num_searchers)]
    intervals: dict[str, list] = {a.name: [] for a in [trainer] + searchers}
    blocked_time = [0.0] * num_searchers
    queue: deque = deque()
    published = 0          # version the shared weights hold
    step = 0
    batches = 0
    pending_ref = 0.0      # trainer_drained: reference work of drained batches not yet done
    staleness: list[np.ndarray] = []
    update_ends: list[float] = []
    update_starts: list[float] = []
    fresh: list | None = None  # sync: the batch of the current version
    t = min(0.0, searcher_start_seconds)
    started = False

    def start_searcher(i: int, now: float) -> None:
        s = searchers[i]
        if sync and published == s.last_generated:
            return  # strict alternation: wait for the next version
        s.version = published
        s.phases = [["generate", work(gen_seconds)], ["score", work(score_seconds)]]
        if handover_seconds > 0:
            s.phases.insert(0, ["handover", handover_seconds])
        if reference_pass == "searcher":
            s.phases.append(["reference", work(ref_seconds)])
        s.phase_start = now

    def start_or_wait(i: int, now: float) -> None:
        """Start searcher i's next job if its queue has room, else block it until it has."""
        if sum(1 for m in queue if m[0] == i) < queue_size:
            start_searcher(i, now)
        else:
            searchers[i].blocked_since = now

    def finish_searcher(i: int, now: float) -> None:
        s = searchers[i]
        s.last_generated = s.version
        queue.append((i, s.version, make_batch(i, s.version)))  # room was checked at the start
        start_or_wait(i, now)

    def trainer_loop(now: float) -> None:
        """The trainer is free at ``now``: drain the queue (scoring what it drains, for
        "trainer_drained"), then start an update if it can (scoring the sampled rows never
        scored, for "trainer_sampled"); a drain it cannot train on yet is still scored."""
        nonlocal batches, fresh, pending_ref
        while queue:
            i, version, rows = queue.popleft()
            buffer.add(rows, copy=False)  # rows made for the buffer alone
            batches += 1
            if reference_pass == "trainer_drained":
                pending_ref += ref_seconds  # one pass per message, as Feed.next_batch
            if sync and version == step:
                fresh = rows
        for i, s in enumerate(searchers):  # the queues have room again: blocked searchers start
            if s.blocked_since is not None:
                intervals[s.name].append((s.blocked_since, now, "blocked"))
                blocked_time[i] += now - s.blocked_since
                s.blocked_since = None
                start_searcher(i, now)
        batch = None
        if sync:
            batch, fresh = fresh, None
        elif not (len(buffer) < max(initial_fill, 1) or (
                max_replay_ratio and step + 1 > max_replay_ratio * batches)):
            batch = buffer.sample(B, K)  # else: the fill, or the replay bound
        phases = []
        if pending_ref > 0:
            phases.append(["reference", work(pending_ref)])
            pending_ref = 0.0
        if batch is not None:
            staleness.append(np.array(ReplayBuffer.staleness(batch, step), dtype=np.int64))
            if reference_pass == "trainer_sampled":
                todo = {id(r): r for r in batch if r.ref_token_logps is None}
                for r in todo.values():
                    r.ref_token_logps = [0.0]  # the buffer's own object: scored once
                if todo:
                    phases.append(["reference", work(ref_seconds * (
                        ref_fixed_fraction + (1.0 - ref_fixed_fraction) * len(todo) / (B * K)))])
            publishes = (step + 1) % sync_period == 0
            phases.append(["update", work(update_seconds) + overhead_seconds
                           + (publish_seconds if publishes else 0.0)])
            update_starts.append(now)
        trainer.phases = phases
        trainer.update_job = batch is not None
        trainer.phase_start = now

    if searcher_start_seconds <= 0:
        for i in range(num_searchers):
            start_searcher(i, t)
    while True:
        if t >= duration or (max_steps and step >= max_steps):
            break
        # who works, and how fast
        actors = [a for a in [trainer] + searchers if a.busy]
        rates = actor_rates([(a.phases[0][0], a.threads) for a in actors], cores, timing_threads,
                            parallel_fraction, gpu_slowdown)
        # next event: a phase ends, the searchers start, or the trainer's budget starts
        candidates = [t + a.phases[0][1] / r for a, r in zip(actors, rates)]
        if searcher_start_seconds > t:
            candidates.append(searcher_start_seconds)
        if not started:
            candidates.append(0.0)
        if not candidates:
            break  # nothing can ever happen again (e.g. sync deadlock); should not occur
        t_next = min(min(candidates), duration)
        dt = t_next - t
        for a, r in zip(actors, rates):
            a.phases[0][1] -= dt * r
        t = t_next
        if t >= duration:
            break
        if not started and t >= 0.0:
            started = True
            if not trainer.busy:
                trainer_loop(t)
        if searcher_start_seconds > 0 and abs(t - searcher_start_seconds) < 1e-12:
            for i, s in enumerate(searchers):
                if not s.busy and s.blocked_since is None:
                    start_or_wait(i, t)
        for i, s in enumerate(searchers):
            if s.busy and s.phases[0][1] <= 1e-9:
                what = s.phases.pop(0)[0]
                intervals[s.name].append((s.phase_start, t, what))
                s.phase_start = t
                if not s.phases:
                    finish_searcher(i, t)
                    if started and not trainer.busy:
                        trainer_loop(t)  # a waiting trainer sees the message at once
        if trainer.busy and trainer.phases[0][1] <= 1e-9:
            what = trainer.phases.pop(0)[0]
            intervals["trainer"].append((trainer.phase_start, t, what))
            trainer.phase_start = t
            if not trainer.phases:
                if trainer.update_job:
                    step += 1
                    update_ends.append(t)
                    if step % sync_period == 0:
                        published = step
                        buffer.mark_sync()
                        for i, s in enumerate(searchers):  # sync: a waiting searcher wakes up
                            if (not s.busy and s.blocked_since is None
                                    and searcher_start_seconds <= t):
                                start_or_wait(i, t)
                trainer_loop(t)
        if started and not trainer.busy and queue:
            trainer_loop(t)
    end = t
    for i, s in enumerate(searchers):
        if s.blocked_since is not None:
            intervals[s.name].append((s.blocked_since, end, "blocked"))
            blocked_time[i] += end - s.blocked_since
    for a in [trainer] + searchers:  # close the job in progress
        if a.busy:
            intervals[a.name].append((a.phase_start, end, a.phases[0][0]))
    span = max(end, 1e-9)
    steady = (60.0 * (len(update_ends) - 1) / (update_ends[-1] - update_ends[0])
              if len(update_ends) >= 2 and update_ends[-1] > update_ends[0] else float("nan"))
    busy_fraction = update_fraction = float("nan")
    if update_starts and end > update_starts[0]:
        t0 = update_starts[0]
        spans = [(min(e, end) - max(s, t0), w) for s, e, w in intervals["trainer"] if e > t0]
        busy_fraction = sum(d for d, _ in spans) / (end - t0)
        update_fraction = sum(d for d, w in spans if w == "update") / (end - t0)
    ref_spent = sum(e - s for s, e, w in intervals["trainer"] if w == "reference")
    return SimResult(duration=span, updates=step, updates_per_minute=60.0 * step / span,
                     steady_updates_per_minute=steady, batches=batches,
                     batches_per_minute=60.0 * batches / span,
                     staleness=np.concatenate(staleness) if staleness else np.zeros(0, np.int64),
                     intervals=intervals,
                     blocked_fraction=[b / (span - min(0.0, searcher_start_seconds))
                                       for b in blocked_time],
                     updates_begun=step + int(trainer.busy and trainer.update_job),
                     trainer_busy_fraction=busy_fraction,
                     trainer_reference_seconds=ref_spent,
                     trainer_update_fraction=update_fraction)


# ----------------------------------------------------------------------------------------------
# Measured inputs
# ----------------------------------------------------------------------------------------------


def _overhead(metrics: list[dict], mode: str, max_replay_ratio: float) -> float:
    """Per-update trainer time outside ``update_seconds``, from ``metrics.jsonl``'s
    ``wait_seconds`` (updates after the first, which waits for the initial fill).

    Sync runs: 0 (their wait is the searcher's batch, which the simulator models). Async runs
    without a replay bound: the median wait. With a bound (``buffer.max_replay_ratio`` > 0) a
    wait also holds time spent waiting for data, which the simulator models itself, so the
    median would count that time twice. The smallest wait bounds the overhead every update
    pays, so it is used.
    """
    waits = [m["wait_seconds"] for m in metrics[1:]]
    if mode != "async" or not waits:
        return 0.0
    return float(min(waits)) if max_replay_ratio > 0 else float(np.median(waits))


def run_timings(run_dir: str | Path) -> dict:
    """The simulator's inputs and the measured outcome of one ``train()`` run directory.

    Reads ``config.yaml``, ``metrics.jsonl``, ``searchers.jsonl`` and ``summary.json``.

    Returns:
        a dict with the keys of notebook 04's ``measured.json`` rows (``mode``,
        ``sync_period``, ``num_searchers``, ``gen_seconds``, ``score_seconds``,
        ``update_seconds`` (medians, seconds; the trainer's reference pass, when it does it,
        counts in ``update_seconds``), ``updates_per_minute`` (``summary.json``'s:
        updates over ``wall_seconds``, which also counts stopping the searchers),
        ``staleness_mean``, ``staleness_max``) plus ``wall_seconds``, ``budget_seconds``
        (``max_minutes`` * 60, or the last update's time when ``max_steps`` ended the run),
        ``updates_in_budget`` and ``budget_updates_per_minute`` (updates that ended within
        the budget, per minute of it), ``max_steps``,
        ``steady_updates_per_minute`` (between the first and the last logged update),
        ``overhead_seconds`` (trainer loop time between updates, async only, else 0: the
        median wait, or with a replay bound the smallest, :func:`_overhead`),
        ``searcher_start_seconds`` (first batch's start, seconds since training began),
        ``samples_per_minute``, ``queue_size``, ``initial_fill``, ``num_prompts``,
        ``num_generations``, ``unique_fraction`` (distinct responses per group, mean, whether
        or not the buffer de-duplicated them), ``dedup`` (the run's ``buffer.dedup``), and
        the inputs of the finer model (:func:`_split_timings`): ``update_only_seconds``,
        ``ref_seconds``, ``handover_seconds``, ``jitter``, ``searcher_warmup_seconds``,
        ``stop_seconds``.

    Raises:
        FileNotFoundError: ``summary.json`` missing (the run did not finish).
    """
    import yaml

    run_dir = Path(run_dir)
    if not (run_dir / "summary.json").exists():
        raise FileNotFoundError(f"{run_dir / 'summary.json'} not found: the run did not finish")
    summary = json.loads((run_dir / "summary.json").read_text())
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    metrics = read_jsonl_rows(run_dir / "metrics.jsonl")
    batches = read_jsonl_rows(run_dir / "searchers.jsonl")
    a = cfg["async"]
    med = (lambda xs: float(statistics.median(xs)) if xs else float("nan"))
    steady = float("nan")
    if len(metrics) >= 2 and metrics[-1]["wall_seconds"] > metrics[0]["wall_seconds"]:
        steady = 60.0 * (metrics[-1]["step"] - metrics[0]["step"]) / (
            metrics[-1]["wall_seconds"] - metrics[0]["wall_seconds"])
    wall = float(summary["wall_seconds"])
    budget = 60.0 * float(cfg["max_minutes"])
    max_steps = int(cfg["training"].get("max_steps") or 0)
    if max_steps and metrics and summary["trainer_steps"] >= max_steps:
        budget = min(budget, float(metrics[-1]["wall_seconds"]))  # stopped by max_steps
    in_budget = sum(1 for m in metrics if m["wall_seconds"] <= budget) * int(cfg.get("log_every", 1))
    buf = _buffer_unique_fraction(run_dir, cfg["training"]["num_generations"])
    return {
        "mode": a["mode"], "sync_period": a["sync_period"], "num_searchers": a["num_searchers"],
        "gen_seconds": med([b["gen_seconds"] for b in batches]),
        "score_seconds": med([b["score_seconds"] for b in batches]),
        "update_seconds": med([trainer_seconds(m) for m in metrics]),  # + its reference pass
        "updates_per_minute": float(summary.get("updates_per_minute")
                                    or 60 * summary["trainer_steps"] / wall),
        "staleness_mean": summary["staleness_mean"], "staleness_max": summary["staleness_max"],
        "wall_seconds": wall, "steady_updates_per_minute": steady,
        "budget_seconds": budget, "updates_in_budget": in_budget,
        "budget_updates_per_minute": 60.0 * in_budget / budget,
        "overhead_seconds": _overhead(metrics, a["mode"], float(cfg["buffer"].get("max_replay_ratio", 0.0))),
        "searcher_start_seconds": min((b["t_start"] for b in batches), default=0.0),
        "samples_per_minute": 60.0 * summary["samples_generated"] / wall,
        "trainer_steps": summary["trainer_steps"], "batches": len(batches),
        "queue_size": a["queue_size"], "initial_fill": cfg["buffer"]["initial_fill"],
        "max_replay_ratio": float(cfg["buffer"].get("max_replay_ratio", 0.0)),
        **{k: cfg["buffer"][k] for k in ("recency_prob", "inv_temp", "max_prompts",
                                          "capacity_per_prompt") if k in cfg["buffer"]},
        "num_prompts": cfg["training"]["num_prompts_per_step"],
        "num_generations": cfg["training"]["num_generations"], "unique_fraction": buf,
        "dedup": bool(cfg["buffer"].get("dedup", False)),
        "max_steps": max_steps,
        **_split_timings(metrics, batches, a["mode"], wall, budget),
    }


def _split_timings(metrics: list[dict], batches: list[dict], mode: str, wall: float,
                   budget: float) -> dict:
    """The inputs :func:`simulate` takes apart from ``update_seconds``, from one run's logs.

    Returns:
        ``update_only_seconds``: median ``update_seconds`` (the reference pass left out);
        ``ref_seconds``: the trainer's reference seconds per batch it received (all of
        ``reference_seconds`` over the batches; 0 when the searchers scored);
        ``handover_seconds``: a searcher's time per batch outside generating and scoring. Sync:
        the median of ``wait - gen - score`` per update (publish, the searcher noticing the
        new version, its pull, the batch's trip). Async: the median time from the trainer
        receiving a searcher's batch to that searcher starting its next (noticing room, pull)
        plus the fastest trip of a batch to the trainer (``received - t_end``; slower trips
        waited for a busy trainer, which the simulator models);
        ``jitter``: the median over generation, update and reference times of their relative
        standard deviation (first update and first batch left out);
        ``searcher_warmup_seconds``: how much longer the first batch took than the median
        (CUDA start-up on a GPU), >= 0;
        ``stop_seconds``: ``wall_seconds`` past the budget (stopping the searchers, which
        ``summary.json``'s rates count).
        All seconds; NaN where the logs have too little.
    """
    nan = float("nan")
    med = (lambda xs: float(statistics.median(xs)) if xs else nan)
    gen = [b["gen_seconds"] for b in batches]
    ref_total = sum(m.get("reference_seconds", 0.0) for m in metrics)
    if mode == "sync":
        handover = med([m["wait_seconds"] - m.get("gen_seconds", 0.0) - m.get("score_seconds", 0.0)
                        for m in metrics[1:] if "gen_seconds" in m])
    else:
        by: dict = {}
        for b in batches:
            by.setdefault(b.get("searcher_id", 0), []).append(b)
        notice = [y["t_start"] - x["received"] for v in by.values() for x, y in zip(v, v[1:])
                  if "received" in x and y["t_start"] >= x["received"]]
        trips = [b["received"] - b["t_end"] for b in batches if "received" in b]
        handover = med(notice) + min(trips) if notice and trips else nan

    def spread(xs):
        xs = xs[1:]
        return float(np.std(xs) / np.median(xs)) if len(xs) >= 3 and np.median(xs) > 0 else nan

    spreads = [x for x in (spread(gen), spread([m["update_seconds"] for m in metrics]),
                           spread([m.get("reference_seconds", 0.0) for m in metrics]))
               if math.isfinite(x)]
    return {"update_only_seconds": med([m["update_seconds"] for m in metrics]),
            "ref_seconds": ref_total / len(batches) if batches else nan,
            "handover_seconds": handover,
            "jitter": float(statistics.median(spreads)) if spreads else nan,
            "searcher_warmup_seconds": max(0.0, gen[0] - med(gen)) if gen else nan,
            "stop_seconds": max(0.0, wall - budget)}


def _buffer_unique_fraction(run_dir: Path, K: int) -> float:
    """Mean fraction of distinct responses per group, from ``buffer.pt`` (1.0 if unreadable)."""
    try:
        import torch

        state = torch.load(run_dir / "buffer.pt", weights_only=True)
        by_key: dict = {}
        for _, rows in state["items"]:
            for r in rows:
                by_key.setdefault((r["prompt_id"], r["version"]), set()).add(tuple(r["response_ids"]))
        sizes = [len(v) / K for v in by_key.values()]
        return float(min(1.0, statistics.mean(sizes))) if sizes else 1.0
    except Exception:
        return 1.0


def measure_run(config_overrides: dict, run_dir: str | Path, seconds: float, seed: int = 0) -> dict:
    """Train for ``seconds`` with ``config_overrides`` (``tba_lab.trainer.train``) and return
    :func:`run_timings` of the run.

    A :func:`tba_lab.config.short_run` config with small held-out evaluations (50 problems
    before and after, none in between) to keep the run short; ``config_overrides`` win.
    """
    from tba_lab.config import short_run
    from tba_lab.trainer import train

    train(short_run(run_dir, seconds, config_overrides, seed=seed, eval_size=50,
                    interim_eval_size=50, eval_every_seconds=0), progress=False)
    return run_timings(run_dir)


def format_table(rows: list[dict], columns: list[str]) -> str:
    """Rows of dicts as a fixed-width text table (missing keys and NaN print as '-'; floats
    with 0, 1 or 3 significant decimals depending on their size)."""
    def cell(v):
        if v is None:
            return "-"
        if isinstance(v, (float, np.floating)):
            v = float(v)
            if math.isnan(v):
                return "-"
            return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}"
        return str(v)
    table = [columns] + [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[j]) for row in table) for j in range(len(columns))]
    lines = ["  ".join(x.rjust(w) for x, w in zip(row, widths)) for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def simulate_run(measured: dict, timings: dict | None = None, cores: int | None = 2,
                 duration: float | None = None, **overrides) -> SimResult:
    """Simulate the run described by ``measured`` (a :func:`run_timings` or ``measured.json`` row).

    ``timings`` supplies gen/score/update/overhead seconds (default: ``measured``'s own), so a
    run can be predicted from ANOTHER run's timings (e.g. 2 searchers from a 1-searcher run);
    missing optional keys fall back to the kit's defaults. ``overrides`` go to :func:`simulate`.

    The run's ``unique_fraction`` reaches the simulator only when its buffer de-duplicated
    (``measured["dedup"]``, :func:`run_timings`' copy of ``buffer.dedup`` in its
    ``config.yaml``); otherwise repeated responses were kept as samples, and the simulated
    buffer keeps them too (``unique_fraction=1.0``).
    """
    from tba_lab.config import AsyncConfig, BufferConfig

    src, buf, asy = timings or measured, BufferConfig(), AsyncConfig()
    dedup = bool(measured.get("dedup", buf.dedup))
    kw = dict(
        num_searchers=int(measured.get("num_searchers", 1)),
        sync_period=int(measured.get("sync_period", 1)),
        mode=measured.get("mode", "async"),
        queue_size=int(measured.get("queue_size", asy.queue_size)),
        initial_fill=int(measured.get("initial_fill", buf.initial_fill)),
        max_replay_ratio=float(measured.get("max_replay_ratio", buf.max_replay_ratio)),
        recency_prob=float(measured.get("recency_prob", buf.recency_prob)),
        inv_temp=float(measured.get("inv_temp", buf.inv_temp)),
        max_prompts=int(measured.get("max_prompts", buf.max_prompts)),
        capacity_per_prompt=int(measured.get("capacity_per_prompt", buf.capacity_per_prompt)),
        num_prompts=int(measured.get("num_prompts") or measured.get("batch_prompts") or 16),
        num_generations=int(measured.get("num_generations") or measured.get("group_size") or 8),
        unique_fraction=float(measured.get("unique_fraction", 1.0)) if dedup else 1.0,
        overhead_seconds=(float(src.get("overhead_seconds", 0.0))
                          if measured.get("mode", "async") == "async" else 0.0),
        searcher_start_seconds=float(measured.get("searcher_start_seconds", 0.0)),
        max_steps=int(measured.get("max_steps") or 0),
        duration=float(duration or measured.get("budget_seconds") or measured.get("wall_seconds") or 60.0),
        cores=cores)
    kw.update(overrides)
    return simulate(float(src["gen_seconds"]), float(src["score_seconds"]),
                    float(src["update_seconds"]), **kw)


# ----------------------------------------------------------------------------------------------
# Plots
# ----------------------------------------------------------------------------------------------


def plot_sim_timeline(result: SimResult, ax=None, window: tuple[float, float] | None = None,
                      title: str | None = None):
    """Gantt chart of a simulated run: one row per actor, bars where it works (blue: update,
    orange: generate, green: score, red: reference pass, dark grey: hand-over, light grey:
    blocked on a full queue). ``window`` = (t0, t1) in
    seconds since training began. Returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.6 + 0.5 * len(result.intervals)))
    colors = {"update": "C0", "generate": "C1", "score": "C2", "reference": "C3",
              "handover": "0.6", "blocked": "0.8"}
    names = list(result.intervals)
    for row, name in enumerate(names):
        for what in colors:
            bars = [(s, e - s) for s, e, w in result.intervals[name] if w == what and e > s]
            if window:
                bars = [(s, d) for s, d in bars if s + d >= window[0] and s <= window[1]]
            if bars:  # thin white edges keep back-to-back jobs apart
                ax.broken_barh(bars, (row - 0.35, 0.7), facecolors=colors[what],
                               edgecolor="white", linewidth=0.6, label=what)
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.invert_yaxis()
    if window:
        ax.set_xlim(*window)
    ax.set_xlabel("seconds since training began (simulated)")
    handles, labels = ax.get_legend_handles_labels()
    seen = {}
    for h, lab in zip(handles, labels):
        seen.setdefault(lab, h)
    ax.legend(seen.values(), seen.keys(), loc="upper left", bbox_to_anchor=(1.005, 1.0),
              fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return ax


__all__ = ["SimResult", "share_cores", "pipeline", "async_throughput", "simulate", "simulate_run",
           "run_timings", "measure_run", "format_table", "plot_sim_timeline", "REFERENCE_PASSES",
           "JOB_KINDS", "amdahl_speedup", "actor_rates"]
