"""The course as nbgrader assignments: the students' copies hold no solution, the installed
package holds none either, and the grading of four made-up submissions (one that cannot be graded) scores what it should."""
import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import tba_lab
from tba_lab.lab import assignments
from tba_lab.lab.course import EXERCISES, check
from tba_lab.lab.reproduce import NOTEBOOK_DIR, find_notebooks
from tests._answers import exercise_name, solutions

pytest.importorskip("nbgrader")

STEM = "02_trajectory_balance"  # the graded assignment: TB's own exercises, 13 s in SMOKE


def _regions(path: Path) -> dict[str, str]:
    """{grade_id: the text between BEGIN and END SOLUTION} of one notebook."""
    found = {}
    for cell in nbformat.read(path, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            found[meta["grade_id"]] = "\n".join(re.findall(
                rf"{assignments.BEGIN}\n(.*?)\n *{assignments.END}", cell.source, flags=re.S))
    return found


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    return root, assignments.release(root)


def test_release_writes_ten_student_notebooks_whose_exercises_are_all_stubs(course):
    root, written = course
    assert [p.stem for p in written] == [p.stem for p in find_notebooks()]
    assert len(written) == 10
    for path in written:
        text = path.read_text()
        assert assignments.BEGIN not in text and assignments.END not in text
        assert "USE_SOLUTIONS" not in text and "solution(" not in text
        lines = {line.strip() for c in nbformat.read(path, as_version=4).cells
                 for line in c.source.splitlines()}
        for grade_id, region in _regions(NOTEBOOK_DIR / path.name).items():
            kept = [line.strip() for line in region.splitlines()
                    if len(line.strip()) > 30 and line.strip() in lines]
            assert not kept, f"{path.name} {grade_id}: solution lines left: {kept}"
    # run as a student would: every exercise of the students' copies fails its checker
    stubs = solutions(root / "release")
    assert sorted(stubs) == sorted(EXERCISES)
    assert [n for n, fn in stubs.items() if check(n, fn, verbose=False)] == []


def test_each_exercise_is_one_graded_check_cell_and_links_still_open(course):
    root, written = course
    graded = {}
    for path in written:
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade"):
                name = exercise_name(meta["grade_id"])
                assert meta["points"] == 1 and meta["locked"] and not meta["solution"]
                assert re.fullmatch(rf'\w+ = check\("{re.escape(name)}", \w+\)', cell.source)
                graded[name] = graded.get(name, 0) + 1
            for link in re.findall(r"\]\(([^)#]+)", cell.source if cell.cell_type == "markdown" else ""):
                if not link.startswith(("http", "#", "mailto")):
                    assert (path.parent / link).exists(), f"{path.name}: broken link {link}"
    assert graded == {name: 1 for name in EXERCISES}


def test_release_refuses_to_overwrite_students_copies(course):
    root, _ = course
    with pytest.raises(FileExistsError, match="--force"):
        assignments.release(root)


def test_the_installed_package_holds_no_worked_solution():
    import tba_lab.lab.course as course_pkg

    assert not hasattr(course_pkg, "solution")
    package = "\n".join(re.sub(r"\s+", " ", p.read_text())
                        for p in Path(tba_lab.__file__).parent.rglob("*.py"))
    for path in find_notebooks():
        for grade_id, region in _regions(path).items():
            assert region.strip(), f"{path.name} {grade_id}: an empty solution region"
            body = re.sub(r"\s+", " ", region).strip()
            assert body not in package, f"{grade_id}: its worked solution is in the package"


def test_check_raises_only_while_nbgrader_grades(monkeypatch, capsys):
    stub = EXERCISES["02.tb_loss"].stub
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert check("02.tb_loss", stub) is False  # a student's kernel runs on
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(AssertionError, match="FAIL 02.tb_loss"):
        check("02.tb_loss", stub)
    assert check("02.tb_loss", solutions()["02.tb_loss"]) is True
    # the notebook imports the package's own function for its later cells: handing it in fails
    from tba_lab.losses import vargrad_log_z
    with pytest.raises(AssertionError, match="FAIL 02.vargrad_log_z"):
        check("02.vargrad_log_z", vargrad_log_z)
    monkeypatch.delenv("NBGRADER_EXECUTION")
    assert check("02.vargrad_log_z", vargrad_log_z) is False
    assert "write your own" in capsys.readouterr().out


def _submission(root: Path, subs: Path, student: str, edit: dict) -> None:
    """The students' copy of STEM with every answer filled in from the worked solution, except
    the cells in ``edit`` ({grade_id: new source}), saved where nbgrader collects it."""
    answers = _regions(NOTEBOOK_DIR / f"{STEM}.ipynb")
    nb = nbformat.read(root / "release" / STEM / f"{STEM}.ipynb", as_version=4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution"):
            filled = re.sub(r"^( *)# YOUR CODE HERE\n *raise NotImplementedError\(\)",
                            lambda m: answers[gid], cell.source, flags=re.M)
            cell.source = edit[gid](filled, cell.source) if gid in edit else filled
    out = subs / student / STEM / f"{STEM}.ipynb"
    out.parent.mkdir(parents=True)
    nbformat.write(nb, out)


def test_grading_scores_four_made_up_submissions_one_of_them_broken(course, tmp_path):
    """Three submissions graded, and one nbgrader cannot grade (after nbgrader#1302,
    abc-classroom#88: carol hands in a renamed copy, ``-Copy1``): carol is listed with 0 and
    the reason, and cy, graded after her, is graded; ``grades.csv`` has every student."""
    root, _ = course
    subs = tmp_path / "subs"
    _submission(root, subs, "ada", {})  # every answer right
    _submission(root, subs, "bob", {"02_tb_loss_answer":  # a wrong answer: sum for mean
                              lambda filled, empty: filled.replace("(residual ** 2).mean()",
                                                                   "(residual ** 2).sum()")})
    _submission(root, subs, "carol", {})
    book = subs / "carol" / STEM / f"{STEM}.ipynb"
    book.rename(book.with_name(f"{STEM}-Copy1.ipynb"))  # what JupyterLab's Duplicate names it
    _submission(root, subs, "cy", {"02_vargrad_log_z_answer": lambda filled, empty: empty})  # left empty
    assert "sum()" in (subs / "bob" / STEM / f"{STEM}.ipynb").read_text()
    rows = assignments.grade(root, submitted=subs)
    got = {(r["student"], r["exercise"]): r["score"] for r in rows}
    names = sorted(n for n in EXERCISES if n.startswith("02."))
    want = {(s, n): 1.0 for s in ("ada", "bob", "cy") for n in names}
    want.update({("carol", n): 0.0 for n in names})
    want[("bob", "02.tb_loss")] = 0.0
    want[("cy", "02.vargrad_log_z")] = 0.0
    assert got == want
    assert all(r["max_score"] == 1.0 for r in rows)
    with open(root / "grades.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 16 and {r["student"] for r in table} == {"ada", "bob", "carol", "cy"}
    status = {r["student"]: r["status"] for r in table}
    assert status["ada"] == status["bob"] == status["cy"] == "graded"
    assert status["carol"] == (f"not graded: handed in {STEM}-Copy1.ipynb, not {STEM}.ipynb: "
                               f"rename it to {STEM}.ipynb and grade again")
    text = assignments.table(rows)
    assert re.search(r"^ *ada .* 4/4$", text, flags=re.M) and re.search(r"^ *bob .* 3/4$", text, flags=re.M)
    assert re.search(r"^ *carol .* 0/4$", text, flags=re.M)


def test_course_release_command_writes_the_students_copies(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tba_lab", "course", "release", "--out",
                           str(tmp_path), "--only", "03"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(tmp_path / "release" / "03_replay_buffer" / "03_replay_buffer.ipynb")]
    # an ordinary nbgrader course folder: nbgrader's own commands find the course there
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    listed = subprocess.run([sys.executable, "-m", "nbgrader", "db", "assignment", "list"],
                            cwd=tmp_path, env=env, capture_output=True, text=True)
    assert listed.returncode == 0 and "03_replay_buffer (due: None)" in listed.stdout, listed.stderr
    proc = subprocess.run([sys.executable, "-m", "tba_lab", "course", "grade", "--out",
                           str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "no submissions" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    # a class whose only submission cannot be graded: listed with its reason, exit 1
    copy = tmp_path / "submitted" / "carol" / "03_replay_buffer" / "03_replay_buffer-Copy1.ipynb"
    copy.parent.mkdir(parents=True)
    shutil.copy(tmp_path / "release" / "03_replay_buffer" / "03_replay_buffer.ipynb", copy)
    proc = subprocess.run([sys.executable, "-m", "tba_lab", "course", "grade", "--out",
                           str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "carol 03_replay_buffer: not graded: handed in 03_replay_buffer-Copy1.ipynb" in proc.stderr
    with open(tmp_path / "grades.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["student"] == "carol" and r["score"] == "0.0"
                        and r["status"].startswith("not graded: handed in") for r in rows)
    proc = subprocess.run([sys.executable, "-m", "tba_lab", "course", "release", "--out",
                           str(tmp_path), "--only", "03"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--force" in proc.stderr


@pytest.mark.slow
def test_students_copies_run_to_the_end_with_every_exercise_unsolved(course, tmp_path):
    """What a student meets before solving anything: every checker prints FAIL and returns
    False, the lesson goes on with the package's own code (about 5 minutes in SMOKE)."""
    from tba_lab.lab.reproduce import reproduce

    root, written = course
    flat = tmp_path / "student"
    flat.mkdir()
    for path in written:
        (flat / path.name).write_text(path.read_text())
    results = reproduce(tmp_path / "out", smoke=True, notebook_dir=flat)
    assert {r["notebook"]: r["error"] for r in results if not r["ok"]} == {}
    for path in sorted((tmp_path / "out").glob("*.ipynb")):
        shown = "".join(o.get("text", "") for c in nbformat.read(path, as_version=4).cells
                        if c.metadata.get("nbgrader", {}).get("grade") for o in c.get("outputs", []))
        assert "PASS" not in shown and shown.count("FAIL") >= 2, (path.name, shown[:300])
