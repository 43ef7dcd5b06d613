"""Notebook 02 (trajectory balance): its exercises (target distribution, VarGrad log Z, TB
loss, behaviour KL) and helpers that draw and print its training curves and sweeps."""
from __future__ import annotations

import torch

from tba_lab.lab.course import compare_gradient, exercise, from_minimal
from tba_lab.lab.course.toy import sequence_behaviour_kl, target_distribution
from tba_lab.lab.timeline import format_table
from tba_lab.losses import vargrad_log_z


def settled_from(tv, tol: float = 0.005) -> int | None:
    """Index of the first update from which ``tv`` (floats, one per update) stays below
    ``tol`` to the end, or None when the last value is not below it."""
    above = [t for t, v in enumerate(tv) if v >= tol]
    first = above[-1] + 1 if above else 0
    return first if first < len(tv) else None


# ---------------------------------------------------------------- 02.target_distribution
def _target_cases():
    g = torch.Generator().manual_seed(201)
    cases = []
    for shape, beta in (((5,), 1.0), ((3, 8), 0.5), ((2, 4, 6), 0.1)):
        ref = torch.log_softmax(torch.randn(*shape, generator=g), dim=-1)
        r = (torch.rand(*shape, generator=g) < 0.3).float()
        cases.append(((ref, r, beta), {}))
    # a small beta: exp(r / beta) = exp(200) overflows float32 unless you work in log space
    ref = torch.log_softmax(torch.randn(3, 5, generator=g), dim=-1)
    r = torch.tensor([[1.0, 0, 0, 0, 1.0], [0, 0, 0, 0, 0], [0.5, 1.0, 0, 0.2, 0]])
    cases.append(((ref, r, 0.005), {}))
    return cases


@exercise("02.target_distribution",
          "pi* = pi_ref * exp(r / beta) / Z (Eq. 2), stable for small beta",
          target_distribution, _target_cases)
def target_distribution_stub(ref_logprobs, rewards, beta):
    """(..., M) probabilities pi* proportional to pi_ref * exp(r / beta) (Eq. 2) over the M
    candidates; ref_logprobs (log pi_ref) and rewards (..., M)."""
    # YOUR CODE HERE
    raise NotImplementedError


# ------------------------------------------------------- 02.vargrad_log_z and 02.tb_loss
def _tb_cases():
    g = torch.Generator().manual_seed(202)
    cases = []
    for b, k, beta in ((1, 4, 1.0), (3, 4, 0.1), (2, 8, 0.05), (4, 2, 0.5)):
        n = b * k
        logps = (-torch.rand(n, generator=g) * 20).requires_grad_()  # sequence log-probs, with grad
        ref = logps.detach() + 0.5 * torch.randn(n, generator=g)
        r = (torch.rand(n, generator=g) < 0.4).float()
        cases.append(((logps, ref, r, beta, k), {}))
    return cases


@exercise("02.vargrad_log_z", "VarGrad log-partition per prompt (Eq. 4)", vargrad_log_z, _tb_cases,
          compare=compare_gradient(False, "the result carries a gradient: log Z_hat is detached "
                                   "(sg[.]): use .detach()", rtol=1e-5, atol=1e-4))
def vargrad_log_z_stub(logps, ref_logps, rewards, beta, group_size):
    """(B,) detached VarGrad log Z (Eq. 4): per prompt, the mean over its K responses of
    r/beta - log pi + log pi_ref; inputs (N,), N = B * K prompt-major."""
    # YOUR CODE HERE
    raise NotImplementedError


@exercise("02.tb_loss", "trajectory balance loss with VarGrad log Z, batch mean (Eq. 3-5)",
          from_minimal("trajectory_balance_loss"), _tb_cases, atol=1e-4)  # minimal.py's loss
