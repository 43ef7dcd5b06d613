"""The default ``tba-lab train`` run, several seeds, optionally side by side with another checkout.

    python bench/default_runs.py --seeds 0 1                      # this checkout
    python bench/default_runs.py --seeds 0 1 --other /path/to/old  # interleaved: other, this, ...
    python bench/default_runs.py --seeds 0 1 2 --other bd662ce --max-minutes 2  # a commit of this repo
    python bench/default_runs.py --task preference --seeds 0 1 2   # another task, its own metrics

Each run is ``python -m tba_lab train --seed S --no-progress`` with every other setting at its
default (async TBA, 9-minute budget), in a fresh process, one after another (never two at once:
they would share the cores). With ``--other`` the runs alternate between the two checkouts
seed by seed (``other`` first), so a drift in machine load affects both alike; the other
checkout's package is put first on ``PYTHONPATH``. ``--other`` may also name a commit of this
repository, checked out into a temporary worktree for the runs. The script prints, and writes to
``<out>/default_runs.md`` and ``.json``, one row per run: accuracy before and after, gain,
trainer updates, updates per minute, samples, staleness, and the trainer's median update and
reference-pass seconds per update (``metrics.jsonl``), with the date, the core count and the
seeds. For a task other than the default, the columns are that task's held-out metrics
(``held_out_metrics`` of its ``summary.json``, the headline first) before and after. Numbers
move with machine load: compare rows of one invocation, not across days.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def run(code_dir: Path, seed: int, out: Path, minutes: float | None, task: str | None = None) -> dict:
    """One default run of the package in ``code_dir`` (of ``task``, with its embedded model, when
    given); returns its ``summary.json``."""
    env = {**os.environ, "PYTHONPATH": str(code_dir)}
    cmd = [sys.executable, "-m", "tba_lab", "train", "--seed", str(seed), "--output-dir", str(out),
           "--no-progress"] + (["--max-minutes", str(minutes)] if minutes else []) + (
           ["--task", task] if task else [])
    t0 = time.time()
    subprocess.run(cmd, env=env, cwd=code_dir, check=True)
    summary = json.loads((out / "summary.json").read_text())
    summary["process_seconds"] = round(time.time() - t0, 1)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][1:]
    for key in ("update_seconds", "reference_seconds"):  # medians per update, the first left out
        summary[key] = statistics.median(r.get(key, 0.0) for r in rows) if rows else None
    return summary


@contextlib.contextmanager
def checkout(other: str):
    """``other`` as a folder: itself if it is one, else a temporary worktree of that commit of
    this repository (removed afterwards)."""
    if Path(other).is_dir():
        yield Path(other).resolve()
        return
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "other"
        subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", str(tree), other],
                       check=True, stdout=subprocess.DEVNULL)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(tree)],
                           check=False)


def metrics_of(s: dict) -> list[str]:
    """The held-out metrics a summary reports, the headline first (``accuracy`` for math)."""
    return list(s.get("held_out_metrics") or ["accuracy"])


def row(label: str, s: dict) -> str:
    """One table row: before -> after of each held-out metric, then the run's throughput."""
    cells = []
    for m in metrics_of(s):
        before, after = s.get(f"{m}_before"), s.get(f"{m}_after")
        if before is None or after is None:
            cells.append("-")
        elif m in ("accuracy", "win_rate", "attack_success"):  # fractions, shown in percent
            cells.append(f"{100 * before:.1f}% -> {100 * after:.1f}% ({100 * (after - before):+.1f})")
        else:
            cells.append(f"{before:.3g} -> {after:.3g}")
    def sec(key):
        return "-" if s.get(key) is None else f"{s[key]:.3f}"

    return (f"| {label} | {s['seed']} | " + " | ".join(cells) + f" | {s['trainer_steps']:,} | "
            f"{s['updates_per_minute']:.1f} | {s['samples_generated']:,} | "
            f"{s['staleness_mean']:.1f} / {s['staleness_max']} | {sec('update_seconds')} | "
            f"{sec('reference_seconds')} |")


def spread(results: list[dict], metrics: list[str]) -> list[str]:
    """Per checkout: each metric's value after training as mean (min to max) over seeds."""
    lines = []
    for label in dict.fromkeys(r["label"] for r in results):
        rs = [r for r in results if r["label"] == label]
        parts = []
        for m in metrics:
            vals = [r[f"{m}_after"] for r in rs if r.get(f"{m}_after") is not None]
            if vals:
                parts.append(f"{m} {sum(vals) / len(vals):.4g} ({min(vals):.4g} to {max(vals):.4g})")
        upm = [r["updates_per_minute"] for r in rs]
        lines.append(f"- `{label}` after training, mean (min to max) over {len(rs)} seeds: "
                     + ", ".join(parts) + f"; updates/min {min(upm):.0f} to {max(upm):.0f}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--other", help="another checkout of tba-lab, or a commit of this repository, "
                                   "to run side by side")
    p.add_argument("--out", type=Path, default=Path("runs/default_runs"))
    p.add_argument("--max-minutes", type=float, help="budget (default: the config's 9 minutes)")
    p.add_argument("--task", help="task name (default: the config's, arithmetic)")
    args = p.parse_args(argv)
    args.out = args.out.resolve()  # the runs' working directory is their checkout
    started = datetime.datetime.now().isoformat(timespec="minutes")
    results = []
    with (checkout(args.other) if args.other else contextlib.nullcontext()) as other:
        codes = ([("other", other)] if other else []) + [("this", HERE)]
        for seed in args.seeds:
            for label, code in codes:
                s = run(code, seed, args.out / f"{label}_seed{seed}", args.max_minutes, args.task)
                results.append({"label": label, "code": str(code), **s})
                print(row(label, s), flush=True)
    metrics = metrics_of(results[0]) if results else ["accuracy"]
    task = f" --task {args.task}" if args.task else ""
    head = [f"Default `tba-lab train{task}` runs, started {started}, {os.cpu_count()} cores, seeds "
            f"{args.seeds}" + (f"; `other` = {args.other}" if args.other else ""), "",
            "| code | seed | " + " | ".join(f"{m} (before -> after)" for m in metrics)
            + " | trainer updates | updates/min | samples | staleness mean / max | update s | reference s |",
            "|---|---|" + "---|" * len(metrics) + "---|---|---|---|---|---|"]
    text = "\n".join(head + [row(r["label"], r) for r in results] + [""] + spread(results, metrics))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "default_runs.md").write_text(text + "\n")
    (args.out / "default_runs.json").write_text(json.dumps(results, indent=2) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
