"""Notebook 10 (placing the trainer and the searchers): exercises, and the notebook's helpers.

Exercises
    10.plan_devices  the TBA paper's layout on G GPUs: the trainer alone on cuda:0, the searchers
                     round robin over the others; one GPU shared by all; no GPU: CPU processes
    10.flat_layout   where each parameter lives in the one flat buffer the weights travel in
                     (byte offsets aligned as :class:`tba_lab.actors.weights.Layout` aligns them)

:func:`plan_devices` and :func:`flat_layout` are the references. The helpers below set up, build
the run's config from a plan, print the placement, time the weight channel, run the Ray launcher
and draw; each says why it skips on a machine without a GPU or without Ray. The same cells run
on a GPU machine (the actors on CUDA devices, the weights through CUDA IPC) and on a CPU-only
one (every actor a CPU process, the weights through shared memory).
"""
from __future__ import annotations

import importlib.util
import inspect
from dataclasses import dataclass
from pathlib import Path

from tba_lab.lab.course import Exercise

SMOKE_NOTE = "SMOKE: start-up dominated (runs of a few seconds), these rates are not results"


# ---------------------------------------------------------------- 10.plan_devices
def plan_devices(num_searchers: int, num_gpus: int) -> tuple[str, list[str]]:
    """The TBA paper's layout: the trainer alone on ``cuda:0``, the searchers round robin over
    ``cuda:1`` .. ``cuda:G-1``; with one GPU all share ``cuda:0``; with none every actor is a
    CPU process.

    Returns:
        (trainer_device, searcher_devices): the values of ``async.trainer_device`` and
        ``async.searcher_devices`` (one entry per searcher).
    """
    if num_gpus <= 0:
        return "cpu", ["cpu"] * num_searchers
    if num_gpus == 1:
        return "cuda:0", ["cuda:0"] * num_searchers
    return "cuda:0", [f"cuda:{1 + i % (num_gpus - 1)}" for i in range(num_searchers)]


def plan_devices_stub(num_searchers, num_gpus):
    """Where the trainer and each searcher run, as the TBA paper lays them out.

    Args: num_searchers >= 1; num_gpus >= 0, the GPUs this machine has.
    Returns (trainer_device, searcher_devices): a string and a list of num_searchers strings.
    * no GPU: everything on "cpu";
    * one GPU: everything on "cuda:0" (they take turns on it);
    * G >= 2 GPUs: the trainer alone on "cuda:0", searcher i on "cuda:{1 + i % (G - 1)}"
      (round robin over cuda:1 .. cuda:G-1, never cuda:0).
    """
    # YOUR CODE HERE
    raise NotImplementedError


def _same(got, want) -> str | None:
    if isinstance(got, list) and isinstance(want, tuple):
        got = tuple(got)
    return None if got == want else f"got {got!r}, expected {want!r}"


def _plan_cases():
    return [((2, 0), {}), ((3, 1), {}), ((3, 4), {}), ((5, 3), {}), ((1, 8), {}), ((7, 2), {}),
            ((2, 2), {})]


PLAN_DEVICES = Exercise(
    name="10.plan_devices",
    description="the trainer alone on cuda:0, searchers round robin over the other GPUs",
    stub=plan_devices_stub, reference=plan_devices,
    cases=_plan_cases, compare=_same)


# ---------------------------------------------------------------- 10.flat_layout
def flat_layout(named, align: int = 256) -> tuple[list[int], int]:
    """Byte offsets of ``named`` tensors in one flat buffer, and its size, as the weight
    channel lays them out (:class:`tba_lab.actors.weights.Layout`).

    Returns:
        ([offset of each tensor], nbytes).
    """
    from tba_lab.actors.weights import Layout

    layout = Layout(named, align)
    return [e.offset for e in layout.entries], layout.nbytes


