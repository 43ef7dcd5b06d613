"""A seeded generator of GSM8K-format arithmetic word problems (the kit's embedded task).

Each problem is a dict ``{"question": str, "answer": str}`` exactly like a row of GSM8K
(Cobbe et al. 2021): the answer is a short worked solution that ends with ``#### N``.
Problems take two steps (for example ``a * b`` then ``- c``) with one- and two-digit integers,
so a ~1M parameter model learns the format quickly but makes arithmetic slips that RL can fix.

Departures from GSM8K: a fixed set of templates and a closed vocabulary (so the kit's word-level
tokenizer covers every word), integer answers only, no calculator annotations (``<<a*b=c>>``).

As a :class:`~tba_lab.tasks.Task` (:class:`ArithmeticTask`, ``task.name: arithmetic``, the
default) it is GSM8K with other data: the same prompt, exact-match reward and accuracy, read
from ``data/arithmetic/{train,test}.jsonl`` unless ``task.train_path`` / ``task.test_path``
say otherwise.

Run ``python -m tba_lab.tasks.arithmetic`` to print a few problems.
"""
from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

from tba_lab.paths import DEFAULT_MODEL_DIR, DEFAULT_TASK_DIR
from tba_lab.registry import TASKS
from tba_lab.tasks import format_prompt
from tba_lab.tasks.gsm8k import _REQUIRED_FIELDS, GSM8KTask, read_jsonl, write_jsonl

SFT_EVAL_TOKENS = 48  # response cap of sft's own held-out accuracy (sft_summary.json)

NAMES = ["Tom", "Ana", "Ben", "Mia", "Sam", "Lily", "Omar", "Zoe", "Leo", "Eva", "Raj", "Kim"]
PRONOUN = {"Tom": "He", "Ben": "He", "Sam": "He", "Omar": "He", "Leo": "He", "Raj": "He",
           "Ana": "She", "Mia": "She", "Lily": "She", "Zoe": "She", "Eva": "She", "Kim": "She"}
ITEMS = ["apples", "pens", "cookies", "books", "stickers", "marbles", "cards", "shells"]


