"""Experiment ``buffer``: replay-buffer sampling, recency m and reward prioritisation inv_temp.

Claim (TBA, arXiv 2503.18929, abstract and Sec. 3-4): sampling the replay buffer by recency
(probability m of drawing from prompts refreshed since the last sync) and by reward (softmax of
inv_temp * r) trades on-policyness against exploration, and the right mix gives further gains
and more diverse solutions. Here: async TB, one searcher, m in {0, 0.5, 0.8, 0.95} at
inv_temp 0 and inv_temp 1 at m = 0.8, equal trainer updates; after training, greedy accuracy
and the number of DISTINCT correct responses among K samples per held-out prompt
(:func:`tba_lab.eval.sample_diversity`) at the run's temperature.

The claims, each judged by :data:`~tba_lab.lab.experiments.common.VERDICT_RULE` on per-seed
differences of two settings that share their seed (:func:`claims`); the paper's claim and
setting: its abstract (reward- and recency-prioritising sampling "enable further gains as data
generation is scaled") and Sec. 3-4 (many searchers filling one buffer, GSM8K and MATH):

* recency: the mean over seeds of the held-out accuracy at the largest m minus at m = 0 (both
  at inv_temp 0), predicted positive;
* reward prioritisation, at each m run with inv_temp 1: the mean over seeds of the accuracy at
  inv_temp 1 minus at inv_temp 0, predicted positive.

Smallest effect of interest of both: 3 points, about the standard error of one evaluation on
200 problems (3.5 at 40%): a smaller gain would not show in one run.
"""
from __future__ import annotations

from pathlib import Path

from tba_lab.config import merge
from tba_lab.lab.experiments.common import (FULL_UPDATES, GAIN_DELTA, PAPER, RUN_OVERHEAD_SECONDS,
                                            SMOKE_RUN_SECONDS, UPDATES_PER_MINUTE, basic_numbers,
                                            batch_settings, binomial_se_points, change, claim_lines,
                                            core_overrides, errorbar, load_run_policy, one_thread,
                                            paired, paper_claim, pct, pyplot, rng, save_figure,
                                            separated, spread, trend)

NAME = "buffer"
TITLE = "Replay-buffer sampling: recency m and reward prioritisation inv_temp"
CLAIM = (f"{PAPER}, abstract and Sec. 3-4: recency- and reward-prioritising buffer sampling "
         f"(m, reward softmax) enable further gains and more diverse solutions.")
DEPARTURES = [
    "One CPU searcher, so the buffer holds little beyond the newest batches; the paper's gains "
    "from sampling appear when many searchers fill a large buffer.",
    "The buffer remembers a bounded number of recently refreshed prompts (`buffer.max_prompts`, "
    "a kit addition), so reward-mode draws cannot reach far into the past.",
    "Diversity is counted on the embedded task: distinct token sequences among the correct "
    "samples of one prompt (the paper reports diversity on its red-teaming task).",
]
PAPER_SAMPLING = ("abstract and Sec. 3-4: reward- and recency-prioritising buffer sampling enable "
                  "further gains as data generation is scaled; many searchers, GSM8K and MATH")


def settings(smoke: bool) -> dict:
    """m grid, the m values that also run with inv_temp 1, run length and the diversity sample
    (``diversity_prompts`` held-out prompts x ``diversity_k`` responses)."""
    if smoke:
        return {"recency": [0.0, 0.8], "inv_temp_at": [0.8], "max_steps": 4, "eval_size": 50,
                "max_minutes": 3.0, "diversity_prompts": 8, "diversity_k": 4,
                **batch_settings(True)}
    return {"recency": [0.0, 0.5, 0.8, 0.95], "inv_temp_at": [0.8], "max_steps": FULL_UPDATES,
            "eval_size": 200, "max_minutes": 10.0, "diversity_prompts": 50, "diversity_k": 8,
            **batch_settings(False)}


def _label(m: float, inv_temp: float) -> str:
    return f"m{m:g}_inv{inv_temp:g}"


def variants(s: dict) -> list[tuple[str, dict]]:
    grid = [(m, 0.0) for m in s["recency"]] + [(m, 1.0) for m in s["inv_temp_at"]]
    return [(_label(m, it), merge(core_overrides(s), {
        "algo": "tb", "async": {"mode": "async", "num_searchers": 1},
        "buffer": {"recency_prob": float(m), "inv_temp": float(it)}})) for m, it in grid]


