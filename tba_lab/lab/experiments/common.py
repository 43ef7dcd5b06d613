"""What the presets and the sweep runner share: one training run, spreads over seeds, the claim
test and its verdict rule, time to a target, and the report's files.

Every run goes through the real trainer (:func:`tba_lab.trainer.train`), checkpoints off; its
numbers are read back from the files it wrote, so a report shows what the run wrote.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
from pathlib import Path

from tba_lab.actors.placement import available_cores
from tba_lab.runlog import time_to_target  # noqa: F401  (presets, notebook 07)
from tba_lab.runlog import write_text_atomic

PAPER = "TBA (Bartoldson et al., arXiv 2503.18929)"

# Costs on 2 cores for the estimate printed before a sweep: about 8 s of start-up per run and
# 115 updates per minute (async TBA, one searcher, docs/results/race/); SMOKE runs pay mostly
# the start-up.
UPDATES_PER_MINUTE = 115.0
RUN_OVERHEAD_SECONDS = 8.0
SMOKE_RUN_SECONDS = 7.0
FULL_UPDATES = 64  # updates per run at equal updates: `tba-lab experiment all` in about an hour
# Smallest effects of interest: 3 points of accuracy (about one 200-problem evaluation's
# standard error, and the smallest loss of a baseline in TBA's Table 1); 10% of a rate (a
# searcher costs a core, so a smaller speed-up is not worth one).
GAIN_DELTA = 0.03
RATE_DELTA = 0.10


class ExperimentError(ValueError):
    """Bad input to an experiment (name, seeds, settings); the message names the option and the fix."""


# ---------------------------------------------------------------------------------- numbers
def spread(values) -> dict:
    """``{"mean", "min", "max", "n", "missing"}`` of per-seed values; None entries (e.g. a
    target never reached) are left out and counted in ``missing``."""
    values = list(values)
    nums = [float(v) for v in values if v is not None]
    return {"mean": sum(nums) / len(nums) if nums else None, "min": min(nums, default=None),
            "max": max(nums, default=None), "n": len(nums), "missing": len(values) - len(nums)}


def binomial_se_points(p: float, n: int) -> float:
    """Standard error of an accuracy p on n problems, in points: 100 * sqrt(p (1 - p) / n)."""
    return 100.0 * math.sqrt(max(p * (1.0 - p), 0.0) / max(n, 1))


VERDICTS = ("supported", "contradicted", "negligible", "inconclusive", "not testable here")
MIN_SEEDS = 3  # fewer seeds give no verdict (two seeds' t-interval spans +-12.7 SD)

VERDICT_RULE = (
    "Verdict rule, fixed in each experiment's design commit before its runs: first the premise, "
    "the condition under which the run can test the claim (e.g. the baseline's own drop reaches "
    "delta; each searcher has a core of its own), checked on the run's own data; if it is not "
    "met the verdict is *not testable here* and the report says what a test would need. Else "
    "the estimate is the mean over seeds of the paired per-seed difference, with a 95% "
    "t-interval over seeds; with fewer than 3 seeds, or with no spread between the seeds' "
    "differences, no verdict is given (*inconclusive*). With delta the smallest effect of "
    "interest, the same on both sides: *negligible*: the interval lies wholly within +-delta "
    "(any effect, of either sign, is smaller than matters); *supported*: wholly on the side of "
    "0 the claim predicts, and not negligible; *contradicted*: wholly on the other side, and not "
    "negligible; *inconclusive*: anything else. A claim of no change (a checkout or a one-file "
    "copy that should learn as the library does; an accuracy that should hold as asynchrony "
    "grows) is *supported* when the interval lies wholly within +-delta, *contradicted* when "
    "wholly outside it. A seed without a value is named in the report. The minimal detectable "
    "effect is the true effect this many seeds would find with 80% power in a two-sided 5% "
    "test: (t(0.975, n-1) + t(0.8, n-1)) x SD / sqrt(n); a verdict other than negligible can "
    "stand with it above delta (the observed effect was large enough), but then an interval "
    "across 0 says little.")


def premise(condition: str, met: bool, observed: str, needs: str = "") -> dict:
    """What a claim needs of its run before its estimand is read: ``condition`` (words),
    whether the run ``met`` it (from its own data), what it ``observed`` and what a test
    would ``needs`` where it was not met."""
    return {"condition": condition, "met": bool(met), "observed": observed, "needs": needs}


def mean_interval(values) -> dict:
    """``{"mean", "sd", "ci_low", "ci_high", "n"}`` of the non-None ``values``: the mean and
    its 95% t-interval over them (Student's t, n - 1 degrees of freedom); no SD or interval
    (None) under two values."""
    from scipy import stats

    xs = [float(v) for v in values if v is not None]
    n = len(xs)
    mean = sum(xs) / n if n else None
    if n < 2:
        return {"mean": mean, "sd": None, "ci_low": None, "ci_high": None, "n": n}
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return {"mean": mean, "sd": sd, "ci_low": mean - half, "ci_high": mean + half, "n": n}


def claim_test(claim: str, diffs, direction: int, delta: float, unit: str = "points",
               scale: float = 1.0, premise_met: bool = True) -> dict:
    """The verdict on one claim from its per-seed paired differences, by :data:`VERDICT_RULE`
    (the one-sample t-test on paired differences).

    ``diffs``: treatment minus control per seed (None entries left out and counted);
    ``direction``: +1 or -1 (the sign the claim predicts) or 0 (no change larger than
    ``delta``, the smallest effect of interest, the same on both sides); ``scale`` multiplies
    the estimate, interval and delta (100: fractions to points); ``premise_met`` False gives
    "not testable here" whatever the numbers. Returns ``{"claim", "estimate", "ci_low",
    "ci_high", "min_detectable_effect", "delta", "verdict", "reason", "n", "missing", "unit",
    "direction"}``: no interval with fewer than two seeds; "inconclusive" with fewer than
    :data:`MIN_SEEDS` or no spread (``reason`` says which).

    Raises:
        ValueError: ``direction`` not +1, -1 or 0, ``delta`` not > 0, or a non-finite difference.
    """
    from scipy import stats

    if direction not in (1, -1, 0):
        raise ValueError(f"direction={direction}: give +1 (claim predicts a rise), -1 (a fall) "
                         f"or 0 (no change larger than delta)")
    if not delta > 0:
        raise ValueError(f"delta={delta}: the smallest effect of interest must be > 0")
    values = list(diffs)
    xs = [float(v) for v in values if v is not None]
    if any(not math.isfinite(x) for x in xs):
        raise ValueError(f"diffs={values}: a difference is NaN or infinite")
    out = {"claim": claim, "estimate": None, "ci_low": None, "ci_high": None,
           "min_detectable_effect": None, "delta": delta * scale, "verdict": "inconclusive",
           "reason": "", "n": len(xs), "missing": len(values) - len(xs), "unit": unit,
           "direction": direction}
    m = mean_interval(xs)
    n, mean, sd, lo, hi = m["n"], m["mean"], m["sd"], m["ci_low"], m["ci_high"]
    if n:
        out["estimate"] = mean * scale
    if n > 1:
        t975, t80 = (float(stats.t.ppf(q, n - 1)) for q in (0.975, 0.8))
        out.update(ci_low=lo * scale, ci_high=hi * scale,
                   min_detectable_effect=(t975 + t80) * sd / math.sqrt(n) * scale)
    if not premise_met:
        out.update(verdict="not testable here", reason="the premise was not met")
    elif n < MIN_SEEDS:
        out["reason"] = f"{n} seed(s) with a value; a verdict needs {MIN_SEEDS} or more"
    elif sd <= 1e-12 * max(1.0, abs(mean)):
        out["reason"] = "every seed gave the same difference: no spread to measure the noise by"
    else:
        within = -delta < lo and hi < delta
        if direction == 0:  # a claim of no change: an equivalence margin of +-delta
            out["verdict"] = ("supported" if within else "contradicted"
                              if lo >= delta or hi <= -delta else "inconclusive")
        else:
            low, high = sorted((lo * direction, hi * direction))  # the predicted side positive
            out["verdict"] = ("negligible" if within else "supported" if low > 0 else
                              "contradicted" if high < 0 else "inconclusive")
    return out


def value_at(points: list[tuple[float, float]], x: float) -> float | None:
    """y at ``x`` on the polyline through ``points`` ``[(x, y)]`` in their order (a run's
    lags or evaluations): linear within the first segment whose ends span ``x``; None if none
    does. Reads a drop or a metric at a matched KL off a run's trajectory."""
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if min(x0, x1) <= x <= max(x0, x1):
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return None


def signed(v: float | None, digits: int = 1) -> str:
    """A number with its sign to ``digits`` decimals ("+1.5"), "n/a" for None; rounded first,
    so that a mean of -1e-17 prints as "+0.0", not "-0.0"."""
    return "n/a" if v is None else f"{round(v, digits) + 0.0:+.{digits}f}"


def claim_sentence(c: dict, digits: int = 1) -> str:
    """One report line of a :func:`paper_claim` result: the premise and whether it was met,
    the estimate, its interval and the verdict (with the reason where there is none)."""
    p = c.get("premise")
    head = c["claim"] + (f" Premise: {p['condition']}; {'met' if p['met'] else 'NOT met'} "
                         f"({p['observed']})." if p else "")
    if not (p is None or p["met"]):
        head += f" A test would need: {p['needs']}." if p.get("needs") else ""
    if c["estimate"] is None:
        return f"{head} No seed gave a value: **{c['verdict']}**."
    estimate = f"{head} Estimate {signed(c['estimate'], digits)} {c['unit']}"
    if c["ci_low"] is None:
        return f"{estimate} from one seed, no interval: **{c['verdict']}**."
    why = f" ({c['reason']})" if c.get("reason") and c["verdict"] == "inconclusive" else ""
    return (f"{estimate}, 95% interval {signed(c['ci_low'], digits)} to "
            f"{signed(c['ci_high'], digits)} over {c['n']} seeds; smallest effect this run could "
            f"detect {abs(c['min_detectable_effect']):.{digits}f}, smallest of interest "
            f"{c['delta']:.{digits}f}: **{c['verdict']}**{why}.")


def paper_claim(name: str, claim: str, paper: str, estimand: str, diffs: dict, direction: int,
                delta: float, unit: str, scale: float = 1.0, digits: int = 1,
                missing_reason: str = "", *, premise: dict) -> dict:
    """:func:`claim_test` of ``diffs`` (``{seed: difference or None}``) under ``premise`` (a
    :func:`premise` dict, checked first: not met gives "not testable here") plus what the
    report and notebook 07 print beside it: ``name`` (e.g. "race.time_to_target"),
    ``statement`` (``claim``), ``paper`` (its claim and setting), ``estimand``, ``premise``,
    ``digits``, the scaled ``diffs`` by seed, ``missing_seeds`` and ``missing_reason``."""
    c = claim_test(f"{claim} (paper: {paper}; estimand: {estimand}).", list(diffs.values()),
                   direction, delta, unit, scale, premise_met=premise["met"])
    return {**c, "name": name, "statement": claim, "paper": paper, "estimand": estimand,
            "premise": premise, "digits": digits,
            "diffs": {str(k): None if d is None else d * scale for k, d in diffs.items()},
            "missing_seeds": [str(k) for k, d in diffs.items() if d is None],
            "missing_reason": missing_reason}


def per_seed(runs: list[dict], variant: str, key) -> dict:
    """``{seed: value}`` of one variant's runs; ``key`` a row field or a function of the row."""
    get = key if callable(key) else (lambda r: r.get(key))
    return {r["seed"]: get(r) for r in runs if r["variant"] == variant}


def paired(runs: list[dict], treated: str, control: str, key, f=lambda t, c: t - c) -> dict:
    """``{seed: f(treated's value, control's value)}`` of two variants' runs (:func:`per_seed`
    of ``key``) over the seeds of either; None where a seed lacks one side or a value."""
    t, c = per_seed(runs, treated, key), per_seed(runs, control, key)
    return {s: None if t.get(s) is None or c.get(s) is None else f(t[s], c[s])
            for s in dict.fromkeys([*t, *c])}


def claim_lines(claims: list[dict]) -> list[str]:
    """One :func:`claim_sentence` per claim (naming the seeds left out and why), then
    :data:`VERDICT_RULE` once; nothing without claims."""
    out = [claim_sentence(c, c.get("digits", 1)) + (
        f" Left out: seed(s) {', '.join(map(str, c['missing_seeds']))} "
        f"({c['missing_reason'] or 'no value'})." if c.get("missing_seeds") else "")
        for c in claims]
    return out + [VERDICT_RULE] if out else out


def pct(x: float | None, digits: int = 1) -> str:
    """A fraction as a percentage ("41.5%"), "n/a" for None."""
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


def points(x: float | None) -> str:
    """A difference of fractions in signed percentage points ("+4.5"), "n/a" for None."""
    return "n/a" if x is None else f"{100 * x:+.1f}"


def fixed(digits: int):
    """A formatter of numbers with ``digits`` decimals (no "-0.000" for float noise)."""
    return lambda v: f"{round(v, digits) + 0.0:.{digits}f}"


def rng(s: dict, fmt=pct) -> str:
    """``mean (min to max)`` of a :func:`spread`, formatted by ``fmt``; notes missing seeds."""
    if s["n"] == 0:
        return f"no value in {s['missing']} seed(s)" if s.get("missing") else "n/a"
    text = fmt(s["mean"]) if s["n"] == 1 else f"{fmt(s['mean'])} ({fmt(s['min'])} to {fmt(s['max'])})"
    return text + (f", {s['missing']} of {s['n'] + s['missing']} missing" if s.get("missing") else "")


# ---------------------------------------------------------------------------------- running
def train_run(overrides: dict, run_dir: Path, seed: int) -> tuple[dict, list[dict]]:
    """One run of the real trainer with ``overrides`` (nested config data; ConfigError if
    invalid), checkpoints off; returns ``(summary, eval rows)``."""
    from tba_lab.config import from_dict, merge
    from tba_lab.runlog import read_jsonl_rows
    from tba_lab.trainer import train

    data = merge(overrides, {"output_dir": str(run_dir), "seed": int(seed),
                             "training": {"save_seconds": 0}})
    train(from_dict(data), progress=False)
    run_dir = Path(run_dir)
    (run_dir / "checkpoint.pt").unlink(missing_ok=True)  # for resuming only
    summary = json.loads((run_dir / "summary.json").read_text())
    return summary, read_jsonl_rows(run_dir / "eval.jsonl")


def load_run_policy(run_dir: Path):
    """The final policy of a finished run, ready to sample: ``(cfg, policy, reference_path,
    backend, task, held_out)``; ``policy`` is in eval mode and ``backend`` wraps it."""
    from tba_lab.config import load_yaml
    from tba_lab.models import load_policy
    from tba_lab.rollout.backend import make_backend
    from tba_lab.tasks import make_task

    cfg = load_yaml(Path(run_dir) / "config.yaml")
    policy, tokenizer = load_policy(Path(run_dir) / "policy")
    policy.eval()
    task = make_task(cfg)
    return cfg, policy, cfg.model.path, make_backend(cfg, policy, tokenizer), task, task.load("test")


@contextlib.contextmanager
def one_thread():
    """torch on one thread inside the block: sampling the tiny model is many small steps, and
    on a busy 2-core machine two threads mostly wait for each other."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_seconds(s: dict, smoke: bool) -> float:
    """Planned seconds of one run on 2 cores: its budget (``minutes``, None: 9;
    ``train_seconds``) or updates (``updates``, ``max_steps``), start-up and evaluations."""
    if "minutes" in s or "train_seconds" in s:
        budget = 60 * (s.get("minutes") or 9.0) if "minutes" in s else s["train_seconds"]
    elif "updates" in s:
        budget = s["updates"] * s["prompts"] * s["generations"] / 128
    else:
        budget = 60 * s["max_steps"] / UPDATES_PER_MINUTE
    every = s.get("eval_every") or 0
    n_evals = 2 + int((s["updates"] if "updates" in s else budget) // every if every else 0)
    start = SMOKE_RUN_SECONDS if smoke else RUN_OVERHEAD_SECONDS
    return start + budget + n_evals * (s.get("eval_size") or 500) * 0.003


def check_seeds(seeds) -> list[int]:
    """The seeds as distinct ints. Raises :class:`ExperimentError` naming ``--seeds``."""
    from tba_lab.config import SEED_MAX

    seeds = list(seeds)
    if not seeds:
        raise ExperimentError("seeds is empty: give at least one seed, e.g. --seeds 0 1 2 "
                              "(three or more for a spread)")
    if any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise ExperimentError(f"--seeds {seeds}: seeds must be integers")
    if any(not 0 <= s <= SEED_MAX for s in seeds):
        raise ExperimentError(f"--seeds {seeds}: each seed must be from 0 to {SEED_MAX}")
    if len(set(seeds)) != len(seeds):
        raise ExperimentError(f"--seeds {seeds}: a seed is repeated; give each seed once")
    return seeds


def core_overrides(s: dict) -> dict:
    """The config a sweep's runs share, from its settings (``max_steps`` 0: time only;
    ``eval_every`` 0: no interim evaluations)."""
    return {"max_minutes": float(s["max_minutes"]),
            "training": {"max_steps": int(s.get("max_steps", 0)),
                         "num_prompts_per_step": int(s["prompts"]),
                         "num_generations": int(s["generations"])},
            "buffer": {"initial_fill": int(s["initial_fill"])},
            "task": {"eval_size": int(s["eval_size"]), "interim_eval_size": int(s["eval_size"]),
                     "eval_every_seconds": float(s.get("eval_every", 0))}}


def sized(smoke: bool, **values) -> dict:
    """A preset's settings from ``KEY=(SMOKE value, full value)`` pairs side by side; any other
    value is the same in both."""
    return {k: v[0 if smoke else 1] if isinstance(v, tuple) else v for k, v in values.items()}


# Batch and fill: SMOKE's (B = 8 x K = 4, 32 rollouts) or the kit's defaults (16 x 8, 256)
BATCH = {"prompts": (8, 16), "generations": (4, 8), "initial_fill": (32, 256)}


def held_out(summary: dict) -> dict:
    """A run's held-out ``metrics`` (the headline first, default accuracy), each ``before``
    and ``after`` training, and the headline's ``gain`` (None where either is missing)."""
    metrics = list(summary.get("held_out_metrics") or ["accuracy"])
    before, after = ({m: summary.get(f"{m}_{when}") for m in metrics}
                     for when in ("before", "after"))
    first, last = before[metrics[0]], after[metrics[0]]
    return {"metrics": metrics, "before": before, "after": after,
            "gain": None if None in (first, last) else last - first}


