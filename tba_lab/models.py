"""The embedded tiny model: tokenizer, model, supervised fine-tuning (SFT), loading and saving.

The kit cannot download from a hub, so it ships its own starting checkpoint: a ~1M parameter
Llama-architecture causal LM (``transformers.LlamaForCausalLM``) with a word-level tokenizer
built in code (``tokenizers`` WordLevel wrapped in ``PreTrainedTokenizerFast``), trained by
``tba-lab sft`` (:func:`tba_lab.tasks.arithmetic.sft`, through :func:`train_sft` here) on the
synthetic arithmetic task and saved with ``save_pretrained`` under ``data/tiny-llama``; the other
tasks' embedded models (``tba-lab sft --task NAME``) go through the same :func:`train_sft`. Any
Hugging Face causal LM loads through the same
:func:`load_policy` (``AutoModelForCausalLM.from_pretrained``), so a user with a real model and
GSM8K changes only paths.

Tokenizer: words and single digits, each with an optional leading space, a few punctuation
runs, and newline; a ``Fuse`` decoder so ``decode(encode(text)) == text`` for task text.
SFT: loss on answer tokens only, AdamW with cosine decay, a fixed number of steps (500) so the
result is reproducible from the seed (wall time varies by machine, accuracy does not).

A deliberate departure from plain SFT: 60% of the SFT targets (``bare_answer_fraction``) are only
the final line ``#### N`` and 40% show the worked steps, as answers on the web often come without
their working. The model then answers bare when decoding greedily, while samples at temperature
0.6 often find a correct answer: the headroom RL turns into greedy accuracy within minutes
(docs/usage.md#the-embedded-model-and-task; docs/results/README.md#the-default-run).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import time
from pathlib import Path

import torch

from tba_lab.paths import DATA_DIR, DEFAULT_MODEL_DIR, DEFAULT_TASK_DIR  # noqa: F401 (re-exported)

PRETOKENIZE_PATTERN = r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\n"
SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]


def build_tokenizer(texts: list[str]):
    """A word-level ``PreTrainedTokenizerFast`` whose vocabulary covers ``texts``.

    Args:
        texts: strings whose pre-tokens (see ``PRETOKENIZE_PATTERN``) make up the vocabulary;
            all digits, with and without a leading space, are always included.
    Returns:
        ``PreTrainedTokenizerFast`` with ``<pad>``, ``<bos>``, ``<eos>``, ``<unk>`` (ids 0-3),
        left padding (generation), and a Fuse decoder (exact round trip on covered text).
    """
    import re

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    pieces = set()
    for text in texts:
        pieces.update(re.findall(PRETOKENIZE_PATTERN, text))
    pieces.update(str(d) for d in range(10))
    pieces.update(f" {d}" for d in range(10))
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + sorted(pieces))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(  # prompts start with <bos>
        single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
        unk_token="<unk>", padding_side="left", clean_up_tokenization_spaces=False)


def build_model(tokenizer, hidden_size: int = 128, num_layers: int = 4, num_heads: int = 4,
                intermediate_size: int = 512, seed: int = 0):
    """A small ``LlamaForCausalLM`` (default ~1.06M parameters, 4 MB in float32, tied embeddings)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=num_heads, num_key_value_heads=num_heads,
        intermediate_size=intermediate_size, max_position_embeddings=256,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(config)
    _plain_sampling(model)
    return model


def _plain_sampling(model, eos_ids: list[int] | None = None) -> None:
    """Set the special-token ids ``generate`` needs on ``model.generation_config``: pad and bos
    from ``model.config``, EOS = ``eos_ids`` (every id that ends a response, see
    :func:`tba_lab.rollout.backend.eos_token_ids`) or ``model.config.eos_token_id``. Sampling
    settings are NOT set here: the backend passes a fresh config with only the kit's settings
    on every call (:func:`tba_lab.rollout.backend.plain_generation_config`), because the
    trainer's log-probs assume the full softmax(logits / temperature)."""
    gc = model.generation_config
    gc.pad_token_id = model.config.pad_token_id
    if eos_ids:
        gc.eos_token_id = eos_ids[0] if len(eos_ids) == 1 else list(eos_ids)
    else:
        gc.eos_token_id = model.config.eos_token_id
    gc.bos_token_id = model.config.bos_token_id


