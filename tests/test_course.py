"""The course: exercises (solutions pass, stubs fail), notebook hygiene, the papermill
reproducibility run in its SMOKE configuration (every notebook executed, as CI does), and
the notebooks' text quoting no measurement that the reader's own run does not print."""
import json
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from tba_lab.actors.locks import LOCK_PREFIX
from tba_lab.lab.course import EXERCISES, check
from tba_lab.lab.reproduce import NOTEBOOK_DIR, find_notebooks, reproduce, write_report
from tests._answers import exercise_name, solutions

NOTEBOOKS = ["01_on_policy_grpo", "02_trajectory_balance", "03_replay_buffer",
             "04_async_searchers", "05_scaling", "06_explorer", "07_paper_findings",
             "08_preference", "09_redteam", "10_multi_gpu"]
PARAMETERS = ("SMOKE", "SEED", "OUTPUT_DIR")


def test_every_notebook_exists_with_at_least_two_exercises():
    assert [p.stem for p in find_notebooks()] == NOTEBOOKS
    for stem in NOTEBOOKS:
        n = sum(name.startswith(stem[:2] + ".") for name in EXERCISES)
        assert n >= 2, f"{stem}: {n} exercises"


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_checker_passes_the_solution_and_fails_the_stub(name):
    ex = EXERCISES[name]
    assert check(name, solutions()[name], verbose=False), f"{name}: the notebook's worked solution fails its checker"
    assert not check(name, ex.stub, verbose=False), f"{name}: the empty stub passes its checker"
    assert not check(name, lambda *a, **k: 0.0, verbose=False), f"{name}: a constant passes"


