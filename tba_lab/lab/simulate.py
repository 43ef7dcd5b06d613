"""The searcher / trainer timeline as a discrete-event loop (:func:`simulate`, notebook 05) and
its closed form (:func:`async_throughput`), fed a run folder's durations (:func:`run_timings`,
:func:`simulate_run`); the scaling prediction from the 1-searcher runs recorded on one H200,
checked against the others (:func:`predict`; ``python -m tba_lab.lab.simulate --out FILE``).
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tba_lab.config import AsyncConfig, BufferConfig
from tba_lab.lab import recorded
from tba_lab.lab.timeline import (_by_searcher, _measurements, _median, _read_run, busy_fraction,
                                  format_table)


@dataclass
class SimResult:
    """What :func:`simulate` predicts (seconds since training began).

    Attributes:
        duration: simulated seconds; ``updates`` ended within it (``updates_per_minute``, start-up
            included), ``updates_begun`` with the one in progress at the end.
        steady_updates_per_minute: between the first and the last update's end (NaN below 2).
        batches: generation batches the trainer drained.
        staleness: (N,) int64 per update: updates so far minus the newest batch's version.
        intervals: actor ("trainer", "searcher 0", ...) -> [(start, end, kind)], kind
            "generation", "update" (reference pass included) or "reference", the parts of
            :func:`tba_lab.lab.timeline.plot_timeline`.
        trainer_busy_fraction: the trainer's busy share from its first update on (NaN before).
    """
    duration: float
    updates: int
    updates_per_minute: float
    steady_updates_per_minute: float
    batches: int
    staleness: np.ndarray
    intervals: dict = field(default_factory=dict)
    updates_begun: int = 0
    trainer_busy_fraction: float = float("nan")

    @property
    def staleness_mean(self) -> float:
        return float(self.staleness.mean()) if self.staleness.size else float("nan")


# The event loop, its step and its closed form (notebook 05)

def share_cores(remaining: list[float], cores: float | None, until: float) -> tuple[float, list[float]]:
    """Advance the busy processes to the next event when they share ``cores`` cores.

    Processor sharing: with n busy processes on c cores each runs at speed min(1, c / n) (no
    faster with more than one core); ``cores=None``: speed 1. ``remaining``: each busy job's
    work left, in seconds running alone (all > 0); ``until``: the longest step, wall seconds.

    Returns:
        (dt, left): wall seconds until the first job ends (at most ``until``), and each job's
        work left after dt, in the order of ``remaining``.
    """
    if not remaining:
        return until, []
    speed = 1.0 if cores is None else min(1.0, cores / len(remaining))
    dt = min(min(remaining) / speed, until)
    return dt, [r - dt * speed for r in remaining]


def share_gpu(slowdown: float):
    """A step for :func:`simulate` on one time-sliced GPU: with n busy processes each runs
    ``1 + slowdown * (n - 1)`` times slower than alone (``cores`` is ignored).
    Raises ValueError for ``slowdown`` < 0."""
    if not slowdown >= 0:
        raise ValueError(f"slowdown={slowdown}: give a number >= 0")

    def step(remaining, cores, until):
        n = len(remaining)  # share_cores with the cores that give each speed 1 / (1 + a(n-1))
        return share_cores(remaining, n / (1.0 + slowdown * (n - 1)) if n else None, until)
    return step


def simulate(gen_seconds: float, update_seconds: float, num_searchers: int = 1,
             cores: float | None = None, *, mode: str = "async", duration: float = 60.0,
             initial_fill: int = 1, max_replay_ratio: float = 1.0, queue_size: int = 1,
             sync_period: int = 1, start_seconds: float = 0.0, drain_seconds: float = 0.0,
             max_steps: int = 0, jitter: float = 0.0, seed: int = 0,
             step=share_cores) -> SimResult:
    """Searchers -> queues -> replay buffer -> trainer, one job at a time (a discrete-event loop).

    From ``start_seconds`` on, each searcher pulls the newest weights (published every
    ``sync_period`` updates), makes a batch (``gen_seconds``) and queues it, while its queue
    holds fewer than ``queue_size``. The free trainer drains the queues (``drain_seconds`` per
    batch: a reference pass); ``"async"``, it updates (``update_seconds``) once the buffer holds
    ``initial_fill`` batches, unless it would train on more than ``max_replay_ratio`` batches
    per batch received (0: no bound); ``"sync"``, only on the batch of its own version, which
    the one searcher makes after each update. Busy processes share ``cores`` through ``step``
    (:func:`share_cores`, a student's version, :func:`share_gpu`). Durations are seconds alone,
    ``jitter`` their relative SD (drawn with ``seed``); ``max_steps`` > 0 ends the loop. Left
    out: the sampler (the newest batch is trained on) and the hand-over (add it to ``gen_seconds``).
    ValueError: a duration <= 0 or NaN, an unknown mode, a count < 1.
    """
    if not (gen_seconds > 0 and update_seconds > 0 and drain_seconds >= 0):
        raise ValueError(f"gen_seconds={gen_seconds}, update_seconds={update_seconds}: must be "
                         f"> 0, drain_seconds={drain_seconds}: >= 0")
    if mode not in ("async", "sync") or min(num_searchers, queue_size, sync_period) < 1:
        raise ValueError(f"mode={mode!r} (async or sync), num_searchers={num_searchers}, "
                         f"queue_size={queue_size}, sync_period={sync_period} (each >= 1)")
    sync = mode == "sync"
    sync_period = 1 if sync else sync_period
    rng = np.random.default_rng(seed)
    names = ["trainer"] + [f"searcher {i}" for i in range(1 if sync else num_searchers)]
    job = {a: None for a in names}        # [kind, start, work left] of each actor; None = idle
    queued = {a: [] for a in names[1:]}   # versions of the batches in each searcher's queue
    version = {a: -1 for a in names[1:]}  # the version each searcher generates (or last did)
    received: list[int] = []              # versions of the batches drained into the buffer
    intervals = {a: [] for a in names}
    t, updates, unscored, staleness, ends = 0.0, 0, 0, [], []

    def work(seconds):  # one job's duration, jittered
        return seconds * max(0.05, 1.0 + jitter * rng.standard_normal()) if jitter else seconds

    def start_jobs(trainer=True):
        """Every idle actor (the trainer if ``trainer``) starts its next job if the rules let it."""
        nonlocal unscored
        if trainer and job["trainer"] is None:
            for a in names[1:]:  # drain the queues: their searchers have room again
                received.extend(queued[a])
                unscored += len(queued[a])
                queued[a].clear()
            if sync:
                ready = bool(received) and received[-1] == updates
            else:
                ready = len(received) >= initial_fill and (
                    not max_replay_ratio or updates + 1 <= max_replay_ratio * len(received))
            scoring = work(drain_seconds * unscored) if unscored and drain_seconds else 0.0
            unscored = 0
            if ready:
                staleness.append(updates - max(received))
                job["trainer"] = ["update", t, scoring + work(update_seconds)]
            elif scoring:
                job["trainer"] = ["reference", t, scoring]
        for a in names[1:]:
            if (t >= start_seconds and job[a] is None and len(queued[a]) < queue_size
                    and not (sync and version[a] == updates)):
                version[a] = updates - updates % sync_period  # pull the newest weights
                job[a] = ["generation", t, work(gen_seconds)]

    start_jobs()
    while t < duration and not (max_steps and updates >= max_steps):
        busy = [a for a in names if job[a] is not None]
        horizon = start_seconds if t < start_seconds else duration  # searchers start, or the end
        dt, left = step([job[a][2] for a in busy], cores, horizon - t)
        t = horizon if dt >= horizon - t else t + dt
        published = False
        for a, left_a in zip(busy, left):
            job[a][2] = left_a
            if left_a <= 1e-9:  # this job ended at t
                intervals[a].append((job[a][1], t, job[a][0]))
                if a != "trainer":
                    queued[a].append(version[a])
                published = published or job[a][0] == "update"
                job[a] = None
        start_jobs(trainer=False)  # a searcher with room begins before a tied update publishes
        if published:
            updates += 1
            ends.append(t)
        start_jobs()
    for a in names:  # the job in progress at the end
        if job[a] is not None:
            intervals[a].append((job[a][1], t, job[a][0]))
    steady = 60.0 * (len(ends) - 1) / (ends[-1] - ends[0]) if len(ends) >= 2 else float("nan")
    first = next((s for s, _, kind in intervals["trainer"] if kind == "update"), None)
    busy_trainer = (busy_fraction([(s, e) for s, e, _ in intervals["trainer"]], (first, t))
                    if first is not None and t > first else float("nan"))
    return SimResult(duration=t, updates=updates, updates_per_minute=60.0 * updates / t,
                     steady_updates_per_minute=steady, batches=len(received),
                     staleness=np.array(staleness, dtype=np.int64), intervals=intervals,
                     updates_begun=updates + int(job["trainer"] is not None
                                                 and job["trainer"][0] == "update"),
                     trainer_busy_fraction=busy_trainer)


def async_throughput(gen_seconds: float, score_seconds: float, update_seconds: float,
                     num_searchers: int, cores: int | None,
                     max_replay_ratio: float = 0.0) -> tuple[float, float]:
    """(trainer updates, batches of all searchers) per minute of the asynchronous pipeline with
    n searchers on c cores, every process always busy (:func:`simulate`'s closed form).

    Each process slows down by ``s = max(1, (n + 1) / c)`` (``cores=None``: 1). The searchers
    deliver ``n * 60 / ((gen + score) * s)`` batches per minute; the trainer could make
    ``60 / (update * s)`` updates, with a replay bound rho > 0 at most rho per batch delivered.
    (Searchers waiting on full queues free cores: only :func:`simulate` models that.)
    """
    slowdown = 1.0 if cores is None else max(1.0, (num_searchers + 1) / cores)
    updates = 60.0 / (update_seconds * slowdown)
    batches = 60.0 * num_searchers / ((gen_seconds + score_seconds) * slowdown)
    if max_replay_ratio:
        updates = min(updates, max_replay_ratio * batches)
    return updates, batches


# Measured inputs: a run folder's durations, and the loop fed with them

def _overhead(metrics: list[dict], mode: str, max_replay_ratio: float) -> float:
    """Trainer seconds per update outside ``update_seconds``, from the ``wait_seconds`` after the
    first update: 0 in sync runs (the wait is the searcher's batch, which the loop models); async,
    the median, or with a replay bound the smallest (longer waits hold waiting for data)."""
    waits = [m["wait_seconds"] for m in metrics[1:]]
    if mode != "async" or not waits:
        return 0.0
    return float(min(waits)) if max_replay_ratio > 0 else float(np.median(waits))


def run_timings(run_dir: str | Path) -> dict:
    """The loop's inputs and the measured outcome of a finished ``train()`` run folder:
    :func:`~tba_lab.lab.timeline.run_measurements` (medians NaN instead of None) with
    ``queue_size``, ``initial_fill`` (rows), ``max_replay_ratio``, ``num_prompts``,
    ``num_generations``, ``max_steps``, ``overhead_seconds`` (:func:`_overhead`),
    ``searcher_start_seconds``, ``samples_per_minute``, ``steady_updates_per_minute`` (first to
    last update), ``budget_seconds`` (``max_minutes``, or the last update when ``max_steps``
    ended the run), the updates in it and their rate, and :func:`_split_timings`.

    Raises FileNotFoundError when ``summary.json`` is missing (the run did not finish).
    """
    run_dir = Path(run_dir)
    if not (run_dir / "summary.json").exists():
        raise FileNotFoundError(f"{run_dir / 'summary.json'} not found: the run did not finish")
    cfg, summary, batches, metrics = _read_run(run_dir)
    m = _measurements(cfg, summary, batches, metrics)  # timeline.run_measurements, read once
    a, buf, tr = cfg["async"], cfg["buffer"], cfg["training"]
    steady = float("nan")
    if len(metrics) >= 2 and metrics[-1]["wall_seconds"] > metrics[0]["wall_seconds"]:
        steady = 60.0 * (metrics[-1]["step"] - metrics[0]["step"]) / (
            metrics[-1]["wall_seconds"] - metrics[0]["wall_seconds"])
    wall = float(m["wall_seconds"])
    budget = 60.0 * float(cfg["max_minutes"])
    max_steps = int(tr.get("max_steps") or 0)
    if max_steps and metrics and m["trainer_steps"] >= max_steps:
        budget = min(budget, float(metrics[-1]["wall_seconds"]))  # stopped by max_steps
    in_budget = sum(1 for r in metrics if r["wall_seconds"] <= budget) * int(cfg.get("log_every", 1))
    rho = float(buf.get("max_replay_ratio", 0.0))
    return {
        **m, **{k: math.nan if m[k] is None else m[k]
                for k in ("gen_seconds", "score_seconds", "update_seconds")},
        "updates_per_minute": float(m["updates_per_minute"] or 60 * m["trainer_steps"] / wall),
        "wall_seconds": wall, "steady_updates_per_minute": steady, "batches": len(batches),
        "budget_seconds": budget, "updates_in_budget": in_budget,
        "budget_updates_per_minute": 60.0 * in_budget / budget,
        "overhead_seconds": _overhead(metrics, m["mode"], rho),
        "searcher_start_seconds": min((b["t_start"] for b in batches), default=0.0),
        "queue_size": a["queue_size"], "initial_fill": buf["initial_fill"], "max_replay_ratio": rho,
        "num_prompts": tr["num_prompts_per_step"], "num_generations": tr["num_generations"],
        "max_steps": max_steps, **_split_timings(metrics, batches, m["mode"], wall, budget),
    }


def _split_timings(metrics: list[dict], batches: list[dict], mode: str, wall: float,
                   budget: float) -> dict:
    """The calibration's finer inputs (:data:`tba_lab.lab.recorded.CALIBRATION_2026_12_04`),
    seconds, NaN where the logs have too little: ``update_only_seconds`` (median, no reference
    pass), ``ref_seconds`` (trainer reference time per batch received), ``handover_seconds``
    (a searcher's time per batch besides generating and scoring: sync, median ``wait - gen -
    score``; async, median receipt-to-next-start plus the fastest ``received - t_end``),
    ``jitter`` (median relative SD of generation, update and reference times, first left out),
    ``searcher_warmup_seconds`` (first batch over the median), ``stop_seconds`` (past budget)."""
    gen = [b["gen_seconds"] for b in batches]
    if mode == "sync":
        handover = _median([m["wait_seconds"] - m.get("gen_seconds", 0.0)
                            - m.get("score_seconds", 0.0)
                            for m in metrics[1:] if "gen_seconds" in m], digits=None,
                           empty=math.nan)
    else:
        notice = [y["t_start"] - x["received"] for v in _by_searcher(batches).values()
                  for x, y in zip(v, v[1:]) if "received" in x and y["t_start"] >= x["received"]]
        trips = [b["received"] - b["t_end"] for b in batches if "received" in b]
        handover = _median(notice, digits=None) + min(trips) if notice and trips else math.nan

    def spread(x):
        x = x[1:]
        return float(np.std(x) / np.median(x)) if len(x) >= 3 and np.median(x) > 0 else math.nan

    spreads = [x for x in (spread(gen), spread([m["update_seconds"] for m in metrics]),
                           spread([m.get("reference_seconds", 0.0) for m in metrics]))
               if math.isfinite(x)]
    return {"update_only_seconds": _median([m["update_seconds"] for m in metrics], digits=None,
                                           empty=math.nan),
            "ref_seconds": (sum(m.get("reference_seconds", 0.0) for m in metrics) / len(batches)
                            if batches else math.nan),
            "handover_seconds": handover, "jitter": _median(spreads, digits=None, empty=math.nan),
            "searcher_warmup_seconds": (max(0.0, gen[0] - _median(gen, digits=None)) if gen
                                        else math.nan),
            "stop_seconds": max(0.0, wall - budget)}


def simulate_run(measured: dict, timings: dict | None = None, cores: int | None = 2,
                 duration: float | None = None, **overrides) -> SimResult:
    """:func:`simulate` of the run ``measured`` (a :func:`run_timings` row) describes: its mode,
    searchers, k, queue, fill (rows, rounded up to batches), replay bound, searcher start and
    budget, the kit's defaults for what it lacks. Durations come from ``timings`` (default:
    ``measured``), so one run can be predicted from another's: ``gen_seconds`` +
    ``score_seconds`` per batch, ``update_seconds`` (+ ``overhead_seconds``, async) per update.
    ``overrides`` go to :func:`simulate`."""
    src, buf, asy = timings or measured, BufferConfig(), AsyncConfig()
    mode = measured.get("mode", "async")
    rows = int(measured.get("num_prompts", 16)) * int(measured.get("num_generations", 8))
    kw = dict(num_searchers=int(measured.get("num_searchers", 1)), mode=mode,
              sync_period=int(measured.get("sync_period", 1)),
              queue_size=int(measured.get("queue_size", asy.queue_size)),
              initial_fill=math.ceil(int(measured.get("initial_fill", buf.initial_fill)) / rows),
              max_replay_ratio=float(measured.get("max_replay_ratio", buf.max_replay_ratio)),
              start_seconds=max(0.0, float(measured.get("searcher_start_seconds", 0.0))),
              max_steps=int(measured.get("max_steps") or 0),
              duration=float(duration or measured.get("budget_seconds")
                             or measured.get("wall_seconds") or 60.0))
    overhead = float(src.get("overhead_seconds", 0.0)) if mode == "async" else 0.0
    return simulate(float(src["gen_seconds"]) + float(src["score_seconds"]),
                    float(src["update_seconds"]) + overhead, cores=cores, **{**kw, **overrides})


# The scaling prediction on the machine of 2026-12-04 (one H200, 16 cores)

GPU_SLOWDOWN = 0.1
""":func:`share_gpu`'s slowdown per extra busy process on the H200, ASSUMED (the 3- and 6-searcher
runs' generation took 1.23 and 1.46 times sync's)."""

REFERENCE_PASSES = ("drained", "trainer", "searcher")
"""Who does the reference pass in :func:`predict_leg`: the trainer on every batch it drains (the
recorded runs), the trainer on the batch it trains on, or each searcher on its own batch."""

# predict_leg's keys and the report's column names
LABELS = {"updates_per_minute": "updates/min", "steady_updates_per_minute": "steady updates/min",
          "samples_per_minute": "samples/min", "trainer_busy": "trainer busy",
          "staleness_mean": "staleness"}


def predict_leg(device: str, mode: str, num_searchers: int, duration: float,
                reference_pass: str = "drained", seeds: int = 5, seed: int = 0) -> dict:
    """:func:`simulate` of one placement on the 2026-12-04 machine, fed the 1-searcher run of
    its ``device`` (:data:`tba_lab.lab.recorded.CALIBRATION_2026_12_04`): "cpu" (16 cores,
    :func:`share_cores`) or "cuda" (the H200, :func:`share_gpu` of :data:`GPU_SLOWDOWN`), the
    recorded runs' buffer; ``duration``: the budget, seconds. Returns the means over ``seeds``
    of :data:`LABELS`' keys, rates per minute of the budget plus stopping. ValueError: an
    unknown ``device`` or ``reference_pass`` (:data:`REFERENCE_PASSES`).
    """
    if reference_pass not in REFERENCE_PASSES or device not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r} (cpu or cuda), reference_pass={reference_pass!r} "
                         f"(one of {REFERENCE_PASSES})")
    c = recorded.CALIBRATION_2026_12_04[device]
    ref = c["ref_seconds"]
    gen = c["gen_seconds"] + c["score_seconds"] + c["handover_seconds"]
    update = c["update_only_seconds"] + (c["overhead_seconds"] if mode == "async" else 0.0)
    start = c["searcher_start_seconds"] + c["searcher_warmup_seconds"]
    runs = [simulate(gen + ref * (reference_pass == "searcher"),
                     update + ref * (reference_pass == "trainer"), num_searchers, 16, mode=mode,
                     duration=duration, start_seconds=start, jitter=c["jitter"], seed=seed + i,
                     drain_seconds=ref * (reference_pass == "drained"),
                     step=share_gpu(GPU_SLOWDOWN) if device == "cuda" else share_cores)
            for i in range(seeds)]
    minutes = (duration + c["stop_seconds"]) / 60.0
    return {key: float(np.nanmean([value(r) for r in runs])) for key, value in (
        ("updates_per_minute", lambda r: r.updates_begun / minutes),
        ("steady_updates_per_minute", lambda r: r.steady_updates_per_minute),
        ("samples_per_minute", lambda r: r.batches * recorded.ROWS_PER_BATCH / minutes),
        ("trainer_busy", lambda r: r.trainer_busy_fraction),
        ("staleness_mean", lambda r: r.staleness_mean))}


def predict(seeds: int = 5, seed: int = 0) -> dict:
    """{"validation": per recorded leg with samples, predicted and measured updates/min,
    samples/min and staleness and the rates' "error %"; "prediction": :func:`predict_leg` per
    device, number of searchers and reference pass, async, 30 s}."""
    validation = []
    for leg, m in {**recorded.H200_2026_12_04, **recorded.GPU_CHECK_2026_12_04}.items():
        if m["samples_per_minute"] is None:
            continue  # sync GRPO: a rate only, and no reference pass
        sim = predict_leg(m["device"], m["mode"], m["num_searchers"], m["run_seconds"],
                          seeds=seeds, seed=seed)
        calibration = leg == recorded.CALIBRATION_2026_12_04[m["device"]]["run"]
        row = {"leg": leg + (" (calibration run)" if calibration else "")}
        for key in ("updates_per_minute", "samples_per_minute", "staleness_mean"):
            row[f"{LABELS[key]} predicted"], row[f"{LABELS[key]} measured"] = sim[key], m[key]
            if key != "staleness_mean":
                row[f"{LABELS[key]} error %"] = 100.0 * (sim[key] / m[key] - 1.0)
        validation.append(row)
    prediction = [{"device": device, "searchers": n, "reference pass": where,
                   **{LABELS[k]: v for k, v in predict_leg(device, "async", n, 30.0, where,
                                                           seeds, seed).items()}}
                  for device, ns in (("cpu", (1, 2, 4, 8)), ("cuda", (1, 3, 6))) for n in ns
                  for where in ("trainer", "searcher")]
    return {"validation": validation, "prediction": prediction}


def prediction_report(result: dict, command: str) -> str:
    """:func:`predict`'s result as markdown, with the inputs and what the model leaves out."""
    table = (lambda rows: format_table(rows, list(rows[0]), markdown=True))
    c = recorded.CALIBRATION_2026_12_04
    return "\n".join([
        f"# Scaling prediction: async TB/TBA on {recorded.MACHINE} ({recorded.DATE})", "",
        f"Command: `{command}`. Model: the event loop `tba_lab.lab.simulate.simulate` fed ONLY "
        "the 1-searcher runs `cpu_async_tb_n1` (every CPU leg) and `gpu_sync_tb` (every GPU "
        "leg) of `tba_lab.lab.recorded`. Rates per minute of the budget plus stopping, start-up "
        "included (the first batch comes 12-13 s into a 25- or 30-s run); means of 5 seeds.", "",
        "## 1. Validation: the recorded runs with more searchers", "",
        "Their placement: the trainer scores every batch it drains, 1 torch thread per process; "
        "on the GPU all processes share the one H200.", "", table(result["validation"]), "",
        "## 2. Prediction: more searchers, the reference pass in the trainer or the searchers", "",
        "Async, 30 s, 1 torch thread per process. `trainer`: the trainer scores the batch it "
        "trains on; `searcher`: each searcher its own (`async.reference_pass`). Trainer busy: "
        "its share of the time from its first update.", "", table(result["prediction"]), "",
        "## 3. Inputs", "",
        "`run_timings` of the two 1-searcher runs, seconds (jitter: relative SD of job times). "
        f"On the GPU each of n busy processes runs 1 + {GPU_SLOWDOWN} (n - 1) times slower "
        "than alone: an assumption.", "",
        table([{"input": k, "CPU": c["cpu"][k], "GPU": c["cuda"][k]} for k in c["cpu"]]), "",
        "## 4. What the model leaves out", "",
        "* Memory bandwidth, caches and clock boost: on the 16 cores generation took 0.381 s per "
        "batch with 1 searcher and 0.462 with 8, each process on a core of its own.",
        "* Thread scaling, and GPU sharing beyond one slowdown per extra busy process.",
        "* Start-up other than the calibration run's; variation other than Gaussian jitter; "
        "the sampler (the trainer trains on the newest batch).",
        "* Learning: it predicts rates and staleness, not accuracy.", ""])


def main(argv: list[str] | None = None) -> int:
    """``python -m tba_lab.lab.simulate [--out FILE]``: print (and write) the prediction report."""
    p = argparse.ArgumentParser(description="Throughput prediction of async TB/TBA on the "
                                "2026-12-04 machine, validated against its recorded runs.")
    p.add_argument("--out", type=Path, help="markdown file to write (default: print only)")
    out = p.parse_args(argv).out
    text = prediction_report(predict(), "python -m tba_lab.lab.simulate"
                             + (f" --out {out}" if out else ""))
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
