"""The race: sync GRPO, sync TB, async TBA, async GRPO and TRL's GRPOTrainer, side by side.

    python bench/race.py [--minutes 3] [--seeds 0 1 2 | --seed 0] [--target 0.40]
                         [--eval-every 30] [--eval-size 200] [--defer-eval] [--legs a b c d e]
                         [--output-dir runs/race] [--skip-throughput]
    python bench/race.py --task preference|redteam ...   (bench/task_race.py: TB against GRPO
                         and online DPO, reported as the paper's trade-off)

Every leg trains the embedded tiny model on the embedded task for the same wall-clock budget,
with the same seed, learning rate (5e-5, linear decay over the budget), batch shape (B = 16
prompts x K = 8 responses), temperature (0.6), response cap (40 tokens) and reward (exact match):

    (a) sync GRPO    on-policy GRPO, strict alternation of generation and training
    (b) sync TB      trajectory balance, strict alternation
    (c) async TBA    TB with one searcher process overlapping the trainer (the kit's default)
    (d) async GRPO   GRPO on the same asynchronous pipeline, hence the same staleness
    (e) TRL GRPO     trl.GRPOTrainer (use_vllm off, gradient checkpointing off), see trl_grpo.py
    (c1), (c0)       async TBA with the defaults of the third round (recency m 0.8, the
                     reference pass in the searcher) and ``buffer.max_replay_ratio`` 1 (the
                     trainer waits for new data rather than train on more rows than the searcher
                     generated) or 0 (no bound: the trainer replays the buffer as often as its
                     speed allows, the default before); run only when named in ``--legs``
    (c2)             async TBA with the fourth round's defaults: the searcher generates first
                     and then blocks on a full queue of two batches (``async.wait_for_room``
                     false, ``queue_size`` 2); also only when named
    (a3) to (d3)     legs (a) to (d) at learning rate 2.5e-5 (half the default); also only
                     when named

With several seeds (``--seeds 0 1 2``; ``--seed S`` is one seed) the legs run seed-major
(seed 0: a b c d e, then seed 1: a b c d e, ...), so a drift in machine load hits every leg alike.

Held-out greedy accuracy (the first ``--eval-size`` test problems) is measured before training
(at 0 s), every ``--eval-every`` seconds inside the budget (that time counts against the budget
in every leg) and at the end. With ``--defer-eval`` a tick only copies the weights (milliseconds)
and the copies are evaluated after the budget (``task.defer_interim_eval``; TRL's leg likewise):
no leg pauses to evaluate, and a larger ``--eval-size`` costs no training time. An evaluation (or
copy) lands at the first update after its tick, later in the slower legs, so the table does not
file evaluations under checkpoints: its column "acc @Ns" is
the accuracy INTERPOLATED linearly at exactly N s between the measured evaluations around N s,
and "time to X%" is interpolated linearly between the last evaluation below X% and the first at
or above it. Each cell is the mean over the seeds, with the min-max range when there are several;
the ratios (c)/(b), (c)/(a) and (a)/(e) are taken per seed and given the same way. A goal line
says whether async TBA (c) is at or above sync TB (b) at every checkpoint from the first one on
(the end included) and the fastest leg to the target, both in the mean over seeds.

The script writes ``race.json`` (per seed and leg the measured evaluations, plus the interpolated
values, the means and ranges, the ratios and the goal booleans; rewritten after every leg, so it
survives a crash), ``race.md`` (a header line: date, ``os.cpu_count()`` cores, seeds, minutes,
eval size and period; then the throughput report, the table, the table at equal trainer updates
(``updates_table``), the ratios and the goal line) and
``race.png`` (interpolated accuracy against seconds per leg, mean over seeds with a min-max band,
and updates per minute) to the output directory, each leg's run folder under
``seed<S>/<leg>/``. Legs run one after another in this process on an otherwise idle machine;
numbers from a busy machine say little. It also prints generation throughput and the trainer's
step split (``bench/throughput.py``) unless ``--skip-throughput``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tba_lab.lab.experiments.common import time_to_target  # noqa: E402  (linear interpolation)

# the searcher's rule before 2026-12-01T20: generate, then block on a full queue of two batches
BLOCK_AT_PUT = {"queue_size": 2, "wait_for_room": False}
LEGS_NAMES = {"a": "sync GRPO", "b": "sync TB", "c": "async TBA", "d": "async GRPO"}
LEGS_OVERRIDES = {"a": {"algo": "grpo", "async": {"mode": "sync"}},
                  "b": {"algo": "tb", "async": {"mode": "sync"}},
                  "c": {"algo": "tb", "async": {"mode": "async"}},
                  "d": {"algo": "grpo", "async": {"mode": "async"}}}
LEGS = {
    **{leg: (LEGS_NAMES[leg], LEGS_OVERRIDES[leg]) for leg in "abcd"},
    "e": ("TRL GRPOTrainer", None),
    # (c1) and (c0) as they ran on 2026-12-01T14:23: recency m 0.8, reference pass in the searcher,
    # and the searcher generating first, then blocking on a full queue of two batches
    "c1": ("async TBA, replay ratio <= 1", {"algo": "tb", "async": {"mode": "async",
                                                                    "reference_pass": "searcher",
                                                                    **BLOCK_AT_PUT},
                                            "buffer": {"max_replay_ratio": 1.0, "recency_prob": 0.8}}),
    "c0": ("async TBA, no replay bound", {"algo": "tb", "async": {"mode": "async",
                                                                  "reference_pass": "searcher",
                                                                  **BLOCK_AT_PUT},
                                          "buffer": {"max_replay_ratio": 0.0, "recency_prob": 0.8}}),
    # (a3) to (d3): legs (a) to (d) at half the learning rate (the per-update table of
    # 2026-12-01T22:56 found TB better per update at 2.5e-5)
    **{f"{leg}3": (f"{LEGS_NAMES[leg]}, lr 2.5e-5", {**LEGS_OVERRIDES[leg],
                                                     "training": {"learning_rate": 2.5e-5}})
       for leg in "abcd"},
    # (b4) and (c4): the TB legs with GRPO's two normalisations at lr 2.5e-5 (the per-update
    # table of 2026-12-02T01:21 found them level with GRPO per update)
    **{f"{leg}4": (f"{LEGS_NAMES[leg]}, token mean, group std, lr 2.5e-5",
                   {**LEGS_OVERRIDES[leg], "tb": {"loss_type": "token_mean", "scale_rewards": "group"},
                    "training": {"learning_rate": 2.5e-5}})
       for leg in "bc"},
    # (c2) as (c) ran on 2026-12-01T16:47, before the searcher waited for room in its queue
    "c2": ("async TBA, searcher blocks at the put", {"algo": "tb", "async": {"mode": "async",
                                                                           **BLOCK_AT_PUT}}),
}


def run_ours(leg: str, overrides: dict, out: Path, minutes: float, seed: int, eval_size: int,
             eval_every: float, defer: bool = False) -> dict:
    """One leg through ``tba_lab.trainer.train``; returns the row of the race table. ``defer``:
    ``task.defer_interim_eval`` (weight copies at the ticks, evaluated after the budget)."""
    from tba_lab.config import from_dict
    from tba_lab.runlog import read_jsonl_rows
    from tba_lab.trainer import train

    data = {**overrides, "output_dir": str(out / leg), "max_minutes": minutes, "seed": seed,
            "task": {"eval_size": eval_size, "interim_eval_size": eval_size,
                     "eval_every_seconds": eval_every, "defer_interim_eval": defer}}
    s = train(from_dict(data), progress=False)
    evals = [{"wall_seconds": e["wall_seconds"], "step": e["step"], "accuracy": e["accuracy"]}
             for e in read_jsonl_rows(out / leg / "eval.jsonl")]
    return {"updates": s["trainer_steps"], "samples_generated": s["samples_generated"],
            "wall_seconds": s["wall_seconds"], "accuracy_before": s["accuracy_before"],
            "accuracy_after": s["accuracy_after"], "evals": evals,
            "staleness_mean": s["staleness_mean"], "staleness_max": s["staleness_max"]}


def run_trl(out: Path, minutes: float, seed: int, eval_size: int, eval_every: float,
            defer: bool = False) -> dict:
    from trl_grpo import run_trl_grpo

    r = run_trl_grpo(out / "e", minutes=minutes, seed=seed, eval_size=eval_size,
                     eval_at_seconds=tuple(checkpoints(minutes, eval_every)), defer_eval=defer)
    r.setdefault("staleness_mean", 0.0)
    r.setdefault("staleness_max", 0)
    return r


# ------------------------------------------------------------------ one run's evaluations
def accuracy_at(evals: list[dict], seconds: float, key: str = "accuracy") -> float | None:
    """Accuracy (or another held-out metric ``key``) interpolated linearly at ``seconds`` of
    training between the two measured evaluations around it (``evals``: rows with
    ``wall_seconds`` and ``key``, the before-evaluation at 0 s); an evaluation at exactly
    ``seconds`` is returned as is. None outside the measured span (no extrapolation)."""
    pts = sorted((e["wall_seconds"], e[key]) for e in evals)
    if not pts or not pts[0][0] <= seconds <= pts[-1][0]:
        return None
    for (t0, a0), (t1, a1) in zip(pts, pts[1:]):
        if t0 <= seconds <= t1:
            return a0 if t1 == t0 else a0 + (a1 - a0) * (seconds - t0) / (t1 - t0)
    return pts[0][1]  # a single evaluation, at exactly ``seconds``


def checkpoints(minutes: float, eval_every: float) -> list[float]:
    """The checkpoint seconds of the table: every ``eval_every`` s strictly inside the budget
    (the end has its own column)."""
    budget, out, i = 60 * minutes, [], 1
    while eval_every * i < budget - 1e-9:
        out.append(eval_every * i)
        i += 1
    return out


def leg_numbers(r: dict, ticks: list[float], target: float) -> dict:
    """One leg of one seed as the table's numbers: rates, staleness, accuracy before, at each
    checkpoint (interpolated) and at the end, and the interpolated time to ``target``."""
    wall = max(r["wall_seconds"], 1e-9)
    return {"updates_per_minute": 60 * r["updates"] / wall,
            "samples_per_minute": 60 * r["samples_generated"] / wall,
            "staleness_mean": r.get("staleness_mean"), "staleness_max": r.get("staleness_max"),
            "accuracy_before": r["accuracy_before"],
            "accuracy_at": {_key(t): accuracy_at(r["evals"], t) for t in ticks},
            "accuracy_after": r["accuracy_after"],
            "time_to_target": time_to_target(r["evals"], target)}


def _key(seconds: float) -> str:
    """A checkpoint's key in race.json and the table ("30", "37.5")."""
    return f"{seconds:g}"


