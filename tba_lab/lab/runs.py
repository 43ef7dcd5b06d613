"""Runs on disk, the explorer's memory (``output_root/run_NN`` with the trainer's ``config.yaml``
and ``summary.json``): the runs table, the settings two runs differ in, a run's settings as a
YAML config. A restarted kernel rebuilds the table from disk.
"""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

from tba_lab.config import load_yaml, read_yaml_data, write_yaml
from tba_lab.registry import ALGORITHMS, section_key
from tba_lab.runlog import read_json

#: Settings columns of the runs table -> dotted key of the run's ``config.yaml``; ``{algo}`` is
#: the chosen algorithm's own section (``tb``, ``grpo`` for grpo and dr_grpo, ...).
SETTING_COLUMNS = {"algo": "algo", "mode": "async.mode", "beta": "{algo}.beta",
                   "beta_final": "{algo}.beta_final", "beta_anneal_steps": "{algo}.beta_anneal_steps",
                   "learning_rate": "training.learning_rate",
                   "num_generations": "training.num_generations",
                   "recency_prob": "buffer.recency_prob", "inv_temp": "buffer.inv_temp",
                   "sync_period": "async.sync_period", "num_searchers": "async.num_searchers",
                   "max_minutes": "max_minutes", "seed": "seed"}
#: Result columns of the runs table -> key of the run's ``summary.json``.
RESULT_COLUMNS = {"seconds": "wall_seconds", "accuracy_before": "accuracy_before",
                  "accuracy_after": "accuracy_after", "updates": "trainer_steps",
                  "staleness_mean": "staleness_mean", "staleness_max": "staleness_max"}
#: Written by :func:`~tba_lab.lab.widgets.run_and_plot` when a stop event ended the run before
#: its budget (``train`` saves such a run as one that used its budget).
STOPPED_FILE = "stopped.json"
_RUN_NAME = re.compile(r"run_(\d+)$")


def flatten_config(data: dict, prefix: str = "") -> dict:
    """Nested dicts as dotted keys: ``{"training": {"learning_rate": 5e-05}}`` ->
    ``{"training.learning_rate": 5e-05}`` (an empty dict stays a value)."""
    out: dict = {}
    for key, value in (data or {}).items():
        if isinstance(value, dict) and value:
            out.update(flatten_config(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def read_settings(run_dir: str | Path) -> dict:
    """A run's ``config.yaml`` as flat dotted keys, not validated (a run of an older kit still
    shows). FileNotFoundError without one; ValueError when it is not a YAML mapping (ConfigError
    when it is not valid YAML)."""
    path = Path(run_dir) / "config.yaml"
    data = read_yaml_data(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a YAML mapping")
    return flatten_config(data)


def _mark_stopped(out: Path, summary: dict | None, cfg) -> bool:
    """Write :data:`STOPPED_FILE` and return True if a stop event ended this run: not
    interrupted, and stopped before its budget and its step limit."""
    max_steps, budget = cfg.training.max_steps, 60 * cfg.max_minutes
    if (not summary or summary.get("interrupted") or (summary.get("wall_seconds") or 0.0) >= budget
            or (max_steps and (summary.get("trainer_steps") or 0) >= max_steps)):
        return False
    (out / STOPPED_FILE).write_text(json.dumps(
        {"trainer_steps": summary.get("trainer_steps"), "wall_seconds": summary.get("wall_seconds"),
         "budget_seconds": round(budget, 1)}) + "\n")
    return True


def _status(run_dir: Path, summary: dict | None) -> str:
    if summary is None:
        return "incomplete"
    if summary.get("interrupted"):
        return "interrupted"
    marker = read_json(run_dir / STOPPED_FILE)  # it must belong to this summary, not to an
    stopped = isinstance(marker, dict) and \
        marker.get("trainer_steps") == summary.get("trainer_steps")  # earlier try in the folder
    return "stopped" if stopped else "done"


def _algo_section(algo) -> str:
    """The config section of ``algo``'s options (its name if it is not registered now)."""
    return section_key(ALGORITHMS.get(algo)) if algo in ALGORITHMS else str(algo)


def list_runs(output_root: str | Path) -> list[dict]:
    """A row per run directory under ``output_root`` with a readable ``config.yaml``, in natural
    order (``run_2`` before ``run_10``): ``run``, ``run_dir``, ``status`` ("done", "stopped" by
    a stop event, "interrupted" by Ctrl-C or SIGTERM, "incomplete": running or killed), the
    :data:`SETTING_COLUMNS`, ``budget_seconds`` and the :data:`RESULT_COLUMNS` (or None).
    """
    rows = []
    for d in sorted((p.parent for p in Path(output_root).glob("*/config.yaml")),
                    key=lambda p: [int(t) if t.isdigit() else t
                                   for t in re.split(r"(\d+)", p.name)]):
        try:
            flat = read_settings(d)
        except (OSError, ValueError):
            continue
        summary = read_json(d / "summary.json")
        section = _algo_section(flat.get("algo"))
        row = {"run": d.name, "run_dir": str(d), "status": _status(d, summary)}
        row.update({col: flat.get(key.format(algo=section)) for col, key in SETTING_COLUMNS.items()})
        minutes = row.get("max_minutes")
        row["budget_seconds"] = round(60 * minutes, 1) if isinstance(minutes, (int, float)) else None
        row.update({col: (summary or {}).get(key) for col, key in RESULT_COLUMNS.items()})
        rows.append(row)
    return rows


def compare_runs(run_a: str | Path, run_b: str | Path, ignore=("output_dir",)) -> dict:
    """The settings two runs differ in, but ``ignore``: ``{dotted key: (value in a, value in b)}``,
    sorted, None where a config lacks the key. Raises as :func:`read_settings`."""
    a, b = read_settings(run_a), read_settings(run_b)
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b))
            if k not in set(ignore) and a.get(k) != b.get(k)}


