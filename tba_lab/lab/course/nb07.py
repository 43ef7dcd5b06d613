"""Exercises of notebook 07 (experiment design, read against the noise): the Monte Carlo KL to
the reference policy, which the notebook's sweep over seeds measures, and the time to a target
accuracy by linear interpolation, which it applies to the recorded scaling runs.

References live in :mod:`tba_lab.lab.experiments` (``beta.kl_estimate`` and
``common.time_to_target``), which the experiments' reports use. :func:`print_claims` and
:func:`draw_claims` print and draw the recorded claims the notebook reads from ``docs/results/``
(each a :func:`tba_lab.lab.experiments.common.claim_test` result); they compute nothing.
"""
from __future__ import annotations

import math

import torch

from tba_lab.lab.course import Exercise
from tba_lab.lab.experiments.beta import kl_estimate
from tba_lab.lab.experiments.common import time_to_target


# ---------------------------------------------------------------- 07.time_to_target
def time_to_target_stub(evals, target):
    """Seconds until the held-out accuracy first reaches ``target``.

    Args:
        evals: non-empty list of dicts with "wall_seconds" and "accuracy" (the evaluation
            before training is at 0 s). The rows may come in any order: sort them by time first.
        target: accuracy to reach, a fraction (0.40).
    Returns:
        a float of seconds, or None:
        * the earliest evaluation's time if it already reaches the target (>=);
        * else the time where the straight line between the last evaluation below the target
          and the FIRST one at or above it crosses the target; an accuracy exactly equal to
          the target counts as reached, and a later dip below it changes nothing;
        * None (not 0, not inf) if no evaluation reaches the target.
    """
    # YOUR CODE HERE
    raise NotImplementedError


def _rows(pairs):
    return [{"wall_seconds": t, "accuracy": a} for t, a in pairs]


def _ttt_cases():
    return [
        ((_rows([(0, 0.35), (15, 0.38), (30, 0.44), (45, 0.47)]), 0.40), {}),   # between 15 and 30
        ((_rows([(30, 0.44), (0, 0.35), (15, 0.38)]), 0.40), {}),               # unsorted rows
        ((_rows([(0, 0.35), (15, 0.34), (30, 0.39)]), 0.40), {}),               # never reached
        ((_rows([(0, 0.42), (15, 0.39), (30, 0.45)]), 0.40), {}),               # reached at the start
        ((_rows([(0, 0.30), (10, 0.41), (20, 0.36), (30, 0.50)]), 0.40), {}),   # FIRST crossing
        ((_rows([(0, 0.30), (12, 0.40)]), 0.40), {}),                           # exactly on target
    ]


def _compare_optional(got, want):
    if want is None or got is None:
        return None if got is want else f"got {got!r}, expected {want!r}"
    if not math.isclose(float(got), float(want), rel_tol=1e-6, abs_tol=1e-6):
        return f"got {float(got):.6g} s, expected {float(want):.6g} s"
    return None


TIME_TO_TARGET = Exercise(
    name="07.time_to_target",
    description="seconds to a target accuracy, linear between the evaluations around the crossing",
    stub=time_to_target_stub, reference=time_to_target,
    cases=_ttt_cases, compare=_compare_optional)


# ---------------------------------------------------------------- 07.kl_estimate
def kl_estimate_stub(token_logps, ref_token_logps, mask):
    """Monte Carlo KL(pi || pi_ref) in nats per response, from N responses sampled from pi.

    Args:
        token_logps: (N, R) float tensor, log pi of each response token; N >= 1 (N = 1 too).
        ref_token_logps: (N, R) float tensor, log pi_ref of the same tokens.
        mask: (N, R) bool tensor, True on response tokens, False on padding. Responses have
            different lengths (1 to R tokens); the values at padding positions are arbitrary
            and must not count.
    Returns:
        a Python float: the mean over the N responses (every row counts once, whatever its
        length) of the sum over its response tokens of (log pi - log pi_ref), in nats.
    """
    # YOUR CODE HERE
    raise NotImplementedError


