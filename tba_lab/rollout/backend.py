"""Generation backends: turn prompt token ids into K sampled responses per prompt.

:class:`GenerationBackend` is the seam for generation engines; :class:`TransformersBackend`
(``model.backend: transformers``) uses ``model.generate``. A backend is registered in
:data:`tba_lab.registry.BACKENDS` and built by :func:`make_backend`. It owns its tokenizer
(prompts in, token ids out) and receives new weights from the weight channel through
``load_weights`` with Hugging Face parameter names, the form an engine with its own copy of the
model (vLLM's ``model.load_weights``) accepts too.

Responses are returned as token-id lists cut right after the first EOS, of ANY id the checkpoint
declares (:func:`eos_token_ids`: a chat model's end-of-turn token ends a response as its EOS
does). The EOS is kept, so a tokenizer whose pad token equals its EOS token still has its
terminating EOS inside the response mask. A response that hit ``max_new_tokens`` has no EOS.

Devices: prompts go to the model's device; responses and log-probs come back as Python lists.

Sampling is plain softmax(logits / temperature) over the full vocabulary, the distribution the
trainer's loss and :func:`~tba_lab.rollout.scoring.response_logprobs` assume: nothing a
checkpoint's ``generation_config.json`` asks for (repetition penalty, banned words, top-k, ...)
applies (:func:`plain_generation_config`).
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Iterable, Protocol

import torch

from tba_lab.registry import BACKENDS
from tba_lab.rollout.scoring import cache_kwarg, left_pad, model_device


@dataclass
class Generations:
    """Output of one ``generate`` call, prompt-major (rows i*K..i*K+K-1 answer prompt i).

    responses: token ids per row, cut after the first EOS (kept).
    token_logps: per-token log-probs of each response under the BEHAVIOUR policy, i.e. the
        distribution the backend sampled from (softmax(logits / temperature)), same lengths as
        ``responses``; what an importance ratio needs. Empty lists for greedy decoding.
    """
    responses: list[list[int]]
    token_logps: list[list[float]]


class GenerationBackend(Protocol):
    """What a searcher (and evaluation) needs from a generation engine.

    Attributes:
        name: the ``model.backend`` value that selects it.
        tokenizer: a Hugging Face tokenizer with ``pad_token_id`` and ``eos_token_id`` set.
        eos_ids: every token id that ends a response (:func:`eos_token_ids`); responses are
            cut after the first of any of them. :func:`~tba_lab.rollout.rollout` falls back
            to ``[tokenizer.eos_token_id]`` for a backend without it.
    """
    name: str
    tokenizer: object
    eos_ids: list[int]

    @classmethod
    def build(cls, cfg, model, tokenizer) -> "GenerationBackend":
        """A backend for ``cfg.model`` around ``model`` (an engine may load ``cfg.model.path``)."""
        ...

    def generate(self, prompts: list[list[int]], num_generations: int, temperature: float,
                 max_new_tokens: int, stop: tuple[str, ...] = ()) -> Generations:
        """``len(prompts) * num_generations`` responses, prompt-major (rows i*K..i*K+K-1 answer
        prompt i); ``temperature == 0`` means greedy decoding. ``stop``: the task's stop
        strings; a row may end at the first (:func:`~tba_lab.rollout.rollout` passes it only
        when the task declares some and ``generate`` takes it, and cuts every row at a stop
        string afterwards either way)."""
        ...

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Replace the policy's parameters by ``(Hugging Face name, tensor)`` pairs."""
        ...


def make_backend(cfg, model, tokenizer) -> GenerationBackend:
    """The backend ``cfg.model.backend`` names, built around ``model`` and ``tokenizer``.
    Raises KeyError for an unknown name."""
    return BACKENDS.get(cfg.model.backend).build(cfg, model, tokenizer)


def cut_at_eos(tokens: list[int], eos_ids: int | Iterable[int]) -> list[int]:
    """``tokens`` up to and including the first of the ``eos_ids`` (one id or several; all of
    ``tokens`` if none occurs)."""
    stop = {eos_ids} if isinstance(eos_ids, int) else set(eos_ids)
    for i, t in enumerate(tokens):
        if t in stop:
            return tokens[: i + 1]
    return tokens


