"""Experiment ``off_policy``: accuracy gain against the sync period k, TB vs GRPO vs RLOO.

Claim (TBA, arXiv 2503.18929, abstract and Sec. 4): TB keeps high accuracy as asynchrony
grows, because its loss is a regression to a fixed target that stale data does not move
(Sec. 3), while objectives built for on-policy data (GRPO, RLOO) need importance ratios that
stale data strain. Here: async mode, one searcher, weights published every k updates (fresh
data up to about 2k-1 updates stale, replayed data older), the same number of trainer updates
for every run, greedy accuracy on the first ``eval_size`` held-out problems.
"""
from __future__ import annotations

from pathlib import Path

from tba_lab.lab.experiments.common import (FULL_UPDATES, PAPER, RUN_OVERHEAD_SECONDS,
                                            SMOKE_RUN_SECONDS, UPDATES_PER_MINUTE, basic_numbers,
                                            batch_settings,
                                            binomial_se_points, core_overrides, errorbar, points,
                                            pyplot, rng, separated, spread, save_figure)

NAME = "off_policy"
TITLE = "Off-policy robustness: accuracy gain against the sync period k"
CLAIM = (f"{PAPER}, abstract and Sec. 4: TB keeps high accuracy as asynchrony grows; its loss "
         f"(Eq. 3-5) is valid on stale data, while GRPO and RLOO rely on importance ratios to "
         f"the behaviour policy.")
DEPARTURES = [
    "One CPU searcher, a 1M-parameter model and synthetic two-step arithmetic instead of GPUs, "
    "billion-parameter models and GSM8K/MATH/TL;DR; far fewer updates per run (see the "
    "settings above).",
    "Every run gets the same number of trainer updates (`training.max_steps`), and the learning "
    "rate decays linearly to 0 over them (the kit's default schedule; not in the paper).",
    "GRPO and RLOO run off-policy with a per-token PPO clip on the searcher's recorded behaviour "
    "log-probs (the kit's baselines); the paper's off-policy baselines are Online DPO, RLOO, "
    "PPO and Dr. GRPO in their own codebases.",
    "Staleness is measured, not set: k bounds fresh data to about 2k-1 updates, replayed data "
    "(recency m below 1, `buffer.recency_prob`) can be older.",
]


def settings(smoke: bool) -> dict:
    """The grid and run length: full (3 algorithms x k in {1, 4, 16, 64}, 64 updates, 200
    held-out problems) or SMOKE (2 x 2, 4 updates, 50 problems, small batches)."""
    if smoke:
        return {"algos": ["tb", "grpo"], "sync_periods": [1, 4], "max_steps": 4,
                "eval_size": 50, "max_minutes": 3.0, **batch_settings(True)}
    return {"algos": ["tb", "grpo", "rloo"], "sync_periods": [1, 4, 16, 64],
            "max_steps": FULL_UPDATES, "eval_size": 200, "max_minutes": 10.0,
            **batch_settings(False)}


def variants(s: dict) -> list[tuple[str, dict]]:
    """``(label, config overrides)`` per run of one seed."""
    out = []
    for k in s["sync_periods"]:
        for algo in s["algos"]:
            out.append((f"{algo}_k{k}", {**core_overrides(s), "algo": algo,
                                         "async": {"mode": "async", "num_searchers": 1,
                                                   "sync_period": int(k)}}))
    return out


def estimate_seconds(s: dict, n_seeds: int, smoke: bool) -> float:
    """Planned wall clock: runs x (start-up and evaluations + updates at the 2-core rate)."""
    per_run = (SMOKE_RUN_SECONDS if smoke
               else RUN_OVERHEAD_SECONDS + 60.0 * s["max_steps"] / UPDATES_PER_MINUTE)
    return n_seeds * len(variants(s)) * per_run


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    algo, k = variant.rsplit("_k", 1)
    return {"algo": algo, "sync_period": int(k), **basic_numbers(summary, s)}


def analyse(runs: list[dict], s: dict) -> dict:
    """Per (algorithm, k): spreads over seeds of gain, accuracy after and mean staleness."""
    cells = []
    for k in s["sync_periods"]:
        for algo in s["algos"]:
            rows = [r for r in runs if r["algo"] == algo and r["sync_period"] == k]
            cells.append({"algo": algo, "k": k,
                          **{m: spread([r[m] for r in rows])
                             for m in ("gain", "accuracy_after", "staleness_mean")}})
    return {"cells": cells, "eval_size": s["eval_size"],
            "accuracy_before": spread([r["accuracy_before"] for r in runs])}


