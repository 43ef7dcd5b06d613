"""Learned reward models: Bradley-Terry training, loading and batch scoring of texts.

A reward model (RM) here is any Hugging Face ``AutoModelForSequenceClassification`` with one
output (``num_labels=1``): the score of a text is its logit at the last non-pad token
(decoder models such as ``LlamaForSequenceClassification``) or at the model's own pooling
position (encoders). The utilities serve every task that scores text with a classifier:

* :func:`load_reward_model` / :class:`RewardModel`: load a RM folder, score texts in batches
  (:func:`score_texts`), optionally standardised with the ``score_mean`` / ``score_std`` of
  the folder's ``rm_summary.json``. A RM with its own tokenizer scores TEXT, so a policy with
  another tokenizer is served by decoding its completions and re-tokenising (what
  :class:`tba_lab.tasks.preference.PreferenceTask` does).
* :func:`bradley_terry_loss`: -log sigmoid(r_chosen - r_rejected), averaged (Bradley & Terry
  1952; the RM loss of Ouyang et al. 2022 Eq. 1 and Stiennon et al. 2020, the paper's TL;DR
  setting).
* :func:`build_reward_model` / :func:`train_reward_model`: the embedded RM of the preference
  task: a ``LlamaForSequenceClassification`` initialised from a causal LM policy's weights
  (``from_pretrained(policy_dir, num_labels=1)``: the transformer body is copied, the score
  head is new; the usual RLHF practice), trained on TRL-format pairs
  ``{"prompt", "chosen", "rejected"}``, saved with ``save_pretrained`` and an
  ``rm_summary.json`` (held-out pair accuracy, standardisation statistics).

Padding: ``transformers`` 5.x ``LlamaForSequenceClassification`` pools at the RIGHTMOST token
that is not ``config.pad_token_id`` (``GenericForSequenceClassification.forward``), which is
right for both padding sides; with LEFT padding the rows' positions start at the pad count,
not 0, which rotary position embeddings make harmless only up to float rounding. So
:func:`score_texts` pads on the right by default, and passes position ids that start at 0 on
every row when asked to pad left. The pooling finds padding by ``config.pad_token_id``, so
the tokenizer must pad with that very id, or a short text is scored at a padding position and
scores differently beside a longer one than alone: the loaders make the two agree
(:func:`tba_lab.models.agree_on_pad`) and :func:`score_texts` refuses a pair that does not. A
tokenizer whose pad token is its EOS token must not end texts with EOS (the pooling would skip
it); the kit never appends one.
"""
from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F

RM_SUMMARY = "rm_summary.json"


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """Mean Bradley-Terry negative log-likelihood of preferring ``chosen`` over ``rejected``.

    Args:
        chosen, rejected: (N,) float tensors of RM scores of the preferred and the other
            response to the same prompts.
    Returns:
        0-dim tensor: mean over N of -log sigmoid(chosen - rejected) (``F.logsigmoid``, stable
        for large differences). Equal scores give log 2 = 0.6931.
    Raises:
        ValueError: the shapes differ.
    """
    if chosen.shape != rejected.shape:
        raise ValueError(f"chosen {tuple(chosen.shape)} and rejected {tuple(rejected.shape)} "
                         f"scores must have one shape")
    return -F.logsigmoid(chosen - rejected).mean()


def load_reward_model(path: str | os.PathLike, dtype=torch.float32):
    """``(model, tokenizer)`` of a sequence-classification RM folder (or cached hub id), in
    eval mode, both padding with one id (:func:`tba_lab.models.agree_on_pad`: the tokenizer's
    pad token; without one, ``config.json``'s ``pad_token_id`` when that is a special token,
    else EOS), so the head's last-non-pad pooling never reads a padding position.

    Raises:
        FileNotFoundError: ``path`` is not a folder with ``config.json``.
        ValueError: the model has more than one output (``num_labels`` != 1), or the tokenizer
            has neither a pad nor an EOS token.
    """
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from tba_lab.models import agree_on_pad, quiet_progress

    p = Path(path).expanduser()
    if p.exists() and not (p / "config.json").is_file():
        raise FileNotFoundError(f"{str(path)!r} has no config.json: not a model saved with "
                                f"save_pretrained")
    where = str(p) if p.exists() else str(path)
    tokenizer = AutoTokenizer.from_pretrained(where)
    with quiet_progress():
        model = AutoModelForSequenceClassification.from_pretrained(where, dtype=dtype)
    if model.config.num_labels != 1:
        raise ValueError(f"{where!r} has num_labels={model.config.num_labels}; a reward model "
                         f"has one output")
    agree_on_pad(model, tokenizer)
    model.eval()
    return model, tokenizer