def cut_tokens_at_stop(tokens: list[int], tokenizer, stops: Iterable[str]) -> list[int]:
    """``tokens`` up to and including the token that completes the first of ``stops`` (a task's
    stop strings) in their decoded text; all of ``tokens`` when none occurs. The text is decoded
    WITH special tokens (``skip_special_tokens=False``): a stop string the tokenizer marks
    special (``<|im_end|>`` on Qwen base checkpoints, where it is not an EOS id) would
    otherwise be deleted before it could match. The stop string's tokens are kept, as an EOS
    is: the sampler drew them and stopped there, so they belong to the response's log-prob;
    what follows is not the response. Two decodes when the stop string ends at the last token
    (a sampler that stopped there), else the shortest such prefix is found by bisection (about
    log2(len) decodes).
    """
    stops = [s for s in stops if s]
    if not stops or not tokens:
        return tokens

    def has_stop(k: int) -> bool:
        text = tokenizer.decode(tokens[:k], skip_special_tokens=False)
        return any(s in text for s in stops)

    if not has_stop(len(tokens)) or not has_stop(len(tokens) - 1):
        return tokens  # no stop string, or it ends at the last token (a sampler that stopped)
    lo, hi = 1, len(tokens) - 1  # the shortest prefix holding a stop string has lo tokens
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if has_stop(mid) else (mid + 1, hi)
    return tokens[:lo]


def cut_responses(responses: list[list[int]], tokenizer, eos_ids: int | Iterable[int],
                  stops: Iterable[str] = ()) -> tuple[list[list[int]], list[str]]:
    """What each sampled row is as a response, and the text of it that is graded.

    Tokens: the row cut after its first EOS (any of ``eos_ids``, kept: :func:`cut_at_eos`),
    then after the token that completes the first of ``stops`` (kept:
    :func:`cut_tokens_at_stop`, which sees stop strings the tokenizer marks special). Text:
    those tokens decoded WITHOUT special tokens, so no EOS, pad or end-of-turn text reaches
    the grader, and ended before the first stop string
    (:func:`~tba_lab.tasks.cut_at_stop`): nothing the model said after the stop is graded.

    Args:
        responses: N token-id lists as a backend returns them (possibly run past a stop).
        tokenizer: the policy's tokenizer.
        eos_ids: one id or several that end a response.
        stops: the task's stop strings (``Task.stop_strings``).

    Returns:
        ``(tokens, texts)``: N token-id lists and N strings.
    """
    from tba_lab.tasks import cut_at_stop

    stops = tuple(s for s in stops if s)
    tokens = [cut_tokens_at_stop(cut_at_eos(r, eos_ids), tokenizer, stops) for r in responses]
    texts = [cut_at_stop(t, stops) for t in tokenizer.batch_decode(tokens, skip_special_tokens=True)]
    return tokens, texts


