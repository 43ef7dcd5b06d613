"""Watching a run: ``report_to: [tensorboard]`` read back with TensorBoard's own reader (also
across a SIGKILL and ``--resume``), the refusal without the extra, and the console: status lines
in a pipe, a bar over the budget."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tba_lab.actors.locks import LOCK_PREFIX
from tba_lab.checkpoint import load_checkpoint
from tba_lab.config import ConfigError, from_dict
from tba_lab.reporting import Console, check_report_to, read_tensorboard
from tests._runs import sigkill_after_updates

REPO = Path(__file__).resolve().parents[1]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _config(tmp_path: Path, **extra) -> tuple[Path, Path]:
    run = tmp_path / "run"
    data = {"output_dir": str(run), "max_minutes": 5.0, "model": {"max_new_tokens": 24},
            "training": {"num_prompts_per_step": 4, "num_generations": 4},
            "buffer": {"initial_fill": 16},
            "task": {"eval_size": 8, "interim_eval_size": 8, "eval_every_seconds": 0}}
    for key, value in extra.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) else value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, run


def _close(got: float, want: float) -> bool:  # TensorBoard keeps float32
    return abs(got - want) <= 1e-6 * max(1.0, abs(want))


def test_tensorboard_has_every_update_and_evaluation_once_across_a_sigkill_and_resume(tmp_path):
    """A run with ``report_to: [tensorboard]`` is SIGKILLed (trainer and searchers) after its
    checkpoint at update 3 and a few more updates, then resumed to 12. TensorBoard's reader
    finds, for every update 1..12, exactly one loss, staleness and learning rate, equal to
    ``metrics.jsonl``'s (the updates the resume redid are not doubled), and the held-out metrics
    at ``eval.jsonl``'s steps."""
    pytest.importorskip("tensorboard")
    path, run = _config(tmp_path, report_to=["tensorboard"],
                        training={"max_steps": 12, "save_steps": 3, "save_seconds": 0},
                        task={"eval_every_seconds": 3})
    pid = sigkill_after_updates(path, run, 5, timeout=180)
    for lock in Path(tempfile.gettempdir()).glob(f"{LOCK_PREFIX}{pid}-*"):
        lock.unlink()  # known limit: nobody is left to remove it after a SIGKILL
    saved = load_checkpoint(run)["step"]
    assert 3 <= saved < max(r["step"] for r in _jsonl(run / "metrics.jsonl")), \
        "no update after the checkpoint: nothing for the resume to redo"

    done = subprocess.run([sys.executable, "-m", "tba_lab", "train", "--resume", str(run),
                           "--no-progress"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]
    rows, evals, tb = _jsonl(run / "metrics.jsonl"), _jsonl(run / "eval.jsonl"), read_tensorboard(run)
    assert [r["step"] for r in rows] == list(range(1, 13))
    for key in ("loss", "staleness_mean", "staleness_max", "lr"):
        got = tb[f"train/{key}"]
        assert [s for s, _ in got] == list(range(1, 13)), f"train/{key}: steps {[s for s, _ in got]}"
        bad = [(r["step"], v, r[key]) for r, (_, v) in zip(rows, got) if not _close(v, r[key])]
        assert not bad, f"train/{key} differs from metrics.jsonl at (step, tensorboard, jsonl): {bad}"
    assert len(evals) >= 3  # before, at least one interim, after
    metric = "eval/accuracy"
    assert [s for s, _ in tb[metric]] == [e["step"] for e in evals]
    assert all(_close(v, e["accuracy"]) for (_, v), e in zip(tb[metric], evals))
    for tag in ("searcher/gen_seconds/s0", "searcher/version_lag/s0", "time/update_seconds"):
        assert tb.get(tag), f"no {tag} in the event files: {sorted(tb)}"


def test_piped_cli_prints_plain_status_lines(tmp_path):
    """``tba-lab train`` with its output piped (not a terminal): no tqdm frames (no carriage
    return), no line over 300 characters, and a status line at most every
    ``status_every_seconds`` (2 s here; the next one comes with the first update after that,
    so gaps are longer on a loaded machine). The throughput rates reach TensorBoard."""
    path, run = _config(tmp_path, max_minutes=0.25, status_every_seconds=2,
                        report_to=["tensorboard"])
    done = subprocess.run([sys.executable, "-m", "tba_lab", "train", "--config", str(path)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]
    text = done.stdout + done.stderr
    assert "\r" not in text, "tqdm frames in a piped log"
    long = [line for line in text.splitlines() if len(line) > 300]
    assert not long, f"lines over 300 characters: {long}"
    status = [float(m.group(1)) for m in re.finditer(r"^\[\s*(\d+)/15 s\] step \d+ \|", done.stdout,
                                                     re.M)]
    assert len(status) >= 2, f"status lines at {status} over a 15 s budget:\n{done.stdout}"
    gaps = [b - a for a, b in zip(status, status[1:])]
    assert all(1.0 <= g <= 8.0 for g in gaps), f"status lines every {gaps} s (elapsed rounded to 1 s)"
    if __import__("importlib").util.find_spec("tensorboard") is not None:
        tb = read_tensorboard(run)
        assert tb.get("throughput/updates_per_minute"), sorted(tb)
        assert all(0 < v <= 1 for _, v in tb["throughput/trainer_busy"])


def test_report_to_without_the_package_stops_before_anything_starts(tmp_path):
    """``report_to: [tensorboard]`` where tensorboard cannot be imported: the CLI stops with
    exit 2 and the install command before any process starts or anything is written."""
    path, run = _config(tmp_path, report_to=["tensorboard"])
    code = ("import sys; sys.modules['tensorboard'] = None; from tba_lab.cli import main; "
            "sys.exit(main(['train', '--config', sys.argv[1]]))")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2, done.stderr
    assert "report_to: 'tensorboard' needs the 'tensorboard' package" in done.stderr
    assert 'pip install -e ".[tensorboard]"' in done.stderr
    assert not run.exists(), "the refused run wrote its output folder"
    assert "placement:" not in done.stdout  # printed once the searchers are planned


def test_report_to_names_are_checked_and_spelled_as_trl():
    from tba_lab.config import REPORT_TO
    from tba_lab.reporting import INTEGRATIONS

    assert set(INTEGRATIONS) == set(REPORT_TO)
    assert from_dict({"report_to": "tensorboard"}).report_to == ["tensorboard"]
    assert from_dict({"report_to": "none"}).report_to == []
    assert from_dict({"report_to": ["none", "tensorboard"]}).report_to == ["tensorboard"]
    assert from_dict({}).report_to == []
    with pytest.raises(ConfigError, match=r"report_to: 'tensorbord' is not one of"):
        from_dict({"report_to": ["tensorbord"]})
    with pytest.raises(ConfigError, match=r"pip install wandb"):
        check_report_to(["wandb"]) if __import__("importlib").util.find_spec("wandb") is None \
            else pytest.skip("wandb is installed here")


def test_console_bar_runs_over_the_budget_and_the_status_line_fits(capsys):
    """The bar's total is the time budget in seconds (or ``max_steps`` when set) and it shows
    the last held-out metric; the status line stays under 300 characters with large numbers."""
    cfg = from_dict({"max_minutes": 2.0})
    console = Console(cfg, True, first_step=0, bar=True)
    console.start(0.0)
    console.evaluated(40, "accuracy", 0.4125)
    console.update(41, 30.4, {"updates_per_minute": 80.0, "staleness_mean": 1.5})
    assert console.bar.total == 120 and round(console.bar.n) == 30
    assert "accuracy 0.412 @ 40" in console.bar.postfix and "80" in console.bar.postfix
    console.close()
    steps = Console(from_dict({"training": {"max_steps": 50}}), True, first_step=20, bar=True)
    steps.start(12.0)
    steps.update(21, 13.0, {})
    assert (steps.bar.total, steps.bar.n) == (50, 21)
    steps.close()
    line = Console(cfg, True, 0, bar=False).status_line(
        10**9, 10**7, {"updates_per_minute": 1e9, "samples_per_minute": 1e12, "staleness_mean":
                       1e6, "staleness_max": 10**9, "reward_mean": -1e9})
    assert len(line) < 300 and "1,000,000,000,000 samples/min" in line, line


_CONSOLE_CELL = """\
import time
from tba_lab.config import from_dict
from tba_lab.reporting import Console
console = Console(from_dict({"max_minutes": 0.1, "status_every_seconds": 0.01}), True, 0)
console.start(0.0)
for step in (1, 2):
    time.sleep(0.05)
    console.update(step, 1.5 * step, {"updates_per_minute": 60.0})
console.close()
"""


def test_a_notebook_run_by_papermill_gets_status_lines_not_a_widget(tmp_path, caplog):
    """After papermill#617 and #765: a run's console in a notebook that papermill executes
    (nobody sees a widget there: nbclient's frontend takes no input and renders nothing) prints
    the plain status lines, which land in the executed notebook and in papermill's log
    (``--log-output``), instead of a tqdm widget whose only text is its first frame."""
    import logging

    nbformat = pytest.importorskip("nbformat")
    pm = pytest.importorskip("papermill")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(_CONSOLE_CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    src, out = tmp_path / "run.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, src)
    with caplog.at_level(logging.INFO, logger="papermill"):
        pm.execute_notebook(str(src), str(out), log_output=True, progress_bar=False, cwd=str(REPO))
    outputs = nbformat.read(out, as_version=4).cells[0].outputs
    kinds = sorted({key for o in outputs for key in o.get("data", {})})
    assert "application/vnd.jupyter.widget-view+json" not in kinds, f"a widget: {outputs}"
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert re.findall(r"^\[\s*\d+/6 s\] step (\d) \|", text, re.M) == ["1", "2"], text
    logged = [m for m in caplog.messages if re.match(r"\[\s*\d+/6 s\] step \d \| 60 upd/min", m)]
    assert len(logged) == 2, caplog.messages


def test_interactive_in_a_kernel_follows_whether_the_frontend_takes_input():
    """In a Jupyter kernel the bar is drawn for a frontend that takes input (JupyterLab,
    VS Code: ``allow_stdin`` true in the execute request) and not for one that does not
    (papermill, ``nbconvert --execute``: nbclient sends false), whatever the kernel is."""
    jupyter_client = pytest.importorskip("jupyter_client")
    km, kc = jupyter_client.manager.start_new_kernel(kernel_name="python3", cwd=str(REPO))
    try:
        seen = {}
        for allow in (False, True):
            lines = []

            def hook(msg):
                if msg["msg_type"] == "stream":
                    lines.append(msg["content"]["text"])

            kc.execute_interactive("from tba_lab.reporting import interactive\nprint(interactive())",
                                   allow_stdin=allow, timeout=60, output_hook=hook)
            seen[allow] = "".join(lines).strip()
        assert seen == {False: "False", True: "True"}, seen
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_no_progress_prints_warnings_only(tmp_path, capsys):
    """``--no-progress`` (``progress=False``): an interim evaluation, the placement line and
    a resume's first line print nothing; a warning (a skipped update) still prints."""
    from tba_lab.actors import placement
    from tba_lab.runlog import RunLog

    cfg = from_dict({"output_dir": str(tmp_path / "run")})
    log = RunLog(cfg, progress=False)
    log.evaluation(0, {"accuracy": 0.1}, 8, "before", 0.1)
    log.start_clock()
    log.evaluation(3, {"accuracy": 0.25}, 8, "interim", 0.1)
    log.placement(placement.plan(cfg), "placement: a line")
    log.skipped_update(4, float("nan"), 1.0)
    state = log.state_dict(3)
    log.close(3)
    resumed = RunLog(cfg, progress=False, resume=state)
    resumed.start_clock()
    resumed.close(3)
    out = capsys.readouterr().out
    assert out == "warning: update 4 skipped: loss nan, gradient norm 1.0 (not finite); the " \
                  "weights are unchanged\n", out
