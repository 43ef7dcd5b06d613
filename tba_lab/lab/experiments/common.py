"""What the experiments and benchmarks share: one training run, spreads over seeds, time to a
target, the wording of generated readings, and the report files.

Every run goes through the real trainer (:func:`tba_lab.trainer.train`) with a config built by
:func:`tba_lab.config.from_dict`, one run at a time in this process, checkpoints off
(``training.save_seconds: 0``). Numbers are read back from the run's files
(``summary.json``, ``eval.jsonl``) so what the report shows is what the run wrote.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
from pathlib import Path

from tba_lab.actors.placement import available_cores

PAPER = "TBA (Bartoldson et al., arXiv 2503.18929)"

# Rough costs on a 2-core machine for the time estimate printed before a run. The 80-update
# runs of `off_policy` on 2026-12-02 (its first design; docs/log.md, with the replay bound
# and the reference pass in the trainer) took 49 s each on average: about 8 s of start-up
# (spawning the searcher, loading the models, the evaluations before and after, saving) and
# 80 updates at about 115 per minute, the rate of async TBA with one searcher in the race of
# 2026-12-01T22:16 (117). SMOKE runs (B = 8 x K = 4) pay mostly the start-up.
UPDATES_PER_MINUTE = 115.0
RUN_OVERHEAD_SECONDS = 8.0
# Trainer updates per run of the experiments that compare at equal updates (off_policy,
# buffer, beta): 64 keeps `tba-lab experiment all` within an hour on 2 cores at the rate above.
FULL_UPDATES = 64
SMOKE_RUN_SECONDS = 7.0
SMOKE_TRAINING = {"num_prompts_per_step": 8, "num_generations": 4}
SMOKE_BUFFER = {"initial_fill": 32}


class ExperimentError(ValueError):
    """Bad input to an experiment (name, seeds, settings); the message names the option and the fix."""


# ---------------------------------------------------------------------------------- numbers
def spread(values) -> dict:
    """Mean and range of per-seed values; None entries (e.g. a target never reached) are left
    out and counted.

    Returns:
        ``{"mean", "min", "max", "n"}`` over the numbers (mean/min/max None when there are
        none) plus ``"missing"``, the count of None entries.
    """
    values = list(values)
    nums = [float(v) for v in values if v is not None]
    missing = len(values) - len(nums)
    if not nums:
        return {"mean": None, "min": None, "max": None, "n": 0, "missing": missing}
    return {"mean": sum(nums) / len(nums), "min": min(nums), "max": max(nums), "n": len(nums),
            "missing": missing}


def separated(a: dict, b: dict) -> int:
    """+1 if the range of ``a`` lies wholly above that of ``b``, -1 if wholly below, 0 if the
    two ranges (min-max over seeds, :func:`spread`) overlap or either has fewer than two
    seeds (one seed shows no spread, so it cannot separate anything)."""
    if a["n"] < 2 or b["n"] < 2:
        return 0
    if a["min"] > b["max"]:
        return 1
    if a["max"] < b["min"]:
        return -1
    return 0


def binomial_se_points(p: float, n: int) -> float:
    """Standard error of an accuracy p measured on n problems, in percentage points:
    100 * sqrt(p (1 - p) / n)."""
    return 100.0 * math.sqrt(max(p * (1.0 - p), 0.0) / max(n, 1))


# Smallest effects of interest shared by the experiments: 3 points of accuracy (about one
# 200-problem evaluation's standard error, and the smallest loss of a baseline in TBA's Table 1);
# 10% of a rate (a searcher process costs a core, so a smaller speed-up is not worth one).
GAIN_DELTA = 0.03
RATE_DELTA = 0.10
VERDICT_RULE = (
    "Verdict rule, fixed before the numbers: the estimate is the mean over seeds of the paired "
    "per-seed difference, with a 95% t-interval over seeds. *supported*: the interval lies wholly "
    "on the side of 0 the claim predicts; *falsified*: it lies wholly on the other side, or "
    "wholly within +-delta (any effect is smaller than the smallest effect of interest, delta); "
    "*inconclusive*: anything else, or fewer than two seeds. A claim of no change (a checkout "
    "or a one-file copy that should learn as the library does) is *supported* when the "
    "interval lies wholly within +-delta, *falsified* when it lies wholly outside it. The "
    "minimal detectable effect is "
    "the true effect this many seeds would find with 80% power in a two-sided 5% test: "
    "(t(0.975, n-1) + t(0.8, n-1)) x SD / sqrt(n).")


def claim_test(claim: str, diffs, direction: int, delta: float, unit: str = "points",
               scale: float = 1.0) -> dict:
    """The verdict on one claim from its per-seed paired differences, by :data:`VERDICT_RULE`.

    Args:
        claim: what is claimed, in words (kept in the result).
        diffs: per-seed differences (treatment minus control, paired by seed), in the metric's
            own units (accuracy: a fraction); None entries (e.g. a target never reached) are
            left out and counted.
        direction: +1 if the claim predicts a positive difference, -1 a negative one, 0 no
            difference as large as ``delta`` (equivalence).
        delta: the smallest effect of interest, > 0, in the units of ``diffs``.
        unit: how the estimate is read, for the report ("points", "updates/min", ...).
        scale: the estimate and interval are multiplied by this (100 turns fractions into
            percentage points); ``delta`` is given in the units of ``diffs``.

    Returns:
        ``{"claim", "estimate", "ci_low", "ci_high", "min_detectable_effect", "delta",
        "verdict", "n", "missing", "unit", "direction"}``: the mean difference, its 95%
        t-interval over seeds and the minimal detectable effect (80% power), scaled; None
        where fewer than two seeds give no interval (verdict "inconclusive"). Formula: the
        one-sample t-test on paired differences (Student 1908; scipy.stats.t).

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
           "n": len(xs), "missing": len(values) - len(xs), "unit": unit, "direction": direction}
    if not xs:
        return out
    n, mean = len(xs), sum(xs) / len(xs)
    out["estimate"] = mean * scale
    if n < 2:
        return out
    se = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1) / n)
    half = float(stats.t.ppf(0.975, n - 1)) * se
    lo, hi = mean - half, mean + half
    mde = (float(stats.t.ppf(0.975, n - 1)) + float(stats.t.ppf(0.8, n - 1))) * se
    if direction == 0:  # a claim of no change: an equivalence margin of +-delta
        verdict = ("supported" if -delta < lo and hi < delta else
                   "falsified" if lo >= delta or hi <= -delta else "inconclusive")
    elif (lo > 0 and direction > 0) or (hi < 0 and direction < 0):
        verdict = "supported"
    elif (hi < 0 and direction > 0) or (lo > 0 and direction < 0) or (-delta < lo and hi < delta):
        verdict = "falsified"
    else:
        verdict = "inconclusive"
    out.update(ci_low=lo * scale, ci_high=hi * scale, min_detectable_effect=mde * scale,
               verdict=verdict)
    return out


