"""Exercises of notebook 06 (explorer): the linear beta schedule and RLOO's leave-one-out
advantages, two knobs of the explorer.

References live in :mod:`tba_lab.losses` (``beta_schedule``, ``rloo_advantages``), which the
trainer and the RLOO algorithm use.
"""
from __future__ import annotations

import torch

from tba_lab.lab.course import Exercise
from tba_lab.losses import beta_schedule, rloo_advantages


# ---------------------------------------------------------------- 06.beta_schedule
def beta_schedule_stub(step, beta_0, beta_final, anneal_steps):
    """KL coefficient beta at trainer update ``step`` (the checker's cases test each line).

    Args:
        step: trainer update count, an int >= 0; it may be past ``anneal_steps``.
        beta_0: beta at step 0, a float > 0.
        beta_final: beta from step ``anneal_steps`` on, a float > 0; it may be LARGER than
            beta_0 (the schedule then rises).
        anneal_steps: an int >= 0; 0 means beta_final from the start (no division by zero).
    Returns:
        a float: beta_0 + min(step / anneal_steps, 1) * (beta_final - beta_0), i.e. linear
        from beta_0 to exactly beta_final at step == anneal_steps, constant afterwards.
    """
    # YOUR CODE HERE
    raise NotImplementedError


def _beta_cases():
    return [
        ((0, 0.014, 0.004, 500), {}),
        ((250, 0.014, 0.004, 500), {}),
        ((500, 0.014, 0.004, 500), {}),
        ((2000, 0.014, 0.004, 500), {}),   # past the end: constant
        ((37, 1.0, 0.05, 100), {}),
        ((10, 0.1, 0.05, 0), {}),          # anneal_steps 0: beta_final from the start
        ((3, 0.02, 0.2, 10), {}),          # increasing is allowed
    ]


BETA_SCHEDULE = Exercise(
    name="06.beta_schedule",
    description="linear annealing of the KL coefficient beta, then constant",
    stub=beta_schedule_stub, reference=beta_schedule,
    cases=_beta_cases)


# ---------------------------------------------------------------- 06.rloo_advantages
def rloo_advantages_stub(rewards, group_size, kl=None, beta=0.0):
    """Leave-one-out advantages (RLOO) with the KL folded into the reward.

    Args:
        rewards: (N,) float32 tensor, N = B * K, prompt-major (rows i*K .. i*K+K-1 = prompt i);
            0/1 or any real values.
        group_size: K >= 2 (K = 2 included: the baseline is then the one other response).
        kl: (N,) float tensor of log pi_behaviour(y|x) - log pi_ref(y|x), or None (no KL term:
            R = rewards).
        beta: KL coefficient >= 0.
    Returns:
        (N,) float32 tensor (the dtype of ``rewards``), same order as the rows:
        A_ij = R_ij - mean of the OTHER K-1 shaped rewards of the same prompt, where
        R = rewards - beta * kl. A group whose shaped rewards are all equal (e.g. all 0.35)
        gets exactly 0, whatever its value; other groups of the same batch are unaffected.
    """
    # YOUR CODE HERE
    raise NotImplementedError


def _rloo_cases():
    g = torch.Generator().manual_seed(6)
    r = (torch.rand(4 * 8, generator=g) < 0.4).float()
    r[8:16] = 0.35                                            # an all-equal group
    return [
        ((r, 8), {}),
        ((torch.rand(3 * 4, generator=g), 4), {"kl": torch.randn(12, generator=g), "beta": 0.05}),
        ((torch.tensor([1.0, 0.0, 0.0, 1.0]), 2), {}),
        ((torch.full((6,), 0.35, dtype=torch.float32), 3), {}),
    ]


RLOO_ADVANTAGES = Exercise(
    name="06.rloo_advantages",
    description="leave-one-out advantages on r - beta * kl, all-equal groups -> 0",
    stub=rloo_advantages_stub, reference=rloo_advantages,
    cases=_rloo_cases)


EXERCISES = [BETA_SCHEDULE, RLOO_ADVANTAGES]
