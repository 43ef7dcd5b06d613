"""The course as graded assignments: nbgrader writes the students' copies and grades them.

``notebooks/NN_*.ipynb`` are the instructor's copy: each exercise cell (nbgrader ``solution:
true``) holds its worked solution between ``### BEGIN SOLUTION`` and ``### END SOLUTION``, and
the cell after it, ``_ = check("NN.name", my_fn)``, is a locked autograded test (1 point).
Each notebook is an assignment; this module lays out nbgrader's course folder (``source/``,
``release/`` the students' copies, ``submitted/<student>/``, ``autograded/``, ``gradebook.db``,
``nbgrader_config.py``) and writes ``grades.csv``. Grading runs each submission with
``SMOKE = True``; ``check`` raises on a FAIL only under nbgrader (``NBGRADER_EXECUTION``).
"""
from __future__ import annotations

import csv
import os
import shutil
import sys
from pathlib import Path

from tba_lab.lab.reproduce import NOTEBOOK_DIR, find_notebooks, relinked, require
from tba_lab.paths import REPO_DIR

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
COURSE_ID = "tba-lab"
CELL_TIMEOUT = 900  # seconds a grading run may spend in one cell (nbgrader's default: 30)


def _api(course_dir: Path, smoke: bool = True):
    """nbgrader's API on ``course_dir``, its grading runs with ``SMOKE = smoke``."""
    require("nbgrader", "tba-lab course", "instructor")
    bin_dir = str(Path(sys.executable).parent)
    if shutil.which("alembic") is None and bin_dir not in os.environ["PATH"].split(os.pathsep):
        # nbgrader's gradebook runs the `alembic` command: found beside this Python when the
        # venv is not activated (e.g. `.venv/bin/tba-lab course release`)
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ["PATH"]
    from nbgrader.apps import NbGraderAPI
    from nbgrader.converters.autograde import Autograde
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    config = Config()
    config.CourseDirectory.root = str(course_dir)
    config.CourseDirectory.course_id = COURSE_ID
    config.Exchange.root = str(course_dir / "exchange")  # unused, but nbgrader probes it
    config.Execute.timeout = CELL_TIMEOUT
    config.Autograde.autograde_preprocessors = (
        [_injector(smoke)] + list(Autograde.class_traits()["autograde_preprocessors"].default()))
    return NbGraderAPI(CourseDirectory(config=config), config=config)


def _injector(smoke: bool):
    """An nbgrader preprocessor class that sets the notebook's parameters with papermill's."""
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


def release(course_dir: str | Path = "runs/course", only: list[str] | None = None,
            force: bool = False) -> list[Path]:
    """Write the students' copies of the notebooks (``only``: stems starting with one of these)
    into ``course_dir/release`` with nbgrader; return their paths in course order. Their links
    to ``../`` point at the repository, so that they open in JupyterLab (``make lab``).

    Raises FileExistsError when ``release/`` exists (students may have worked in it) and not
    ``force``; RuntimeError when nbgrader failed or a solution region survived.
    """
    import nbformat

    course = Path(course_dir).resolve()
    if (course / "release").exists() and not force:
        raise FileExistsError(f"{course / 'release'} exists (students' copies, maybe edited): "
                              "pass --force to overwrite it, or choose another --out")
    books = find_notebooks(NOTEBOOK_DIR, only)
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
        up = os.path.relpath(REPO_DIR, out.parent)
        nbformat.write(relinked(out, lambda text: text.replace("](../", f"]({up}/")), out)
        text = out.read_text()
        if BEGIN in text or END in text:
            raise RuntimeError(f"{out}: a solution region survived the release")
        written.append(out)
    return written


GRADED = "graded"  # grades.csv's status of a submission nbgrader scored


