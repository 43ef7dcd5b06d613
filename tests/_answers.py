"""The worked solutions as functions, read from where they live: the instructor's notebooks
(each exercise cell between ``### BEGIN SOLUTION`` and ``### END SOLUTION``).

Each notebook's import statements run first (from every code cell, nothing else of them), then
its exercise cells in order, so an answer may use an earlier one (03.sample_batch uses
03.reward_weights) and the names the notebook imports (``minimal``, ``torch``, ``np``).
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import nbformat

from tba_lab.lab.reproduce import find_notebooks


def exercise_name(grade_id: str) -> str:
    """``02_tb_loss_answer`` or ``02_tb_loss`` -> ``02.tb_loss``."""
    return grade_id.removesuffix("_answer").replace("_", ".", 1)


@functools.lru_cache(maxsize=None)
def solutions(notebook_dir=None) -> dict:
    """{exercise name: the worked solution (a function or a class)} of the notebooks in
    ``notebook_dir`` (default ``notebooks/``; a folder of students' copies gives their stubs)."""
    found = {}
    paths = find_notebooks() if notebook_dir is None else sorted(Path(notebook_dir).rglob("*.ipynb"))
    for path in paths:
        ns = {"SMOKE": True, "SEED": 0, "OUTPUT_DIR": "unused", "__name__": "__main__"}
        for cell in nbformat.read(path, 4).cells:
            if cell.cell_type != "code":
                continue
            meta = cell.metadata.get("nbgrader", {})
            try:
                tree = ast.parse(cell.source)
            except SyntaxError:  # an IPython magic (%tensorboard): no import there
                continue
            if meta.get("solution"):
                exec(compile(tree, f"{path.name}:{meta['grade_id']}", "exec"), ns)
                defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
                found[exercise_name(meta["grade_id"])] = ns[defined[0]]
            else:
                imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
                exec(compile(ast.Module(body=imports, type_ignores=[]), path.name, "exec"), ns)
    return found