def estimate_seconds(s: dict, n_seeds: int, smoke: bool) -> float:
    per_run = (SMOKE_RUN_SECONDS + 1.0 if smoke else
               RUN_OVERHEAD_SECONDS + 3.0 + 60.0 * s["max_steps"] / UPDATES_PER_MINUTE)
    return n_seeds * len(variants(s)) * per_run


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    """Basic numbers plus the diversity of the final policy's samples."""
    import torch

    from tba_lab.eval import sample_diversity

    cfg, _, _, backend, task, held_out = load_run_policy(run_dir)
    torch.manual_seed(int(summary["seed"]))
    with one_thread():
        div = sample_diversity(task, backend, held_out[:s["diversity_prompts"]],
                               s["diversity_k"], cfg.model.max_new_tokens, cfg.model.temperature)
    return {"recency_prob": cfg.buffer.recency_prob, "inv_temp": cfg.buffer.inv_temp,
            "share_over_k": share_over_k(run_dir / "buffer.pt", cfg.training.num_generations),
            **basic_numbers(summary, s), **{f"div_{k}": v for k, v in div.items()}}


def share_over_k(buffer_path: Path, k: int) -> float | None:
    """Share of the prompts in a run's final ``buffer.pt`` that hold more than ``k`` rollouts:
    the only prompts where reward prioritisation can act, since a reward-mode slot draws K of
    one prompt's items without replacement (:mod:`tba_lab.buffer`); a prompt holding exactly K
    gives the same group at any inv_temp. ``None`` when the file is missing."""
    from tba_lab.buffer import ReplayBuffer

    if not buffer_path.exists():
        return None
    buffer = ReplayBuffer.load(buffer_path)
    ids = buffer.prompt_ids()
    return sum(len(buffer.items(i)) > k for i in ids) / max(1, len(ids))


def analyse(runs: list[dict], s: dict) -> dict:
    cells = []
    grid = [(m, 0.0) for m in s["recency"]] + [(m, 1.0) for m in s["inv_temp_at"]]
    for m, it in grid:
        rows = [r for r in runs if r["recency_prob"] == m and r["inv_temp"] == it]
        cells.append({"m": m, "inv_temp": it, **{k: spread([r[k] for r in rows]) for k in (
            "accuracy_after", "gain", "div_distinct_correct", "div_pass_at_k", "staleness_mean")},
            "share_over_k": spread([r.get("share_over_k") for r in rows])})
    return {"cells": cells, "eval_size": s["eval_size"], "k": s["diversity_k"],
            "prompts": s["diversity_prompts"],
            "accuracy_before": spread([r["accuracy_before"] for r in runs]),
            "claims": claims(runs, s)}


def claims(runs: list[dict], s: dict) -> list[dict]:
    """The claims of the module docstring from ``runs`` (results.json's rows: ``seed``,
    ``recency_prob``, ``inv_temp``, ``accuracy_after`` a fraction), paired by seed: the largest
    m minus the smallest at inv_temp 0 (none with one m), and inv_temp 1 minus 0 at each m that
    ran both."""
    def accuracy(m, inv_temp):
        return {r["seed"]: r.get("accuracy_after") for r in runs
                if r["recency_prob"] == m and r["inv_temp"] == inv_temp}

    ms = sorted(s["recency"])
    out = []
    if len(ms) > 1:
        out.append(paper_claim(
            "buffer.recency", f"Recency-prioritised sampling (m = {ms[-1]:g}) raises held-out "
            f"accuracy over uniform sampling (m = {ms[0]:g})", PAPER_SAMPLING,
            f"mean over seeds of the accuracy at m = {ms[-1]:g} minus at m = {ms[0]:g}, inv_temp "
            f"0, same seed, equal updates", paired(accuracy(ms[-1], 0.0), accuracy(ms[0], 0.0)),
            +1, GAIN_DELTA, "points", scale=100.0))
    for m in [m for m in s["inv_temp_at"] if m in ms]:
        out.append(paper_claim(
            f"buffer.reward_m{m:g}", f"Reward-prioritised sampling (inv_temp 1) raises held-out "
            f"accuracy over inv_temp 0 at m = {m:g}", PAPER_SAMPLING, f"mean over seeds of the "
            f"accuracy at inv_temp 1 minus at inv_temp 0, m = {m:g}, same seed, equal updates",
            paired(accuracy(m, 1.0), accuracy(m, 0.0)), +1, GAIN_DELTA, "points", scale=100.0))
    return out


def _cells(a: dict, inv_temp: float) -> list[dict]:
    return sorted((c for c in a["cells"] if c["inv_temp"] == inv_temp), key=lambda c: c["m"])


