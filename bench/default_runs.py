"""The default ``tba-lab train`` run, several seeds, optionally side by side with another checkout.

    python bench/default_runs.py --seeds 0 1                      # this checkout
    python bench/default_runs.py --seeds 0 1 --other /path/to/old  # interleaved: other, this, ...

Each run is ``python -m tba_lab train --seed S --no-progress`` with every other setting at its
default (async TBA, 9-minute budget), in a fresh process, one after another (never two at once:
they would share the cores). With ``--other`` the runs alternate between the two checkouts
seed by seed (``other`` first), so a drift in machine load affects both alike; the other
checkout's package is put first on ``PYTHONPATH``. The script prints, and writes to
``<out>/default_runs.md`` and ``.json``, one row per run: accuracy before and after, gain,
trainer updates, updates per minute, samples and staleness, with the date, the core count and
the seeds. Numbers move with machine load: compare rows of one invocation, not across days.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def run(code_dir: Path, seed: int, out: Path, minutes: float | None) -> dict:
    """One default run of the package in ``code_dir``; returns its ``summary.json``."""
    env = {**os.environ, "PYTHONPATH": str(code_dir)}
    cmd = [sys.executable, "-m", "tba_lab", "train", "--seed", str(seed), "--output-dir", str(out),
           "--no-progress"] + (["--max-minutes", str(minutes)] if minutes else [])
    t0 = time.time()
    subprocess.run(cmd, env=env, cwd=code_dir, check=True)
    summary = json.loads((out / "summary.json").read_text())
    summary["process_seconds"] = round(time.time() - t0, 1)
    return summary


def row(label: str, s: dict) -> str:
    gain = 100 * (s["accuracy_after"] - s["accuracy_before"])
    return (f"| {label} | {s['seed']} | {100 * s['accuracy_before']:.1f}% | {100 * s['accuracy_after']:.1f}% | "
            f"{gain:+.1f} | {s['trainer_steps']:,} | {s['updates_per_minute']:.1f} | "
            f"{s['samples_generated']:,} | {s['staleness_mean']:.1f} / {s['staleness_max']} |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--other", type=Path, help="another checkout of tba-lab to run side by side")
    p.add_argument("--out", type=Path, default=Path("runs/default_runs"))
    p.add_argument("--max-minutes", type=float, help="budget (default: the config's 9 minutes)")
    args = p.parse_args(argv)
    args.out = args.out.resolve()  # the runs' working directory is their checkout
    codes = ([("other", args.other.resolve())] if args.other else []) + [("this", HERE)]
    started = datetime.datetime.now().isoformat(timespec="minutes")
    results = []
    for seed in args.seeds:
        for label, code in codes:
            s = run(code, seed, args.out / f"{label}_seed{seed}", args.max_minutes)
            results.append({"label": label, "code": str(code), **s})
            print(row(label, s), flush=True)
    head = [f"Default `tba-lab train` runs, started {started}, {os.cpu_count()} cores, seeds "
            f"{args.seeds}" + (f"; `other` = {args.other}" if args.other else ""), "",
            "| code | seed | accuracy before | accuracy after | gain (points) | trainer updates | "
            "updates/min | samples | staleness mean / max |", "|---|---|---|---|---|---|---|---|---|"]
    text = "\n".join(head + [row(r["label"], r) for r in results])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "default_runs.md").write_text(text + "\n")
    (args.out / "default_runs.json").write_text(json.dumps(results, indent=2) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
