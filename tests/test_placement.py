"""Device placement (async.trainer_device, async.searcher_devices), the stalled-searcher check,
and the prepared GPU check's CPU dry run.

Without a GPU these test the parts that decide and check placement (config fields, the
machine check before any process starts, which searcher goes where, the CUDA_VISIBLE_DEVICES
each searcher gets), that a searcher changes weights only between batches, that a searcher
whose versions stop advancing is detected, and that bench/gpu_check.py writes its report.
"""
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tba_lab.actors import placement
from tba_lab.actors.local import visible_devices_for
from tba_lab.actors.searcher import SearcherSpec, narrow_visible_devices, searcher_device
from tba_lab.buffer import ReplayBuffer, Rollout
from tba_lab.config import ConfigError, from_dict
from tba_lab.preflight import check_devices
from tba_lab.rollout import RolloutBatch

ROOT = Path(__file__).parents[1]


def _cfg(**async_):
    return from_dict({"async": async_})


# ------------------------------------------------------------------------------ the fields
def test_device_fields_default_to_cpu_and_accept_cuda_forms():
    a = _cfg().async_
    assert (a.trainer_device, a.searcher_devices) == ("cpu", [])
    a = _cfg(trainer_device="cuda", searcher_devices=["cuda:1", "cpu", "cuda:0"]).async_
    assert a.searcher_devices == ["cuda:1", "cpu", "cuda:0"]


@pytest.mark.parametrize("async_, field", [
    ({"trainer_device": "gpu"}, "async.trainer_device='gpu'"),
    ({"trainer_device": "cuda:"}, "async.trainer_device='cuda:'"),
    ({"searcher_devices": ["cpu", "cuda:x"]}, "async.searcher_devices[1]='cuda:x'"),
    ({"searcher_devices": "cuda:0"}, "async.searcher_devices='cuda:0': give a list"),
    ({"stale_batches": -1}, "async.stale_batches=-1"),
])
def test_bad_device_names_the_field(async_, field):
    with pytest.raises(ConfigError) as e:
        _cfg(**async_)
    assert field in str(e.value)


def test_searcher_i_uses_entry_i_mod_len():
    cfg = _cfg(num_searchers=5, trainer_device="cuda:1", searcher_devices=["cuda:0", "cuda"])
    assert [searcher_device(cfg, i) for i in range(5)] == ["cuda:0", "cuda:0"] * 2 + ["cuda:0"]
    cfg = _cfg(num_searchers=3, searcher_devices=["cuda:2", "cpu", "cuda:1"])
    assert [searcher_device(cfg, i) for i in range(3)] == ["cuda:2", "cpu", "cuda:1"]
    cfg = _cfg(num_searchers=2, trainer_device="cuda:1")  # [] = the trainer's device
    assert [searcher_device(cfg, i) for i in range(2)] == ["cuda:1", "cuda:1"]
    assert searcher_device(_cfg(num_searchers=2), 1) == "cpu"


# ------------------------------------------------------------------ the machine, before start
def _gpus(monkeypatch, n: int):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    monkeypatch.setattr(torch.version, "cuda", "13.0")


def test_cuda_3_on_a_one_gpu_machine_names_field_and_fix(monkeypatch):
    _gpus(monkeypatch, 1)
    with pytest.raises(ConfigError) as e:
        check_devices(_cfg(trainer_device="cuda:0", searcher_devices=["cuda:0", "cuda:3"]))
    msg = str(e.value)
    assert "async.searcher_devices[1]='cuda:3'" in msg
    assert "this machine has 1 GPU (cuda:0)" in msg and "fix: use one of cuda:0, or 'cpu'" in msg
    check_devices(_cfg(trainer_device="cuda", searcher_devices=["cuda:0", "cpu"]))  # fine


