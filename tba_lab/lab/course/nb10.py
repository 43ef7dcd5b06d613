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

The second half of the module holds the notebook's helpers (set-up, placement, the runs,
utilisation, the weight sync, the prediction, the Ray run, metrics.json); each prints what its
cell shows, and the GPU and Ray parts say why they skip on a machine without them.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


# ================================================================ the notebook's helpers
# Each runs or reads what one cell of notebook 10 shows and prints its result; the GPU and Ray
# parts skip, with the reason printed, where this machine has no GPU or no Ray.
SMOKE_NOTE = "SMOKE: start-up dominated (runs of a few seconds), these rates are not results"
RATE_COLUMNS = ["searchers", "gen_seconds", "score_seconds", "update_seconds",
                "steady_updates_per_minute", "steady_samples_per_minute", "staleness_mean",
                "staleness_max"]


def num(x) -> float:
    """A measurement as a float; NaN when a run did not produce it (no update in a short run)."""
    return float("nan") if x is None else float(x)


def rnd(x, digits: int = 1):
    """For metrics.json: ``x`` rounded, or None when not measured."""
    x = num(x)
    return round(x, digits) if np.isfinite(x) else None


@dataclass
class Setup:
    """The notebook's settings and what this machine has.

    Attributes:
        out: the output folder (figures, metrics.json, ``runs/<launcher>_<n>/``).
        smoke, seed: the notebook's parameters.
        searchers: the searcher counts to measure ([1, 2] in SMOKE, else [1, 2, 3, 4]).
        run_seconds: training budget per run, seconds (start-up and evaluation come on top).
        batch: ``training`` overrides, B prompts x K responses.
        eval_size: held-out problems evaluated before and after each run.
        cores: CPU cores usable by this process; gpus: CUDA GPUs visible (0 without CUDA).
        use_gpu: place the actors on GPUs (``gpus > 0``).
        ray_installed: ``ray`` importable; ray_launcher: a launcher registered under "ray".
    """
    out: Path
    smoke: bool
    seed: int
    searchers: list
    run_seconds: float
    batch: dict
    eval_size: int
    cores: int
    gpus: int
    use_gpu: bool
    ray_installed: bool
    ray_launcher: bool


def setup(output_dir, smoke: bool, seed: int, run_seconds=None) -> Setup:
    """Create the output folder, find the GPUs and Ray, print them, return the :class:`Setup`.

    ``run_seconds`` None: 12 s of training per run in SMOKE, else 40 s (a GPU machine's
    searchers take about 11 s to start).
    """
    import importlib.metadata
    import importlib.util
    import os

    import torch

    from tba_lab.registry import LAUNCHERS

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else (os.cpu_count() or 1))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    ray_installed = importlib.util.find_spec("ray") is not None
    s = Setup(out=out, smoke=smoke, seed=seed, searchers=[1, 2] if smoke else [1, 2, 3, 4],
              run_seconds=run_seconds or (12 if smoke else 40),
              batch=({"num_prompts_per_step": 8, "num_generations": 4} if smoke
                     else {"num_prompts_per_step": 16, "num_generations": 8}),
              eval_size=20 if smoke else 100, cores=cores, gpus=gpus, use_gpu=gpus > 0,
              ray_installed=ray_installed, ray_launcher="ray" in LAUNCHERS.names())
    print(f"torch {torch.__version__}; {cores} CPU cores usable by this process")
    for i in range(gpus):
        p = torch.cuda.get_device_properties(i)
        print(f"  cuda:{i}  {p.name}, {p.total_memory / 2**30:.0f} GiB")
    if not gpus:
        print("  no CUDA GPU visible (torch.cuda.is_available() is False)")
    print(f"Ray installed: {ray_installed}"
          + (f" (version {importlib.metadata.version('ray')})" if ray_installed else "")
          + f"; launchers registered: {LAUNCHERS.names()}")
    print(f"=> this run places the trainer and the searchers on GPUs ({gpus} visible)" if gpus
          else "=> this run uses CPU processes only: the config sets no device (the kit's default)")
    print(f"runs: {s.searchers} searchers, {s.run_seconds} s of training each, "
          f"B = {s.batch['num_prompts_per_step']} prompts x K = {s.batch['num_generations']} responses")
    return s


