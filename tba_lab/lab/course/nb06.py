"""Exercises of notebook 06 (explorer): the beta schedule, RLOO advantages, reading metrics."""
from __future__ import annotations

import numpy as np
import torch

from tba_lab.lab.course import Exercise
from tba_lab.losses import beta_schedule, rloo_advantages
from tba_lab.lab.widgets import moving_average


# ---------------------------------------------------------------- 06.beta_schedule
def beta_schedule_stub(step, beta_0, beta_final, anneal_steps):
    """KL coefficient beta at trainer update ``step``: linear from beta_0 (step 0) to
    beta_final (step anneal_steps), constant afterwards; anneal_steps == 0 means beta_final
    from the start. Returns a float."""
    # YOUR CODE HERE
    raise NotImplementedError


def beta_schedule_solution(step, beta_0, beta_final, anneal_steps):
    if anneal_steps == 0:
        return beta_final
    progress = min(step / anneal_steps, 1.0)
    return beta_0 + progress * (beta_final - beta_0)


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
    stub=beta_schedule_stub, solution=beta_schedule_solution, reference=beta_schedule,
    cases=_beta_cases)


# ---------------------------------------------------------------- 06.rloo_advantages
def rloo_advantages_stub(rewards, group_size, kl=None, beta=0.0):
    """Leave-one-out advantages (RLOO) with the KL folded into the reward.

    Args:
        rewards: (N,) float tensor, N = B * K, prompt-major (rows i*K .. i*K+K-1 = prompt i).
        group_size: K >= 2.
        kl: (N,) tensor of log pi_behaviour(y|x) - log pi_ref(y|x), or None.
        beta: KL coefficient >= 0.
    Returns:
        (N,) tensor: R_ij - mean of the OTHER K-1 shaped rewards of the same prompt, where
        R = rewards - beta * kl; a group whose shaped rewards are all equal gets exactly 0.
    """
    # YOUR CODE HERE
    raise NotImplementedError


def rloo_advantages_solution(rewards, group_size, kl=None, beta=0.0):
    shaped = rewards.float()
    if kl is not None:
        shaped = shaped - beta * kl
    R = shaped.view(-1, group_size)                          # (B, K)
    others = (R.sum(dim=1, keepdim=True) - R) / (group_size - 1)
    adv = R - others
    same = (R == R[:, :1]).all(dim=1, keepdim=True)          # all-equal group -> 0
    adv = torch.where(same, torch.zeros_like(adv), adv)
    return adv.view(-1)


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
    stub=rloo_advantages_stub, solution=rloo_advantages_solution, reference=rloo_advantages,
    cases=_rloo_cases)


# ---------------------------------------------------------------- 06.moving_average
def moving_average_stub(values, window):
    """Trailing moving average of a list of numbers (e.g. reward_mean of metrics.jsonl rows):
    out[i] = mean(values[max(0, i - window + 1) : i + 1]), same length as values; the first
    points average over what exists so far. Returns a numpy float array."""
    # YOUR CODE HERE
    raise NotImplementedError


def moving_average_solution(values, window):
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1): i + 1]
        out.append(sum(chunk) / len(chunk))
    return np.array(out, dtype=float)


def _ma_cases():
    rng = np.random.default_rng(7)
    return [
        (([1.0, 2.0, 3.0, 4.0, 5.0], 2), {}),
        ((list(rng.random(50)), 10), {}),
        ((list(rng.random(7)), 1), {}),
        ((list(rng.random(5)), 20), {}),                    # window longer than the data
    ]


MOVING_AVERAGE = Exercise(
    name="06.moving_average",
    description="trailing moving average of a metric over the last `window` updates",
    stub=moving_average_stub, solution=moving_average_solution, reference=moving_average,
    cases=_ma_cases)


EXERCISES = [BETA_SCHEDULE, RLOO_ADVANTAGES, MOVING_AVERAGE]
