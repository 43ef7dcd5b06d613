"""Benchmarks ``race_preference`` and ``race_redteam``: TB against GRPO and online DPO on the
paper's other two tasks at equal wall clock, read as the paper's trade-off.

Claim (TBA, arXiv 2503.18929, Sec. 5): TB reaches a better trade-off than the baselines, a
higher win rate at a given perplexity in preference tuning (Fig. 3) and more attack success at
a given diversity in red-teaming (Table 6). Every leg trains the task's embedded starting
policy for the same ``minutes`` with the same seed and the kit's defaults otherwise (B = 16 x
K = 8, learning rate 5e-5, the task's learned reward); the presets' legs all run on TBA's
asynchronous pipeline:

    (c) async TBA     (d) async GRPO     (g) async online DPO (best vs worst response of a group)
    (c2), (c3) async TBA with 2 and 3 searchers (red-teaming: the trade-off as the pipeline widens)
    (a) sync GRPO, (f) sync online DPO: the synchronous baselines, with ``--set legs=c,a,f``

Held-out metrics (greedy completions to ``eval_size`` test prompts) are measured before
training, every ``eval_every`` seconds and at the end. The table gives per leg the task's
headline metric (win rate, attack success) before, interpolated at each checkpoint and at the
end, and its trade-off metric (perplexity under the SFT model, attack diversity) before and at
the end; the figure draws the headline over time and the trade-off plane.

The claims, each judged by :data:`~tba_lab.lab.experiments.common.VERDICT_RULE` on per-seed
differences of TB's leg (c) and each baseline leg of the same seed (:func:`claims`,
:data:`CLAIMS`):

* preference (Sec. 5, Fig. 3: TL;DR summarisation, TB reaches a higher win rate at a given
  perplexity than the baselines): the mean over seeds of (c)'s held-out win rate at the end
  minus the baseline's, predicted positive; smallest effect of interest 3 points, about the
  standard error of one win rate on 200 prompts (3.2 points at 30%).
* red-teaming (Sec. 5, Table 6: TB's attacks stay diverse at high attack success, where
  reward maximisers collapse): the mean over seeds of (c)'s attack diversity at the end minus
  the baseline's, predicted positive; smallest effect of interest 0.03, about a tenth of the
  embedded starting attacker's diversity (0.29).
* A race written before the presets (``task_race.json``) is read by :func:`legacy_claims`,
  which applies :func:`claims` to its stored per-seed legs unchanged.
"""
from __future__ import annotations

from pathlib import Path

from tba_lab.config import merge
from tba_lab.lab.experiments.common import (PAPER, RUN_OVERHEAD_SECONDS, batch_settings,
                                            claim_lines, core_overrides, ExperimentError, paired,
                                            paper_claim, pyplot, save_figure, spread)
from tba_lab.lab.experiments.race import _cell, accuracy_at, checkpoints

NAME = "race_tasks"
TITLE = "The race on preference tuning or red-teaming: headline metric against its trade-off"
CLAIM = (f"{PAPER}, Sec. 5: TB reaches a better trade-off than GRPO and online DPO, a higher win "
         f"rate at a given perplexity (preference, Fig. 3) and more attack success at a given "
         f"diversity (red-teaming, Table 6).")
DEPARTURES = [
    "Tiny policies and learned rewards built by the kit (a synthetic summary-preference task "
    "and a synthetic red-teaming task) instead of Pythia/Llama models on TL;DR and a toxicity "
    "classifier; minutes on shared CPU cores instead of GPU hours.",
    "Perplexity under the SFT model stands for the KL to the reference; differences smaller "
    "than the seed ranges are not resolved.",
]
# task -> (headline metric, trade-off metric, which direction of the trade-off metric is better)
TRADEOFFS = {"preference": ("win_rate", "perplexity_sft", "lower"),
             "redteam": ("attack_success", "diversity", "higher")}
LEGS = {"c": ("async TBA", {"algo": "tb", "async": {"mode": "async"}}),
        "a": ("sync GRPO", {"algo": "grpo", "async": {"mode": "sync"}}),  # the paper's baselines
        "f": ("sync online DPO", {"algo": "online_dpo", "async": {"mode": "sync"}}),  # are sync
        "d": ("async GRPO", {"algo": "grpo", "async": {"mode": "async"}}),
        "g": ("async online DPO", {"algo": "online_dpo", "async": {"mode": "async"}}),
        "c2": ("async TBA, 2 searchers", {"algo": "tb", "async": {"mode": "async", "num_searchers": 2}}),
        "c3": ("async TBA, 3 searchers", {"algo": "tb", "async": {"mode": "async", "num_searchers": 3}})}
