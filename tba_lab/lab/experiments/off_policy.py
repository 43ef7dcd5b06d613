"""Experiment ``off_policy``: does stale data cost TB less accuracy than it costs GRPO?

Claim (TBA, arXiv 2503.18929, abstract, Sec. 3 and Table 1): TB's loss is a regression to a
fixed target that stale data does not move, so TB trains well on data sampled by old weights.
The paper's evidence is a comparison of levels, not a curve: on TL;DR summarisation
(Pythia-410M, Table 1) Online DPO goes 0.85 -> 0.82, Async PPO 0.86 -> 0.76 and Proximal RLOO
0.82 -> 0.77 in win rate from on-policy to about 15 steps off-policy, and TBA at sync period 10
("about 15 steps off-policy on average") reaches 0.86, each method at its own tuned learning
rate. On GSM8K (App. D, Fig. 7) TB itself is sensitive to staleness.

The design here is fixed before the runs (:data:`DESIGN`, printed at the top of the report):

* **Constant lag.** One process, no searcher and no buffer (the loop of
  :func:`tba_lab.lab.experiments.per_update.run_variant`): update t trains on B x K rollouts of
  the next training prompts sampled with the weights of update t - L (L = 0 on-policy, L = 15
  the paper's level; the first L updates use the starting weights). Every arm of a seed sees
  the same prompts in the same order.
* **Each loss at its own tuned settings** (:data:`TUNED`, from ``tba-lab experiment tune`` on
  seeds 100 and 101, apart from the reporting seeds 0-4; ``docs/results/tune/``).
* **Estimand.** Per seed, an arm's accuracy is the mean greedy accuracy on all 1000 held-out
  problems at updates 20, 40 and 60; a loss's drop is its accuracy at L = 0 minus at L = 15;
  D = TB's drop - GRPO's drop. The paper predicts D < 0. Verdict by
  :data:`tba_lab.lab.experiments.common.VERDICT_RULE` with delta = 3 points.
* **Staleness in nats.** Every update logs ``behaviour_kl``, the mean over the batch of
  log mu(y|x) - log pi_theta(y|x) summed over the response (an estimate of KL(mu || pi_theta),
  nats per response); the report plots accuracy lost against it.
* **A sync-period run at the paper's ratio.** The real asynchronous trainer (one searcher, a
  replay buffer) publishing weights every k = 2 updates in a 120-update run (1.7%; the paper's
  ratio of k to the run's length is under 2%), per loss: where real asynchrony sits on the
  nats axis beside the constant lags.
"""
from __future__ import annotations

from pathlib import Path

from tba_lab.lab.experiments.common import (GAIN_DELTA, PAPER, RUN_OVERHEAD_SECONDS,
                                            SMOKE_RUN_SECONDS, UPDATES_PER_MINUTE, VERDICT_RULE,
                                            claim_lines, claim_test, core_overrides,
                                            paper_claim, pyplot, rng, save_figure, spread)

NAME = "off_policy"
TITLE = "Off-policy robustness: accuracy lost to stale data, TB against GRPO"
CLAIM = (f"{PAPER}, abstract, Sec. 3 and Table 1: TB's loss (Eq. 3-5) is valid on stale data, so "
         f"TB keeps its accuracy when it trains on rollouts of old weights (Table 1: TBA at about "
         f"15 steps off-policy matches the on-policy baselines, which lose 3 to 10 points of win "
         f"rate at that staleness).")
DELTA = GAIN_DELTA  # 3 points: the baselines' smallest loss in Table 1 (Online DPO, 0.85 -> 0.82)
SEEDS = (0, 1, 2, 3, 4)  # reporting seeds; the tuning seeds (100, 101) are kept apart
# Each loss's own learning rate (and TB's beta), the winners of `tba-lab experiment tune`
# (docs/results/tune/: fresh data, 60 updates, accuracy on 1000 held-out problems).
TUNED = {"tb": {"training": {"learning_rate": 2.5e-5}, "tb": {"beta": 0.03}},
         "grpo": {"training": {"learning_rate": 2.5e-5}}}
