"""Batched, masked, temperature-scaled log-probs of responses given prompts.

Layout of one batch (N rows): ``[left-padded prompt (P) | right-padded response (R)]``.
Position ids come from the attention mask (as ``generate`` computes them), so padded and
unpadded sequences get the same log-probs. Logits are divided by the sampling temperature
before ``log_softmax`` (docs/design.md sec. 1), for the policy and the reference alike, so log-probs
match the distribution the behaviour policy sampled from.

Devices: token ids are built on the CPU and moved to the model's device (:func:`model_device`);
the log-probs come back on that device (the trainer backpropagates through them), and callers
that put them into messages move them to the CPU.
"""
from __future__ import annotations

import functools

import torch

from tba_lab.losses import token_logprobs


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists to ``(N, P)`` ``input_ids`` and ``attention_mask`` (int64).

    Raises:
        ValueError: ``prompts`` is empty, or one prompt has no tokens.
    """
    if not prompts:
        raise ValueError("prompts is empty: give at least one prompt")
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i} has no tokens")
        ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p):] = 1
    return ids, mask


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


def model_device(model) -> torch.device:
    """The device of ``model``'s parameters (``model.device`` for a transformers model; the CPU
    for a module without parameters)."""
    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def cache_kwarg(model) -> str:
    """Name of the key/value-cache argument and output field of ``model.forward``: newer
    transformers call it ``cache``, older ones ``past_key_values``."""
    return _cache_kwarg_of(type(model))


@functools.lru_cache(maxsize=None)
def _cache_kwarg_of(model_class) -> str:
    import inspect

    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def response_logprobs(model, prompts: list[list[int]], responses: list[list[int]], pad_id: int,
                      temperature: float = 1.0, share_prompts: bool = True):
    """Per-token log-probs of each response under ``model`` at ``temperature``.

    Gradients flow when called outside ``torch.no_grad()``.

    With ``share_prompts`` (default), nothing is computed twice:
      * rows that repeat a whole (prompt, response) pair (a group whose policy answered the
        same way twice) are scored once and the result is gathered back to every copy
        (indexing, so each copy's gradient is summed into the one pass, exactly as if the
        rows had run separately). The embedded model at temperature 0.6 starts with about
        5 distinct answers per group of 8, fewer as training sharpens it;
      * the remaining rows that repeat a prompt (a group of K responses) run the prompt
        through the model ONCE: its key/value cache is computed for the U distinct prompts,
        gathered to the rows (``index_select``, so gradients reach the prompt pass), and only
        the responses are run on top.
    Same log-probs as the full forward (up to float rounding); the prompt sharing alone costs
    about (U * P + N * R) / (N * (P + R)) of the compute: half on the embedded task, where
    prompts (~34 tokens) are longer than answers. TRL and the TBA reference code run every
    row in full.

    Args:
        model: a transformers causal LM.
        prompts: N token-id lists (no padding); equal lists are shared.
        responses: N non-empty token-id lists (the terminating EOS included, if any).
        pad_id: padding token id (may equal EOS: the mask, not the id, marks padding).
        temperature: the sampling temperature (> 0) the responses were drawn at.
        share_prompts: False runs every row in full (the reference path the tests compare to).

    Returns:
        token_logps (N, R) float32 (0 where masked) and response_mask (N, R) bool,
        R = the longest response, both on the model's device.

    Raises:
        ValueError: as :func:`collate`, or temperature <= 0.
    """
    if share_prompts and len(prompts) == len(responses):
        pairs = [(tuple(p), tuple(r)) for p, r in zip(prompts, responses)]
        distinct = list(dict.fromkeys(pairs))
        if len(distinct) < len(pairs):  # score each distinct pair once, gather to the copies
            where = {k: i for i, k in enumerate(distinct)}
            logps, r_mask = response_logprobs(model, [list(p) for p, _ in distinct],
                                              [list(r) for _, r in distinct], pad_id, temperature)
            rows = torch.tensor([where[k] for k in pairs], dtype=torch.long, device=logps.device)
            return logps[rows], r_mask[rows]
    keys = [tuple(p) for p in prompts]
    unique = list(dict.fromkeys(keys))
    if not share_prompts or len(unique) == len(keys):
        device = model_device(model)
        input_ids, attention_mask, r_mask, P = (x.to(device) if torch.is_tensor(x) else x
                                                for x in collate(prompts, responses, pad_id))
        R = r_mask.shape[1]
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                       use_cache=False, logits_to_keep=R + 1).logits  # (N, R+1, V): P-1 .. P+R-1
        logps = token_logprobs(logits[:, :R].float(), input_ids[:, P:], temperature)  # (N, R)
        return logps * r_mask, r_mask

    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    device = model_device(model)
    where = {k: i for i, k in enumerate(unique)}
    rows = torch.tensor([where[k] for k in keys], dtype=torch.long, device=device)  # (N,) row -> prompt
    p_ids, p_mask = (x.to(device) for x in left_pad([list(k) for k in unique], pad_id))  # (U, P)
    out = model(input_ids=p_ids, attention_mask=p_mask,
                position_ids=(p_mask.cumsum(-1) - 1).clamp(min=0), use_cache=True, logits_to_keep=1)
    cache_kw = cache_kwarg(model)  # "cache" (transformers >= 5.2x) or "past_key_values"
    cache = getattr(out, cache_kw)
    cache.reorder_cache(rows)                                            # (U, ...) -> (N, ...)
    first = out.logits[:, -1][rows]                                      # (N, V): predicts token 0
    ids, _, r_mask, _ = collate([[pad_id]] * len(responses), responses, pad_id)  # 1-token stand-in prompts
    ids, r_mask = ids.to(device), r_mask.to(device)
    r_ids, R = ids[:, 1:], r_mask.shape[1]                               # (N, R) responses, padded
    pm = p_mask[rows]                                                    # (N, P)
    position_ids = pm.sum(-1, keepdim=True) + torch.arange(R, device=device)  # continue after the prompt
    logits = first.unsqueeze(1)
    if R > 1:
        rest = model(input_ids=r_ids[:, :-1], attention_mask=torch.cat([pm, r_mask[:, :-1].long()], 1),
                     position_ids=position_ids[:, :-1], use_cache=True, **{cache_kw: cache}).logits
        logits = torch.cat([logits, rest], dim=1)                        # (N, R, V)
    logps = token_logprobs(logits.float(), r_ids, temperature)           # (N, R)
    return logps * r_mask, r_mask
