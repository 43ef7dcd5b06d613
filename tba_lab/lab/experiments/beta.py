"""Experiment ``beta``: the KL coefficient beta of TB, constant or annealed.

TB fits pi* ∝ pi_ref exp(r / beta) (TBA, Eq. 2), so a smaller beta moves the policy further
from the reference; the paper anneals beta. Here: async TB at the kit's default beta, a
smaller constant, and the default annealed to the smaller one; after training, greedy
accuracy and the KL to the reference on held-out prompts (:func:`kl_to_reference`, which the
trainer does not log). Claims, the smaller constant minus the default, paired by seed, both
predicted positive: the KL (smallest effect of interest 0.05 nats per response, one
estimate's standard error from 50 prompts x 8 samples) and the accuracy (3 points).
"""
from __future__ import annotations

import math
from pathlib import Path

from tba_lab.config import merge
from tba_lab.lab.experiments.common import (BATCH, FULL_UPDATES, GAIN_DELTA, PAPER, core_overrides,
                                            fixed, load_run_policy, one_thread, paired, paper_claim,
                                            pct, points, premise, sized)

NAME = "beta"
TITLE = "KL coefficient beta: constant or annealed (TB)"
CLAIM = (f"{PAPER}, Eq. 2 and Sec. 4: the TB target pi_ref exp(r/beta) moves away from the "
         f"reference as beta falls; the paper anneals beta from a larger to a smaller value.")
DEPARTURES = [
    "The kit's default beta (read from `tb.beta`) and a smaller constant on 0/1 rewards, not "
    "the paper's GSM8K values (0.014 -> 0.004 over 500 updates), and far fewer updates.",
    "KL is a Monte Carlo estimate on held-out prompts: the mean over samples y ~ pi(.|x) of "
    "log pi(y|x) - log pi_ref(y|x) (sequence sums at the sampling temperature, as in training).",
]
PAPER_BETA = ("Eq. 2, the TB target pi_ref exp(r/beta) moves from the reference as beta falls; "
              "Sec. 4 anneals beta down on GSM8K to trust the reward more later")
KL_DELTA = 0.05  # nats per response: one KL estimate's standard error (module docstring)


def kl_estimate(token_logps, ref_token_logps, mask) -> float:
    """Monte Carlo KL(pi || pi_ref) in nats per response (Eq. 2's KL): the mean over N
    responses sampled from pi of sum_t mask * (log pi - log pi_ref), from (N, R) token
    log-probs under both and the response mask. Unbiased, so one estimate can be negative."""
    diff = (token_logps - ref_token_logps) * mask
    return float(diff.sum(dim=1).mean())


def kl_to_reference(policy, reference, backend, task, problems: list, k: int,
                    max_new_tokens: int, temperature: float) -> dict:
    """KL of ``policy`` to ``reference`` on ``problems``: K responses each sampled from
    ``backend`` (which holds ``policy``), scored under both at ``temperature`` (> 0, else
    ValueError). ``{"kl": nats per response, "kl_se": its standard error, "n": rows}``."""
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


def settings(smoke: bool) -> dict:
    from tba_lab.algorithms import TBConfig

    return sized(smoke, beta_default=float(TBConfig().beta), beta_small=0.03,  # the kit's default
                 max_steps=(4, FULL_UPDATES), eval_size=(50, 200), max_minutes=(3.0, 10.0),
                 kl_prompts=(8, 50), kl_k=(4, 8), **BATCH)


def variants(s: dict) -> list[tuple[str, dict]]:
    b0, b1 = s["beta_default"], s["beta_small"]
    tb = {"const_default": {"beta": b0}, "const_small": {"beta": b1},
          "annealed": {"beta": b0, "beta_final": b1, "beta_anneal_steps": int(s["max_steps"])}}
    return [(label, merge(core_overrides(s), {"algo": "tb", "tb": opts,
                                              "async": {"mode": "async", "num_searchers": 1}}))
            for label, opts in tb.items()]


def metrics(s: dict) -> dict:
    return {"accuracy_after": ("held-out accuracy after training", pct),
            "gain": ("gain (points)", points),
            "kl": (f"KL to the reference (nats per response, {s['kl_k']} samples of "
                   f"{s['kl_prompts']} prompts)", fixed(3)),
            "beta_last": ("beta at the last update", fixed(3))}


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    """The beta in force at the last update and the KL to the reference."""
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
    return {"beta_last": last.get("beta"), **kl}


def equal_updates(runs: list[dict], a: str, b: str) -> dict:
    """Premise of a comparison at equal updates: every seed's two runs made as many updates."""
    steps = {(r["variant"], r["seed"]): r.get("trainer_steps") for r in runs}
    pairs = [(steps[a, k], steps.get((b, k))) for v, k in steps if v == a]
    same = bool(pairs) and all(x is not None and x == y for x, y in pairs)
    return premise("both settings made the same number of updates in every seed", same,
                   f"updates {sorted({x for p in pairs for x in p if x is not None})}",
                   "runs that reach their max_steps (a longer max_minutes)")


def claims(runs: list[dict], s: dict) -> list[dict]:
    """The claims of the module docstring: ``const_small`` minus ``const_default``."""
    b0, b1 = f"{s['beta_default']:g}", f"{s['beta_small']:g}"
    same = equal_updates(runs, "const_small", "const_default")
    return [
        paper_claim("beta.kl", f"A smaller beta ({b1}) moves the policy further from the "
                    f"reference than the default ({b0})", PAPER_BETA, f"mean over seeds of the "
                    f"KL to the reference at beta {b1} minus at beta {b0}, same seed, equal "
                    f"updates", paired(runs, "const_small", "const_default", "kl"), +1, KL_DELTA,
                    "nats", digits=2, premise=same),
        paper_claim("beta.accuracy", f"A smaller beta ({b1}) raises held-out accuracy over the "
                    f"default ({b0})", PAPER_BETA, f"mean over seeds of the accuracy at beta {b1} "
                    f"minus at beta {b0}, same seed, equal updates",
                    paired(runs, "const_small", "const_default", "accuracy_after"), +1,
                    GAIN_DELTA, "points", scale=100.0, premise=same),
    ]
