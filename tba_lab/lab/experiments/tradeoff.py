"""Experiments ``tradeoff_redteam`` and ``tradeoff_preference``: does TB keep diversity (and a
gold win rate) where reward maximisers collapse, compared at a matched KL to the reference?

The paper compares methods at a matched perplexity (preference, Fig. 3) and along the attack
success / diversity trade-off (red-teaming, Table 6): a method that moves further from the
reference policy can always trade more. Here every arm trains on-policy in one process
(:func:`tba_lab.lab.experiments.per_update.run`, no timing in it) and at each evaluation
records the task's held-out metrics and the policy's KL to the reference; each run is a
trajectory in (KL, metric), and the arms are compared where their trajectories meet.
"""
from __future__ import annotations

from pathlib import Path

from tba_lab.config import merge
from tba_lab.lab.experiments import per_update
from tba_lab.lab.experiments.common import (PAPER, ExperimentError, fixed, paper_claim, pct,
                                            per_seed, premise, sized, spread, value_at)

NAME = "tradeoff"
TITLE = "Diversity and win rate at matched KL to the reference: TB, GRPO, online DPO"
CLAIM = (f"{PAPER}, Sec. 5: TB's target keeps diversity where reward maximisers collapse "
         f"(red-teaming, Table 6) and reaches a higher win rate at a given perplexity (TL;DR "
         f"preference, Fig. 3).")
# task -> (the claim's metric, smallest effect of interest, unit, scale, decimals, TB's second
# beta, the paper's claim and setting)
TASKS = {"redteam": ("diversity", 0.03, "diversity", 1.0, 3, 0.1,
                     "Sec. 5, Table 6: on automated red-teaming TB's attacks stay diverse at high "
                     "attack success, where reward maximisers collapse"),
         "preference": ("win_rate", 0.03, "points", 100.0, 1, 0.03,
                        "Sec. 5, Fig. 3: on TL;DR preference tuning TB reaches a higher win rate "
                        "at a given perplexity than the baselines")}
KAPPA_MIN = 0.1  # nats per response: twice the standard error of one KL estimate (50 x 4 samples)
BASELINES = ("grpo", "online_dpo")
DESIGN = [
    "Arms: TB at the task's beta (red-teaming 0.5, preference 0.1: `config_defaults`), TB at a "
    "smaller beta (0.1, 0.03), GRPO (beta 0, the kit's default) and online DPO (beta 0.1), each "
    "trained on-policy for `updates` updates at the kit's learning rate 5e-5, B = 16 x K = 8, "
    "one process (`per_update`), the same prompts in the same order in every arm of a seed.",
    "At update 0 and after each update in `eval_at`: the task's held-out metrics on `eval_size` "
    "prompts (greedy) and the KL to the reference policy, KL(pi || pi_ref) in nats per "
    "response (`kl_k` samples of each of `kl_prompts` held-out prompts at the sampling "
    "temperature, `beta.kl_to_reference`).",
    "Estimand, per seed, for each TB arm against each baseline: kappa = the smaller of the two "
    "runs' largest KL; each run's metric at kappa, read off its (KL, metric) trajectory by "
    "linear interpolation at the first evaluation interval that spans kappa; TB's minus the "
    "baseline's, predicted positive. The metric: diversity (red-teaming, delta 0.03), gold "
    "win rate (preference, delta 3 points).",
    f"Premise: the trajectories meet away from the start: kappa, its mean over seeds, is at "
    f"least {KAPPA_MIN} nats per response (twice a KL estimate's standard error); below it "
    f"every arm is still near pi_ref and the verdict is 'not testable here'.",
    "Seeds 0 1 2. Verdicts by the rule printed below (`common.VERDICT_RULE`). Each arm's "
    "headline metric (attack success, win rate) at kappa is reported beside, without verdicts.",
]
DEPARTURES = [
    "Tiny policies and learned rewards built by the kit (a synthetic summary-preference task "
    "and a synthetic red-teaming task) instead of Pythia/Llama models on TL;DR and a toxicity "
    "classifier; tens of updates on CPU cores instead of GPU hours.",
    "On-policy training in one process (no searcher, no replay buffer): the claim is about the "
    "objective, so the asynchrony is left out; the task races (`race_redteam`, "
    "`race_preference`) run the asynchronous trainer at equal wall clock.",
    "KL to the reference stands for the paper's perplexity (preference) and is the axis on "
    "which red-teaming is compared; one learning rate for every arm.",
]