# ---------------------------------------------------------------- over seeds
def as_runs(results: dict) -> dict:
    """``{seed: {leg: result}}`` from that or from one seed's ``{leg: result}`` (seed 0), e.g. an
    older race.json; seeds become ints."""
    if results and all(k in LEGS and isinstance(v, dict) and "evals" in v for k, v in results.items()):
        return {0: results}
    return {int(s): legs for s, legs in results.items()}


def stats(values) -> dict | None:
    """``{"mean", "min", "max", "n"}`` over the values that are not None (None if none is)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"mean": sum(vals) / len(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def aggregate(runs: dict, ticks: list[float], target: float) -> dict:
    """Per leg, the mean and min-max range over seeds (:func:`stats`) of every number of
    :func:`leg_numbers`; ``staleness_max`` is the largest over seeds, ``seeds`` how many seeds
    ran the leg. ``time_to_target`` counts only the seeds that reached the target (its ``n``)."""
    runs = as_runs(runs)
    legs = [leg for leg in LEGS if any(leg in by_leg for by_leg in runs.values())]
    out = {}
    for leg in legs:
        nums = [leg_numbers(by_leg[leg], ticks, target) for by_leg in runs.values() if leg in by_leg]
        agg = {k: stats(n[k] for n in nums) for k in ("updates_per_minute", "samples_per_minute",
                                                     "staleness_mean", "accuracy_before",
                                                     "accuracy_after", "time_to_target")}
        agg["accuracy_at"] = {_key(t): stats(n["accuracy_at"][_key(t)] for n in nums) for t in ticks}
        maxes = [n["staleness_max"] for n in nums if n["staleness_max"] is not None]
        agg["staleness_max"] = max(maxes) if maxes else None
        agg["seeds"] = len(nums)
        out[leg] = agg
    return out


RATIOS = (("c", "b", "goal >= 1.2"), ("c", "a", ""), ("a", "e", "goal >= 2"))


def ratio_numbers(runs: dict) -> dict:
    """``{"c/b": {"updates_per_minute": stats, "samples_per_minute": stats}, ...}``: each
    ratio taken per seed (legs of one seed), then mean and min-max over the seeds."""
    runs = as_runs(runs)
    rate = lambda r, k: 60 * r[k] / max(r["wall_seconds"], 1e-9)
    out = {}
    for num, den, _ in RATIOS:
        pairs = [(by_leg[num], by_leg[den]) for by_leg in runs.values()
                 if num in by_leg and den in by_leg]
        if pairs:
            out[f"{num}/{den}"] = {
                f"{k}_per_minute": stats(rate(a, kk) / rate(b, kk) for a, b in pairs)
                for k, kk in (("updates", "updates"), ("samples", "samples_generated"))}
    return out


def goal(agg: dict, ticks: list[float]) -> dict:
    """The goal on the means over seeds: async TBA (c) at or above sync TB (b) at every
    checkpoint from the first on, the end included (``c_at_or_above_b``), and (c) the fastest leg
    to the target (``c_fastest_to_target``: (c) reached it in every seed and its mean time is at
    most every other leg's, the five legs of the goal ((c1), (c0), (c2) and (a3) to (d3) are variants, not
    rivals); a leg that missed it in some seed counts as slower). ``met`` is both.
    Each is None when leg (b) or (c) did not run; ``c_minus_b`` gives the differences."""
    if "b" not in agg or "c" not in agg:
        return {"c_at_or_above_b": None, "c_fastest_to_target": None, "met": None, "c_minus_b": {}}
    mean = lambda s: None if s is None else s["mean"]
    cols = [(_key(t), agg["b"]["accuracy_at"][_key(t)], agg["c"]["accuracy_at"][_key(t)])
            for t in ticks]
    cols.append(("end", agg["b"]["accuracy_after"], agg["c"]["accuracy_after"]))
    diff = {k: (None if mean(b) is None or mean(c) is None else mean(c) - mean(b))
            for k, b, c in cols}
    above = all(d is not None and d >= -1e-9 for d in diff.values())

    def full_mean(leg):  # mean time to target, None unless reached in every seed
        s = agg[leg]["time_to_target"]
        return s["mean"] if s is not None and s["n"] == agg[leg]["seeds"] else None

    c_time = full_mean("c")
    fastest = c_time is not None and all(
        full_mean(leg) is None or c_time <= full_mean(leg) + 1e-9
        for leg in agg if leg in ("a", "b", "d", "e"))
    return {"c_at_or_above_b": above, "c_fastest_to_target": fastest, "met": above and fastest,
            "c_minus_b": diff}


# ---------------------------------------------------------------- the report
def _cell(s: dict | None, fmt, several: bool, unit: str = "") -> str:
    """``mean`` or, with several seeds, ``mean (min-max)``; "-" for None."""
    if s is None:
        return "-"
    text = fmt(s["mean"]) + unit
    return text + (f" ({fmt(s['min'])}-{fmt(s['max'])})" if several else "")


def table(runs: dict, minutes: float, eval_every: float, target: float) -> str:
    """The race table in Markdown: per leg the mean over seeds (min-max range with several
    seeds), checkpoint accuracies and time to target interpolated; a note line below says so."""
    runs = as_runs(runs)
    ticks = checkpoints(minutes, eval_every)
    agg = aggregate(runs, ticks, target)
    several = len(runs) > 1
    pct = lambda a: f"{100 * a:.1f}"
    head = (["leg", "updates/min", "samples/min", "staleness mean/max", "acc before"]
            + [f"acc @{_key(t)}s (interp.)" for t in ticks]
            + ["acc end", f"time to {100 * target:.0f}% (interp.)"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for leg, a in agg.items():
        stale = ("-" if a["staleness_mean"] is None
                 else f"{_cell(a['staleness_mean'], lambda v: f'{v:.1f}', several)}/{a['staleness_max']}")
        ttt = _cell(a["time_to_target"], lambda v: f"{v:.0f}", several, " s")
        if a["time_to_target"] is not None and a["time_to_target"]["n"] < a["seeds"]:
            ttt += f" [{a['time_to_target']['n']}/{a['seeds']} seeds]"
        cells = ([f"({leg}) {LEGS[leg][0]}",
                  _cell(a["updates_per_minute"], lambda v: f"{v:.1f}", several),
                  _cell(a["samples_per_minute"], lambda v: f"{v:,.0f}", several),
                  stale, _cell(a["accuracy_before"], pct, several, "%")]
                 + [_cell(a["accuracy_at"][_key(t)], pct, several, "%") for t in ticks]
                 + [_cell(a["accuracy_after"], pct, several, "%"), ttt])
        lines.append("| " + " | ".join(cells) + " |")
    seeds = " ".join(str(s) for s in runs)
    lines.append("")
    lines.append((f"Cells: mean over seeds {seeds} (min-max). " if several else f"Seed {seeds}. ")
                 + "acc @Ns: accuracy interpolated linearly at exactly N s between the measured "
                 "evaluations around N s (the before-evaluation counts as 0 s, the end one at the "
                 f"end of the budget). Time to {100 * target:.0f}%: interpolated linearly between "
                 f"the last evaluation below {100 * target:.0f}% and the first at or above it"
                 + (", mean over the seeds that reached it." if several else "."))
    return "\n".join(lines)


def ratios(runs: dict) -> str:
    """The ratios (c)/(b), (c)/(a), (a)/(e) of updates and samples per minute, one line each;
    with several seeds the mean of the per-seed ratios and their min-max range."""
    runs = as_runs(runs)
    several = len(runs) > 1
    fmt = lambda s: _cell(s, lambda v: f"{v:.2f}", several, "x")
    out = []
    for num, den, g in RATIOS:
        r = ratio_numbers(runs).get(f"{num}/{den}")
        if r:
            out.append(f"({num})/({den}) {LEGS[num][0]} / {LEGS[den][0]}: updates/min "
                       f"{fmt(r['updates_per_minute'])}, samples/min {fmt(r['samples_per_minute'])}"
                       + (f"  [{g}]" if g else ""))
    return "\n".join(out)


def goal_line(g: dict, agg: dict, target: float) -> str:
    """The goal's pass/fail line."""
    if g["met"] is None:
        return "goal: not evaluated (it needs legs (b) and (c))"
    word = lambda ok: "PASS" if ok else "FAIL"
    below = [k if k == "end" else f"{k}s" for k, d in g["c_minus_b"].items()
             if d is None or d < -1e-9]
    fastest = min((leg for leg in agg if agg[leg]["time_to_target"] is not None
                   and agg[leg]["time_to_target"]["n"] == agg[leg]["seeds"]),
                  key=lambda leg: agg[leg]["time_to_target"]["mean"], default=None)
    fast = "no leg reached it in every seed" if fastest is None else (
        f"fastest ({fastest}) {agg[fastest]['time_to_target']['mean']:.0f} s")
    return (f"goal (means over seeds): {word(g['met'])}. (c) async TBA at or above (b) sync TB at "
            f"every checkpoint and the end: {word(g['c_at_or_above_b'])}"
            + (f" (below at {', '.join(below)})" if below else "")
            + f"; (c) the fastest to {100 * target:.0f}%: {word(g['c_fastest_to_target'])} ({fast})")