def basic_numbers(summary: dict, s: dict) -> dict:
    """What every run reports from its ``summary.json`` (the runner adds it to every row):
    :func:`held_out`, accuracy before and after, staleness, updates, rates per minute, and
    whether the time cap cut it short (``capped``)."""
    wall = float(summary.get("wall_seconds") or 0.0)
    steps = int(summary.get("trainer_steps") or 0)
    return {**held_out(summary), **{k: summary.get(k) for k in (
                "accuracy_before", "accuracy_after", "staleness_mean", "staleness_max",
                "updates_per_minute", "samples_generated", "samples_trained")},
            "trainer_steps": steps, "wall_seconds": wall,
            "samples_per_minute": 60.0 * summary.get("samples_generated", 0) / wall if wall else None,
            "capped": bool(s.get("max_steps")) and steps < int(s["max_steps"])}


# ---------------------------------------------------------------------------------- reports
def header(name: str, title: str, claim: str, seeds: list[int], smoke: bool, settings: dict,
           started: str, seconds: float, n_runs: int, estimate: float,
           config: dict | None = None, cores: tuple | None = None, note: str = "") -> list[str]:
    """The report's first lines: title, claim, date, ``cores`` (recorded ``(os.cpu_count(),
    available_cores())``, default this machine's), seeds, settings, ``--config``'s fields and
    a ``note`` on how the runs were made where they were not one sweep."""
    cpu, usable = cores if cores and None not in cores else (os.cpu_count(), available_cores())
    shown = ", ".join(f"{k} = {v}" for k, v in settings.items())
    given = [f"| run config (`--config`, every run) | `{json.dumps(config)}` |"] if config else []
    return [f"# {title}{' (SMOKE)' if smoke else ''}", "", f"Paper: {claim}", "",
            "| | |", "|---|---|",
            f"| experiment | `tba-lab experiment {name}{' --smoke' if smoke else ''}` |",
            f"| started | {started} |", f"| cores (`os.cpu_count()`) | {cpu} |",
            f"| cores the runs may use (affinity and CPU quota) | {usable} |",
            f"| seeds | {' '.join(map(str, seeds))} |",
            f"| runs | {n_runs}, one after another, seed-major |",
            f"| wall clock | {seconds / 60:.1f} min (estimated before: {estimate / 60:.1f} min) |",
            f"| settings | {shown} |", *given, *([f"| note | {note} |"] if note else []), "",
            "Cells are the mean over seeds and the range (min to max).", ""]


def write_result(out: Path, result: dict) -> None:
    """``results.json`` (rewritten after every run, so a stopped sweep keeps its runs)."""
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "results.json", json.dumps(result, indent=1, default=float) + "\n")


def now() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")
