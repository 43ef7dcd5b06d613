"""Held-out evaluation: the task's metrics on greedy completions (exact-match accuracy for math).

Evaluation goes through the same :func:`tba_lab.rollout.rollout` as the searchers (K = 1,
temperature 0), with the response length the run is configured with
(``model.max_new_tokens``): a GSM8K run with 256 tokens is evaluated on 256-token answers.
Greedy answers end at the task's stop strings as sampled ones do (``Task.stop_strings``, e.g.
GSM8K's ``"Question:"``): a held-out answer is graded on its own ``####``, not on a question
the model went on to invent.
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


def sample_diversity(task, backend, problems: list, k: int, max_new_tokens: int,
                     temperature: float, batch_size: int = 50,
                     correct_at: float = 1.0) -> dict[str, float]:
    """How many DIFFERENT correct answers the policy samples: K responses per problem at
    ``temperature`` (TBA, arXiv 2503.18929, v1 abstract: off-policy sampling for diversity).

    Responses are compared as token sequences (the replay buffer's notion of a repeat), cut
    after the first EOS as :func:`~tba_lab.rollout.rollout` returns them; a response is correct
    when its reward is at least ``correct_at`` (1.0: an exact match on the math tasks).

    Args:
        task: a :class:`~tba_lab.tasks.Task`.
        backend: a :class:`~tba_lab.rollout.backend.GenerationBackend` holding the policy
            (put a torch policy in eval mode first; seed torch for repeatable samples).
        problems: P held-out problems as ``task.load("test")`` returns them.
        k: K responses sampled per problem, >= 1.
        max_new_tokens: response length cap, tokens (the run's ``model.max_new_tokens``).
        temperature: sampling temperature, > 0 (the run's ``model.temperature``).
        batch_size: problems per generation call.
        correct_at: the reward at or above which a response counts as correct.

    Returns:
        ``{"distinct_correct": mean over problems of the number of distinct correct responses
        (0..K), "distinct": mean number of distinct responses (1..K), "pass_at_k": fraction of
        problems with at least one correct response, "correct_fraction": fraction of the P*K
        responses that are correct, "n": P, "k": K}``. A row dropped for a NaN or infinite
        reward counts as neither distinct nor correct.

    Raises:
        ValueError: ``problems`` empty, ``k`` < 1 or ``temperature`` <= 0 (greedy decoding
            gives one response per problem, so there is no diversity to measure).
    """
    if not problems:
        raise ValueError("problems is empty: give at least one held-out problem")
    if k < 1:
        raise ValueError(f"k={k}: sample at least one response per problem")
    if temperature <= 0:
        raise ValueError(f"temperature={temperature}: diversity needs sampling (> 0); greedy "
                         f"decoding gives one response per problem")
    distinct, correct, n_correct = [], [], 0
    for start in range(0, len(problems), batch_size):
        chunk = problems[start:start + batch_size]
        batch = rollout(backend, task, chunk, k, temperature, max_new_tokens)
        seen: list[set] = [set() for _ in chunk]
        right: list[set] = [set() for _ in chunk]
        for r in batch.rollouts:  # prompt_id: index in chunk
            seen[r.prompt_id].add(tuple(r.response_ids))
            if r.reward >= correct_at:
                right[r.prompt_id].add(tuple(r.response_ids))
                n_correct += 1
        distinct += [len(s) for s in seen]
        correct += [len(s) for s in right]
    n = len(problems)
    return {"distinct_correct": sum(correct) / n, "distinct": sum(distinct) / n,
            "pass_at_k": sum(c > 0 for c in correct) / n, "correct_fraction": n_correct / (n * k),
            "n": n, "k": k}
