"""Exercises of notebook 01 (on-policy GRPO): token log-probs, the masked sequence log-probs of
responses from a Hugging Face model (``tba_lab.minimal.sequence_logprobs``), group advantages,
the clipped loss. The notebook's text states each specification in full."""
from __future__ import annotations

import functools

import torch

from tba_lab.lab.course import compare_gradient, exercise, from_minimal
from tba_lab.losses import group_advantages, grpo_loss, token_logprobs


# ---------------------------------------------------------------- 01.token_logprobs
def _token_logprobs_cases():
    g = torch.Generator().manual_seed(101)
    cases = []
    for (n, t, v), temp in (((2, 3, 5), 1.0), ((4, 6, 11), 0.6), ((3, 1, 7), 2.0)):
        logits = torch.randn(n, t, v, generator=g)
        ids = torch.randint(0, v, (n, t), generator=g)
        cases.append(((logits, ids), {"temperature": temp}))
    # large logits at a low temperature: log(softmax(...)) underflows to -inf, log_softmax does not
    logits = 60 * torch.randn(2, 4, 9, generator=g)
    ids = torch.randint(0, 9, (2, 4), generator=g)
    cases.append(((logits, ids), {"temperature": 0.6}))
    return cases


@exercise("01.token_logprobs",
          "temperature-scaled token log-probs, log softmax(logits / temperature)[target]",
          token_logprobs, _token_logprobs_cases, atol=1e-5)
def token_logprobs_stub(logits, target_ids, temperature=1.0):
    """Log-prob of each target token under softmax(logits / temperature).

    logits (N, T, V) float, target_ids (N, T) long -> (N, T) float32.
    """
    # YOUR CODE HERE
    raise NotImplementedError


# ---------------------------------------------------------------- 01.sequence_logprobs
@functools.cache
def embedded_policy():
    """The embedded tiny model (in eval mode) and its tokenizer, loaded once per process
    (checkers reuse them)."""
    from tba_lab.models import load_policy

    model, tok = load_policy()
    return model.eval(), tok


def _sequence_logprobs_cases():
    from tba_lab.tasks.arithmetic import ArithmeticTask

    model, tok = embedded_policy()
    task = ArithmeticTask()
    problems = task.load("test")[:6]
    prompts = [tok(task.format_prompt(p))["input_ids"] for p in problems]   # lengths differ
    g = torch.Generator().manual_seed(104)
    answers = [tok(f" #### {n}")["input_ids"] + [tok.eos_token_id] for n in (7, 42, 1234, 98765)]

    def responses(b, k):
        out = []
        for i in range(b * k):   # real answers and random token runs, 1 to 17 tokens: much padding
            n = int(torch.randint(1, 18, (1,), generator=g))
            out.append(answers[i % 4] if i % 3 == 0 else
                       torch.randint(3, len(tok), (n,), generator=g).tolist())
        return out
    return [((model, prompts[:2], responses(2, 3), tok.pad_token_id, 0.6), {}),
            ((model, prompts[2:5], responses(3, 2), tok.pad_token_id, 1.0), {}),
            ((model, prompts[5:], [[answers[1][-1]], answers[2]], tok.pad_token_id, 0.6), {}),
            ((model, prompts, responses(6, 1), tok.pad_token_id, 2.0), {})]


@exercise("01.sequence_logprobs",
          "masked sequence log-probs of responses from a Hugging Face model, with gradient",
          from_minimal("sequence_logprobs"), _sequence_logprobs_cases, compare=compare_gradient(
              True, "the result carries no gradient: the trainer backpropagates through it (no "
              "torch.no_grad(), no .detach(), no .item())", rtol=1e-4, atol=2e-3))
def sequence_logprobs_stub(model, prompts, responses, pad_id, temperature):
    """(N,) float32 with gradients: log pi(y|x) of each of the N = B*K ``responses``
    (prompt-major token-id lists) after its prompt, the sum over the response's own tokens of
    log softmax(logits / temperature), from a Hugging Face causal LM."""
    # YOUR CODE HERE
    raise NotImplementedError


# ---------------------------------------------------------------- 01.group_advantages
def _group_advantages_cases():
    g = torch.Generator().manual_seed(102)
    binary = (torch.rand(3 * 4, generator=g) < 0.4).float()               # B=3, K=4, exact match
    cont = torch.rand(2 * 8, generator=g)                                 # B=2, K=8
    equal = torch.full((8,), 0.35, dtype=torch.float32)        # its mean() != 0.35 in float32
    other = torch.tensor([0.0, 1.0, 0.5, 0.2, 0.9, 0.1, 0.3, 0.7])
    # groups of 4: all wrong, all right, mixed
    zeros_ones = torch.tensor([0.0] * 4 + [1.0] * 4 + [0.0, 1.0, 1.0, 0.0])
    return [((binary, 4), {}), ((cont, 8), {}), ((torch.cat([equal, other]), 8), {}),
            ((zeros_ones, 4), {}), ((cont, 4), {"eps": 1e-2})]


# the reference: group_advantages with its defaults, scale_rewards="group" and eps=1e-4
@exercise("01.group_advantages",
          "group-relative advantages (r - mean) / (std + eps), all-equal group = 0",
          group_advantages, _group_advantages_cases)
def group_advantages_stub(rewards, group_size, eps=1e-4):
    """GRPO advantages: (r - group mean) / (group std + eps), all-equal groups exactly 0.

    rewards (N,) with N = B * K prompt-major -> (N,) float.
    """
    # YOUR CODE HERE
    raise NotImplementedError


# ---------------------------------------------------------------- 01.clipped_surrogate
def _clipped_surrogate_reference(logps, behaviour_logps, advantages, mask, clip_eps=0.2):
    loss, _ = grpo_loss(logps, behaviour_logps, None, advantages, mask, clip_eps=clip_eps, beta=0.0,
                        loss_type="grpo")
    return loss


def _clipped_surrogate_cases():
    g = torch.Generator().manual_seed(103)
    cases = []
    for n, t, spread, eps in ((4, 5, 0.05, 0.2), (6, 7, 0.5, 0.2), (8, 3, 0.5, 0.1)):
        old = -torch.rand(n, t, generator=g) * 3                     # behaviour log-probs (< 0)
        new = old + spread * torch.randn(n, t, generator=g)          # some ratios outside the clip
        adv = torch.randn(n, generator=g)
        lengths = torch.randint(1, t + 1, (n,), generator=g)
        mask = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)   # right-padded responses
        cases.append(((new, old, adv, mask), {"clip_eps": eps}))
    # on-policy: ratio exactly 1, the loss is minus the mean advantage
    old = -torch.rand(4, 3, generator=g)
    adv = torch.tensor([1.0, -1.0, 0.5, 0.0])
    cases.append(((old.clone(), old, adv, torch.ones(4, 3, dtype=torch.bool)), {}))
    return cases


@exercise("01.clipped_surrogate",
          "GRPO's PPO-clipped surrogate loss, sequence-mean then batch-mean",
          _clipped_surrogate_reference, _clipped_surrogate_cases)
def clipped_surrogate_stub(logps, behaviour_logps, advantages, mask, clip_eps=0.2):
    """GRPO's clipped policy loss (no KL term), a 0-dim tensor: per token
    -min(ratio * A, clip(ratio, 1-eps, 1+eps) * A), mean over each sequence's response tokens,
    then over the N sequences; logps, behaviour_logps, mask (N, T), advantages (N,)."""
    # YOUR CODE HERE
    raise NotImplementedError