def claim_sentence(c: dict, digits: int = 1) -> str:
    """One line for a report: the claim, estimate, 95% interval, minimal detectable effect and
    verdict of a :func:`claim_test` result."""
    def f(v):  # round first: a mean of -1e-17 is 0.0, not "-0.0"
        return "n/a" if v is None else f"{round(v, digits) + 0.0:+.{digits}f}"

    if c["estimate"] is None:
        return f"{c['claim']}: no seed gave a value, **inconclusive**."
    if c["ci_low"] is None:
        return (f"{c['claim']}: {f(c['estimate'])} {c['unit']} from one seed, no interval: "
                f"**inconclusive**.")
    return (f"{c['claim']}: {f(c['estimate'])} {c['unit']}, 95% interval {f(c['ci_low'])} to "
            f"{f(c['ci_high'])} over {c['n']} seeds; smallest effect this run could detect "
            f"{abs(c['min_detectable_effect']):.{digits}f}, smallest of interest "
            f"{c['delta']:.{digits}f}: **{c['verdict']}**.")


def paper_claim(name: str, claim: str, paper: str, estimand: str, diffs: dict, direction: int,
                delta: float, unit: str, scale: float = 1.0, digits: int = 1,
                missing_reason: str = "") -> dict:
    """:func:`~tba_lab.lab.experiments.common.claim_test` of one claim, with what the report and
    notebook 07 print beside it.

    Args:
        name: a short id ("race.updates_per_minute").
        claim: the claim in words; ``paper``: the paper's claim and setting (section, figure);
            ``estimand``: what the estimate is the mean of. The three make the ``claim`` text.
        diffs: ``{seed: per-seed paired difference or None}`` in the metric's own units (None:
            the seed gave none, e.g. a target never reached; left out and counted).
        direction, delta, unit, scale: as :func:`claim_test` (``delta`` in the units of diffs).
        digits: decimals the sentence prints.
        missing_reason: why a seed can have no difference, for the report.

    Returns:
        claim_test's dict plus ``name``, ``statement`` (``claim`` alone), ``paper``,
        ``estimand``, ``digits``, ``diffs`` (``{seed as str: scaled difference or None}``),
        ``missing_seeds`` (seeds as str) and ``missing_reason``.

    Raises:
        ValueError: as :func:`claim_test` (bad direction or delta, a non-finite difference).
    """
    c = claim_test(f"{claim} (paper: {paper}; estimand: {estimand})", list(diffs.values()),
                   direction, delta, unit, scale)
    return {**c, "name": name, "statement": claim, "paper": paper, "estimand": estimand,
            "digits": digits,
            "diffs": {str(k): None if d is None else d * scale for k, d in diffs.items()},
            "missing_seeds": [str(k) for k, d in diffs.items() if d is None],
            "missing_reason": missing_reason}


