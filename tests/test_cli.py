"""The command line: help, flag validation, and Ctrl-C during an asynchronous run."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tba_lab.config import ConfigError, from_dict

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "OMP_NUM_THREADS": "1"}
TBA_LAB = Path(sys.executable).with_name("tba-lab")  # the console script of this environment


def test_train_help():
    r = subprocess.run([sys.executable, "-m", "tba_lab", "train", "--help"], capture_output=True,
                       text=True, timeout=60, env=ENV)
    assert r.returncode == 0, r.stderr
    for flag in ("--config", "--output-dir", "--max-minutes", "--sync-period", "--mode",
                 "--no-progress"):
        assert flag in r.stdout


@pytest.mark.parametrize("args, field", [
    (["--sync-period", "0"], "sync_period"),
    (["--mode", "sync", "--num-searchers", "2"], "num_searchers"),
    (["--max-minutes", "-1"], "max_minutes"),
    (["--seed", "-1"], "--seed: -1: give a seed from 0 to 4294967295"),
    (["--seed", str(2**32)], "--seed: 4294967296"),
])
def test_bad_flag_value_exits_2_naming_the_field(tmp_path, args, field):
    r = subprocess.run([sys.executable, "-m", "tba_lab", "train", "--output-dir",
                        str(tmp_path / "run"), *args], capture_output=True, text=True,
                       timeout=60, env=ENV)
    assert r.returncode == 2
    assert field in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()  # validation happens before anything is written


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.skipif(not TBA_LAB.exists(), reason="tba-lab console script not installed")
def test_ctrl_c_saves_everything_and_leaves_no_process(tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "run"
    config = tmp_path / "small.yaml"
    config.write_text(
        "model: {max_new_tokens: 40}\n"
        "training: {num_prompts_per_step: 4, num_generations: 4}\n"
        "buffer: {initial_fill: 16}\n"
        "task: {eval_size: 20, interim_eval_size: 10, eval_every_seconds: 0}\n")
    proc = subprocess.Popen(
        [str(TBA_LAB), "train", "--config", str(config), "--output-dir", str(out),
         "--max-minutes", "5", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV,
        start_new_session=True)  # its own process group, as a terminal job has
    pgid = proc.pid
    try:
        metrics = out / "metrics.jsonl"
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
                break
            time.sleep(0.2)
        assert proc.poll() is None, f"trainer exited early:\n{proc.communicate()[0]}"
        assert len(metrics.read_text().splitlines()) >= 2, "no 2 updates within 120 s"

        os.killpg(pgid, signal.SIGINT)  # Ctrl-C reaches every process of the group
        t0 = time.time()
        output, _ = proc.communicate(timeout=10)
        assert time.time() - t0 < 10
        assert proc.returncode == 130, output
        assert "interrupted" in output and "Traceback" not in output, output
    finally:
        if proc.poll() is None:
            os.killpg(pgid, signal.SIGKILL)
            proc.wait()

    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert summary["trainer_steps"] >= 2
    assert summary["accuracy_after"] is None  # no final evaluation after Ctrl-C
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == summary["trainer_steps"]  # every update so far was logged
    model = AutoModelForCausalLM.from_pretrained(str(out / "policy"))
    assert sum(p.numel() for p in model.parameters()) > 0
    assert (out / "buffer.pt").is_file() and (out / "curves.png").is_file()

    # no searcher, resource tracker or other process of the group survives
    deadline = time.time() + 5
    while _group_alive(pgid) and time.time() < deadline:
        time.sleep(0.1)
    left = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "--sid", str(pgid)], capture_output=True,
                          text=True).stdout
    assert not _group_alive(pgid), f"processes left in the group:\n{left}"


def test_summary_line_shows_the_held_out_metrics_only():
    """The closing line reads the metric names from the summary, not every ``*_before`` key
    (``eval_seconds_before`` is a timing)."""
    from tba_lab.cli import summary_line

    s = {"algo": "tb", "mode": "async", "task": "arithmetic", "held_out_metrics": ["accuracy"],
         "accuracy_before": 0.346, "accuracy_after": 0.47, "eval_seconds_before": 1.5,
         "eval_seconds_after": 1.4, "trainer_steps": 1278, "wall_seconds": 540.2,
         "samples_generated": 123392, "staleness_mean": 6.6, "staleness_max": 26}
    line = summary_line(s, "runs/default")
    assert line == ("tb/async on arithmetic: held-out accuracy 34.6% -> 47.0% in 1278 updates, "
                    "540 s (123392 samples, staleness mean 6.60 max 26); outputs in runs/default")


def test_task_flag_picks_the_tasks_embedded_model_and_sft_dispatches(tmp_path, capsys, monkeypatch):
    """`--task NAME` without `--model` trains the task's embedded policy (Task.default_model);
    `tba-lab sft --task NAME` calls that task's build_embedded; `train-rm` names a missing file."""
    from tba_lab import cli
    from tba_lab.paths import DATA_DIR, DEFAULT_MODEL_DIR
    from tba_lab.registry import TASKS

    seen = {}
    monkeypatch.setattr("tba_lab.trainer.train", lambda cfg, **kw: seen.setdefault("cfg", cfg) and 0)
    monkeypatch.setattr(cli, "summary_line", lambda s, d: "")
    for task, want in (("redteam", DATA_DIR / "tiny-llama-attacker"),
                       ("arithmetic", DEFAULT_MODEL_DIR)):
        seen.clear()
        assert cli.main(["train", "--task", task, "--output-dir", str(tmp_path / task)]) == 0
        assert seen["cfg"].model.path == str(want) and seen["cfg"].task.name == task
        assert seen["cfg"].tb.beta == {"redteam": 0.5, "arithmetic": 0.03}[task]  # config_defaults
    seen.clear()  # an explicit --model wins
    assert cli.main(["train", "--task", "redteam", "--model", str(DEFAULT_MODEL_DIR),
                     "--output-dir", str(tmp_path / "explicit")]) == 0
    assert seen["cfg"].model.path == str(DEFAULT_MODEL_DIR)
    # --task over a config file: the file's beta wins over the task's default; the file's
    # arithmetic model (the old task's embedded one) gives way to the attacker
    conf = tmp_path / "c.yaml"
    conf.write_text(f"model: {{path: {DEFAULT_MODEL_DIR}}}\ntb: {{beta: 0.25}}\n")
    for extra, beta in (([], 0.25), (["--model", str(DEFAULT_MODEL_DIR)], 0.25)):
        seen.clear()
        assert cli.main(["train", "--config", str(conf), "--task", "redteam", *extra,
                         "--output-dir", str(tmp_path / "conf")]) == 0
        assert seen["cfg"].tb.beta == beta and seen["cfg"].task.name == "redteam"
        assert seen["cfg"].model.path == str(DEFAULT_MODEL_DIR if extra else
                                             DATA_DIR / "tiny-llama-attacker")

    calls = []
    monkeypatch.setattr(TASKS.get("redteam"), "build_embedded",
                        classmethod(lambda cls, **kw: calls.append(kw) or {"ok": 1}))
    assert cli.main(["sft", "--task", "redteam", "--steps", "3", "--seed", "2"]) == 0
    assert calls == [{"steps": 3, "seed": 2}]
    capsys.readouterr()
    assert cli.main(["train-rm", "--pairs", str(tmp_path / "none.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tba-lab train-rm: pairs file '{tmp_path / 'none.jsonl'}' is missing")


def test_after_an_error_the_cli_says_what_was_saved_only_when_it_was(tmp_path, capsys):
    from tba_lab.cli import _saved_after_error

    _saved_after_error(str(tmp_path))  # the error came before the run wrote anything
    assert capsys.readouterr().err == ""
    (tmp_path / "summary.json").write_text(json.dumps({"trainer_steps": 3}))  # another run's
    _saved_after_error(str(tmp_path))
    assert capsys.readouterr().err == ""
    (tmp_path / "summary.json").write_text(json.dumps({"error": "RuntimeError: boom"}))
    _saved_after_error(str(tmp_path))
    err = capsys.readouterr().err
    assert f"saved in {tmp_path}" in err and "--resume" not in err  # no update, no checkpoint
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    _saved_after_error(str(tmp_path))
    assert f"tba-lab train --resume {tmp_path}" in capsys.readouterr().err


def test_ctrl_c_offers_a_resume_only_when_there_is_a_checkpoint(tmp_path):
    """Stopped in its first seconds, before any checkpoint, a run has nothing to resume, and
    the message says so instead of printing a ``--resume`` command that would fail."""
    from tba_lab.cli import _interrupted_line

    line = _interrupted_line(str(tmp_path / "never-made"))
    assert "nothing to resume" in line and "--resume" not in line
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    assert "nothing to resume" in _interrupted_line(str(tmp_path))  # no config.yaml: not a run
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    assert f"continue with `tba-lab train --resume {tmp_path}`" in _interrupted_line(str(tmp_path))


def test_seed_in_a_config_file_is_checked_like_the_flag():
    from tba_lab.config import validate

    for seed in (-1, 2**32):
        with pytest.raises(ConfigError, match=f"seed={seed}: give an integer from 0 to 4294967295"):
            validate(from_dict({"seed": seed}))
    assert validate(from_dict({"seed": 2**32 - 1})).seed == 2**32 - 1


def test_a_repeated_list_flag_adds_to_the_first_instead_of_replacing_it():
    """argparse's nargs="+" alone keeps only the last occurrence: `--set a=1 --set b=2` would drop
    a=1 without a word. Every list flag of the CLI accumulates."""
    from tba_lab.cli import build_parser

    p = build_parser()
    assert p.parse_args(["train", "--report-to", "tensorboard", "--report-to", "wandb"]).report_to \
        == ["tensorboard", "wandb"]
    assert p.parse_args(["reproduce", "--only", "01", "--only", "02", "03"]).only == ["01", "02", "03"]
    assert p.parse_args(["course", "release", "--only", "01", "--only", "02"]).only == ["01", "02"]
    x = p.parse_args(["experiment", "scaling", "--seeds", "0", "--seeds", "1", "--set",
                      "searchers=1,2", "--set", "target=0.4", "--set", "eval_size=50"])
    assert (x.seeds, x.set) == ([0, 1], ["searchers=1,2", "target=0.4", "eval_size=50"])
    assert p.parse_args(["train"]).report_to is None  # absent: the config's value stands


def test_sigterm_to_an_experiment_stops_the_training_run_it_waits_for(tmp_path):
    """`kill PID` of `tba-lab experiment default` (the signal a scheduler or `kill` sends to the
    one process) unwinds like Ctrl-C: the `tba-lab train` child it waits for is stopped, not
    left training alone for minutes."""
    out = tmp_path / "exp"
    proc = subprocess.Popen([str(TBA_LAB), "experiment", "default", "--smoke", "--output-dir",
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=ENV, start_new_session=True)
    pgid = proc.pid
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None and not _group_members(pgid, "train"):
            time.sleep(0.2)
        assert _group_members(pgid, "train"), f"no training child within 120 s:\n{proc.poll()}"
        proc.send_signal(signal.SIGTERM)  # the parent alone, not the group
        output, _ = proc.communicate(timeout=20)
        assert proc.returncode != 0 and "interrupted" in output, output
        deadline = time.time() + 10
        while _group_members(pgid, "train") and time.time() < deadline:
            time.sleep(0.2)
        assert not _group_members(pgid, "train"), "the training child outlived its experiment"
    finally:
        if _group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)


def _group_members(pgid: int, word: str) -> list[str]:
    """Command lines of the processes of session ``pgid`` that contain ``word``."""
    out = subprocess.run(["ps", "-ww", "-o", "args=", "--sid", str(pgid)], capture_output=True,
                         text=True).stdout
    return [line for line in out.splitlines() if word in line.split()]