# task -> (the metric TB's claim is about, its smallest effect of interest (module docstring),
# unit, scale, decimals, the paper's claim and setting)
CLAIMS = {"preference": ("win_rate", 0.03, "points", 100.0, 1,
                         "Sec. 5, Fig. 3: on TL;DR preference tuning TB reaches a higher win rate "
                         "at a given perplexity than the baselines"),
          "redteam": ("diversity", 0.03, "diversity", 1.0, 3,
                      "Sec. 5, Table 6: on automated red-teaming TB's attacks stay diverse at "
                      "high attack success, where reward maximisers collapse")}
TB_LEGS = ("c", "c2", "c3")  # the legs that train with TB; the others are the baselines
# the presets (``tba-lab experiment NAME``): their task and legs, those of docs/results/NAME/
PRESETS = {"race_preference": {"task": "preference", "legs": ["c", "d", "g"]},
           "race_redteam": {"task": "redteam", "legs": ["c", "d", "g", "c2", "c3"]}}


def settings(smoke: bool, task: str = "preference", legs=("c", "d", "g")) -> dict:
    """The ``task`` and its ``legs``; ``minutes`` per leg; evaluations of ``eval_size`` prompts
    every ``eval_every`` s. SMOKE keeps the legs and shrinks the rest."""
    if smoke:
        return {"task": task, "legs": list(legs), "minutes": 0.25, "eval_every": 5.0,
                "eval_size": 20, **batch_settings(True)}
    return {"task": task, "legs": list(legs), "minutes": 2.0, "eval_every": 30.0,
            "eval_size": 200, **batch_settings(False)}


def metrics_of(task: str) -> tuple[str, str, str]:
    """(headline, trade-off, "lower"|"higher") of ``task``.

    Raises:
        ExperimentError: a task without a trade-off (the arithmetic race is ``race``)."""
    if task not in TRADEOFFS:
        raise ExperimentError(f"task {task!r}: the trade-off race knows {sorted(TRADEOFFS)}; the "
                              f"arithmetic race is `tba-lab experiment race`")
    return TRADEOFFS[task]


def variants(s: dict) -> list[tuple[str, dict]]:
    metrics_of(s["task"])
    unknown = [leg for leg in s["legs"] if leg not in LEGS]
    if unknown:
        raise ExperimentError(f"unknown leg(s) {unknown}; the legs are {list(LEGS)}")
    base = merge(core_overrides({**s, "max_minutes": s["minutes"], "max_steps": 0}),
                 {"task": {"name": s["task"]}})
    return [(leg, merge(base, LEGS[leg][1])) for leg in dict.fromkeys(s["legs"])]


def estimate_seconds(s: dict, n_seeds: int, smoke: bool) -> float:
    """Budget + start-up and evaluations (the learned reward scores each), per run."""
    return n_seeds * len(s["legs"]) * (60 * s["minutes"] + 2 * RUN_OVERHEAD_SECONDS)


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    """Rates, staleness, every held-out metric of every evaluation, and before/after."""
    from tba_lab.runlog import read_jsonl_rows

    held = summary.get("held_out_metrics", [])
    wall = max(summary["wall_seconds"], 1e-9)
    return {"updates": summary["trainer_steps"], "wall_seconds": summary["wall_seconds"],
            "updates_per_minute": 60 * summary["trainer_steps"] / wall,
            "samples_per_minute": 60 * summary["samples_generated"] / wall,
            "staleness_mean": summary["staleness_mean"],
            "evals": read_jsonl_rows(Path(run_dir) / "eval.jsonl"),
            "before": {k[:-7]: v for k, v in summary.items() if k.endswith("_before") and k[:-7] in held},
            "after": {k[:-6]: v for k, v in summary.items() if k.endswith("_after") and k[:-6] in held}}


def aggregate(runs: dict, task: str, ticks: list[float]) -> dict:
    """Per leg, spreads over seeds of the rates, staleness, the headline metric before / at
    each checkpoint (interpolated) / after, and the trade-off metric before / after."""
    head, trade, _ = metrics_of(task)
    out = {}
    for leg in [leg for leg in LEGS if any(leg in by_leg for by_leg in runs.values())]:
        rs = [by_leg[leg] for by_leg in runs.values() if leg in by_leg]
        out[leg] = {
            "seeds": len(rs),
            **{k: spread(r[k] for r in rs) for k in ("updates_per_minute", "samples_per_minute",
                                                    "staleness_mean")},
            "head_before": spread(r["before"].get(head) for r in rs),
            "head_at": {f"{t:g}": spread(accuracy_at(r["evals"], t, head) for r in rs) for t in ticks},
            "head_after": spread(r["after"].get(head) for r in rs),
            "trade_before": spread(r["before"].get(trade) for r in rs),
            "trade_after": spread(r["after"].get(trade) for r in rs)}
    return out