def tb_loss_stub(logps, ref_logps, rewards, beta, group_size):
    """0-dim tensor: the trajectory balance loss with the VarGrad log Z (Eq. 3-5), mean over
    the N = B * K prompt-major rows; logps (N,) with grad, ref_logps, rewards (N,)."""
    # YOUR CODE HERE
    raise NotImplementedError


# ---------------------------------------------------------------- 02.behaviour_kl
def _behaviour_kl_cases():
    g = torch.Generator().manual_seed(204)
    cases = []
    for n_prompts, m, k, shift in ((1, 4, 8, 0.0), (4, 8, 16, 0.5), (3, 6, 4, 2.0), (2, 8, 32, 4.0)):
        mu_logits = torch.randn(n_prompts, m, generator=g)
        pi_logits = mu_logits + shift * torch.randn(n_prompts, m, generator=g)  # shift 0: fresh
        idx = torch.multinomial(torch.softmax(mu_logits, -1), k, replacement=True, generator=g)
        rows = torch.arange(n_prompts).repeat_interleave(k)
        mu_lp = torch.log_softmax(mu_logits, -1)[rows, idx.reshape(-1)]
        pi_lp = torch.log_softmax(pi_logits, -1)[rows, idx.reshape(-1)].requires_grad_()
        cases.append(((pi_lp, mu_lp), {}))
    return cases


@exercise("02.behaviour_kl", "staleness in nats: KL(mu || pi_theta) estimated on samples from mu",
          sequence_behaviour_kl, _behaviour_kl_cases)
def behaviour_kl_stub(logps, behaviour_logps):
    """A float: KL(mu || pi_theta) in nats, estimated on the N samples drawn from mu;
    logps (N,) log pi_theta(y|x) (may carry a gradient), behaviour_logps (N,) log mu(y|x)."""
    # YOUR CODE HERE
    raise NotImplementedError


# ---------------------------------------------------------------- section 5: draw and print

_LABELS = {"tb": ("TB", "C0"), "grpo_kl": ("GRPO-KL (clip)", "C3")}


