"""Exercises of notebook 08 (preference tuning against a learned reward model): the
Bradley-Terry loss of reward-model training and the win rate with ties.

References live in :mod:`tba_lab.reward_model` (``bradley_terry_loss``) and
:mod:`tba_lab.tasks.preference` (``win_rate``), which the task and the RM training use.
"""
from __future__ import annotations

import math

import torch

from tba_lab.lab.course import Exercise
from tba_lab.reward_model import bradley_terry_loss
from tba_lab.tasks.preference import win_rate


# ---------------------------------------------------------------- 08.bradley_terry
def bradley_terry_stub(chosen, rejected):
    """Mean Bradley-Terry loss of N preference pairs.

    Args:
        chosen: (N,) float32 tensor, reward-model scores of the preferred responses; N >= 1.
        rejected: (N,) float32 tensor, scores of the other response of each pair.
    Returns:
        a 0-dim float32 tensor (shape (), not (1,) and not a Python float): the mean over
        pairs of -log sigmoid(chosen - rejected). Equal scores give log 2 per pair. Keep it
        stable for large score gaps: a gap of +100 gives about 0 and a gap of -100 about 100,
        never inf or nan.
    """
    # YOUR CODE HERE
    raise NotImplementedError


def _bt_cases():
    g = torch.Generator().manual_seed(8)
    cases = [((torch.tensor([1.0, 0.0, 3.0]), torch.tensor([0.0, 2.0, 3.0])), {})]  # hand-checked
    for n in (1, 5, 64):
        cases.append(((torch.randn(n, generator=g) * 2, torch.randn(n, generator=g) * 2), {}))
    cases.append(((torch.tensor([100.0, -100.0]), torch.tensor([-100.0, 100.0])), {}))  # stability
    return cases


BRADLEY_TERRY = Exercise(
    name="08.bradley_terry",
    description="Bradley-Terry loss: mean of -log sigmoid(r_chosen - r_rejected), stable",
    stub=bradley_terry_stub, reference=bradley_terry_loss,
    cases=_bt_cases)


# ---------------------------------------------------------------- 08.win_rate
def win_rate_stub(policy_scores, reference_scores):
    """The win rate of the policy's summaries against the references under a judge.

    Args:
        policy_scores: list of N numbers (floats or ints, N >= 1), the judge's score of the
            policy's summary of post i.
        reference_scores: list of N numbers, the judge's score of the reference summary of
            post i (pairs are compared position by position).
    Returns:
        a Python float in [0, 1] (not a tensor or array): the mean over posts of 1 (policy
        scores higher), 1/2 (exactly equal scores, e.g. 1 and 1.0) or 0 (lower); all ties
        give exactly 0.5.
    """
    # YOUR CODE HERE
    raise NotImplementedError


def _wr_cases():
    import random

    rng = random.Random(8)
    cases = [(([2.0, 1.0, 0.0, 1.5], [1.0, 1.0, 1.0, 1.5]), {}),     # win, tie, loss, tie
             (([1.0] * 5, [1.0] * 5), {}),                           # all ties: exactly 1/2
             (([3.0], [-1.0]), {})]
    for n in (7, 40):  # gold scores come in half points, so ties are common
        cases.append((([rng.choice((0, 0.5, 1, 1.5, 2)) for _ in range(n)],
                       [rng.choice((0.5, 1, 2)) for _ in range(n)]), {}))
    return cases


def _compare_float(got, want):
    if not isinstance(got, (int, float)) or not math.isclose(float(got), want, abs_tol=1e-9):
        return f"got {got!r}, expected {want:.6g}"
    return None


WIN_RATE = Exercise(
    name="08.win_rate",
    description="win rate against references: 1 per win, 1/2 per tie, averaged",
    stub=win_rate_stub, reference=win_rate,
    cases=_wr_cases, compare=_compare_float)


EXERCISES = [BRADLEY_TERRY, WIN_RATE]