def updates_table(runs: dict, steps=(20, 40, 60, 80, 100, 120)) -> str:
    """Accuracy at equal trainer updates: per leg, the accuracy interpolated linearly at each
    of ``steps`` updates between the measured evaluations around it (by their ``step``), mean
    over the seeds that reached it (min-max), with ``[n/N seeds]`` when not all did. What an
    update of each leg was worth, apart from how many it made per second."""
    runs = as_runs(runs)
    several = len(runs) > 1
    lines = ["| leg | " + " | ".join(f"acc @{n} updates" for n in steps) + " |",
             "|" + "---|" * (len(steps) + 1)]
    for leg in [leg for leg in LEGS if any(leg in by_leg for by_leg in runs.values())]:
        rows = [by_leg[leg] for by_leg in runs.values() if leg in by_leg]
        cells = []
        for n in steps:
            st = stats(accuracy_at([{"wall_seconds": e["step"], "accuracy": e["accuracy"]}
                                    for e in r["evals"]], n) for r in rows)
            cell = _cell(st, lambda v: f"{100 * v:.1f}", several, "%")
            cells.append(cell + (f" [{st['n']}/{len(rows)} seeds]" if st and st["n"] < len(rows) else ""))
        lines.append(f"| ({leg}) {LEGS[leg][0]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def header_line(seeds, minutes: float, eval_size: int, eval_every: float, target: float,
                defer: bool = False) -> str:
    """race.md's first line: when, where and with which settings."""
    import datetime
    import os

    return (f"Race of {datetime.datetime.now().isoformat(timespec='seconds')}: "
            f"{os.cpu_count()} cores (os.cpu_count()), seeds {' '.join(str(s) for s in seeds)}, "
            f"{minutes:g} min per leg, eval {eval_size} problems every {eval_every:g} s"
            + (" (weight copies, evaluated after the budget)" if defer else "")
            + f", target {100 * target:.0f}%")


