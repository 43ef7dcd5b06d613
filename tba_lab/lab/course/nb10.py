"""Notebook 10 (multi-GPU asynchronous runs): exercises, and the placement-aware rate model.

Exercises
    10.searcher_device  which device searcher i runs on (``async.searcher_devices``, round robin)
    10.predict_rates    trainer updates and searcher batches per minute for a placement: actors
                        on one device share it (processor sharing, as notebook 05's closed form)
    10.trainer_busy     the trainer's busy fraction from ``metrics.jsonl`` rows

:func:`searcher_device` and :func:`predict_rates` are the references of the first two and the
notebook uses them for its own placement table and its hardware cap. ``predict_rates`` extends
:func:`tba_lab.lab.simulate.async_throughput` from "n + 1 actors on c cores" to any placement;
on a CPU-only placement the two agree (a case of the checker tests it). Like that closed form it
assumes every actor is busy all the time and a GPU runs one actor's work at a time; real GPUs
overlap small kernels of several processes, so read it as a bound, not a measurement.

The placement rule (``async.trainer_device``, ``async.searcher_devices``): searcher i uses
``searcher_devices[i % len(searcher_devices)]``; an empty list puts every searcher on the
trainer's device, which is "cpu" by default, so the default runs everything as CPU processes.
"""
from __future__ import annotations

import numpy as np

from tba_lab.lab.course import Exercise
from tba_lab.lab.simulate import async_throughput
from tba_lab.lab.timeline import busy_fraction


# ---------------------------------------------------------------- placement (reference)
def searcher_device(i: int, searcher_devices, trainer_device: str = "cpu") -> str:
    """The device of searcher ``i``: ``searcher_devices[i % len(searcher_devices)]`` (round
    robin, so several searchers may share one device), or ``trainer_device`` when the list is
    empty; ``"cuda"`` reads as ``"cuda:0"``.

    This is the kit's rule, :func:`tba_lab.config.searcher_device` (which the launchers and the
    weight channel use), called on a config holding only these two fields.

    Args:
        i: searcher index, >= 0.
        searcher_devices: list of device strings ("cpu", "cuda", "cuda:N"); may be empty.
        trainer_device: the trainer's device string.

    Returns:
        a device string: "cpu" or "cuda:N".
    """
    from types import SimpleNamespace

    from tba_lab.config import searcher_device as kit_rule

    cfg = SimpleNamespace(async_=SimpleNamespace(searcher_devices=list(searcher_devices or []),
                                                 trainer_device=trainer_device))
    return kit_rule(cfg, i)


def _device_key(device: str) -> str:
    """The GPU "cuda" names is "cuda:0"; every other device string stays as it is."""
    return "cuda:0" if device == "cuda" else device


def predict_rates(gen_seconds: float, score_seconds: float, update_seconds: float,
                  devices, cpu_cores: int) -> tuple[float, float]:
    """Steady-state rates of async TBA for a placement (processor sharing per device).

    Args:
        gen_seconds, score_seconds: one searcher batch (generate, then score), seconds, the
            actor alone on its device.
        update_seconds: one trainer update, seconds, alone on its device.
        devices: list of device strings, ``devices[0]`` the trainer's, ``devices[1:]`` one per
            searcher ("cpu", "cuda", "cuda:N"; "cuda" means "cuda:0").
        cpu_cores: cores shared by every actor placed on "cpu".

    Returns:
        (trainer updates per minute, searcher batches per minute summed over all searchers).
        An actor on a device with m busy actors and capacity c (``cpu_cores`` for "cpu", 1 for
        a GPU) is slowed down by ``s = max(1, m / c)``.

    Raises:
        ValueError: fewer than two devices (no searcher), or ``cpu_cores`` < 1.
    """
    if len(devices) < 2:
        raise ValueError("devices: give the trainer's device and at least one searcher's")
    if cpu_cores < 1:
        raise ValueError(f"cpu_cores={cpu_cores}: must be >= 1")
    keys = [_device_key(d) for d in devices]
    groups: dict[str, int] = {}
    for k in keys:
        groups[k] = groups.get(k, 0) + 1
    if set(keys) == {"cpu"}:  # all on CPU: notebook 05's closed form, exactly
        return async_throughput(gen_seconds, score_seconds, update_seconds, len(keys) - 1, cpu_cores)

    def slowdown(k: str) -> float:
        return max(1.0, groups[k] / (cpu_cores if k == "cpu" else 1))

    updates = 60.0 / (update_seconds * slowdown(keys[0]))
    batches = sum(60.0 / ((gen_seconds + score_seconds) * slowdown(k)) for k in keys[1:])
    return updates, batches