def plot_lr_sweep(sweeps: dict, lag: int, path=None):
    """Two panels from ``{0: lr_sweep(..., lag=0), lag: lr_sweep(..., lag=lag)}`` (toy.py):
    TV(pi, pi*) against TB's learning rate (fresh dashed), and the stale runs' TV against their
    behaviour KL in nats. Saves to ``path`` when given; returns the figure."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    for method, (label, color) in _LABELS.items():
        for L, ls in ((0, "--"), (lag, "-")):
            s = sweeps[L][method]
            wide = L == 0 and method == "tb"  # drawn wide under GRPO-KL's fresh line, which it matches
            ax1.errorbar(s["lrs"], s["tv_mean"], yerr=s["tv_std"], color=color, ls=ls, marker="o",
                         capsize=3, lw=4 if wide else 1.5, alpha=0.5 if wide else 1,
                         label=f"{label}, {'fresh' if L == 0 else f'L = {L}'}")
        s = sweeps[lag][method]
        ax2.plot(s["behaviour_kl_mean"], s["tv_mean"], color=color, marker="o", label=f"{label}, L = {lag}")
        for kl, tv, lr in zip(s["behaviour_kl_mean"], s["tv_mean"], s["lrs"]):
            ax2.annotate(f"lr {lr:g}", (kl, tv), textcoords="offset points", xytext=(4, 4),
                         fontsize=7, color=color)
    lrs = sweeps[lag]["tb"]["lrs"]
    ax1.set_xscale("log")
    ax1.set_xticks(lrs, [f"{lr:g}" for lr in lrs])
    ax1.minorticks_off()
    ax1.set(xlabel="learning rate (TB's; GRPO-KL runs at lr x 2 / beta), plain SGD",
            title="Distance to pi* against the step size")
    ax2.set_xscale("symlog", linthresh=1e-4)  # symlog: a sample estimate of the KL can be <= 0
    ax2.set(xlabel="staleness in nats: mean behaviour KL(mu || pi_theta) of the run",
            title=f"The same stale runs (L = {lag}) in nats")
    for ax in (ax1, ax2):
        ax.set(ylabel="TV(pi, pi*), last quarter", ylim=(0, 1))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def print_lr_sweep(sweeps: dict, lag: int, converged: float = 0.05) -> dict:
    """Print the sweep's table (``sweeps`` as for :func:`plot_lr_sweep`) and its three
    findings, worded from the numbers; a run with TV below ``converged`` reached pi*. Returns
    the findings as numbers (for metrics.json)."""
    tb0, gk0, tb, gk = (sweeps[L][m] for L in (0, lag) for m in ("tb", "grpo_kl"))
    lrs = tb["lrs"]
    columns = {"TV TB fresh": tb0["tv_mean"], "TV GRPO-KL fresh": gk0["tv_mean"],
               f"TV TB L={lag}": tb["tv_mean"], f"TV GRPO-KL L={lag}": gk["tv_mean"],
               f"KL TB L={lag}": tb["behaviour_kl_mean"], f"KL GRPO-KL L={lag}": gk["behaviour_kl_mean"],
               f"clip fraction GRPO-KL L={lag}": gk["clip_fraction_mean"]}
    print("TV(pi, pi*) over the last quarter; KL: behaviour KL(mu || pi_theta), nats")
    print(format_table([{"lr": f"{lr:g}", **{c: v[i] for c, v in columns.items()}}
                        for i, lr in enumerate(lrs)], ["lr", *columns]))

    def listed(values, fmt):
        return ", ".join(format(v, fmt) for v in values) or "none"

    ok = [i for i, v in enumerate(tb0["tv_mean"]) if v < converged]  # TB reaches pi* on fresh data
    gap = max((abs(tb["tv_mean"][i] - tb0["tv_mean"][i]) for i in ok), default=float("nan"))
    print(f"\n1. Valid: where TB reaches pi* on fresh data (TV < {converged}: lr "
          f"{listed([lrs[i] for i in ok], 'g')}), TB on data {lag} updates stale ends at TV "
          f"{listed([tb['tv_mean'][i] for i in ok], '.3f')}: at most {gap:.1e} from fresh.")
    j = len(lrs) - 1                                                  # the largest learning rate
    a, f, c = tb["tv_mean"][j], tb0["tv_mean"][j], gk["tv_mean"][j]
    kl_tb, kl_gk = tb["behaviour_kl_mean"][j], gk["behaviour_kl_mean"][j]
    print(f"2. No trust region: at lr {lrs[j]:g}, TB on stale data ends at TV {a:.3f}, "
          f"{'further from' if a > f else 'no further from'} pi* than on fresh data ({f:.3f}); its "
          f"data were {kl_tb:.3g} nats stale, {kl_tb / kl_gk:.3g} times GRPO-KL's. GRPO-KL on the "
          f"same stale data ends at TV {c:.3f}, {'closer to' if c < a else 'no closer to'} pi* than TB.")
    costly = [i for i in ok if gk["tv_mean"][i] > tb["tv_mean"][i] + 0.01]
    print(f"3. The clip's cost: at {len(costly)} of the {len(ok)} learning rates of line 1 (lr "
          f"{listed([lrs[i] for i in costly], 'g')}), GRPO-KL on stale data ends more than 0.01 "
          f"further from pi* than TB (TV {listed([gk['tv_mean'][i] for i in costly], '.3f')} against "
          f"TB's {listed([tb['tv_mean'][i] for i in costly], '.3f')}).")
    return {"valid_max_gap": gap, "lr_largest": lrs[j], "tv_tb_stale_largest_lr": a,
            "tv_tb_fresh_largest_lr": f, "tv_grpo_kl_stale_largest_lr": c,
            "behaviour_kl_ratio_largest_lr": kl_tb / kl_gk, "clip_costly_lrs": len(costly),
            "converged_lrs": len(ok)}
