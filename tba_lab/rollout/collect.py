"""One rollout function: generate, decode, reward, arrange prompt-major rows, score the reference.

:func:`rollout` is the single path from problems to :class:`~tba_lab.buffer.Rollout` items; the
searchers, held-out evaluation (greedy, K = 1), the benchmarks and the notebooks all call it.
It returns a :class:`RolloutBatch`, which is also the message a searcher sends the trainer
(docs/design.md sec. 3).
"""
from __future__ import annotations

import inspect
import math
import time
import warnings
from dataclasses import dataclass

import torch

from tba_lab.buffer import Rollout, finite_logprobs
from tba_lab.rollout.backend import cut_responses
from tba_lab.rollout.scoring import response_logprobs


@dataclass
class RolloutBatch:
    """B prompts x K responses, prompt-major (rows i*K .. i*K+K-1 answer problem i).

    Rows whose reward is NaN or infinite are dropped (``nonfinite_rewards`` counts them), so a
    group may hold fewer than K rows; the order of the rest is unchanged.

    Attributes:
        rollouts: the N = B*K - nonfinite_rewards :class:`~tba_lab.buffer.Rollout` items,
            ready for the buffer.
        completions: the N decoded responses (special tokens removed, ended before the
            task's first stop string), what the task scored.
        version: the policy version (trainer updates) that generated them.
        searcher_id: which searcher sent it (0 outside a searcher).
        t_start, t_end: ``time.time()`` when generation began and scoring ended (seconds).
        gen_seconds: generation wall clock; score_seconds: decoding, rewards and the reference
            pass (seconds).
        nonfinite_rewards: rows dropped because the task returned a NaN or infinite reward
            for them, or raised on them alone (never trained on; a warning says how many).
        nonfinite_logprobs: rows (with a finite reward) dropped because a behaviour or
            reference log-prob is NaN or infinite (an engine's numerical fault; never trained
            on, a warning says how many). N above also excludes them.
        sync_seconds: the searcher's weight sync just before this batch: pulling the new
            version from the weight channel and loading it into the backend (seconds; 0.0 when
            no new version was published since its previous batch).
        node: where the searcher ran: the Ray node's IP address for a Ray actor, else the
            host name (:func:`tba_lab.actors.searcher.this_node`; "" outside a searcher).
    """
    rollouts: list[Rollout]
    completions: list[str]
    version: int
    searcher_id: int = 0
    t_start: float = 0.0
    t_end: float = 0.0
    gen_seconds: float = 0.0
    score_seconds: float = 0.0
    nonfinite_rewards: int = 0
    sync_seconds: float = 0.0
    nonfinite_logprobs: int = 0
    node: str = ""

    @property
    def rewards(self) -> list[float]:
        """The N raw rewards, prompt-major."""
        return [r.reward for r in self.rollouts]


def drop_nonfinite_logprobs(batch: RolloutBatch, where: str) -> int:
    """Drop, in place, the rows of ``batch`` whose log-probs are not finite
    (:func:`finite_logprobs`), with their completions; add their number to
    ``batch.nonfinite_logprobs`` and warn (``RuntimeWarning`` naming ``where``) when any.

    Returns:
        int, the rows dropped by this call.
    """
    keep = [n for n, r in enumerate(batch.rollouts) if finite_logprobs(r)]
    dropped = len(batch.rollouts) - len(keep)
    if dropped:
        batch.rollouts = [batch.rollouts[n] for n in keep]
        if len(batch.completions) == len(keep) + dropped:
            batch.completions = [batch.completions[n] for n in keep]
        batch.nonfinite_logprobs += dropped
        warnings.warn(f"{where}: {dropped} of {len(keep) + dropped} rows have a NaN or infinite "
                      f"behaviour or reference log-prob; those rows are dropped (never trained "
                      f"on); check the generation backend's log-probs", RuntimeWarning, stacklevel=3)
    return dropped


def _score(task, problems: list, completions: list[str]) -> tuple[list[float], int]:
    """``task.rewards`` of a batch as floats, and how many rows raised (0 when the batch call
    did not). If the batch call raises, each row is scored
    alone and a row that still raises gets NaN (so it is dropped and counted like a non-finite
    reward), with a warning naming the error: one bad completion or problem must not kill a
    searcher. When no row can be scored the batch's exception is raised (a broken reward
    function stops the searcher, and the trainer's failure policy takes over).

    Raises:
        ValueError: the task returned a number of rewards other than ``len(completions)``.
        Exception: the batch call's own exception, when no row scores.
    """
    n, failed = len(completions), 0
    try:
        rewards = [float(r) for r in task.rewards(problems, completions)]
    except Exception as batch_error:
        rewards = []
        for problem, completion in zip(problems, completions):
            try:
                [r] = task.rewards([problem], [completion])
                rewards.append(float(r))
            except Exception:
                rewards.append(math.nan)
                failed += 1
        if not any(math.isfinite(r) for r in rewards):
            raise batch_error
        warnings.warn(f"task {task.name!r}: rewards raised {type(batch_error).__name__}: "
                      f"{batch_error}; scored row by row, {failed} of {n} rows could not be "
                      f"scored and are dropped", RuntimeWarning, stacklevel=3)
    if len(rewards) != n:
        raise ValueError(f"task {task.name!r} returned {len(rewards)} rewards for {n} completions")
    return rewards, failed