# ---------------------------------------------------------------- section 1: placement
def device_keys(s: Setup) -> dict:
    """The ``async.*`` device keys of the notebook's runs: none without a GPU (the default);
    with GPUs the trainer on cuda:0 and the searchers on cuda:1 and up (all on cuda:0 with one)."""
    if not s.use_gpu:
        return {}
    others = [f"cuda:{j}" for j in range(1, s.gpus)] or ["cuda:0"]
    return {"trainer_device": "cuda:0", "searcher_devices": others}


def run_config(s: Setup, n: int, launcher: str = "local", **sections):
    """A short async TB run with ``n`` searchers (:func:`tba_lab.config.short_run`): 1 torch
    thread per process (notebook 04 explains why), each searcher doing its own reference pass
    (the paper's layout: the trainer's time is then its updates alone), the placement of
    :func:`device_keys`. ``sections``: a launcher's own section, e.g. ``ray={"num_cpus": 2}``."""
    from tba_lab.config import short_run

    return short_run(s.out / "runs" / f"{launcher}_{n}", s.run_seconds, seed=s.seed,
                     eval_size=s.eval_size, eval_every_seconds=0, overrides={
        "algo": "tb", "training": s.batch, **sections,
        "async": {"launcher": launcher, "num_searchers": n, "searcher_threads": 1,
                  "trainer_threads": 1, "reference_pass": "searcher", **device_keys(s)}})


def placement(cfg) -> list[str]:
    """[the trainer's device, searcher 0's, searcher 1's, ...] of a built config, with the
    kit's rule (:func:`tba_lab.config.searcher_device`); "cuda" reads as "cuda:0"."""
    from tba_lab.config import searcher_device as kit_rule

    return ([_device_key(cfg.async_.trainer_device)]
            + [kit_rule(cfg, i) for i in range(cfg.async_.num_searchers)])


def show_placement(s: Setup, configs: dict) -> None:
    """Print each config's device fields, who runs where, and how many actors share a device."""
    print(f"device keys this notebook sets: {device_keys(s) or 'none (the defaults)'}")
    for n, cfg in configs.items():
        where = placement(cfg)
        keys = {k: v for k, v in vars(cfg.async_).items()
                if k in ("trainer_device", "searcher_devices")}
        share = {d: where.count(d) for d in dict.fromkeys(where)}
        load = ", ".join(f"{d}: {m} actor(s)" + (f" on {s.cores} cores" if d == "cpu" else "")
                         for d, m in share.items())
        print(f"{n} searcher(s)  the config's device fields: {keys}")
        print(f"    trainer -> {where[0]};  "
              + ";  ".join(f"searcher {i} -> {d}" for i, d in enumerate(where[1:])))
        print(f"    per device: {load}")


def show_refused_device(s: Setup) -> None:
    """Ask for a GPU this machine does not have (cuda:<number of GPUs>) and print the
    :class:`tba_lab.config.ConfigError` that refuses it before any process starts."""
    from tba_lab.config import ConfigError, short_run
    from tba_lab.preflight import check_devices

    try:
        check_devices(short_run(s.out / "runs" / "bad_device", 1, eval_size=1, eval_every_seconds=0,
                                overrides={"async": {"trainer_device": f"cuda:{s.gpus}"}}))
        print(f"cuda:{s.gpus} was accepted?")
    except ConfigError as e:
        print(f"asking for cuda:{s.gpus} here -> ConfigError: {e}")


