"""GSM8K-format math: answer extraction, exact-match reward and data loading.

GSM8K rows look like ``{"question": str, "answer": str}``, the ``answer`` being worked reasoning
that ends with a line ``#### <number>``. A completion is scored by pulling one number out of it
with :func:`extract_answer` (its docstring gives the rules) and comparing it with the gold
answer's (:func:`exact_match_reward`). :func:`load_gsm8k` reads local JSON/JSONL files, dataset
folders and hub names through Hugging Face ``datasets``, imported lazily so extraction and
reward stay import-light.

:class:`GSM8KTask` (``task.name: gsm8k``) puts these together as a
:class:`~tba_lab.tasks.Task`: ``task.train_path`` / ``task.test_path`` name a local file or
folder, or a hub dataset (default ``openai/gsm8k``, splits ``train`` and ``test``); the reward
is :func:`exact_match_reward` and the held-out metric is greedy accuracy
(docs/usage.md#a-real-model-and-gsm8k).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable

from tba_lab.registry import TASKS
from tba_lab.tasks import Task, cut_at_stop, format_prompt

__all__ = [
    "GSM8KTask",
    "extract_answer",
    "exact_match_reward",
    "gold_answer",
    "load_gsm8k",
    "load_local_dataset",
    "write_jsonl",
    "read_jsonl",
]

# Number: optional sign (not right after a digit/point: that is subtraction or
# part of another number), optional "$", then either thousands-grouped digits or
# a plain run of digits with an optional decimal part, or a decimal part alone
# (".5", as people write it); a bare leading point must not follow a letter,
# where it is more likely a full stop or an abbreviation ("apples.5", "No.5").
# A point with no digit after it is punctuation, not part of the number ("72.").
_NUMBER_RE = re.compile(
    r"""
    (?<![\d.])                      # not inside / glued to a previous number
    (?P<sign>[-\u2212])?            # ASCII hyphen-minus or Unicode minus
    (?:\$\s*)?                      # optional dollar sign ("$5", "$ 5")
    (?:
        (?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)
        (?P<frac>\.\d+)?
    |
        (?<![^\W\d_])               # not right after a letter
        (?P<bare_frac>\.\d+)        # ".5" = 0.5
    )
    """,
    re.VERBOSE,
)
_PHRASE_RE = re.compile(r"answer\s+is|answer\s*:", re.IGNORECASE)
_MARKER = "####"

_REQUIRED_FIELDS = ("question", "answer")
_JSON_SUFFIXES = (".jsonl", ".json")


def _to_float(match: re.Match[str]) -> float:
    if match.group("bare_frac"):
        digits = "0" + match.group("bare_frac")
    else:
        digits = match.group("int").replace(",", "") + (match.group("frac") or "")
    value = float(digits)
    return -value if match.group("sign") else value


def _first_number(text: str) -> float | None:
    match = _NUMBER_RE.search(text)
    return _to_float(match) if match else None


def _last_number(text: str) -> float | None:
    last = None
    for last in _NUMBER_RE.finditer(text):
        pass
    return _to_float(last) if last else None


def extract_answer(text: str) -> float | None:
    """Extract the final numeric answer from a GSM8K answer or a completion.

    Args:
        text: model completion or GSM8K ``answer`` field (``str``).

    Rules, in order (the first that applies wins):

    1. **Marker.**  If the text contains ``####``, the first number after the *last* ``####``;
       ``None`` if nothing numeric follows it -- deliberately no fallback, because a completion
       that commits to the GSM8K format and then writes no number has not answered.
    2. **Phrase.**  Otherwise the first number after the *last* ``answer is`` / ``answer:``
       (case-insensitive, so also ``The answer is``, ``Final Answer:``); if nothing numeric
       follows it, rule 3.
    3. **Last number.**  Otherwise the last number anywhere in the text.

    A number: an optional minus sign (``-`` or ``−``) directly before the digits, the point or
    the ``$``; an optional ``$`` (``"$5"``, ``"$ 5"``, ``"-$5"``, ``"$.50"``); digits with
    optional thousands commas in groups of three (``1,234,567``) and an optional decimal part
    (``2.5``), or a decimal part alone (``.5`` and ``-.5`` are 0.5 and -0.5, unless the point
    directly follows a letter: ``"No.5"`` or ``"apples.5"`` is not 0.5). A point with no digit
    after it, a following ``%`` and anything after the number are not part of it (``"50%"``
    gives 50, ``"#### 72."`` 72, ``"is 1,234."`` 1234, ``"is .5."`` 0.5). A minus right after a
    digit, or separated from the digits by a space, is subtraction, not a sign (``"5-3"`` and
    ``"10 - 5"`` never yield a negative). Fractions, LaTeX (``\\frac{1}{2}``) and scientific
    notation are read as separate plain numbers. The value is a float, so ``.5``, ``0.5`` and
    ``0.50`` are the same answer.

    Returns:
        ``float``, the answer; ``None`` when the text holds no number, **and also** when the
        last ``####`` is followed by no number.

    Raises:
        TypeError: if ``text`` is not a ``str``.

    Examples:
        >>> extract_answer("48/2 = 24 clips ... #### 72")
        72.0
        >>> extract_answer("The answer is $1,234.")
        1234.0
        >>> extract_answer("Half of one is .5\\n#### .5")
        0.5
        >>> extract_answer("#### (no idea)") is None
        True
    """
    if not isinstance(text, str):
        raise TypeError(f"extract_answer expects str, got {type(text).__name__}")

    marker_pos = text.rfind(_MARKER)
    if marker_pos != -1:
        return _first_number(text[marker_pos + len(_MARKER):])

    phrase = None
    for phrase in _PHRASE_RE.finditer(text):
        pass
    if phrase is not None:
        value = _first_number(text[phrase.end():])
        if value is not None:
            return value

    return _last_number(text)


def exact_match_reward(completion: str, gold: str) -> float:
    """Binary exact-match reward on extracted numbers.

    Args:
        completion: the policy's generated text (``str``).
        gold: the gold answer, either the bare value (``"72"``, e.g. from
            :func:`gold_answer`) or a full GSM8K ``answer`` field -- both are
            run through :func:`extract_answer`.

    Returns:
        ``1.0`` if numbers can be extracted from both and
        ``abs(pred - gold) < 1e-6`` (values are compared, not strings: a gold
        ``.5`` is matched by ``0.5`` and ``0.50``); otherwise ``0.0``.  In particular an
        unparseable gold never pays, even when the completion is unparseable
        too (``None == None`` is not a match).

    Raises:
        TypeError: if either argument is not a ``str``.
    """
    pred = extract_answer(completion)
    target = extract_answer(gold)
    if pred is None or target is None:
        return 0.0
    return 1.0 if abs(pred - target) < 1e-6 else 0.0


def gold_answer(answer_field: str) -> str:
    """Return the gold final answer string from a GSM8K ``answer`` field.

    Args:
        answer_field: GSM8K ``answer`` text, reasoning ending in ``#### 72``.

    Returns:
        ``str`` -- the text after the last ``####``, stripped (``"72"``).  If
        there is no ``####`` the whole field is returned stripped, so the
        function is idempotent (``gold_answer("72") == "72"``).  The result is
        not validated as numeric; :func:`exact_match_reward` pays 0 for a gold
        it cannot parse.

    Raises:
        TypeError: if ``answer_field`` is not a ``str``.
    """
    if not isinstance(answer_field, str):
        raise TypeError(f"gold_answer expects str, got {type(answer_field).__name__}")
    return answer_field.rpartition(_MARKER)[2].strip()


def _looks_like_path(s: str) -> bool:
    if s.startswith(("/", "./", "../", "~", ".\\", "..\\")):
        return True
    return ("/" in s or os.sep in s) and s.lower().endswith(_JSON_SUFFIXES)


def _validate_rows(rows: list[dict[str, Any]], source: str) -> list[dict[str, str]]:
    out = []
    for i, row in enumerate(rows):
        for field in _REQUIRED_FIELDS:
            if row.get(field) is None:
                raise ValueError(
                    f"{source}: row {i} is missing required field {field!r} "
                    f"(GSM8K rows need {list(_REQUIRED_FIELDS)}; row keys: {sorted(row)})"
                )
            if not isinstance(row[field], str):
                raise ValueError(
                    f"{source}: row {i} field {field!r} must be str, "
                    f"got {type(row[field]).__name__}"
                )
        out.append({"question": row["question"], "answer": row["answer"]})
    return out


def load_local_dataset(path: str | os.PathLike, split: str):
    """A local ``.json`` file (any layout ``datasets``' JSON reader takes: an array of objects,
    JSON Lines, ...) or a dataset folder, through ``datasets.load_dataset``, as the files
    are NOW.

    ``datasets`` caches a local file under a key made of its path and modification time only,
    so a file replaced by a corrected copy that keeps the old time (``cp -p``, ``rsync -a``,
    an unzipped release) would come back with the old rows. Here the dataset is built in a
    temporary cache folder, held in memory (``keep_in_memory=True``) and the folder deleted:
    every call parses the files afresh (about as fast as a JSONL read for task-sized data),
    and nothing is left in the user's ``datasets`` cache.

    Args:
        path: an existing file (read as one split, ``"train"``) or directory.
        split: the split of a directory to load (a file's only split is ``"train"``).

    Returns:
        ``datasets.Dataset``, in memory.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: from ``datasets``, e.g. a split the folder lacks.
    """
    import tempfile

    import datasets  # lazy: heavy import

    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    with tempfile.TemporaryDirectory(prefix="tba-lab-datasets-") as cache:
        if path.is_file():
            return datasets.load_dataset("json", data_files=str(path), split="train",
                                         cache_dir=cache, keep_in_memory=True)
        return datasets.load_dataset(str(path), split=split, cache_dir=cache,
                                     keep_in_memory=True)


def load_gsm8k(
    path_or_name: str = "openai/gsm8k",
    split: str = "train",
    config: str = "main",
    limit: int | None = None,
) -> list[dict]:
    """Load GSM8K-format rows as a list of ``{"question": str, "answer": str}``.

    Source resolution (``~`` is expanded):

    * existing local **file** ending in ``.jsonl``: :func:`read_jsonl`, whose
      errors name the line (a single file has one split; ``split`` and
      ``config`` are ignored);
    * existing local **file** ending in ``.json``:
      ``datasets.load_dataset("json", data_files=path, split="train")``
      (``split`` and ``config`` ignored, as above);
    * existing local **directory**: ``datasets.load_dataset(path, split=split)``
      (``config`` ignored);
    * local files and directories are read as they are now, never from ``datasets``' cache
      (:func:`load_local_dataset`);
    * anything else is a hub name:
      ``datasets.load_dataset(path_or_name, config, split=split)`` -- needs
      network (or a warm HF cache); hub errors propagate unchanged.

    Extra columns are dropped.  ``limit`` keeps the first ``limit`` rows
    (``None`` = all; larger than the data = all).

    Args:
        path_or_name: local file/directory path or hub dataset name.
        split: split name for directories and hub datasets.
        config: hub config name (GSM8K: ``"main"`` or ``"socratic"``).
        limit: optional non-negative row cap.

    Returns:
        ``list[dict]`` of ``{"question": str, "answer": str}``.

    Raises:
        FileNotFoundError: ``path_or_name`` looks like a local path (contains
            ``/`` and ends in ``.jsonl``/``.json``, or starts with ``/``,
            ``./``, ``../`` or ``~``) but does not exist.
        ValueError: an existing file without a ``.jsonl``/``.json`` suffix;
            a negative ``limit``; a row missing ``question``/``answer`` (the
            message names the field and row, and for a ``.jsonl`` file the
            line) or with a non-string value; a ``.jsonl`` line that is not a
            JSON object (the message gives ``path:LINE:``).
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")

    path = Path(path_or_name).expanduser()
    if path.is_file() and path.name.lower().endswith(".jsonl"):
        rows = read_jsonl(path, required=_REQUIRED_FIELDS)  # errors name the line
        rows = rows if limit is None else rows[:limit]
        return [{"question": r["question"], "answer": r["answer"]} for r in rows]
    if path.is_file():
        if not path.name.lower().endswith(_JSON_SUFFIXES):
            raise ValueError(
                f"{path}: unsupported file type; expected .jsonl or .json"
            )
        ds = load_local_dataset(path, split="train")
    elif path.is_dir():
        ds = load_local_dataset(path, split=split)
    elif _looks_like_path(path_or_name):
        raise FileNotFoundError(
            f"GSM8K data file not found: {path_or_name!r} (resolved to {path}). "
            "Pass an existing .jsonl/.json file or directory, or a hub name "
            "like 'openai/gsm8k'."
        )
    else:
        import datasets  # lazy: heavy import

        ds = datasets.load_dataset(path_or_name, config, split=split)

    missing = [f for f in _REQUIRED_FIELDS if f not in ds.column_names]
    if missing:
        raise ValueError(
            f"{path_or_name}: rows lack required field {missing[0]!r} "
            f"(columns: {ds.column_names}; GSM8K rows need {list(_REQUIRED_FIELDS)})"
        )
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    return _validate_rows(ds.select_columns(list(_REQUIRED_FIELDS)).to_list(), path_or_name)


def write_jsonl(rows: Iterable[dict], path: str | os.PathLike) -> int:
    """Write ``rows`` to ``path`` as JSON Lines (UTF-8, one object a line).

    Parent directories are created; an existing file is overwritten.

    Args:
        rows: iterable of JSON-serialisable ``dict``s.
        path: destination file.

    Returns:
        ``int`` -- number of rows written.

    Raises:
        TypeError: a row is not JSON-serialisable.
        OSError: the file cannot be written.
    """
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def read_jsonl(path: str | os.PathLike, required: Iterable[str] = ()) -> list[dict]:
    """Read a JSON Lines file without ``datasets`` (fast, no cache).

    Blank lines are skipped.

    Args:
        path: a ``.jsonl`` file.
        required: fields every row must have, each a string (GSM8K rows:
            ``("question", "answer")``); ``()`` checks none.

    Returns:
        ``list[dict]`` -- one dict per non-blank line, in file order.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: a line is not valid JSON, not a JSON object, or lacks a
            ``required`` field (or has a non-string one); the message starts
            with ``path:LINE:`` (1-based) and says what is wrong and the fix.
    """
    path = Path(path).expanduser()
    required = tuple(required)
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line.rstrip("\r\n"))  # columns count within the line
            except json.JSONDecodeError as e:
                raise ValueError(
                    f"{path}:{lineno}: invalid JSON ({e.msg}, column {e.colno}); fix: make "
                    f"the line one JSON object or delete it"
                ) from None
            if not isinstance(row, dict):
                raise ValueError(
                    f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}; "
                    f"fix: make the line one JSON object or delete it"
                )
            for field in required:
                if row.get(field) is None:
                    raise ValueError(
                        f"{path}:{lineno}: row {len(rows)} (0-based; line {lineno}) is missing "
                        f"required field {field!r} (rows need {list(required)}; this line "
                        f"has {sorted(row)}); fix: add the field or delete the line"
                    )
                if not isinstance(row[field], str):
                    raise ValueError(
                        f"{path}:{lineno}: field {field!r} must be str, got "
                        f"{type(row[field]).__name__}; fix: quote the value"
                    )
            rows.append(row)
    return rows