def flat_layout_stub(named, align=256):
    """Where each tensor lives in one flat byte buffer.

    Args:
        named: list of (name, tensor) pairs, in order (e.g. model.named_parameters()).
        align: a power of two; every offset is a multiple of it.
    Returns (offsets, nbytes): offsets, a list of ints, the first byte of each tensor: the
    end of the previous one (0 for the first) rounded UP to a multiple of align; a tensor takes
    numel * element_size bytes. nbytes, an int: the last tensor's end rounded up to a multiple
    of align, and at least align (an empty list gives ([], align)).
    """
    # YOUR CODE HERE
    raise NotImplementedError


def _layout_cases():
    import torch

    g = torch.Generator().manual_seed(10)
    dtypes = [torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.float64]
    named = [(f"p{i}", torch.zeros(int(torch.randint(1, 300, (1,), generator=g)),
                                   dtype=dtypes[i % len(dtypes)])) for i in range(9)]
    small = [("w", torch.zeros(3, 5)), ("b", torch.zeros(5, dtype=torch.bfloat16))]
    return [((small, 256), {}), ((small, 8), {}), ((named, 64), {}), ((named, 256), {}),
            (([("x", torch.zeros(64))], 256), {}), (([], 256), {})]


def _same_layout(got, want) -> str | None:
    try:
        offsets, nbytes = got
        got = ([int(o) for o in offsets], int(nbytes))
    except (TypeError, ValueError):
        return f"expected (offsets, nbytes), got {type(got).__name__}"
    if got[0] != want[0]:
        bad = next((i for i, (a, b) in enumerate(zip(got[0], want[0])) if a != b), None)
        return (f"offsets {got[0]}, expected {want[0]}"
                + (f" (first difference at tensor {bad})" if bad is not None else ""))
    return None if got[1] == want[1] else f"nbytes {got[1]}, expected {want[1]}"


FLAT_LAYOUT = Exercise(
    name="10.flat_layout",
    description="byte offsets of the parameters in the flat weight buffer, aligned",
    stub=flat_layout_stub, reference=flat_layout,
    cases=_layout_cases, compare=_same_layout)


EXERCISES = [PLAN_DEVICES, FLAT_LAYOUT]


# ================================================================ the notebook's helpers
@dataclass
class Setup:
    """The notebook's settings and what this machine has.

    Attributes:
        out: the output folder (figures, metrics.json, ``runs/<launcher>_<n>/``).
        smoke, seed: the notebook's parameters.
        searchers: searchers per run.
        run_seconds: training budget per run, seconds (start-up and evaluation come on top).
        batch: ``training`` overrides, B prompts x K responses.
        eval_size: held-out problems evaluated before and after each run.
        cores: CPU cores usable by this process; gpus: CUDA GPUs visible (0 without CUDA).
        ray_installed: ``ray`` importable; ray_launcher: a launcher registered under "ray".
    """
    out: Path
    smoke: bool
    seed: int
    searchers: int
    run_seconds: float
    batch: dict
    eval_size: int
    cores: int
    gpus: int
    ray_installed: bool
    ray_launcher: bool


