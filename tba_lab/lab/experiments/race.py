"""Benchmarks ``race``, ``race_preference`` and ``race_redteam``: async TBA against its
baselines at equal wall clock. Every leg trains the task's embedded model for the same
``minutes`` with the same seed, learning rate, batch (B = 16 x K = 8), temperature and reward:

    (a) sync GRPO   (b) sync TB   (c) async TBA, one searcher (the kit's default)
    (d) async GRPO, on TBA's pipeline and so with its staleness
    (e) TRL's GRPOTrainer (``bench/trl_grpo.py``; needs the ``trl`` of the ``dev`` extra)
    (f) sync and (g) async online DPO (best against worst response of a group)
    (c2), (c3) async TBA with 2 and 3 searchers (``--set legs=c,a,f``: the sync baselines)

``race`` (arithmetic, legs a-e): held-out accuracy before training, every ``eval_every``
seconds and at the end (with ``defer_eval``, weight copies evaluated after the budget, so no
leg pauses). Claims, (c) against (b) paired by seed (paper: abstract and Fig. 1): (c)'s
updates per minute over (b)'s minus 1, predicted positive, smallest effect of interest 10%;
(c)'s time to ``target`` and to ``target_high`` minus (b)'s, predicted negative, smallest
effect one evaluation period (a seed where either leg never reaches the target is left out and
named). Premise: the trainer and the searcher of (c) each have a core of their own.

``race_preference`` (legs c, d, g) and ``race_redteam`` (also c2, c3), the trade-off of Sec. 5:
(c)'s metric at the end minus each baseline leg's, paired by seed, predicted positive: the win
rate (smallest effect 3 points, about one win rate's standard error on 200 prompts) and the
attack diversity (0.03, about a tenth of the starting attacker's).
"""
from __future__ import annotations

import importlib.util
import math
import types
from pathlib import Path

from tba_lab.config import merge
from tba_lab.lab.experiments.common import (BATCH, PAPER, RATE_DELTA, ExperimentError,
                                            core_overrides, fixed, held_out, mean_interval,
                                            paired, paper_claim,
                                            pct, per_seed, points, premise, sized,
                                            time_to_target, train_run)
from tba_lab.paths import REPO_DIR

NAME = "race"
TITLE = "The race: async TBA against sync TB, GRPO and TRL at equal wall clock"
CLAIM = (f"{PAPER}, abstract and Sec. 4: asynchronous off-policy TB reaches a target accuracy "
         f"sooner in wall-clock time than synchronous on-policy training.")
DEPARTURES = [
    "A 1M-parameter model on two-step arithmetic for minutes on shared CPU cores, instead of "
    "0.4-7B models on GSM8K or MATH on GPUs for hours; the searcher and the trainer share the "
    "cores, so asynchrony gains what one core can overlap, not a GPU's worth.",
    "The time to target is interpolated linearly between the measured evaluations; leg (e) is "
    "TRL's trainer, not the kit's GRPO.",
]
LEGS = {"a": ("sync GRPO", {"algo": "grpo", "async": {"mode": "sync"}}),
        "b": ("sync TB", {"algo": "tb", "async": {"mode": "sync"}}),
        "c": ("async TBA", {"algo": "tb", "async": {"mode": "async"}}),
        "d": ("async GRPO", {"algo": "grpo", "async": {"mode": "async"}}),
        "e": ("TRL GRPOTrainer", {"algo": "grpo", "async": {"mode": "sync"}}),  # its batch and lr
        "f": ("sync online DPO", {"algo": "online_dpo", "async": {"mode": "sync"}}),
        "g": ("async online DPO", {"algo": "online_dpo", "async": {"mode": "async"}}),
        "c2": ("async TBA, 2 searchers", {"algo": "tb", "async": {"mode": "async", "num_searchers": 2}}),
        "c3": ("async TBA, 3 searchers", {"algo": "tb", "async": {"mode": "async", "num_searchers": 3}})}