def grade(course_dir: str | Path = "runs/course", submitted: str | Path | None = None,
          smoke: bool = True) -> list[dict]:
    """Autograde every submission in ``course_dir`` (after :func:`release`) with nbgrader, after
    copying in ``submitted`` (``<student>/<NN_name>/<NN_name>.ipynb``) if given; ``smoke=False``
    runs full notebooks. Writes ``grades.csv`` and returns its rows (:func:`scores`).

    A submission nbgrader cannot grade (a renamed notebook, an unreadable file) does not stop
    the others, as with ``nbgrader autograde`` itself: its exercises are listed with score 0
    and ``status`` ``"not graded: <reason>"``, and every other submission is graded.

    Raises FileNotFoundError (no gradebook, or no submission).
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
    failed = {}
    for student, assignment in pairs:
        try:
            result = api.autograde(assignment, student, force=True, create=True)
        except Exception as e:  # one submission never stops the class
            result = {"success": False, "error": f"{type(e).__name__}: {e}"}
        if not result["success"]:
            failed[(student, assignment)] = failure_reason(result, assignment)
    rows = scores(course, pairs, failed)
    with open(course / "grades.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["student", "assignment", "exercise", "score",
                                               "max_score", "status"])
        writer.writeheader()
        writer.writerows(rows)
    return rows


def failure_reason(result: dict, assignment: str) -> str:
    """One line saying why nbgrader could not grade a submission, from ``api.autograde``'s
    result (``log``, ``error``): a notebook handed in under another name is named, with the
    fix; otherwise nbgrader's last error line."""
    log = result.get("log") or ""
    unknown = [line.split("Skipping unknown notebook:", 1)[1].strip()
               for line in log.splitlines() if "Skipping unknown notebook:" in line]
    if unknown:
        return (f"handed in {', '.join(Path(u).name for u in unknown)}, not {assignment}.ipynb: "
                f"rename it to {assignment}.ipynb and grade again")
    errors = [line.split("]", 1)[-1].strip() for line in log.splitlines() if "[ERROR]" in line]
    lines = [line for line in (result.get("error") or "").strip().splitlines() if line.strip()]
    return (errors or lines or ["nbgrader autograde failed"])[-1]


def scores(course_dir: Path, pairs: list[tuple[str, str]],
           failed: dict[tuple[str, str], str] | None = None) -> list[dict]:
    """``student``, ``assignment``, ``exercise`` (its test cell's ``grade_id`` with "." for the
    first "_": ``02.tb_loss``), ``score``, ``max_score`` and ``status`` of each graded cell of
    the pairs. ``failed``: ``{(student, assignment): reason}`` of submissions nbgrader could not
    grade; their cells score 0 with ``status`` ``"not graded: <reason>"`` (else ``graded``)."""
    from nbgrader.api import Gradebook

    failed = failed or {}
    rows = []
    with Gradebook(f"sqlite:///{Path(course_dir) / 'gradebook.db'}", COURSE_ID) as gb:
        for student, assignment in pairs:
            for notebook in gb.find_assignment(assignment).notebooks:
                if (student, assignment) in failed:
                    status = f"not graded: {failed[(student, assignment)]}"
                    cells = [(c.name, 0.0, c.max_score) for c in notebook.grade_cells]
                else:
                    status = GRADED
                    sub = gb.find_submission_notebook(notebook.name, assignment, student)
                    cells = [(g.name, g.score, g.max_score) for g in sub.grades]
                for name, score, most in sorted(cells):
                    rows.append({"student": student, "assignment": assignment,
                                 "exercise": name.replace("_", ".", 1), "score": float(score),
                                 "max_score": float(most), "status": status})
    return rows


def table(rows: list[dict]) -> str:
    """Scores as a text table (:func:`~tba_lab.lab.timeline.format_table`): one line per
    student, one column per exercise (``-``: not graded), and the total."""
    from tba_lab.lab.timeline import format_table

    exercises = sorted({r["exercise"] for r in rows})
    got = {(r["student"], r["exercise"]): r["score"] for r in rows}
    most = sum({r["exercise"]: r["max_score"] for r in rows}.values())
    lines = [{"student": s, **{e: got.get((s, e)) for e in exercises},
              "total": f"{sum(got.get((s, e)) or 0.0 for e in exercises):g}/{most:g}"}
             for s in sorted({r["student"] for r in rows})]
    return format_table(lines, ["student", *exercises, "total"])