def _config_pad_id(model):
    """``pad_token_id`` of ``model``'s text config (what a sequence-classification head reads;
    the top-level config for a text-only model), or None."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text, "pad_token_id", None)


def agree_on_pad(model, tokenizer) -> int:
    """Make ``tokenizer`` and ``model`` use one pad token id, and return it.

    Every loader of the kit calls this (policy, reference, victim, reward model, judge,
    embedder), so a batch is padded with the id the model treats as padding. A decoder
    sequence classifier (``GenericForSequenceClassification`` in transformers 5) scores a row
    at its rightmost token that is not ``config.pad_token_id``; padded with another id, a
    short text is scored at a padding position and scores differently in a batch than alone.

    Which id, in order:

    1. the tokenizer's pad token, when it has one;
    2. otherwise ``config.pad_token_id`` when it is one of the tokenizer's special tokens
       (a Llama-1-era checkpoint: ``pad_token_id: 0``, its ``<unk>``), which keeps the pooling
       the checkpoint declares. An ordinary word is not taken: a text ending with it would
       be scored as if that word were padding;
    3. otherwise the tokenizer's EOS token (TRL's fallback).

    Then the tokenizer's ``pad_token``, ``model.config.pad_token_id`` (and the text config's,
    for a composite config) and ``model.generation_config.pad_token_id`` (where the model has a
    generation config) are all that id. The embedding's ``padding_idx`` is left as built: it
    only withholds gradient from that row and never changes a forward pass.

    Args:
        model: a transformers ``PreTrainedModel`` (causal LM, sequence classifier, base model).
        tokenizer: its tokenizer; changed in place.
    Returns:
        the pad token id (int), now equal on the tokenizer and the model.
    Raises:
        ValueError: the tokenizer has neither a pad token nor an EOS token; the message names
            the fix (set ``pad_token`` in its ``tokenizer_config.json``).
    """
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:  # refused even when the config names a pad id
            raise ValueError(
                f"tokenizer of {getattr(tokenizer, 'name_or_path', '')!r} has neither a pad "
                f"token nor an EOS token: set pad_token (or eos_token, which then pads too) in "
                f"its tokenizer_config.json, e.g. tokenizer.add_special_tokens({{'pad_token': "
                f"'<pad>'}}) then save_pretrained")
        declared = _config_pad_id(model)
        special = set(tokenizer.all_special_ids) | {
            i for i, t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items()
            if getattr(t, "special", False)}
        if isinstance(declared, int) and 0 <= declared < len(tokenizer) and declared in special:
            tokenizer.pad_token = tokenizer.convert_ids_to_tokens(declared)
        else:
            tokenizer.pad_token = tokenizer.eos_token
    pad = int(tokenizer.pad_token_id)
    config = model.config
    config.pad_token_id = pad
    if hasattr(config, "get_text_config") and config.get_text_config() is not config:
        config.get_text_config().pad_token_id = pad  # the head reads the text config
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.pad_token_id = pad
    return pad


def check_same_pad(model, tokenizer) -> None:
    """Refuse a model and tokenizer that pad with different ids (see :func:`agree_on_pad`).

    Raises:
        ValueError: ``model``'s (text) config declares a ``pad_token_id`` other than
            ``tokenizer.pad_token_id``; the message names both ids and the fix. A config
            without one passes (transformers then refuses batches of more than one row).
    """
    declared = _config_pad_id(model)
    if declared is not None and declared != tokenizer.pad_token_id:
        raise ValueError(
            f"the model's config.pad_token_id is {declared} but its tokenizer pads with "
            f"{tokenizer.pad_token_id}: a sequence classifier would score padding positions; "
            f"load it with the kit's loaders or call tba_lab.models.agree_on_pad(model, "
            f"tokenizer) first")


@contextlib.contextmanager
def quiet_progress():
    """Switch transformers' progress bars off inside the block (restored after)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def load_policy(path: str | os.PathLike = DEFAULT_MODEL_DIR, dtype=torch.float32):
    """Load ``(model, tokenizer)`` from a local folder (or hub name) with the Auto classes.

    Special tokens: the tokenizer pads on the left, with the id :func:`agree_on_pad` settles
    on for tokenizer, ``config`` and ``generation_config`` alike (its pad token; without one,
    ``config.json``'s ``pad_token_id`` when that is a special token, else its EOS token, as TRL
    does; padding is marked by the attention mask, and a response keeps its terminating EOS,
    so the mask still covers it). Every EOS id the tokenizer, ``config.json``
    and ``generation_config.json`` declare (:func:`~tba_lab.rollout.backend.eos_token_ids`) is
    kept in ``model.generation_config.eos_token_id``; any of them ends a response. The
    checkpoint's sampling settings stay in ``model.generation_config`` but the backend never
    applies them.

    Raises:
        ValueError: the tokenizer has neither a pad token nor an EOS token, with the fix.
        FileNotFoundError: ``path`` is not a model folder (missing, or without config.json or
            tokenizer files) nor a hub id that is cached or downloadable; the message is
            :func:`tba_lab.preflight.model_path_problem`'s (``tba-lab sft`` is suggested only
            for the embedded model).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tba_lab.preflight import model_path_problem

    problem = model_path_problem(path)  # names model.path and the fix (sft only for the default)
    if problem:
        raise FileNotFoundError(problem)
    p = Path(path).expanduser()
    path = str(p) if p.exists() else str(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    with quiet_progress():  # no "Loading weights" bar per load (searchers load twice each)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    agree_on_pad(model, tokenizer)  # ValueError: no pad and no EOS token
    from tba_lab.rollout.backend import eos_token_ids

    _plain_sampling(model, eos_token_ids(model, tokenizer))
    return model, tokenizer


def adamw_warmup_cosine(model, lr: float, steps: int):
    """``(optimizer, scheduler)`` of every build the kit trains (SFT, reward model): AdamW
    (betas 0.9/0.95, weight decay 0.01) at peak ``lr``, linear warm-up over the first 5% of
    ``steps`` then cosine decay to 0 at ``steps``; call ``scheduler.step()`` after each
    ``optimizer.step()``."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    return opt, sched