# ---------------------------------------------------------------- 10.searcher_device
def searcher_device_stub(i, searcher_devices, trainer_device="cpu"):
    """The device (a string) of searcher ``i``: ``searcher_devices`` is used round robin (entry
    i modulo its length), so several searchers may share a device; an empty list means every
    searcher runs on ``trainer_device``. Return "cuda:0" where the chosen entry says "cuda"."""
    # YOUR CODE HERE
    raise NotImplementedError


def searcher_device_solution(i, searcher_devices, trainer_device="cpu"):
    if searcher_devices:
        device = searcher_devices[i % len(searcher_devices)]
    else:                             # no list: share the trainer's device
        device = trainer_device
    return "cuda:0" if device == "cuda" else device


def _same_string(got, want):
    return None if got == want else f"got {got!r}, expected {want!r}"


def _device_cases():
    three = ["cuda:1", "cuda:2", "cuda:3"]
    return [
        ((0, [], "cpu"), {}),                      # the default: everything on CPU
        ((3, [], "cuda:0"), {}),                   # no list: share the trainer's GPU
        ((0, three, "cuda:0"), {}),
        ((2, three, "cuda:0"), {}),
        ((4, three, "cuda:0"), {}),                # round robin: 4 % 3 = 1
        ((5, ["cuda:1"], "cuda:0"), {}),           # all searchers on one GPU
        ((1, ["cuda:0", "cpu"], "cuda:0"), {}),    # mixed: a GPU and a CPU searcher
        ((6, ["cuda", "cuda:1"], "cuda:0"), {}),   # "cuda" reads as cuda:0
        ((2, [], "cuda"), {}),                     # ... also the trainer's
    ]


SEARCHER_DEVICE = Exercise(
    name="10.searcher_device",
    description="searcher i's device: searcher_devices round robin, else the trainer's",
    stub=searcher_device_stub, solution=searcher_device_solution, reference=searcher_device,
    cases=_device_cases, compare=_same_string)


# ---------------------------------------------------------------- 10.predict_rates
def predict_rates_stub(gen_seconds, score_seconds, update_seconds, devices, cpu_cores):
    """(trainer updates per minute, searcher batches per minute over all searchers) of async
    TBA, every actor always busy. ``devices[0]`` is the trainer's device, ``devices[1:]`` the
    searchers'. Actors on one device share it: with m actors on a device of capacity c
    (``cpu_cores`` for "cpu", 1 for a GPU; "cuda" is "cuda:0") each is slowed by
    s = max(1, m / c). The trainer needs update_seconds * s per update, a searcher
    (gen_seconds + score_seconds) * s per batch."""
    # YOUR CODE HERE
    raise NotImplementedError


def predict_rates_solution(gen_seconds, score_seconds, update_seconds, devices, cpu_cores):
    names = ["cuda:0" if d == "cuda" else d for d in devices]
    count = {d: names.count(d) for d in names}

    def slow(d):
        capacity = cpu_cores if d == "cpu" else 1
        return max(1.0, count[d] / capacity)

    updates = 60.0 / (update_seconds * slow(names[0]))
    batches = 0.0
    for d in names[1:]:
        batches += 60.0 / ((gen_seconds + score_seconds) * slow(d))
    return updates, batches


