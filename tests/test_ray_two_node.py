"""bench/ray_two_node.py: two Ray nodes in network namespaces, the Ray launcher across them, and
the loss of a node. The bookkeeping is checked on hand-made rows; the real run (slow) needs root,
iproute2, unshare and Ray, and is skipped without them."""
import importlib.util
import json
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "ray_two_node", Path(__file__).parents[1] / "bench" / "ray_two_node.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _row(node, searcher, version, step, sync=0.0, rollouts=128):
    return {"node": node, "searcher_id": searcher, "version": version, "trainer_step": step,
            "sync_seconds": sync, "rollouts": rollouts}


def test_per_node_counts_batches_syncs_and_lag_per_node():
    rows = [_row("10.0.0.1", 0, 0, 1, sync=0.002), _row("10.0.0.1", 0, 2, 5, sync=0.004),
            _row("10.0.0.1", 0, 2, 6, sync=0.0),  # no new version before this batch
            _row("10.0.0.2", 1, 1, 2, sync=0.010, rollouts=64)]
    got = bench.per_node(rows, wall_seconds=30.0)
    assert list(got) == ["10.0.0.1", "10.0.0.2"]
    a, b = got["10.0.0.1"], got["10.0.0.2"]
    assert a["searchers"] == [0] and a["batches"] == 3 and a["samples_per_minute"] == 768.0
    assert a["syncs"] == 2 and a["sync_ms_median"] == 3.0 and a["sync_ms_max"] == 4.0
    assert a["lag_mean"] == round((1 + 3 + 4) / 3, 2) and a["lag_max"] == 4
    assert b["batches"] == 1 and b["samples_per_minute"] == 128.0 and b["sync_ms_median"] == 10.0


def test_report_names_the_nodes_the_failures_and_the_outputs():
    run = {"summary": {"trainer_steps": 100, "updates_per_minute": 66.7, "samples_generated": 12800,
                       "staleness_mean": 2.5, "staleness_max": 5, "accuracy_before": 0.346,
                       "accuracy_after": 0.41, "wall_seconds": 90.0},
           "per_node": bench.per_node([_row("10.77.0.2", 1, 1, 2, sync=0.01)], 90.0),
           "searcher_failures": [{"wall_seconds": 31.0, "step": 40, "searcher_id": 1,
                                  "reason": "exited", "action": "restarted (1 of async.max_restarts=2)",
                                  "error": "the searcher actor died: its node has died"}],
           "outputs": {"summary.json": True, "checkpoint.pt": False}}
    res = {"started": "2026-12-02T09:00:00", "commit": "abc1234", "cores": 2, "ray": "2.60.0",
           "command": "python bench/ray_two_node.py", "processes_left": [],
           "node_loss": {"exit_code": 0, "seconds": 120.0, "run": run, "updates_after_kill": 60,
                         "node_2_killed_after_first_update_s": 30.0}}
    text = bench.report(res)
    assert "| 10.77.0.2 | 1 | 1 | 85 | 1 | 10.0, 10.0 | 1, 1 |" in text
    assert "| 31.0 | 40 | 1 | exited | restarted (1 of async.max_restarts=2) |" in text
    assert "checkpoint.pt NO" in text and "made 60 updates after" in text
    assert "34.6% -> 41.0%" in text and "left at the end: 0" in text
    res["trainer_killed"] = {
        "exit_code": 0, "seconds": 80.0, "checkpoint_step": 45,
        "run": {**run, "summary_resumes": 1},
        "killed": {"exit_code": -9, "seconds": 50.0, "trainer_killed_after_first_update_s": 30.0},
        "freed": {"cpus_free": 2, "cpus_total": 2, "placement_groups_not_removed": 0,
                  "seconds": 4.1, "clean": True}}
    text = bench.report(res)
    assert "SIGKILLed 30.0 s after its first update (exit code -9)" in text
    assert "freed what it held within 4.1 s" in text and "checkpoint at step 45" in text


def test_missing_requirements_and_a_kill_after_the_run_are_refused(monkeypatch, capsys):
    monkeypatch.setattr(bench, "missing_requirements", lambda: ["root (ip netns add needs it)"])
    assert bench.main(["--minutes", "1"]) == 2
    assert "needs root" in capsys.readouterr().err
    monkeypatch.setattr(bench, "missing_requirements", lambda: [])
    assert bench.main(["--minutes", "0.5", "--kill-after", "30"]) == 2
    assert "--kill-after 30 s must be shorter" in capsys.readouterr().err
    assert bench.main(["--minutes", "1", "--kill-after", "10"]) == 2
    assert "needs more than its checkpoint period" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(bool(bench.missing_requirements()), reason="needs root, ip, unshare and Ray")
def test_one_searcher_per_node_then_the_loss_of_node_2(tmp_path):
    """The node-loss phase alone (about 90 s; the other two phases are the bench's own runs,
    docs/results/ray_two_node*): both nodes deliver batches with timed syncs, then node 2 dies
    and the trainer reports its searcher and trains on with node 1's, writing every output."""
    assert bench.main(["--phases", "node_loss", "--minutes", "0.75", "--kill-after", "20",
                       "--out", str(tmp_path / "out"), "--work-dir", str(tmp_path / "work")]) == 0
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    loss = res["node_loss"]
    assert set(loss["run"]["per_node"]) == {bench.HEAD_IP, bench.WORKER_IP}
    assert all(n["batches"] > 0 and n["syncs"] > 0 for n in loss["run"]["per_node"].values())
    assert loss["exit_code"] == 0 and loss["updates_after_kill"] > 0
    lost = [f for f in loss["run"]["searcher_failures"] if f["reason"] == "exited"]
    worker_searchers = loss["run"]["per_node"][bench.WORKER_IP]["searchers"]
    assert lost and lost[0]["searcher_id"] in worker_searchers
    assert all(loss["run"]["outputs"].values())
    assert res["processes_left"] == []


def test_a_second_bench_on_the_same_work_dir_is_refused(tmp_path, monkeypatch, capsys):
    import fcntl

    pytest.importorskip("ray")
    monkeypatch.setattr(bench, "missing_requirements", lambda: [])
    (tmp_path / "work").mkdir()
    with open(tmp_path / "work" / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running bench holds it
        assert bench.main(["--work-dir", str(tmp_path / "work"), "--out", str(tmp_path)]) == 2
    assert "another bench/ray_two_node.py is using --work-dir" in capsys.readouterr().err
