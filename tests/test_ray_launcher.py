"""The Ray launcher (``async.launcher: ray``) on a local Ray with 2 CPUs.

One Ray per module (starting Ray takes seconds to tens of seconds on a loaded machine). The
launcher finds it initialised and uses it, so it must leave it running after ``stop()``; the
fixture shuts it down. Checked: the launcher's six methods with two searchers on the embedded
model (rollouts arrive tagged with the published version and the searchers hold exactly the
published values), a killed actor reported once as ``exited``, a restart, nothing left after
``stop()`` (actors dead, placement group removed), a whole ``train`` run writing the same
files as the local launcher, and a clear error when Ray is not installed.
"""
import json
import sys
import time

import pytest
import torch

from tba_lab.actors.launcher import SearcherFailed
from tba_lab.config import ConfigError, from_dict, load_yaml
from tba_lab.models import load_policy
from tba_lab.rollout import RolloutBatch
from tests.test_async_smoke import (METRIC_KEYS, SUMMARY_KEYS,
                                     assert_syncs_timed_when_the_version_moves)

ray = pytest.importorskip("ray")

from tba_lab.actors.ray_launcher import (PushedWeights, RayLauncher, _actor_spec, start_local_ray,  # noqa: E402
                                         _bundles, flat_bytes, wait_for_exit)
from tba_lab.actors.searcher import SearcherSpec  # noqa: E402


def _config(tmp_path, **overrides):
    data = {
        "output_dir": str(tmp_path / "run"),
        "max_minutes": 3.0,
        "model": {"max_new_tokens": 8},
        "training": {"num_prompts_per_step": 2, "num_generations": 2, "save_seconds": 0},
        "buffer": {"initial_fill": 4},
        "task": {"eval_size": 4, "interim_eval_size": 4, "eval_every_seconds": 0},
        "async": {"launcher": "ray", "num_searchers": 2},
    }
    for section, values in overrides.items():
        data.setdefault(section, {}).update(values)
    return from_dict(data)


@pytest.fixture(scope="module")
def local_ray():
    if ray.is_initialized():
        ray.shutdown()
    start_local_ray(num_cpus=2)  # the launcher's own local start (a patient one on a busy machine)
    yield ray
    ray.shutdown()


def _poll_until(launcher, want, seconds: float = 120.0) -> list:
    """Poll until ``want(messages so far)`` holds; fail after ``seconds``."""
    got, deadline = [], time.time() + seconds
    while time.time() < deadline:
        got += launcher.poll(timeout=0.2)
        if want(got):
            return got
    raise AssertionError(f"condition not met after {seconds} s; got {got}")


def _dead(actor) -> bool:
    try:
        ray.get(actor.__ray_ready__.remote(), timeout=10)
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return True
    return False