# ---------------------------------------------------------------- section 2: runs
def train_all(configs: dict) -> tuple[dict, dict, dict]:
    """Train each config (:func:`tba_lab.trainer.train`) and print a line per run.

    Returns:
        (summaries, measured, loads) by searcher count: ``summary.json``'s dict,
        :func:`tba_lab.lab.simulate.run_timings`, and the 1-minute load average before the run.
    """
    import os
    import time

    from tba_lab.lab.simulate import run_timings
    from tba_lab.trainer import train

    summaries, measured, loads = {}, {}, {}
    for n, cfg in configs.items():
        loads[n] = os.getloadavg()[0]
        t0 = time.time()
        summaries[n] = sm = train(cfg, progress=False)
        measured[n] = run_timings(cfg.output_dir)
        print(f"{n} searcher(s): {sm['trainer_steps']:4d} updates in {sm['wall_seconds']:5.1f} s, "
              f"{sm['samples_generated']:5d} samples, staleness mean {num(sm['staleness_mean']):.2f}, "
              f"accuracy {sm['accuracy_before']:.3f} -> {sm['accuracy_after']:.3f} "
              f"[{time.time() - t0:.0f} s with start-up and evaluation; load average before "
              f"{loads[n]:.1f}]")
    return summaries, measured, loads


# ---------------------------------------------------------------- section 3: utilisation
def plot_timelines(s: Setup, configs: dict) -> dict:
    """Draw each run's timeline (its last 10 s; the whole run in SMOKE) into timelines.png.

    Returns:
        {searcher count: run folder}.
    """
    import matplotlib.pyplot as plt

    from tba_lab.lab.timeline import load_timeline, plot_timeline

    run_dirs = {n: Path(cfg.output_dir) for n, cfg in configs.items()}
    fig, axes = plt.subplots(len(run_dirs), 1, squeeze=False,
                             figsize=(11, 1.6 + 1.1 * sum(n + 1 for n in run_dirs)))
    for ax, (n, d) in zip(axes[:, 0], run_dirs.items()):
        wall = load_timeline(d)["wall_seconds"]
        window = (0.0, wall) if s.smoke else (max(0.0, wall - 10.0), wall)
        plot_timeline(d, ax=ax, window=window, legend=n == max(run_dirs),
                      title=f"{n} searcher(s), placement {placement(configs[n])}: "
                            f"{window[0]:.0f}-{window[1]:.0f} s")
    fig.tight_layout()
    fig.savefig(s.out / "timelines.png", dpi=110)
    plt.show()
    return run_dirs


def busy_fractions(run_dirs: dict, cores: int, my_trainer_busy=None) -> dict:
    """The trainer's and each searcher's busy fraction from the first to the last update
    (:func:`tba_lab.lab.timeline.busy_fraction`), printed beside ``my_trainer_busy`` (the
    exercise) on ``metrics.jsonl``.

    Returns:
        {searcher count: {"trainer": fraction, "searchers": [fraction per searcher]}}; a run
        that logged no update is left out.
    """
    from tba_lab.lab.timeline import load_timeline
    from tba_lab.runlog import read_jsonl_rows

    busy = {}
    for n, d in run_dirs.items():
        tl = load_timeline(d)
        if not tl["trainer"]["update"]:
            print(f"{n} searcher(s): no update logged")
            continue
        window = (tl["trainer"]["update"][0][0], tl["trainer"]["update"][-1][1])
        trainer = busy_fraction(tl["trainer"]["update"], window)
        searchers = [busy_fraction(tl["searchers"][i]["gen"] + tl["searchers"][i]["score"], window)
                     if i in tl["searchers"] else 0.0 for i in range(n)]  # 0: sent no batch
        busy[n] = {"trainer": trainer, "searchers": searchers}
        try:
            mine = f"{my_trainer_busy(read_jsonl_rows(d / 'metrics.jsonl')):.1%}"
        except (NotImplementedError, TypeError):
            mine = "(exercise not done)"
        print(f"{n} searcher(s): trainer busy {trainer:5.1%} (your function on metrics.jsonl: "
              f"{mine}); searchers " + ", ".join(f"{b:5.1%}" for b in searchers)
              + f"; sum {trainer + sum(searchers):.2f} (cores: {cores})")
    return busy


