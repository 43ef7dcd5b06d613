"""Benchmark ``race``: async TBA against its baselines at equal wall clock on the arithmetic task.

Claim (TBA, arXiv 2503.18929, abstract and Sec. 4): asynchronous TB reaches a given accuracy
sooner in wall-clock time than synchronous on-policy training, at an accuracy as good. Every
leg trains the embedded model for the same ``minutes`` with the same seed, learning rate (5e-5,
linear decay over the budget), batch (B = 16 prompts x K = 8), temperature and reward:

    (a) sync GRPO     (b) sync TB     (c) async TBA, one searcher (the kit's default)
    (d) async GRPO, on TBA's pipeline and so with its staleness
    (e) TRL's GRPOTrainer (``bench/trl_grpo.py``; needs the ``trl`` of the ``dev`` extra)

Held-out greedy accuracy is measured before training, every ``eval_every`` seconds and at the
end; with ``defer_eval`` a tick only copies the weights and the copies are evaluated after the
budget, so no leg pauses to evaluate. The table interpolates accuracy linearly at each
checkpoint and the time to ``target``; a second table gives accuracy at equal trainer updates;
rates are compared per seed as ratios; the goal line says whether (c) is at or above (b) at
every checkpoint and the fastest leg to the target. Another learning rate or TB's GRPO-style
normalisations apply to every leg with ``--config``.

The claims, each judged by :data:`~tba_lab.lab.experiments.common.VERDICT_RULE` on per-seed
differences of legs (c) and (b), which share their seed (:func:`claims`):

* The paper (abstract: decoupled training and search speed post-training up "4x or more" in
  wall-clock time; Fig. 1: GSM8K, the SFTed RhoMath-1B at 40% before RL, 4 A100 GPUs) says
  async TBA trains faster than synchronous on-policy training. Estimands: (1) the mean over
  seeds of (c)'s trainer updates per minute relative to (b)'s, minus 1, in percent; smallest
  effect of interest 10% (:data:`RATE_DELTA`); (2) the mean over seeds of (c)'s time to
  ``target`` minus (b)'s, in seconds, predicted negative; smallest effect of interest one
  evaluation period (``eval_every``), since a crossing interpolated between evaluations that
  far apart is not resolved more finely. A seed where either leg never reaches the target
  gives no difference: it is left out, counted, and named in the report.
* A race written before ``race`` became a preset (``race.json``) is read by
  :func:`legacy_claims`, which applies :func:`claims` to its stored per-seed legs unchanged.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from tba_lab.config import merge
from tba_lab.lab.experiments.common import (PAPER, RATE_DELTA, RUN_OVERHEAD_SECONDS,
                                            VERDICT_RULE, ExperimentError, batch_settings,
                                            claim_lines, core_overrides, paired, paper_claim, pct,
                                            pyplot, rng, save_figure, spread, time_to_target,
                                            train_run)

NAME = "race"
TITLE = "The race: async TBA against sync TB, GRPO and TRL at equal wall clock"
CLAIM = (f"{PAPER}, abstract and Sec. 4: asynchronous off-policy TB reaches a target accuracy "
         f"sooner in wall-clock time than synchronous on-policy training.")
DEPARTURES = [
    "A 1M-parameter model on two-step arithmetic for minutes on shared CPU cores, instead of "
    "0.4-7B models on GSM8K or MATH on GPUs for hours; the searcher and the trainer share the "
    "cores, so asynchrony gains what one core can overlap, not a GPU's worth.",
    "Accuracy at a checkpoint and the time to target are interpolated linearly between the "
    "measured evaluations; leg (e) is TRL's trainer, not the kit's GRPO.",
]
LEGS = {"a": ("sync GRPO", {"algo": "grpo", "async": {"mode": "sync"}}),
        "b": ("sync TB", {"algo": "tb", "async": {"mode": "sync"}}),
        "c": ("async TBA", {"algo": "tb", "async": {"mode": "async"}}),
        "d": ("async GRPO", {"algo": "grpo", "async": {"mode": "async"}}),
        "e": ("TRL GRPOTrainer", {"algo": "grpo", "async": {"mode": "sync"}})}  # config: its batch and lr
# the ratios of rates reported, with the goal the race was set (async TBA >= 1.2x sync TB's rate)
RATIOS = (("c", "b", "goal >= 1.2"), ("c", "a", ""), ("a", "e", "goal >= 2"))
TRL_SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "trl_grpo.py"
# The paper's claim and setting for the race's claims (arXiv 2503.18929, abstract and Fig. 1).
PAPER_SPEED = ("abstract and Fig. 1: decoupling search from training speeds post-training up "
               "4x or more in wall-clock time; GSM8K, RhoMath-1B, 4 A100 GPUs")


def settings(smoke: bool) -> dict:
    """``minutes`` per leg; evaluations of ``eval_size`` problems every ``eval_every`` s, as
    weight copies evaluated after the budget (``defer_eval``); ``target`` accuracy; ``legs``."""
    if smoke:
        return {"legs": list(LEGS), "minutes": 0.2, "eval_every": 4.0, "eval_size": 20,
                "defer_eval": True, "target": 0.40, **batch_settings(True)}
    return {"legs": list(LEGS), "minutes": 2.0, "eval_every": 15.0, "eval_size": 1000,
            "defer_eval": True, "target": 0.40, **batch_settings(False)}


def variants(s: dict) -> list[tuple[str, dict]]:
    """One ``(leg, overrides)`` per leg of ``s["legs"]``.

    Raises:
        ExperimentError: an unknown leg, or leg (e) without ``trl`` or ``bench/trl_grpo.py``.
    """
    unknown = [leg for leg in s["legs"] if leg not in LEGS]
    if unknown:
        raise ExperimentError(f"race: unknown leg(s) {unknown}; the legs are {list(LEGS)}")
    if "e" in s["legs"] and not (TRL_SCRIPT.is_file() and importlib.util.find_spec("trl")):
        raise ExperimentError("race: leg e needs the trl package (pip install -e '.[dev]') and "
                              "bench/trl_grpo.py of a checkout; or run without it: --set legs=a,b,c,d")
    base = merge(core_overrides({**s, "max_minutes": s["minutes"], "max_steps": 0}),
                 {"task": {"defer_interim_eval": bool(s["defer_eval"])}})
    return [(leg, merge(base, LEGS[leg][1])) for leg in dict.fromkeys(s["legs"])]


def estimate_seconds(s: dict, n_seeds: int, smoke: bool) -> float:
    """Budget, start-up, and the evaluations (deferred ones after the budget, ~3 ms a problem)."""
    evals = (len(checkpoints(s["minutes"], s["eval_every"])) + 2) * s["eval_size"] * 0.003
    return n_seeds * len(s["legs"]) * (60 * s["minutes"] + RUN_OVERHEAD_SECONDS + evals)


def run(variant: str, overrides: dict, run_dir: Path, seed: int, s: dict):
    """Leg (e) through ``bench/trl_grpo.py``, the others through the kit's trainer; returns
    ``(summary, evals)`` with the trainer's keys."""
    if variant != "e":
        return train_run(overrides, run_dir, seed)
    from tba_lab.config import from_dict

    spec = importlib.util.spec_from_file_location("trl_grpo", TRL_SCRIPT)
    trl_grpo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trl_grpo)
    cfg = from_dict(merge(overrides, {"seed": seed}))
    r = trl_grpo.run_trl_grpo(
        run_dir, minutes=cfg.max_minutes, seed=seed,
        num_prompts_per_step=cfg.training.num_prompts_per_step,
        num_generations=cfg.training.num_generations, learning_rate=cfg.training.learning_rate,
        temperature=cfg.model.temperature, max_new_tokens=cfg.model.max_new_tokens,
        eval_size=cfg.task.eval_size, eval_at_seconds=tuple(checkpoints(s["minutes"], s["eval_every"])),
        defer_eval=cfg.task.defer_interim_eval)
    summary = {"seed": seed, "trainer_steps": r["updates"], "staleness_mean": 0.0, "staleness_max": 0,
               **{k: r[k] for k in ("samples_generated", "wall_seconds", "accuracy_before",
                                    "accuracy_after")}}
    return summary, r["evals"]


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    """The leg's numbers from its summary: updates, samples, seconds, accuracy, staleness."""
    return {"updates": summary["trainer_steps"],
            **{k: summary.get(k) for k in ("samples_generated", "wall_seconds", "accuracy_before",
                                           "accuracy_after", "staleness_mean", "staleness_max")}}