def paired(treated: dict, control: dict, f=lambda t, c: t - c) -> dict:
    """``{seed: f(treated[seed], control[seed])}`` over the seeds of either; None where a seed
    lacks one side or either value is None (``treated``, ``control``: ``{seed: value}``)."""
    seeds = list(dict.fromkeys([*treated, *control]))
    return {s: None if treated.get(s) is None or control.get(s) is None
            else f(treated[s], control[s]) for s in seeds}


def claim_lines(claims: list[dict]) -> list[str]:
    """The report's lines for ``claims``: one :func:`claim_sentence` each (naming the seeds left
    out and why), then :data:`VERDICT_RULE` once; nothing without claims."""
    out = []
    for c in claims:
        line = claim_sentence(c, c.get("digits", 1))
        if c.get("missing_seeds"):
            line += (f" Left out: seed(s) {', '.join(map(str, c['missing_seeds']))} "
                     f"({c['missing_reason'] or 'no value'}).")
        out.append(line)
    return out + [VERDICT_RULE] if out else out


def time_to_target(evals: list[dict], target: float, key: str = "accuracy") -> float | None:
    """Seconds of training until held-out ``key`` first reaches ``target``, by LINEAR
    INTERPOLATION between the two measured evaluations around the crossing; TBA, arXiv
    2503.18929, Sec. 4 compares methods by wall-clock time to an accuracy.

    Args:
        evals: ``eval.jsonl`` rows, each with ``wall_seconds`` (seconds since training began;
            the evaluation before training is at 0) and ``key``; sorted here by time.
        target: the level to reach, in the metric's units (accuracy: a fraction, 0.40).
        key: the metric.

    Returns:
        seconds (float), 0.0 when the first evaluation already reaches the target, or None
        when no evaluation reaches it.

    Raises:
        ValueError: ``evals`` is empty.
    """
    if not evals:
        raise ValueError("evals is empty: a run writes at least the evaluation before training")
    rows = sorted(evals, key=lambda e: e["wall_seconds"])
    if rows[0][key] >= target:
        return float(rows[0]["wall_seconds"])
    for prev, cur in zip(rows, rows[1:]):
        if cur[key] >= target:
            t0, t1, a0, a1 = prev["wall_seconds"], cur["wall_seconds"], prev[key], cur[key]
            return float(t0 + (target - a0) * (t1 - t0) / (a1 - a0))
    return None


# ---------------------------------------------------------------------------------- wording
def pct(x: float | None, digits: int = 1) -> str:
    """A fraction as a percentage ("41.5%"), "n/a" for None."""
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