def test_check_config_refuses_ray_when_it_is_not_installed(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(ConfigError) as err:
        _config(tmp_path)
    msg = str(err.value)
    assert "async.launcher=ray" in msg and 'pip install -e ".[ray]"' in msg
    assert "async.launcher: local" in msg


def test_ray_options_are_validated(tmp_path):
    with pytest.raises(ConfigError, match="ray.num_cpus_per_searcher"):
        _config(tmp_path, ray={"num_cpus_per_searcher": 0})
    with pytest.raises(ConfigError, match="ray.placement_strategy"):
        _config(tmp_path, ray={"placement_strategy": "ANYWHERE"})
    cfg = _config(tmp_path, ray={"address": "auto", "num_cpus_per_searcher": 0.5})
    assert cfg.ray.address == "auto" and cfg.ray.num_cpus_per_searcher == 0.5


def test_a_cluster_address_nobody_answers_is_refused_before_the_run(tmp_path, monkeypatch):
    """ray.address (or RAY_ADDRESS) is probed with one TCP connection when the config is
    checked: a closed port gives a one-line error naming the field and the fixes, not Ray's
    half a minute of retries; a listening port passes; a malformed address is named too."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # free again once closed: nothing listens there
    t0 = time.time()
    with pytest.raises(ConfigError) as err:
        _config(tmp_path, ray={"address": f"127.0.0.1:{closed}"})
    assert time.time() - t0 < 5
    msg = str(err.value)
    assert msg.startswith(f"ray.address='127.0.0.1:{closed}': no Ray head answers there")
    assert f"ray start --head --port {closed}" in msg and "leave ray.address empty" in msg
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{closed}")
    with pytest.raises(ConfigError, match=f"^RAY_ADDRESS='127.0.0.1:{closed}': no Ray head"):
        _config(tmp_path)
    with pytest.raises(ConfigError, match="ray.address='headnode': give HOST:PORT"):
        _config(tmp_path, ray={"address": "headnode"})
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert _config(tmp_path, ray={"address": f"ray://127.0.0.1:{port}"}).ray.address.endswith(
            str(port))


def test_bundles_and_actor_devices_follow_the_searcher_device_rule(tmp_path):
    cfg = _config(tmp_path, **{"async": {"num_searchers": 3}})
    assert _bundles(cfg) == [{"CPU": 1.0}] * 3
    if not hasattr(cfg.async_, "searcher_devices"):
        pytest.skip("this version has no async.searcher_devices")
    cfg.async_.searcher_devices = ["cuda:1", "cuda:1", "cpu"]  # after validation: no GPU here
    assert _bundles(cfg) == [{"CPU": 1.0, "GPU": 0.5}, {"CPU": 1.0, "GPU": 0.5}, {"CPU": 1.0}]
    spec = _actor_spec(SearcherSpec.from_config(cfg, True))
    assert spec.cfg.async_.searcher_devices == ["cuda:0", "cuda:0", "cpu"]  # Ray's numbering
    assert cfg.async_.searcher_devices == ["cuda:1", "cuda:1", "cpu"]  # the trainer's: unchanged


def test_weights_round_trip_through_the_object_store_exactly(local_ray, tmp_path):
    """Publish -> pull on the driver: every parameter equal, bit for bit, also in bf16."""
    cfg = _config(tmp_path)
    policy = load_policy(cfg.model.path)[0]
    for dtype in (torch.float32, torch.bfloat16):
        model = policy.to(dtype)
        launcher = RayLauncher(cfg, model, use_reference=True)
        launcher.publish(model, 7)
        weights = PushedWeights(launcher.layout, *launcher.latest)
        version, pulled = weights.pull(-1)
        assert version == 7 and weights.pull(7) == (7, None)
        params = dict(model.named_parameters())
        assert [n for n, _ in pulled] == list(params)
        for name, t in pulled:
            assert t.dtype == dtype and torch.equal(t, params[name].detach())
        assert flat_bytes(model).nbytes == sum(p.numel() for p in params.values()) * (
            4 if dtype == torch.float32 else 2)
        launcher.stop()
        assert ray.is_initialized()  # the launcher did not start this Ray: it leaves it running


def test_a_cluster_too_small_for_the_bundles_stops_with_a_clear_error(local_ray, tmp_path):
    cfg = _config(tmp_path, ray={"start_timeout": 2.0}, **{"async": {"num_searchers": 3}})
    launcher = RayLauncher(cfg, load_policy(cfg.model.path)[0], use_reference=True)
    with pytest.raises(RuntimeError) as err:
        launcher.start()
    msg = str(err.value)
    assert "async.num_searchers=3" in msg and "ray.num_cpus_per_searcher" in msg
    assert launcher.stopped and launcher.searchers == {}
    assert all(g["state"] == "REMOVED" for g in ray.util.placement_group_table().values())


def test_two_searchers_publish_poll_kill_restart_stop(local_ray, tmp_path):
    cfg = _config(tmp_path)
    policy = load_policy(cfg.model.path)[0]
    launcher = RayLauncher(cfg, policy, use_reference=True)
    launcher.publish(policy, 0)
    launcher.start()
    try:
        # rollouts from both searchers, version 0, prompt-major B*K rows
        got = _poll_until(launcher, lambda m: {b.searcher_id for b in m
                                               if isinstance(b, RolloutBatch)} == {0, 1})
        assert not [m for m in got if isinstance(m, SearcherFailed)], got
        first = [m for m in got if isinstance(m, RolloutBatch)]
        assert {b.version for b in first} == {0}
        assert all(len(b.rollouts) == 2 * 2 for b in first)

        # publish changed weights: a searcher holds exactly them, and its batches carry version 1
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(0.01 * torch.randn_like(p))
        launcher.publish(policy, 1)
        version, held = ray.get(launcher.searchers[0].actor.peek_weights.remote())
        params = dict(policy.named_parameters())
        assert version == 1
        assert all(torch.equal(t, params[n].detach()) for n, t in held)
        _poll_until(launcher, lambda m: any(isinstance(b, RolloutBatch) and b.version == 1
                                            for b in m))

        # a killed actor is reported once, as exited; a restart brings searcher 1 back
        old = launcher.searchers[1].actor
        ray.kill(old, no_restart=True)
        got = _poll_until(launcher, lambda m: any(isinstance(x, SearcherFailed) for x in m))
        [failure] = [x for x in got if isinstance(x, SearcherFailed)]
        assert (failure.searcher_id, failure.reason) == (1, "exited")
        assert "ray.kill" in failure.traceback
        time.sleep(1.0)
        assert not [x for x in launcher.poll() if isinstance(x, SearcherFailed)]  # once only
        launcher.restart(1)
        assert launcher.starts[1] == 2
        since = time.time()
        got = _poll_until(launcher, lambda m: any(isinstance(b, RolloutBatch) and b.searcher_id == 1
                                                  and b.version == 1 and b.t_start >= since
                                                  for b in m))
        assert not [x for x in got if isinstance(x, SearcherFailed)], got
        actors = [s.actor for s in launcher.searchers.values()]
        queue_actor, pg = launcher.queue.actor, launcher.pg
    finally:
        launcher.stop()
    launcher.stop()  # idempotent
    assert launcher.searchers == {} and launcher.poll() == []
    assert all(_dead(a) for a in [*actors, queue_actor, old])
    assert ray.util.placement_group_table(pg)["state"] == "REMOVED"
    assert ray.is_initialized()


def test_wait_for_exit_returns_once_killed_actors_are_dead(local_ray):
    # ray.kill only sends the request: without the wait, a call right after it was still
    # answered 1 time in 20 (2026-12-03, this 2-CPU Ray), and stop() could leave actors running
    @ray.remote(num_cpus=0, max_concurrency=2)
    class Busy:
        """Shaped like a searcher: two threads, one inside a long call. Defined here so that
        Ray ships it by value: its workers need not import this module (torch, tba_lab)."""

        def run(self):
            import time
            time.sleep(3600)

    actors = [Busy.remote() for _ in range(12)]  # started together
    for actor in actors:
        actor.run.remote()
    ray.get([actor.__ray_ready__.remote() for actor in actors])
    live, killed = actors[0], actors[1:]
    try:
        for actor in killed:
            ray.kill(actor, no_restart=True)
        assert wait_for_exit(killed, timeout=30) == []
        assert [_dead(actor) for actor in killed] == [True] * len(killed)
        t0 = time.monotonic()  # one that is not killed is reported once the time is up
        assert wait_for_exit(killed[:2] + [live], timeout=0.5) == [2]
        assert 0.5 <= time.monotonic() - t0 < 15
    finally:
        ray.kill(live, no_restart=True)


@pytest.mark.slow  # another actor start: about 10 s on a loaded 2-core machine
def test_a_searcher_that_raises_is_reported_with_its_traceback(local_ray, tmp_path):
    import tests._faulty  # noqa: F401  (task.name: faulty_test)

    (tmp_path / "markers").mkdir()
    cfg = _config(tmp_path, task={"name": "faulty_test"},
                  fault={"marker_dir": str(tmp_path / "markers"), "kind": "raise", "times": 1},
                  **{"async": {"num_searchers": 1}})
    policy = load_policy(cfg.model.path)[0]
    launcher = RayLauncher(cfg, policy, use_reference=True)
    launcher.publish(policy, 0)
    launcher.start()
    try:
        got = _poll_until(launcher, lambda m: any(isinstance(x, SearcherFailed) for x in m))
        [failure] = [x for x in got if isinstance(x, SearcherFailed)]
        assert failure.reason == "raised" and failure.searcher_id == 0
        assert "Traceback" in failure.traceback and "FaultInjected" in failure.traceback
    finally:
        launcher.stop()


@pytest.mark.slow
def test_train_with_the_ray_launcher_writes_what_the_local_launcher_writes(local_ray, tmp_path):
    from tba_lab.trainer import train

    cfg = _config(tmp_path, training={"max_steps": 4, "num_prompts_per_step": 4,
                                      "num_generations": 4},
                  buffer={"initial_fill": 16}, model={"max_new_tokens": 24})
    summary = train(cfg, progress=False)
    assert summary["trainer_steps"] == 4 and not summary.get("searcher_failures")
    files = {p.name for p in (tmp_path / "run").iterdir()}
    assert {"config.yaml", "metrics.jsonl", "searchers.jsonl", "eval.jsonl", "summary.json",
            "curves.png"} <= files, files
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(saved)
    again = load_yaml(tmp_path / "run" / "config.yaml")  # tba-lab train --config reruns it
    assert again.async_.launcher == "ray" and again.ray == cfg.ray
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(METRIC_KEYS <= set(r) for r in rows)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    searchers = {json.loads(x)["searcher_id"]
                 for x in (tmp_path / "run" / "searchers.jsonl").read_text().splitlines()}
    # which searchers delivered the 4 updates' batches depends on their start-up order
    assert searchers and searchers <= {0, 1}, searchers
    batches = [json.loads(x) for x in (tmp_path / "run" / "searchers.jsonl").read_text().splitlines()]
    assert {b["node"] for b in batches} == {ray.util.get_node_ip_address()}  # Ray's name of this node
    assert_syncs_timed_when_the_version_moves(batches)
    assert ray.util.placement_group_table()  # every group this run made is removed
    assert all(g["state"] == "REMOVED" for g in ray.util.placement_group_table().values())


@pytest.mark.slow
def test_sync_mode_alternates_strictly_through_ray(local_ray, tmp_path):
    from tba_lab.trainer import train

    cfg = _config(tmp_path, training={"max_steps": 3}, **{"async": {"mode": "sync",
                                                                     "num_searchers": 1}})
    summary = train(cfg, progress=False)
    assert summary["trainer_steps"] == 3 and summary["staleness_max"] == 0
    rows = [json.loads(x) for x in (tmp_path / "run" / "searchers.jsonl").read_text().splitlines()]
    assert [r["version"] for r in rows][:3] == [0, 1, 2]