TB_LEGS = ("b", "c", "c2", "c3")  # the legs that train with TB; a task race's baselines: the rest
TRL_SCRIPT = REPO_DIR / "bench" / "trl_grpo.py"
PAPER_SPEED = ("abstract and Fig. 1: decoupling search from training speeds post-training up "
               "4x or more in wall-clock time; GSM8K, RhoMath-1B, 4 A100 GPUs")
# task -> (headline metric, trade-off metric, the metric of TB's claim, smallest effect of
# interest, unit, scale, decimals, the paper's claim and setting)
TASKS = {"preference": ("win_rate", "perplexity_sft", "win_rate", 0.03, "points", 100.0, 1,
                        "Sec. 5, Fig. 3: on TL;DR preference tuning TB reaches a higher win rate "
                        "at a given perplexity than the baselines"),
         "redteam": ("attack_success", "diversity", "diversity", 0.03, "diversity", 1.0, 3,
                     "Sec. 5, Table 6: on automated red-teaming TB's attacks stay diverse at "
                     "high attack success, where reward maximisers collapse")}
PRESETS = {"race_preference": {"task": "preference", "legs": ["c", "d", "g"]},
           "race_redteam": {"task": "redteam", "legs": ["c", "d", "g", "c2", "c3"]}}


def settings(smoke: bool, task: str = "arithmetic", legs=None) -> dict:
    """The ``task`` and its ``legs``; ``minutes`` per leg; evaluations of ``eval_size`` problems
    every ``eval_every`` s (``race``: as weight copies evaluated after the budget,
    ``defer_eval``; time to ``target`` accuracy). SMOKE keeps the legs and shrinks the rest."""
    if task == "arithmetic":
        return sized(smoke, legs=list(legs or "abcde"), minutes=(0.2, 2.0), eval_every=(4.0, 15.0),
                     eval_size=(20, 1000), defer_eval=True, target=0.40, target_high=0.45,
                     **BATCH)
    return sized(smoke, task=task, legs=list(legs or "cdg"), minutes=(0.25, 2.0),
                 eval_every=(5.0, 30.0), eval_size=(20, 200), **BATCH)


def metrics_of(task: str) -> tuple[str, str]:
    """(headline, trade-off) metric of a task race's ``task``.

    Raises:
        ExperimentError: a task without a trade-off (the arithmetic race is ``race``)."""
    if task not in TASKS:
        raise ExperimentError(f"task {task!r}: the trade-off race knows {sorted(TASKS)}; the "
                              f"arithmetic race is `tba-lab experiment race`")
    return TASKS[task][:2]


def variants(s: dict) -> list[tuple[str, dict]]:
    """One ``(leg, overrides)`` per leg of ``s["legs"]``.

    Raises:
        ExperimentError: an unknown leg, or leg (e) without ``trl`` or ``bench/trl_grpo.py``.
    """
    task = s.get("task", "arithmetic")
    if task != "arithmetic":
        metrics_of(task)
    known = [leg for leg in LEGS if task == "arithmetic" or leg != "e"]  # TRL: arithmetic only
    unknown = [leg for leg in s["legs"] if leg not in known]
    if unknown:
        raise ExperimentError(f"unknown leg(s) {unknown}; the legs are {known}")
    if "e" in s["legs"] and not (TRL_SCRIPT.is_file() and importlib.util.find_spec("trl")):
        raise ExperimentError("race: leg e needs the trl package (pip install -e '.[dev]') and "
                              "bench/trl_grpo.py of a checkout; or run without it: --set legs=a,b,c,d")
    base = merge(core_overrides({**s, "max_minutes": s["minutes"], "max_steps": 0}),
                 {"task": {"name": task} if task != "arithmetic"
                  else {"defer_interim_eval": bool(s["defer_eval"])}})
    return [(leg, merge(base, LEGS[leg][1])) for leg in dict.fromkeys(s["legs"])]


