"""Experiment ``off_policy``: does stale data cost TB less accuracy than it costs GRPO?

TB's loss regresses to a fixed target that stale data does not move (TBA, Sec. 3). On TL;DR
(Table 1) the baselines lose 3 to 10 points of win rate from on-policy to about 15 steps
off-policy, where TBA reaches 0.86, each at its own tuned learning rate.

The design is :data:`DESIGN` (printed in the report): the lag arms run
:func:`tba_lab.lab.experiments.per_update.run`, each loss at its :data:`TUNED` settings (from
``tba-lab experiment tune``); the async arms, the real trainer.
"""
from __future__ import annotations

from pathlib import Path

from tba_lab.config import merge
from tba_lab.lab.experiments import per_update
from tba_lab.lab.experiments.common import (GAIN_DELTA, PAPER, VERDICT_RULE, ExperimentError,
                                            core_overrides, fixed, paper_claim, pct, per_seed,
                                            sized, train_run)

NAME = "off_policy"
TITLE = "Off-policy robustness: accuracy lost to stale data, TB against GRPO"
CLAIM = (f"{PAPER}, abstract, Sec. 3 and Table 1: TB's loss (Eq. 3-5) is valid on stale data, so "
         f"TB keeps its accuracy when it trains on rollouts of old weights (Table 1: TBA at about "
         f"15 steps off-policy matches the on-policy baselines, which lose 3 to 10 points of win "
         f"rate at that staleness).")
SEEDS = (0, 1, 2, 3, 4)  # reporting seeds; the tuning seeds (100, 101) are kept apart
# Each loss's own learning rate (and TB's beta), the winners of `tba-lab experiment tune`
# (docs/results/tune/: fresh data, 60 updates, accuracy on 1000 held-out problems).
TUNED = {"tb": {"training": {"learning_rate": 2.5e-5}, "tb": {"beta": 0.03}},
         "grpo": {"training": {"learning_rate": 2.5e-5}}}
DESIGN = [
    f"Arms: TB and GRPO, each at its tuned settings ({TUNED}), trained on rollouts exactly L "
    "updates old, L = 0 and 15, the same prompts in the same order in every arm of a seed.",
    "Estimand: per seed, an arm's accuracy is the mean greedy held-out accuracy at the "
    "evaluations after update 0; drop = accuracy at L = 0 minus at L = 15; D = TB's drop - "
    "GRPO's drop, predicted < 0.",
    f"Smallest effect of interest: {100 * GAIN_DELTA:.0f} points. {VERDICT_RULE}",
    "The async runs (weights published every k updates, k under 2% of the run) are not part "
    "of D: they place real asynchrony on the axis of behaviour_kl (nats per response).",
]
DEPARTURES = [
    "A 1M-parameter model on synthetic two-step arithmetic, greedy exact-match accuracy on "
    "1000 held-out problems, 60 updates per run, instead of Pythia-410M on TL;DR (win rate "
    "judged by a reward model) or 7B models on GSM8K, with hundreds of updates.",
    "The baseline is the kit's GRPO (per-token PPO clip on the recorded behaviour log-probs); "
    "the paper's are Online DPO, Async PPO and Proximal RLOO in their own codebases.",
    "Constant, exact staleness (every batch L updates old), where an asynchronous run's "
    "staleness varies from batch to batch; no replay buffer in the lag arms.",
    "A constant learning rate and beta in the lag arms; the paper anneals TB's beta.",
]


def settings(smoke: bool) -> dict:
    """The design's numbers (SMOKE: L in {0, 2}, 4 updates, 50 problems, small batches)."""
    return sized(smoke, algos=["tb", "grpo"], lags=([0, 2], [0, 15]), updates=(4, 60),
                 eval_every=(2, 20), eval_size=(50, 1000), prompts=(8, 16), generations=(4, 8),
                 sync_period=(1, 2), sync_updates=(4, 120), initial_fill=(32, 256),
                 max_minutes=(3.0, 10.0))