def race_table(runs: dict, task: str, minutes: float, eval_every: float) -> str:
    """The race table in Markdown (mean over seeds, min-max with several seeds)."""
    head, trade, _ = metrics_of(task)
    ticks = checkpoints(minutes, eval_every)
    several = len(runs) > 1
    p1, num = (lambda v: f"{100 * v:.1f}"), (lambda v: f"{v:.3g}")
    cols = (["leg", "updates/min", "staleness", f"{head} before"]
            + [f"{head} @{t:g}s (interp.)" for t in ticks]
            + [f"{head} end", f"{trade} before", f"{trade} end"])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for leg, a in aggregate(runs, task, ticks).items():
        lines.append("| " + " | ".join(
            [f"({leg}) {LEGS[leg][0]}", _cell(a["updates_per_minute"], lambda v: f"{v:.0f}", several),
             _cell(a["staleness_mean"], lambda v: f"{v:.1f}", several),
             _cell(a["head_before"], p1, several, "%")]
            + [_cell(a["head_at"][f"{t:g}"], p1, several, "%") for t in ticks]
            + [_cell(a["head_after"], p1, several, "%"), _cell(a["trade_before"], num, several),
               _cell(a["trade_after"], num, several)]) + " |")
    seeds = " ".join(str(s) for s in runs)
    lines += ["", (f"Cells: mean over seeds {seeds} (min-max). " if several else f"Seed {seeds}. ")
              + f"{head} @Ns: interpolated linearly at exactly N s between the measured evaluations "
              "around it (the before-evaluation counts as 0 s)."]
    return "\n".join(lines)


def trade_off_readings(runs: dict, task: str) -> list[str]:
    """Each leg's headline change with its range over seeds, and which leg ends best on the
    headline and on the trade-off metric (means over seeds)."""
    head, trade, better = metrics_of(task)
    agg = aggregate(runs, task, [])
    out = []
    for leg, a in agg.items():
        if not a["head_before"]["n"] or not a["head_after"]["n"]:
            continue
        g = spread(r["after"][head] - r["before"][head] for by_leg in runs.values()
                   for lg, r in by_leg.items() if lg == leg and head in r["after"])
        out.append(f"({leg}) {LEGS[leg][0]}: {head} {100 * a['head_before']['mean']:.1f}% -> "
                   f"{100 * a['head_after']['mean']:.1f}% ({100 * g['mean']:+.1f} points, "
                   f"{100 * g['min']:+.1f} to {100 * g['max']:+.1f} over {g['n']} seed(s)); "
                   f"{trade} {a['trade_before']['mean']:.3g} -> {a['trade_after']['mean']:.3g}.")
    ended = {leg: a for leg, a in agg.items() if a["head_after"]["n"] and a["trade_after"]["n"]}
    if ended:
        best = max(ended, key=lambda leg: ended[leg]["head_after"]["mean"])
        pick = min if better == "lower" else max
        best_t = pick(ended, key=lambda leg: ended[leg]["trade_after"]["mean"])
        out.append(f"Highest {head} at the end: ({best}) {LEGS[best][0]}; best {trade} "
                   f"({better} is better): ({best_t}) {LEGS[best_t][0]}. Differences smaller than "
                   f"the seed ranges above are not resolved by this race.")
    return out


