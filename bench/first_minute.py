"""Ablations of async TBA's first minutes: which part of the asynchronous data path slows it?

    python bench/first_minute.py [--variants base dedup_off ...] [--seeds 0 1 2]
                                 [--minutes 2] [--eval-every 15] [--out runs/first_minute]

Each variant is ``tba-lab train`` (async TBA, one searcher) with one factor changed from the
defaults the kit had before this study (a de-duplicating buffer, ``buffer.dedup: true``, whose
recency slots fell back to reward mode, ``buffer.recency_fallback: reward``); ``dedup_off`` is
the first fix, ``dedup_off_newest`` the second (the defaults until the replay bound),
``replay_1`` the replay bound (``buffer.max_replay_ratio: 1``, the defaults of the third
round), ``ref_trainer_m1`` the fourth round's (the bound, the reference pass in the trainer,
``async.reference_pass: trainer``, and recency m = 1), ``wait_room`` today's (a searcher waits
for room in a queue of one batch before it generates: ``async.wait_for_room``,
``async.queue_size: 1``), ``sync_tb`` the synchronous on-policy reference. The README's tables are ``--variants sync_tb base dedup_off recency_0 fill_1024
sync_period_4 lr_3e-5 threads_2 capacity_8`` and ``--variants dedup_off dedup_off_newest
dedup_off_m1``, both ``--minutes 1.5``, then ``--variants sync_tb dedup_off_newest m1_newest``
and ``--variants sync_tb replay_1 replay_1.25``, then ``--variants sync_tb replay_1
ref_trainer``, ``--variants sync_tb ref_trainer m1 ref_trainer_m1``, ``--variants sync_tb
ref_trainer_m1 queue_1 fill_128_today`` and ``--variants sync_tb ref_trainer_m1 wait_room``, all
``--minutes 1``.
Every run uses the same seed list, the first ``--eval-size`` held-out problems (greedy) every ``--eval-every`` seconds of its
budget, and runs alone, one after another, in this process. Accuracy at the checkpoints
(15 s, 30 s, ...) is INTERPOLATED linearly between the measured evaluations (each logged with
its real wall-clock second; they land 0-2 s late). The table gives the mean over seeds and the
range (min-max); ``--out`` receives ``first_minute.json`` (every measured point) and
``first_minute.md`` with the date, the core count and the seeds.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from race import BLOCK_AT_PUT  # noqa: E402  (the searcher's rule before the fifth round)
from tba_lab.config import merge  # noqa: E402

# the defaults before this study: a de-duplicating buffer whose recency slots fall back to
# reward mode when no refreshed prompt is left
OLD = {"buffer": {"dedup": True, "recency_fallback": "reward", "max_replay_ratio": 0.0}}
# the two defaults changed after the fourth round (2026-12-01T16): recency m 0.8 and the reference
# pass in the searcher; every variant measured before then pins them
BEFORE_16H = {"buffer": {"recency_prob": 0.8}, "async": {"reference_pass": "searcher"}}
# the searcher's rule before the fifth round (2026-12-01T20): generate, then block on a full queue
# of two batches; every variant measured before then pins it
BEFORE_20H = {"async": BLOCK_AT_PUT}


def _old(**sections) -> dict:
    """The old defaults with ``sections`` changed (nested merge, ``sections`` win)."""
    return merge(merge(merge(BEFORE_20H, BEFORE_16H), OLD), sections)


def _before(**sections) -> dict:
    """The defaults before the fourth round with ``sections`` changed."""
    return merge(merge(BEFORE_20H, BEFORE_16H), sections)


def _fourth(**sections) -> dict:
    """The defaults of the fourth round (before the fifth) with ``sections`` changed."""
    return merge(BEFORE_20H, sections)


# name -> (overrides of the CURRENT defaults, description). The ablations change one factor of
# the old defaults; ``dedup_off`` is the first fix, ``dedup_off_newest`` adds the second, tried
# on top of it; variants measured before the replay bound became the default pin it to 0.
VARIANTS = {
    "sync_tb": (_old(algo="tb", **{"async": {"mode": "sync"}}), "sync TB (on-policy reference)"),
    "base": (_old(), "async TBA, the old defaults (de-duplicating buffer)"),
    "dedup_off": (_old(buffer={"dedup": False}), "no de-duplication (groups are the searcher's samples)"),
    "recency_0": (_old(buffer={"recency_prob": 0.0}), "recency m = 0"),
    "recency_1": (_old(buffer={"recency_prob": 1.0}), "recency m = 1"),
    "fill_128": (_old(buffer={"initial_fill": 128}), "initial fill 128 (one batch)"),
    "fill_1024": (_old(buffer={"initial_fill": 1024}), "initial fill 1024"),
    "sync_period_4": (_old(**{"async": {"sync_period": 4}}), "sync period k = 4 (more staleness)"),
    "lr_3e-5": (_old(training={"learning_rate": 3e-5}), "learning rate 3e-5"),
    "threads_2": (_old(**{"async": {"searcher_threads": 2}}), "searcher on 2 threads"),
    "dedup_off_m1": (_old(buffer={"dedup": False, "recency_prob": 1.0}),
                     "no de-duplication, recency m = 1"),
    "capacity_8": (_old(buffer={"capacity_per_prompt": 8}), "8 rollouts kept per prompt (less replay)"),
    "dedup_off_newest": (_before(buffer={"dedup": False, "recency_fallback": "newest",
                                              "max_replay_ratio": 0.0}),
                         "no de-duplication, and a recency slot with no fresh prompt left takes "
                         "the most recently refreshed one instead of a reward-mode draw (the "
                         "defaults before the replay bound)"),
    "replay_1": (_before(buffer={"max_replay_ratio": 1.0}),
                 "buffer.max_replay_ratio 1: the trainer waits for new data rather than train on "
                 "more rows than the searchers generated (the defaults before the fourth round)"),
    "replay_1.25": (_before(buffer={"max_replay_ratio": 1.25}),
                    "replay_1 with buffer.max_replay_ratio 1.25"),
    "searchers_2": (_before(**{"async": {"num_searchers": 2}}),
                    "replay_1 with 2 searchers (3 processes on the 2 cores)"),
    "ref_trainer": (_before(**{"async": {"reference_pass": "trainer"}}),
                    "replay_1 with the reference pass in the trainer (it drains the "
                    "searcher's rollouts and scores them; the searcher only generates)"),
    "m1": (_before(buffer={"recency_prob": 1.0}),
           "replay_1 with recency m = 1: every batch takes the prompts refreshed since "
           "the last sync (the newest, with the replay bound), no uniform replay draws"),
    "ref_trainer_m1": (_fourth(), "replay_1 with the reference pass in the trainer and recency "
                                  "m = 1 (the fourth round's defaults)"),
    "queue_1": (_fourth(**{"async": {"queue_size": 1}}),
                "ref_trainer_m1 with a queue of one batch per searcher (async.queue_size 1; "
                "the searcher still generates first, then blocks)"),
    "fill_128_today": (_fourth(buffer={"initial_fill": 128}),
                       "ref_trainer_m1 with an initial fill of one batch (128 rollouts)"),
    "wait_room": ({}, "ref_trainer_m1 with the searcher waiting for room in a queue of one "
                      "batch BEFORE it generates (today's defaults)"),
    "m1_newest": (_before(buffer={"recency_prob": 1.0, "max_replay_ratio": 0.0}),
                  "dedup_off_newest with recency m = 1: every slot takes a prompt refreshed since "
                  "the last sync, or else the newest one (no reward-mode draws)"),
}


def run_variant(name: str, seed: int, out: Path, minutes: float, eval_every: float,
                eval_size: int) -> dict:
    from tba_lab.config import from_dict
    from tba_lab.runlog import read_jsonl_rows
    from tba_lab.trainer import train

    overrides, _ = VARIANTS[name]
    data = json.loads(json.dumps(overrides))
    data.update(output_dir=str(out / f"{name}_seed{seed}"), max_minutes=minutes, seed=seed)
    data["task"] = {"eval_size": eval_size, "interim_eval_size": eval_size,
                    "eval_every_seconds": eval_every}
    data["training"] = {**data.get("training", {}), "save_seconds": 0}
    cfg = from_dict(data)
    s = train(cfg, progress=False)
    evals = [{"wall_seconds": e["wall_seconds"], "step": e["step"], "accuracy": e["accuracy"]}
             for e in read_jsonl_rows(out / f"{name}_seed{seed}" / "eval.jsonl")]
    return {"variant": name, "seed": seed, "evals": evals, "updates": s["trainer_steps"],
            "updates_per_minute": s["updates_per_minute"], "staleness_mean": s["staleness_mean"],
            # rows trained on per row generated: how often each rollout is used (1 in sync mode)
            "replay": s["trainer_steps"] * cfg.training.num_prompts_per_step
            * cfg.training.num_generations / max(1, s["samples_generated"])}


def at(evals: list[dict], t: float, key: str = "accuracy") -> float:
    """``key`` at second ``t``, linear between the measured evaluations (before-eval at 0 s)."""
    xs = [e["wall_seconds"] for e in evals]
    return float(np.interp(t, xs, [e[key] for e in evals]))


def step_table(results: list[dict], steps: list[int]) -> str:
    """Accuracy at equal trainer updates (interpolated between evaluations), mean (min-max)
    over the seeds whose run got that far ("[n of N seeds]" when not all did): what an update
    of each variant is worth, whatever the machine's speed."""
    lines = ["| variant | " + " | ".join(f"acc @{n} updates" for n in steps) + " |",
             "|" + "---|" * (len(steps) + 1)]
    for name in dict.fromkeys(r["variant"] for r in results):
        rows = [r for r in results if r["variant"] == name]
        cells = []
        for n in steps:
            v = [100 * float(np.interp(n, [e["step"] for e in r["evals"]],
                                       [e["accuracy"] for e in r["evals"]]))
                 for r in rows if r["evals"][-1]["step"] >= n]
            cells.append("-" if not v else f"{np.mean(v):.1f} ({min(v):.1f}-{max(v):.1f})"
                         + ("" if len(v) == len(rows) else f" [{len(v)} of {len(rows)} seeds]"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(results: list[dict], checkpoints: list[float]) -> str:
    head = ("| variant | " + " | ".join(f"acc @{t:g}s" for t in checkpoints)
            + " | updates @60s | updates/min | staleness mean | replay per rollout |")
    lines = [head, "|" + "---|" * (len(checkpoints) + 5)]
    for name in dict.fromkeys(r["variant"] for r in results):
        rows = [r for r in results if r["variant"] == name]
        cells = []
        for t in checkpoints:
            v = 100 * np.array([at(r["evals"], t) for r in rows])
            cells.append(f"{v.mean():.1f} ({v.min():.1f}-{v.max():.1f})")
        steps = np.array([at(r["evals"], 60, "step") for r in rows])
        upm = np.array([r["updates_per_minute"] for r in rows])
        st = np.array([r["staleness_mean"] for r in rows])
        rp = np.array([r["replay"] for r in rows])
        lines.append(f"| {name} | " + " | ".join(cells)
                     + f" | {steps.mean():.0f} | {upm.mean():.0f} | {st.mean():.1f} | {rp.mean():.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--minutes", type=float, default=2.0)
    p.add_argument("--eval-every", type=float, default=15.0)
    p.add_argument("--eval-size", type=int, default=200)
    p.add_argument("--out", type=Path, default=Path("runs/first_minute"))
    p.add_argument("--reanalyse", action="store_true",
                   help="only rewrite first_minute.md from --out/first_minute.json")
    args = p.parse_args(argv)
    started = datetime.datetime.now().isoformat(timespec="minutes")
    results = []
    path = args.out / "first_minute.json"
    if args.reanalyse:
        saved = json.loads(path.read_text())
        started, results, args.seeds = saved["started"], saved["results"], saved["seeds"]
    for seed in [] if args.reanalyse else args.seeds:  # seed-major: load drift hits all alike
        for name in args.variants:
            r = run_variant(name, seed, args.out, args.minutes, args.eval_every, args.eval_size)
            results.append(r)
            args.out.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"started": started, "cores": os.cpu_count(),
                                        "seeds": args.seeds, "results": results}, indent=1))
            print(name, seed, [(round(e["wall_seconds"]), e["step"], e["accuracy"])
                               for e in r["evals"]], flush=True)
    checkpoints = [t for t in np.arange(args.eval_every, 60 * args.minutes + 1e-9, args.eval_every)]
    text = (f"First-minute ablations, started {started}, {os.cpu_count()} cores, seeds "
            f"{args.seeds}, {args.eval_size} held-out problems; mean over seeds (min-max), "
            f"accuracy interpolated linearly between the measured evaluations.\n\n"
            "At equal wall-clock seconds (depends on the machine's speed and load):\n\n"
            + table(results, checkpoints)
            + "\n\nAt equal trainer updates (what an update of each variant is worth):\n\n"
            + step_table(results, [25, 50, 75, 100, 150]) + "\n\nVariants:\n\n"
            + "\n".join(f"* `{n}`: {VARIANTS[n][1]}"
                        for n in dict.fromkeys(r["variant"] for r in results)))
    (args.out / "first_minute.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