def time_weight_channel(cfg, syncs: int = 40) -> dict:
    """Publish and pull the policy through the weight channel the local launcher builds for
    ``cfg``'s placement (no searcher started), ``syncs`` times, and print the timings.

    Returns:
        {"publish_ms", "pull_ms"}: medians in milliseconds; {} when the channel cannot be
        timed this way (the reason is printed).
    """
    import statistics
    import time

    import torch

    from tba_lab.models import load_policy
    from tba_lab.registry import LAUNCHERS

    device = placement(cfg)[0]
    policy, _ = load_policy(cfg.model.path)
    policy.to(device)
    sync = (torch.cuda.synchronize if device != "cpu" else (lambda: None))
    launcher, out = None, {}
    try:
        launcher = LAUNCHERS.get("local")(cfg, policy, True)  # builds the channel only
        channel, pub, pull, have = launcher.weights, [], [], 0
        for v in range(1, syncs + 1):
            t0 = time.perf_counter()
            launcher.publish(policy, v)
            sync()
            t1 = time.perf_counter()
            have, _ = channel.pull(have)
            sync()
            pull.append(time.perf_counter() - t1)
            pub.append(t1 - t0)
        out = {"publish_ms": 1e3 * statistics.median(pub), "pull_ms": 1e3 * statistics.median(pull)}
        n_params = sum(p.numel() for p in policy.parameters())
        print(f"{type(channel).__name__} on {device}: {n_params:,} parameters; publish median "
              f"{out['publish_ms']:.2f} ms (fastest {1e3 * min(pub):.2f}), pull median "
              f"{out['pull_ms']:.2f} ms (fastest {1e3 * min(pull):.2f}); {len(pub)} syncs, "
              f"last version pulled {have}")
    except Exception as e:  # a channel that cannot be timed this way: say so, do not guess
        print(f"could not time the weight channel directly: {type(e).__name__}: {e}")
    finally:
        if launcher is not None:
            launcher.stop()
    return out


def sync_from_logs(run_dirs: dict) -> dict:
    """Median ``sync_seconds`` (pull + load before a batch) of the batches that brought a new
    version, per run, in milliseconds; printed with the slowest."""
    import statistics

    from tba_lab.runlog import read_jsonl_rows

    out = {}
    for n, d in run_dirs.items():
        s = [r["sync_seconds"] for r in read_jsonl_rows(d / "searchers.jsonl")
             if r.get("sync_seconds", 0) > 0]
        if s:
            out[n] = 1e3 * statistics.median(s)
            print(f"{n} searcher(s): sync before a batch (pull + load_weights), median "
                  f"{out[n]:.2f} ms, slowest {1e3 * max(s):.2f} ms ({len(s)} syncs)")
    return out


def steady_window(run_dir) -> tuple[float, float]:
    """(first update's start, last update's end), seconds since training began; NaNs when the
    run logged no update."""
    from tba_lab.runlog import read_jsonl_rows

    rows = read_jsonl_rows(Path(run_dir) / "metrics.jsonl")
    if not rows:
        return float("nan"), float("nan")
    return rows[0]["wall_seconds"] - rows[0]["update_seconds"], rows[-1]["wall_seconds"]


def steady_samples_per_minute(run_dir) -> float:
    """Rollouts the trainer received per minute of :func:`steady_window` (start-up left out)."""
    from tba_lab.runlog import read_jsonl_rows

    t0, t1 = steady_window(run_dir)
    got = sum(r["rollouts"] for r in read_jsonl_rows(Path(run_dir) / "searchers.jsonl")
              if t0 < r["received"] <= t1)
    return 60.0 * got / (t1 - t0) if t1 > t0 else float("nan")


def rates_table(measured: dict, run_dirs: dict, smoke: bool = False) -> None:
    """Add ``steady_samples_per_minute`` to each run's ``measured`` and print the rates."""
    from tba_lab.lab.simulate import format_table

    for n, d in run_dirs.items():
        measured[n]["steady_samples_per_minute"] = steady_samples_per_minute(d)
    print(format_table([{"searchers": n, **m} for n, m in measured.items()], RATE_COLUMNS))
    if smoke:
        print(SMOKE_NOTE)


# ---------------------------------------------------------------- section 4: prediction
def sim_cores(where: list[str], cores: int):
    """The simulator's ``cores`` for a placement: this machine's cores for CPU processes; on
    GPUs None when every actor has one of its own, else the number of GPUs in use."""
    if all(d == "cpu" for d in where):
        return cores
    gpus = {_device_key(d) for d in where}
    return None if len(gpus) == len(where) else len(gpus)