def test_checker_fails_a_wrong_signature_readably_and_passes_the_right_one(capsys):
    """A renamed, missing or extra parameter is a FAIL that shows the stub's signature (not a
    TypeError from the first case); the stub's signature passes however the body is written:
    positionally, with its defaults, or through a *args, **kwargs wrapper."""
    sol = solutions()["06.rloo_advantages"]

    def renamed(rewards, group_size, kl_div=None, beta=0.0):
        return sol(rewards, group_size, kl_div, beta)

    def no_default(rewards, group_size, kl, beta):
        return sol(rewards, group_size, kl, beta)

    def extra(rewards, group_size, kl=None, beta=0.0, eps=None, *, clip):
        return sol(rewards, group_size, kl, beta)

    for wrong, says in ((renamed, "parameter 3 is 'kl_div', expected 'kl'"),
                        (no_default, "case 0 cannot call it"),
                        (extra, "extra parameter without a default: clip"),
                        (lambda rewards, group_size: sol(rewards, group_size), "parameter 'kl' is missing")):
        assert check("06.rloo_advantages", wrong) is False
        out = capsys.readouterr().out
        assert out.startswith("FAIL 06.rloo_advantages: wrong signature: " + says), out
        assert "expected signature: " in out and "(rewards, group_size, kl=None, beta=0.0)" in out

    def right(rewards, group_size, kl=None, beta=0.0, verbose=False):  # an extra with a default
        return sol(rewards, group_size, kl=kl, beta=beta)

    for ok in (sol, right, lambda *a, **k: sol(*a, **k)):
        assert check("06.rloo_advantages", ok) is True
        assert capsys.readouterr().out.startswith("PASS")
    # a stub-shaped function that raises is still "not implemented yet", not a signature FAIL
    assert not check("06.rloo_advantages", EXERCISES["06.rloo_advantages"].stub)
    assert "not implemented yet" in capsys.readouterr().out
    # every worked solution has its stub's signature
    from tba_lab.lab.course import _signature_problem
    assert sorted(solutions()) == sorted(EXERCISES)
    assert {n: _signature_problem(solutions()[n], e.stub, e.cases()) for n, e in EXERCISES.items()
            if _signature_problem(solutions()[n], e.stub, e.cases())} == {}


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_each_notebook_stub_has_its_exercise_signature(stem):
    """The function an exercise cell shows (``def my_x(...)``, the cell nbgrader marks as a
    solution, grade_id ``NN_x_answer``) has the parameters and defaults of its exercise's stub:
    the checker fails any other signature, so a student who fills in the cell as shown must
    pass it."""
    import ast
    import inspect

    nb = nbformat.read(NOTEBOOK_DIR / f"{stem}.ipynb", as_version=4)
    found, wrong = 0, []
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        source = re.sub(r"^(\s*)[%!].*$", r"\1pass", cell.source, flags=re.M)  # IPython magics
        defs = {d.name: d for d in ast.walk(ast.parse(source)) if isinstance(d, ast.FunctionDef)}
        for c in ast.walk(ast.parse(source)):  # a class (04.weight_sync): its __init__ without self
            init = [d for d in (c.body if isinstance(c, ast.ClassDef) else [])
                    if isinstance(d, ast.FunctionDef) and d.name == "__init__"]
            if init:
                a = init[0].args
                defs[c.name] = ast.FunctionDef(name=c.name, args=ast.arguments(
                    posonlyargs=[], args=a.args[1:], kwonlyargs=a.kwonlyargs,
                    kw_defaults=a.kw_defaults, defaults=a.defaults))
        meta = cell.metadata.get("nbgrader", {})
        shown = [n.name for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        for var, name in ([(shown[0], exercise_name(meta["grade_id"]))] if meta.get("solution") else []):
            if name not in EXERCISES:
                wrong.append(f"{var}: no exercise {name!r}")
                continue
            d, want = defs.get(var), inspect.signature(EXERCISES[name].stub).parameters.values()
            a = d.args if d else None
            got = (None if a is None else ([x.arg for x in a.posonlyargs + a.args + a.kwonlyargs],
                                           len(a.defaults) + sum(x is not None for x in a.kw_defaults)))
            expected = ([p.name for p in want], sum(p.default is not p.empty for p in want))
            found += 1
            if got != expected:
                wrong.append(f"{var} for {name}: (names, defaults) {got}, the stub's {expected}")
    assert found >= 2 and not wrong, f"{stem}: {found} stubs; {wrong}"


def _student_view(source: str) -> str:
    """A cell as nbgrader's release shows it: each solution region becomes two lines."""
    return re.sub(r"^( *)### BEGIN SOLUTION\n.*?### END SOLUTION$",
                  r"\1# YOUR CODE HERE\n\1raise NotImplementedError()", source, flags=re.M | re.S)


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_notebook_is_committed_clean_short_with_goals_parameters_and_checkers(stem):
    nb = nbformat.read(NOTEBOOK_DIR / f"{stem}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code), "commit without outputs"
    shown = [_student_view(c.source).splitlines() for c in code]  # what the students' copy shows
    long = [len(lines) for lines in shown if len(lines) > 30]
    assert not long, f"code cells of {long} lines: at most 30 (helpers go to tba_lab/lab/course/)"
    assert nb.cells[0].cell_type == "markdown" and "goal" in nb.cells[0].source.lower()
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, "exactly one cell tagged 'parameters' (papermill)"
    for name in PARAMETERS:
        assert f"{name} =" in params[0].source, name
    text = "\n".join(c.source for c in code)
    assert text.count("check(\"") + text.count("check('") >= 2
    assert "multiprocessing" not in text or "tba_lab" in text  # processes come from the package


def test_reproduce_reports_a_failing_notebook_and_exits_nonzero(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell("SMOKE = False\nSEED = 0\nOUTPUT_DIR = 'x'")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# Broken\nLearning goals: none"), params,
                nbformat.v4.new_code_cell("raise RuntimeError('this notebook is broken on purpose')")]
    nbformat.write(nb, books / "99_broken.ipynb")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "tba_lab", "reproduce", "--smoke", "--notebook-dir",
                           str(books), "--output-dir", str(out)], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    report = (out / "report.md").read_text()
    assert "FAILED" in report and "broken on purpose" in report
    assert json.loads((out / "parameters.json").read_text())["99_broken.ipynb"]["SMOKE"] is True



def test_report_shows_nested_metrics_whole_and_keeps_the_table(tmp_path):
    """Nested metrics become dotted keys (not a JSON string cut at a fixed width), long lists
    show their last item and length, and a ``|`` in a value does not add a table column."""
    metrics = {"acc": 0.123456, "run": {"tb": {"updates": 51, "final_acc": 0.516}},
               "curve": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.9], "note": "a|b"}
    write_report([{"notebook": "x.ipynb", "ok": True, "error": None, "seconds": 3.0,
                   "parameters": {}, "metrics": metrics, "figures": []}], tmp_path, smoke=True)
    row = [ln for ln in (tmp_path / "report.md").read_text().splitlines() if ln.startswith("| [x")][0]
    assert "acc=0.1235" in row
    assert "run.tb.updates=51" in row and "run.tb.final_acc=0.516" in row
    assert "curve=[0.1, 0.2, 0.3, 0.4, …, 0.9] (8 items)" in row
    assert len(re.findall(r"(?<!\\)\|", row)) == 5  # four columns: the escaped | is not one

