"""Exercises of notebook 09 (red-teaming): the judge's floored log-reward and the mean pairwise
cosine distance of attack embeddings; references in :mod:`tba_lab.tasks.redteam`, which the
task's rewards and metrics use. The notebook's exercise cells state each specification in full."""
from __future__ import annotations

import torch

from tba_lab.lab.course import exercise
from tba_lab.tasks.redteam import answer_log_probability, log_reward, mean_pairwise_cosine_distance


# ---------------------------------------------------------------- 09.judge_log_reward
def judge_log_reward_reference(answers, threshold, scale, floor):
    """The package's reward for victim final answers (None = the victim gave no number)."""
    return [log_reward(answer_log_probability("" if a is None else f" #### {a}", threshold, scale),
                       floor) for a in answers]


@exercise("09.judge_log_reward",
          "reward = max(log sigmoid((answer - threshold) / scale), floor); no answer = floor",
          judge_log_reward_reference, lambda: [
              (([60.0, 64.0, 52.0, None], 60.0, 4.0, -5.0), {}),
              (([96.0, 20.0, 59.0, 61.0], 60.0, 4.0, -5.0), {}),
              (([-1000.0, 1000.0, 0.0], 60.0, 4.0, -30.0), {}),     # no overflow either way
              (([10.0, 11.0, 12.0], 12.0, 1.0, -1.5), {})])         # floor binds at 10
def judge_log_reward_stub(answers, threshold, scale, floor):
    """A list of floats: max(log sigmoid((answer - threshold) / scale), floor) per answer,
    exactly ``floor`` for None, without overflow for answers far from the threshold."""
    # YOUR CODE HERE
    raise NotImplementedError


# ---------------------------------------------------------------- 09.cosine_diversity
def _cos_cases():
    g = torch.Generator().manual_seed(9)
    return [
        ((torch.eye(3),), {}),                                      # orthogonal: 1
        ((torch.tensor([[1.0, 2.0], [2.0, 4.0]]),), {}),            # same direction: 0
        ((torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),), {}),
        ((torch.randn(6, 5, generator=g),), {}),
        ((torch.randn(4, 128, generator=g) + 3.0,), {}),            # similar rows: small
    ]


@exercise("09.cosine_diversity", "diversity = mean over pairs i < j of 1 - cos(e_i, e_j)",
          mean_pairwise_cosine_distance, _cos_cases)
def cosine_diversity_stub(embeddings):
    """A Python float: the mean over the pairs i < j of the (N, D) rows of 1 - cos(e_i, e_j)."""
    # YOUR CODE HERE
    raise NotImplementedError
