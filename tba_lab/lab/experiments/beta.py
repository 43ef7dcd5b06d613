"""Experiment ``beta``: the KL coefficient beta of TB, constant or annealed.

Claim (TBA, arXiv 2503.18929, Eq. 2 and Sec. 4): TB fits pi* ∝ pi_ref exp(r / beta), so a
smaller beta lets the policy move further from the reference policy and trust the reward more;
the paper ANNEALS beta (GSM8K: 0.014 -> 0.004 over 500 updates) to stay near the reference
early and trust the reward later. Here: async TB, the kit's default beta, a smaller constant,
and the default annealed linearly to the smaller one over the run (``tb.beta_final``,
``tb.beta_anneal_steps``); after training, greedy accuracy and the KL to the reference,
estimated on held-out prompts from the final policy's samples (:func:`kl_to_reference`).

The claims, each judged by :data:`~tba_lab.lab.experiments.common.VERDICT_RULE` on per-seed
differences of the smaller constant beta and the default, which share their seed
(:func:`claims`); the paper's claim and setting: Eq. 2, the TB target pi_ref exp(r/beta), and
Sec. 4's GSM8K runs, which anneal beta down to trust the reward more later:

* KL: the mean over seeds of the KL to the reference at the smaller beta minus at the default,
  predicted positive; smallest effect of interest 0.05 nats per response, the standard error of
  one estimate from 50 prompts x 8 samples (0.03 to 0.05 nats, ``kl_se`` in results.json).
* accuracy: the mean over seeds of the held-out accuracy at the smaller beta minus at the
  default, predicted positive (the target tilts further towards the reward); smallest effect of
  interest 3 points, about the standard error of one evaluation on 200 problems (3.5 at 40%).
"""
from __future__ import annotations

import math
from pathlib import Path

from tba_lab.config import merge
from tba_lab.lab.experiments.common import (FULL_UPDATES, GAIN_DELTA, PAPER, RUN_OVERHEAD_SECONDS,
                                            SMOKE_RUN_SECONDS, UPDATES_PER_MINUTE, basic_numbers,
                                            batch_settings, change, claim_lines, core_overrides,
                                            errorbar, load_run_policy, one_thread, paired,
                                            paper_claim, pct, pyplot, rng, save_figure, separated,
                                            spread)

NAME = "beta"
TITLE = "KL coefficient beta: constant or annealed (TB)"
CLAIM = (f"{PAPER}, Eq. 2 and Sec. 4: the TB target pi_ref exp(r/beta) moves away from the "
         f"reference as beta falls; the paper anneals beta from a larger to a smaller value.")
DEPARTURES = [
    "The kit's default beta (read from `tb.beta`) and a smaller constant on 0/1 rewards, not "
    "the paper's GSM8K values (0.014 -> 0.004 over 500 updates), and far fewer updates (see "
    "the settings above).",
    "KL is a Monte Carlo estimate on held-out prompts: the mean over samples y ~ pi(.|x) of "
    "log pi(y|x) - log pi_ref(y|x) (sequence sums at the sampling temperature, as in training).",
]
# The paper's claim and setting of both claims (module docstring).
PAPER_BETA = ("Eq. 2, the TB target pi_ref exp(r/beta) moves from the reference as beta falls; "
              "Sec. 4 anneals beta down on GSM8K to trust the reward more later")
KL_DELTA = 0.05  # nats per response: one KL estimate's standard error (module docstring)


# ------------------------------------------------------------------------------- the estimate
def kl_estimate(token_logps, ref_token_logps, mask) -> float:
    """Monte Carlo KL(pi || pi_ref) in nats per response from samples y ~ pi (Eq. 2's KL).

    Args:
        token_logps: (N, R) float log pi(y_t | x, y_<t) of N sampled responses.
        ref_token_logps: (N, R) float, the same tokens under the reference policy.
        mask: (N, R) bool/0-1, True on response tokens (padding False).

    Returns:
        mean over the N rows of sum_t mask * (log pi - log pi_ref), a float. It is unbiased
        for the KL when the rows are samples of pi; a single estimate can be negative.
    """
    diff = (token_logps - ref_token_logps) * mask
    return float(diff.sum(dim=1).mean())


