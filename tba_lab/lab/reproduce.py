"""``tba-lab reproduce``: execute every course notebook headless with papermill and report.

Each notebook in ``notebooks/`` (worked solutions in) runs with ``SMOKE``, ``SEED`` and
``OUTPUT_DIR = <output-dir>/<notebook stem>`` overriding its ``parameters`` cell. Under
``--output-dir`` go the executed notebooks, their figures and ``metrics.json``, ``report.md``
and ``parameters.json``. Also the helpers :mod:`~tba_lab.lab.site` and
:mod:`~tba_lab.lab.assignments` share: :func:`find_notebooks`, :func:`relinked`, :func:`require`.
"""
from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path

from tba_lab.config import SEED_MAX
from tba_lab.lab.runs import flatten_config
from tba_lab.paths import REPO_DIR
from tba_lab.runlog import read_json

NOTEBOOK_DIR = REPO_DIR / "notebooks"


def find_notebooks(notebook_dir: Path = NOTEBOOK_DIR, only: list[str] | None = None) -> list[Path]:
    """The course notebooks, sorted; ``only`` keeps those whose stem starts with one of them.
    FileNotFoundError when none is found."""
    books = sorted(p for p in Path(notebook_dir).glob("*.ipynb") if not p.name.startswith("."))
    if only:
        books = [p for p in books if any(p.stem.startswith(o) for o in only)]
    if not books:
        raise FileNotFoundError(f"no notebooks found in {notebook_dir} (filter {only!r}); "
                                "run from a clone of the repository (pip install -e .)")
    return books


def require(module: str, who: str, extra: str = "course"):
    """``module`` imported, or ImportError saying that ``who`` needs it and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(f'{who} needs {module}: pip install -e ".[{extra}]"') from e


def relinked(path: Path, relink):
    """The notebook at ``path`` (nbformat 4) with ``relink(source)`` as each markdown cell's."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = relink(cell.source)
    return nb


def reproduce(output_dir: str | Path = "runs/reproduce", smoke: bool = False, seed: int = 0,
              only: list[str] | None = None, notebook_dir: Path = NOTEBOOK_DIR) -> list[dict]:
    """Execute the notebooks; return one result dict per notebook and write ``report.md``.
    Raises ImportError (no papermill), FileNotFoundError (no notebooks), ValueError (a seed
    outside 0 .. ``tba_lab.config.SEED_MAX``)."""
    if not 0 <= int(seed) <= SEED_MAX:
        raise ValueError(f"--seed {seed}: give a seed from 0 to {SEED_MAX}")
    pm = require("papermill", "tba-lab reproduce")

    out = Path(output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for nb in find_notebooks(notebook_dir, only):
        params = {"SMOKE": bool(smoke), "SEED": int(seed), "OUTPUT_DIR": str(out / nb.stem)}
        t0 = time.time()
        error = None
        try:
            pm.execute_notebook(str(nb), str(out / nb.name), parameters=params, progress_bar=False,
                                log_output=False, cwd=str(nb.parent.parent))
        except Exception as e:  # papermill raises PapermillExecutionError with the cell's error
            error = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
        seconds = round(time.time() - t0, 1)
        nb_out = out / nb.stem
        results.append({"notebook": nb.name, "ok": error is None, "error": error,
                        "seconds": seconds, "parameters": params,
                        "metrics": read_json(nb_out / "metrics.json") or {},
                        "figures": sorted(str(p.relative_to(out)) for p in nb_out.glob("*.png"))})
        print(f"{'ok  ' if error is None else 'FAIL'} {nb.name} ({seconds:.0f} s)"
              + (f": {error}" if error else ""), flush=True)
    write_report(results, out, smoke)
    return results


def write_report(results: list[dict], out: Path, smoke: bool) -> Path:
    """``report.md`` (status table, metrics, figures) and ``parameters.json`` in ``out``."""
    lines = [f"# tba-lab reproducibility run{' (SMOKE)' if smoke else ''}", "",
             f"{sum(r['ok'] for r in results)}/{len(results)} notebooks ran; "
             f"{sum(r['seconds'] for r in results):.0f} s in total.", "",
             "| notebook | status | seconds | metrics |", "|---|---|---|---|"]
    for r in results:
        m = ", ".join(f"{k}={_fmt(v)}".replace("|", "\\|")
                      for k, v in flatten_config(r["metrics"]).items()) or "-"
        status = "ok" if r["ok"] else f"FAILED: {r['error']}"
        lines.append(f"| [{r['notebook']}]({r['notebook']}) | {status} | {r['seconds']:.0f} | {m} |")
    for r in results:
        if r["figures"]:
            lines += ["", f"## {r['notebook']}", ""]
            lines += [f"![{Path(f).stem}]({f})" for f in r["figures"]]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    (out / "parameters.json").write_text(json.dumps(
        {r["notebook"]: r["parameters"] for r in results}, indent=2) + "\n")
    return path


def _fmt(v, max_items: int = 6) -> str:
    """One metric value for the report's table: floats to 4 digits, a list of more than
    ``max_items`` cut to its first and last items and its length."""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_fmt(x)}" for k, x in v.items()) + "}"
    if not isinstance(v, (list, tuple)):
        return str(v)
    shown = [_fmt(x) for x in v]
    if len(shown) <= max_items:
        return f"[{', '.join(shown)}]"
    return f"[{', '.join(shown[:max_items - 2] + ['…', shown[-1]])}] ({len(v)} items)"


def main(args) -> int:
    """CLI entry (``tba-lab reproduce``); returns the exit code."""
    try:
        results = reproduce(args.output_dir, smoke=args.smoke, seed=args.seed, only=args.only,
                            notebook_dir=Path(args.notebook_dir) if args.notebook_dir else NOTEBOOK_DIR)
    except (ImportError, FileNotFoundError, ValueError) as e:
        print(f"tba-lab reproduce: {e}", file=sys.stderr)
        return 2
    print(f"report: {Path(args.output_dir) / 'report.md'}")
    return 0 if all(r["ok"] for r in results) else 1
