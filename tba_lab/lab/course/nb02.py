"""Notebook 02 (trajectory balance): its exercises (target distribution, VarGrad log Z, TB
loss) and a helper for reading its training curves."""
from __future__ import annotations

import torch

from tba_lab.lab.course import Exercise
from tba_lab.lab.course.toy import target_distribution
from tba_lab.losses import vargrad_log_z


def settled_from(tv, tol: float = 0.005) -> int | None:
    """First update from which TV(pi, pi*) stays below ``tol`` to the end of the run.

    tv: the TV distance after each update (a sequence of floats). Returns the index of that
    update, or None when the last value is not below ``tol``.
    """
    first = None
    for t in range(len(tv) - 1, -1, -1):
        if tv[t] >= tol:
            break
        first = t
    return first


# ----------------------------------------------------------------------------------------------
# 02.target_distribution
# ----------------------------------------------------------------------------------------------

def target_distribution_stub(ref_logprobs, rewards, beta):
    """pi*(y|x) proportional to pi_ref(y|x) * exp(r(x, y) / beta) (Eq. 2), normalised over M.

    ref_logprobs (..., M) log pi_ref of M candidates, rewards (..., M) -> (..., M) probabilities.
    """
    # YOUR CODE HERE
    raise NotImplementedError


def target_distribution_solution(ref_logprobs, rewards, beta):
    log_unnorm = ref_logprobs + rewards / beta             # log [pi_ref * exp(r / beta)]
    log_z = torch.logsumexp(log_unnorm, dim=-1, keepdim=True)  # log-partition, computed stably
    return torch.exp(log_unnorm - log_z)


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


TARGET_DISTRIBUTION = Exercise(
    name="02.target_distribution",
    description="pi* = pi_ref * exp(r / beta) / Z (Eq. 2), stable for small beta",
    stub=target_distribution_stub, solution=target_distribution_solution,
    reference=target_distribution, cases=_target_cases, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# 02.vargrad_log_z
# ----------------------------------------------------------------------------------------------

def vargrad_log_z_stub(logps, ref_logps, rewards, beta, group_size):
    """VarGrad log Z (Eq. 4): per prompt, the mean over its K responses of
    r/beta - log pi + log pi_ref.

    logps, ref_logps, rewards (N,) with N = B * K prompt-major -> (B,), detached.
    """
    # YOUR CODE HERE
    raise NotImplementedError


def vargrad_log_z_solution(logps, ref_logps, rewards, beta, group_size):
    terms = rewards / beta - logps.detach() + ref_logps    # (N,) one estimate of log Z per response
    return terms.view(-1, group_size).mean(dim=1)          # (B,) average within each prompt's group


def _detached_compare(got, want):
    """log Z_hat must carry no gradient (the sg[.] of Eq. 4), then match the reference."""
    from tba_lab.lab.course import _default_compare

    if isinstance(got, torch.Tensor) and got.requires_grad:
        return "the result carries a gradient: log Z_hat is detached (sg[.]): use .detach()"
    return _default_compare(got, want, rtol=1e-5, atol=1e-4)


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


VARGRAD_LOG_Z = Exercise(
    name="02.vargrad_log_z",
    description="VarGrad log-partition per prompt (Eq. 4)",
    stub=vargrad_log_z_stub, solution=vargrad_log_z_solution, reference=vargrad_log_z,
    cases=_tb_cases, rtol=1e-5, atol=1e-4, compare=_detached_compare)


# ----------------------------------------------------------------------------------------------
# 02.tb_loss
# ----------------------------------------------------------------------------------------------

def tb_loss_stub(logps, ref_logps, rewards, beta, group_size):
    """Trajectory balance loss with the VarGrad log Z (Eq. 3-5), mean over the N rows.

    logps (N,) current-policy sequence log-probs (with grad), ref_logps, rewards (N,),
    N = B * K prompt-major -> 0-dim tensor.
    """
    # YOUR CODE HERE
    raise NotImplementedError


def tb_loss_solution(logps, ref_logps, rewards, beta, group_size):
    with torch.no_grad():                                  # sg[log Z]: log Z gets no gradient
        log_z = (rewards / beta - logps + ref_logps).view(-1, group_size).mean(dim=1)  # (B,)
    log_z_rows = log_z.repeat_interleave(group_size)       # (N,) prompt i's log Z on its K rows
    residual = log_z_rows + logps - ref_logps - rewards / beta
    return (residual ** 2).mean()


def _tb_loss_reference(logps, ref_logps, rewards, beta, group_size):
    from tba_lab.minimal import trajectory_balance_loss as minimal_tb_loss

    return minimal_tb_loss(logps, ref_logps, rewards, beta, group_size)  # the loss minimal.py trains with


TB_LOSS = Exercise(
    name="02.tb_loss",
    description="trajectory balance loss with VarGrad log Z, batch mean (Eq. 3-5)",
    stub=tb_loss_stub, solution=tb_loss_solution, reference=_tb_loss_reference, cases=_tb_cases,
    rtol=1e-5, atol=1e-4)


EXERCISES = [TARGET_DISTRIBUTION, VARGRAD_LOG_Z, TB_LOSS]
