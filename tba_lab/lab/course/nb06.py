"""Exercises of notebook 06 (explorer): two knobs of the explorer, the linear beta schedule and
RLOO's leave-one-out advantages; references in :mod:`tba_lab.losses`, which the trainer uses.
The notebook's exercise cells state each specification in full."""
from __future__ import annotations

import torch

from tba_lab.lab.course import exercise
from tba_lab.losses import beta_schedule, rloo_advantages


# ---------------------------------------------------------------- 06.beta_schedule
@exercise("06.beta_schedule", "linear annealing of the KL coefficient beta, then constant",
          beta_schedule, lambda: [
              ((0, 0.014, 0.004, 500), {}),
              ((250, 0.014, 0.004, 500), {}),
              ((500, 0.014, 0.004, 500), {}),
              ((2000, 0.014, 0.004, 500), {}),   # past the end: constant
              ((37, 1.0, 0.05, 100), {}),
              ((10, 0.1, 0.05, 0), {}),          # anneal_steps 0: beta_final from the start
              ((3, 0.02, 0.2, 10), {})])         # increasing is allowed
def beta_schedule_stub(step, beta_0, beta_final, anneal_steps):
    """beta at update ``step``: linear from ``beta_0`` to ``beta_final`` over ``anneal_steps``
    updates, then constant (a float)."""
    # YOUR CODE HERE
    raise NotImplementedError


# ---------------------------------------------------------------- 06.rloo_advantages
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


@exercise("06.rloo_advantages", "leave-one-out advantages on r - beta * kl, all-equal groups -> 0",
          rloo_advantages, _rloo_cases)
def rloo_advantages_stub(rewards, group_size, kl=None, beta=0.0):
    """(N,) float32: R_ij minus the mean of the other K-1 R of prompt i, R = rewards - beta * kl;
    rewards and kl (N,), N = B*K prompt-major; an all-equal group gets exactly 0."""
    # YOUR CODE HERE
    raise NotImplementedError