def export_config(run_dir: str | Path, path: str | Path | None = None,
                  output_dir: str | Path | None = None) -> Path:
    """Write the run's validated ``config.yaml`` to ``path`` (default ``run_dir/export.yaml``)
    for ``tba-lab train --config``, with ``output_dir`` (default ``<run_dir>-cli`` beside it)
    so that it never overwrites the explorer's run; return ``path``. Raises FileNotFoundError
    (no ``config.yaml``) or ConfigError (the settings do not validate in this kit).
    """
    run_dir = Path(run_dir)
    cfg = load_yaml(run_dir / "config.yaml")
    cfg.output_dir = str(output_dir) if output_dir is not None else \
        str(run_dir.resolve().parent / f"{run_dir.name}-cli")
    path = Path(path) if path is not None else run_dir / "export.yaml"
    header = (f"# settings of the run {run_dir.resolve()}, exported by tba_lab.lab.widgets\n"
              f"# train with:  tba-lab train --config {path}  (--max-minutes / --output-dir override)\n")
    write_yaml(cfg, path, header)
    return path


def next_run_dir(output_root: str | Path) -> Path:
    """``output_root/run_NN`` with NN one past the largest existing ``run_NN`` (00 if none)."""
    root = Path(output_root)
    used = [int(m.group(1)) for p in (root.iterdir() if root.is_dir() else ())
            if (m := _RUN_NAME.match(p.name))]
    return root / f"run_{max(used) + 1 if used else 0:02d}"


def _fmt_cell(col: str, v) -> str:
    if v is None:
        return "&ndash;"
    if col.startswith("accuracy"):
        return f"{100 * v:.1f}%"
    if isinstance(v, float):
        return f"{v:.3g}" if col not in ("seconds", "budget_seconds") else f"{v:.0f}"
    return html.escape(str(v))


# The runs table: a column per setting the explorer's knobs set, then the results; the
# headings that are not the column's name.
_TABLE_COLUMNS = ["run", "status", *(c for c in SETTING_COLUMNS if c not in ("max_minutes", "seed")),
                  "budget_seconds", *RESULT_COLUMNS]
_HEADINGS = {"beta": "&beta;", "beta_final": "&beta; final", "beta_anneal_steps": "anneal steps",
             "learning_rate": "lr", "num_generations": "K", "recency_prob": "m",
             "sync_period": "k", "num_searchers": "searchers", "budget_seconds": "budget (s)",
             "accuracy_before": "acc. before", "accuracy_after": "acc. after",
             "staleness_mean": "staleness mean", "staleness_max": "staleness max"}


def runs_table_html(rows: list[dict], marked=()) -> str:
    """The runs table as HTML (rows of :func:`list_runs`; runs named in ``marked`` in bold)."""
    if not rows:
        return "<i>no runs yet</i>"
    head = "".join(f"<th style='padding:2px 6px'>{_HEADINGS.get(c, c)}</th>" for c in _TABLE_COLUMNS)
    body = []
    for r in rows:
        weight = "bold" if r["run"] in set(marked) else "normal"
        cells = "".join(f"<td style='padding:2px 6px'>{_fmt_cell(c, r.get(c))}</td>"
                        for c in _TABLE_COLUMNS)
        body.append(f"<tr data-run='{html.escape(r['run'])}' style='font-weight:{weight}'>{cells}</tr>")
    return (f"<table class='tba-explorer-runs-table' style='border-collapse:collapse;"
            f"font-size:12px'><tr>{head}</tr>{''.join(body)}</table>")


def comparison_html(row_a: dict, row_b: dict, diff: dict) -> str:
    """Two runs side by side: the settings they differ in (:func:`compare_runs`), then results."""
    a, b = html.escape(row_a["run"]), html.escape(row_b["run"])
    lines = [f"<tr><th style='text-align:left'>setting</th><th>{a}</th><th>{b}</th></tr>"]
    if not diff:
        lines.append("<tr><td colspan=3><i>same settings (apart from output_dir)</i></td></tr>")
    for k, (va, vb) in diff.items():
        lines.append(f"<tr><td>{html.escape(k)}</td><td>{html.escape(repr(va))}</td>"
                     f"<td>{html.escape(repr(vb))}</td></tr>")
    lines.append("<tr><th style='text-align:left'>result</th><th></th><th></th></tr>")
    for col in ("status", *RESULT_COLUMNS):
        lines.append(f"<tr><td>{col}</td><td>{_fmt_cell(col, row_a.get(col))}</td>"
                     f"<td>{_fmt_cell(col, row_b.get(col))}</td></tr>")
    return f"<table style='font-size:12px'>{''.join(lines)}</table>"