def stop_string_criteria(tokenizer, stops: Iterable[str], prompt_len: int):
    """A ``transformers`` stopping criterion that ends each row once its generated tokens
    (those past ``prompt_len``) decode to text holding any of ``stops``, special tokens
    included (a stop string the tokenizer marks special is seen). Only the last few
    tokens of a row are decoded each step (one more than the longest stop string has
    characters, so a stop string made of one-character tokens is still seen); a stop string
    split across more tokens than that is still cut by :func:`cut_tokens_at_stop` afterwards.

    Returns:
        a ``StoppingCriteriaList`` for ``generate(stopping_criteria=...)``.
    """
    from transformers import StoppingCriteria, StoppingCriteriaList

    stops = [s for s in stops if s]
    window = max(len(s) for s in stops) + 1

    class _StopStrings(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):  # input_ids: (N, prompt_len + t)
            tails = input_ids[:, prompt_len:][:, -window:].tolist()
            texts = tokenizer.batch_decode(tails, skip_special_tokens=False)
            return torch.tensor([any(s in t for s in stops) for t in texts],
                                dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([_StopStrings()])


def eos_token_ids(model, tokenizer) -> list[int]:
    """Every token id that ends a response: the tokenizer's ``eos_token_id``, then
    ``model.config.eos_token_id`` and ``model.generation_config.eos_token_id`` (each an int, a
    list of ints or None), in that order without repeats. Chat checkpoints declare their
    end-of-turn token there besides EOS (Llama 3: ``[128001, 128008, 128009]`` in
    ``generation_config.json``), and ``generate`` stops on any of them.

    Returns:
        list of ints, empty when nothing declares an EOS.
    """
    ids = []
    for source in (tokenizer, getattr(model, "config", None), getattr(model, "generation_config", None)):
        value = getattr(source, "eos_token_id", None)
        for i in [value] if isinstance(value, int) else (value or []):
            if int(i) not in ids:
                ids.append(int(i))
    return ids


def plain_generation_config(temperature: float, num_return_sequences: int, max_new_tokens: int,
                            eos_ids: list[int], pad_id: int):
    """A fresh ``transformers.GenerationConfig`` with only the kit's own settings.

    Sampling (``temperature > 0``): softmax(logits / temperature) over the full vocabulary
    (``top_k=0``, ``top_p=1.0``; transformers' default top_k is 50), the distribution the
    trainer's loss assumes (docs/design.md sec. 1); ``temperature == 0``: greedy. Raw logits are
    returned (``output_logits``) for the behaviour log-probs. Everything else keeps
    transformers' neutral defaults (repetition_penalty 1.0, no banned or suppressed tokens, no
    minimum length, ...). ``generate`` still fills this config's unset fields from
    ``model.generation_config``, so pass it inside :func:`_checkpoint_defaults_off`.

    Args:
        temperature: sampling temperature (> 0), or 0 for greedy decoding.
        num_return_sequences: rows generated per input row (K, or 1 when already expanded).
        max_new_tokens: response length cap, tokens.
        eos_ids: every token id that stops a row (:func:`eos_token_ids`).
        pad_id: the id finished rows are padded with.
    """
    from transformers import GenerationConfig

    greedy = temperature == 0
    sampling = {} if greedy else dict(temperature=temperature, top_k=0, top_p=1.0)
    return GenerationConfig(do_sample=not greedy, max_new_tokens=max_new_tokens,
                            num_return_sequences=num_return_sequences, eos_token_id=list(eos_ids),
                            pad_token_id=pad_id, return_dict_in_generate=True,
                            output_logits=not greedy, **sampling)


_SWAP_LOCK = threading.Lock()


@contextlib.contextmanager
def _checkpoint_defaults_off(model):
    """Inside the block ``model.generation_config`` is an empty ``GenerationConfig``, so
    ``generate(generation_config=...)`` fills the unset fields from transformers' neutral
    defaults, not from the checkpoint (transformers 5: ``_prepare_generation_config`` copies
    every ``None`` field of the passed config from ``model.generation_config``, e.g. a
    checkpoint's ``repetition_penalty``, ``bad_words_ids`` or ``suppress_tokens``). Restored
    after, so saving the model keeps the checkpoint's file; one thread at a time."""
    from transformers import GenerationConfig

    with _SWAP_LOCK:
        saved = model.generation_config
        model.generation_config = GenerationConfig()
        try:
            yield
        finally:
            model.generation_config = saved


@BACKENDS.register
class TransformersBackend:
    """Sampling with ``transformers`` ``generate`` (no top-k / top-p truncation).

    With K > 1 responses per prompt the prompt is prefilled once and its key/value cache copied
    to the K rows before ``generate`` continues (``share_prompts``; about a third less time per
    batch on the embedded task, same distribution).

    Only the kit's settings reach ``generate`` (:func:`plain_generation_config`: sampling or
    greedy, temperature, length cap, EOS and pad ids, K); whatever the checkpoint's
    ``generation_config.json`` asks for does not apply, and ``model.generation_config`` is left
    as loaded.

    Args:
        model: a causal LM (``PreTrainedModel``) in eval mode; updated in place by weight syncs.
        tokenizer: its tokenizer; ``pad_token_id`` must be set (may equal an EOS id).
        share_prompts: False expands the prompts K times before a full prefill (plain
            ``num_return_sequences``).

    Attributes:
        eos_ids: :func:`eos_token_ids` of ``model`` and ``tokenizer``; any of them stops a row.

    Raises:
        ValueError: no pad token, or no EOS id declared anywhere (responses could never end).
    """

    name = "transformers"

    def __init__(self, model, tokenizer, share_prompts: bool = True):
        self.model, self.tokenizer = model, tokenizer
        self.share_prompts = share_prompts
        self.pad_id, self.eos_ids = tokenizer.pad_token_id, eos_token_ids(model, tokenizer)
        if self.pad_id is None or not self.eos_ids:
            raise ValueError("the tokenizer needs pad_token_id set and an EOS id (tokenizer "
                             "eos_token_id, or eos_token_id in the model's config); "
                             "load the model with tba_lab.models.load_policy, which sets both")

    @classmethod
    def build(cls, cfg, model, tokenizer) -> "TransformersBackend":
        """Sample from ``model`` itself (its weights are the ones ``load_weights`` replaces)."""
        return cls(model, tokenizer)

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy ``(name, tensor)`` pairs into the model's parameters of those names.

        Raises:
            KeyError: a name the model does not have (the weights come from another model).
            ValueError: a shape that differs from the parameter's.
        """
        params = dict(self.model.named_parameters())
        for name, tensor in weights:
            if tensor is params.get(name):
                continue  # the policy itself (evaluation on the trainer's own model)
            if name not in params:
                raise KeyError(f"published parameter {name!r} is not in this searcher's model; "
                               "trainer and searchers must load the same model.path")
            if params[name].shape != tensor.shape:
                raise ValueError(f"parameter {name}: published shape {tuple(tensor.shape)}, "
                                 f"searcher's {tuple(params[name].shape)}; same model.path needed")
            params[name].copy_(tensor)

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], num_generations: int = 1,
                 temperature: float = 1.0, max_new_tokens: int = 48,
                 stop: tuple[str, ...] = ()) -> Generations:
        """Sample ``num_generations`` responses per prompt (``temperature == 0``: greedy).

        Args:
            prompts: N token-id lists (no padding), e.g. ``tokenizer(texts)["input_ids"]``.
            num_generations: K responses per prompt.
            temperature: sampling temperature (> 0), or 0 for greedy decoding.
            max_new_tokens: response length cap, tokens.
            stop: stop strings; a row stops at the token that completes the first of them in
                its decoded text, special tokens included (kept, with its log-prob;
                :func:`cut_tokens_at_stop`).
        Returns:
            :class:`Generations` with N*K prompt-major rows.
        Raises:
            ValueError: empty ``prompts`` or an empty prompt.
        """
        stop = tuple(s for s in stop if s)
        device = model_device(self.model)
        ids, mask = (x.to(device) for x in left_pad(prompts, self.pad_id))  # (N, P) on the model's device
        greedy, rows_per_prompt, extra = temperature == 0, num_generations, {}
        if num_generations > 1 and ids.shape[1] > 1 and self.share_prompts:
            # Shared prefill: the prompt (all but its last token) runs once per prompt, not K
            # times; its cache is copied to the K rows, and generate() continues from it.
            rows = torch.arange(len(prompts), device=device).repeat_interleave(num_generations)
            kw = cache_kwarg(self.model)
            pre = self.model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1],
                             position_ids=(mask[:, :-1].cumsum(-1) - 1).clamp(min=0),
                             use_cache=True, logits_to_keep=1)
            cache = getattr(pre, kw)
            cache.reorder_cache(rows)
            ids, mask, extra, rows_per_prompt = ids[rows], mask[rows], {kw: cache}, 1
        config = plain_generation_config(temperature, rows_per_prompt, max_new_tokens,
                                         self.eos_ids, self.pad_id)
        if stop:
            extra["stopping_criteria"] = stop_string_criteria(self.tokenizer, stop, ids.shape[1])
        with _checkpoint_defaults_off(self.model):
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                                      **extra)
        new = out.sequences[:, ids.shape[1]:]  # (N*K, S) with S <= max_new_tokens, prompt-major
        responses = [cut_tokens_at_stop(cut_at_eos(row, self.eos_ids), self.tokenizer, stop)
                     for row in new.cpu().tolist()]
        if greedy:
            return Generations(responses, [[] for _ in responses])
        logits = torch.stack(out.logits, dim=1).float() / temperature  # (N*K, S, V) raw logits
        logps = torch.log_softmax(logits, -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)  # (N*K, S)
        return Generations(responses, [row[:len(r)] for row, r in zip(logps.cpu().tolist(), responses)])