def kl_to_reference(policy, reference, backend, task, problems: list, k: int,
                    max_new_tokens: int, temperature: float) -> dict:
    """KL of ``policy`` to ``reference`` on ``problems``: K responses each sampled from
    ``backend`` (which must hold ``policy``) at ``temperature``, scored under both with
    :func:`~tba_lab.rollout.scoring.response_logprobs` at the same temperature.

    Returns:
        ``{"kl": nats per response (:func:`kl_estimate`), "kl_se": its standard error over the
        rows, "n": rows}``.

    Raises:
        ValueError: ``problems`` empty or ``temperature`` <= 0.
    """
    import torch

    from tba_lab.rollout import rollout
    from tba_lab.rollout.scoring import response_logprobs

    if temperature <= 0:
        raise ValueError(f"temperature={temperature}: the KL estimate needs samples (> 0)")
    batch = rollout(backend, task, problems, k, temperature, max_new_tokens)
    prompts = [r.prompt_ids for r in batch.rollouts]
    responses = [r.response_ids for r in batch.rollouts]
    pad = backend.tokenizer.pad_token_id
    with torch.no_grad():
        lp, mask = response_logprobs(policy, prompts, responses, pad, temperature)
        lr, _ = response_logprobs(reference, prompts, responses, pad, temperature)
    per_row = ((lp - lr) * mask).sum(dim=1)
    n = per_row.numel()
    se = float(per_row.std() / math.sqrt(n)) if n > 1 else float("nan")
    return {"kl": kl_estimate(lp, lr, mask), "kl_se": se, "n": n}


# ------------------------------------------------------------------------------- experiment
def default_beta() -> float:
    """``tb.beta`` of a default config (read from the code, not copied)."""
    from tba_lab.algorithms import TBConfig

    return float(TBConfig().beta)


def settings(smoke: bool) -> dict:
    common = {"beta_default": default_beta(), "beta_small": 0.03}
    if smoke:
        return {**common, "max_steps": 4, "eval_size": 50, "max_minutes": 3.0, "kl_prompts": 8,
                "kl_k": 4, **batch_settings(True)}
    return {**common, "max_steps": FULL_UPDATES, "eval_size": 200, "max_minutes": 10.0,
            "kl_prompts": 50, "kl_k": 8, **batch_settings(False)}


def variants(s: dict) -> list[tuple[str, dict]]:
    b0, b1 = s["beta_default"], s["beta_small"]
    tb = {"const_default": {"beta": b0}, "const_small": {"beta": b1},
          "annealed": {"beta": b0, "beta_final": b1, "beta_anneal_steps": int(s["max_steps"])}}
    return [(label, merge(core_overrides(s), {"algo": "tb", "tb": opts,
                                              "async": {"mode": "async", "num_searchers": 1}}))
            for label, opts in tb.items()]


def label_text(label: str, s: dict) -> str:
    b0, b1 = s["beta_default"], s["beta_small"]
    return {"const_default": f"beta {b0:g}", "const_small": f"beta {b1:g}",
            "annealed": f"beta {b0:g} -> {b1:g}"}[label]