# ------------------------------------------------------------------ one run's evaluations
def accuracy_at(evals: list[dict], seconds: float, key: str = "accuracy") -> float | None:
    """Held-out ``key`` interpolated linearly at ``seconds`` of training between the two
    measured evaluations around it (``evals``: rows with ``wall_seconds`` and ``key``, the
    before-evaluation at 0 s); a measured point is itself. None outside the measured span."""
    pts = sorted((e["wall_seconds"], e[key]) for e in evals)
    if not pts or not pts[0][0] <= seconds <= pts[-1][0]:
        return None
    for (t0, a0), (t1, a1) in zip(pts, pts[1:]):
        if t0 <= seconds <= t1:
            return a0 if t1 == t0 else a0 + (a1 - a0) * (seconds - t0) / (t1 - t0)
    return pts[0][1]  # a single evaluation, at exactly ``seconds``


def checkpoints(minutes: float, eval_every: float) -> list[float]:
    """The table's checkpoint seconds: every ``eval_every`` s strictly inside the budget (the
    end has its own column)."""
    budget, out, i = 60 * minutes, [], 1
    while eval_every * i < budget - 1e-9:
        out.append(eval_every * i)
        i += 1
    return out


def leg_numbers(r: dict, ticks: list[float], target: float) -> dict:
    """One leg of one seed: rates, staleness, accuracy before, at each checkpoint
    (interpolated) and at the end, and the interpolated time to ``target``."""
    wall = max(r["wall_seconds"], 1e-9)
    return {"updates_per_minute": 60 * r["updates"] / wall,
            "samples_per_minute": 60 * r["samples_generated"] / wall,
            "staleness_mean": r.get("staleness_mean"), "staleness_max": r.get("staleness_max"),
            "accuracy_before": r["accuracy_before"],
            "accuracy_at": {f"{t:g}": accuracy_at(r["evals"], t) for t in ticks},
            "accuracy_after": r["accuracy_after"],
            "time_to_target": time_to_target(r["evals"], target)}