class GSM8KTask(Task):
    """GSM8K (Cobbe et al. 2021) as a task: exact-match reward, greedy accuracy held out.

    ``task.train_path`` / ``task.test_path``: a ``.jsonl``/``.json`` file, a dataset folder, or
    a hub name (loaded with :func:`load_gsm8k`, split "train" / "test"); "" means
    ``openai/gsm8k``, which needs network or a warm Hugging Face cache. Set
    ``model.max_new_tokens`` to fit worked solutions (the paper's GSM8K runs use 256+).
    """
    name = "gsm8k"
    default_source = {"train": "openai/gsm8k", "test": "openai/gsm8k"}
    # lm-evaluation-harness's GSM8K stops: a base model that has answered "Question: ...\nAnswer:"
    # goes on to invent the next few-shot question and answers it with its own "#### N"
    # (llm-reasoners#131); literal end-of-turn markers end the response too.
    stop_strings = ("Question:", "</s>", "<|im_end|>")

    @classmethod
    def sources(cls, cfg) -> dict[str, str]:
        """``{split: where it is read from}``: ``task.<split>_path``, or the task's default."""
        task = None if cfg is None else cfg.task
        return {"train": (task and task.train_path) or cls.default_source["train"],
                "test": (task and task.test_path) or cls.default_source["test"]}

    @classmethod
    def check_config(cls, cfg) -> None:
        from tba_lab.config import check

        for split, source in cls.sources(cfg).items():
            check(Path(source).expanduser().exists() or not _looks_like_path(source),
                  f"task.{split}_path={source!r} does not exist; give a GSM8K-format .jsonl "
                  f"file, a dataset folder or a hub name")

    def source(self, split: str) -> str:
        """Where ``split`` ("train" or "test") is read from. Raises ValueError for another split."""
        if split not in ("train", "test"):
            raise ValueError(f"split={split!r}: choose train or test")
        return self.sources(self.cfg)[split]

    def load(self, split: str) -> list[dict]:
        return load_gsm8k(self.source(split), split=split)

    def format_prompt(self, problem: dict) -> str:
        return format_prompt(problem["question"])

    def rewards(self, problems: list[dict], completions: list[str]) -> list[float]:
        """Exact match of each completion's own answer: the text after a stop string (an
        invented follow-up question with its own ``####``) is not graded."""
        return [exact_match_reward(cut_at_stop(c, self.stop_strings), p["answer"])
                for p, c in zip(problems, completions)]

    def metrics(self, problems, completions, rewards) -> dict[str, float]:
        return {"accuracy": sum(rewards) / len(rewards)}


# Registered after the class is bound: registering loads the built-in task modules, and
# tba_lab.tasks.arithmetic imports GSM8KTask from here (a decorator would register before the
# name exists, so importing this module first failed with a circular import).
TASKS.register(GSM8KTask)
