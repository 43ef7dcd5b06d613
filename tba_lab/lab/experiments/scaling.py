"""Experiment ``scaling``: more searchers, wall-clock time to a target accuracy.

Claim (TBA, arXiv 2503.18929, abstract and Sec. 4): decoupling search from training speeds
post-training up in wall-clock time (4x or more), and searchers on their own GPUs scale data
generation. Here:
async TB with n in {1, 2, 4} searchers for the same wall-clock budget, held-out accuracy every
``eval_every`` seconds, the time to ``target`` accuracy by linear interpolation between those
evaluations, updates and samples per minute from ``summary.json``, and beside them the
simulator's prediction (:func:`tba_lab.lab.simulate.simulate_run`) from the durations measured
in the same seed's 1-searcher run. On a CPU machine every searcher takes a core from the
trainer, so expect a cap: n + 1 busy processes share the cores the run may use
(:func:`~tba_lab.actors.placement.available_cores`: the affinity mask under any CPU quota).

The claims, each judged by :data:`~tba_lab.lab.experiments.common.VERDICT_RULE` on per-seed
differences of the n-searcher run and the same seed's run with the fewest searchers (1 by
default), for every larger n (:func:`claims`); the paper's claim and setting: abstract and
Sec. 4, searchers on GPUs of their own scale data generation and speed post-training up. The
estimands: the mean over seeds of the n-searcher run's trainer updates per minute, and of its
samples generated per minute, relative to the 1-searcher run's, minus 1, in percent (relative,
so that a busier hour, which slows both runs of a seed, cancels); predicted positive; smallest
effect of interest 10% (:data:`tba_lab.lab.experiments.common.RATE_DELTA`: a searcher costs a
core, and a smaller speed-up is not worth it).
"""
from __future__ import annotations

import math
from pathlib import Path

from tba_lab.actors.placement import available_cores
from tba_lab.config import merge
from tba_lab.lab.experiments.common import (PAPER, RATE_DELTA, basic_numbers, batch_settings,
                                            claim_lines, core_overrides, errorbar, paired,
                                            paper_claim, pct, pyplot, rng, save_figure, spread,
                                            time_to_target, trend)

NAME = "scaling"
TITLE = "Searcher scaling: wall-clock time to a target accuracy"
CLAIM = (f"{PAPER}, abstract and Sec. 4: decoupling search from training speeds post-training "
         f"up in wall-clock time (4x or more, abstract), and more searchers generate more data "
         f"in parallel.")
DEPARTURES = [
    "Searchers and trainer share this machine's CPU cores instead of each having GPUs, so a "
    "searcher beyond the spare cores slows every process down (processor sharing).",
    "Time to target is interpolated linearly between held-out evaluations; the evaluations "
    "themselves pause the trainer, inside its wall-clock budget, alike for every n.",
    "The simulator models neither those pauses nor other programs on the machine; its "
    "prediction uses the medians of the 1-searcher run's per-batch and per-update durations.",
]
PAPER_SEARCHERS = ("abstract and Sec. 4: searchers on GPUs of their own scale data generation "
                   "and speed post-training up")


def settings(smoke: bool) -> dict:
    if smoke:
        return {"searchers": [1, 2], "train_seconds": 8.0, "eval_every": 3.0, "eval_size": 50,
                "target": 0.40, **batch_settings(True)}
    return {"searchers": [1, 2, 4], "train_seconds": 90.0, "eval_every": 15.0, "eval_size": 200,
            "target": 0.40, **batch_settings(False)}


def variants(s: dict) -> list[tuple[str, dict]]:
    base = core_overrides({**s, "max_minutes": s["train_seconds"] / 60.0, "max_steps": 0})
    return [(f"n{n}", merge(base, {"algo": "tb", "async": {"mode": "async",
                                                           "num_searchers": int(n)}}))
            for n in s["searchers"]]


def estimate_seconds(s: dict, n_seeds: int, smoke: bool) -> float:
    """Budget + start-up and evaluations (8 s, 1.5 s more per extra searcher) per run."""
    return n_seeds * sum(s["train_seconds"] + (6.0 if smoke else 8.0) + 1.5 * (n - 1)
                         for n in s["searchers"])


