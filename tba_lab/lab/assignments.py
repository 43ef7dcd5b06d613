"""The course as graded assignments: nbgrader writes the students' copies and grades them.

``notebooks/NN_*.ipynb`` are the instructor's copy. Each exercise cell carries nbgrader's
metadata (``solution: true``) and holds its worked solution between ``### BEGIN SOLUTION`` and
``### END SOLUTION``; the cell after it, ``_ = check("NN.name", my_fn)``, is an autograded test
cell (``grade: true``, 1 point, locked). Every notebook is one assignment. nbgrader does the
work; this module only lays out its course folder and reads its gradebook:

    <course>/source/<NN_name>/<NN_name>.ipynb       copies of notebooks/
    <course>/release/<NN_name>/<NN_name>.ipynb      the students' copies: solutions replaced by
                                                   ``# YOUR CODE HERE`` / NotImplementedError
    <course>/submitted/<student>/<NN_name>/<NN_name>.ipynb   what students hand in
    <course>/autograded/...                          nbgrader's executed, scored copies
    <course>/gradebook.db                            nbgrader's gradebook (SQLite)
    <course>/nbgrader_config.py                      so nbgrader's own commands work there
    <course>/grades.csv                              one row per student and exercise

Grading runs each submission headless with ``SMOKE = True`` (papermill's parameter injection),
so a notebook takes seconds to a minute, not its full run. ``check`` raises ``AssertionError``
on a FAIL only under nbgrader (``NBGRADER_EXECUTION``), so a student's own kernel runs on.
The students' copies import ``tba_lab``, which holds the checkers and references but no worked
solution (a test checks it).
"""
from __future__ import annotations

import csv
import os
import shutil
import sys
from pathlib import Path

from tba_lab.lab.reproduce import NOTEBOOK_DIR, find_notebooks
from tba_lab.paths import REPO_DIR

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
COURSE_ID = "tba-lab"
CELL_TIMEOUT = 900  # seconds a grading run may spend in one cell (nbgrader's default: 30)


def _nbgrader():
    try:
        import nbgrader  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError('tba-lab course needs nbgrader: pip install -e ".[instructor]"') from e
    bin_dir = str(Path(sys.executable).parent)
    if shutil.which("alembic") is None and bin_dir not in os.environ["PATH"].split(os.pathsep):
        # nbgrader's gradebook runs the `alembic` command: found beside this Python when the
        # venv is not activated (e.g. `.venv/bin/tba-lab course release`)
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ["PATH"]
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config
    return NbGraderAPI, CourseDirectory, Config


def _api(course_dir: Path, smoke: bool = True):
    NbGraderAPI, CourseDirectory, Config = _nbgrader()
    config = Config()
    config.CourseDirectory.root = str(course_dir)
    config.CourseDirectory.course_id = COURSE_ID
    config.Exchange.root = str(course_dir / "exchange")  # unused, but nbgrader probes it
    config.Execute.timeout = CELL_TIMEOUT
    from nbgrader.converters.autograde import Autograde
    config.Autograde.autograde_preprocessors = (
        [_injector(smoke)] + list(Autograde.class_traits()["autograde_preprocessors"].default()))
    return NbGraderAPI(CourseDirectory(config=config), config=config)


def _injector(smoke: bool):
    """An nbgrader preprocessor class that sets the notebook's parameters before it runs, with
    papermill's own injection (a cell after the ``parameters`` cell)."""
    from nbgrader.preprocessors import NbGraderPreprocessor

    class InjectParameters(NbGraderPreprocessor):
        def preprocess(self, nb, resources):
            from papermill.parameterize import parameterize_notebook

            # the kernel runs in the submission's autograded folder: its figures go there
            params = {"SMOKE": smoke, "SEED": 0, "OUTPUT_DIR": "grading_output"}
            nb.metadata.setdefault("papermill", {})  # what papermill's own loader adds
            for cell in nb.cells:
                cell.metadata.setdefault("tags", [])
            return parameterize_notebook(nb, params), resources

    return InjectParameters


def release(course_dir: str | Path = "runs/course", notebook_dir: Path = NOTEBOOK_DIR,
            only: list[str] | None = None, force: bool = False) -> list[Path]:
    """Write the students' copies of the course notebooks with nbgrader.

    Args:
        course_dir: nbgrader's course folder (created; ``runs/`` is git-ignored).
        notebook_dir: the instructor's notebooks (with solutions).
        only: keep notebooks whose stem starts with one of these (e.g. ``["02"]``).
        force: overwrite an existing ``release/`` folder.
    Returns:
        the paths of the students' notebooks, one per assignment, in course order.
    Raises:
        FileExistsError: ``<course_dir>/release`` exists and ``force`` is False (students may
            have worked in it: pass ``--force``, or another ``--out``).
        RuntimeError: nbgrader failed on a notebook (its log is in the message), or a
            solution region survived in a student's copy.
    """
    course = Path(course_dir).resolve()
    if (course / "release").exists() and not force:
        raise FileExistsError(f"{course / 'release'} exists (students' copies, maybe edited): "
                              "pass --force to overwrite it, or choose another --out")
    books = find_notebooks(notebook_dir, only)
    course.mkdir(parents=True, exist_ok=True)
    (course / "nbgrader_config.py").write_text(  # nbgrader's own commands, run in this folder
        f'c = get_config()  # noqa: F821\nc.CourseDirectory.course_id = "{COURSE_ID}"\n'
        f'c.Execute.timeout = {CELL_TIMEOUT}  # seconds per cell, as `tba-lab course grade`\n')
    api = _api(course)
    written = []
    for nb in books:
        src = course / "source" / nb.stem
        src.mkdir(parents=True, exist_ok=True)
        shutil.copy2(nb, src / nb.name)
        result = api.generate_assignment(nb.stem, force=True, create=True)
        if not result["success"]:
            raise RuntimeError(f"nbgrader generate_assignment {nb.stem} failed:\n"
                               f"{result.get('log', '')[-4000:]}")
        out = course / "release" / nb.stem / nb.name
        _relink(out)
        text = out.read_text()
        if BEGIN in text or END in text:
            raise RuntimeError(f"{out}: a solution region survived the release")
        written.append(out)
    return written