def _tuned(algo: str, s: dict) -> dict:
    return merge({"algo": algo, "training": {"num_prompts_per_step": s["prompts"],
                                             "num_generations": s["generations"]}},
                 TUNED.get(algo, {}))


def variants(s: dict) -> list[tuple[str, dict]]:
    """``ALGO_staleL`` (the constant-lag loop, named as in :mod:`per_update`) and
    ``ALGO_async_kK`` (the asynchronous trainer; ``sync_updates`` 0 leaves them out)."""
    if s["lags"][0] != 0 or len(s["lags"]) < 2:
        raise ExperimentError(f"off_policy: lags={s['lags']}: give 0 first and at least one "
                              f"larger lag, e.g. lags=0,15")
    out = [(f"{a}_stale{L}", _tuned(a, s)) for L in s["lags"] for a in s["algos"]]
    if s["sync_updates"]:
        run = {**s, "max_steps": s["sync_updates"], "eval_every": 0}
        out += [(f"{a}_async_k{s['sync_period']}",
                 merge(merge(core_overrides(run), _tuned(a, s)),
                       {"async": {"mode": "async", "num_searchers": 1,
                                  "sync_period": int(s["sync_period"])}}))
                for a in s["algos"]]
    return out


def run(variant: str, overrides: dict, run_dir: Path, seed: int, s: dict):
    """A lag arm through :func:`per_update.run`, an async arm through the real trainer."""
    if "_async_" in variant:
        return train_run(overrides, run_dir, seed)
    return per_update.run(variant, overrides, run_dir, seed, s)


def metrics(s: dict) -> dict:
    return {"accuracy": ("accuracy (lag arms: mean over the evaluations after update 0; async "
                         "arms: after training)", pct),
            **{k: per_update.metrics(s)[k] for k in ("behaviour_kl", "clip_fraction")},
            "staleness_mean": ("staleness (updates)", fixed(1))}


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    """An arm's accuracy (:func:`metrics`), its loss's terms (means over updates), staleness."""
    from tba_lab.runlog import read_jsonl_rows

    algo = variant.split("_")[0]
    if "_async_" in variant:
        rows = read_jsonl_rows(Path(run_dir) / "metrics.jsonl")
        terms = {k: (sum(vs) / len(vs) if vs else None)
                 for k in ("behaviour_kl", "clip_fraction")
                 for vs in [[m[k] for m in rows if m.get(k) is not None]]}
        return {"algo": algo, "arm": "async", "lag": None, "accuracy": summary.get("accuracy_after"),
                **terms}  # staleness: the runner's
    r = per_update.measure(run_dir, summary, s, variant, runs)
    return {"algo": algo, "arm": "lag", "lag": r["stale"], "staleness_mean": float(r["stale"]),
            "accuracy": r["mean_after_first"],
            **{k: r[k] for k in ("behaviour_kl", "clip_fraction")}}


def claims(runs: list[dict], s: dict) -> list[dict]:
    """D = TB's drop - GRPO's drop from L = 0 to the largest lag, per seed."""
    if "tb" not in s["algos"] or "grpo" not in s["algos"]:
        return []
    big = s["lags"][-1]
    acc = {(a, L): per_seed(runs, f"{a}_stale{L}", "accuracy") for a in ("tb", "grpo")
           for L in (0, big)}
    seeds = [k for k in acc["tb", 0] if all(acc[c].get(k) is not None for c in acc)]
    drop = {a: {k: acc[a, 0][k] - acc[a, big][k] for k in seeds} for a in ("tb", "grpo")}
    return [paper_claim(
        "off_policy.drop_difference", f"TB loses less accuracy than GRPO on rollouts "
        f"{big} updates stale", "Table 1 (TL;DR, Pythia-410M): TBA at about 15 steps "
        "off-policy keeps the on-policy win rate; the baselines lose 3 to 10 points",
        f"D = TB's drop - GRPO's drop from L = 0 to L = {big}, per seed",
        {k: drop["tb"][k] - drop["grpo"][k] for k in seeds}, -1, GAIN_DELTA, "points", scale=100)]
