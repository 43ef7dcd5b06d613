"""The race on the paper's other tasks: TB against GRPO and online DPO at equal wall clock,
reported as the paper's trade-off (TBA, arXiv 2503.18929, Sec. 5: win rate against perplexity
for preference tuning, Fig. 3; attack success against diversity for red-teaming, Table 6).

    python bench/task_race.py --task preference|redteam [--minutes 3] [--seeds 0 1 2]
                              [--legs c a f] [--eval-every 30] [--eval-size 200]
                              [--output-dir runs/race_<task>] [--resume]

(``python bench/race.py --task preference ...`` runs this script too.)

Every leg trains the task's embedded starting policy (``model.path: ""``) for the same
wall-clock budget with the same seed and the kit's defaults otherwise (B = 16 prompts x K = 8,
temperature 0.6, learning rate 5e-5, the task's learned reward):

    (c) async TBA         trajectory balance, one searcher overlapping the trainer (the default)
    (a) sync GRPO         on-policy GRPO, strict alternation of generation and training
    (f) sync online DPO   online DPO (best vs worst response of each group), strict alternation
    (d) async GRPO, (g) async online DPO: the same losses on TBA's asynchronous pipeline
    (c2), (c3) async TBA with 2 and 3 searchers (``--legs c c2 c3``: the trade-off against
              searcher count; on 2 cores the searchers share the cores with the trainer)

Legs run seed-major (seed 0: every leg, then seed 1, ...). Held-out metrics (the task's greedy
completions to the first ``--eval-size`` test problems) are measured before training, every
``--eval-every`` seconds and at the end. The table gives, per leg, the mean over seeds and the
min-max range of the task's headline metric (win rate, attack success) before, interpolated at
each checkpoint and at the end, and of its trade-off metric (perplexity under the SFT model,
attack diversity) before and at the end. ``task_race.png`` draws the headline metric against
seconds and the trade-off plane (one dot per seed at the end, a star at the start).

Writes ``task_race.json`` (rewritten after every leg: it survives a crash; ``--resume`` keeps
the legs it has), ``task_race.md`` (header with date, cores, seeds and settings; table;
readings computed from the numbers) and ``task_race.png`` in the output directory.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from race import _cell, accuracy_at, checkpoints, stats  # noqa: E402

# task -> (headline metric, trade-off metric, which direction of the trade-off metric is better)
TRADEOFFS = {
    "preference": ("win_rate", "perplexity_sft", "lower"),  # perplexity under SFT: the KL proxy
    "redteam": ("attack_success", "diversity", "higher"),
}
LEGS = {
    "c": ("async TBA", {"algo": "tb", "async": {"mode": "async"}}),
    "a": ("sync GRPO", {"algo": "grpo", "async": {"mode": "sync"}}),
    "f": ("sync online DPO", {"algo": "online_dpo", "async": {"mode": "sync"}}),
    "d": ("async GRPO", {"algo": "grpo", "async": {"mode": "async"}}),
    "g": ("async online DPO", {"algo": "online_dpo", "async": {"mode": "async"}}),
    # against searcher count (Table 6's trade-off as the pipeline widens): async TBA, 2 and 3 searchers
    "c2": ("async TBA, 2 searchers", {"algo": "tb", "async": {"mode": "async", "num_searchers": 2}}),
    "c3": ("async TBA, 3 searchers", {"algo": "tb", "async": {"mode": "async", "num_searchers": 3}}),
}
DEFAULT_LEGS = ("c", "a", "f")


def metrics_of(task: str) -> tuple[str, str, str]:
    """(headline, trade-off, "lower"|"higher") for ``task``. Raises SystemExit naming the known
    tasks for another one."""
    if task not in TRADEOFFS:
        raise SystemExit(f"--task {task!r}: the trade-off race knows {sorted(TRADEOFFS)}; the "
                         f"arithmetic race is `python bench/race.py` without --task")
    return TRADEOFFS[task]


def run_leg(task: str, leg: str, out: Path, minutes: float, seed: int, eval_size: int,
            eval_every: float) -> dict:
    """One leg through ``tba_lab.trainer.train``; returns its measured evaluations (every
    metric of every ``eval.jsonl`` row), rates and staleness."""
    from tba_lab.config import from_dict
    from tba_lab.runlog import read_jsonl_rows
    from tba_lab.trainer import train

    data = {**LEGS[leg][1], "output_dir": str(out / leg), "max_minutes": minutes, "seed": seed,
            "task": {"name": task, "eval_size": eval_size, "interim_eval_size": eval_size,
                     "eval_every_seconds": eval_every}}
    s = train(from_dict(data), progress=False)
    evals = list(read_jsonl_rows(out / leg / "eval.jsonl"))
    wall = max(s["wall_seconds"], 1e-9)
    return {"updates": s["trainer_steps"], "wall_seconds": s["wall_seconds"],
            "updates_per_minute": 60 * s["trainer_steps"] / wall,
            "samples_per_minute": 60 * s["samples_generated"] / wall,
            "staleness_mean": s["staleness_mean"], "evals": evals,
            "before": {k[:-7]: v for k, v in s.items() if k.endswith("_before") and k[:-7] in
                       s.get("held_out_metrics", [])},
            "after": {k[:-6]: v for k, v in s.items() if k.endswith("_after") and k[:-6] in
                      s.get("held_out_metrics", [])}}


def aggregate(runs: dict, task: str, ticks: list[float]) -> dict:
    """Per leg: mean/min/max over seeds (:func:`race.stats`) of the rates, staleness, the
    headline metric before / at each checkpoint (interpolated) / after, and the trade-off metric
    before / after."""
    head, trade, _ = metrics_of(task)
    legs = [leg for leg in LEGS if any(leg in by_leg for by_leg in runs.values())]
    out = {}
    for leg in legs:
        rs = [by_leg[leg] for by_leg in runs.values() if leg in by_leg]
        out[leg] = {
            "seeds": len(rs),
            **{k: stats(r[k] for r in rs) for k in ("updates_per_minute", "samples_per_minute",
                                                   "staleness_mean")},
            "head_before": stats(r["before"].get(head) for r in rs),
            "head_at": {f"{t:g}": stats(accuracy_at(r["evals"], t, head) for r in rs) for t in ticks},
            "head_after": stats(r["after"].get(head) for r in rs),
            "trade_before": stats(r["before"].get(trade) for r in rs),
            "trade_after": stats(r["after"].get(trade) for r in rs)}
    return out


def table(runs: dict, task: str, minutes: float, eval_every: float) -> str:
    """The race table in Markdown (mean over seeds, min-max with several seeds)."""
    head, trade, _ = metrics_of(task)
    ticks = checkpoints(minutes, eval_every)
    agg = aggregate(runs, task, ticks)
    several = len(runs) > 1
    pct = lambda v: f"{100 * v:.1f}"
    num = lambda v: f"{v:.3g}"
    cols = (["leg", "updates/min", "staleness", f"{head} before"]
            + [f"{head} @{t:g}s (interp.)" for t in ticks]
            + [f"{head} end", f"{trade} before", f"{trade} end"])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for leg, a in agg.items():
        lines.append("| " + " | ".join(
            [f"({leg}) {LEGS[leg][0]}", _cell(a["updates_per_minute"], lambda v: f"{v:.0f}", several),
             _cell(a["staleness_mean"], lambda v: f"{v:.1f}", several),
             _cell(a["head_before"], pct, several, "%")]
            + [_cell(a["head_at"][f"{t:g}"], pct, several, "%") for t in ticks]
            + [_cell(a["head_after"], pct, several, "%"), _cell(a["trade_before"], num, several),
               _cell(a["trade_after"], num, several)]) + " |")
    seeds = " ".join(str(s) for s in runs)
    lines += ["", (f"Cells: mean over seeds {seeds} (min-max). " if several else f"Seed {seeds}. ")
              + f"{head} @Ns: interpolated linearly at exactly N s between the measured evaluations "
              "around it (the before-evaluation counts as 0 s)."]
    return "\n".join(lines)


def readings(runs: dict, task: str) -> list[str]:
    """Sentences computed from the numbers: each leg's headline change with its range, and
    which leg ends best on the headline and on the trade-off metric (means over seeds)."""
    head, trade, better = metrics_of(task)
    agg = aggregate(runs, task, [])
    out = []
    for leg, a in agg.items():
        if a["head_before"] is None or a["head_after"] is None:
            continue
        gains = [r["after"][head] - r["before"][head] for by_leg in runs.values()
                 for lg, r in by_leg.items() if lg == leg and head in r["after"]]
        g = stats(gains)
        out.append(f"({leg}) {LEGS[leg][0]}: {head} {100 * a['head_before']['mean']:.1f}% -> "
                   f"{100 * a['head_after']['mean']:.1f}% ({100 * g['mean']:+.1f} points, "
                   f"{100 * g['min']:+.1f} to {100 * g['max']:+.1f} over {g['n']} seed(s)); "
                   f"{trade} {a['trade_before']['mean']:.3g} -> {a['trade_after']['mean']:.3g}.")
    ended = {leg: a for leg, a in agg.items() if a["head_after"] and a["trade_after"]}
    if ended:
        best = max(ended, key=lambda leg: ended[leg]["head_after"]["mean"])
        pick = min if better == "lower" else max
        best_t = pick(ended, key=lambda leg: ended[leg]["trade_after"]["mean"])
        out.append(f"Highest {head} at the end: ({best}) {LEGS[best][0]}; best {trade} "
                   f"({better} is better): ({best_t}) {LEGS[best_t][0]}. Differences smaller than "
                   f"the seed ranges above are not resolved by this race.")
    return out


def plot(runs: dict, task: str, minutes: float, eval_every: float, path: Path | None = None):
    """task_race.png: the headline metric against seconds (mean over seeds, min-max band), and
    the trade-off plane (x: trade-off metric, y: headline; a dot per seed at the end, the
    leg's mean as a larger dot, a star at the starting policy). Returns the Figure."""
    import matplotlib

    if matplotlib.get_backend().lower() != "agg":
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    head, trade, better = metrics_of(task)
    budget = 60 * minutes
    grid = sorted({*[budget * i / 24 for i in range(24)], *checkpoints(minutes, eval_every)})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    agg = aggregate(runs, task, [])
    for i, leg in enumerate(agg):
        rs = [by_leg[leg] for by_leg in runs.values() if leg in by_leg]
        color, label = f"C{i}", f"({leg}) {LEGS[leg][0]}"
        xs, mean, lo, hi = [], [], [], []
        for t in grid + [budget]:
            vals = [r["after"].get(head) if t == budget else accuracy_at(r["evals"], t, head)
                    for r in rs]
            s = stats(vals)
            if s is not None:
                xs.append(t), mean.append(100 * s["mean"]), lo.append(100 * s["min"]), hi.append(100 * s["max"])
        ax1.plot(xs, mean, "-", color=color, label=label)
        if len(rs) > 1:
            ax1.fill_between(xs, lo, hi, color=color, alpha=0.15, lw=0)
        pts = [(r["after"][trade], 100 * r["after"][head]) for r in rs
               if trade in r["after"] and head in r["after"]]
        if pts:
            ax2.scatter(*zip(*pts), color=color, s=18, alpha=0.6)
            ax2.scatter([sum(p[0] for p in pts) / len(pts)], [sum(p[1] for p in pts) / len(pts)],
                        color=color, s=80, label=label, edgecolor="black")
    starts = [(r["before"][trade], 100 * r["before"][head]) for by_leg in runs.values()
              for r in by_leg.values() if trade in r["before"] and head in r["before"]]
    if starts:
        ax2.scatter([starts[0][0]], [starts[0][1]], marker="*", s=160, color="gray",
                    label="starting policy")
    ax1.set(xlabel="training wall-clock (s)", ylabel=f"held-out {head} (%)",
            title=f"{task}: {head} over time (mean over {len(runs)} seed(s))")
    ax2.set(xlabel=f"{trade} ({better} is better)", ylabel=f"held-out {head} (%)",
            title="trade-off at the end of the budget")
    for ax in (ax1, ax2):
        ax.title.set_fontsize(10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


def main(argv=None) -> int:
    import datetime
    import os

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("--task", required=True, choices=sorted(TRADEOFFS),
                   help="the task to race on (the arithmetic race is bench/race.py without --task)")
    p.add_argument("--minutes", type=float, default=3.0, help="training budget per leg (default 3)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                   help="seeds, run seed-major (default 0 1 2)")
    p.add_argument("--legs", nargs="+", default=list(DEFAULT_LEGS), choices=list(LEGS))
    p.add_argument("--eval-size", type=int, default=200, help="held-out problems per evaluation")
    p.add_argument("--eval-every", type=float, default=30.0, help="seconds between evaluations")
    p.add_argument("--output-dir", help="default runs/race_<task>")
    p.add_argument("--resume", action="store_true",
                   help="keep the (seed, leg) runs already in task_race.json (same settings)")
    args = p.parse_args(argv)
    if args.eval_every <= 0 or args.minutes <= 0:
        p.error("--eval-every and --minutes must be > 0")
    out = Path(args.output_dir or f"runs/race_{args.task}")
    out.mkdir(parents=True, exist_ok=True)
    settings = {"task": args.task, "minutes": args.minutes, "eval_size": args.eval_size,
                "eval_every": args.eval_every}
    header = (f"Task race of {datetime.datetime.now().isoformat(timespec='seconds')}: "
              f"{os.cpu_count()} cores (os.cpu_count()), task {args.task}, seeds "
              f"{' '.join(map(str, args.seeds))}, {args.minutes:g} min per leg, eval "
              f"{args.eval_size} problems every {args.eval_every:g} s")
    print(header, flush=True)
    runs: dict = {}
    saved = out / "task_race.json"
    if args.resume and saved.exists():
        old = json.loads(saved.read_text())
        if old["settings"] != settings:
            p.error(f"--resume: {saved} was run with {old['settings']}; give the same settings")
        runs = {int(s): legs for s, legs in old["runs"].items()}
    for seed in args.seeds:
        for leg in dict.fromkeys(args.legs):
            if leg in runs.get(seed, {}):
                print(f"--- seed {seed}, ({leg}) {LEGS[leg][0]}: kept (--resume)")
                continue
            print(f"--- seed {seed}, ({leg}) {LEGS[leg][0]}: {args.minutes:g} min", flush=True)
            runs.setdefault(seed, {})[leg] = run_leg(args.task, leg, out / f"seed{seed}",
                                                     args.minutes, seed, args.eval_size,
                                                     args.eval_every)
            saved.write_text(json.dumps({"header": header, "settings": settings,
                                         "runs": {str(s): v for s, v in runs.items()}}, indent=2))
    text = "\n\n".join([table(runs, args.task, args.minutes, args.eval_every),
                        "\n".join(f"- {line}" for line in readings(runs, args.task))])
    print(text)
    (out / "task_race.md").write_text(header + "\n\n" + text + "\n")
    plot(runs, args.task, args.minutes, args.eval_every, out / "task_race.png")
    print(f"wrote {saved}, {out / 'task_race.md'}, {out / 'task_race.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