def score_texts(model, tokenizer, texts: list[str], batch_size: int = 64,
                padding_side: str = "right", max_length: int | None = None) -> list[float]:
    """RM scores (float32 logits, one per text) of ``texts``, in batches, without gradients.

    Each text is tokenised by ``tokenizer`` with its own special tokens (so a RM whose
    tokenizer differs from the policy's sees its own ids). Rows are padded on
    ``padding_side``; with "left" the position ids are ``cumsum(mask) - 1`` so every row starts
    at position 0 as it would unpadded (see the module docstring).

    Args:
        model: an ``AutoModelForSequenceClassification`` with one output (eval mode).
        tokenizer: its tokenizer, padding with the model's ``config.pad_token_id``
            (:func:`load_reward_model` and :func:`build_reward_model` see to it).
        texts: N strings (prompt + response).
        max_length: truncate longer encodings (from the left, keeping the response) to this
            many tokens; None = no truncation.
    Returns:
        list of N Python floats (NaN only if the model produces one).
    Raises:
        ValueError: ``padding_side`` is not "left" or "right", or the model's
            ``config.pad_token_id`` is not the tokenizer's pad id
            (:func:`tba_lab.models.check_same_pad`).
    """
    from tba_lab.models import check_same_pad

    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side={padding_side!r}: choose 'left' or 'right'")
    check_same_pad(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out: list[float] = []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            enc = tokenizer(list(texts[start:start + batch_size]))["input_ids"]
            if max_length:
                enc = [e[-max_length:] for e in enc]
            length = max(len(e) for e in enc)
            ids = torch.full((len(enc), length), pad, dtype=torch.long)
            attn = torch.zeros_like(ids)
            for i, e in enumerate(enc):
                sl = slice(0, len(e)) if padding_side == "right" else slice(length - len(e), length)
                ids[i, sl] = torch.tensor(e, dtype=torch.long)
                attn[i, sl] = 1
            kwargs = {}
            if padding_side == "left":
                kwargs["position_ids"] = (attn.cumsum(-1) - 1).clamp(min=0)
            logits = model(input_ids=ids, attention_mask=attn, **kwargs).logits
            out += logits[:, 0].float().tolist()
    return out


class RewardModel:
    """A loaded RM that scores texts: ``RewardModel.from_pretrained(path).score(texts)``.

    Attributes:
        model, tokenizer: the sequence classifier and its tokenizer.
        mean, std: standardisation, ``score = (logit - mean) / std`` (0 and 1 = raw logits).
    """

    def __init__(self, model, tokenizer, mean: float = 0.0, std: float = 1.0):
        self.model, self.tokenizer, self.mean, self.std = model, tokenizer, float(mean), float(std)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, normalize: bool = True) -> "RewardModel":
        """Load ``path`` (:func:`load_reward_model`); with ``normalize``, standardise by the
        ``score_mean`` / ``score_std`` of ``path/rm_summary.json`` when that file has them."""
        model, tokenizer = load_reward_model(path)
        mean, std = 0.0, 1.0
        summary = Path(path).expanduser() / RM_SUMMARY
        if normalize and summary.is_file():
            data = json.loads(summary.read_text())
            if data.get("score_std"):
                mean, std = float(data["score_mean"]), float(data["score_std"])
        return cls(model, tokenizer, mean, std)

    def score(self, texts: list[str], batch_size: int = 64) -> list[float]:
        """Standardised scores of ``texts`` (list of floats)."""
        return [(s - self.mean) / self.std
                for s in score_texts(self.model, self.tokenizer, texts, batch_size)]


def build_reward_model(init_from: str | os.PathLike, seed: int = 0):
    """``(LlamaForSequenceClassification, tokenizer)`` with one output, its body copied from
    the causal LM in ``init_from`` and a new score head (``transformers`` initialisation,
    seeded); tokenizer and config pad with one id (:func:`tba_lab.models.agree_on_pad`), which
    ``save_pretrained`` then writes to both. Raises what ``from_pretrained`` raises for a bad
    folder, and ValueError for a tokenizer with neither a pad nor an EOS token."""
    from transformers import AutoTokenizer, LlamaForSequenceClassification
    from transformers.utils import logging as hf_logging

    from tba_lab.models import agree_on_pad, quiet_progress

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(init_from))
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "score.weight newly initialised" is expected
    try:
        with quiet_progress():
            model = LlamaForSequenceClassification.from_pretrained(str(init_from), num_labels=1)
    finally:
        hf_logging.set_verbosity(level)
    agree_on_pad(model, tokenizer)
    return model, tokenizer