def metrics(s: dict) -> dict:
    task = s.get("task", "arithmetic")
    if task == "arithmetic":
        return {"accuracy_after": (f"held-out accuracy after {s['minutes']:g} min", pct),
                "time_to_target": (f"seconds to {pct(s['target'], 0)} (interpolated)", fixed(0)),
                **({"time_to_target_high": (f"seconds to {pct(s['target_high'], 0)}", fixed(0))}
                   if s.get("target_high") else {}),
                "updates_per_minute": ("trainer updates per minute", fixed(1)),
                "samples_per_minute": ("samples generated per minute", fixed(0)),
                "staleness_mean": ("staleness (updates)", fixed(1))}
    head, trade = metrics_of(task)
    return {f"{head}_after": (f"held-out {head} at the end", pct),
            f"{head}_gain": (f"{head} gain (points)", points),
            f"{trade}_after": (f"held-out {trade} at the end", fixed(3)),
            "updates_per_minute": ("trainer updates per minute", fixed(0)),
            "staleness_mean": ("staleness (updates)", fixed(1))}


def checkpoints(minutes: float, eval_every: float) -> list[float]:
    """Seconds of the interim evaluations: every ``eval_every`` s strictly inside the budget."""
    return [eval_every * i for i in range(1, math.ceil((60 * minutes - 1e-9) / eval_every))]


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
    """The leg's updates and their rate per minute of its own wall clock (TRL's summary has no
    rate); a task race's held-out metrics before and after (:func:`held_out`), the headline's
    gain and the trade-off at the end. Accuracy, samples per minute, staleness: the runner's."""
    steps = summary["trainer_steps"]
    row = {"updates": steps, "updates_per_minute": 60 * steps / max(summary["wall_seconds"], 1e-9)}
    if "task" not in s:
        return row
    head, trade = metrics_of(s["task"])
    h = held_out(summary)
    return {**row, "before": h["before"], "after": h["after"], f"{head}_gain": h["gain"],
            **{f"{m}_after": h["after"].get(m) for m in (head, trade)}}


def claims(runs: list[dict], s: dict) -> list[dict]:
    """The claims of the module docstring. ``race``: from rows with ``variant`` (the leg),
    ``seed``, ``updates``, ``wall_seconds`` and ``evals``; ``[]`` without legs (b) and (c). A
    task race: from rows with ``after`` (the held-out metrics at the end), one per baseline
    leg present; ``[]`` without leg (c)."""
    if s.get("task", "arithmetic") != "arithmetic":
        return _task_claims(runs, s["task"])
    seeds = set(per_seed(runs, "b", "seed")) & set(per_seed(runs, "c", "seed"))
    runs = [r for r in runs if r["seed"] in seeds]
    if not runs:
        return []
    cores = [r.get("cores_available") for r in runs if r["variant"] == "c"]
    usable = None if not cores or None in cores else min(cores)
    own = premise("the trainer and async TBA's searcher each have a core of their own (2 usable "
                  "cores)", usable is not None and usable >= 2,
                  f"{usable if usable is not None else 'unrecorded'} usable cores",
                  "2 or more cores (one for the trainer, one for the searcher)")

    def upm(r):
        return 60 * r["updates"] / max(r["wall_seconds"], 1e-9) if r["updates"] else None

    out = [paper_claim(
        "race.updates_per_minute", "Async TBA makes more trainer updates per minute than sync TB",
        PAPER_SPEED, "mean over seeds of (c) async TBA's updates/min over (b) sync TB's minus 1, "
        "same seed, same wall-clock budget", paired(runs, "c", "b", upm, lambda c, b: c / b - 1),
        +1, RATE_DELTA, "% relative to sync TB", scale=100.0, premise=own)]
    for key, target in (("time_to_target", s["target"]), ("time_to_target_high",
                                                           s.get("target_high"))):
        if target:
            out.append(paper_claim(
                f"race.{key}", f"Async TBA reaches {pct(target, 0)} held-out accuracy sooner "
                f"than sync TB", PAPER_SPEED, f"mean over seeds of (c)'s time to "
                f"{pct(target, 0)} minus (b)'s, interpolated between evaluations",
                paired(runs, "c", "b", lambda r, t=target: time_to_target(r["evals"], t)), -1,
                float(s["eval_every"]), "s", scale=1.0, digits=0, premise=own,
                missing_reason=f"async TBA or sync TB never reached {pct(target, 0)} within "
                               f"the budget"))
    return out