def _rates_cases():
    g, s, u = 0.26, 0.09, 0.20
    return [
        ((g, s, u, ["cpu", "cpu"], 2), {}),                         # 2 actors, 2 cores
        ((g, s, u, ["cpu", "cpu", "cpu"], 2), {}),                  # 3 on 2 cores: 1.5x slower
        ((0.5, 0.1, 0.3, ["cpu"] * 5, 16), {}),                     # many cores
        ((g, s, u, ["cuda:0", "cuda:1", "cuda:2"], 2), {}),         # a GPU each
        ((g, s, u, ["cuda:0", "cuda:0", "cuda:0"], 2), {}),         # all share one GPU
        ((g, s, u, ["cuda:0", "cuda:1", "cuda:1", "cuda:1"], 16), {}),
        ((g, s, u, ["cuda", "cuda:0", "cpu", "cpu"], 1), {}),       # "cuda" is cuda:0; CPU pair
        ((2.0, 0.5, 1.0, ["cuda:0", "cpu", "cpu", "cpu"], 2), {}),
    ]


PREDICT_RATES = Exercise(
    name="10.predict_rates",
    description="async updates/min and batches/min for a placement (sharing per device)",
    stub=predict_rates_stub, solution=predict_rates_solution, reference=predict_rates,
    cases=_rates_cases)


# ---------------------------------------------------------------- 10.trainer_busy
def trainer_busy_reference(rows) -> float:
    """Fraction of the trainer's time spent in updates, from ``metrics.jsonl`` rows (one per
    update, ``log_every`` = 1): update j runs from ``wall_seconds - update_seconds`` to
    ``wall_seconds`` (seconds since training began); the window runs from the first update's
    start to the last update's end. Returns a float in [0, 1] (0.0 for no rows)."""
    if not rows:
        return 0.0
    spans = [(r["wall_seconds"] - r["update_seconds"], r["wall_seconds"]) for r in rows]
    window = (min(s for s, _ in spans), max(e for _, e in spans))
    if window[1] <= window[0]:
        return 0.0
    return busy_fraction(spans, window)


def trainer_busy_stub(rows):
    """Fraction (float in [0, 1]) of the trainer's time spent in updates. ``rows`` are
    ``metrics.jsonl`` rows (dicts), one per update, each with ``wall_seconds`` (seconds since
    training began at which the update ENDED) and ``update_seconds`` (how long it took). The
    window runs from the first update's start to the last update's end; 0.0 for no rows."""
    # YOUR CODE HERE
    raise NotImplementedError


def trainer_busy_solution(rows):
    if not rows:
        return 0.0
    rows = sorted(rows, key=lambda r: r["wall_seconds"])
    start = rows[0]["wall_seconds"] - rows[0]["update_seconds"]
    end = rows[-1]["wall_seconds"]
    busy = sum(r["update_seconds"] for r in rows)  # one trainer: updates never overlap
    return busy / (end - start) if end > start else 0.0


def _busy_cases():
    rng = np.random.default_rng(10)
    rows, t = [], 3.0
    for step in range(1, 41):
        t += float(rng.uniform(0.0, 0.05))        # wait: drain the queue, sample the buffer
        u = float(rng.uniform(0.15, 0.3))
        t += u
        rows.append({"step": step, "wall_seconds": t, "update_seconds": u,
                     "wait_seconds": 0.0, "loss": 1.0})
    shuffled = [rows[i] for i in rng.permutation(len(rows))]
    return [
        (([{"wall_seconds": 2.0, "update_seconds": 1.0}, {"wall_seconds": 4.0, "update_seconds": 1.0}],), {}),
        (([{"wall_seconds": 5.0, "update_seconds": 0.5}],), {}),                # one update: busy 1.0
        (([{"wall_seconds": 10.0, "update_seconds": 1.0}, {"wall_seconds": 11.0, "update_seconds": 1.0},
           {"wall_seconds": 20.0, "update_seconds": 2.0}],), {}),               # a long wait inside
        ((rows,), {}),
        ((shuffled,), {}),                                                       # rows out of order
        (([],), {}),
    ]


TRAINER_BUSY = Exercise(
    name="10.trainer_busy",
    description="the trainer's busy fraction from metrics.jsonl rows",
    stub=trainer_busy_stub, solution=trainer_busy_solution, reference=trainer_busy_reference,
    cases=_busy_cases, rtol=1e-9, atol=1e-9)


EXERCISES = [SEARCHER_DEVICE, PREDICT_RATES, TRAINER_BUSY]