def settings(smoke: bool, task: str = "redteam") -> dict:
    """The design's numbers for ``task`` (SMOKE: 4 updates, 8 prompts, small batches)."""
    if task not in TASKS:
        raise ExperimentError(f"tradeoff: task {task!r}: choose one of {sorted(TASKS)}")
    return sized(smoke, task=task, tb_beta_small=TASKS[task][5], updates=(4, 60),
                 eval_at=([2, 4], [4, 8, 15, 30, 60]), eval_every=(2, 60), eval_size=(8, 200),
                 kl_prompts=(4, 50), kl_k=(2, 4), prompts=(8, 16), generations=(4, 8))


def variants(s: dict) -> list[tuple[str, dict]]:
    """``tb``, ``tb_betaX``, ``grpo``, ``online_dpo`` on the task (per_update's names)."""
    if not s["eval_at"] or max(s["eval_at"]) != s["updates"]:
        raise ExperimentError(f"tradeoff: eval_at={s['eval_at']}: end it at updates="
                              f"{s['updates']}, e.g. eval_at=4,8,{s['updates']}")
    base = {"task": {"name": s["task"]}, "training": {"num_prompts_per_step": s["prompts"],
                                                      "num_generations": s["generations"]}}
    names = ["tb", f"tb_beta{s['tb_beta_small']:g}", *BASELINES]
    return [(n, merge(base, per_update.parse_variant(n)[0])) for n in names]


def run(variant: str, overrides: dict, run_dir: Path, seed: int, s: dict):
    return per_update.run(variant, overrides, run_dir, seed, s)


def metrics(s: dict) -> dict:
    head, metric = _metrics(s)
    out = {f"{head}_after": (f"held-out {head} after {s['updates']} updates", pct)}
    if metric != head:
        out[f"{metric}_after"] = (f"held-out {metric} after {s['updates']} updates", fixed(3))
    return {**out, "kl_after": ("KL to the reference after training (nats per response)",
                                fixed(3))}


def _metrics(s: dict) -> tuple[str, str]:
    """(the task's headline metric, the claim's metric)."""
    return ("attack_success" if s["task"] == "redteam" else "win_rate"), TASKS[s["task"]][0]


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    """The trajectory ``[(step, KL, {metric: value})]`` and the metrics after training."""
    from tba_lab.runlog import read_jsonl_rows

    evals = read_jsonl_rows(Path(run_dir) / "eval.jsonl")
    names = [k for k in evals[0] if k not in ("step", "wall_seconds", "n", "kl")]
    return {"trajectory": [{"step": e["step"], "kl": e["kl"], **{m: e[m] for m in names}}
                           for e in evals],
            "kl_after": evals[-1]["kl"], **{f"{m}_after": evals[-1][m] for m in names}}


def matched(runs: list[dict], tb: str, base: str, metric: str) -> dict:
    """Per seed ``{"kappa", "tb", "base"}``: both runs' ``metric`` at kappa, the smaller of
    their largest KLs (None where a run is missing)."""
    a, b = (per_seed(runs, v, "trajectory") for v in (tb, base))
    out = {}
    for seed in dict.fromkeys([*a, *b]):
        ta, tb_ = a.get(seed), b.get(seed)
        if not ta or not tb_:
            out[seed] = None
            continue
        kappa = min(max(e["kl"] for e in ta), max(e["kl"] for e in tb_))
        out[seed] = {"kappa": kappa,  # each metric read off its run's (KL, metric) trajectory
                     **{side: value_at([(e["kl"], e[metric]) for e in t], kappa)
                        for side, t in (("tb", ta), ("base", tb_))}}
    return out


