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

import random
from pathlib import Path

from tba_lab.paths import DEFAULT_TASK_DIR
from tba_lab.registry import TASKS
from tba_lab.tasks.gsm8k import _REQUIRED_FIELDS, GSM8KTask, read_jsonl

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
    default_source = {"train": str(DEFAULT_TASK_DIR / "train.jsonl"),
                      "test": str(DEFAULT_TASK_DIR / "test.jsonl")}

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


if __name__ != "__main__":  # `python -m` runs a second copy; the package's own one registers
    TASKS.register(ArithmeticTask)

if __name__ == "__main__":
    for row in make_splits(seed=0, num_train=4, num_test=1)[0]:
        print(row["question"], "\n", row["answer"], "\n", sep="")
