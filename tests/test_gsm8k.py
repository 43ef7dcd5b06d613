"""Tests for tba_lab.tasks.gsm8k: extraction, reward, gold parsing, loading."""

import json
import os

import pytest

from tba_lab.tasks import gsm8k
from tba_lab.tasks.gsm8k import (
    exact_match_reward,
    extract_answer,
    gold_answer,
    load_gsm8k,
    read_jsonl,
    write_jsonl,
)

ROWS = [
    {"question": "Natalia sold 48 clips in April and half as many in May. Total?",
     "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n48+24 = <<48+24=72>>72\n#### 72"},
    {"question": "Weng earns $12 an hour. She worked 50 minutes. Earnings?",
     "answer": "12/60 = $<<12/60=0.2>>0.2 per minute.\n0.2 x 50 = $<<0.2*50=10>>10.\n#### 10"},
    {"question": "A shop sold 1,234 pens at $2 each. Revenue?",
     "answer": "1,234 * 2 = <<1234*2=2468>>2,468\n#### 2,468"},
]


# --------------------------------------------------------------------------
# extract_answer
# --------------------------------------------------------------------------

# (text, value extract_answer must give): decimals written without a leading zero, and the
# neighbouring forms that must keep their meaning.
NUMBER_FORMS = [
    ("Half of one is .5\n#### .5", 0.5),    # worked answer and marker both written ".5"
    ("#### .5", 0.5),
    ("####.5", 0.5),
    ("#### -.5", -0.5),
    ("#### \u2212.5", -0.5),                  # Unicode minus
    ("#### $.50", 0.5),
    ("#### -$.50", -0.5),
    ("#### .5 or 7", 0.5),                     # the first number after the marker, not 7
    ("The answer is .5.", 0.5),                # sentence-final point is not part of it
    ("It comes to .5.", 0.5),                  # last-number rule
    ("x = .25 and y = .75", 0.75),
    ("#### 0.5", 0.5),
    ("#### 0.50", 0.5),
    ("#### 5.", 5.0),
    ("#### 72.", 72.0),                        # trailing point after an integer: still 72
    ("#### 1,000", 1000.0),
    ("#### 1,000.5", 1000.5),
    ("#### -3", -3.0),
    ("#### -3.25", -3.25),
    ("10 - .5", 0.5),                          # subtraction, not a sign
    ("5-.5", 0.5),
    ("1.2.3", 1.2),                            # no number starts inside another
    ("No.5", None),                            # a point after a letter is not a decimal point
    ("See Fig.5 for 7", 7.0),
]


@pytest.mark.parametrize(
    "text, expected",
    [
        # marker rule: the number after ####, not earlier numbers
        ("She has 5 apples and buys 37 more.\n#### 42", 42.0),
        ("#### 42", 42.0),
        ("####42", 42.0),
        # two markers: the LAST wins
        ("#### 7\nwait, recompute\n#### 9", 9.0),
        # the first number after the last marker (trailing junk ignored)
        ("#### 18 dollars, i.e. 3 times 6", 18.0),
        # marker beats answer phrase and last number
        ("The answer is 3.\n#### 4\nExtra 99", 4.0),
        # answer phrases (case-insensitive), last one wins
        ("The answer is 1,234.", 1234.0),
        ("So the ANSWER IS 17", 17.0),
        ("Final Answer: 8 cookies. Check: 2*4 = 8, plus 100 spare", 8.0),
        ("answer: 3 ... no, the answer is 5", 5.0),
        ("answer is $\\boxed{12}$", 12.0),
        # phrase with no number after it falls back to the last number
        ("I computed 6 then 11. The answer is unclear", 11.0),
        # formatting: $, %, thousands commas, trailing period
        ("$5", 5.0),
        ("It costs $ 5.", 5.0),
        ("50%", 50.0),
        ("1,234,567", 1234567.0),
        ("Total: 10.", 10.0),
        # negatives and decimals
        ("-3", -3.0),
        ("#### -3", -3.0),
        ("The temperature fell to -$4.50 lol", -4.5),
        ("2.5", 2.5),
        ("#### 0.25", 0.25),
        ("\u22127", -7.0),  # Unicode minus
        # subtraction is not a sign
        ("10 - 5", 5.0),
        ("5-3", 3.0),
        # last-number fallback
        ("First 3, then 4, finally 12 apples", 12.0),
        ("48/2 = <<48/2=24>>24 clips", 24.0),
        # commas that are not thousands separators
        ("1, 2, 3", 3.0),
        ("1,2", 2.0),
        # no number
        ("no number", None),
        ("", None),
        # last #### with no number after it: None, no fallback
        ("I think 5.\n#### ", None),
        ("#### 5\n#### unknown", None),
    ] + NUMBER_FORMS,
)
def test_extract_answer_table(text, expected):
    got = extract_answer(text)
    if expected is None:
        assert got is None
    else:
        assert isinstance(got, float)
        assert got == pytest.approx(expected)