# ---------------------------------------------------------------- over seeds
def legs_of(runs: dict) -> list[str]:
    """The legs present in ``runs`` (``{seed: {leg: result}}``), in the order of :data:`LEGS`."""
    return [leg for leg in LEGS if any(leg in by_leg for by_leg in runs.values())]


def aggregate(runs: dict, ticks: list[float], target: float) -> dict:
    """Per leg, the :func:`~tba_lab.lab.experiments.common.spread` over seeds of every number
    of :func:`leg_numbers`; ``staleness_max`` is the largest over seeds, ``seeds`` how many
    seeds ran the leg; ``time_to_target``'s ``n`` counts the seeds that reached the target."""
    out = {}
    for leg in legs_of(runs):
        nums = [leg_numbers(by_leg[leg], ticks, target) for by_leg in runs.values() if leg in by_leg]
        agg = {k: spread(n[k] for n in nums) for k in ("updates_per_minute", "samples_per_minute",
                                                      "staleness_mean", "accuracy_before",
                                                      "accuracy_after", "time_to_target")}
        agg["accuracy_at"] = {f"{t:g}": spread(n["accuracy_at"][f"{t:g}"] for n in nums) for t in ticks}
        maxes = [n["staleness_max"] for n in nums if n["staleness_max"] is not None]
        agg["staleness_max"] = max(maxes) if maxes else None
        agg["seeds"] = len(nums)
        out[leg] = agg
    return out