def setup(output_dir, smoke: bool, seed: int, run_seconds=None) -> Setup:
    """Create the output folder, find the GPUs and Ray, print them, return the :class:`Setup`.

    ``run_seconds`` None: 12 s of training per run in SMOKE, else 40 s (a GPU machine's
    searchers take about 11 s to start).
    """
    import importlib.metadata

    import torch

    from tba_lab.actors.placement import available_cores
    from tba_lab.registry import LAUNCHERS

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    ray_installed = importlib.util.find_spec("ray") is not None
    s = Setup(out=out, smoke=smoke, seed=seed, searchers=2,
              run_seconds=run_seconds or (12 if smoke else 40),
              batch=({"num_prompts_per_step": 8, "num_generations": 4} if smoke
                     else {"num_prompts_per_step": 16, "num_generations": 8}),
              eval_size=20 if smoke else 100, cores=available_cores(), gpus=gpus,
              ray_installed=ray_installed, ray_launcher="ray" in LAUNCHERS.names())
    print(f"torch {torch.__version__}; {s.cores} CPU cores usable by this process")
    for i in range(gpus):
        p = torch.cuda.get_device_properties(i)
        print(f"  cuda:{i}  {p.name}, {p.total_memory / 2**30:.0f} GiB")
    print(f"=> {gpus} GPU(s): the runs place the actors on them" if gpus else
          "=> no CUDA GPU here (torch.cuda.is_available() is False): the same cells run every "
          "actor as a CPU process, and the weights go through shared memory, not CUDA IPC")
    print(f"Ray installed: {ray_installed}"
          + (f" (version {importlib.metadata.version('ray')})" if ray_installed else "")
          + f"; launchers registered: {LAUNCHERS.names()}")
    print(f"runs: {s.searchers} searchers, {s.run_seconds} s of training each, "
          f"B = {s.batch['num_prompts_per_step']} prompts x K = {s.batch['num_generations']} responses")
    return s


def run_config(s: Setup, devices: dict, launcher: str = "local", **sections):
    """A short async TB run with ``s.searchers`` searchers (:func:`tba_lab.config.short_run`):
    1 torch thread per process (notebook 04 explains why), each searcher doing its own
    reference pass (the paper's layout: the trainer's time is then its updates alone), the
    ``async`` device fields ``devices``. ``sections``: a launcher's own section, e.g.
    ``ray={"num_cpus": 2}``."""
    from tba_lab.config import short_run

    return short_run(s.out / "runs" / f"{launcher}_{s.searchers}", s.run_seconds, seed=s.seed,
                     eval_size=s.eval_size, eval_every_seconds=0, overrides={
        "algo": "tb", "training": s.batch, **sections,
        "async": {"launcher": launcher, "num_searchers": s.searchers, "searcher_threads": 1,
                  "trainer_threads": 1, "reference_pass": "searcher", **devices}})


def placement(cfg) -> list[str]:
    """[the trainer's device, searcher 0's, searcher 1's, ...] of a built config, with the
    kit's rule (:func:`tba_lab.config.searcher_device`); "cuda" reads as "cuda:0"."""
    from tba_lab.actors.weights import normal_device
    from tba_lab.config import searcher_device

    return ([normal_device(cfg.async_.trainer_device)]
            + [searcher_device(cfg, i) for i in range(cfg.async_.num_searchers)])


def show_placement(s: Setup, cfg) -> None:
    """Print the config's device fields, who runs where, how many actors share each device,
    and the weight channel the local launcher builds for it."""
    where = placement(cfg)
    share = {d: where.count(d) for d in dict.fromkeys(where)}
    print(f"async.trainer_device = {cfg.async_.trainer_device!r}, "
          f"async.searcher_devices = {list(cfg.async_.searcher_devices)}")
    print(f"trainer -> {where[0]};  "
          + ";  ".join(f"searcher {i} -> {d}" for i, d in enumerate(where[1:])))
    print("per device: " + ", ".join(f"{d}: {m} actor(s)" + (f" on {s.cores} cores" if d == "cpu" else "")
                                     for d, m in share.items()))
    gpu = all(d.startswith("cuda") for d in where)
    print("weight channel: " + ("FlatWeights (one CUDA buffer on the trainer's GPU, CUDA IPC)" if gpu
                                else "SharedWeights (one flat CPU tensor in shared memory)"))


def plot_run(s: Setup, cfg, name: str) -> None:
    """Draw a run's timeline (its last 10 s; the whole run in SMOKE) into ``<name>.png``."""
    import matplotlib.pyplot as plt

    from tba_lab.lab.timeline import load_timeline, plot_timeline

    wall = load_timeline(cfg.output_dir)["wall_seconds"]
    window = (0.0, wall) if s.smoke else (max(0.0, wall - 10.0), wall)
    fig, ax = plt.subplots(figsize=(11, 1.6 + 1.1 * (s.searchers + 1)))
    plot_timeline(cfg.output_dir, ax=ax, window=window,
                  title=f"{name}: placement {placement(cfg)}, {window[0]:.0f}-{window[1]:.0f} s")
    fig.tight_layout()
    fig.savefig(s.out / f"{name}.png", dpi=110)
    plt.show()


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




