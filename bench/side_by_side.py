"""The default run of two versions of the kit, side by side on this machine.

Each leg is ``tba-lab train`` with its defaults except ``--max-minutes`` and ``--seed``, run in
a fresh process from a source tree on ``PYTHONPATH``: this checkout ("new") and a git commit
checked out into a temporary worktree ("base"). Legs alternate (base, new, base, new, ...) so a
change in the machine's load falls on both alike. Per leg it reads ``summary.json`` and
``metrics.jsonl``: updates per minute, samples per minute, staleness, accuracy before and after,
and the medians of the trainer's update and reference seconds.

    python bench/side_by_side.py --base bd662ce --minutes 2 --seeds 0 1 2 --out runs/side_by_side

Writes ``side_by_side.json`` and ``side_by_side.md`` (means and min-max over seeds) in ``--out``;
the legs' run folders go under ``--out/runs``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEYS = ("updates_per_minute", "samples_per_minute", "staleness_mean", "accuracy_before",
        "accuracy_after", "update_seconds", "reference_seconds")


def leg(tree: Path, out: Path, minutes: float, seed: int, extra: list[str]) -> dict:
    """One ``tba-lab train`` of the source tree ``tree``; its headline numbers."""
    env = dict(os.environ, PYTHONPATH=str(tree), TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, "-c", "import sys; from tba_lab.cli import main; sys.exit(main())",
           "train", "--output-dir", str(out), "--max-minutes", str(minutes), "--seed", str(seed),
           "--no-progress", *extra]
    t0 = time.time()
    subprocess.run(cmd, env=env, cwd=tree, check=True, stdout=subprocess.DEVNULL)
    s = json.loads((out / "summary.json").read_text())
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][1:]

    def median(key):
        return round(statistics.median(r.get(key, 0.0) for r in rows), 4) if rows else None

    return {"updates_per_minute": s["updates_per_minute"],
            "samples_per_minute": round(60 * s["samples_generated"] / s["wall_seconds"], 1),
            "staleness_mean": s["staleness_mean"], "accuracy_before": s["accuracy_before"],
            "accuracy_after": s["accuracy_after"], "update_seconds": median("update_seconds"),
            "reference_seconds": median("reference_seconds"),
            "placement": s.get("placement"), "leg_seconds": round(time.time() - t0, 1)}


def table(results: dict, header: str) -> str:
    """Markdown: one row per version, each key's mean (min-max) over seeds."""
    lines = [header, "", "| version | " + " | ".join(KEYS) + " |", "|---" * (len(KEYS) + 1) + "|"]
    for name, legs in results.items():
        cells = []
        for k in KEYS:
            vals = [leg[k] for leg in legs.values() if leg.get(k) is not None]
            cells.append(f"{statistics.mean(vals):.3g} ({min(vals):.3g}-{max(vals):.3g})" if vals else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="git commit to compare against (e.g. bd662ce)")
    ap.add_argument("--minutes", type=float, default=2.0, help="training budget of each leg")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="runs/side_by_side")
    ap.add_argument("extra", nargs="*", help="more tba-lab train flags for both versions (after --)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now().isoformat(timespec="minutes")
    results: dict = {args.base: {}, "new": {}}
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base_tree),
                        args.base], check=True, stdout=subprocess.DEVNULL)
        try:
            for seed in args.seeds:
                for name, tree in ((args.base, base_tree), ("new", ROOT)):
                    run_dir = out / "runs" / f"{name}_s{seed}"
                    results[name][seed] = leg(tree, run_dir, args.minutes, seed, args.extra)
                    print(name, seed, json.dumps(results[name][seed]), flush=True)
                    (out / "side_by_side.json").write_text(json.dumps(results, indent=1))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)],
                           check=False)
    header = (f"`python bench/side_by_side.py --base {args.base} --minutes {args.minutes:g} --seeds "
              f"{' '.join(map(str, args.seeds))}`, started {started}, {os.cpu_count()} cores; mean "
              f"(min-max) over seeds; update/reference seconds are medians per update.")
    (out / "side_by_side.md").write_text(table(results, header))
    print(table(results, header))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