def _finite(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    """Basic numbers, time to target, measured durations, and the simulator's prediction from
    the durations of this seed's run with the fewest searchers (1 by default)."""
    from tba_lab.lab.simulate import async_throughput, run_timings, simulate_run
    from tba_lab.runlog import read_jsonl_rows

    t = run_timings(run_dir)
    n = int(t["num_searchers"])
    evals = read_jsonl_rows(Path(run_dir) / "eval.jsonl")
    row = {"searchers": n, **basic_numbers(summary, s),
           "time_to_target": time_to_target(evals, s["target"]),
           "timings": {k: _finite(v) for k, v in t.items()}}
    same_seed = [r for r in runs if r["seed"] == summary["seed"]] + [{**row, "timings": t}]
    base = min(same_seed, key=lambda r: r["searchers"])
    bt = {k: (float("nan") if v is None else v) for k, v in base["timings"].items()}
    row.update(predicted_from=base["searchers"], predicted_steady_upm=None,
               predicted_budget_upm=None, closed_form_upm=None)
    if all(math.isfinite(bt[k]) for k in ("gen_seconds", "score_seconds", "update_seconds")):
        cores = available_cores()
        sim = simulate_run(t, timings=bt, cores=cores, seed=int(summary["seed"]))
        row.update(predicted_steady_upm=_finite(sim.steady_updates_per_minute),
                   predicted_budget_upm=_finite(sim.updates_per_minute),
                   closed_form_upm=async_throughput(bt["gen_seconds"], bt["score_seconds"],
                                                    bt["update_seconds"], n, cores)[0])
    row["measured_steady_upm"] = row["timings"]["steady_updates_per_minute"]
    return row


def analyse(runs: list[dict], s: dict) -> dict:
    cells = []
    for n in s["searchers"]:
        rows = [r for r in runs if r["searchers"] == n]
        cells.append({"n": n, "seeds": len(rows), **{k: spread([r[k] for r in rows]) for k in (
            "time_to_target", "accuracy_after", "updates_per_minute", "samples_per_minute",
            "measured_steady_upm", "predicted_steady_upm", "closed_form_upm")}})
    curves = [{"n": r["searchers"], "seed": r["seed"], "evals": r["evals"]} for r in runs]
    return {"cells": cells, "curves": curves, "target": s["target"], "cores": available_cores(),
            "eval_every": s["eval_every"], "eval_size": s["eval_size"],
            "train_seconds": s["train_seconds"], "claims": claims(runs, s)}


def claims(runs: list[dict], s: dict) -> list[dict]:
    """The claims of the module docstring from ``runs`` (results.json's rows: ``seed``,
    ``searchers``, ``updates_per_minute``, ``samples_per_minute``): for each n above the
    fewest, two claims, updates and samples per minute relative to the fewest, paired by seed;
    ``[]`` with one count. A seed whose base run made no update or sample gives no ratio."""
    ns = sorted(s["searchers"])
    if len(ns) < 2:
        return []

    def rate(n, key):
        return {r["seed"]: r.get(key) for r in runs if r["searchers"] == n}

    out = []
    for n in ns[1:]:
        for key, what in (("updates_per_minute", "trainer updates"),
                          ("samples_per_minute", "samples generated")):
            base = {k: v or None for k, v in rate(ns[0], key).items()}  # 0 -> no ratio
            out.append(paper_claim(
                f"scaling.{key}.n{n}", f"{n} searchers make more {what} per minute than {ns[0]}",
                PAPER_SEARCHERS, f"mean over seeds of the {n}-searcher run's {what} per minute "
                f"over the {ns[0]}-searcher run's minus 1, same seed, same wall-clock budget",
                paired(rate(n, key), base, lambda a, b: a / b - 1), +1, RATE_DELTA,
                f"% relative to {ns[0]} searcher{'s' if ns[0] > 1 else ''}", scale=100.0,
                missing_reason="a run is missing, or the one with fewer searchers made none"))
    return out


def readings(a: dict) -> list[str]:
    """Sentences read off the numbers of :func:`analyse`."""
    cells, cores = a["cells"], a["cores"]
    sec = lambda v: f"{v:.0f} s"  # noqa: E731
    upm = lambda v: f"{v:.0f}"  # noqa: E731
    parts = []
    for c in cells:
        t = c["time_to_target"]
        if t["n"] == 0:
            parts.append(f"{c['n']} searcher(s): not reached (0 of {c['seeds']} seeds)")
        else:
            parts.append(f"{c['n']} searcher(s): {rng({**t, 'missing': 0}, sec)}, reached in "
                         f"{t['n']} of {c['seeds']} seeds")
    out = [f"Time to {pct(a['target'], 0)} held-out accuracy ({a['eval_size']} problems; LINEAR "
           f"INTERPOLATION between evaluations every {a['eval_every']:g} s of training, within the "
           f"{a['train_seconds']:g}-s budget): " + "; ".join(parts) + "."]
    full = [c for c in cells if c["time_to_target"]["n"] == c["seeds"] and c["seeds"]]
    if full:
        best, first = min(full, key=lambda c: c["time_to_target"]["mean"]), cells[0]
        lead = (f"Among the settings that reached the target in every seed, {best['n']} "
                f"searcher(s) got there first")
        t_first, t_best = first["time_to_target"]["mean"], best["time_to_target"]["mean"]
        if best["n"] == first["n"]:
            out.append(lead + ": more searchers did not reach it sooner on this machine.")
        elif t_first is None:
            out.append(lead + f"; {first['n']} searcher(s) never reached it.")
        else:
            missed = "" if first["time_to_target"]["n"] == first["seeds"] else \
                " (which missed it in some seeds)"
            out.append(lead + f", {t_first / max(t_best, 1e-9):.2f}x sooner than {first['n']} on "
                       f"average{missed}.")
    else:
        out.append("No setting reached the target in every seed; compare the curves instead.")
    ns = [c["n"] for c in cells]
    u = [c["updates_per_minute"]["mean"] for c in cells]
    sp = [c["samples_per_minute"]["mean"] for c in cells]
    if None not in u and None not in sp:
        out.append(f"Trainer updates per minute (summary.json) {trend(ns, u)} with n: "
                   + ", ".join(f"n = {c['n']}: {rng(c['updates_per_minute'], upm)}" for c in cells)
                   + f"; samples generated per minute {trend(ns, sp)}: "
                   + ", ".join(f"n = {c['n']}: {rng(c['samples_per_minute'], upm)}" for c in cells)
                   + ".")
    pred = []
    for c in cells:
        p, m = c["predicted_steady_upm"]["mean"], c["measured_steady_upm"]["mean"]
        if p is not None and m:
            pred.append(f"n = {c['n']}: predicted {p:.0f}, measured {m:.0f} "
                        f"({100 * (p - m) / m:+.0f}%)")
    if pred:
        out.append("The simulator, fed the per-batch and per-update durations of the 1-searcher "
                   f"run and sharing {cores} cores among the n + 1 processes, predicted steady "
                   "updates per minute (first to last update) of " + "; ".join(pred) + ".")
    crowded = [n for n in ns if n + 1 > cores]
    if crowded:
        out.append(f"With {cores} cores, n + 1 busy processes exceed the cores from n = "
                   f"{crowded[0]} on, where processor sharing slows every process by "
                   f"(n + 1) / {cores}: the cap the paper avoids with a GPU per searcher.")
    return out + claim_lines(a.get("claims", []))


def figures(a: dict, out: Path) -> list[tuple[str, str]]:
    """``scaling.png``: (a) accuracy over wall-clock per run, (b) updates per minute measured
    and predicted, (c) samples per minute."""
    plt = pyplot()
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4))
    color = {c["n"]: f"C{i}" for i, c in enumerate(a["cells"])}
    for cv in a["curves"]:
        ev = sorted(cv["evals"], key=lambda e: e["wall_seconds"])
        first = cv["seed"] == min(x["seed"] for x in a["curves"] if x["n"] == cv["n"])
        ax1.plot([e["wall_seconds"] for e in ev], [100 * e["accuracy"] for e in ev], "o-",
                 ms=3, alpha=0.7, color=color[cv["n"]],
                 label=f"{cv['n']} searcher(s)" if first else None)
    ax1.axhline(100 * a["target"], color="k", ls="--", lw=1, label="target")
    ax1.set(xlabel="training wall-clock (s)", ylabel="held-out greedy accuracy (%)",
            title=f"(a) accuracy, {a['eval_size']} problems, one line per seed")
    ns = [c["n"] for c in a["cells"]]
    errorbar(ax2, ns, [c["measured_steady_upm"] for c in a["cells"]], scale=1.0, color="C0",
             label="measured (steady)")
    errorbar(ax2, [n + 0.05 for n in ns], [c["predicted_steady_upm"] for c in a["cells"]],
             scale=1.0, color="C1", ls="--", label=f"simulator, {a['cores']} cores")
    errorbar(ax2, [n - 0.05 for n in ns], [c["updates_per_minute"] for c in a["cells"]],
             scale=1.0, color="C2", ls=":", label="summary.json (whole budget)")
    ax2.set(xlabel="searchers n", ylabel="trainer updates / min", title="(b) trainer throughput")
    errorbar(ax3, ns, [c["samples_per_minute"] for c in a["cells"]], scale=1.0, color="C0")
    ax3.set(xlabel="searchers n", ylabel="samples generated / min", title="(c) generation")
    for ax in (ax1, ax2, ax3):
        ax.grid(alpha=0.3)
    for ax in (ax2, ax3):
        ax.set_xticks(ns)
        ax.set_ylim(0, None)
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    return save_figure(fig, out, "scaling.png", "Accuracy over wall-clock per run, trainer updates per minute "
                            "(measured and predicted) and samples per minute against the number "
                            "of searchers; bars from the lowest to the highest seed.")


def table(a: dict) -> list[str]:
    f0 = lambda v: f"{v:.0f}"  # noqa: E731
    lines = ["| searchers | time to target (s) | accuracy after | updates/min | steady "
             "updates/min | predicted steady | closed form | samples/min |",
             "|---|---|---|---|---|---|---|---|"]
    for c in a["cells"]:
        lines.append(f"| {c['n']} | {rng(c['time_to_target'], f0)} | {rng(c['accuracy_after'])} | "
                     f"{rng(c['updates_per_minute'], f0)} | {rng(c['measured_steady_upm'], f0)} | "
                     f"{rng(c['predicted_steady_upm'], f0)} | {rng(c['closed_form_upm'], f0)} | "
                     f"{rng(c['samples_per_minute'], f0)} |")
    return lines