def test_extract_answer_parses_gold_fields():
    assert [extract_answer(r["answer"]) for r in ROWS] == [72.0, 10.0, 2468.0]


def test_extract_answer_rejects_non_str():
    with pytest.raises(TypeError):
        extract_answer(42)  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# exact_match_reward / gold_answer
# --------------------------------------------------------------------------

@pytest.mark.parametrize(
    "completion, gold, expected",
    [
        ("... so #### 72", "72", 1.0),
        ("The answer is 72.", "72", 1.0),
        ("#### 72.0", "72", 1.0),
        ("#### $1,234", "1234", 1.0),
        ("#### 2,468", ROWS[2]["answer"], 1.0),  # full gold field works too
        ("#### 0.5", "0.5", 1.0),
        ("#### -3", "-3", 1.0),
        ("#### 71", "72", 0.0),
        ("#### 3", "-3", 0.0),
        ("#### 0.5000001", "0.5", 1.0),  # within 1e-6
        ("#### 0.50001", "0.5", 0.0),
        ("no idea", "72", 0.0),
        ("#### 72", "not a number", 0.0),
        # unparseable gold never pays, even if the completion is unparseable too
        ("no number here", "no number there", 0.0),
        ("", "", 0.0),
        ("#### ", "#### ", 0.0),
        # a gold written with a leading point parses, as a bare value or a full answer field
        ("#### 0.5", "Half of one is .5\n#### .5", 1.0),
        ("#### 0.5", ".5", 1.0),
        ("#### .5", "0.5", 1.0),
        ("#### 0.50", ".5", 1.0),
        ("The answer is .5.", "#### .5", 1.0),
        ("#### -.5", "-0.5", 1.0),
        ("#### $.50", "0.5", 1.0),
        ("#### 72.", "72", 1.0),
        ("#### 1,000", "1000", 1.0),
        ("#### .5", "5", 0.0),
        ("#### .5", "-.5", 0.0),
    ],
)
def test_exact_match_reward(completion, gold, expected):
    r = exact_match_reward(completion, gold)
    assert isinstance(r, float)
    assert r == expected


def test_gold_answer():
    assert gold_answer(ROWS[0]["answer"]) == "72"
    assert gold_answer(ROWS[2]["answer"]) == "2,468"
    assert gold_answer("a\n#### 1\n#### 2 \n") == "2"  # last marker, stripped
    assert gold_answer("  72 ") == "72"  # no marker: whole field, stripped
    assert gold_answer(gold_answer(ROWS[0]["answer"])) == "72"  # idempotent
    assert gold_answer("#### ") == ""
    for row in ROWS:
        assert exact_match_reward(row["answer"], gold_answer(row["answer"])) == 1.0


# --------------------------------------------------------------------------
# the number format: one pattern for every reader of a numeric answer
# --------------------------------------------------------------------------


def test_gold_answer_with_a_leading_point():
    gold = gold_answer("Half of one is .5\n#### .5")
    assert gold == ".5"
    assert extract_answer(gold) == 0.5


@pytest.mark.parametrize("task_name", ["gsm8k", "arithmetic"])
def test_task_rewards_read_a_leading_point(task_name):
    """Both math tasks (and minimal.py, which grades with the arithmetic task's rewards) go
    through extract_answer for the completion and the gold."""
    from tba_lab.registry import TASKS

    task = TASKS.get(task_name)()
    problem = {"question": "What is half of one?", "answer": "Half of one is .5\n#### .5"}
    completions = [" #### .5", " #### 0.5", " #### 0.50", " The answer is .5.", " #### 5"]
    assert task.rewards([problem] * len(completions), completions) == [1.0, 1.0, 1.0, 1.0, 0.0]


def test_redteam_judge_reads_a_leading_point():
    """The red-team judge's N is extract_answer's: ".5" is the number 0.5, not no number."""
    from tba_lab.tasks.redteam import answer_log_probability

    assert answer_log_probability(" #### .5") == answer_log_probability(" #### 0.5") > -float("inf")


# --------------------------------------------------------------------------
# jsonl helpers
# --------------------------------------------------------------------------

def test_write_read_jsonl_roundtrip(tmp_path):
    path = tmp_path / "sub" / "rows.jsonl"
    rows = ROWS + [{"question": "Ünïcode €?", "answer": "#### 1"}]
    assert write_jsonl(rows, path) == 4
    assert read_jsonl(path) == rows
    assert len(path.read_text(encoding="utf-8").splitlines()) == 4


