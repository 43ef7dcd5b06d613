"""A tokenizer whose stop string ``<|im_end|>`` is a special token but not an EOS id (as on
Qwen base checkpoints), and a tiny causal LM that says a fixed script after its prompt: the
pieces the special-stop tests of the rollout, the vLLM stand-in and the red-team victim share."""
from __future__ import annotations

import torch
from transformers import LlamaForCausalLM

from tba_lab.models import build_model, build_tokenizer
from tba_lab.tasks import format_prompt

QUESTION = "Ann has 2 pens and buys 3. How many?"
PROBLEM = {"question": QUESTION, "answer": "2 + 3 = 5\n#### 5"}
STOP = "<|im_end|>"
# A base model answers, emits the end-of-turn token, and goes on with a turn it made up.
ANSWER = " 2 + 3 = 5\n#### 5"
SAID = ANSWER + STOP + "\nTom has 3 apples and gets 4.\nSo 3 + 4 = 7\n#### 7"


def special_stop_tokenizer(extra_texts=()):
    """The kit's word-level tokenizer covering the prompt and ``SAID`` (and ``extra_texts``),
    with ``<|im_end|>`` added as a SPECIAL token; EOS stays ``<eos>``."""
    tok = build_tokenizer([format_prompt(QUESTION), SAID.replace(STOP, " "), *extra_texts])
    assert tok.add_tokens([STOP], special_tokens=True) == 1
    assert tok.convert_tokens_to_ids(STOP) != tok.eos_token_id
    assert STOP not in tok.decode(tok(SAID, add_special_tokens=False)["input_ids"],
                                  skip_special_tokens=True)
    return tok


class ScriptedLM(LlamaForCausalLM):
    """A tiny Llama whose next token, once ``prompt_len`` tokens are in, is the next one of
    ``script`` (logit 0 against -1e4 for every other id, so greedy decoding and sampling at
    T = 1 both say it, with log-prob ~0), then EOS. Counts its forward calls."""

    def __init__(self, config, prompt_len: int, script: list[int], eos: int):
        super().__init__(config)
        self.prompt_len, self.script, self.eos, self.calls = prompt_len, list(script), eos, 0

    def forward(self, input_ids=None, cache=None, **kwargs):
        self.calls += 1
        seen_before = 0 if cache is None else cache.get_seq_length()
        out = super().forward(input_ids=input_ids, cache=cache, **kwargs)
        L = out.logits.shape[1]  # the last L input positions (logits_to_keep)
        logits = torch.full_like(out.logits, -1e4)
        for j in range(L):
            n = seen_before + input_ids.shape[1] - L + 1 + j - self.prompt_len  # tokens said so far
            if n >= 0:
                logits[:, j, self.script[n] if n < len(self.script) else self.eos] = 0.0
        out.logits = logits
        return out


def scripted_model(tok, said: str = SAID) -> ScriptedLM:
    """A :class:`ScriptedLM` that answers ``format_prompt(QUESTION)`` with ``said``."""
    base = build_model(tok, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    prompt_len = len(tok(format_prompt(QUESTION))["input_ids"])
    model = ScriptedLM(base.config, prompt_len, tok(said, add_special_tokens=False)["input_ids"],
                       tok.eos_token_id)
    model.generation_config = base.generation_config
    return model.eval()
