"""Searcher failures: an exception, a killed process, a hang, a searcher that keeps failing
among others, and rewards that are NaN or always 0, in real runs with real searcher processes.

The failure policy (``tba_lab.trainer.Feed``): restart a failed searcher at most
``async.max_restarts`` times, then retire it; the run goes on while a searcher is left and
otherwise stops with a ``SearcherError`` holding the last traceback. Faults come from the
``faulty_test`` task in ``tests/_faulty.py``.
"""
import json
import threading
import time

import pytest

import tests._faulty  # noqa: F401  (registers task.name: faulty_test)
from tba_lab.actors.launcher import SearcherError
from tba_lab.config import from_dict
from tests.test_async_smoke import _assert_no_children


def _config(tmp_path, fault: dict, steps: int = 6, **overrides):
    (tmp_path / "markers").mkdir(exist_ok=True)
    data = {
        "output_dir": str(tmp_path / "run"),
        "max_minutes": 3.0,
        "model": {"max_new_tokens": 24},
        "training": {"max_steps": steps, "num_prompts_per_step": 4, "num_generations": 4,
                     "save_seconds": 0},
        "buffer": {"initial_fill": 16},
        "task": {"name": "faulty_test", "eval_size": 4, "interim_eval_size": 4,
                 "eval_every_seconds": 0},
        "fault": {"marker_dir": str(tmp_path / "markers"), **fault},
    }
    for section, values in overrides.items():
        data.setdefault(section, {}).update(values)
    return from_dict(data)


def _run(cfg):
    from tba_lab.trainer import train

    t0 = time.time()
    try:
        return train(cfg, progress=False), time.time() - t0
    finally:
        _assert_no_children()


@pytest.mark.parametrize("kind,reason,account", [
    ("raise", "raised", "FaultInjected: injected reward failure"),
    ("exit", "exited", "killed by SIGKILL"),
])
def test_failed_searcher_is_restarted_and_the_run_completes(tmp_path, kind, reason, account):
    cfg = _config(tmp_path, {"kind": kind, "times": 1})
    summary, _ = _run(cfg)
    assert summary["trainer_steps"] == 6
    [failure] = summary["searcher_failures"]
    assert failure["reason"] == reason and failure["action"].startswith("restarted (1 of")
    assert account in failure["error"]
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["searcher_failures"] == summary["searcher_failures"]


def test_a_searcher_killed_while_it_copies_the_weights_does_not_block_the_run(tmp_path):
    """SIGKILL inside a pull, while the searcher holds the weight channel's lock (its copy
    allocates a model-sized tensor: where the OOM killer strikes). With multiprocessing's Lock
    the dead process kept it, and the trainer's next publish and the restarted searcher's pull
    waited until Ctrl-C (here, in a thread, for good); the kernel releases the channel's
    FileLock with the process."""
    from tba_lab.trainer import train

    cfg = _config(tmp_path, {"kind": "exit_in_pull", "times": 1})
    result: dict = {}
    run = threading.Thread(target=lambda: result.update(summary=train(cfg, progress=False)),
                           daemon=True)
    run.start()
    run.join(timeout=300)
    assert not run.is_alive(), "the run hung after a searcher died holding the weight lock"
    _assert_no_children()
    [pulled] = (tmp_path / "markers").glob("pulled-*")  # it died in the copy, lock held
    summary = result["summary"]
    assert summary["trainer_steps"] == 6
    [failure] = summary["searcher_failures"]
    assert failure["reason"] == "exited" and failure["action"].startswith("restarted (1 of")
    assert "killed by SIGKILL" in failure["error"]


def test_hung_searcher_is_detected_after_the_timeout_and_replaced(tmp_path):
    cfg = _config(tmp_path, {"kind": "hang", "times": 1}, async_={"searcher_timeout": 10.0})
    summary, _ = _run(cfg)
    assert summary["trainer_steps"] == 6
    [failure] = summary["searcher_failures"]
    assert failure["reason"] == "hung" and "async.searcher_timeout=10 s" in failure["error"]


def test_searcher_failing_every_time_stops_the_run_with_its_traceback(tmp_path):
    cfg = _config(tmp_path, {"kind": "raise"}, async_={"max_restarts": 1})
    t0 = time.time()
    with pytest.raises(SearcherError) as err:
        _run(cfg)
    msg = str(err.value)
    assert "after 1 restart(s)" in msg and "no searcher is left" in msg
    assert "Traceback" in msg and "FaultInjected: injected reward failure" in msg
    assert time.time() - t0 < 90  # three processes start and fail; no waiting for the budget
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [f["action"].split(" ")[0] for f in summary["searcher_failures"]] == ["restarted", "retired,"]
    assert (tmp_path / "run" / "policy").is_dir()  # what the run had is saved