def test_read_jsonl_skips_blank_and_reports_bad_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n', encoding="utf-8")
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
    path.write_text('{"a": 1}\n{oops\n', encoding="utf-8")
    with pytest.raises(ValueError, match=":2:"):
        read_jsonl(path)
    path.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="JSON object"):
        read_jsonl(path)


# --------------------------------------------------------------------------
# load_gsm8k (local only; the hub path is checked with a stub)
# --------------------------------------------------------------------------

def test_load_local_jsonl(tmp_path):
    path = tmp_path / "gsm.jsonl"
    write_jsonl([dict(r, extra=i) for i, r in enumerate(ROWS)], path)
    rows = load_gsm8k(str(path))
    assert rows == ROWS  # order kept, extra column dropped
    assert load_gsm8k(str(path), limit=2) == ROWS[:2]
    assert load_gsm8k(str(path), limit=0) == []
    assert load_gsm8k(str(path), limit=100) == ROWS


def test_load_local_json_array(tmp_path):
    path = tmp_path / "gsm.json"
    path.write_text(json.dumps(ROWS), encoding="utf-8")
    assert load_gsm8k(str(path)) == ROWS


def test_load_local_directory(tmp_path):
    d = tmp_path / "gsm_dir"
    write_jsonl(ROWS, d / "train.jsonl")
    write_jsonl(ROWS[:1], d / "test.jsonl")
    assert load_gsm8k(str(d)) == ROWS
    assert load_gsm8k(str(d), split="test") == ROWS[:1]


def test_load_missing_field_raises(tmp_path):
    path = tmp_path / "bad.jsonl"
    write_jsonl([{"question": "q", "solution": "#### 1"}], path)
    with pytest.raises(ValueError, match="'answer'"):
        load_gsm8k(str(path))

    path2 = tmp_path / "bad2.jsonl"
    write_jsonl([{"prompt": "q", "answer": "#### 1"}], path2)
    with pytest.raises(ValueError, match="'question'"):
        load_gsm8k(str(path2))


def test_load_field_missing_in_some_rows_raises(tmp_path):
    path = tmp_path / "partial.jsonl"
    write_jsonl([ROWS[0], {"question": "q only"}], path)
    with pytest.raises(ValueError, match=r"row 1 .*'answer'"):
        load_gsm8k(str(path))


def test_load_non_string_field_raises(tmp_path):
    path = tmp_path / "ints.jsonl"
    write_jsonl([{"question": "q", "answer": 5}], path)
    with pytest.raises(ValueError, match="must be str"):
        load_gsm8k(str(path))


def test_load_missing_path_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_gsm8k(str(tmp_path / "nope.jsonl"))
    with pytest.raises(FileNotFoundError):
        load_gsm8k("data/does_not_exist.json")


def test_load_bad_args(tmp_path):
    path = tmp_path / "gsm.jsonl"
    write_jsonl(ROWS, path)
    with pytest.raises(ValueError, match="limit"):
        load_gsm8k(str(path), limit=-1)
    txt = tmp_path / "gsm.txt"
    txt.write_text("x", encoding="utf-8")
    with pytest.raises(ValueError, match="unsupported"):
        load_gsm8k(str(txt))


def test_hub_name_dispatch(monkeypatch):
    """A non-path name goes to load_dataset(name, config, split=...) (stubbed: no network)."""
    import datasets

    calls = []

    def fake_load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return datasets.Dataset.from_list(ROWS)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert gsm8k.load_gsm8k("openai/gsm8k", split="test", config="socratic", limit=1) == ROWS[:1]
    assert calls == [(("openai/gsm8k", "socratic"), {"split": "test"})]


@pytest.mark.parametrize("layout", ["json file", "dataset folder"])
def test_a_corrected_copy_with_the_same_mtime_is_read_fresh(tmp_path, layout):
    """After datasets#2956 and #444: ``datasets`` keys its cache of a local file on the path
    and modification time, and ``cp -p``, ``rsync -a`` or unzipping a release keep the time,
    so a corrected copy must not give back the rows of the file it replaced."""
    d = tmp_path / "gsm_dir"
    path = tmp_path / "gsm.json" if layout == "json file" else d / "train.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    wrong = [dict(r, answer=r["answer"].replace("####", "#### 1")) for r in ROWS]
    path.write_text(json.dumps(wrong) if layout == "json file"
                    else "".join(json.dumps(r) + "\n" for r in wrong), encoding="utf-8")
    source = str(path if layout == "json file" else d)
    assert load_gsm8k(source) == wrong
    stamp = path.stat()
    path.write_text(json.dumps(ROWS) if layout == "json file"
                    else "".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # what cp -p does
    assert path.stat().st_mtime_ns == stamp.st_mtime_ns
    assert load_gsm8k(source) == ROWS
    assert load_gsm8k(source, limit=1) == ROWS[:1]