def points(x: float | None, digits: int = 1) -> str:
    """A difference of fractions in signed percentage points ("+4.5"), "n/a" for None."""
    return "n/a" if x is None else f"{100 * x:+.{digits}f}"


def rng(s: dict, fmt=pct) -> str:
    """``mean (min to max)`` of a :func:`spread`, formatted by ``fmt``; notes missing seeds."""
    if s["n"] == 0:
        return "n/a"
    text = fmt(s["mean"]) if s["n"] == 1 else f"{fmt(s['mean'])} ({fmt(s['min'])} to {fmt(s['max'])})"
    return text + (f", {s['missing']} of {s['n'] + s['missing']} missing" if s.get("missing") else "")


def trend(xs: list, ys: list, tol: float = 0.0) -> str:
    """How ``ys`` moves as ``xs`` grows: "rises", "falls" (strictly monotone beyond ``tol``),
    "is flat" (all within ``tol`` of each other) or "has no monotone trend"."""
    pairs = [(x, y) for x, y in sorted(zip(xs, ys)) if y is not None]
    ys = [y for _, y in pairs]
    if len(ys) < 2 or max(ys) - min(ys) <= tol:
        return "is flat"
    steps = [b - a for a, b in zip(ys, ys[1:])]
    if all(d > tol for d in steps):
        return "rises"
    if all(d < -tol for d in steps):
        return "falls"
    return "has no monotone trend"


def change(before: float, after: float, fmt, what: str) -> str:
    """"raises WHAT", "lowers WHAT" or "leaves WHAT unchanged", judged on the values as ``fmt``
    prints them, so that two means of the same counts (equal but for float rounding) never read
    as a change."""
    if fmt(before) == fmt(after):
        return f"leaves {what} unchanged"
    return f"{'raises' if after > before else 'lowers'} {what}"


# ---------------------------------------------------------------------------------- running
def train_run(overrides: dict, run_dir: Path, seed: int) -> tuple[dict, list[dict]]:
    """One training run through the real trainer; returns ``(summary, eval rows)`` as the run
    wrote them (``summary.json``, ``eval.jsonl``).

    ``overrides`` is nested config data (as a YAML file); ``output_dir``, ``seed`` and
    ``training.save_seconds: 0`` are set here. ``checkpoint.pt`` (resume only, ~13 MB) is
    removed afterwards; ``policy/``, ``buffer.pt`` and the logs stay.

    Raises:
        tba_lab.config.ConfigError: the overrides make an invalid config (nothing runs).
    """
    from tba_lab.config import from_dict, merge
    from tba_lab.runlog import read_jsonl_rows
    from tba_lab.trainer import train

    data = merge(overrides, {"output_dir": str(run_dir), "seed": int(seed),
                             "training": {"save_seconds": 0}})
    train(from_dict(data), progress=False)
    run_dir = Path(run_dir)
    (run_dir / "checkpoint.pt").unlink(missing_ok=True)
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
    """torch on one thread inside the block (restored after). Sampling the tiny model is
    many small steps; on a 2-core machine that is busy, two threads spend more time waiting
    for each other than computing (as the kit's async processes, which also use one)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def check_seeds(seeds) -> list[int]:
    """The seeds as distinct ints. Raises :class:`ExperimentError` naming ``--seeds``."""
    seeds = list(seeds) if seeds is not None else []
    if not seeds:
        raise ExperimentError("seeds is empty: give at least one seed, e.g. --seeds 0 1 2 "
                              "(three or more for a spread)")
    if any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise ExperimentError(f"--seeds {seeds}: seeds must be integers")
    from tba_lab.config import SEED_MAX

    if any(not 0 <= s <= SEED_MAX for s in seeds):
        raise ExperimentError(f"--seeds {seeds}: each seed must be from 0 to {SEED_MAX}")
    if len(set(seeds)) != len(seeds):
        raise ExperimentError(f"--seeds {seeds}: a seed is repeated; give each seed once")
    return seeds


# ---------------------------------------------------------------------------------- reports
def pyplot():
    """matplotlib.pyplot, on the Agg backend unless a notebook's inline backend is active."""
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def errorbar(ax, xs, spreads: list[dict], scale: float = 100.0, **kw):
    """Means with min-max error bars (points with no value are skipped)."""
    pts = [(x, s) for x, s in zip(xs, spreads) if s["n"]]
    if not pts:
        return
    x = [p[0] for p in pts]
    mean = [scale * p[1]["mean"] for p in pts]
    lo = [scale * (p[1]["mean"] - p[1]["min"]) for p in pts]
    hi = [scale * (p[1]["max"] - p[1]["mean"]) for p in pts]
    ax.errorbar(x, mean, yerr=[lo, hi], capsize=4, marker="o", **kw)