def _kl_cases():
    g = torch.Generator().manual_seed(7)
    cases = []
    for n, r in ((4, 6), (8, 3), (1, 5)):
        lp = -torch.rand(n, r, generator=g) * 3
        ref = -torch.rand(n, r, generator=g) * 3
        lengths = torch.randint(1, r + 1, (n,), generator=g)
        mask = torch.arange(r)[None, :] < lengths[:, None]
        cases.append(((lp, ref, mask), {}))
    lp = torch.log(torch.tensor([[0.5, 0.5, 1.0], [0.5, 1.0, 1.0]]))
    ref = torch.log(torch.tensor([[0.25, 0.5, 1.0], [0.125, 1.0, 1.0]]))  # KL = 1.5 ln 2
    cases.append(((lp, ref, torch.tensor([[True, True, False], [True, False, False]])), {}))
    return cases


KL_ESTIMATE = Exercise(
    name="07.kl_estimate",
    description="KL to the reference: mean over samples of the masked sum of log pi - log pi_ref",
    stub=kl_estimate_stub, reference=kl_estimate,
    cases=_kl_cases)


EXERCISES = [TIME_TO_TARGET, KL_ESTIMATE]


# ---------------------------------------------------------------- the recorded claims
def _num(v, digits):
    return "n/a" if v is None else f"{v:+.{digits}f}"


def print_claims(claims: list[dict]) -> None:
    """One block per claim: where it was recorded, the claim, the paper's claim and setting,
    the estimand, the estimate with its 95% interval, the smallest effect the seeds could
    detect, the smallest of interest and the verdict.

    ``claims``: claim_test dicts (``estimate``, ``ci_low``, ``ci_high``,
    ``min_detectable_effect``, ``delta``, ``verdict``, ``n``, ``unit``), each with
    ``experiment`` (its folder) added; ``statement``, ``paper``, ``estimand``, ``digits`` and
    ``missing_seeds`` are printed where present."""
    for c in claims:
        d = c.get("digits", 1)
        mde = c["min_detectable_effect"]
        print(f"[{c['experiment']}] {c.get('statement', c['claim'])}")
        if c.get("paper"):
            print(f"    paper: {c['paper']}")
        if c.get("estimand"):
            print(f"    estimand: {c['estimand']}")
        print(f"    estimate {_num(c['estimate'], d)} {c['unit']}, 95% interval "
              f"{_num(c['ci_low'], d)} to {_num(c['ci_high'], d)} over {c['n']} seed(s)"
              + (f" ({len(c['missing_seeds'])} left out)" if c.get("missing_seeds") else "")
              + f"; detectable {'n/a' if mde is None else f'{abs(mde):.{d}f}'}, of interest "
              f"{c['delta']:.{d}f}  ->  {c['verdict'].upper()}")


VERDICT_COLOURS = {"supported": "C2", "falsified": "C3", "inconclusive": "C7"}


def draw_claims(claims: list[dict], path):
    """A forest plot of ``claims`` (as :func:`print_claims`) saved to ``path`` (PNG), which it
    returns: per claim the estimate and its 95% interval in units of its smallest effect of
    interest delta, signed so that the side the paper predicts is to the right (``direction``
    x estimate / delta; a claim of no change, direction 0, as measured), coloured by verdict;
    0 and +-1 marked. A claim without an interval
    (fewer than two seeds) is a lone dot."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 0.45 * len(claims) + 1.4))
    ax.axvspan(-1, 1, color="0.92", label="within +-delta")
    ax.axvline(0, color="k", lw=1)
    for i, c in enumerate(reversed(claims)):
        k = (c.get("direction", 1) or 1) / c["delta"]  # a claim of no change (0): as measured
        colour = VERDICT_COLOURS.get(c["verdict"], "k")
        if c["ci_low"] is not None:
            lo, hi = sorted((k * c["ci_low"], k * c["ci_high"]))
            ax.plot([lo, hi], [i, i], color=colour, lw=2)
        if c["estimate"] is not None:
            ax.plot([k * c["estimate"]], [i], "o", color=colour)
    labels = [f"[{c['experiment']}] {c.get('statement', c['claim'])}" for c in claims]
    labels = [x if len(x) <= 72 else x[:71] + "…" for x in labels]
    ax.set_yticks(range(len(claims)), list(reversed(labels)), fontsize=8)
    for verdict, colour in VERDICT_COLOURS.items():
        ax.plot([], [], color=colour, lw=2, label=verdict)
    ax.set(xlabel="estimate and 95% interval / delta (the paper's predicted side to the right)",
           title="Every recorded claim, judged by its rule")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