DESIGN = [
    f"Arms: TB (learning rate {TUNED['tb']['training']['learning_rate']}, beta "
    f"{TUNED['tb']['tb']['beta']}) and GRPO (learning rate "
    f"{TUNED['grpo']['training']['learning_rate']}), each at its tuned settings "
    "(`tba-lab experiment tune`), trained on rollouts exactly L updates old, L = 0 and L = 15 "
    "(the paper's 'about 15 steps off-policy'), the same prompts in the same order in every arm "
    "of a seed.",
    "Estimand: per seed, an arm's accuracy is the mean greedy accuracy on the held-out problems "
    "at the evaluations after update 0; drop = accuracy at L = 0 minus at L = 15; "
    "D = TB's drop - GRPO's drop. The paper predicts D < 0 (TB loses less).",
    f"Smallest effect of interest: {100 * DELTA:.0f} points. {VERDICT_RULE}",
    "Staleness in nats: behaviour_kl, the mean over each batch of log mu(y|x) - log "
    "pi_theta(y|x) summed over the response, averaged over the run's updates.",
    "The sync-period runs (the asynchronous trainer, weights published every k updates, k "
    "under 2% of the run's length) are not part of D: they place real asynchrony on the same "
    "nats axis.",
]
DEPARTURES = [
    "A 1M-parameter model on synthetic two-step arithmetic, greedy exact-match accuracy on "
    "1000 held-out problems, 60 updates per run, instead of Pythia-410M on TL;DR (win rate "
    "judged by a reward model) or 7B models on GSM8K, with hundreds of updates.",
    "The baseline is the kit's GRPO (per-token PPO clip on the recorded behaviour log-probs); "
    "the paper's are Online DPO, Async PPO and Proximal RLOO in their own codebases.",
    "Constant, exact staleness (every batch L updates old), where an asynchronous run's "
    "staleness varies from batch to batch; no replay buffer in the lag arms.",
    "A constant learning rate in the lag arms (the kit's trainer decays it to 0); the paper "
    "tunes each method's rate, as here, and anneals TB's beta, which here is constant.",
]


def settings(smoke: bool) -> dict:
    """The design's numbers: full (TB and GRPO x L in {0, 15}, 60 updates, evaluations of 1000
    problems at 20, 40, 60; async runs k = 2 over 120 updates) or SMOKE (L in {0, 2}, 4
    updates, 50 problems, small batches, 4-update async runs)."""
    if smoke:
        return {"algos": ["tb", "grpo"], "lags": [0, 2], "updates": 4, "eval_every": 2,
                "eval_size": 50, "prompts": 8, "generations": 4, "sync_period": 1,
                "sync_updates": 4, "initial_fill": 32, "max_minutes": 3.0}
    return {"algos": ["tb", "grpo"], "lags": [0, 15], "updates": 60, "eval_every": 20,
            "eval_size": 1000, "prompts": 16, "generations": 8, "sync_period": 2,
            "sync_updates": 120, "initial_fill": 256, "max_minutes": 10.0}


def _tuned(algo: str, s: dict) -> dict:
    from tba_lab.config import merge

    return merge({"algo": algo, "training": {"num_prompts_per_step": s["prompts"],
                                             "num_generations": s["generations"]}},
                 TUNED.get(algo, {}))


def variants(s: dict) -> list[tuple[str, dict]]:
    """``(label, config overrides)`` per run of one seed: ``ALGO_staleL`` (the constant-lag
    loop; the name is :mod:`per_update`'s) and ``ALGO_async_kK`` (the asynchronous trainer);
    ``sync_updates`` 0 leaves the async runs out."""
    from tba_lab.config import merge

    if s["lags"][0] != 0 or len(s["lags"]) < 2:
        from tba_lab.lab.experiments.common import ExperimentError

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