def test_cuda_without_a_gpu_names_field_and_fix(monkeypatch):
    _gpus(monkeypatch, 0)
    with pytest.raises(ConfigError, match=r"async.trainer_device='cuda:0': no CUDA GPU is "
                                          r"visible .*fix: set async.trainer_device to 'cpu'"):
        check_devices(_cfg(trainer_device="cuda:0"))
    check_devices(_cfg())  # CPU asks nothing of the machine


def test_expandable_segments_stop_a_cuda_channel_run(monkeypatch):
    _gpus(monkeypatch, 2)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    with pytest.raises(ConfigError, match="PYTORCH_CUDA_ALLOC_CONF asks for expandable_segments"):
        check_devices(_cfg(trainer_device="cuda:0", searcher_devices=["cuda:1"]))
    check_devices(_cfg(trainer_device="cuda:0", searcher_devices=["cpu"]))  # CPU channel: fine


def test_train_stops_before_any_process_starts(tmp_path):
    """This machine has no GPU (CI neither): asking for one stops train() at preflight, with
    nothing written."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from tba_lab.trainer import train

    out = tmp_path / "run"
    cfg = from_dict({"output_dir": str(out), "async": {"searcher_devices": ["cuda:3"]}})
    with pytest.raises(ConfigError, match=r"async.searcher_devices\[0\]='cuda:3'"):
        train(cfg, progress=False)
    assert not out.exists()


# ---------------------------------------------------------------- visible devices per searcher
def test_visible_devices_own_gpu_first_then_the_trainers():
    cfg = _cfg(num_searchers=4, trainer_device="cuda:0", searcher_devices=["cuda:0", "cuda:1"])
    assert visible_devices_for(cfg, True, None) == {0: "0", 1: "1,0", 2: "0", 3: "1,0"}
    assert visible_devices_for(cfg, False, None) == {0: "0", 1: "1", 2: "0", 3: "1"}
    # the trainer's own CUDA_VISIBLE_DEVICES maps its indices to physical GPUs (or UUIDs)
    assert visible_devices_for(cfg, True, "3,5") == {0: "3", 1: "5,3", 2: "3", 3: "5,3"}
    assert visible_devices_for(cfg, True, "GPU-a, GPU-b")[1] == "GPU-b,GPU-a"
    cfg = _cfg(num_searchers=2, searcher_devices=["cpu", "cuda:1"])
    assert visible_devices_for(cfg, False, None) == {1: "1"}  # CPU searchers: left alone


def test_local_launcher_hands_each_searcher_its_devices(monkeypatch, tmp_path):
    """Built without starting anything (no CUDA call): the spec the children receive says
    which GPUs each may see; a CUDA trainer with CPU searchers keeps the CPU channel."""
    from tba_lab.actors.local import LocalLauncher
    from tba_lab.actors.weights import SharedWeights

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    cfg = from_dict({"output_dir": str(tmp_path), "async": {
        "num_searchers": 3, "searcher_devices": ["cuda:1", "cpu", "cuda:0"]}})
    launcher = LocalLauncher(cfg, torch.nn.Linear(2, 2), True)
    try:
        assert isinstance(launcher.weights, SharedWeights)  # the trainer is on the CPU
        assert launcher.spec.visible_devices == {0: "6", 2: "4"}
    finally:
        launcher.stop()


def test_searcher_narrows_its_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cfg = _cfg(num_searchers=2, trainer_device="cuda:0", searcher_devices=["cuda:1", "cpu"])
    spec = SearcherSpec(cfg, None, None, False, visible_devices={0: "1,0"})
    assert narrow_visible_devices(spec, 1) == "cpu"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    assert narrow_visible_devices(spec, 0) == "cuda:0"  # its GPU is first in what it sees
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1,0"
    spec.visible_devices = {}  # a Ray actor: Ray chose its GPUs; the configured device stands
    assert narrow_visible_devices(spec, 0) == "cuda:1"


# ------------------------------------------------------------ weights change between batches
class _Weights:
    """A channel that has a newer version on every pull (the trainer publishing constantly)."""

    def __init__(self, model, log):
        self.model, self.log, self.version = model, log, 0

    def pull(self, have):
        self.version += 1
        self.log.append(("pull", self.version))
        return self.version, [(n, p.detach().clone()) for n, p in self.model.named_parameters()]


class _Queue:
    def __init__(self, stop, n):
        self.items, self.stop, self.n = [], stop, n

    def put(self, msg, timeout=None):
        self.items.append(msg)
        if len(self.items) >= self.n:
            self.stop.set()

    def full(self):  # the loop waits for room before each batch; this queue always has it
        return False


def test_a_searcher_pulls_only_between_batches(monkeypatch):
    """However often the trainer publishes, a batch is generated by ONE version: the loop pulls
    before a batch, never while one is generated, and tags the batch with that version."""
    import threading

    import tba_lab.rollout as rollout_module
    from tba_lab.actors.searcher import _loop
    from tba_lab.models import load_policy

    events = []
    real = rollout_module.rollout

    def watched(*args, **kwargs):
        events.append(("start", kwargs["version"]))
        out = real(*args, **kwargs)
        events.append(("end", kwargs["version"]))
        return out

    monkeypatch.setattr(rollout_module, "rollout", watched)
    cfg = from_dict({"model": {"max_new_tokens": 6},
                     "training": {"num_prompts_per_step": 2, "num_generations": 2},
                     "async": {"searcher_threads": 1}})
    spec = SearcherSpec.from_config(cfg, use_reference=True)
    stop = threading.Event()
    out = _Queue(stop, 3)
    _loop(0, spec, _Weights(load_policy(cfg.model.path)[0], events), out, stop, seed=0)
    kinds = [e[0] for e in events]
    assert kinds == ["pull", "start", "end"] * 3  # no pull inside a start..end
    assert [b.version for b in out.items] == [1, 2, 3]
    assert all(r.version == b.version for b in out.items for r in b.rollouts)
    torch.set_num_threads(1)


# -------------------------------------------------------------------- the stalled searcher
class _Launcher:
    def __init__(self):
        self.inbox, self.restarted, self.retired, self.published = [], [], [], []

    def poll(self, timeout=0.0):
        out, self.inbox = self.inbox, []
        return out

    def publish(self, model, version):
        self.published.append(version)

    def restart(self, i):
        self.restarted.append(i)

    def retire(self, i):
        self.retired.append(i)


class _Log:
    def __init__(self):
        self.failures = []

    def received(self, batches, step):
        pass

    def searcher_failed(self, step, failure, action):
        self.failures.append((failure.searcher_id, failure.reason, action, failure.traceback))


def _batch(searcher_id, version, t_start):
    rollouts = [Rollout(prompt_id=searcher_id, prompt_ids=[1, 2], response_ids=[3, 4], reward=1.0,
                        ref_token_logps=[-1.0, -1.0], behaviour_token_logps=[-1.0, -1.0],
                        version=version) for _ in range(2)]
    return RolloutBatch(rollouts=rollouts, completions=["x", "x"], version=version,
                        searcher_id=searcher_id, t_start=t_start, t_end=t_start + 0.1)


def test_a_searcher_whose_versions_stop_advancing_is_reported_and_restarted():
    from tba_lab.trainer import STALE_GRACE_SECONDS, Feed

    cfg = _cfg(num_searchers=2, stale_batches=3, searcher_timeout=0)
    launcher, log = _Launcher(), _Log()
    feed = Feed(cfg, launcher, ReplayBuffer(8, 0.5, 0.0, seed=0), log)
    feed.start = lambda: None
    feed.heard = {0: time.time(), 1: time.time()}
    for v in (1, 2):
        feed.publish(None, v)
    published = time.time()
    feed.publishes = [(1, published - 60), (2, published - 30)]  # as if published a while ago
    now = time.time()
    # searcher 0 began a batch on version 0 just before version 1 appeared: not stalled;
    # searcher 1 follows the publishes
    launcher.inbox = [_batch(0, 0, published - 60 - STALE_GRACE_SECONDS / 2), _batch(1, 2, now)]
    feed.next_batch(2)
    assert feed.missed_version(_batch(0, 0, published - 60 - 0.5 * STALE_GRACE_SECONDS)) is None
    assert feed.missed_version(_batch(0, 0, published - 40)) == 1
    assert feed.missed_version(_batch(0, 1, now)) == 2
    # searcher 0 now begins batch after batch on version 1 although 2 is out: stalled at 3
    for k in range(3):
        launcher.inbox = [_batch(0, 1, now + k), _batch(1, 2, now + k)]
        feed.next_batch(2)
        assert log.failures == [] if k < 2 else len(log.failures) == 1
    [(searcher, reason, action, text)] = log.failures
    assert (searcher, reason) == (0, "stale") and action.startswith("restarted")
    assert "version 1 or older although version 2 was published" in text
    assert launcher.restarted == [0] and feed.stale_run[0] == 0
    # a fresh batch resets the count
    launcher.inbox = [_batch(0, 1, now + 5), _batch(0, 2, now + 6), _batch(0, 1, now + 7)]
    feed.next_batch(2)
    assert feed.stale_run[0] == 1 and launcher.restarted == [0]


def test_stale_check_off_with_zero():
    from tba_lab.trainer import Feed

    launcher, log = _Launcher(), _Log()
    feed = Feed(_cfg(stale_batches=0, searcher_timeout=0), launcher,
                ReplayBuffer(8, 0.5, 0.0, seed=0), log)
    feed.publishes = [(5, time.time() - 60)]
    launcher.inbox = [_batch(0, 0, time.time()) for _ in range(5)]
    feed.next_batch(5)
    assert log.failures == []


# ---------------------------------------------------------------- the replay-ratio bound
class _CountingLog(_Log):
    def __init__(self):
        super().__init__()
        self.samples = self.trained = 0  # rows generated; rows the updates trained on

    def received(self, batches, step):
        self.samples += sum(len(b.rollouts) for b in batches)


@pytest.mark.parametrize("rho, expected", [
    (1.5, [True, False, "deliver", True, True, False]),
    (0.0, [True, True, "deliver", True, True, True]),  # 0: no bound, the buffer is replayed
])
def test_replay_ratio_bound_makes_the_trainer_wait_for_new_data(rho, expected):
    """With buffer.max_replay_ratio rho, update step + 1 gets a batch only while
    rows trained + B * K <= rho * rows generated: 2 x 2 rows per batch, 4 rows received, then 8."""
    from tba_lab.trainer import Feed

    cfg = from_dict({"training": {"num_prompts_per_step": 2, "num_generations": 2},
                     "buffer": {"initial_fill": 4, "max_replay_ratio": rho, "capacity_per_prompt": 4},
                     "async": {"stale_batches": 0, "searcher_timeout": 0}})
    launcher, log = _Launcher(), _CountingLog()
    feed = Feed(cfg, launcher, ReplayBuffer(4, 0.5, 0.0, seed=0), log)

    def two_prompts(first, version):  # one searcher's batch: 2 prompts x 2 rows
        batch = _batch(0, version, time.time())
        batch.rollouts += _batch(0, version, time.time()).rollouts
        for i, r in enumerate(batch.rollouts):
            r.prompt_id = first + i // 2
        return batch

    launcher.inbox, step, got = [two_prompts(0, 0)], 0, []
    for e in expected:
        if e == "deliver":
            launcher.inbox = [two_prompts(2, 1)]
            continue
        batch = feed.next_batch(step)
        got.append(batch is not None)
        if batch is not None:  # the update RunLog.update counts
            step += 1
            log.trained += len(batch)
    assert got == [e for e in expected if e != "deliver"]
    assert log.samples == 8 and step == (3 if rho else 5)


# ------------------------------------------------------------------------- model device
def test_scoring_and_sampling_follow_the_model_device(tiny):
    """Inputs go where the model is; messages come back as lists (CPU here: the same calls)."""
    from tba_lab.rollout.backend import TransformersBackend
    from tba_lab.rollout.scoring import model_device, response_logprobs

    model, tok, _ = tiny
    assert model_device(model) == torch.device("cpu")
    assert model_device(torch.nn.ReLU()) == torch.device("cpu")
    gen = TransformersBackend(model, tok).generate([[1, 5, 6]], 2, temperature=1.0, max_new_tokens=4)
    assert all(isinstance(x, float) for row in gen.token_logps for x in row)
    logps, mask = response_logprobs(model, [[1, 5, 6]] * 2, gen.responses, tok.pad_token_id)
    assert logps.device == model_device(model) and logps.shape == mask.shape


# ----------------------------------------------------------------------- the GPU check
@pytest.mark.slow
def test_gpu_check_cpu_dry_run_writes_every_part(tmp_path):
    """bench/gpu_check.sh on a machine without CUDA runs the same code on the CPU in under a
    minute and writes the JSON (every part present, marked device cpu) and the summary."""
    t0 = time.time()
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHON": sys.executable, "GPU_CHECK_CPU_DRY_RUN": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["device"] == "cpu" and report["dry_run"] is True
    for part in ("ipc_round_trip", "sync_latency", "logprob_agreement", "async_run"):
        assert report[part]["ok"], report[part]
    rt = report["ipc_round_trip"]
    assert rt["syncs"] == 100 and rt["exact"] and rt["two_pullers_agree"]
    assert report["sync_latency"]["publish_pull_ms"]["median"] > 0
    assert report["logprob_agreement"]["max_abs_diff"] < 1e-4
    run = report["async_run"]
    assert run["updates_per_minute"] > 0 and 0 < run["trainer_busy_fraction"] <= 1
    assert (tmp_path / "gpu_check.md").read_text().startswith("# GPU check")
    # a GPU machine's tool returns at most 8 files: the run's policy and checkpoint stay out
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert files == ["async_run/metrics.jsonl", "async_run/searchers.jsonl",
                     "async_run/summary.json", "gpu_check.json", "gpu_check.log", "gpu_check.md"]
    assert "| d. async run | True |" in (tmp_path / "gpu_check.log").read_text()
    print(f"dry run took {time.time() - t0:.0f} s")


def test_gpu_check_notices_a_dead_child_in_about_a_second(monkeypatch):
    """A child that dies (a crash opening the IPC handle, the OOM killer) fails the part at
    once instead of after the reply timeout (120 s a part would spend three parts' time of the
    5-minute limit), and later parts asking it fail at once too."""
    import queue

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import gpu_check

    class Proc:
        def __init__(self):
            self.alive, self.exitcode = True, None

        def is_alive(self):
            return self.alive

    children = gpu_check.Children.__new__(gpu_check.Children)
    children.commands = [queue.Queue(), queue.Queue()]
    children.results = queue.Queue()
    children.procs = [Proc(), Proc()]
    children.results.put(("ping", 0, "ok"))  # child 0's answer (read by the second ask) ...
    children.procs[1].alive, children.procs[1].exitcode = False, -9  # ... it was killed
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="child 1 is not running"):
        children.ask(("ping",), [0, 1], timeout=120)
    children.procs[1].alive = True  # alive when asked, dies before replying
    threading.Timer(0.3, lambda: setattr(children.procs[1], "alive", False)).start()
    with pytest.raises(RuntimeError, match=r"child 1 died during 'ping' \(exit code -9\)"):
        children.ask(("ping",), [0, 1], timeout=120)
    assert time.monotonic() - t0 < 10
    children.procs[1].alive = True  # alive but silent: the timeout still bounds the wait
    with pytest.raises(RuntimeError, match=r"no reply to 'ping' from children \[1\] in 2 s"):
        children.ask(("ping",), [1], timeout=2)


# ------------------------------------------------------------------------------ CPU quota
def _fake_cgroup(tmp_path, files: dict, proc: str = "0::/\n"):
    """A cgroup tree under ``tmp_path/cg`` holding ``files`` ({relative path: text}) and a
    ``/proc/self/cgroup`` stand-in with ``proc``; returns (root, proc file)."""
    root = tmp_path / "cg"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    root.mkdir(exist_ok=True)
    (tmp_path / "proc_cgroup").write_text(proc)
    return root, tmp_path / "proc_cgroup"


@pytest.mark.parametrize("files, proc, expected", [
    ({"cpu.max": "200000 100000\n"}, "0::/\n", 2),                     # docker --cpus 2 (cgroup v2)
    ({"cpu.max": "150000 100000\n"}, "0::/\n", 2),                     # 1.5 CPUs: rounded up
    ({"cpu.max": "50000 100000\n"}, "0::/\n", 1),                      # half a CPU: at least 1
    ({"cpu.max": "max 100000\n"}, "0::/\n", 32),                       # no quota: the affinity mask
    ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"},
     "2:cpu,cpuacct:/\n", 2),                                          # cgroup v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
     "2:cpu,cpuacct:/\n", 32),                                         # v1, no quota
    ({"kubepods/pod1/cpu.max": "400000 100000\n", "kubepods/pod1/c1/cpu.max": "max 100000\n"},
     "0::/kubepods/pod1/c1\n", 4),                                     # the pod's limit, one level up
    ({}, "0::/\n", 32),                                                # no cgroup files at all
])
def test_available_cores_honours_a_cfs_quota(tmp_path, monkeypatch, files, proc, expected):
    """After oneTBB#190 / coreutils#108: `docker --cpus 2` and Kubernetes CPU limits are a CFS
    quota, not a CPU set; a 32-core host under a 2-CPU quota must plan for 2 cores."""
    root, proc_file = _fake_cgroup(tmp_path, files, proc)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    assert placement.available_cores(cgroup_root=root, proc_cgroup=proc_file) == expected


def test_a_two_cpu_quota_on_a_32_core_host_plans_one_plus_one(tmp_path, monkeypatch):
    """The plan a run makes (no cores given) reads the quota: 1 + 1 threads, sync 2 + 2, not
    16 + 16 and 32 + 32."""
    root, proc_file = _fake_cgroup(tmp_path, {"cpu.max": "200000 100000\n"})
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    monkeypatch.setattr(placement, "CGROUP_ROOT", root, raising=False)
    monkeypatch.setattr(placement, "PROC_CGROUP", proc_file, raising=False)
    p = placement.plan(_cfg())
    assert (p.cores, p.trainer_threads, p.searcher_threads) == (2, 1, 1)
    s = placement.plan(_cfg(mode="sync"))
    assert (s.trainer_threads, s.searcher_threads) == (2, 2)


def test_available_cores_on_this_machine_is_at_most_the_affinity_mask():
    assert 1 <= placement.available_cores() <= len(os.sched_getaffinity(0))


def test_eval_uses_no_more_threads_than_the_cores_it_may_use(monkeypatch, capsys):
    """``tba-lab eval`` in a container allowed 1 core (``available_cores() == 1``) on a machine
    where torch would start one thread per core: generation runs on 1 thread, not on threads
    the quota then throttles."""
    import tba_lab.eval
    from tba_lab.cli import main

    seen = []

    def evaluate(task, backend, problems, max_new_tokens):
        seen.append(torch.get_num_threads())
        return {"accuracy": 0.0}

    before = torch.get_num_threads()
    monkeypatch.setattr(placement, "available_cores", lambda *a, **k: 1)
    monkeypatch.setattr(tba_lab.eval, "evaluate", evaluate)
    try:
        torch.set_num_threads(2)
        assert main(["eval", "-n", "1"]) == 0
    finally:
        torch.set_num_threads(before)
    assert seen == [1]
    assert '"accuracy": 0.0' in capsys.readouterr().out