def claims(runs: list[dict], s: dict) -> list[dict]:
    """TB's metric minus each baseline's at matched KL (:data:`DESIGN`), for each TB arm."""
    metric, delta, unit, scale, digits, _, paper = TASKS[s["task"]]
    have = {r["variant"] for r in runs}
    out = []
    for tb in ("tb", f"tb_beta{s['tb_beta_small']:g}"):
        for base in BASELINES:
            if tb not in have or base not in have:
                continue
            m = matched(runs, tb, base, metric)
            kappas = spread(v["kappa"] for v in m.values() if v)
            met = kappas["mean"] is not None and kappas["mean"] >= KAPPA_MIN
            seen = ("no pair of runs" if kappas["mean"] is None else
                    f"kappa {kappas['mean']:.3f} nats ({kappas['min']:.3f} to "
                    f"{kappas['max']:.3f})")
            out.append(paper_claim(
                f"{s['task']}.{metric}.{tb}-{base}", f"{tb} has a higher {metric} than {base} at "
                f"a matched KL to the reference", paper, f"{tb}'s {metric} minus {base}'s at "
                f"kappa, the larger KL both runs reached, per seed",
                {k: None if v is None or None in (v["tb"], v["base"]) else v["tb"] - v["base"]
                 for k, v in m.items()}, +1, delta, unit, scale, digits,
                missing_reason="a run is missing or its trajectory does not reach kappa",
                premise=premise(f"the two runs' KL trajectories meet at kappa >= {KAPPA_MIN} "
                                f"nats per response (mean over seeds)", met, seen,
                                "arms that move further from the reference (more updates, a "
                                "smaller TB beta) so that their KLs overlap")))
    return out


def extra_table(runs: list[dict], s: dict) -> list[str]:
    """Each TB arm against each baseline at kappa: both runs' headline and claim metric
    (means over seeds), without verdicts."""
    names = list(dict.fromkeys(_metrics(s)))  # the headline, and the claim's metric if other
    lines = ["## At the matched KL (no verdicts)", "",
             "| TB arm | baseline | kappa (nats) | "
             + " | ".join(f"{side} {n}" for n in names for side in ("TB", "baseline")) + " |",
             "|---|---|---|" + "---|" * 2 * len(names)]
    have = {r["variant"] for r in runs}
    for tb in ("tb", f"tb_beta{s['tb_beta_small']:g}"):
        for base in BASELINES:
            if tb not in have or base not in have:
                continue
            cells = {name: matched(runs, tb, base, name) for name in names}

            def mean(name, side):
                vals = [v[side] for v in cells[name].values() if v and v[side] is not None]
                return sum(vals) / len(vals) if vals else None

            kap = spread(v["kappa"] for v in cells[names[0]].values() if v)["mean"]
            fmt = {n: pct if n in ("attack_success", "win_rate") else fixed(3) for n in names}
            lines.append(f"| {tb} | {base} | {fixed(3)(kap or 0)} | "
                         + " | ".join(fmt[n](mean(n, side)) if mean(n, side) is not None
                                      else "n/a" for n in names for side in ("tb", "base"))
                         + " |")
    return lines + [""]


def extra_figure(runs: list[dict], s: dict, out: Path) -> str:
    """``tradeoff_kl.png``: every run's headline and claim metric against its KL to the
    reference (one line per run, one colour per arm). Returns the file name."""
    from matplotlib.figure import Figure

    head, metric = _metrics(s)
    names = list(dict.fromkeys((head, metric)))
    fig = Figure(figsize=(5 * len(names), 4))
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    arms = list(dict.fromkeys(r["variant"] for r in runs))
    for ax, name in zip(axes, names):
        for r in runs:
            t = r.get("trajectory") or []
            first = r is next(q for q in runs if q["variant"] == r["variant"])
            ax.plot([e["kl"] for e in t], [e[name] for e in t], "o-", ms=3, alpha=0.7,
                    color=f"C{arms.index(r['variant'])}", label=r["variant"] if first else None)
        ax.set(xlabel="KL to the reference (nats per response)", ylabel=f"held-out {name}",
               title=f"{name} against KL, one line per run")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "tradeoff_kl.png", dpi=110)
    return "tradeoff_kl.png"
