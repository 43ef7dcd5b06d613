"""The race: sync GRPO, sync TB, async TBA, async GRPO and TRL's GRPOTrainer, side by side.

    python bench/race.py [--minutes 3] [--seed 0] [--target 0.40] [--legs a b c d e]
                         [--output-dir runs/race] [--skip-throughput]

Every leg trains the embedded tiny model on the embedded task for the same wall-clock budget,
with the same seed, learning rate (5e-5, linear decay over the budget), batch shape (B = 16
prompts x K = 8 responses), temperature (0.6), response cap (40 tokens) and reward (exact match):

    (a) sync GRPO    on-policy GRPO, strict alternation of generation and training
    (b) sync TB      trajectory balance, strict alternation
    (c) async TBA    TB with one searcher process overlapping the trainer (the kit's default)
    (d) async GRPO   GRPO on the same asynchronous pipeline, hence the same staleness
    (e) TRL GRPO     trl.GRPOTrainer (use_vllm off, gradient checkpointing off), see trl_grpo.py

Held-out greedy accuracy (the first ``--eval-size`` test problems) is measured before training,
every ``--eval-every`` seconds inside the budget (that time counts against the budget in every
leg), and at the end. The script prints one table and the ratios (c)/(b), (c)/(a) and (a)/(e),
then writes ``race.json``, ``race.md`` and ``race.png`` to the output directory. Legs run one
after another in this process on an otherwise idle machine; numbers from a busy machine say
little. It also prints generation throughput and the trainer's step split
(``bench/throughput.py``) unless ``--skip-throughput``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LEGS = {
    "a": ("sync GRPO", {"algo": "grpo", "async": {"mode": "sync"}}),
    "b": ("sync TB", {"algo": "tb", "async": {"mode": "sync"}}),
    "c": ("async TBA", {"algo": "tb", "async": {"mode": "async"}}),
    "d": ("async GRPO", {"algo": "grpo", "async": {"mode": "async"}}),
    "e": ("TRL GRPOTrainer", None),
}


def run_ours(leg: str, overrides: dict, out: Path, minutes: float, seed: int, eval_size: int,
             eval_every: float) -> dict:
    """One leg through ``tba_lab.trainer.train``; returns the row of the race table."""
    from tba_lab.config import from_dict
    from tba_lab.runlog import read_jsonl_rows
    from tba_lab.trainer import train

    data = {**overrides, "output_dir": str(out / leg), "max_minutes": minutes, "seed": seed,
            "task": {"eval_size": eval_size, "interim_eval_size": eval_size,
                     "eval_every_seconds": eval_every}}
    s = train(from_dict(data), progress=False)
    evals = [{"wall_seconds": e["wall_seconds"], "step": e["step"], "accuracy": e["accuracy"]}
             for e in read_jsonl_rows(out / leg / "eval.jsonl")]
    return {"updates": s["trainer_steps"], "samples_generated": s["samples_generated"],
            "wall_seconds": s["wall_seconds"], "accuracy_before": s["accuracy_before"],
            "accuracy_after": s["accuracy_after"], "evals": evals,
            "staleness_mean": s["staleness_mean"], "staleness_max": s["staleness_max"]}


def run_trl(out: Path, minutes: float, seed: int, eval_size: int, eval_every: float) -> dict:
    from trl_grpo import run_trl_grpo

    checkpoints = tuple(eval_every * i for i in range(1, int(60 * minutes / eval_every) + 1)
                        if eval_every * i < 60 * minutes)
    r = run_trl_grpo(out / "e", minutes=minutes, seed=seed, eval_size=eval_size,
                     eval_at_seconds=checkpoints)
    r.setdefault("staleness_mean", 0.0)
    r.setdefault("staleness_max", 0)
    return r


def time_to_target(evals: list[dict], target: float) -> float | None:
    """First wall-clock second at which held-out accuracy reached ``target`` (None if never)."""
    for e in sorted(evals, key=lambda e: e["wall_seconds"]):
        if e["accuracy"] >= target:
            return e["wall_seconds"]
    return None


def accuracy_at(evals: list[dict], seconds: float) -> float | None:
    """Accuracy of the last evaluation at or before ``seconds`` of training (None if none)."""
    done = [e for e in evals if e["wall_seconds"] <= seconds + 5]  # +5 s: an eval ends after its tick
    return max(done, key=lambda e: e["wall_seconds"])["accuracy"] if done else None


def table(results: dict, minutes: float, eval_every: float, target: float) -> str:
    ticks = [eval_every * i for i in range(1, int(60 * minutes / eval_every) + 1)]
    head = (["leg", "updates/min", "samples/min", "staleness mean/max", "acc before"]
            + [f"acc @{int(t)}s" for t in ticks[:-1]] + ["acc end", f"time to {100 * target:.0f}%"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for leg, r in results.items():
        upm = 60 * r["updates"] / r["wall_seconds"]
        spm = 60 * r["samples_generated"] / r["wall_seconds"]
        ttt = time_to_target(r["evals"][1:], target)  # not the "before" evaluation
        accs = [accuracy_at(r["evals"][1:-1], t) for t in ticks[:-1]]
        pct = lambda a: "-" if a is None else f"{100 * a:.1f}%"
        stale = (f"{r['staleness_mean']:.1f}/{r['staleness_max']}" if r["staleness_mean"] is not None
                 else "-")
        cells = ([f"({leg}) {LEGS[leg][0]}", f"{upm:.1f}", f"{spm:.0f}", stale,
                  pct(r["accuracy_before"])] + [pct(a) for a in accs]
                 + [pct(r["accuracy_after"]), "-" if ttt is None else f"{ttt:.0f} s"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratios(results: dict) -> str:
    upm = {leg: 60 * r["updates"] / r["wall_seconds"] for leg, r in results.items()}
    spm = {leg: 60 * r["samples_generated"] / r["wall_seconds"] for leg, r in results.items()}
    out = []
    for num, den, goal in (("c", "b", "goal >= 1.2"), ("c", "a", ""), ("a", "e", "goal >= 2")):
        if num in upm and den in upm:
            out.append(f"({num})/({den}) {LEGS[num][0]} / {LEGS[den][0]}: updates/min "
                       f"{upm[num] / upm[den]:.2f}x, samples/min {spm[num] / spm[den]:.2f}x"
                       + (f"  [{goal}]" if goal else ""))
    return "\n".join(out)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for i, (leg, r) in enumerate(results.items()):
        xs = [e["wall_seconds"] for e in r["evals"]]
        ax1.plot(xs, [100 * e["accuracy"] for e in r["evals"]], "o-", color=f"C{i}",
                 label=f"({leg}) {LEGS[leg][0]}")
        ax2.bar(i, 60 * r["updates"] / r["wall_seconds"], color=f"C{i}")
    ax1.set(xlabel="training wall-clock (s)", ylabel="held-out greedy accuracy (%)",
            title="Accuracy against wall-clock")
    ax1.legend(fontsize=8, loc="lower right")
    ax1.grid(alpha=0.3)
    ax2.set_xticks(range(len(results)), [f"({leg})\n{LEGS[leg][0]}" for leg in results], fontsize=8)
    ax2.set(ylabel="trainer updates per minute", title="Update rate (B=16 x K=8)")
    ax2.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=3.0, help="training budget per leg (default 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", type=float, default=0.40, help="accuracy for 'time to target'")
    p.add_argument("--eval-size", type=int, default=200, help="held-out problems per evaluation")
    p.add_argument("--eval-every", type=float, default=60.0, help="seconds between evaluations")
    p.add_argument("--legs", nargs="+", default=list(LEGS), choices=list(LEGS))
    p.add_argument("--output-dir", default="runs/race")
    p.add_argument("--skip-throughput", action="store_true")
    args = p.parse_args(argv)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = []
    if not args.skip_throughput:
        import torch
        from throughput import generation_throughput, print_report, step_time_split

        torch.set_num_threads(2)
        report.append(print_report(generation_throughput(), step_time_split()))
    results = {}
    for leg in args.legs:
        name, overrides = LEGS[leg]
        print(f"--- ({leg}) {name}: {args.minutes} min", flush=True)
        if overrides is None:
            results[leg] = run_trl(out, args.minutes, args.seed, args.eval_size, args.eval_every)
        else:
            results[leg] = run_ours(leg, overrides, out, args.minutes, args.seed, args.eval_size,
                                    args.eval_every)
        (out / "race.json").write_text(json.dumps(results, indent=2))  # survives a later crash
    text = table(results, args.minutes, args.eval_every, args.target) + "\n\n" + ratios(results)
    print(text)
    (out / "race.md").write_text("\n\n".join(report + [text]) + "\n")
    plot(results, out / "race.png")
    print(f"wrote {out / 'race.json'}, {out / 'race.md'}, {out / 'race.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
