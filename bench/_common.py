"""What the bench scripts share: the repository root, where a check ran, and one run's numbers
read back from its logs (gpu_check's async run and every scaling_check leg)."""
from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the kit without installing it (the GPU machine has no venv)

from tba_lab.runlog import read_jsonl_rows, time_to_target  # noqa: E402

LOG_FILES = ("config.yaml", "summary.json", "metrics.jsonl", "searchers.jsonl", "eval.jsonl")


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Inside the block SIGTERM (``kill``, ``timeout``) raises KeyboardInterrupt, as Ctrl-C does,
    so a script's cleanup of the processes it started runs; the old handler comes back after."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def commit() -> str | None:
    """The checkout's short commit hash, or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out or None


def environment(gpu: bool) -> dict:
    """Where a check ran: cores (``os.cpu_count()`` and the usable ones under a CPU quota),
    Python, torch and transformers versions, the commit, and with ``gpu`` the GPU's name and
    CUDA version."""
    from tba_lab.actors.placement import available_cores

    env = {"cpu_count": os.cpu_count(), "cores_usable": available_cores(),
           "python": sys.version.split()[0], "started": time.strftime("%Y-%m-%d %H:%M:%S"),
           "commit": commit()}
    for pkg in ("torch", "transformers"):
        env[pkg] = None
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            env[pkg] = importlib.metadata.version(pkg)
    if gpu:
        import torch

        env.update(gpu=torch.cuda.get_device_name(0), cuda=torch.version.cuda)
    return env


def keep_logs(run_dir: Path, dest: Path, names=LOG_FILES) -> None:
    """Copy a run's small log files ``names`` into ``dest`` and remove ``run_dir`` (policy,
    buffer and checkpoint: a GPU machine returns at most 8 files)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, dest / name)
    shutil.rmtree(run_dir, ignore_errors=True)


def _configured(run_dir: Path) -> dict:
    """``config.yaml``'s ``async`` section as configured ({} without the file)."""
    import yaml

    path = run_dir / "config.yaml"
    return (yaml.safe_load(path.read_text()) or {}).get("async") or {} if path.is_file() else {}


def _median(xs: list) -> float | None:
    return round(float(statistics.median(xs)), 4) if xs else None


def _round(x, digits: int = 1):
    return None if x is None else round(float(x), digits)


def leg_metrics(run_dir: str | Path) -> dict:
    """One run's numbers from its logs (``summary.json`` may be missing: a stopped run's rates
    then come from ``metrics.jsonl`` and the summary's fields are None).

    Rates are per minute: ``updates_per_minute`` (the summary's, start-up in),
    ``steady_updates_per_minute`` (from the first to the last update), ``samples_per_minute``
    (generated per training minute), ``steady_samples_per_minute`` (received from the first
    update's start to the last one's end). ``trainer_busy`` = update seconds / (update + wait +
    reference seconds) over the updates after the first (which waits for the start-up and the
    initial fill); ``update_seconds``, ``reference_seconds``, ``wait_seconds`` and
    ``gen_seconds`` are medians in seconds; ``evals`` is [[seconds, accuracy], ...] and
    ``time_to_40`` / ``time_to_45`` the interpolated seconds to that accuracy (TBA Sec. 4; None
    when never reached); ``resolved`` / ``configured``: the placement used / ``config.yaml``'s.
    """
    run_dir = Path(run_dir)
    path = run_dir / "summary.json"
    summary = json.loads(path.read_text()) if path.is_file() else {}
    rows = read_jsonl_rows(run_dir / "metrics.jsonl")
    batches = read_jsonl_rows(run_dir / "searchers.jsonl")
    eval_rows = [e for e in read_jsonl_rows(run_dir / "eval.jsonl") if "accuracy" in e]
    later = rows[1:] or rows
    upd, wait, ref = ([r.get(k, 0.0) for r in later]
                      for k in ("update_seconds", "wait_seconds", "reference_seconds"))
    busy_den = sum(upd) + sum(wait) + sum(ref)
    steady = steady_samples = None
    if len(rows) >= 2 and rows[-1]["wall_seconds"] > rows[0]["wall_seconds"]:
        t0, t1 = rows[0]["wall_seconds"] - rows[0].get("update_seconds", 0.0), rows[-1]["wall_seconds"]
        steady = 60.0 * (rows[-1]["step"] - rows[0]["step"]) / (t1 - rows[0]["wall_seconds"])
        got = sum(b.get("rollouts", 0) for b in batches if t0 < b.get("received", -1) <= t1)
        steady_samples = 60.0 * got / (t1 - t0)
    wall = summary.get("wall_seconds") or (rows[-1]["wall_seconds"] if rows else None)
    samples = summary.get("samples_generated", rows[-1].get("samples_generated") if rows else None)
    reach = {f"time_to_{p}": _round(time_to_target(eval_rows, p / 100)) if eval_rows else None
             for p in (40, 45)}
    return {
        "updates": summary.get("trainer_steps", rows[-1]["step"] if rows else 0),
        "wall_seconds": wall, "updates_per_minute": summary.get("updates_per_minute"),
        "steady_updates_per_minute": _round(steady), "samples_generated": samples,
        "samples_per_minute": _round(60.0 * samples / wall) if samples is not None and wall else None,
        "steady_samples_per_minute": _round(steady_samples),
        "staleness_mean": _round(summary.get("staleness_mean"), 3),
        "staleness_max": summary.get("staleness_max"),
        "trainer_busy": round(sum(upd) / busy_den, 4) if busy_den > 0 else None,
        "update_seconds": _median(upd), "reference_seconds": _median(ref), "wait_seconds": _median(wait),
        "gen_seconds": _median([b["gen_seconds"] for b in batches if "gen_seconds" in b]),
        "generation_batches": len(batches),
        "accuracy_before": summary.get("accuracy_before"), "accuracy_after": summary.get("accuracy_after"),
        "evals": [[e["wall_seconds"], e["accuracy"]] for e in eval_rows], **reach,
        "searcher_failures": summary.get("searcher_failures", []),
        "resolved": summary.get("placement"), "configured": _configured(run_dir),
    }