@torch.no_grad()
def reference_logprobs(reference, prompts: list[list[int]], responses: list[list[int]],
                       pad_id: int, temperature: float) -> list[list[float]]:
    """Per-token log pi_ref(y_t | x, y_<t) of each response, at the sampling temperature (the
    pi_ref of the paper's Eq. 2, summed over tokens in the TB loss, Eq. 5; docs/design.md
    sec. 1): the reference pass, wherever it runs (``async.reference_pass``:
    in the searcher's :func:`rollout`, or in the trainer on the rows it samples: :func:`fill_reference`).

    Args:
        reference: the frozen reference policy (a causal LM).
        prompts, responses: N token-id lists each (no padding; responses non-empty).
        pad_id: the tokenizer's pad id; temperature: the sampling temperature (> 0).
    Returns:
        N lists of floats, ``len(responses[n])`` each (CPU, ready for a message or the buffer).
    Raises:
        ValueError: the lists differ in length, or a prompt or every response is empty.
    """
    ref, _ = response_logprobs(reference, prompts, responses, pad_id, temperature)  # (N, R)
    ref = ref.cpu()  # one transfer, not one per row
    return [ref[n, :len(r)].tolist() for n, r in enumerate(responses)]


def fill_reference(reference, rollouts: list[Rollout], pad_id: int, temperature: float) -> int:
    """Give each rollout that carries no reference log-probs its :func:`reference_logprobs`, in
    place (the trainer's reference pass, ``async.reference_pass: trainer``, on the rows of a
    sampled batch: they are the replay buffer's own objects, so a row is scored once however
    often it is replayed). One batched pass; a row that appears twice is scored once.

    Returns:
        int, the number of rollouts scored (0 when every row had its log-probs).
    Raises:
        ValueError: as :func:`reference_logprobs` (an empty prompt or response).
    """
    todo = list({id(r): r for r in rollouts if r.ref_token_logps is None}.values())
    if todo:
        ref = reference_logprobs(reference, [r.prompt_ids for r in todo],
                                 [r.response_ids for r in todo], pad_id, temperature)
        for r, logps in zip(todo, ref):
            r.ref_token_logps = logps
    return len(todo)


def _takes_stop(backend) -> bool:
    """Whether ``backend.generate`` accepts ``stop`` (a backend written before stop strings
    does not; its rows are still cut at them afterwards, only not stopped early)."""
    params = inspect.signature(backend.generate).parameters.values()
    return any(p.name == "stop" or p.kind is p.VAR_KEYWORD for p in params)


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

    Responses are cut after the first of the backend's ``eos_ids`` (any declared EOS; the
    tokenizer's EOS for a backend without the attribute) before they are decoded, scored and
    masked, so nothing past the end of a response reaches the reward or the loss. Likewise at
    the task's ``stop_strings`` (passed to the backend as ``stop``), special tokens included
    (``<|im_end|>`` where the tokenizer marks it special): the tokens through the one that
    completes the first stop string are kept, scored and masked (as an EOS is), and the text
    before the stop string, decoded without special tokens, is what the task grades
    (``completions``; :func:`~tba_lab.rollout.backend.cut_responses`).

    Returns:
        :class:`RolloutBatch` with B*K prompt-major rows, less those whose reward is NaN or
        infinite or could not be computed (the task raised on that row alone; see
        :func:`_score`): dropped with a ``RuntimeWarning``, counted in ``nonfinite_rewards``;
        and less those with a NaN or infinite behaviour or reference log-prob, dropped with a
        ``RuntimeWarning``, counted in ``nonfinite_logprobs``.

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
    stops = tuple(getattr(task, "stop_strings", ()) or ())
    gen = backend.generate(prompt_ids, K, temperature=temperature, max_new_tokens=max_new_tokens,
                           **({"stop": stops} if stops and _takes_stop(backend) else {}))
    t1 = time.time()
    eos_ids = getattr(backend, "eos_ids", None) or [tokenizer.eos_token_id]
    # B*K rows cut at the first EOS or stop string; the graded text ends before the stop string
    responses, completions = cut_responses(gen.responses, tokenizer, eos_ids, stops)
    behaviour = [lp[:len(r)] for lp, r in zip(gen.token_logps, responses)]  # [] when greedy
    rows = [j // K for j in range(B * K)]                                  # row -> problem index
    rewards, raised = _score(task, [problems[i] for i in rows], completions)  # raised: warned
    keep = [j for j in range(B * K) if math.isfinite(rewards[j])]         # kept rows, in order
    if len(keep) + raised < B * K:
        warnings.warn(f"task {task.name!r}: {B * K - len(keep) - raised} of {B * K} rewards are "
                      f"non-finite (NaN or inf); those rows are dropped (never trained on); fix "
                      f"the reward function to return finite floats", RuntimeWarning, stacklevel=2)
    ref = [None] * len(keep)
    if reference is not None and keep:
        ref = reference_logprobs(reference, [prompt_ids[rows[j]] for j in keep],
                                 [responses[j] for j in keep], tokenizer.pad_token_id, temperature)
    now = time.time()
    rollouts = [Rollout(prompt_id=ids[rows[j]], prompt_ids=prompt_ids[rows[j]],
                        response_ids=responses[j], reward=rewards[j], ref_token_logps=ref[n],
                        behaviour_token_logps=behaviour[j], version=version, created=now)
                for n, j in enumerate(keep)]
    batch = RolloutBatch(rollouts=rollouts, completions=[completions[j] for j in keep],
                         version=version, t_start=t0, t_end=now, gen_seconds=t1 - t0,
                         score_seconds=now - t1, nonfinite_rewards=B * K - len(keep))
    drop_nonfinite_logprobs(batch, f"task {task.name!r}, version {version}")
    return batch
