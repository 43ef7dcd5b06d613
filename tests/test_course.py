"""The course: exercises (solutions pass, stubs fail), notebook hygiene, and the papermill
reproducibility run in its SMOKE configuration (every notebook executed, as CI does)."""
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tba_lab.lab.course import EXERCISES, check
from tba_lab.lab.reproduce import NOTEBOOK_DIR, find_notebooks, reproduce

NOTEBOOKS = ["01_on_policy_grpo", "02_trajectory_balance", "03_replay_buffer",
             "04_async_searchers", "05_scaling", "06_explorer"]
PARAMETERS = ("SMOKE", "SEED", "OUTPUT_DIR", "USE_SOLUTIONS")


def test_every_notebook_exists_with_at_least_two_exercises():
    assert [p.stem for p in find_notebooks()] == NOTEBOOKS
    for stem in NOTEBOOKS:
        n = sum(name.startswith(stem[:2] + ".") for name in EXERCISES)
        assert n >= 2, f"{stem}: {n} exercises"


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_checker_passes_the_solution_and_fails_the_stub(name):
    ex = EXERCISES[name]
    assert check(name, ex.solution, verbose=False), f"{name}: the worked solution fails its checker"
    assert not check(name, ex.stub, verbose=False), f"{name}: the empty stub passes its checker"
    assert not check(name, lambda *a, **k: 0.0, verbose=False), f"{name}: a constant passes"


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_notebook_is_committed_clean_with_goals_parameters_and_checkers(stem):
    nb = nbformat.read(NOTEBOOK_DIR / f"{stem}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code), "commit without outputs"
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
    params = nbformat.v4.new_code_cell("SMOKE = False\nSEED = 0\nOUTPUT_DIR = 'x'\nUSE_SOLUTIONS = False")
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


def test_reproduce_smoke_runs_every_notebook(tmp_path):
    """The CI reproducibility run: every notebook, SMOKE configuration, solutions plugged in."""
    results = reproduce(tmp_path, smoke=True, seed=0)
    failed = {r["notebook"]: r["error"] for r in results if not r["ok"]}
    assert not failed, failed
    assert [r["notebook"] for r in results] == [f"{s}.ipynb" for s in NOTEBOOKS]
    for r in results:
        assert r["figures"], f"{r['notebook']}: no figure saved"
        assert r["metrics"], f"{r['notebook']}: no metrics.json"
        assert r["seconds"] <= 90, f"{r['notebook']}: SMOKE took {r['seconds']} s (bound 60 s)"
        executed = nbformat.read(tmp_path / r["notebook"], as_version=4)
        printed = "\n".join(o.get("text", "") for c in executed.cells if c.cell_type == "code"
                            for o in c.outputs if o.get("output_type") == "stream")
        assert "FAIL" not in printed and printed.count("PASS") >= 2, r["notebook"]
    report = (tmp_path / "report.md").read_text()
    assert "6/6 notebooks ran" in report and report.count("![") >= 6