def plot_recorded(out: Path) -> None:
    """Draw and print the time per update recorded on one H200 with 16 cores
    (:mod:`tba_lab.lab.recorded`, the kit before ``reference_pass: auto``)."""
    import matplotlib.pyplot as plt

    from tba_lab.lab import recorded
    from tba_lab.lab.timeline import format_time_per_update, plot_time_per_update

    print("recorded:", recorded.SOURCE)
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.4))
    plot_time_per_update(recorded.legs(recorded.CPU_LEGS), axes=axes[0],
                         title="16 CPU cores, async TB")
    plot_time_per_update(recorded.legs(recorded.GPU_LEGS), axes=axes[1], title="one H200")
    fig.suptitle(f"recorded {recorded.DATE}, {recorded.MACHINE}, kit at {recorded.COMMIT} "
                 f"(old default), seed {recorded.SEED}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "time_per_update_h200.png", dpi=110)
    plt.show()
    print(format_time_per_update(recorded.H200_2026_12_04))




def print_launcher_protocol() -> None:
    """Print the six methods of the :class:`tba_lab.actors.launcher.Launcher` protocol, the
    launchers registered under ``async.launcher``, and whether Ray is installed here."""
    from tba_lab.actors.launcher import Launcher
    from tba_lab.registry import LAUNCHERS

    for name in ("start", "publish", "poll", "restart", "retire", "stop"):
        fn = getattr(Launcher, name)
        print(f"launcher.{name}{inspect.signature(fn)}\n    {inspect.getdoc(fn).splitlines()[0]}")
    print("\nregistered launchers (async.launcher):", LAUNCHERS.names())
    print("Ray installed here:", importlib.util.find_spec("ray") is not None)


def ray_run(s: Setup, devices: dict, local: dict):
    """Section 3's run again through the Ray launcher (a local Ray with 2 logical CPUs, the same
    device fields), printed beside the local launcher's run ``local`` (:func:`run_timings`) and
    drawn (ray_timeline.png).

    Returns:
        :func:`tba_lab.lab.simulate.run_timings` of the Ray run, or None when skipped (Ray not
        installed, or no launcher registered under "ray"); the reason is printed.
    """
    import time

    from tba_lab.lab.simulate import format_table, run_timings
    from tba_lab.registry import LAUNCHERS
    from tba_lab.trainer import train

    if not s.ray_installed:
        print("skipped: Ray is not installed here (pip install -e '.[ray]')")
        return None
    if not s.ray_launcher:
        print(f"skipped: Ray is installed, but no launcher is registered under 'ray' "
              f"(registered: {LAUNCHERS.names()})")
        return None
    # the launcher starts a local Ray (no dashboard) and shuts it down at the end of the run;
    # with RAY_ADDRESS set it would join that cluster instead
    t0 = time.time()
    cfg = run_config(s, devices, launcher="ray", ray={"num_cpus": 2})
    train(cfg, progress=False)
    timings = run_timings(cfg.output_dir)
    print(f"ray: {time.time() - t0:.0f} s with Ray's start, the actors' start-up and evaluation")
    print(format_table([{"launcher": "ray", **timings}, {"launcher": "local", **local}],
                       ["launcher", "num_searchers", "searcher_start_seconds", "gen_seconds",
                        "update_seconds", "steady_updates_per_minute", "samples_per_minute",
                        "staleness_mean"]))
    if s.smoke:
        print(SMOKE_NOTE)
    plot_run(s, cfg, "ray_timeline")
    return timings