def _relink(path: Path) -> None:
    """Point the markdown links written for ``notebooks/`` (``](../docs/usage.md)``) at the
    repository from the student's copy, so that they open in JupyterLab (``make lab``)."""
    import nbformat

    up = os.path.relpath(REPO_DIR, path.parent)
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = cell.source.replace("](../", f"]({up}/")
    nbformat.write(nb, path)


def grade(course_dir: str | Path = "runs/course", submitted: str | Path | None = None,
          smoke: bool = True) -> list[dict]:
    """Autograde every submission with nbgrader and write ``<course_dir>/grades.csv``.

    Args:
        course_dir: the folder :func:`release` wrote (its gradebook knows the assignments).
        submitted: a folder laid out as ``<student>/<NN_name>/<NN_name>.ipynb``, copied into
            ``<course_dir>/submitted``; None: grade what is already there.
        smoke: run each submission with ``SMOKE = True`` (False: the full notebook).
    Returns:
        one dict per student and exercise: ``student``, ``assignment``, ``exercise`` (e.g.
        ``"02.tb_loss"``), ``score`` and ``max_score`` (points, floats); in that order in the CSV.
    Raises:
        FileNotFoundError: no gradebook (run :func:`release` first) or no submission found.
        RuntimeError: nbgrader could not grade a submission (its log is in the message).
    """
    course = Path(course_dir).resolve()
    if not (course / "gradebook.db").is_file():
        raise FileNotFoundError(f"{course / 'gradebook.db'} is missing: run "
                                f"`tba-lab course release --out {course_dir}` first")
    if submitted is not None:
        shutil.copytree(Path(submitted), course / "submitted", dirs_exist_ok=True)
    pairs = sorted((s.name, a.name) for s in (course / "submitted").glob("*") if s.is_dir()
                   for a in s.glob("*") if a.is_dir())
    if not pairs:
        raise FileNotFoundError(f"no submissions in {course / 'submitted'} "
                                "(expected <student>/<NN_name>/<NN_name>.ipynb)")
    api = _api(course, smoke=smoke)
    for student, assignment in pairs:
        result = api.autograde(assignment, student, force=True, create=True)
        if not result["success"]:
            raise RuntimeError(f"nbgrader autograde {assignment} {student} failed:\n"
                               f"{result.get('log', '')[-4000:]}")
    rows = scores(course, pairs)
    with open(course / "grades.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["student", "assignment", "exercise", "score",
                                               "max_score"])
        writer.writeheader()
        writer.writerows(rows)
    return rows


def scores(course_dir: Path, pairs: list[tuple[str, str]]) -> list[dict]:
    """The gradebook's score of each graded cell, for the (student, assignment) pairs given.

    A test cell's ``grade_id`` is the exercise name with "_" for ".": ``02_tb_loss``."""
    from nbgrader.api import Gradebook

    rows = []
    with Gradebook(f"sqlite:///{Path(course_dir) / 'gradebook.db'}", COURSE_ID) as gb:
        for student, assignment in pairs:
            for notebook in gb.find_assignment(assignment).notebooks:
                sub = gb.find_submission_notebook(notebook.name, assignment, student)
                for g in sorted(sub.grades, key=lambda g: g.name):
                    rows.append({"student": student, "assignment": assignment,
                                 "exercise": g.name.replace("_", ".", 1),
                                 "score": float(g.score), "max_score": float(g.max_score)})
    return rows


def table(rows: list[dict]) -> str:
    """Scores as text: one line per student, one column per exercise, and the total."""
    exercises = sorted({r["exercise"] for r in rows})
    students = sorted({r["student"] for r in rows})
    got = {(r["student"], r["exercise"]): r["score"] for r in rows}
    most = {r["exercise"]: r["max_score"] for r in rows}
    width = max(len(e) for e in exercises)
    lines = [f"{'student':<12}" + "".join(f"{e:>{width + 2}}" for e in exercises) + "   total"]
    for s in students:
        cells = [got.get((s, e)) for e in exercises]
        total = sum(c or 0.0 for c in cells)
        lines.append(f"{s:<12}" + "".join(f"{'-' if c is None else f'{c:g}':>{width + 2}}"
                                          for c in cells)
                     + f"   {total:g}/{sum(most.values()):g}")
    return "\n".join(lines)