def _add_sub(rng: random.Random) -> tuple[str, str, int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(10, 49), rng.randint(2, 9)
    c = rng.randint(2, 9)
    s, r = a + b, a + b - c
    q = (f"{name} has {a} {item}. {PRONOUN[name]} buys {b} more. Then {PRONOUN[name].lower()} "
         f"gives away {c}. How many {item} does {name} have now?")
    return q, f"{a} + {b} = {s}. {s} - {c} = {r}.", r


def _mul_sub(rng: random.Random) -> tuple[str, str, int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    p = a * b
    c = rng.randint(1, min(p - 1, 19))
    q = (f"{name} buys {a} boxes of {item}. Each box has {b} {item}. {PRONOUN[name]} gives "
         f"away {c} of them. How many {item} are left?")
    return q, f"{a} * {b} = {p}. {p} - {c} = {p - c}.", p - c


def _div_add(rng: random.Random) -> tuple[str, str, int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    b, quo = rng.randint(2, 9), rng.randint(2, 9)
    a, c = b * quo, rng.randint(2, 19)
    q = (f"{name} has {a} {item} and shares them equally among {b} friends. Each friend then "
         f"finds {c} more. How many {item} does each friend have?")
    return q, f"{a} / {b} = {quo}. {quo} + {c} = {quo + c}.", quo + c


def _change(rng: random.Random) -> tuple[str, str, int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    p = a * b
    c = rng.choice([x for x in (20, 50, 100) if x > p])
    q = (f"A shop sells {item} for {a} dollars each. {name} buys {b} {item} and pays with "
         f"{c} dollars. How much change does {name} get?")
    return q, f"{a} * {b} = {p}. {c} - {p} = {c - p}.", c - p


TEMPLATES = [_add_sub, _mul_sub, _div_add, _change]


def make_problem(rng: random.Random) -> dict:
    """One problem ``{"question", "answer"}`` drawn with ``rng``; the answer ends in ``#### N``."""
    question, steps, result = rng.choice(TEMPLATES)(rng)
    return {"question": question, "answer": f"{steps}\n#### {result}"}


def make_splits(seed: int = 0, num_train: int = 20000, num_test: int = 1000) -> tuple[list, list]:
    """Deterministic train/test splits; test questions never appear in train.

    Returns:
        (train, test): lists of ``{"question", "answer"}`` dicts.
    Raises:
        ValueError: if ``num_train`` or ``num_test`` is not positive.
    """
    if num_train < 1 or num_test < 1:
        raise ValueError(f"num_train={num_train} and num_test={num_test} must both be >= 1")
    rng = random.Random(seed)
    test, seen = [], set()
    while len(test) < num_test:
        p = make_problem(rng)
        if p["question"] not in seen:
            seen.add(p["question"])
            test.append(p)
    train = []
    while len(train) < num_train:
        p = make_problem(rng)
        if p["question"] not in seen:
            train.append(p)
    return train, test


class ArithmeticTask(GSM8KTask):
    """The embedded task: GSM8K-format JSONL files read directly (no ``datasets``, no cache)."""
    name = "arithmetic"
    # The embedded SFT policy ends every answer with EOS (0 of 800 samples at T=1 went on to a
    # "Question:"), so no stop strings: sampling costs and the default run stay as they were.
    stop_strings = ()
    # TB's tuned settings on this task (`tba-lab experiment tune`, docs/results/tune/: 2.5e-5
    # and beta 0.03 gave 39.6% after 60 updates, the kit-wide 5e-5 and beta 0.1 34.7%; GRPO's
    # best rate is also 2.5e-5). The user's values win.
    config_defaults = {"training": {"learning_rate": 2.5e-5}, "tb": {"beta": 0.03}}
    default_source = {"train": str(DEFAULT_TASK_DIR / "train.jsonl"),
                      "test": str(DEFAULT_TASK_DIR / "test.jsonl")}

    @classmethod
    def build_embedded(cls, output_dir=None, task_dir=None, seed: int = 0, steps: int | None = None,
                       **kwargs) -> dict:
        """``tba-lab sft``: :func:`sft` (writes ``data/arithmetic`` and ``data/tiny-llama`` by
        default)."""
        given = dict(output_dir=output_dir, task_dir=task_dir, steps=steps)
        return sft(seed=seed, **{k: v for k, v in given.items() if v is not None}, **kwargs)

    @classmethod
    def check_config(cls, cfg) -> None:
        from tba_lab.config import check

        for split, source in cls.sources(cfg).items():
            check(Path(source).expanduser().is_file(),
                  f"task.{split}_path={source!r} does not exist; run `tba-lab sft` to write the "
                  f"embedded task or point it at a GSM8K-format JSONL file")

    def load(self, split: str) -> list[dict]:
        """Problems of ``split`` ("train" or "test") from its JSONL file.

        Raises:
            FileNotFoundError: the file does not exist.
            ValueError: another split, or a line that is not JSON or lacks a string
                ``question`` / ``answer`` (the message gives ``path:LINE:`` and the fix).
        """
        return read_jsonl(self.source(split), required=_REQUIRED_FIELDS)


def greedy_accuracy(model, tokenizer, problems: list[dict], max_new_tokens: int = SFT_EVAL_TOKENS) -> float:
    """Exact-match accuracy in [0, 1] of greedy answers to GSM8K-format ``problems``
    (:func:`tba_lab.eval.evaluate` with the arithmetic task), responses capped at
    ``max_new_tokens`` tokens. Leaves ``model`` in eval mode."""
    from tba_lab.eval import evaluate
    from tba_lab.rollout.backend import TransformersBackend

    model.eval()
    return evaluate(ArithmeticTask(), TransformersBackend(model, tokenizer), problems,
                    max_new_tokens)["accuracy"]


def sft(output_dir: str | os.PathLike = DEFAULT_MODEL_DIR,
        task_dir: str | os.PathLike = DEFAULT_TASK_DIR, seed: int = 0, steps: int = 500,
        batch_size: int = 64, lr: float = 2e-3, num_threads: int = 2, eval_size: int = 500,
        log_every: int = 100, eval_every: int = 0, bare_answer_fraction: float = 0.6) -> dict:
    """``tba-lab sft``: build the task splits, the tokenizer and the model, train on answer
    tokens (:func:`tba_lab.models.train_sft`), save all.

    Writes ``task_dir/{train,test}.jsonl`` and the model + tokenizer to ``output_dir``
    (``save_pretrained``), plus ``output_dir/sft_summary.json``.

    Returns:
        dict with ``accuracy`` (greedy, first ``eval_size`` test problems, in [0, 1]),
        ``steps``, ``wall_seconds``, ``num_parameters``.
    """
    import torch

    from tba_lab.models import build_model, build_tokenizer, train_sft

    torch.set_num_threads(num_threads)
    random.seed(seed)
    train, test = make_splits(seed=seed)
    task_dir, output_dir = Path(task_dir), Path(output_dir)
    task_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(train, task_dir / "train.jsonl")
    write_jsonl(test, task_dir / "test.jsonl")

    prompts = [format_prompt(r["question"]) for r in train]
    # A seeded fraction of SFT targets is the bare final line "#### N" (no worked steps), as
    # in web text where answers often come without their working; the rest show the work.
    mix = random.Random(seed + 1)
    targets = [" " + (r["answer"].split("\n")[-1] if mix.random() < bare_answer_fraction else r["answer"])
               for r in train]
    tokenizer = build_tokenizer(prompts + targets + [format_prompt(r["question"]) + " " + r["answer"]
                                                     for r in test])
    model = build_model(tokenizer, seed=seed)
    n_params = sum(p.numel() for p in model.parameters())

    eval_fn = (lambda m: greedy_accuracy(m, tokenizer, test[:200])) if eval_every else None
    t0 = time.time()
    train_sft(model, tokenizer, prompts, targets, seed=seed, steps=steps, batch_size=batch_size,
              lr=lr, log_every=log_every, eval_every=eval_every, eval_fn=eval_fn)
    wall = time.time() - t0
    output_dir.mkdir(parents=True, exist_ok=True)
    from tba_lab.checkpoint import check_finite_weights

    check_finite_weights(model.named_parameters(), f"save {output_dir}")  # FloatingPointError
    model.save_pretrained(output_dir)  # save first: evaluation must never lose the checkpoint
    tokenizer.save_pretrained(output_dir)
    acc = greedy_accuracy(model, tokenizer, test[:eval_size])
    summary = {"accuracy": acc, "steps": steps, "wall_seconds": round(wall, 1),
               "bare_answer_fraction": bare_answer_fraction,
               "num_parameters": n_params, "seed": seed, "batch_size": batch_size, "lr": lr}
    (output_dir / "sft_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


if __name__ != "__main__":  # `python -m` runs a second copy; the package's own one registers
    TASKS.register(ArithmeticTask)

if __name__ == "__main__":
    for row in make_splits(seed=0, num_train=4, num_test=1)[0]:
        print(row["question"], "\n", row["answer"], "\n", sep="")