def readings(a: dict) -> list[str]:
    """Sentences read off the numbers of :func:`analyse`."""
    base = _cells(a, 0.0)
    se = binomial_se_points(a["accuracy_before"]["mean"] or 0.0, a["eval_size"])
    out = []
    acc = [c["accuracy_after"]["mean"] for c in base]
    div = [c["div_distinct_correct"]["mean"] for c in base]
    ms = [c["m"] for c in base]
    if len(base) >= 2 and None not in acc:
        best, worst = max(base, key=lambda c: c["accuracy_after"]["mean"]), \
            min(base, key=lambda c: c["accuracy_after"]["mean"])
        width = 100 * (best["accuracy_after"]["mean"] - worst["accuracy_after"]["mean"])
        where = (f"Best m = {best['m']:g}, worst m = {worst['m']:g}; their means differ by "
                 f"{width:.1f} points, " if width > 0 else "The means are equal, ")
        out.append(f"At inv_temp 0, held-out accuracy {trend(ms, acc)} with m: " + ", ".join(
            f"m = {c['m']:g}: {rng(c['accuracy_after'])}" for c in base) + ". " + where
            + ("less than" if width < 2 ** 0.5 * se else "more than")
            + f" the noise of a difference of two evaluations (about {2 ** 0.5 * se:.1f}).")
    if len(base) >= 2 and None not in div:
        best = max(base, key=lambda c: c["div_distinct_correct"]["mean"])
        out.append(f"Distinct correct responses per prompt (K = {a['k']} samples, {a['prompts']} "
                   f"prompts) {trend(ms, div)} with m: " + ", ".join(
                       f"m = {c['m']:g}: {rng(c['div_distinct_correct'], _num)}" for c in base)
                   + (f"; most at m = {best['m']:g}." if max(div) > min(div) else "."))
    for c1 in _cells(a, 1.0):
        c0 = next((c for c in base if c["m"] == c1["m"]), None)
        if c0 is None or c0["accuracy_after"]["n"] == 0 or c1["accuracy_after"]["n"] == 0:
            continue
        parts = []
        for key, what, fmt in (("accuracy_after", "accuracy", pct),
                               ("div_distinct_correct", "distinct correct responses", _num)):
            a0, a1 = c0[key]["mean"], c1[key]["mean"]
            sep = separated(c1[key], c0[key])
            parts.append(f"{change(a0, a1, fmt, what)} ({fmt(a0)} -> {fmt(a1)}, "
                         f"{'ranges separated' if sep else 'within noise'})")
        out.append(f"At m = {c1['m']:g}, reward prioritisation (inv_temp 1 instead of 0) "
                   + " and ".join(parts) + ".")
        if c1.get("share_over_k") and c1["share_over_k"]["n"]:
            share = 100 * c1["share_over_k"]["mean"]
            out.append(f"Reward prioritisation can act only on prompts holding more than K "
                       f"rollouts (a reward-mode slot draws K of one prompt's items without "
                       f"replacement); at the end of the inv_temp 1 runs {share:.1f}% of the "
                       f"stored prompts did"
                       + (f", so inv_temp 1 and 0 drew {'the' if share == 0 else 'almost the'} "
                          f"same groups and this comparison cannot show its effect (each prompt "
                          f"was generated about once in these runs)." if share < 10 else "."))
    return out + claim_lines(a.get("claims", []))


def _num(v: float) -> str:
    return f"{v:.2f}"


def figures(a: dict, out: Path) -> list[tuple[str, str]]:
    """``buffer.png``: (a) accuracy vs m, (b) distinct correct responses vs m."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for i, it in enumerate(sorted({c["inv_temp"] for c in a["cells"]})):
        cells = _cells(a, it)
        ms = [c["m"] + 0.008 * i for c in cells]
        errorbar(ax1, ms, [c["accuracy_after"] for c in cells], color=f"C{i}",
                 label=f"inv_temp {it:g}")
        errorbar(ax2, ms, [c["div_distinct_correct"] for c in cells], scale=1.0, color=f"C{i}",
                 label=f"inv_temp {it:g}")
    ax1.set(ylabel="held-out greedy accuracy (%)", title=f"(a) accuracy, {a['eval_size']} problems")
    ax2.set(ylabel=f"distinct correct of K = {a['k']}",
            title=f"(b) distinct correct responses per prompt ({a['prompts']} prompts)")
    for ax in (ax1, ax2):
        ax.set_xlabel("recency m (probability of drawing refreshed prompts)")
        ax.grid(alpha=0.3)
        ax.legend()
    return save_figure(fig, out, "buffer.png", "Held-out accuracy and distinct correct responses against recency m, "
                           "one line per inv_temp; mean over seeds, bars from the lowest to the "
                           "highest seed.")


def table(a: dict) -> list[str]:
    lines = ["| m | inv_temp | accuracy after | gain (points) | distinct correct | pass@K | "
             "staleness mean |", "|---|---|---|---|---|---|---|"]
    for c in a["cells"]:
        lines.append(f"| {c['m']:g} | {c['inv_temp']:g} | {rng(c['accuracy_after'])} | "
                     f"{rng(c['gain'], lambda v: f'{100 * v:+.1f}')} | "
                     f"{rng(c['div_distinct_correct'], _num)} | {rng(c['div_pass_at_k'])} | "
                     f"{rng(c['staleness_mean'], lambda v: f'{v:.1f}')} |")
    return lines