def ratio_numbers(runs: dict) -> dict:
    """``{"c/b": {"updates_per_minute": spread, "samples_per_minute": spread}, ...}``: each
    ratio taken per seed (legs of one seed; None where the denominator made no update), then
    spread over the seeds."""
    rate = lambda r, k: 60 * r[k] / max(r["wall_seconds"], 1e-9)  # noqa: E731
    out = {}
    for num, den, _ in RATIOS:
        pairs = [(by_leg[num], by_leg[den]) for by_leg in runs.values()
                 if num in by_leg and den in by_leg]
        if pairs:
            out[f"{num}/{den}"] = {
                f"{k}_per_minute": spread(rate(a, kk) / rate(b, kk) if b[kk] else None
                                          for a, b in pairs)
                for k, kk in (("updates", "updates"), ("samples", "samples_generated"))}
    return out


def goal(agg: dict, ticks: list[float]) -> dict:
    """The goal on the means over seeds: (c) at or above (b) at every checkpoint and the end
    (``c_at_or_above_b``), and (c) the fastest of legs a-e to the target in every seed
    (``c_fastest_to_target``; a leg that missed it in some seed counts as slower). ``met`` is
    both; each is None without legs (b) and (c). ``c_minus_b`` gives the differences."""
    if "b" not in agg or "c" not in agg:
        return {"c_at_or_above_b": None, "c_fastest_to_target": None, "met": None, "c_minus_b": {}}
    cols = [(f"{t:g}", agg["b"]["accuracy_at"][f"{t:g}"], agg["c"]["accuracy_at"][f"{t:g}"])
            for t in ticks]
    cols.append(("end", agg["b"]["accuracy_after"], agg["c"]["accuracy_after"]))
    diff = {k: (None if b["mean"] is None or c["mean"] is None else c["mean"] - b["mean"])
            for k, b, c in cols}
    above = all(d is not None and d >= -1e-9 for d in diff.values())

    def full_mean(leg):  # mean time to target, None unless reached in every seed
        s = agg[leg]["time_to_target"]
        return s["mean"] if s["n"] == agg[leg]["seeds"] else None

    c_time = full_mean("c")
    fastest = c_time is not None and all(full_mean(leg) is None or c_time <= full_mean(leg) + 1e-9
                                         for leg in agg)
    return {"c_at_or_above_b": above, "c_fastest_to_target": fastest, "met": above and fastest,
            "c_minus_b": diff}


# ---------------------------------------------------------------- the report
def _cell(s: dict, fmt, several: bool, unit: str = "") -> str:
    """A :func:`spread` as ``mean`` or, with several seeds, ``mean (min-max)``; "-" if empty."""
    if s is None or not s["n"]:
        return "-"
    text = fmt(s["mean"]) + unit
    return text + (f" ({fmt(s['min'])}-{fmt(s['max'])})" if several else "")


