"""Notebook 10 (placing the trainer and the searchers): its exercises, the TBA paper's device
layout and the flat weight buffer's byte offsets; and the helpers that set up, build the run's
config, print the placement and the launcher protocol, and draw. The notebook's own cells time
the weight channel and run the Ray launcher.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from tba_lab.lab.course import compare_value, exercise, output_folder, show_figure

SMOKE_NOTE = "SMOKE: start-up dominated (runs of a few seconds), these rates are not results"


# ---------------------------------------------------------------- 10.plan_devices
def plan_devices(num_searchers: int, num_gpus: int) -> tuple[str, list[str]]:
    """(``async.trainer_device``, ``async.searcher_devices``) of the TBA paper's layout: the
    trainer alone on ``cuda:0``, the searchers round robin over ``cuda:1`` .. ``cuda:G-1``;
    with one GPU all share ``cuda:0``; with none every actor is a CPU process."""
    if num_gpus <= 0:
        return "cpu", ["cpu"] * num_searchers
    if num_gpus == 1:
        return "cuda:0", ["cuda:0"] * num_searchers
    return "cuda:0", [f"cuda:{1 + i % (num_gpus - 1)}" for i in range(num_searchers)]


@exercise("10.plan_devices",
          "the trainer alone on cuda:0, searchers round robin over the other GPUs", plan_devices,
          lambda: [((n, g), {})
                   for n, g in ((2, 0), (3, 1), (3, 4), (5, 3), (1, 8), (7, 2), (2, 2))],
          compare=compare_value)
def plan_devices_stub(num_searchers, num_gpus):
    """(trainer_device, searcher_devices): a string and a list of num_searchers strings."""
    # YOUR CODE HERE
    raise NotImplementedError


# ---------------------------------------------------------------- 10.flat_layout
def flat_layout(named, align: int = 256) -> tuple[list[int], int]:
    """([byte offset of each of the ``named`` tensors], nbytes) in one flat buffer, as the
    weight channel lays them out (:class:`tba_lab.actors.weights.Layout`)."""
    from tba_lab.actors.weights import Layout

    layout = Layout(named, align)
    return [e.offset for e in layout.entries], layout.nbytes


def _layout_cases():
    import torch

    g = torch.Generator().manual_seed(10)
    dtypes = [torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.float64]
    named = [(f"p{i}", torch.zeros(int(torch.randint(1, 300, (1,), generator=g)),
                                   dtype=dtypes[i % len(dtypes)])) for i in range(9)]
    small = [("w", torch.zeros(3, 5)), ("b", torch.zeros(5, dtype=torch.bfloat16))]
    return [((small, 256), {}), ((small, 8), {}), ((named, 64), {}), ((named, 256), {}),
            (([("x", torch.zeros(64))], 256), {}), (([], 256), {})]


@exercise("10.flat_layout", "byte offsets of the parameters in the flat weight buffer, aligned",
          flat_layout, _layout_cases, rtol=0.0, atol=0.0)
def flat_layout_stub(named, align=256):
    """(offsets, nbytes) of (name, tensor) pairs in one flat byte buffer, offsets aligned."""
    # YOUR CODE HERE
    raise NotImplementedError


# ================================================================ the notebook's helpers
@dataclass
class Setup:
    """The notebook's settings and this machine: ``out`` (figures, metrics.json,
    ``runs/<launcher>_<n>/``), ``smoke``, ``seed``, ``searchers`` per run, ``run_seconds`` of
    training per run, ``batch`` (``training`` overrides), ``eval_size`` (held-out problems),
    ``cores`` usable, ``gpus`` visible, ``ray_installed``, ``ray_launcher`` (registered)."""
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
    """Create the output folder, find and print the GPUs and Ray, return the :class:`Setup`;
    ``run_seconds`` None: 12 s of training per run in SMOKE, else 40 s."""
    import importlib.metadata

    import torch

    from tba_lab.actors.placement import available_cores
    from tba_lab.registry import LAUNCHERS

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    ray_installed = importlib.util.find_spec("ray") is not None
    s = Setup(out=output_folder(output_dir), smoke=smoke, seed=seed, searchers=2,
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
    """A short async TB run (:func:`tba_lab.config.short_run`): ``s.searchers`` searchers,
    1 torch thread per process, each searcher doing its own reference pass, the ``async``
    device fields ``devices``; ``sections``: a launcher's own section, e.g. ``ray={...}``."""
    from tba_lab.config import short_run

    return short_run(s.out / "runs" / f"{launcher}_{s.searchers}", s.run_seconds, seed=s.seed,
                     eval_size=s.eval_size, eval_every_seconds=0, overrides={
        "algo": "tb", "training": s.batch, **sections,
        "async": {"launcher": launcher, "num_searchers": s.searchers, "searcher_threads": 1,
                  "trainer_threads": 1, "reference_pass": "searcher", **devices}})


def placement(cfg) -> list[str]:
    """[trainer's device, searcher 0's, ...] of a built config, by the kit's rule
    (:func:`tba_lab.config.searcher_device`); "cuda" reads as "cuda:0"."""
    from tba_lab.actors.weights import normal_device
    from tba_lab.config import searcher_device

    return ([normal_device(cfg.async_.trainer_device)]
            + [searcher_device(cfg, i) for i in range(cfg.async_.num_searchers)])


def show_placement(s: Setup, cfg) -> None:
    """Print the config's device fields, the placement line the trainer logs when the run
    starts (:func:`tba_lab.actors.placement.describe`) and the weight channel the local
    launcher builds for it."""
    from tba_lab.actors.placement import describe, plan

    print(f"async.trainer_device = {cfg.async_.trainer_device!r}, "
          f"async.searcher_devices = {list(cfg.async_.searcher_devices)}")
    print(describe(plan(cfg, s.cores)))
    print("weight channel: " + ("FlatWeights (one CUDA buffer on the trainer's GPU, CUDA IPC)"
                                if all(d.startswith("cuda") for d in placement(cfg))
                                else "SharedWeights (one flat CPU tensor in shared memory)"))


def plot_run(s: Setup, cfg, name: str) -> None:
    """Draw a run's timeline (its last 10 s; the whole run in SMOKE) into ``<name>.png``."""
    import matplotlib.pyplot as plt

    from tba_lab.lab.timeline import plot_timeline

    fig, ax = plt.subplots(figsize=(11, 1.6 + 1.1 * (s.searchers + 1)))
    plot_timeline(cfg.output_dir, ax=ax, last=None if s.smoke else 10.0,
                  title=f"{name}: placement {placement(cfg)}, "
                        + ("the whole run" if s.smoke else "the last 10 s"))
    show_figure(fig, s.out / f"{name}.png")


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
    show_figure(fig, out / "time_per_update_h200.png")
    print(format_time_per_update(recorded.H200_2026_12_04))


def print_launcher_protocol() -> None:
    """Print the six methods of the :class:`tba_lab.actors.launcher.Launcher` protocol, the
    launchers registered under ``async.launcher``, and whether Ray is installed here."""
    import inspect

    from tba_lab.actors.launcher import Launcher
    from tba_lab.registry import LAUNCHERS

    for name in ("start", "publish", "poll", "restart", "retire", "stop"):
        fn = getattr(Launcher, name)
        print(f"launcher.{name}{inspect.signature(fn)}\n    {inspect.getdoc(fn).splitlines()[0]}")
    print("\nregistered launchers (async.launcher):", LAUNCHERS.names())
    print("Ray installed here:", importlib.util.find_spec("ray") is not None)
