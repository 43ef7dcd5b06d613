"""One rollout function: generate, decode, reward, arrange prompt-major rows, score the reference.

:func:`rollout` is the single path from problems to :class:`~tba_lab.buffer.Rollout` items; the
searchers, held-out evaluation (greedy, K = 1), the benchmarks and the notebooks all call it.
It returns a :class:`RolloutBatch`, which is also the message a searcher sends the trainer
(docs/design.md sec. 3).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from tba_lab.buffer import Rollout
from tba_lab.rollout.scoring import response_logprobs


@dataclass
class RolloutBatch:
    """B prompts x K responses, prompt-major (rows i*K .. i*K+K-1 answer problem i).

    Attributes:
        rollouts: the N = B*K :class:`~tba_lab.buffer.Rollout` items, ready for the buffer.
        completions: the N decoded responses (special tokens removed), what the task scored.
        version: the policy version (trainer updates) that generated them.
        searcher_id: which searcher sent it (0 outside a searcher).
        t_start, t_end: ``time.time()`` when generation began and scoring ended (seconds).
        gen_seconds: generation wall clock; score_seconds: decoding, rewards and the reference
            pass (seconds).
    """
    rollouts: list[Rollout]
    completions: list[str]
    version: int
    searcher_id: int = 0
    t_start: float = 0.0
    t_end: float = 0.0
    gen_seconds: float = 0.0
    score_seconds: float = 0.0

    @property
    def rewards(self) -> list[float]:
        """The N raw rewards, prompt-major."""
        return [r.reward for r in self.rollouts]


def rollout(backend, task, problems: list, num_generations: int, temperature: float,
            max_new_tokens: int, reference=None, version: int = 0,
            problem_ids: list[int] | None = None) -> RolloutBatch:
    """Sample ``num_generations`` responses to each problem and score them.

    Args:
        backend: a :class:`~tba_lab.rollout.backend.GenerationBackend` (owns the tokenizer).
        task: a :class:`~tba_lab.tasks.Task` (prompt format and batch reward).
        problems: B problems as the task loads them.
        num_generations: K responses per problem.
        temperature: sampling temperature (> 0), or 0 for greedy decoding (no behaviour
            log-probs then: such rollouts are for evaluation, not for the buffer).
        max_new_tokens: response length cap, tokens.
        reference: the frozen reference policy (a causal LM) to score each response under at
            ``temperature``, or None to skip the pass (``ref_token_logps=None``).
        version: the policy version the backend holds (tags every rollout).
        problem_ids: B ints identifying the problems (the buffer groups by them); default
            ``0 .. B-1``.

    Returns:
        :class:`RolloutBatch` with B*K prompt-major rows.

    Raises:
        ValueError: ``problems`` empty, ``problem_ids`` of another length, the task returned a
            number of rewards other than B*K, or a reference pass at temperature 0.
    """
    B, K = len(problems), num_generations
    if B == 0:
        raise ValueError("problems is empty: give at least one problem")
    ids = list(range(B)) if problem_ids is None else list(problem_ids)
    if len(ids) != B:
        raise ValueError(f"{len(ids)} problem_ids for {B} problems")
    if reference is not None and temperature <= 0:
        raise ValueError("reference log-probs need a sampling temperature > 0")
    tokenizer = backend.tokenizer
    t0 = time.time()
    prompt_ids = tokenizer([task.format_prompt(p) for p in problems])["input_ids"]  # B lists
    gen = backend.generate(prompt_ids, K, temperature=temperature, max_new_tokens=max_new_tokens)
    t1 = time.time()
    completions = tokenizer.batch_decode(gen.responses, skip_special_tokens=True)  # B*K strings
    rows = [j // K for j in range(B * K)]                                  # row -> problem index
    rewards = [float(r) for r in task.rewards([problems[i] for i in rows], completions)]
    if len(rewards) != B * K:
        raise ValueError(f"task {task.name!r} returned {len(rewards)} rewards for {B * K} completions")
    ref = None
    if reference is not None:
        with torch.no_grad():
            ref, _ = response_logprobs(reference, [prompt_ids[i] for i in rows], gen.responses,
                                       tokenizer.pad_token_id, temperature)  # (B*K, R)
    now = time.time()
    rollouts = [Rollout(prompt_id=ids[i], prompt_ids=prompt_ids[i], response_ids=resp,
                        reward=rewards[j],
                        ref_token_logps=None if ref is None else ref[j, :len(resp)].tolist(),
                        behaviour_token_logps=gen.token_logps[j], version=version, created=now)
                for j, (i, resp) in enumerate(zip(rows, gen.responses))]
    return RolloutBatch(rollouts=rollouts, completions=completions, version=version, t_start=t0,
                        t_end=now, gen_seconds=t1 - t0, score_seconds=now - t1)