def race_table(runs: dict, minutes: float, eval_every: float, target: float) -> str:
    """The race table in Markdown: per leg the mean over seeds (min-max with several), accuracy
    at the checkpoints and time to target interpolated; a note line below says so."""
    ticks = checkpoints(minutes, eval_every)
    agg = aggregate(runs, ticks, target)
    several = len(runs) > 1
    p1 = lambda a: f"{100 * a:.1f}"  # noqa: E731
    head = (["leg", "updates/min", "samples/min", "staleness mean/max", "acc before"]
            + [f"acc @{t:g}s (interp.)" for t in ticks]
            + ["acc end", f"time to {100 * target:.0f}% (interp.)"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for leg, a in agg.items():
        stale = ("-" if not a["staleness_mean"]["n"]
                 else f"{_cell(a['staleness_mean'], lambda v: f'{v:.1f}', several)}/{a['staleness_max']}")
        ttt = _cell(a["time_to_target"], lambda v: f"{v:.0f}", several, " s")
        if a["time_to_target"]["n"] and a["time_to_target"]["n"] < a["seeds"]:
            ttt += f" [{a['time_to_target']['n']}/{a['seeds']} seeds]"
        cells = ([f"({leg}) {LEGS[leg][0]}",
                  _cell(a["updates_per_minute"], lambda v: f"{v:.1f}", several),
                  _cell(a["samples_per_minute"], lambda v: f"{v:,.0f}", several),
                  stale, _cell(a["accuracy_before"], p1, several, "%")]
                 + [_cell(a["accuracy_at"][f"{t:g}"], p1, several, "%") for t in ticks]
                 + [_cell(a["accuracy_after"], p1, several, "%"), ttt])
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
    """The ratios of :data:`RATIOS` (updates and samples per minute), one line each."""
    several = len(runs) > 1
    fmt = lambda s: _cell(s, lambda v: f"{v:.2f}", several, "x")  # noqa: E731
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
    word = lambda ok: "PASS" if ok else "FAIL"  # noqa: E731
    below = [k if k == "end" else f"{k}s" for k, d in g["c_minus_b"].items()
             if d is None or d < -1e-9]
    fastest = min((leg for leg in agg if agg[leg]["time_to_target"]["n"] == agg[leg]["seeds"]),
                  key=lambda leg: agg[leg]["time_to_target"]["mean"], default=None)
    fast = "no leg reached it in every seed" if fastest is None else (
        f"fastest ({fastest}) {agg[fastest]['time_to_target']['mean']:.0f} s")
    return (f"goal (means over seeds): {word(g['met'])}. (c) async TBA at or above (b) sync TB at "
            f"every checkpoint and the end: {word(g['c_at_or_above_b'])}"
            + (f" (below at {', '.join(below)})" if below else "")
            + f"; (c) the fastest to {100 * target:.0f}%: {word(g['c_fastest_to_target'])} ({fast})")


def updates_table(runs: dict, steps=(20, 40, 60, 80, 100, 120)) -> str:
    """Accuracy at equal trainer updates: per leg, accuracy interpolated linearly at each of
    ``steps`` updates (by the evaluations' ``step``), mean over the seeds that got there
    (min-max), ``[n/N seeds]`` when not all did: what an update of each leg was worth."""
    several = len(runs) > 1
    lines = ["| leg | " + " | ".join(f"acc @{n} updates" for n in steps) + " |",
             "|" + "---|" * (len(steps) + 1)]
    for leg in legs_of(runs):
        rows = [by_leg[leg] for by_leg in runs.values() if leg in by_leg]
        cells = []
        for n in steps:
            st = spread(accuracy_at([{"wall_seconds": e["step"], "accuracy": e["accuracy"]}
                                     for e in r["evals"]], n) for r in rows)
            cell = _cell(st, lambda v: f"{100 * v:.1f}", several, "%")
            cells.append(cell + (f" [{st['n']}/{len(rows)} seeds]" if 0 < st["n"] < len(rows) else ""))
        lines.append(f"| ({leg}) {LEGS[leg][0]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def curve_points(runs: dict, leg: str, minutes: float, eval_every: float) -> tuple[list, list, list, list]:
    """race.png's line for ``leg``: seconds, and the mean, min and max over seeds of the
    interpolated accuracy there (every few seconds, each checkpoint, and the end)."""
    budget = 60 * minutes
    step = min(5.0, eval_every / 3)
    grid = sorted({round(step * i, 6) for i in range(int(budget / step) + 1) if step * i < budget}
                  | set(checkpoints(minutes, eval_every)))
    xs, mean, lo, hi = [], [], [], []
    legs = [by_leg[leg] for by_leg in runs.values() if leg in by_leg]
    for t in grid + [budget]:
        s = spread(r["accuracy_after"] if t == budget else accuracy_at(r["evals"], t) for r in legs)
        if s["n"]:
            xs.append(t)
            mean.append(s["mean"])
            lo.append(s["min"])
            hi.append(s["max"])
    return xs, mean, lo, hi


def plot(runs: dict, minutes: float, eval_every: float):
    """race.png: per leg the interpolated held-out accuracy against seconds (mean over seeds,
    min-max band, dots at the checkpoints and the end), and updates per minute (mean bar,
    min-max whisker). Returns the Figure."""
    plt = pyplot()
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
        ax2.bar(i, u["mean"], color=color, capsize=4,
                yerr=[[u["mean"] - u["min"]], [u["max"] - u["mean"]]] if n > 1 else None)
    seeds = f"mean over {n} seeds, band min-max" if n > 1 else "one seed"
    ax1.set(xlabel="training wall-clock (s)", ylabel="held-out greedy accuracy (%)",
            title=f"Accuracy, interpolated between evaluations ({seeds})")
    ax1.legend(fontsize=8, loc="lower right")
    ax2.set_xticks(range(len(agg)), [f"({leg})\n{LEGS[leg][0]}" for leg in agg], fontsize=8)
    ax2.set(ylabel="trainer updates per minute",
            title="Update rate" + (", mean and min-max" if n > 1 else ""))
    for ax in (ax1, ax2):
        ax.title.set_fontsize(10)
        ax.grid(alpha=0.3)
    return fig


# ---------------------------------------------------------------- the claims
def claims(runs: dict, target: float, eval_every: float) -> list[dict]:
    """The race's claims (module docstring) from legs (c) async TBA and (b) sync TB paired by
    seed; ``[]`` without both legs.

    Args:
        runs: ``{seed: {leg: row}}`` (:func:`by_seed`, or a ``race.json``'s ``runs``); a row
            has ``updates``, ``wall_seconds`` (s) and ``evals`` (rows with ``wall_seconds`` and
            ``accuracy``).
        target: the accuracy of the time to target, a fraction.
        eval_every: seconds between evaluations, the smallest time difference of interest.

    Returns:
        two :func:`paper_claim` dicts: updates per minute of (c) relative to (b) (percent), and
        (c)'s time to ``target`` minus (b)'s (seconds; a seed where either never reached it is
        missing).
    """
    legs = {s: by_leg for s, by_leg in runs.items() if "b" in by_leg and "c" in by_leg}
    if not legs:
        return []
    upm = {leg: {s: 60 * r[leg]["updates"] / max(r[leg]["wall_seconds"], 1e-9) if r[leg]["updates"]
                 else None for s, r in legs.items()} for leg in "bc"}
    ttt = {leg: {s: time_to_target(r[leg]["evals"], target) for s, r in legs.items()}
           for leg in "bc"}
    return [
        paper_claim("race.updates_per_minute", "Async TBA makes more trainer updates per minute "
                    "than sync TB", PAPER_SPEED, "mean over seeds of (c) async TBA's updates/min "
                    "over (b) sync TB's minus 1, same seed, same wall-clock budget",
                    paired(upm["c"], upm["b"], lambda c, b: c / b - 1), +1, RATE_DELTA,
                    "% relative to sync TB", scale=100.0),
        paper_claim("race.time_to_target", f"Async TBA reaches {pct(target, 0)} held-out "
                    f"accuracy sooner than sync TB", PAPER_SPEED, f"mean over seeds of (c)'s "
                    f"time to {pct(target, 0)} minus (b)'s, interpolated between evaluations",
                    paired(ttt["c"], ttt["b"]), -1, float(eval_every), "s", scale=1.0, digits=0,
                    missing_reason=f"async TBA or sync TB never reached {pct(target, 0)} within "
                                   f"the budget"),
    ]


LEGACY_FILE = "race.json"  # what the race script wrote before `race` became a preset


def legacy_claims(folder: str | Path) -> dict:
    """The claims of a race stored as ``folder/race.json`` (written before ``race`` became a
    preset of ``tba-lab experiment``; ``rewrite_report`` cannot read it): its ``runs`` are
    already ``{seed: {leg: row}}`` with the rows :func:`claims` reads, so they go in unchanged.

    Returns:
        ``{"source", "header", "settings", "claims"}``.

    Raises:
        FileNotFoundError: no ``race.json`` in ``folder``.
    """
    import json

    data = json.loads((Path(folder) / LEGACY_FILE).read_text())
    s = data["settings"]
    return {"source": LEGACY_FILE, "header": data["header"], "settings": s,
            "claims": claims(data["runs"], s["target"], s["eval_every"])}


def write_legacy_claims(folder: str | Path, result: dict | None = None) -> Path:
    """Write ``claims.json`` and ``claims.md`` into ``folder`` from ``result`` (a
    :func:`legacy_claims`-shaped dict; default: :func:`legacy_claims` of ``folder``), beside
    the files they are computed from; returns the path of ``claims.json``. Run again after a
    change to the claims: ``python -c "from tba_lab.lab.experiments import race;
    race.write_legacy_claims('docs/results/race')"`` (``race_tasks.write_legacy_claims`` for a
    task race)."""
    import json

    folder = Path(folder)
    result = legacy_claims(folder) if result is None else result
    data = {**result, "verdict_rule": VERDICT_RULE,
            "note": f"computed from the per-seed runs stored in {result['source']}; no run "
                    f"repeated"}
    (folder / "claims.json").write_text(json.dumps(data, indent=1) + "\n")
    lines = [f"# The claims of `{result['source']}`", "", result["header"], "",
             f"Computed from the per-seed runs stored in `{result['source']}` (no run repeated), "
             f"each leg paired with the other leg of the same seed.", ""]
    (folder / "claims.md").write_text("\n".join(lines + [f"- {x}" for x in
                                                        claim_lines(result["claims"])]) + "\n")
    return folder / "claims.json"


# ---------------------------------------------------------------- the experiment's hooks
def by_seed(runs: list[dict]) -> dict:
    """``{seed: {leg: row}}`` from ``results.json``'s run rows, in run order."""
    out: dict = {}
    for r in runs:
        out.setdefault(r["seed"], {})[r["variant"]] = {
            k: r[k] for k in ("updates", "samples_generated", "wall_seconds", "accuracy_before",
                              "accuracy_after", "staleness_mean", "staleness_max", "evals")}
    return out


def analyse(runs: list[dict], s: dict) -> dict:
    legs = by_seed(runs)
    ticks = checkpoints(s["minutes"], s["eval_every"])
    agg = aggregate(legs, ticks, s["target"])
    return {"runs": legs, "minutes": s["minutes"], "eval_every": s["eval_every"],
            "target": s["target"], "checkpoints": ticks, "legs": agg,
            "ratios": ratio_numbers(legs), "goal": goal(agg, ticks),
            "claims": claims(legs, s["target"], s["eval_every"])}


def readings(a: dict) -> list[str]:
    """Accuracy at the end and time to target per leg, the ratios of rates, the claims with
    their intervals and verdicts (:func:`claim_lines`), and the goal."""
    agg, target = a["legs"], a["target"]
    sec = lambda v: f"{v:.0f} s"  # noqa: E731
    out = [f"Held-out accuracy at the end of the {a['minutes']:g}-min budget: " + "; ".join(
        f"({leg}) {LEGS[leg][0]} {rng(x['accuracy_after'])}" for leg, x in agg.items()) + "."]
    out.append(f"Time to {pct(target, 0)} (interpolated): " + "; ".join(
        f"({leg}) {rng({**x['time_to_target'], 'missing': 0}, sec)} in {x['time_to_target']['n']} "
        f"of {x['seeds']} seeds" if x["time_to_target"]["n"] else f"({leg}) not reached"
        for leg, x in agg.items()) + ".")
    out += ratios(a["runs"]).splitlines()
    out += claim_lines(a.get("claims", []))
    return out + [goal_line(a["goal"], agg, target)]


def table(a: dict) -> list[str]:
    return [*race_table(a["runs"], a["minutes"], a["eval_every"], a["target"]).splitlines(), "",
            "At equal trainer updates (interpolated by update count):", "",
            *updates_table(a["runs"]).splitlines()]


def figures(a: dict, out: Path) -> list[tuple[str, str]]:
    return save_figure(plot(a["runs"], a["minutes"], a["eval_every"]), out, "race.png",
                       "Held-out accuracy against training seconds per leg (interpolated between "
                       "evaluations, mean over seeds, band from the lowest to the highest seed), "
                       "and trainer updates per minute.")