def train_reward_model(pairs_path: str | os.PathLike | None = None,
                       output_dir: str | os.PathLike | None = None,
                       init_from: str | os.PathLike | None = None, seed: int = 0,
                       steps: int = 150, batch_size: int = 32, lr: float = 5e-4,
                       standardize_texts: list[str] | None = None, num_threads: int = 2,
                       log_every: int = 100) -> dict:
    """Train the preference task's RM with the Bradley-Terry loss and save it.

    Args:
        pairs_path: JSONL of ``{"prompt", "chosen", "rejected"[, "heldout"]}`` rows (default
            ``data/preference/pairs.jsonl``); rows with ``heldout: true`` are only scored.
        output_dir: where ``save_pretrained`` writes the RM (default ``data/tiny-rm-preference``).
        init_from: causal LM folder whose weights and tokenizer start the RM (default
            ``data/tiny-llama-preference``).
        steps, batch_size, lr: AdamW steps, pairs per step, peak learning rate (warm-up over
            5% then cosine decay, gradient norm clipped to 1); the pair order is seeded.
        standardize_texts: full texts (prompt + response) whose raw scores give the
            standardisation statistics ``score_mean`` / ``score_std`` (up to 1000 are used;
            the preference task passes its train references); default: the texts of the
            first 500 training pairs (chosen and rejected).
    Returns:
        the summary also written as ``output_dir/rm_summary.json``: ``pair_accuracy`` (held-out
        pairs, a tie counts 1/2), ``train_pair_accuracy``, ``heldout_pairs``, ``train_pairs``,
        ``score_mean`` / ``score_std`` (raw scores of ``standardize_texts``), ``steps``,
        ``wall_seconds``, ``seed``, ``num_parameters``, ``init_from``.
    Raises:
        FileNotFoundError: ``pairs_path`` or ``init_from`` is missing (the message names
            ``tba-lab sft --task preference``).
        ValueError: no training pairs.
    """
    from tba_lab.paths import DATA_DIR
    from tba_lab.tasks.gsm8k import read_jsonl

    pairs_path = Path(pairs_path or DATA_DIR / "preference" / "pairs.jsonl")
    output_dir = Path(output_dir or DATA_DIR / "tiny-rm-preference")
    init_from = Path(init_from or DATA_DIR / "tiny-llama-preference")
    for what, p in (("pairs file", pairs_path), ("SFT policy", init_from / "config.json")):
        if not p.exists():
            raise FileNotFoundError(f"{what} {str(p)!r} is missing; run `tba-lab sft --task "
                                    f"preference` to build the task data and policy first")
    torch.set_num_threads(num_threads)
    rows = read_jsonl(pairs_path, required=("prompt", "chosen", "rejected"))
    train = [r for r in rows if not r.get("heldout")]
    held = [r for r in rows if r.get("heldout")]
    if not train:
        raise ValueError(f"{pairs_path}: no training pairs (every row is heldout)")
    model, tokenizer = build_reward_model(init_from, seed=seed)
    n_params = sum(p.numel() for p in model.parameters())

    def texts(batch):
        return ([r["prompt"] + r["chosen"] for r in batch]
                + [r["prompt"] + r["rejected"] for r in batch])

    def forward(batch):
        enc = tokenizer(texts(batch), padding=True, padding_side="right", return_tensors="pt")
        scores = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits[:, 0]
        return scores[:len(batch)], scores[len(batch):]

    from tba_lab.models import adamw_warmup_cosine

    opt, sched = adamw_warmup_cosine(model, lr, steps)  # the schedule of the SFT builds
    rng = random.Random(seed)
    model.train()
    t0 = time.time()
    for step in range(steps):
        batch = [train[rng.randrange(len(train))] for _ in range(batch_size)]
        chosen, rejected = forward(batch)
        loss = bradley_terry_loss(chosen, rejected)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"rm step {step:5d}  loss {loss.item():.4f}  {time.time() - t0:6.1f}s", flush=True)
    wall = time.time() - t0
    model.eval()

    def accuracy(pairs):
        if not pairs:
            return float("nan")
        c = score_texts(model, tokenizer, [r["prompt"] + r["chosen"] for r in pairs])
        r = score_texts(model, tokenizer, [r["prompt"] + r["rejected"] for r in pairs])
        return sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in zip(c, r)) / len(pairs)

    summary = {"pair_accuracy": round(accuracy(held), 4),
               "train_pair_accuracy": round(accuracy(train[:1000]), 4),
               "heldout_pairs": len(held), "train_pairs": len(train)}
    if standardize_texts is None:
        standardize_texts = [r["prompt"] + r[k] for r in train[:500] for k in ("chosen", "rejected")]
    raw = score_texts(model, tokenizer, list(standardize_texts)[:1000])
    if len(raw) > 1:
        mean = sum(raw) / len(raw)
        std = math.sqrt(sum((x - mean) ** 2 for x in raw) / (len(raw) - 1))
        summary.update(score_mean=round(mean, 6), score_std=round(max(std, 1e-6), 6))
    summary.update(steps=steps, batch_size=batch_size, lr=lr, wall_seconds=round(wall, 1),
                   seed=seed, num_parameters=n_params, init_from=init_from.name)
    from tba_lab.checkpoint import check_finite_weights

    check_finite_weights(model.named_parameters(), f"save {output_dir}")  # FloatingPointError
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    (output_dir / RM_SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


__all__ = ["RM_SUMMARY", "RewardModel", "bradley_terry_loss", "build_reward_model",
           "load_reward_model", "score_texts", "train_reward_model"]