def extra_table(runs: list[dict], s: dict) -> list[str]:
    """``race``: each leg's updates per minute and times to the targets, the mean with its 95%
    t-interval over seeds (a time over the seeds that reached the target, their count
    beside); a task race: nothing beyond the runner's table."""
    if s.get("task", "arithmetic") != "arithmetic":
        return []
    keys = [("updates_per_minute", "updates/min", 1), ("time_to_target", f"s to "
            f"{pct(s['target'], 0)}", 0)] + ([("time_to_target_high", f"s to "
                                               f"{pct(s['target_high'], 0)}", 0)]
                                             if s.get("target_high") else [])
    lines = ["## Each leg with its 95% interval over seeds", "",
             "| leg | " + " | ".join(words for _, words, _ in keys) + " |",
             "|---|" + "---|" * len(keys)]
    for leg in dict.fromkeys(r["variant"] for r in runs):
        cells = []
        for key, _, digits in keys:
            vals = [r.get(key) for r in runs if r["variant"] == leg]
            m = mean_interval(vals)
            text = "never" if m["mean"] is None else f"{m['mean']:.{digits}f}" + (
                "" if m["ci_low"] is None else
                f" ({m['ci_low']:.{digits}f} to {m['ci_high']:.{digits}f})")
            cells.append(text + (f", {m['n']} of {len(vals)} seeds" if m["n"] < len(vals) else ""))
        lines.append(f"| {leg} {LEGS[leg][0]} | " + " | ".join(cells) + " |")
    return lines + [""]


def _task_claims(runs: list[dict], task: str) -> list[dict]:
    """TB's metric at the end minus each baseline's. The paper compares the methods at a
    matched KL (or perplexity); a task race compares them at equal wall clock, each at its own
    beta, so the premise is not met and the verdict is 'not testable here' (``tba-lab
    experiment tradeoff`` tests the claim at matched KL)."""
    metrics_of(task)
    *_, metric, delta, unit, scale, digits, paper = TASKS[task]
    legs = {r["variant"] for r in runs}
    if "c" not in legs:
        return []
    matched = premise("TB and the baseline are compared at a matched KL to the reference "
                      "policy", False, "equal wall clock, each leg at its own beta (TB the "
                      "task's, GRPO 0, online DPO 0.1)",
                      "a comparison at matched KL: `tba-lab experiment tradeoff`")
    return [paper_claim(
        f"{task}.{metric}.c-{leg}", f"TB's {metric} at the end is above {LEGS[leg][0]}'s", paper,
        f"mean over seeds of (c) async TBA's held-out {metric} at the end of the budget minus "
        f"({leg}) {LEGS[leg][0]}'s, same seed",
        paired(runs, "c", leg, lambda r: r["after"].get(metric)), +1, delta, unit, scale, digits,
        missing_reason=f"a leg has no {metric} at the end", premise=matched)
        for leg in LEGS if leg not in TB_LEGS and leg in legs]


# The task races: the functions above with their own title, claim and departures.
TASK_RACE = types.SimpleNamespace(
    settings=settings, variants=variants, metrics=metrics, run=run, measure=measure, claims=claims,
    TITLE="The race on preference tuning or red-teaming: headline metric against its trade-off",
    CLAIM=(f"{PAPER}, Sec. 5: TB reaches a better trade-off than GRPO and online DPO, a higher "
           f"win rate at a given perplexity (preference, Fig. 3) and more attack success at a "
           f"given diversity (red-teaming, Table 6)."),
    DEPARTURES=[
        "Tiny policies and learned rewards built by the kit (a synthetic summary-preference task "
        "and a synthetic red-teaming task) instead of Pythia/Llama models on TL;DR and a toxicity "
        "classifier; minutes on shared CPU cores instead of GPU hours.",
        "Perplexity under the SFT model stands for the KL to the reference."])
