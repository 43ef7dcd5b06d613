"""Tiny-budget end-to-end runs of ``tba_lab.trainer.train`` with real searcher processes.

One asynchronous run (sync period 1) and one synchronous run on the embedded model. Besides the
outputs, they check the system's central promise: the searcher's weights really change after a
sync, i.e. rollouts tagged with version >= 1 were sampled from updated weights, not from the
starting checkpoint.
"""
import json
import math
import multiprocessing
import os
import socket
import subprocess
import time

import pytest
import torch

from tba_lab.actors.launcher import SearcherFailed
from tba_lab.actors.local import LocalLauncher
from tba_lab.buffer import ReplayBuffer
from tba_lab.config import from_dict
from tba_lab.models import DEFAULT_MODEL_DIR, load_policy
from tba_lab.registry import LAUNCHERS
from tba_lab.rollout.scoring import response_logprobs

SUMMARY_KEYS = {"accuracy_before", "accuracy_after", "trainer_steps", "samples_generated",
                "staleness_mean", "staleness_max", "wall_seconds", "interrupted"}
METRIC_KEYS = {"step", "wall_seconds", "loss", "reward_mean", "staleness_mean", "staleness_max",
               "buffer_size", "samples_generated", "grad_norm", "beta",
               "log_z", "residual_abs_mean", "kl"}  # the last three: TB loss info


def _config(tmp_path, **overrides):
    data = {
        "output_dir": str(tmp_path),
        "max_minutes": 3.0,
        "model": {"max_new_tokens": 40},
        "training": {"max_steps": 4, "num_prompts_per_step": 4, "num_generations": 4},
        "buffer": {"initial_fill": 16},
        "task": {"eval_size": 20, "interim_eval_size": 10, "eval_every_seconds": 0},
    }
    for section, values in overrides.items():
        if isinstance(values, dict):
            data.setdefault(section, {}).update(values)
        else:
            data[section] = values
    return from_dict(data)


def _child_pids() -> list[int]:
    """Processes whose parent is this test process, except multiprocessing's resource tracker
    (a per-process helper that lives as long as its parent, by design) and ``ps`` itself.

    ``-ww``: without it ps cuts ``args`` at ``$COLUMNS`` (CI sets it), and a long venv path
    hides the resource tracker's module name."""
    out = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "--ppid", str(os.getpid())],
                         capture_output=True, text=True).stdout
    pids = []
    for line in out.splitlines():
        pid, _, args = line.strip().partition(" ")
        if "multiprocessing.resource_tracker" in args or args.startswith("ps "):
            continue
        pids.append(int(pid))
    return pids


def _assert_no_children():
    assert multiprocessing.active_children() == []
    deadline = time.time() + 5  # a killed child may take a moment to be reaped
    while _child_pids() and time.time() < deadline:
        time.sleep(0.1)
    left = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "--ppid", str(os.getpid())],
                          capture_output=True, text=True).stdout
    assert _child_pids() == [], f"child processes left:\n{left}"


@LAUNCHERS.register
class _FreshDataLauncher(LocalLauncher):
    """Test harness (``async.launcher: fresh_data_test``): once the trainer has published version
    >= 1, its first ``poll`` waits (up to 60 s) until a batch generated with published weights
    arrives. This makes "the trainer is slower than the searcher" true on any machine, so the
    buffer deterministically holds post-sync rollouts; everything else is the real launcher
    and real processes."""

    name = "fresh_data_test"
    seen_fresh = False
    searchers_score_reference = None  # the last instance's spec.use_reference (read by a test)

    def poll(self, timeout=0.0):
        type(self).searchers_score_reference = self.spec.use_reference
        msgs = super().poll(timeout)
        fresh = lambda ms: any(isinstance(m, SearcherFailed) or m.version >= 1 for m in ms)
        if (not self.seen_fresh and self.weights.version.value >= 1
                and not self.stop_event.is_set()
                and all(s.process.is_alive() for s in self.searchers.values())):
            deadline = time.time() + 60
            while not fresh(msgs) and time.time() < deadline:
                msgs += super().poll(0.1)
        self.seen_fresh = self.seen_fresh or fresh(msgs)
        return msgs