# 07 runs its sweep (two seeds x two settings: four short trainings) even in SMOKE mode
SMOKE_BOUND_SECONDS = {"07_paper_findings.ipynb": 120, "05_scaling.ipynb": 120,
                       "04_async_searchers.ipynb": 150,  # checks that generate, your loop, three runs  # 10 also starts a local Ray
                       "10_multi_gpu.ipynb": 150}


def test_reproduce_smoke_runs_every_notebook(tmp_path):
    """The CI reproducibility run: every notebook, SMOKE configuration, the worked solutions in;
    no weight-channel lock file left behind (a kernel's exit may skip finalizers, so a notebook
    closes every channel it opens)."""
    locks_before = set(Path(tempfile.gettempdir()).glob(f"{LOCK_PREFIX}*"))
    results = reproduce(tmp_path, smoke=True, seed=0)
    failed = {r["notebook"]: r["error"] for r in results if not r["ok"]}
    assert not failed, failed
    assert [r["notebook"] for r in results] == [f"{s}.ipynb" for s in NOTEBOOKS]
    for r in results:
        assert r["figures"], f"{r['notebook']}: no figure saved"
        assert r["metrics"], f"{r['notebook']}: no metrics.json"
        bound = SMOKE_BOUND_SECONDS.get(r["notebook"], 90)
        assert r["seconds"] <= bound, f"{r['notebook']}: SMOKE took {r['seconds']} s (bound {bound} s)"
        executed = nbformat.read(tmp_path / r["notebook"], as_version=4)
        printed = "\n".join(o.get("text", "") for c in executed.cells if c.cell_type == "code"
                            for o in c.outputs if o.get("output_type") == "stream")
        assert "FAIL" not in printed and printed.count("PASS") >= 2, r["notebook"]
    left = set(Path(tempfile.gettempdir()).glob(f"{LOCK_PREFIX}*")) - locks_before
    assert not left, f"lock files left by the notebooks' kernels: {sorted(map(str, left))}"
    report = (tmp_path / "report.md").read_text()
    n = len(NOTEBOOKS)
    assert f"{n}/{n} notebooks ran" in report and report.count("![") >= n
    # notebook 07 ran its sweep in SMOKE: two seeds x two settings, equal updates, a KL each
    assert_sweep_outputs(tmp_path / "07_paper_findings")


def assert_sweep_outputs(root):
    """What notebook 07's SMOKE sweep leaves under its OUTPUT_DIR: one run per seed x setting,
    each of 4 updates with held-out accuracy before and after, and its numbers in metrics.json."""
    runs = sorted(p.name for p in (root / "runs").iterdir() if (p / "summary.json").exists())
    assert runs == ["beta_default_seed0", "beta_default_seed1", "beta_small_seed0",
                    "beta_small_seed1"], runs
    for name in runs:
        summary = json.loads((root / "runs" / name / "summary.json").read_text())
        assert summary["trainer_steps"] == 4 and summary["accuracy_after"] is not None, name
    metrics = json.loads((root / "metrics.json").read_text())
    assert metrics["runs"] == 4 and metrics["seeds"] == 2 and metrics["updates"] == 4
    assert all(math.isfinite(metrics[f"{name}_kl"]) for name in runs)
    assert (root / "sweep.png").stat().st_size > 10_000