def _missing(rows: list, n: int, m: dict) -> dict:
    """A prediction of NaNs, and the row of measurements alone (no times to predict from)."""
    nan = float("nan")
    rows.append({"searchers": n, "meas_upm": m["steady_updates_per_minute"],
                 "meas_samples/min": m["steady_samples_per_minute"],
                 "meas_stale": m["staleness_mean"]})
    return {"sim_updates": nan, "sim_samples": nan, "closed_updates": nan, "closed_samples": nan}


def predictions(s: Setup, measured: dict, configs: dict) -> tuple[dict, list[dict]]:
    """Predict every run from the first (1-searcher) run's per-batch and per-update times with
    :func:`predict_rates` (closed form) and :func:`tba_lab.lab.simulate.simulate_run`, and
    print them beside the measurement (steady rates: start-up left out).

    Returns:
        (pred, rows): pred[n] = {"sim_updates", "sim_samples", "closed_updates",
        "closed_samples"} (per minute; NaN when the first run has no times), and the table's rows.
    """
    from tba_lab.lab.simulate import format_table, simulate_run

    base = measured[s.searchers[0]]
    rollouts = s.batch["num_prompts_per_step"] * s.batch["num_generations"]
    base_ok = all(np.isfinite(num(base[k])) for k in ("gen_seconds", "score_seconds", "update_seconds"))
    if not base_ok:
        print(f"the {s.searchers[0]}-searcher run logged no update or no generation batch, so "
              "there are no times to predict from: rerun with a longer RUN_SECONDS or on a "
              "quieter machine")
    pred, rows = {}, []
    for n, m in measured.items():
        if not base_ok:
            pred[n] = _missing(rows, n, m)
            continue
        where = placement(configs[n])
        sim = simulate_run(m, timings=base, cores=sim_cores(where, s.cores), seed=s.seed)
        closed_u, closed_b = predict_rates(base["gen_seconds"], base["score_seconds"],
                                           base["update_seconds"], where, s.cores)
        t0 = sim.intervals["trainer"][0][0] if sim.intervals["trainer"] else 0.0
        done = sum(1 for name, spans in sim.intervals.items() if name != "trainer"
                   for _, e, what in spans if what == "score" and t0 < e <= sim.duration)
        pred[n] = {"sim_updates": sim.steady_updates_per_minute,
                   "sim_samples": 60.0 * done * rollouts / (sim.duration - t0),
                   "closed_updates": closed_u, "closed_samples": closed_b * rollouts}
        rows.append({"searchers": n, "meas_upm": m["steady_updates_per_minute"],
                     "sim_upm": pred[n]["sim_updates"], "closed_upm": closed_u,
                     "meas_samples/min": m["steady_samples_per_minute"],
                     "sim_samples/min": pred[n]["sim_samples"],
                     "closed_samples/min": pred[n]["closed_samples"],
                     "meas_stale": m["staleness_mean"], "sim_stale": sim.staleness_mean})
    print("predicted from the 1-searcher run's times; upm = trainer updates per minute; "
          "samples/min = rollouts reaching the trainer per minute (both steady: start-up left out)")
    print(format_table(rows, ["searchers", "meas_upm", "sim_upm", "closed_upm", "meas_samples/min",
                              "sim_samples/min", "closed_samples/min", "meas_stale", "sim_stale"]))
    if s.smoke:
        print(SMOKE_NOTE)
    return pred, rows