def _read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def assert_syncs_timed_when_the_version_moves(batches):
    """``searchers.jsonl`` rows: each searcher's first batch, and every batch whose version
    differs from that searcher's previous one, has a timed sync (> 0 s); the others have none."""
    for sid in {b["searcher_id"] for b in batches}:
        mine = [b for b in batches if b["searcher_id"] == sid]
        moved = [True] + [b["version"] != a["version"] for a, b in zip(mine, mine[1:])]
        assert [b["sync_seconds"] > 0 for b in mine] == moved, mine


def _logps(model, rollout, temperature):
    with torch.no_grad():
        lp, _ = response_logprobs(model, [rollout.prompt_ids], [rollout.response_ids],
                                  pad_id=0, temperature=temperature)
    return lp[0]


@pytest.mark.parametrize("reference_pass", ["searcher", "trainer"])
def test_async_run_outputs_and_searcher_uses_synced_weights(tmp_path, reference_pass):
    """...and the reference log-probs, whoever computes them (``async.reference_pass``), are
    the frozen starting checkpoint's."""
    from transformers import AutoModelForCausalLM

    from tba_lab.trainer import train

    torch.set_num_threads(1)
    steps = 6
    cfg = _config(tmp_path, training={"max_steps": steps},
                  async_={"sync_period": 1, "launcher": "fresh_data_test",
                          "reference_pass": reference_pass})
    summary = train(cfg, progress=False)
    _assert_no_children()
    assert _FreshDataLauncher.searchers_score_reference is (reference_pass == "searcher")

    # summary.json
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved == summary
    assert SUMMARY_KEYS <= saved.keys()
    assert saved["trainer_steps"] == steps and saved["interrupted"] is False
    assert saved["mode"] == "async" and saved["algo"] == "tb"
    assert 0 <= saved["accuracy_before"] <= 1 and 0 <= saved["accuracy_after"] <= 1
    assert saved["samples_generated"] >= 32  # initial fill + at least one post-sync batch
    assert saved["wall_seconds"] > 0
    assert 0 <= saved["staleness_mean"] <= saved["staleness_max"]
    assert isinstance(saved["staleness_max"], int)

    # metrics.jsonl: one row per update, documented keys, consistent with the summary
    rows = _read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    for r in rows:
        assert METRIC_KEYS <= r.keys(), METRIC_KEYS - r.keys()
        assert r["buffer_size"] >= 1 and r["loss"] >= 0
        assert 0 <= r["reward_mean"] <= 1
    assert max(r["staleness_max"] for r in rows) == saved["staleness_max"]
    assert rows[0]["staleness_max"] == 0  # the first update can only see version-0 data
    # the trainer's reference pass is timed apart from waiting, and only when it is the trainer's
    ref_seconds = [r["reference_seconds"] for r in rows]
    assert (sum(ref_seconds) > 0) is (reference_pass == "trainer") and min(ref_seconds) >= 0
    evals = _read_jsonl(tmp_path / "eval.jsonl")
    assert evals[0]["step"] == 0 and evals[-1]["step"] == steps and evals[0]["n"] == 20
    assert evals[0]["accuracy"] == saved["accuracy_before"]
    assert (tmp_path / "curves.png").stat().st_size > 1000
    assert (tmp_path / "config.yaml").is_file()
    # searchers.jsonl: where each batch was made, and a timed sync exactly when the version moved
    batches = _read_jsonl(tmp_path / "searchers.jsonl")
    assert batches and {b["node"] for b in batches} == {socket.gethostname()}
    assert_syncs_timed_when_the_version_moves(batches)

    # buffer: integer version tags, and post-sync rollouts exist
    buffer = ReplayBuffer.load(tmp_path / "buffer.pt")
    items = [it for pid in list(buffer._items) for it in buffer.items(pid)]
    assert len(items) == len(buffer) > 0
    versions = [it.version for it in items]
    assert all(isinstance(v, int) and 0 <= v <= steps for v in versions)
    assert min(versions) == 0 and max(versions) >= 1

    # the saved policy loads with the Auto class and differs from the starting weights
    start, _ = load_policy(DEFAULT_MODEL_DIR)
    final = AutoModelForCausalLM.from_pretrained(str(tmp_path / "policy")).eval()
    start.eval()
    diffs = [(final.state_dict()[k] - v).abs().max().item() for k, v in start.state_dict().items()]
    assert max(diffs) > 1e-5

    # Key check: the searcher's weights really change after a sync.
    temperature = cfg.model.temperature
    v0 = next(it for it in items if it.version == 0)
    v1 = min((it for it in items if it.version >= 1), key=lambda it: it.version)  # fewest updates
    behaviour0 = torch.tensor(v0.behaviour_token_logps)
    # version 0 was sampled from the starting weights: its behaviour log-probs match them ...
    torch.testing.assert_close(behaviour0, _logps(start, v0, temperature), atol=1e-4, rtol=0)
    # ... and not the trained policy's
    assert (behaviour0 - _logps(final, v0, temperature)).abs().max() > 1e-3
    # a post-sync rollout was NOT sampled from the starting weights
    behaviour1 = torch.tensor(v1.behaviour_token_logps)
    gap = (behaviour1 - _logps(start, v1, temperature)).abs().max().item()
    assert gap > 1e-3, f"version-{v1.version} rollout matches the starting weights ({gap:.2e})"
    # the reference log-probs, in contrast, always come from the frozen starting checkpoint
    for it in (v0, v1):
        torch.testing.assert_close(torch.tensor(it.ref_token_logps), _logps(start, it, temperature),
                                   atol=1e-4, rtol=0)