# ----------------------------------------------------------------------------------------------
# What a student reads must match what they see
# ----------------------------------------------------------------------------------------------
#
# A number in a notebook's text is one of:
#   * a setting or a definition the text states (beta = 0.5, 40 s of training, eps = 1e-4);
#   * arithmetic on stated settings (a standard error √(p(1-p)/n), e^4 / (5 + 3e^4) ≈ 0.32);
#   * a citation of a result measured elsewhere and named there (the README's 9-minute runs);
#   * a measurement of the notebook's own run. Those must NOT be written into the text: they
#     differ between SMOKE and full settings, between machines and between runs. A code cell
#     prints them, and the text refers to the printed output ("the peak printed above").
# The test finds the quantitative literals of every markdown cell (decimals, percentages,
# numbers with a unit of time, size or points, "about N", "+N", "±N") and requires each to be
# listed below for its notebook, with its kind. Adding a number to the text therefore means
# deciding which kind it is: a measurement of this notebook does not belong in the list, it
# belongs in a print. Plain integers (K = 8, 500 problems, Eq. 2) and section / exercise
# numbers are not counted. Phrases that quote a remembered run ("what we measured", "when we
# ran") are not allowed either.

NUMBER_CLAIM = re.compile(r"""
  (?P<pre>\b(?:about|approximately|roughly|nearly|near|around)\s+|[≈~]\s*)?
  (?P<sign>(?<![\w)\]])[+±])?
  (?<![\w.,])(?P<num>\d+(?:,\d{3})*(?:\.\d+)?(?:e-?\d+)?)
  (?P<unit>\s*(?:%|ms\b|s\b|seconds?\b|minutes?\b|MB\b|GB\b|points?\b|updates/min\b)|x\b)?
  (?![\w.]*\d|[A-Za-z])
""", re.X)
_REFERENCE = re.compile(r"(?:Exercise|exercise|[Ss]ection|Sec\.|Eqs?\.|arXiv|[Nn]otebooks?)\s*$")
REMEMBERED_RUN = re.compile(r"\b(?:what we measured|we measured|when we ran|we ran this|"
                            r"in our (?:\w+ )?run|from ours|\(ours)\b", re.I)


def quoted_numbers(markdown: str) -> list[str]:
    """The quantitative literals of a markdown text, as written (whitespace collapsed)."""
    out = []
    for m in NUMBER_CLAIM.finditer(markdown):
        num = m.group("num")
        if not (m.group("pre") or m.group("unit") or m.group("sign") or "." in num or "e" in num):
            continue  # a plain integer: a count or a setting
        if _REFERENCE.search(markdown[max(0, m.start() - 12):m.start()]):
            continue  # Exercise 2.1, Eq. 4, arXiv 2503.18929
        out.append(" ".join(m.group(0).split()))
    return out