def plot_rates(s: Setup, rows: list[dict]) -> None:
    """Measured, simulated and closed-form rates against the searcher count (rates.png)."""
    import matplotlib.pyplot as plt

    ns = [r["searchers"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, (key, label) in zip(axes, [("upm", "trainer updates / min"),
                                       ("samples/min", "samples / min")]):
        ax.plot(ns, [num(r.get(f"meas_{key}")) for r in rows], "o-", color="C0", label="measured")
        ax.plot(ns, [num(r.get(f"sim_{key}")) for r in rows], "s--", color="C1", label="simulated")
        ax.plot(ns, [num(r.get(f"closed_{key}")) for r in rows], ":", color="0.4",
                label="closed form (all busy)")
        ax.set(xlabel="searchers", ylabel=label, xticks=ns, ylim=(0, None), title=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(s.out / "rates.png", dpi=110)
    plt.show()


def _ratio(a, b) -> str:
    """ "x1.23": the ratio a / b, or "x? (not measured)" when either is missing."""
    a, b = num(a), num(b)
    return f"x{a / b:.2f}" if b and np.isfinite(a) and np.isfinite(b) else "x? (not measured)"


def _pct(a, b) -> str:
    """(a - b) / b as a signed percentage, or "(not measured)"."""
    a, b = num(a), num(b)
    return f"{100 * (a - b) / b:+.0f}%" if b and np.isfinite(a) and np.isfinite(b) else "(not measured)"


def _verdict(gain: float, cap: float, steps: int) -> str:
    """How the measured gain in samples per minute compares with the placement's ceiling."""
    if steps < 5 or not (np.isfinite(gain) and np.isfinite(cap)):
        return f"too few updates to compare ({steps} in the shorter run)"
    if gain > 1.05 * cap:
        return "above the ceiling (the 1-searcher run was probably slowed by something else)"
    if gain >= 0.85 * cap:
        return "close to the ceiling"
    return "below the ceiling but more than one searcher gave" if gain > 1.0 else "no gain at all"


def readings(s: Setup, measured: dict, pred: dict, summaries: dict, configs: dict,
             loads: dict) -> list[str]:
    """The reading of section 4, written from the numbers: per searcher count, the gain in
    samples per minute over one searcher against the placement's ceiling and the simulator,
    and the trainer's rate; then what limits the comparison. Printed and returned."""
    first, one = s.searchers[0], measured[s.searchers[0]]
    lines = []
    for n in s.searchers[1:]:
        m, p = measured[n], pred[n]
        cap = num(p["closed_samples"]) / num(pred[first]["closed_samples"])
        s1 = num(one["steady_samples_per_minute"])
        gain = num(m["steady_samples_per_minute"]) / s1 if s1 else float("nan")
        steps = min(summaries[n]["trainer_steps"], summaries[first]["trainer_steps"])
        devices = sorted(set(placement(configs[n])))
        upm = _ratio(m["steady_updates_per_minute"], one["steady_updates_per_minute"])
        lines.append(
            f"{n} searchers ({', '.join(devices)}): samples/min {_ratio(gain, 1.0)} over one "
            f"searcher, ceiling {_ratio(cap, 1.0)} from the placement, simulator "
            f"{_ratio(p['sim_samples'], pred[first]['sim_samples'])} -> {_verdict(gain, cap, steps)}; "
            f"trainer updates/min {upm} (closed form "
            f"{_ratio(p['closed_updates'], pred[first]['closed_updates'])}); simulated "
            f"updates/min off by {_pct(p['sim_updates'], m['steady_updates_per_minute'])}")
    if not s.use_gpu:
        lines.append(f"all actors are CPU processes on {s.cores} cores: more searchers can only share "
                     "the same cores, so the ceiling above is set by the hardware, not by the kit")
    worst = max(loads.values())
    if worst > s.cores:
        lines.append(f"the load average reached {worst:.1f} on {s.cores} cores before a run: other "
                     "programs competed for the cores, so treat the ratios as rough")
    if s.smoke:
        lines.append(SMOKE_NOTE)
    for line in lines:
        print("-", line)
    return lines


# ---------------------------------------------------------------- section 5: Ray
def ray_run(s: Setup, measured: dict) -> tuple[dict | None, dict | None, int]:
    """The run of section 2 with 2 searchers (1 in SMOKE) through the Ray launcher, a local Ray
    with 2 logical CPUs, printed beside the local launcher's run and drawn (ray_timeline.png).

    Returns:
        (summary, timings, searchers): ``summary.json``'s dict and
        :func:`tba_lab.lab.simulate.run_timings` (with ``steady_samples_per_minute``), both None
        when skipped (Ray not installed, or no launcher registered under "ray").
    """
    import time

    import matplotlib.pyplot as plt

    from tba_lab.lab.simulate import format_table, run_timings
    from tba_lab.lab.timeline import plot_timeline
    from tba_lab.registry import LAUNCHERS
    from tba_lab.trainer import train

    n = 1 if s.smoke else 2
    if not s.ray_installed:
        print("skipped: Ray is not installed here (pip install -e '.[ray]')")
        return None, None, n
    if not s.ray_launcher:
        print(f"skipped: Ray is installed, but no launcher is registered under 'ray' "
              f"(registered: {LAUNCHERS.names()})")
        return None, None, n
    # the launcher starts a local Ray (no dashboard) and shuts it down at the end of the run;
    # with RAY_ADDRESS set it would join that cluster instead
    t0 = time.time()
    cfg = run_config(s, n, launcher="ray", ray={"num_cpus": 2})
    summary = train(cfg, progress=False)
    timings = run_timings(cfg.output_dir)
    timings["steady_samples_per_minute"] = steady_samples_per_minute(cfg.output_dir)
    print(f"ray, {n} searcher(s): {summary['trainer_steps']} updates in "
          f"{summary['wall_seconds']:.1f} s, {summary['samples_generated']} samples, staleness "
          f"mean {num(summary['staleness_mean']):.2f} [{time.time() - t0:.0f} s with Ray's "
          "start, the actors' start-up and evaluation]")
    local = measured.get(n)
    table = [{"launcher": "ray", **timings}] + ([{"launcher": "local", **local}] if local else [])
    print(format_table(table, ["launcher", "num_searchers", "gen_seconds", "score_seconds",
                               "update_seconds", "steady_updates_per_minute",
                               "steady_samples_per_minute", "staleness_mean",
                               "searcher_start_seconds"]))
    if s.smoke:
        print(SMOKE_NOTE)
    fig, ax = plt.subplots(figsize=(11, 1.6 + 1.1 * (n + 1)))
    plot_timeline(cfg.output_dir, ax=ax, title=f"Ray launcher, {n} searcher(s)")
    fig.tight_layout()
    fig.savefig(s.out / "ray_timeline.png", dpi=110)
    plt.show()
    return summary, timings, n


def summary_metrics(s: Setup, measured: dict, pred: dict, busy: dict, sync_ms: dict,
                    sync_log_ms: dict, ray: tuple, seconds: float) -> dict:
    """The notebook's ``metrics.json``: device, rates measured and predicted per searcher
    count, the trainer's busy fraction, the weight-sync timings, the Ray run's rates (``ray``:
    :func:`ray_run`'s result) and ``seconds``, the notebook's wall time."""
    out = {"device": "cuda" if s.use_gpu else "cpu", "gpus": s.gpus, "cores": s.cores,
           "run_seconds": s.run_seconds}
    for n in s.searchers:
        m = measured[n]
        out[f"updates_per_minute_n{n}"] = rnd(m["steady_updates_per_minute"])
        out[f"samples_per_minute_n{n}"] = rnd(m["steady_samples_per_minute"])
        out[f"predicted_updates_per_minute_n{n}"] = rnd(pred[n]["sim_updates"])
        out[f"predicted_samples_per_minute_n{n}"] = rnd(pred[n]["sim_samples"])
        out[f"closed_form_samples_per_minute_n{n}"] = rnd(pred[n]["closed_samples"])
        if n in busy:
            out[f"trainer_busy_n{n}"] = round(busy[n]["trainer"], 3)
    out.update({k: round(v, 3) for k, v in sync_ms.items()})
    out.update({f"sync_log_ms_n{n}": round(v, 3) for n, v in sync_log_ms.items()})
    ray_summary, ray_timings, n_ray = ray
    out["ray_ran"] = ray_summary is not None
    if ray_timings is not None:
        out[f"ray_updates_per_minute_n{n_ray}"] = rnd(ray_timings["steady_updates_per_minute"])
        out[f"ray_samples_per_minute_n{n_ray}"] = rnd(ray_timings["steady_samples_per_minute"])
    out["notebook_seconds"] = round(seconds, 1)
    return out