def _cell(a: dict, algo: str, k: int) -> dict:
    return next(c for c in a["cells"] if c["algo"] == algo and c["k"] == k)


ALGO_NAMES = {"tb": "TB", "grpo": "GRPO", "rloo": "RLOO"}


def _name(algo: str) -> str:
    return ALGO_NAMES.get(algo, algo)


def readings(a: dict) -> list[str]:
    """Sentences read off the numbers of :func:`analyse` (wording chosen by comparing them).

    Robustness is the share of the k = k1 gain an algorithm keeps at larger k, averaged over
    every larger k in the grid: the drop in points would favour whichever gained least at k1,
    and the largest k alone can order the algorithms differently from the others."""
    ks = sorted({c["k"] for c in a["cells"]})
    algos = list(dict.fromkeys(c["algo"] for c in a["cells"]))
    k1, later = ks[0], ks[1:]
    p0 = a["accuracy_before"]["mean"] or 0.0
    noise = 2 ** 0.5 * binomial_se_points(p0, a["eval_size"])  # SE of a difference, points
    out = [f"Gain over the starting policy at k = {k1}: " + ", ".join(
        f"{_name(x)} {rng(_cell(a, x, k1)['gain'], points)} points" for x in algos)
        + f". One evaluation of {a['eval_size']} problems has a standard error of about "
          f"{noise / 2 ** 0.5:.1f} points, a difference of two about {noise:.1f}."]
    if not later:
        return out
    kn = later[-1]
    kept, share, real_gain = [], {}, {}
    for x in algos:
        g1, gn = _cell(a, x, k1)["gain"]["mean"], _cell(a, x, kn)["gain"]["mean"]
        gk = [_cell(a, x, k)["gain"]["mean"] for k in later]
        if g1 is None or None in gk:
            continue
        real_gain[x] = 100 * g1 > noise
        if not real_gain[x]:
            kept.append(f"{_name(x)} gained {points(g1)} points at k = {k1}, within noise, "
                        f"so it had no clear gain to keep ({points(gn)} at k = {kn})")
            continue
        share[x] = sum(gk) / len(gk) / g1  # mean over k > k1 of the share of the k1 gain kept
        kept.append(f"{_name(x)} keeps none of its k = {k1} gain ({points(g1)} -> {points(gn)} "
                    f"points)" if gn <= 0 else f"{_name(x)} keeps {gn / g1:.0%} of its k = {k1} "
                    f"gain ({points(g1)} -> {points(gn)} points)")
    if kept:
        out.append(f"At k = {kn}: " + "; ".join(kept) + ".")
    if len(share) >= 2:
        out.append(_share_sentence(a, share, k1, later))
    if "tb" in real_gain and len(real_gain) >= 2:
        out += _tb_against_baselines(a, real_gain, share, k1, later)
    st1 = [_cell(a, x, k1)["staleness_mean"]["mean"] for x in algos]
    stn = [_cell(a, x, kn)["staleness_mean"]["mean"] for x in algos]
    if all(v is not None for v in st1 + stn):
        out.append(f"Mean staleness of the trained data (averaged over algorithms) is "
                   f"{sum(st1) / len(st1):.1f} updates at k = {k1} and {sum(stn) / len(stn):.1f} "
                   f"at k = {kn} (fresh data at most about 2k-1 = {2 * kn - 1}).")
    return out


def _share_sentence(a: dict, share: dict, k1: int, later: list) -> str:
    """Which algorithm keeps the largest and smallest share of its k1 gain, and whether the
    largest k alone says otherwise."""
    kn = later[-1]
    best, worst = max(share, key=share.get), min(share, key=share.get)
    over = (f"At k = {kn}" if len(later) == 1 else
            "Averaged over k = " + ", ".join(map(str, later[:-1])) + f" and {kn}")
    at_kn = {x: _cell(a, x, kn)["gain"]["mean"] / _cell(a, x, k1)["gain"]["mean"] for x in share}
    best_kn = max(at_kn, key=at_kn.get)
    return (f"{over}, the share of the k = {k1} gain kept is "
            + ", ".join(f"{_name(x)} {v:.0%}" for x, v in share.items())
            + f": the gain holds up best for {_name(best)} and worst for {_name(worst)} (the "
              f"share, not the drop in points, which would favour whichever gained least at "
              f"k = {k1})."
            + ("" if best_kn == best else f" At k = {kn} alone {_name(best_kn)} keeps the "
                                          f"largest share, so the ordering depends on k."))


