"""Exercises of notebook 08 (preference tuning against a learned reward model): the
Bradley-Terry loss of reward-model training and the win rate with ties; references in
:mod:`tba_lab.reward_model` and :mod:`tba_lab.tasks.preference`. The notebook's exercise cells
state each specification in full."""
from __future__ import annotations

import random

import torch

from tba_lab.lab.course import compare_value, exercise
from tba_lab.reward_model import bradley_terry_loss
from tba_lab.tasks.preference import win_rate


# ---------------------------------------------------------------- 08.bradley_terry
def _bt_cases():
    g = torch.Generator().manual_seed(8)
    cases = [((torch.tensor([1.0, 0.0, 3.0]), torch.tensor([0.0, 2.0, 3.0])), {})]  # hand-checked
    for n in (1, 5, 64):
        cases.append(((torch.randn(n, generator=g) * 2, torch.randn(n, generator=g) * 2), {}))
    cases.append(((torch.tensor([100.0, -100.0]), torch.tensor([-100.0, 100.0])), {}))  # stability
    return cases


@exercise("08.bradley_terry",
          "Bradley-Terry loss: mean of -log sigmoid(r_chosen - r_rejected), stable",
          bradley_terry_loss, _bt_cases)
def bradley_terry_stub(chosen, rejected):
    """0-dim float32 tensor: the mean over the (N,) pairs of -log sigmoid(chosen - rejected),
    stable for gaps of +-100."""
    # YOUR CODE HERE
    raise NotImplementedError


# ---------------------------------------------------------------- 08.win_rate
def _wr_cases():
    rng = random.Random(8)
    cases = [(([2.0, 1.0, 0.0, 1.5], [1.0, 1.0, 1.0, 1.5]), {}),     # win, tie, loss, tie
             (([1.0] * 5, [1.0] * 5), {}),                           # all ties: exactly 1/2
             (([3.0], [-1.0]), {})]
    for n in (7, 40):  # gold scores come in half points, so ties are common
        cases.append((([rng.choice((0, 0.5, 1, 1.5, 2)) for _ in range(n)],
                       [rng.choice((0.5, 1, 2)) for _ in range(n)]), {}))
    return cases


@exercise("08.win_rate", "win rate against references: 1 per win, 1/2 per tie, averaged",
          win_rate, _wr_cases,
          compare=lambda got, want: compare_value(got, want, python_float=True))
def win_rate_stub(policy_scores, reference_scores):
    """A Python float: the mean over the N pairs of 1 (policy higher), 1/2 (equal) or 0."""
    # YOUR CODE HERE
    raise NotImplementedError
