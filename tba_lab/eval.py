"""Held-out evaluation: the task's metrics on greedy completions (exact-match accuracy for math).

Evaluation goes through the same :func:`tba_lab.rollout.rollout` as the searchers (K = 1,
temperature 0), with the response length the run is configured with
(``model.max_new_tokens``): a GSM8K run with 256 tokens is evaluated on 256-token answers.
"""
from __future__ import annotations

from tba_lab.rollout import rollout


def evaluate(task, backend, problems: list, max_new_tokens: int, batch_size: int = 250) -> dict[str, float]:
    """``task.metrics`` of greedy completions to ``problems`` (e.g. ``{"accuracy": 0.346}``).

    A problem whose reward is NaN or infinite is left out of the metrics (``rollout`` drops it
    with a ``RuntimeWarning`` saying how many).

    Args:
        task: a :class:`~tba_lab.tasks.Task`.
        backend: a :class:`~tba_lab.rollout.backend.GenerationBackend` holding the policy
            (put a torch policy in eval mode first).
        problems: held-out problems as ``task.load("test")`` returns them.
        max_new_tokens: response length cap, tokens (use the run's ``model.max_new_tokens``).
        batch_size: problems per generation call.

    Raises:
        ValueError: ``problems`` is empty, or every reward is NaN or infinite.
    """
    if not problems:
        raise ValueError("problems is empty: evaluation needs at least one problem")
    scored, completions, rewards = [], [], []
    for start in range(0, len(problems), batch_size):
        chunk = problems[start:start + batch_size]
        batch = rollout(backend, task, chunk, 1, 0.0, max_new_tokens)
        scored += [chunk[r.prompt_id] for r in batch.rollouts]  # prompt_id: index in chunk
        completions += batch.completions
        rewards += batch.rewards
    if not rewards:
        raise ValueError(f"all {len(problems)} rewards of task {task.name!r} are NaN or infinite; "
                         "fix the reward function to return finite floats")
    return task.metrics(scored, completions, rewards)