SETTING, ARITHMETIC, CITED = "setting", "arithmetic on stated settings", "cited, source named"
ALLOWED_NUMBERS = {
    "01_on_policy_grpo": {
        "0.0": SETTING, "1.0": SETTING, "0.2": SETTING, "0.6": SETTING, "1e-4": SETTING,
        "5e-5": SETTING, "2.5e-5": SETTING, "0.35": SETTING,
        "about 0": ARITHMETIC, "roughly 0.04": ARITHMETIC, "about 2 points": ARITHMETIC,
        "about 7 points": ARITHMETIC, "34.6%": CITED, "about 140 s": CITED, "about 15 s": CITED},
    "02_trajectory_balance": {
        "0.005": SETTING, "0.05": SETTING, "0.2": SETTING, "0.5": SETTING, "0.1": SETTING,
        "0.01": SETTING, "0.03": SETTING, "2.5e-5": SETTING, "1.25e-5": SETTING,
        "about 33": ARITHMETIC, "about 30 s": CITED, "about 10 s": CITED},
    "03_replay_buffer": {
        "0.0": SETTING, "1.0": SETTING, "0.1": SETTING, "0.5": SETTING, "0.8": SETTING,
        "0.9": SETTING, "±2": SETTING, "0.46": ARITHMETIC, "≈ 0.32": ARITHMETIC,
        "about 95%": ARITHMETIC, "about 3.7": CITED, "about 20 s": CITED, "about 10 s": CITED},
    "04_async_searchers": {
        "0 s": SETTING, "0.8": SETTING, "40 s": SETTING, "70 s": SETTING, "0.6": SETTING,
        "1.0": SETTING, "0.1": SETTING, "5e-5": SETTING, "1e-4": CITED, "3e-5": CITED,
        "0.03": SETTING, "2.5e-5": SETTING, "39.6%": CITED, "34.7%": CITED,
        "about 3 minutes": ARITHMETIC, "about 100%": ARITHMETIC, "200%": ARITHMETIC,
        "about 2 points": ARITHMETIC, "about 10": ARITHMETIC, "10 points": CITED,
        "about 5 minutes": CITED},
    "05_scaling": {
        "1.5": ARITHMETIC, "40 s": SETTING, "90 s": CITED, "15%": CITED},
    "06_explorer": {
        "0.014": SETTING, "0.004": SETTING, "1e-4": SETTING, "20 s": SETTING, "9 minutes": SETTING,
        "0.4": ARITHMETIC, "about ±3.5 points": ARITHMETIC, "±4.9": ARITHMETIC,
        "10 points": CITED, "about 160 s": CITED, "about 15 s": CITED},
    "07_paper_findings": {
        "95%": SETTING, "97.5%": SETTING, "12.71": ARITHMETIC, "4.30": ARITHMETIC,
        "2.26": ARITHMETIC, "0 s": SETTING, "about 4 minutes": CITED, "about 30 s": CITED},
    "08_preference": {"+1": SETTING, "0.5": SETTING, "0.1": SETTING, "near 0": SETTING,
                      "near 100": SETTING, "about 10 minutes": CITED, "about 10 s": CITED},
    "09_redteam": {"0.6": SETTING, "0.1": SETTING, "0.5": SETTING, "about 5 minutes": CITED,
                   "about 15 s": CITED},
    "10_multi_gpu": {
        "12 s": SETTING, "40 s": SETTING, "4.3 MB": CITED,
        "about 0.5 ms": CITED, "about 0.3 ms": CITED, "7.5 ms": CITED, "19 ms": CITED,
        "2.7": CITED, "3.7 ms": CITED, "14%": CITED},
}
# Notebooks whose text still quotes the authors' own runs, to be replaced by printed output.
# strict: the day a notebook is fixed this test XPASSes and fails, so that the entry goes.
REMEMBERED = {}


def test_quoted_numbers_finds_measurements_and_skips_counts_and_references():
    text = ("TV about 0.15 and a reward of 0.48; it took 13.5 s, from 34.6% to 44.8% (+12 points, "
            "±3.5), 1.66x slower, 132 updates/min, 4 MB. Exercise 2.1, Eq. 2, K = 8, 16 x 8, "
            "about 2k - 1, v+1, arXiv 2503.18929, 1,062,272 parameters, 500 problems.")
    assert quoted_numbers(text) == ["about 0.15", "0.48", "13.5 s", "34.6%", "44.8%", "+12 points",
                                    "±3.5", "1.66x", "132 updates/min", "4 MB"]


@pytest.mark.parametrize("stem", [
    pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=REMEMBERED[s])) if s in REMEMBERED
    else s for s in NOTEBOOKS])
def test_text_quotes_no_measurement_of_a_remembered_run(stem):
    """Every quantitative literal of the notebook's markdown is a setting, arithmetic on
    settings or a named citation (ALLOWED_NUMBERS); measurements are printed by code cells."""
    nb = nbformat.read(NOTEBOOK_DIR / f"{stem}.ipynb", as_version=4)
    allowed = ALLOWED_NUMBERS.get(stem, {})
    problems = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for q in quoted_numbers(cell.source):
            if q not in allowed:
                problems.append(f"cell {i}: {q!r}")
        for m in REMEMBERED_RUN.finditer(cell.source):
            problems.append(f"cell {i}: {m.group(0)!r} (quotes a remembered run)")
    assert not problems, (
        f"{stem}: numbers in the text that are not listed in ALLOWED_NUMBERS (tests/test_course.py)."
        f" A measurement of the notebook's run belongs in a print, with the text referring to "
        f"it; a setting, arithmetic or a named citation goes into the list:\n  "
        + "\n  ".join(problems))