def test_sync_run_is_on_policy(tmp_path):
    from tba_lab.trainer import train

    torch.set_num_threads(1)
    steps = 3
    cfg = _config(tmp_path, training={"max_steps": steps},
                  async_={"mode": "sync", "searcher_threads": 1})
    summary = train(cfg, progress=False)
    _assert_no_children()
    assert summary["trainer_steps"] == steps
    assert summary["staleness_max"] == 0 and summary["staleness_mean"] == 0
    assert summary["mode"] == "sync"
    rows = _read_jsonl(tmp_path / "metrics.jsonl")
    assert len(rows) == steps and all(r["staleness_max"] == 0 for r in rows)
    # strict alternation: one generation batch per published version 0 .. steps-1
    buffer = ReplayBuffer.load(tmp_path / "buffer.pt")
    versions = {it.version for pid in list(buffer._items) for it in buffer.items(pid)}
    assert versions == set(range(steps))
    assert summary["samples_generated"] == steps * 4 * 4


def test_deferred_interim_evaluations_score_the_weights_of_their_tick(tmp_path):
    """``task.defer_interim_eval``: a tick only copies the weights; after the budget each copy is
    evaluated and logged with its tick's step and seconds, in order, before the "after" row. The
    copy taken after the last update scores exactly what the final evaluation scores (same
    weights, same problems, greedy)."""
    from tba_lab.trainer import train

    torch.set_num_threads(1)
    cfg = _config(tmp_path, training={"max_steps": 3}, async_={"mode": "sync", "searcher_threads": 1},
                  task={"eval_size": 10, "interim_eval_size": 10, "eval_every_seconds": 1e-3,
                        "defer_interim_eval": True})
    summary = train(cfg, progress=False)
    _assert_no_children()
    rows = _read_jsonl(tmp_path / "eval.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 3]  # before, a copy after each update, after
    walls = [r["wall_seconds"] for r in rows[1:4]]
    assert walls == sorted(walls) and 0 < walls[0] and walls[-1] <= summary["wall_seconds"]
    assert rows[3]["accuracy"] == rows[4]["accuracy"] == summary["accuracy_after"]


def test_evaluating_weight_copies_puts_the_final_weights_back_even_on_error():
    from tba_lab.trainer import evaluate_weight_copies

    layer = torch.nn.Linear(2, 1, bias=False)
    final = layer.weight.detach().clone()
    copies = [(1, 0.5, {"weight": torch.zeros(1, 2)}), (2, 1.0, {"weight": torch.ones(1, 2)})]
    seen = []
    evaluate_weight_copies(layer, copies, lambda step, wall: seen.append((step, wall, layer.weight.sum().item())))
    assert seen == [(1, 0.5, 0.0), (2, 1.0, 2.0)]
    assert torch.equal(layer.weight, final)

    def fail(step, wall):
        raise RuntimeError("evaluation failed")
    with pytest.raises(RuntimeError, match="evaluation failed"):
        evaluate_weight_copies(layer, copies, fail)
    assert torch.equal(layer.weight, final)


def test_sync_grpo_ratio_is_one_on_policy(tmp_path):
    """On-policy GRPO: the behaviour log-probs the sampler recorded equal the trainer's, so the
    importance ratio of every fresh batch is 1 (temperature scaling matches the sampler)."""
    from tba_lab.trainer import train

    torch.set_num_threads(1)
    cfg = _config(tmp_path, algo="grpo", training={"max_steps": 3},
                  model={"temperature": 0.6, "max_new_tokens": 40},
                  async_={"mode": "sync", "searcher_threads": 1})
    summary = train(cfg, progress=False)
    _assert_no_children()
    assert summary["algo"] == "grpo" and summary["trainer_steps"] == 3
    rows = _read_jsonl(tmp_path / "metrics.jsonl")
    for r in rows:
        assert abs(r["ratio_mean"] - 1.0) < 1e-3, r
        assert r["clip_fraction"] == 0.0
    # GRPO at beta 0 reads no reference: the searcher skipped that forward pass (as TRL does),
    # the buffer saves and loads such rollouts, and a loss that needs a reference refuses them
    buffer = ReplayBuffer.load(tmp_path / "buffer.pt")
    items = [it for pid in list(buffer._items) for it in buffer.items(pid)]
    assert items and all(it.ref_token_logps is None for it in items)
    from tba_lab.algorithms import compute_loss, make_algorithm
    tb = _config(tmp_path, training={"num_generations": 4})
    model, tok = load_policy(DEFAULT_MODEL_DIR)
    with pytest.raises(ValueError, match="reference log-probs"):
        compute_loss(make_algorithm(tb), model, buffer.sample(1, 4), tok.pad_token_id, step=0)


@pytest.mark.parametrize("algo,mode,extra", [
    ("dr_grpo", "sync", {}), ("rloo", "async", {}), ("online_dpo", "sync", {}),
    ("tb", "async", {"tb": {"log_z": "learned"}}),
])
def test_every_baseline_trains_end_to_end(tmp_path, algo, mode, extra):
    """Each ``--algo`` runs through the real launcher in one of the two modes (the loss math is
    checked in test_baselines.py); the learned log Z moves and is reported."""
    from tba_lab.trainer import train

    torch.set_num_threads(1)
    cfg = _config(tmp_path, algo=algo, training={"max_steps": 3},
                  async_={"mode": mode, "searcher_threads": 1}, **extra)
    summary = train(cfg, progress=False)
    _assert_no_children()
    assert summary["algo"] == algo and summary["mode"] == mode and summary["trainer_steps"] == 3
    rows = _read_jsonl(tmp_path / "metrics.jsonl")
    assert len(rows) == 3 and all(math.isfinite(r["loss"]) for r in rows)
    if extra:
        assert summary["learned_log_z"] != 0.0  # one AdamW step at lr 0.1 moves it by ~0.1
        assert rows[0]["log_z"] == 0.0 and rows[-1]["log_z"] != 0.0


def test_stop_event_ends_a_threaded_run_early_and_saves(tmp_path):
    """A run in a background thread (the notebook explorer) stops on its ``stop_event``."""
    import threading

    from tba_lab.trainer import train

    torch.set_num_threads(1)
    cfg = _config(tmp_path, training={"max_steps": 10_000}, async_={"searcher_threads": 1})
    stop, result = threading.Event(), {}
    worker = threading.Thread(target=lambda: result.update(train(cfg, progress=False, stop_event=stop)))
    worker.start()
    deadline = time.time() + 120
    while time.time() < deadline and len(_read_jsonl(tmp_path / "metrics.jsonl") if
                                         (tmp_path / "metrics.jsonl").exists() else []) < 2:
        time.sleep(0.2)
    stop.set()
    worker.join(timeout=60)
    assert not worker.is_alive()
    _assert_no_children()
    assert 2 <= result["trainer_steps"] < 10_000 and result["interrupted"] is False
    assert json.loads((tmp_path / "summary.json").read_text())["trainer_steps"] == result["trainer_steps"]
    assert (tmp_path / "policy").is_dir() and (tmp_path / "buffer.pt").is_file()


def test_a_searcher_waits_for_room_before_it_generates():
    """``wait_for_room`` (called before every batch, then the weights are pulled) returns only
    once the trainer took the batch that filled the queue, and gives up when stop is set; a
    batch is then never generated to wait behind a full queue (docs/log.md, fifth round)."""
    import threading

    from tba_lab.actors.searcher import wait_for_room

    ctx = multiprocessing.get_context("spawn")
    q, stop = ctx.Queue(maxsize=1), ctx.Event()
    q.put("batch 0")
    while not q.full():  # the put is counted at once; wait for it anyway on a slow machine
        time.sleep(0.001)
    result, returned_at = [], []
    waiter = threading.Thread(target=lambda: (result.append(wait_for_room(q, stop)),
                                              returned_at.append(time.time())))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive() and not result, "it did not wait while the queue was full"
    taken_at = time.time()
    assert q.get(timeout=5) == "batch 0"
    waiter.join(timeout=5)
    assert result == [True] and returned_at[0] - taken_at < 0.1  # sleeps of at most 10 ms
    q.put("batch 1")
    while not q.full():
        time.sleep(0.001)
    stopper = threading.Timer(0.2, stop.set)
    stopper.start()
    assert wait_for_room(q, stop) is False
    q.get(timeout=5)
    q.close()


def test_the_searcher_loop_pulls_and_generates_only_when_its_queue_has_room(tmp_path):
    """The real loop, in a thread, with a queue of one batch that nobody drains: it pulls and
    generates exactly one batch, then waits; once the batch is taken it pulls again (so the
    next batch starts from the newest weights) and fills the queue once more."""
    import threading

    from tba_lab.actors.searcher import SearcherSpec, _loop

    cfg = _config(tmp_path, **{"async": {"queue_size": 1}})
    pulls = []

    class Weights:  # the weight channel: never new weights, every pull recorded
        def pull(self, have_version):
            pulls.append(time.time())
            return 0, None

    ctx = multiprocessing.get_context("spawn")
    q, stop = ctx.Queue(maxsize=1), threading.Event()
    threads = torch.get_num_threads()
    loop = threading.Thread(target=_loop, args=(0, SearcherSpec.from_config(cfg, False),
                                                Weights(), q, stop, 0))
    loop.start()
    try:
        deadline = time.time() + 120
        while not q.full():  # the first batch is in the queue; the trainer does not take it
            assert time.time() < deadline and loop.is_alive(), "no first batch"
            time.sleep(0.01)
        time.sleep(1.5)  # several generation times of this tiny batch
        assert len(pulls) == 1, f"{len(pulls)} pulls (batches begun) while the queue was full"
        assert q.get(timeout=5).version == 0
        second = q.get(timeout=120)  # a new batch once there was room
        assert len(pulls) == 2 and len(second.rollouts) == 4 * 4
    finally:
        stop.set()
        loop.join(timeout=30)
        torch.set_num_threads(threads)
        q.close()
    assert not loop.is_alive()