def train_sft(model, tokenizer, prompts: list[str], targets: list[str], seed: int = 0,
              steps: int = 500, batch_size: int = 64, lr: float = 2e-3, log_every: int = 100,
              eval_every: int = 0, eval_fn=None) -> None:
    """Supervised fine-tuning of ``model`` on ``prompts[i] + targets[i]`` with the loss on the
    target tokens only (and the EOS appended after each target); AdamW, linear warm-up over 5%
    of the steps then cosine decay to 0; gradient norm clipped to 1. Every task's embedded
    model is trained by this loop, so runs are reproducible from ``seed``.

    Args:
        model: a causal LM (``LlamaForCausalLM``); trained in place, left in eval mode.
        tokenizer: its tokenizer; prompts are encoded with the special tokens (``<bos>``) as
            the searchers encode them, targets without.
        prompts, targets: equal-length lists of texts (a target continues its prompt, e.g.
            starting with a space).
        steps, batch_size, lr: optimiser steps, rows per step, peak learning rate.
        log_every: print the loss every this many steps (0 = never).
        eval_every, eval_fn: call ``eval_fn(model)`` (returns a float, printed) every
            ``eval_every`` steps (0 = never).

    Raises:
        ValueError: ``prompts`` and ``targets`` differ in length or are empty.
    """
    if not prompts or len(prompts) != len(targets):
        raise ValueError(f"train_sft needs equal, non-empty lists of prompts and targets "
                         f"(got {len(prompts)} and {len(targets)})")
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    enc_p = tokenizer(prompts)["input_ids"]  # <bos> + prompt, exactly as the searchers encode it
    enc_t = tokenizer(targets, add_special_tokens=False)["input_ids"]
    examples = [(p, t + [eos]) for p, t in zip(enc_p, enc_t)]

    opt, sched = adamw_warmup_cosine(model, lr, steps)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    t0 = time.time()
    for step in range(steps):
        idx = torch.randint(len(examples), (batch_size,), generator=gen).tolist()
        batch = [examples[i] for i in idx]
        length = max(len(p) + len(t) for p, t in batch)
        ids = torch.full((batch_size, length), pad, dtype=torch.long)
        labels = torch.full((batch_size, length), -100, dtype=torch.long)
        attn = torch.zeros((batch_size, length), dtype=torch.long)
        for row, (p, t) in enumerate(batch):  # right padding for training
            seq = p + t
            ids[row, :len(seq)] = torch.tensor(seq)
            labels[row, len(p):len(seq)] = torch.tensor(t)  # loss on answer tokens only
            attn[row, :len(seq)] = 1
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"sft step {step:5d}  loss {loss.item():.4f}  {time.time() - t0:6.1f}s", flush=True)
        if eval_every and eval_fn is not None and step and step % eval_every == 0:
            print(f"sft step {step:5d}  held-out {eval_fn(model):.3f}", flush=True)
            model.train()
    model.eval()
