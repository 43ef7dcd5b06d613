"""Held-out evaluation: greedy exact-match accuracy on GSM8K-format problems."""
from __future__ import annotations

import torch

from tba_lab.rollout.backend import TransformersBackend
from tba_lab.tasks import format_prompt
from tba_lab.tasks.gsm8k import exact_match_reward


@torch.no_grad()
def greedy_accuracy(model, tokenizer, problems: list[dict], batch_size: int = 250,
                    max_new_tokens: int = 48) -> float:
    """Fraction in [0, 1] of ``problems`` (``{"question", "answer"}``) answered exactly right
    with greedy decoding. Puts ``model`` in eval mode (and leaves it there)."""
    if not problems:
        raise ValueError("problems is empty: evaluation needs at least one problem")
    model.eval()
    backend = TransformersBackend(model, tokenizer)
    correct = 0.0
    for start in range(0, len(problems), batch_size):
        chunk = problems[start:start + batch_size]
        prompts = tokenizer([format_prompt(p["question"]) for p in chunk])["input_ids"]
        responses = backend.generate(prompts, 1, temperature=0.0, max_new_tokens=max_new_tokens).responses
        texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
        correct += sum(exact_match_reward(t, p["answer"]) for t, p in zip(texts, chunk))
    return correct / len(problems)