def estimate_seconds(s: dict, n_seeds: int, smoke: bool) -> float:
    """Lag runs: about 0.75 s per update of B x K = 16 x 8 and 3 ms per problem evaluated
    (2 cores; TB 50 s and GRPO 45 s per 60-update run on 2026-12-06); async runs: start-up
    plus updates at the 2-core rate."""
    if smoke:
        return n_seeds * len(variants(s)) * SMOKE_RUN_SECONDS
    rows = 0.75 * s["prompts"] * s["generations"] / 128
    lag = s["updates"] * rows + (s["updates"] // s["eval_every"] + 1) * s["eval_size"] * 0.003
    sync = RUN_OVERHEAD_SECONDS + 60.0 * s["sync_updates"] / UPDATES_PER_MINUTE
    return n_seeds * len(s["algos"]) * (len(s["lags"]) * lag + (sync if s["sync_updates"] else 0))


def run(variant: str, overrides: dict, run_dir: Path, seed: int, s: dict):
    """A lag arm through :func:`per_update.run`, an async arm through the real trainer."""
    from tba_lab.lab.experiments import per_update
    from tba_lab.lab.experiments.common import train_run

    if "_async_" in variant:
        return train_run(overrides, run_dir, seed)
    return per_update.run(variant, overrides, run_dir, seed,
                          {"updates": s["updates"], "eval_every": s["eval_every"],
                           "eval_size": s["eval_size"]})


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    """An arm's numbers: accuracy (the mean over the evaluations after update 0, for the lag
    arms; after training, for the async arms), behaviour_kl and clip_fraction (means over the
    run's updates), staleness in updates."""
    from tba_lab.runlog import read_jsonl_rows

    algo = variant.split("_")[0]
    rows = read_jsonl_rows(Path(run_dir) / "eval.jsonl")
    if "_async_" in variant:
        metrics = read_jsonl_rows(Path(run_dir) / "metrics.jsonl")
        terms = {k: (sum(vs) / len(vs) if vs else None)
                 for k in ("behaviour_kl", "clip_fraction")
                 for vs in [[m[k] for m in metrics if m.get(k) is not None]]}
        return {"algo": algo, "arm": "async", "lag": None,
                "sync_period": int(variant.rsplit("_k", 1)[1]),
                "accuracy": summary.get("accuracy_after"),
                "staleness_mean": summary.get("staleness_mean"), **terms}
    after = [r["accuracy"] for r in rows if r["step"] > 0]
    return {"algo": algo, "arm": "lag", "lag": int(variant.rsplit("stale", 1)[1]),
            "sync_period": None, "accuracy": sum(after) / len(after) if after else None,
            "staleness_mean": float(variant.rsplit("stale", 1)[1]),
            "behaviour_kl": summary.get("behaviour_kl"),
            "clip_fraction": summary.get("clip_fraction")}


def _by_seed(runs: list[dict], algo: str, lag: int) -> dict:
    return {r["seed"]: r["accuracy"] for r in runs
            if r["algo"] == algo and r["arm"] == "lag" and r["lag"] == lag}


def analyse(runs: list[dict], s: dict) -> dict:
    """Per arm: spreads over seeds; per loss: its drop from L = 0 to the largest lag with a
    95% interval (a description, no verdict); the claim on D = TB's drop - GRPO's drop
    (:func:`claim_test`, its verdict by the rule)."""
    lags, algos = s["lags"], s["algos"]
    big = lags[-1]
    cells = []
    for algo in algos:
        for lag in lags:
            rs = [r for r in runs if r["algo"] == algo and r["arm"] == "lag" and r["lag"] == lag]
            steps = sorted({e["step"] for r in rs for e in r["evals"]})
            cells.append({"algo": algo, "arm": "lag", "lag": lag, "steps": steps,
                          "accuracy_at": [spread(e["accuracy"] for r in rs for e in r["evals"]
                                                 if e["step"] == n) for n in steps],
                          **{m: spread(r.get(m) for r in rs)
                             for m in ("accuracy", "behaviour_kl", "clip_fraction")}})
        rs = [r for r in runs if r["algo"] == algo and r["arm"] == "async"]
        if rs:
            cells.append({"algo": algo, "arm": "async", "sync_period": rs[0]["sync_period"],
                          **{m: spread(r.get(m) for r in rs)
                             for m in ("accuracy", "behaviour_kl", "clip_fraction",
                                       "staleness_mean")}})
    drops, per_seed = {}, {}
    for algo in algos:
        fresh, stale = _by_seed(runs, algo, 0), _by_seed(runs, algo, big)
        per_seed[algo] = {seed: fresh[seed] - stale[seed] for seed in fresh
                          if seed in stale and None not in (fresh[seed], stale[seed])}
        interval = claim_test(f"{algo.upper()}'s drop from L = 0 to L = {big}",
                              list(per_seed[algo].values()), -1, DELTA, scale=100)
        drops[algo] = {k: interval[k] for k in ("claim", "estimate", "ci_low", "ci_high", "n")}
    claims = []
    if "tb" in algos and "grpo" in algos:
        seeds = sorted(set(per_seed["tb"]) & set(per_seed["grpo"]))
        claims.append(paper_claim(
            "off_policy.drop_difference", f"TB loses less accuracy than GRPO on rollouts "
            f"{big} updates stale", "Table 1 (TL;DR, Pythia-410M): TBA at about 15 steps "
            "off-policy keeps the on-policy win rate; the baselines lose 3 to 10 points",
            f"D = TB's drop - GRPO's drop from L = 0 to L = {big}, per seed",
            {k: per_seed["tb"][k] - per_seed["grpo"][k] for k in seeds}, -1, DELTA, "points",
            scale=100))
    return {"cells": cells, "drops": drops, "claims": claims, "eval_size": s["eval_size"],
            "lags": lags, "updates": s["updates"]}


def _cell(a: dict, algo: str, arm: str, lag=None) -> dict | None:
    return next((c for c in a["cells"] if c["algo"] == algo and c["arm"] == arm
                 and (arm != "lag" or c["lag"] == lag)), None)


def _nats(s: dict) -> str:
    return rng(s, lambda v: f"{round(v, 3) + 0.0:.3f}")  # no "-0.000" for float noise at L = 0


def readings(a: dict) -> list[str]:
    """The drops with intervals, staleness in nats, and the claim's verdict by its rule."""
    big = a["lags"][-1]
    out = []
    for algo, d in a["drops"].items():
        fresh, stale = _cell(a, algo, "lag", 0), _cell(a, algo, "lag", big)
        interval = ("" if d["ci_low"] is None else
                    f", 95% interval {d['ci_low']:+.1f} to {d['ci_high']:+.1f}")
        out.append(f"{algo.upper()}: accuracy {rng(fresh['accuracy'])} at L = 0 and "
                   f"{rng(stale['accuracy'])} at L = {big}; its drop is "
                   + ("n/a" if d["estimate"] is None else f"{d['estimate']:+.1f} points")
                   + f"{interval} over {d['n']} seeds.")
    out += claim_lines(a["claims"])[:-1]  # the rule itself is in the report's Design section
    kl = [f"{c['algo'].upper()} {_nats(c['behaviour_kl'])} at L = {c['lag']}" for c in a["cells"]
          if c["arm"] == "lag" and c["behaviour_kl"]["n"]]
    if kl:
        out.append("Staleness in nats (behaviour KL per response, mean over updates): "
                   + ", ".join(kl) + ".")
    sync = [c for c in a["cells"] if c["arm"] == "async"]
    for c in sync:
        out.append(f"The asynchronous {c['algo'].upper()} run publishing every "
                   f"{c['sync_period']} updates: accuracy after {rng(c['accuracy'])}, mean "
                   f"staleness {rng(c['staleness_mean'], lambda v: f'{v:.1f}')} updates, "
                   f"behaviour KL {_nats(c['behaviour_kl'])} nats.")
    return out


def figures(a: dict, out: Path) -> list[tuple[str, str]]:
    """``off_policy.png``: (a) accuracy over updates per arm; (b) accuracy lost against
    behaviour KL in nats; (c) D per seed with its 95% interval and the +-delta band."""
    plt = pyplot()
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.2))
    big = a["lags"][-1]
    for i, algo in enumerate(a["drops"]):
        for lag, style in ((0, "-"), (big, "--")):
            c = _cell(a, algo, "lag", lag)
            means = [100 * s["mean"] for s in c["accuracy_at"]]
            ax1.plot(c["steps"], means, style, marker="o", color=f"C{i}",
                     label=f"{algo.upper()}, L = {lag}")
        d = a["drops"][algo]
        k0, kb = (_cell(a, algo, "lag", lag)["behaviour_kl"]["mean"] for lag in (0, big))
        if d["estimate"] is not None and None not in (k0, kb):
            err = ([[d["estimate"] - d["ci_low"]], [d["ci_high"] - d["estimate"]]]
                   if d["ci_low"] is not None else None)
            ax2.plot([k0, kb], [0, d["estimate"]], "-", color=f"C{i}")
            ax2.errorbar([kb], [d["estimate"]], yerr=err, marker="o", capsize=4, color=f"C{i}",
                         label=f"{algo.upper()}: L = 0 -> {big}")
        sync = _cell(a, algo, "async")
        if sync and sync["behaviour_kl"]["n"]:
            ax2.axvline(sync["behaviour_kl"]["mean"], color=f"C{i}", ls=":",
                        label=f"{algo.upper()} async, k = {sync['sync_period']}")
    ax1.set(xlabel="trainer updates", ylabel="held-out accuracy (%)",
            title=f"(a) accuracy, mean over seeds ({a['eval_size']} problems)")
    ax2.axhline(0, color="0.5", lw=1)
    ax2.set(xlabel="behaviour KL, KL(mu || pi_theta) (nats per response)",
            ylabel="accuracy lost (points)", title="(b) accuracy lost against staleness in nats")
    for c in a["claims"]:
        seeds = list(c["diffs"])
        ax3.plot(range(len(seeds)), list(c["diffs"].values()), "o", color="0.4", label="per seed")
        if c["ci_low"] is not None:
            ax3.errorbar([len(seeds)], [c["estimate"]],
                         yerr=[[c["estimate"] - c["ci_low"]], [c["ci_high"] - c["estimate"]]],
                         marker="s", capsize=5, color="C3", label=f"mean, 95% CI: {c['verdict']}")
        ax3.axhspan(-c["delta"], c["delta"], color="0.9", label=f"+-delta ({c['delta']:.0f} points)")
        ax3.set_xticks(range(len(seeds) + 1), [str(k) for k in seeds] + ["mean"])
    ax3.axhline(0, color="0.5", lw=1)
    ax3.set(xlabel="seed", ylabel="D = TB's drop - GRPO's drop (points)",
            title="(c) the claim: D < 0 means TB loses less")
    for ax in (ax1, ax2, ax3):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax.title.set_fontsize(10)
    return save_figure(fig, out, "off_policy.png",
                       "Accuracy over updates per arm; accuracy lost against the behaviour KL "
                       "(nats) with 95% intervals over seeds; the paired difference D per seed "
                       "with its interval.")


def table(a: dict) -> list[str]:
    lines = ["| loss | arm | accuracy | behaviour KL (nats) | clip fraction |",
             "|---|---|---|---|---|"]
    for c in a["cells"]:
        arm = f"lag L = {c['lag']}" if c["arm"] == "lag" else f"async, k = {c['sync_period']}"
        clip = rng(c["clip_fraction"], lambda v: f"{v:.3f}") if c["clip_fraction"]["n"] else "-"
        lines.append(f"| {c['algo']} | {arm} | {rng(c['accuracy'])} | "
                     f"{_nats(c['behaviour_kl'])} | {clip} |")
    return lines + ["", "Accuracy: lag arms, the mean over the evaluations after update 0; "
                        "async arms, after training. Mean over seeds (min to max)."]