def estimate_seconds(s: dict, n_seeds: int, smoke: bool) -> float:
    per_run = (SMOKE_RUN_SECONDS + 1.0 if smoke else
               RUN_OVERHEAD_SECONDS + 3.0 + 60.0 * s["max_steps"] / UPDATES_PER_MINUTE)
    return n_seeds * len(variants(s)) * per_run


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    """Basic numbers, the beta in force at the last update and the KL to the reference."""
    import torch

    from tba_lab.models import load_policy
    from tba_lab.runlog import read_jsonl_rows

    cfg, policy, ref_path, backend, task, held_out = load_run_policy(run_dir)
    reference = load_policy(ref_path)[0].eval()
    torch.manual_seed(int(summary["seed"]))
    with one_thread():
        kl = kl_to_reference(policy, reference, backend, task, held_out[:s["kl_prompts"]],
                             s["kl_k"], cfg.model.max_new_tokens, cfg.model.temperature)
    last = (read_jsonl_rows(Path(run_dir) / "metrics.jsonl") or [{}])[-1]
    return {"beta_last": last.get("beta"), **basic_numbers(summary, s), **kl}


def analyse(runs: list[dict], s: dict) -> dict:
    cells = []
    for label, _ in variants(s):
        rows = [r for r in runs if r["variant"] == label]
        cells.append({"variant": label, "text": label_text(label, s),
                      **{k: spread([r[k] for r in rows]) for k in ("accuracy_after", "gain", "kl")}})
    return {"cells": cells, "beta_default": s["beta_default"], "beta_small": s["beta_small"],
            "kl_prompts": s["kl_prompts"], "kl_k": s["kl_k"], "claims": claims(runs, s)}


def claims(runs: list[dict], s: dict) -> list[dict]:
    """The claims of the module docstring from ``runs`` (results.json's rows: ``variant``,
    ``seed``, ``kl`` in nats per response, ``accuracy_after`` a fraction), the smaller constant
    beta (``const_small``) minus the default (``const_default``) paired by seed."""
    def per_seed(variant, key):
        return {r["seed"]: r.get(key) for r in runs if r["variant"] == variant}

    b0, b1 = f"{s['beta_default']:g}", f"{s['beta_small']:g}"
    return [
        paper_claim("beta.kl", f"A smaller beta ({b1}) moves the policy further from the "
                    f"reference than the default ({b0})", PAPER_BETA, f"mean over seeds of the "
                    f"KL to the reference at beta {b1} minus at beta {b0}, same seed, equal "
                    f"updates", paired(per_seed("const_small", "kl"), per_seed("const_default", "kl")),
                    +1, KL_DELTA, "nats", digits=2),
        paper_claim("beta.accuracy", f"A smaller beta ({b1}) raises held-out accuracy over the "
                    f"default ({b0})", PAPER_BETA, f"mean over seeds of the accuracy at beta {b1} "
                    f"minus at beta {b0}, same seed, equal updates",
                    paired(per_seed("const_small", "accuracy_after"),
                           per_seed("const_default", "accuracy_after")),
                    +1, GAIN_DELTA, "points", scale=100.0),
    ]


def _rank(value: float, others: list[float]) -> str:
    """Where ``value`` stands among itself and ``others`` (two constants)."""
    if all(value > o for o in others):
        return "the highest of the three"
    if all(value < o for o in others):
        return "the lowest of the three"
    if value == max(others):
        return "tied for the highest"
    if value == min(others):
        return "tied for the lowest"
    return "between the two constants"