def header(name: str, title: str, claim: str, seeds: list[int], smoke: bool, settings: dict,
           started: str, seconds: float, n_runs: int, estimate: float,
           config: dict | None = None, cores: tuple | None = None) -> list[str]:
    """The report's first lines: title, the paper's claim, date, cores, seeds, settings and
    the RunConfig fields every run got from ``--config`` (if any). ``cores``: the recorded
    ``(os.cpu_count(), available_cores())`` of the runs (default: this machine's now)."""
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
            f"| settings | {shown} |", *given, "",
            "Spreads are the mean over seeds and the range (min to max); ranges that do not "
            "overlap are called separated, overlapping ones within noise.", ""]


def save_figure(fig, out: Path, name: str, caption: str) -> list[tuple[str, str]]:
    """Lay out ``fig``, save it as ``out/name`` (110 dpi PNG) and close it; returns the
    experiment's figure list ``[(name, caption)]`` that its report embeds."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return [(name, caption)]


def write_result(out: Path, result: dict) -> None:
    """``results.json`` (rewritten after every run, so a stopped experiment keeps its runs)."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(result, indent=1, default=float) + "\n")
    tmp.replace(out / "results.json")


def write_report(out: Path, lines: list[str]) -> Path:
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def now() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")


def core_overrides(s: dict) -> dict:
    """The config every run of an experiment shares, from its settings: batch shape
    (``prompts``, ``generations``), ``initial_fill``, ``max_steps`` (0 = time only),
    ``max_minutes`` (time budget, or a safety cap when ``max_steps`` is set), held-out sizes
    (``eval_size``; interim evaluations every ``eval_every`` seconds, 0 = none)."""
    every = float(s.get("eval_every", 0))
    return {"max_minutes": float(s["max_minutes"]),
            "training": {"max_steps": int(s.get("max_steps", 0)),
                         "num_prompts_per_step": int(s["prompts"]),
                         "num_generations": int(s["generations"])},
            "buffer": {"initial_fill": int(s["initial_fill"])},
            "task": {"eval_size": int(s["eval_size"]), "interim_eval_size": int(s["eval_size"]),
                     "eval_every_seconds": every}}


def batch_settings(smoke: bool) -> dict:
    """Batch shape and fill: the kit's defaults (B = 16 x K = 8, 256 rollouts), or SMOKE's
    small ones (B = 8 x K = 4, one batch)."""
    if smoke:
        return {"prompts": SMOKE_TRAINING["num_prompts_per_step"],
                "generations": SMOKE_TRAINING["num_generations"],
                "initial_fill": SMOKE_BUFFER["initial_fill"]}
    return {"prompts": 16, "generations": 8, "initial_fill": 256}


def basic_numbers(summary: dict, s: dict) -> dict:
    """The numbers every run reports, from its ``summary.json``: accuracy before and after,
    gain, staleness, updates, rates, and whether the time cap cut it short of ``max_steps``."""
    before, after = summary.get("accuracy_before"), summary.get("accuracy_after")
    wall = float(summary.get("wall_seconds") or 0.0)
    steps = int(summary.get("trainer_steps") or 0)
    return {"accuracy_before": before, "accuracy_after": after,
            "gain": None if before is None or after is None else after - before,
            "staleness_mean": summary.get("staleness_mean"),
            "staleness_max": summary.get("staleness_max"),
            "trainer_steps": steps, "wall_seconds": wall,
            "updates_per_minute": summary.get("updates_per_minute"),
            "samples_per_minute": 60.0 * summary.get("samples_generated", 0) / wall if wall else None,
            "capped": bool(s.get("max_steps")) and steps < int(s["max_steps"])}