def test_run_goes_on_with_the_other_searchers(tmp_path):
    # searcher 0 waits for searcher 1 to fail: otherwise a slow start of searcher 1 lets
    # searcher 0 alone feed all 8 updates and there is no failure to see
    cfg = _config(tmp_path, {"kind": "raise", "searcher": 1, "hold_others": True}, steps=8,
                  async_={"num_searchers": 2, "max_restarts": 0})
    summary, _ = _run(cfg)
    assert summary["trainer_steps"] == 8
    [failure] = summary["searcher_failures"]
    assert failure["searcher_id"] == 1 and failure["action"] == "retired, 1 searcher(s) left"
    rows = [json.loads(line) for line in (tmp_path / "run" / "searchers.jsonl").open()]
    assert rows and {r["searcher_id"] for r in rows} == {0}


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_nonfinite_rewards_are_counted_and_never_trained_on(tmp_path, mode):
    cfg = _config(tmp_path, {"kind": "nan"}, steps=4, async_={"mode": mode})
    summary, _ = _run(cfg)
    assert summary["trainer_steps"] == 4
    rows = [json.loads(line) for line in (tmp_path / "run" / "searchers.jsonl").open()]
    # every batch of 16 rows: row 0 is +inf, row 1 NaN -> 2 dropped, 14 kept
    assert rows and all(r["nonfinite_rewards"] == 2 and r["rollouts"] == 14 for r in rows)
    assert summary["nonfinite_rewards"] == 2 * len(rows)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert all(m["reward_mean"] == m["reward_mean"] for m in metrics)  # no NaN trained on


def test_rewards_always_zero_do_not_stall(tmp_path):
    cfg = _config(tmp_path, {"kind": "zero"}, steps=4, async_={"mode": "sync"})
    summary, _ = _run(cfg)
    assert summary["trainer_steps"] == 4 and summary["searcher_failures"] == []


def test_a_searcher_whose_every_reward_is_nan_does_not_stall_the_trainer(tmp_path):
    cfg = _config(tmp_path, {"kind": "nan_all"}, async_={"searcher_timeout": 8.0, "max_restarts": 0})
    with pytest.raises(SearcherError, match="no usable rollouts for .* every reward it computes is NaN"):
        _run(cfg)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["trainer_steps"] == 0 and summary["nonfinite_rewards"] > 0


def test_a_task_class_searchers_cannot_import_is_refused_before_anything_starts():
    from tba_lab.actors.searcher import SearcherSpec
    from tba_lab.config import ConfigError
    from tba_lab.registry import TASKS
    from tba_lab.tasks.arithmetic import ArithmeticTask

    class CellTask(ArithmeticTask):  # as if typed in a notebook cell
        name = "cell_task_test"

    TASKS.register(CellTask)
    cfg = from_dict({"task": {"name": "cell_task_test"}})
    with pytest.raises(ConfigError, match="defined inside a function, so the searcher processes cannot import it"):
        SearcherSpec.from_config(cfg, use_reference=True)
    CellTask.__module__, CellTask.__qualname__ = "__main__", "CellTask"
    with pytest.raises(ConfigError, match=r"CellTask is defined in a notebook cell .* move it into a .py module"):
        SearcherSpec.from_config(cfg, use_reference=True)


def test_a_written_config_carries_an_outside_section_only_when_its_class_is_chosen(tmp_path):
    """A config.yaml written in a process that registered this test's task must still load in
    a fresh ``tba-lab train --config`` process (which never imported tests._faulty)."""
    import subprocess
    import sys

    from tba_lab.config import write_yaml

    assert "fault" in from_dict({"task": {"name": "faulty_test"}}).to_dict()
    write_yaml(from_dict({"output_dir": str(tmp_path / "x")}), tmp_path / "c.yaml")
    assert "fault" not in (tmp_path / "c.yaml").read_text()
    code = "import sys; from tba_lab.config import load_yaml; load_yaml(sys.argv[1]); print('ok')"
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "c.yaml")], capture_output=True,
                       text=True)
    assert r.stdout.strip() == "ok", r.stderr
