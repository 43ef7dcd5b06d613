"""Notebook 07 (experiment design, read against the noise): its exercises, the Monte Carlo KL
to the reference policy and the time to a target accuracy (references in
:mod:`tba_lab.lab.experiments`), and helpers that print and draw the recorded claims of
``docs/results/`` (:func:`~tba_lab.lab.experiments.common.claim_test` results).
"""
from __future__ import annotations

import torch

from tba_lab.lab.course import compare_value, exercise
from tba_lab.lab.experiments.beta import kl_estimate
from tba_lab.lab.experiments.common import signed, time_to_target


# ---------------------------------------------------------------- 07.time_to_target
def _rows(pairs):
    return [{"wall_seconds": t, "accuracy": a} for t, a in pairs]


@exercise("07.time_to_target",
          "seconds to a target accuracy, linear between the evaluations around the crossing",
          time_to_target, lambda: [((_rows(pairs), 0.40), {}) for pairs in (
              [(0, 0.35), (15, 0.38), (30, 0.44), (45, 0.47)],   # between 15 and 30
              [(30, 0.44), (0, 0.35), (15, 0.38)],               # unsorted rows
              [(0, 0.35), (15, 0.34), (30, 0.39)],               # never reached
              [(0, 0.42), (15, 0.39), (30, 0.45)],               # reached at the start
              [(0, 0.30), (10, 0.41), (20, 0.36), (30, 0.50)],   # FIRST crossing
              [(0, 0.30), (12, 0.40)])],                         # exactly on target
          compare=lambda got, want: compare_value(got, want, unit=" s"))
def time_to_target_stub(evals, target):
    """Seconds (a float) until the accuracy of ``evals`` ({"wall_seconds", "accuracy"} rows,
    any order) first reaches ``target``, linear between evaluations; None if never."""
    # YOUR CODE HERE
    raise NotImplementedError


# ---------------------------------------------------------------- 07.kl_estimate
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


@exercise("07.kl_estimate",
          "KL to the reference: mean over samples of the masked sum of log pi - log pi_ref",
          kl_estimate, _kl_cases)
def kl_estimate_stub(token_logps, ref_token_logps, mask):
    """KL(pi || pi_ref) in nats per response (a float): the mean over the N rows of the
    masked sum of log pi - log pi_ref; all (N, R), ``mask`` bool."""
    # YOUR CODE HERE
    raise NotImplementedError


# ---------------------------------------------------------------- the recorded claims
def print_claims(claims: list[dict]) -> None:
    """Print one block per claim (claim_test dicts with ``experiment`` added): the claim, the
    paper's, the estimand, the estimate with its 95% interval, the smallest detectable effect
    and of interest, and the verdict (``statement``, ``paper`` ... where present)."""
    for c in claims:
        d = c.get("digits", 1)
        mde = c["min_detectable_effect"]
        print(f"[{c['experiment']}] {c.get('statement', c['claim'])}")
        if c.get("paper"):
            print(f"    paper: {c['paper']}")
        if c.get("estimand"):
            print(f"    estimand: {c['estimand']}")
        if c.get("premise"):
            p = c["premise"]
            print(f"    premise: {p['condition']}: {'met' if p['met'] else 'NOT met'} "
                  f"({p['observed']})" + ("" if p["met"] else f"; a test needs {p['needs']}"))
        print(f"    estimate {signed(c['estimate'], d)} {c['unit']}, 95% interval "
              f"{signed(c['ci_low'], d)} to {signed(c['ci_high'], d)} over {c['n']} seed(s)"
              + (f" ({len(c['missing_seeds'])} left out)" if c.get("missing_seeds") else "")
              + f"; detectable {'n/a' if mde is None else f'{abs(mde):.{d}f}'}, of interest "
              f"{c['delta']:.{d}f}  ->  {c['verdict'].upper()}"
              + (f" ({c['reason']})" if c.get("reason") else ""))


def print_recorded(folder) -> dict:
    """Print a recorded sweep (``results.json`` of ``tba-lab experiment`` in ``folder``): its
    date, cores, seeds and design commit, the preset's own table where it has one (e.g. the
    dose-response of ``off_policy``; else the report's table of every variant's metrics, mean
    and range over seeds), and each claim with :func:`print_claims`. Returns the
    ``results.json`` dict (its ``figures`` are file names in ``folder``).

    Raises:
        FileNotFoundError: ``folder`` holds no ``results.json``.
    """
    import json
    from pathlib import Path

    from tba_lab.lab.experiments import module, table

    data = json.loads((Path(folder) / "results.json").read_text())
    mod = module(data["experiment"])
    print(f"`tba-lab experiment {data['experiment']}`, started {data['started']} on "
          f"{data.get('cores_available') or data['cores']} cores, seeds "
          f"{' '.join(map(str, data['seeds']))}; design commit "
          f"{(data.get('design_commit') or '')[:10] or 'not recorded'}\n")
    lines = (mod.extra_table(data["runs"], data["settings"]) if hasattr(mod, "extra_table")
             else table(data["experiment"], data["analysis"], data["settings"]))
    print("\n".join(line for line in lines if not line.startswith("#")).strip() + "\n")
    print_claims([{**c, "experiment": data["experiment"]} for c in data["analysis"]["claims"]])
    return data


VERDICT_COLOURS = {"supported": "C2", "contradicted": "C3", "negligible": "C0",
                   "inconclusive": "C7", "not testable here": "C1"}


def draw_claims(claims: list[dict], path):
    """A forest plot of ``claims`` (as :func:`print_claims`) saved to ``path`` (PNG), which it
    returns: each estimate and 95% interval over its delta, signed so that the paper's predicted
    side is to the right (``direction``; 0, a claim of no change, as measured), coloured by
    verdict; a claim without an interval (fewer than two seeds) is a lone dot."""
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