def readings(a: dict) -> list[str]:
    """Sentences read off the numbers of :func:`analyse`."""
    c = {x["variant"]: x for x in a["cells"]}
    if any(v[m]["n"] == 0 for v in c.values() for m in ("accuracy_after", "kl")):
        return ["Some runs have no numbers; see the table."]
    hi, lo, an = c["const_default"], c["const_small"], c["annealed"]
    kl = lambda v: f"{v:.2f}"  # noqa: E731
    out = [f"Final accuracy: " + ", ".join(f"{x['text']}: {rng(x['accuracy_after'])}"
                                           for x in a["cells"]) + ".",
           f"KL to the reference (nats per response, {a['kl_k']} samples of each of "
           f"{a['kl_prompts']} held-out prompts): "
           + ", ".join(f"{x['text']}: {rng(x['kl'], kl)}" for x in a["cells"]) + "."]
    k0, k1 = hi["kl"]["mean"], lo["kl"]["mean"]
    sep = "ranges separated" if separated(lo["kl"], hi["kl"]) else "within noise"
    if k1 > k0:
        out.append(f"Lowering the constant beta from {a['beta_default']:g} to {a['beta_small']:g} "
                   f"raises the KL ({kl(k0)} -> {kl(k1)}, {sep}), as Eq. 2 predicts: the target "
                   f"pi_ref exp(r/beta) moves away from the reference as beta falls.")
    else:
        out.append(f"Lowering the constant beta from {a['beta_default']:g} to {a['beta_small']:g} "
                   f"does not raise the KL here ({kl(k0)} -> {kl(k1)}, {sep}), against Eq. 2's "
                   f"prediction for the fitted target; the runs may be too short to approach it.")
    a0, a1 = hi["accuracy_after"]["mean"], lo["accuracy_after"]["mean"]
    way = change(a0, a1, pct, "accuracy")
    sep = separated(lo["accuracy_after"], hi["accuracy_after"])
    out.append(f"The smaller constant {way} ({pct(a0)} -> {pct(a1)}, "
               f"{'ranges separated' if sep else 'within noise'}).")
    acc_rank = _rank(an["accuracy_after"]["mean"], [a0, a1])
    kl_rank = _rank(an["kl"]["mean"], [k0, k1])
    overlaps = [x["text"] for x in (hi, lo)
                if not separated(an["accuracy_after"], x["accuracy_after"])]
    out.append(f"Annealed beta: accuracy {pct(an['accuracy_after']['mean'])} is {acc_rank}"
               + (f" (range overlaps {' and '.join(overlaps)})" if overlaps
                  else " (ranges separated)") + f"; KL {kl(an['kl']['mean'])} is {kl_rank}.")
    if acc_rank == "the highest of the three" and not overlaps:
        verdict = "supports annealing: it gives the best accuracy, clear of both constants"
    elif acc_rank == "the highest of the three":
        verdict = "leans towards annealing (best mean accuracy) but within the seed noise"
    else:
        verdict = "does not show an accuracy benefit of annealing at this length"
    out.append(f"The paper anneals beta; this miniature {verdict}.")
    return out + claim_lines(a.get("claims", []))


def figures(a: dict, out: Path) -> list[tuple[str, str]]:
    """``beta.png``: (a) accuracy and (b) KL to the reference per beta setting."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    xs = list(range(len(a["cells"])))
    for i, cell in enumerate(a["cells"]):
        errorbar(ax1, [i], [cell["accuracy_after"]], color=f"C{i}")
        errorbar(ax2, [i], [cell["kl"]], scale=1.0, color=f"C{i}")
    ax1.set(ylabel="held-out greedy accuracy (%)", title="(a) accuracy after training")
    ax2.set(ylabel="KL(pi || pi_ref), nats per response",
            title=f"(b) KL to the reference ({a['kl_prompts']} prompts x {a['kl_k']} samples)")
    for ax in (ax1, ax2):
        ax.set_xticks(xs, [c["text"] for c in a["cells"]])
        ax.set_xlim(-0.5, len(xs) - 0.5)
        ax.grid(alpha=0.3)
    return save_figure(fig, out, "beta.png", "Accuracy and KL to the reference per beta setting; mean over seeds, "
                         "bars from the lowest to the highest seed.")


def table(a: dict) -> list[str]:
    lines = ["| beta | accuracy after | gain (points) | KL (nats) |", "|---|---|---|---|"]
    for c in a["cells"]:
        lines.append(f"| {c['text']} | {rng(c['accuracy_after'])} | "
                     f"{rng(c['gain'], lambda v: f'{100 * v:+.1f}')} | "
                     f"{rng(c['kl'], lambda v: f'{v:.3f}')} |")
    return lines