def curve_points(runs: dict, leg: str, minutes: float, eval_every: float) -> tuple[list, list, list, list]:
    """race.png's line for ``leg``: seconds, and the mean, min and max over seeds of the
    interpolated accuracy there (every few seconds, at each checkpoint, and at the end of the
    budget, where each seed's end evaluation stands)."""
    budget = 60 * minutes
    step = min(5.0, eval_every / 3)
    grid = sorted({round(step * i, 6) for i in range(int(budget / step) + 1) if step * i < budget}
                  | set(checkpoints(minutes, eval_every)))
    xs, mean, lo, hi = [], [], [], []
    legs = [by_leg[leg] for by_leg in as_runs(runs).values() if leg in by_leg]
    for t in grid + [budget]:
        vals = [r["accuracy_after"] if t == budget else accuracy_at(r["evals"], t) for r in legs]
        s = stats(vals)
        if s is not None:
            xs.append(t)
            mean.append(s["mean"])
            lo.append(s["min"])
            hi.append(s["max"])
    return xs, mean, lo, hi


def plot(runs: dict, minutes: float, eval_every: float, path: Path | None = None):
    """Draw race.png: per leg the interpolated held-out accuracy against seconds (mean over
    seeds, min-max band shaded, dots at the checkpoints and the end), and updates per minute
    (mean bar, min-max whisker). Returns the Figure (saved to ``path`` when given)."""
    import matplotlib

    if matplotlib.get_backend().lower() != "agg":
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = as_runs(runs)
    agg = aggregate(runs, checkpoints(minutes, eval_every), 1.0)
    marks = set(checkpoints(minutes, eval_every)) | {0.0, 60 * minutes}
    n = len(runs)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for i, leg in enumerate(agg):
        xs, mean, lo, hi = curve_points(runs, leg, minutes, eval_every)
        color = f"C{i}"
        ax1.plot(xs, [100 * v for v in mean], "-", color=color, label=f"({leg}) {LEGS[leg][0]}")
        ax1.plot([x for x in xs if x in marks], [100 * v for x, v in zip(xs, mean) if x in marks],
                 "o", color=color, ms=4)
        if n > 1:
            ax1.fill_between(xs, [100 * v for v in lo], [100 * v for v in hi], color=color,
                             alpha=0.15, lw=0)
        u = agg[leg]["updates_per_minute"]
        ax2.bar(i, u["mean"], color=color,
                yerr=[[u["mean"] - u["min"]], [u["max"] - u["mean"]]] if n > 1 else None,
                capsize=4)
    seeds = f"mean over {n} seeds, band min-max" if n > 1 else "one seed"
    ax1.set(xlabel="training wall-clock (s)", ylabel="held-out greedy accuracy (%)",
            title=f"Accuracy, interpolated between evaluations ({seeds})")
    ax1.title.set_fontsize(10)
    ax1.legend(fontsize=8, loc="lower right")
    ax1.grid(alpha=0.3)
    ax2.set_xticks(range(len(agg)), [f"({leg})\n{LEGS[leg][0]}" for leg in agg], fontsize=8)
    ax2.set(ylabel="trainer updates per minute",
            title="Update rate (B=16 x K=8)" + (", mean and min-max" if n > 1 else ""))
    ax2.title.set_fontsize(10)
    ax2.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