def _tb_against_baselines(a: dict, real_gain: dict, share: dict, k1: int,
                          later: list) -> list[str]:
    """TB's range over seeds against each baseline's at every k > k1, and the verdict on the
    paper's claim (TB keeps its accuracy best as asynchrony grows)."""
    kn = later[-1]
    seps = {k: {x: separated(_cell(a, "tb", k)["gain"], _cell(a, x, k)["gain"])
                for x in real_gain if x != "tb"} for k in later}
    below = {}  # baseline -> the first k at which TB's range lies below the baseline's
    for k in later:
        for x, v in seps[k].items():
            if v == -1:
                below.setdefault(_name(x), k)
    words = {1: "lies above", -1: "lies below", 0: "overlaps"}
    earlier = [f"{x}'s at k = {k}" for x, k in below.items() if k != kn]
    ranges = (f"At k = {kn} TB's range over seeds "
              + "; ".join(f"{words[v]} {_name(x)}'s" for x, v in seps[kn].items()) + "."
              + (f" It lies below {' and '.join(earlier)}." if earlier else ""))
    best = max(share, key=share.get) if len(share) >= 2 else None
    if not real_gain["tb"]:
        verdict = (f"is inconclusive: TB's own gain at k = {k1} is within the evaluation noise, "
                   f"so the miniature cannot show how much of it survives")
    elif best is None:
        verdict = (f"is inconclusive: no baseline's gain at k = {k1} is above the evaluation "
                   f"noise, so there is nothing to compare TB's with")
    elif best != "tb":
        verdict = (f"does not reproduce the paper's ordering: {_name(best)} keeps the largest "
                   f"share of its gain as k grows here")
    elif below:
        verdict = ("is mixed: TB keeps the largest share of its gain as k grows, but its range "
                   "lies below " + " and ".join(f"{x}'s at k = {k}" for x, k in below.items()))
    elif all(v == 1 for v in seps[kn].values()):
        verdict = (f"agrees with the paper: TB keeps the largest share of its gain as k grows "
                   f"and its range at k = {kn} lies above every baseline's")
    else:
        verdict = (f"points the same way as the paper (TB keeps the largest share of its gain as "
                   f"k grows), but its range at k = {kn} does not lie above every baseline's, "
                   f"so it is within noise")
    return [ranges, f"Against the paper's claim, this miniature {verdict}."]


def figures(a: dict, out: Path) -> list[tuple[str, str]]:
    """``off_policy.png``: (a) gain vs k, (b) mean staleness vs k; log2 x-axis."""
    plt = pyplot()
    ks = sorted({c["k"] for c in a["cells"]})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for i, algo in enumerate(dict.fromkeys(c["algo"] for c in a["cells"])):
        cells = [_cell(a, algo, k) for k in ks]
        shift = [k * 2 ** (0.06 * (i - 1)) for k in ks]  # side by side, not on top
        errorbar(ax1, shift, [c["gain"] for c in cells], label=algo.upper(), color=f"C{i}")
        errorbar(ax2, shift, [c["staleness_mean"] for c in cells], scale=1.0,
                 label=algo.upper(), color=f"C{i}")
    ax1.axhline(0, color="0.5", lw=1)
    ax1.set(ylabel="held-out accuracy gain (points)",
            title=f"(a) gain over the starting policy, {a['eval_size']} problems")
    ax2.set(ylabel="mean staleness (updates)", title="(b) staleness of the trained data")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlabel("sync period k (weights published every k updates)")
        ax.grid(alpha=0.3)
        ax.legend()
    return save_figure(fig, out, "off_policy.png", "Accuracy gain and staleness against k; mean over seeds, bars "
                               "from the lowest to the highest seed.")


def table(a: dict) -> list[str]:
    lines = ["| algorithm | k | gain (points) | accuracy after | staleness mean |",
             "|---|---|---|---|---|"]
    for c in a["cells"]:
        lines.append(f"| {c['algo']} | {c['k']} | {rng(c['gain'], points)} | "
                     f"{rng(c['accuracy_after'])} | "
                     f"{rng(c['staleness_mean'], lambda v: f'{v:.1f}')} |")
    return lines