# The exercises that are algorithm code (a loss, an advantage, the log-probs, the sampler and the
# buffer, a loop step, the sync); the others measure or analyse (a busy fraction, a time to
# target, a simulator's step, a placement). The course issue asks for at least two thirds.
ALGORITHM_EXERCISES = {
    "01.token_logprobs", "01.sequence_logprobs", "01.group_advantages", "01.clipped_surrogate",
    "02.target_distribution", "02.vargrad_log_z", "02.tb_loss",
    "03.dedup", "03.reward_weights", "03.prompt_probs", "03.sample_batch",
    "04.weight_sync", "04.searcher_step", "04.trainer_step",
    "06.beta_schedule", "06.rloo_advantages", "08.bradley_terry", "09.judge_log_reward",
    "10.flat_layout"}


def test_two_thirds_of_the_exercises_are_algorithm_code():
    assert ALGORITHM_EXERCISES <= set(EXERCISES), sorted(ALGORITHM_EXERCISES - set(EXERCISES))
    assert 3 * len(ALGORITHM_EXERCISES) >= 2 * len(EXERCISES), (len(ALGORITHM_EXERCISES), len(EXERCISES))


def test_sampler_checker_fails_a_sampler_whose_softmax_underflows(capsys):
    """03.sample_batch: a sampler that zeroes each drawn row's first-draw weight (instead of
    taking the softmax over the rows left) is right at ordinary inv_temp but raises at 1000
    with 0/1 rewards, where every weight but the best is exactly 0 (after muzero-general#111);
    the checker must fail it, and its exact probabilities must survive the underflow too."""
    import random

    import numpy as np

    from tba_lab.lab.course.nb03 import _rows, inclusion_probabilities, reward_probabilities

    reward_weights_solution = solutions()["03.reward_weights"]

    def zeroing(groups, fresh, num_prompts, k, recency_prob, inv_temp, rng):
        batch, used = [], set()
        for _ in range(num_prompts):
            if len(used) == len(groups):
                used = set()
            fresh_left = [p for p in groups if p in fresh and p not in used]
            if fresh_left and rng.random() < recency_prob:
                pid = rng.choice(fresh_left)
                rows = list(groups[pid][-k:])
            else:
                pid = rng.choice([p for p in groups if p not in used])
                w = list(reward_weights_solution([r.reward for r in groups[pid]], inv_temp))
                rows = []
                while len(rows) < min(k, len(groups[pid])):
                    i = rng.choices(range(len(w)), weights=w)[0]
                    rows.append(groups[pid][i])
                    w[i] = 0.0
            w = list(reward_weights_solution([r.reward for r in groups[pid]], inv_temp))
            while len(rows) < k:
                rows.append(rng.choices(groups[pid], weights=w)[0])
            batch += rows
            used.add(pid)
        return batch

    ordinary = zeroing({0: _rows(0, [0, 1, 0, 1, 1, 0])}, set(), 1, 3, 0.0, 1.5, random.Random(0))
    assert len({id(x) for x in ordinary}) == 3  # fine while no weight underflows
    assert check("03.sample_batch", solutions()["03.sample_batch"])
    assert "PASS" in capsys.readouterr().out
    assert not check("03.sample_batch", zeroing)
    assert "Total of weights must be greater than zero" in capsys.readouterr().out
    r = [0, 1, 0, 1, 1, 0]
    assert np.allclose(inclusion_probabilities(reward_probabilities(r, 1000.0), 4),
                       [1 / 3, 1, 1 / 3, 1, 1, 1 / 3])
    redteam = 200.0 * np.array([-5, -0.2, -4.5, -4.8, -5])  # the two -5 rows tie for the last
    assert np.allclose(inclusion_probabilities(None, 4, logits=redteam), [0.5, 1, 1, 1, 0.5])