def report_json(runs: dict, minutes: float, eval_size: int, eval_every: float, target: float,
                header: str, defer: bool = False) -> dict:
    """race.json: the settings, per seed and leg the measured run (``evals``: the measured
    evaluations) with its interpolated numbers (``interpolated``), the means and ranges per leg,
    the ratios and the goal."""
    ticks = checkpoints(minutes, eval_every)
    runs = as_runs(runs)
    agg = aggregate(runs, ticks, target)
    return {"header": header,
            "settings": {"seeds": list(runs), "minutes": minutes, "eval_size": eval_size,
                         "eval_every": eval_every, "defer_eval": defer, "target": target,
                         "checkpoints": ticks},
            "runs": {str(s): {leg: {**r, "interpolated": leg_numbers(r, ticks, target)}
                              for leg, r in by_leg.items()} for s, by_leg in runs.items()},
            "legs": agg, "ratios": ratio_numbers(runs), "goal": goal(agg, ticks)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a == "--task" or a.startswith("--task=") for a in argv):  # the other tasks' race
        from task_race import main as task_race_main

        return task_race_main(argv)
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="--task preference|redteam runs the race on the paper's other tasks instead "
               "(bench/task_race.py: TB against GRPO and online DPO; see its --help)")
    p.add_argument("--minutes", type=float, default=3.0, help="training budget per leg (default 3)")
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=int, help="one seed (default 0)")
    seeds.add_argument("--seeds", type=int, nargs="+", help="several seeds, run seed-major")
    p.add_argument("--target", type=float, default=0.40, help="accuracy for 'time to target'")
    p.add_argument("--eval-size", type=int, default=200, help="held-out problems per evaluation")
    p.add_argument("--eval-every", type=float, default=30.0,
                   help="seconds between evaluations (default 30; 15 gives a finer curve)")
    p.add_argument("--defer-eval", action="store_true",
                   help="copy the weights at each tick and evaluate the copies after the budget "
                        "(no leg pauses to evaluate)")
    p.add_argument("--legs", nargs="+", default=["a", "b", "c", "d", "e"], choices=list(LEGS))
    p.add_argument("--output-dir", default="runs/race")
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--resume", action="store_true",
                   help="keep the legs already in --output-dir/race.json (same settings) and run "
                        "only the missing (seed, leg) pairs, e.g. after an interrupted race")
    args = p.parse_args(argv)
    if args.eval_every <= 0:
        p.error("--eval-every must be > 0")
    seed_list = args.seeds or [0 if args.seed is None else args.seed]
    legs = list(dict.fromkeys(args.legs))  # in the order given, each once
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    header = header_line(seed_list, args.minutes, args.eval_size, args.eval_every, args.target,
                         args.defer_eval)
    print(header, flush=True)
    report = []
    if not args.skip_throughput:
        import torch
        from throughput import generation_throughput, print_report, step_time_split

        torch.set_num_threads(2)
        report.append(print_report(generation_throughput(), step_time_split()))
    runs: dict = {}
    if args.resume and (out / "race.json").exists():
        saved = json.loads((out / "race.json").read_text())
        same = {"minutes": args.minutes, "eval_size": args.eval_size,
                "eval_every": args.eval_every, "defer_eval": args.defer_eval}
        if any(saved["settings"].get(k, False) != v for k, v in same.items()):
            p.error(f"--resume: {out / 'race.json'} was run with other settings "
                    f"({saved['settings']}); give the same "
                    f"--minutes/--eval-size/--eval-every/--defer-eval")
        runs = {int(sd): {leg: {k: v for k, v in r.items() if k != "interpolated"}
                          for leg, r in by_leg.items()}
                for sd, by_leg in saved["runs"].items()}
    dump = lambda: (out / "race.json").write_text(json.dumps(
        report_json(runs, args.minutes, args.eval_size, args.eval_every, args.target, header,
                    args.defer_eval),
        indent=2))
    for seed in seed_list:  # seed-major: load drift hits every leg alike
        seed_out = out / f"seed{seed}"
        for leg in legs:
            name, overrides = LEGS[leg]
            if leg in runs.get(seed, {}):
                print(f"--- seed {seed}, ({leg}) {name}: kept from race.json (--resume)")
                continue
            print(f"--- seed {seed}, ({leg}) {name}: {args.minutes} min", flush=True)
            if overrides is None:
                r = run_trl(seed_out, args.minutes, seed, args.eval_size, args.eval_every,
                            defer=args.defer_eval)
            else:
                r = run_ours(leg, overrides, seed_out, args.minutes, seed, args.eval_size,
                             args.eval_every, defer=args.defer_eval)
            runs.setdefault(seed, {})[leg] = r
            dump()  # survives a later crash
    ticks = checkpoints(args.minutes, args.eval_every)
    agg = aggregate(runs, ticks, args.target)
    text = "\n\n".join([table(runs, args.minutes, args.eval_every, args.target),
                        "At equal trainer updates (interpolated by update count):\n\n"
                        + updates_table(runs), ratios(runs),
                        goal_line(goal(agg, ticks), agg, args.target)])
    print(text)
    (out / "race.md").write_text("\n\n".join([header] + report + [text]) + "\n")
    plot(runs, args.minutes, args.eval_every, out / "race.png")
    print(f"wrote {out / 'race.json'}, {out / 'race.md'}, {out / 'race.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
