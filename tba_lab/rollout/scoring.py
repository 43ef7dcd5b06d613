"""Batched, masked, temperature-scaled log-probs of responses given prompts.

Layout of one batch (N rows): ``[left-padded prompt (P) | right-padded response (R)]``.
Position ids come from the attention mask (as ``generate`` computes them), so padded and
unpadded sequences get the same log-probs. Logits are divided by the sampling temperature
before ``log_softmax`` (DESIGN sec. 1), for the policy and the reference alike, so log-probs
match the distribution the sampler drew from.
"""
from __future__ import annotations

import torch

from tba_lab.losses import token_logprobs
from tba_lab.rollout.backend import left_pad


def collate(prompts: list[list[int]], responses: list[list[int]], pad_id: int):
    """Stack prompt/response pairs.

    Returns:
        input_ids (N, P+R) int64, attention_mask (N, P+R) int64, response_mask (N, R) bool
        (True on response tokens, the terminating EOS included), and P (int).
    Raises:
        ValueError: when the two lists differ in length or a response is empty.
    """
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    p_ids, p_mask = left_pad(prompts, pad_id)
    width = max(len(r) for r in responses)
    if width == 0:
        raise ValueError("all responses are empty")
    r_ids = torch.full((len(responses), width), pad_id, dtype=torch.long)
    r_mask = torch.zeros((len(responses), width), dtype=torch.bool)
    for i, r in enumerate(responses):
        r_ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
        r_mask[i, :len(r)] = True
    input_ids = torch.cat([p_ids, r_ids], dim=1)
    attention_mask = torch.cat([p_mask, r_mask.long()], dim=1)
    return input_ids, attention_mask, r_mask, p_ids.shape[1]


def response_logprobs(model, prompts: list[list[int]], responses: list[list[int]], pad_id: int,
                      temperature: float = 1.0):
    """Per-token log-probs of each response under ``model`` at ``temperature``.

    Gradients flow when called outside ``torch.no_grad()``.

    Returns:
        token_logps (N, R) float32 (0 where masked) and response_mask (N, R) bool.
    """
    input_ids, attention_mask, r_mask, P = collate(prompts, responses, pad_id)
    R = r_mask.shape[1]
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   logits_to_keep=R + 1).logits  # (N, R+1, V): positions P-1 .. P+R-1
    logps = token_logprobs(logits[:, :R].float(), input_ids[:, P:], temperature)  # (N, R)
    return logps * r_mask, r_mask