def plot(runs: dict, task: str, minutes: float, eval_every: float):
    """The headline metric against seconds (mean over seeds, min-max band), and the trade-off
    plane (a dot per seed at the end, the leg's mean larger, a star at the starting policy)."""
    plt = pyplot()
    head, trade, better = metrics_of(task)
    budget = 60 * minutes
    grid = sorted({*[budget * i / 24 for i in range(24)], *checkpoints(minutes, eval_every)})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for i, leg in enumerate(aggregate(runs, task, [])):
        rs = [by_leg[leg] for by_leg in runs.values() if leg in by_leg]
        color, label = f"C{i}", f"({leg}) {LEGS[leg][0]}"
        pts = [(t, spread(r["after"].get(head) if t == budget else accuracy_at(r["evals"], t, head)
                          for r in rs)) for t in grid + [budget]]
        pts = [(t, s) for t, s in pts if s["n"]]
        ax1.plot([t for t, _ in pts], [100 * s["mean"] for _, s in pts], "-", color=color, label=label)
        if len(rs) > 1:
            ax1.fill_between([t for t, _ in pts], [100 * s["min"] for _, s in pts],
                             [100 * s["max"] for _, s in pts], color=color, alpha=0.15, lw=0)
        ends = [(r["after"][trade], 100 * r["after"][head]) for r in rs
                if trade in r["after"] and head in r["after"]]
        if ends:
            ax2.scatter(*zip(*ends), color=color, s=18, alpha=0.6)
            ax2.scatter([sum(p[0] for p in ends) / len(ends)], [sum(p[1] for p in ends) / len(ends)],
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
    return fig


# ---------------------------------------------------------------- the claims
def claims(runs: dict, task: str) -> list[dict]:
    """TB's claim on ``task`` (:data:`CLAIMS`), one per baseline leg present: (c) async TBA's
    metric at the end minus the baseline's, paired by seed; ``[]`` without leg (c).

    Args:
        runs: ``{seed: {leg: row}}`` (as :func:`analyse` builds, or a ``task_race.json``'s
            ``runs``); a row's ``after`` holds the held-out metrics at the end.
        task: "preference" or "redteam".

    Raises:
        ExperimentError: a task without a trade-off (:func:`metrics_of`).
    """
    metrics_of(task)
    metric, delta, unit, scale, digits, paper = CLAIMS[task]
    end = {leg: {seed: by_leg[leg]["after"].get(metric) for seed, by_leg in runs.items()
                 if leg in by_leg} for leg in LEGS}
    if not end["c"]:
        return []
    out = []
    for leg in [leg for leg in LEGS if leg not in TB_LEGS and end[leg]]:
        name = LEGS[leg][0]
        out.append(paper_claim(
            f"{task}.{metric}.c-{leg}", f"TB's {metric} at the end is above {name}'s", paper,
            f"mean over seeds of (c) async TBA's held-out {metric} at the end of the budget minus "
            f"({leg}) {name}'s, same seed", paired(end["c"], end[leg]), +1, delta, unit,
            scale, digits, missing_reason=f"a leg has no {metric} at the end"))
    return out


LEGACY_FILE = "task_race.json"  # what the task-race script wrote before the presets


def legacy_claims(folder: str | Path) -> dict:
    """The claims of a task race stored as ``folder/task_race.json`` (written before the
    presets; ``rewrite_report`` cannot read it): its ``runs`` are already ``{seed: {leg:
    row}}`` with the ``after`` metrics :func:`claims` reads, so they go in unchanged.

    Returns:
        ``{"source", "header", "settings", "claims"}``.

    Raises:
        FileNotFoundError: no ``task_race.json`` in ``folder``.
    """
    import json

    data = json.loads((Path(folder) / LEGACY_FILE).read_text())
    return {"source": LEGACY_FILE, "header": data["header"], "settings": data["settings"],
            "claims": claims(data["runs"], data["settings"]["task"])}


def write_legacy_claims(folder: str | Path) -> Path:
    """``claims.json`` and ``claims.md`` of ``folder/task_race.json`` (:func:`legacy_claims`),
    written by :func:`tba_lab.lab.experiments.race.write_legacy_claims`."""
    from tba_lab.lab.experiments import race

    return race.write_legacy_claims(folder, legacy_claims(folder))


# ---------------------------------------------------------------- the experiment's hooks
def analyse(runs: list[dict], s: dict) -> dict:
    keys = ("updates_per_minute", "samples_per_minute", "staleness_mean", "evals", "before", "after")
    legs: dict = {}
    for r in runs:
        legs.setdefault(r["seed"], {})[r["variant"]] = {k: r[k] for k in keys}
    return {"runs": legs, "task": s["task"], "minutes": s["minutes"], "eval_every": s["eval_every"],
            "legs": aggregate(legs, s["task"], checkpoints(s["minutes"], s["eval_every"])),
            "claims": claims(legs, s["task"])}


def readings(a: dict) -> list[str]:
    """Each leg's headline and trade-off, then TB's claims with their intervals and verdicts."""
    return trade_off_readings(a["runs"], a["task"]) + claim_lines(a.get("claims", []))


def table(a: dict) -> list[str]:
    return race_table(a["runs"], a["task"], a["minutes"], a["eval_every"]).splitlines()


def figures(a: dict, out: Path) -> list[tuple[str, str]]:
    head, trade, better = metrics_of(a["task"])
    return save_figure(plot(a["runs"], a["task"], a["minutes"], a["eval_every"]), out,
                       f"race_{a['task']}.png",
                       f"Held-out {head} against training seconds per leg (mean over seeds, band "
                       f"from the lowest to the highest seed), and {head} against {trade} at the "
                       f"end ({better} {trade} is better): a dot per seed, a large dot per leg.")
