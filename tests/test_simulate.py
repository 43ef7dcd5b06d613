"""The timeline simulator (tba_lab.lab.simulate), the scaling prediction built on it
(tba_lab.lab.predict) and the explorer's helpers (tba_lab.lab.widgets): closed forms,
steady-state rates of the event simulation, queue blocking, staleness, knobs."""
import math

import numpy as np
import pytest

from tba_lab.lab.simulate import async_throughput, format_table, pipeline, share_cores, simulate
from tba_lab.lab.widgets import knob_overrides, make_config, merge_overrides, moving_average


def test_closed_form():
    assert async_throughput(0.2, 0.1, 0.3, 1, 2) == pytest.approx((200.0, 200.0))
    up, bp = async_throughput(0.2, 0.1, 0.3, 2, 2)  # 3 busy on 2 cores: 1.5x slower
    assert (up, bp) == pytest.approx((200.0 / 1.5, 400.0 / 1.5))
    assert async_throughput(0.2, 0.1, 0.3, 5, None) == pytest.approx((200.0, 1000.0))
    # the replay bound: one update per batch delivered at most (rho = 1)
    assert async_throughput(0.5, 0.1, 0.3, 1, 2, 1.0) == pytest.approx((100.0, 100.0))
    assert async_throughput(0.5, 0.1, 0.3, 2, 2, 1.0)[0] == pytest.approx(200.0 / 1.5)


def test_share_cores_runs_each_process_at_most_one_core():
    assert share_cores([], 2, 5.0) == (5.0, [])
    dt, left = share_cores([0.3, 0.6, 0.9], 2, 10.0)  # 3 on 2 cores: speed 2/3
    assert dt == pytest.approx(0.45) and left == pytest.approx([0.0, 0.3, 0.6])
    dt, left = share_cores([0.3, 0.6], 4, 10.0)       # fewer processes than cores: speed 1
    assert dt == pytest.approx(0.3) and left == pytest.approx([0.0, 0.3])
    dt, left = share_cores([0.3], None, 0.1)          # the run ends first
    assert dt == pytest.approx(0.1) and left == pytest.approx([0.2])


def test_pipeline_matches_its_closed_forms_where_they_hold():
    """Sync: one update per generate + update cycle, on-policy. Async with searchers slower
    than the trainer (no queue ever full): the closed form with the replay bound, on cores
    shared or not. A trainer slower than two searchers makes them wait on full queues, which
    frees cores: then the loop beats the closed form's all-busy rate."""
    sync = pipeline(0.35, 0.25, mode="sync", duration=60)
    assert sync.steady_updates_per_minute == pytest.approx(100.0, rel=1e-6)
    assert (sync.staleness == 0).all()
    for n, cores in ((1, 2), (2, 2), (3, 2), (2, None)):
        got = pipeline(0.6, 0.3, n, cores, duration=120).steady_updates_per_minute
        assert got == pytest.approx(async_throughput(0.6, 0.0, 0.3, n, cores, 1.0)[0], rel=0.02), (n, cores)
    replay = pipeline(0.6, 0.3, 1, None, duration=60, max_replay_ratio=0.0)
    assert replay.steady_updates_per_minute == pytest.approx(200.0, rel=1e-6)
    blocked = pipeline(0.3, 0.4, 2, 2, duration=120).steady_updates_per_minute
    assert blocked > 1.02 * async_throughput(0.3, 0.0, 0.4, 2, 2, 1.0)[0]
    fill = pipeline(0.3, 0.1, 1, None, initial_fill=3, duration=10)
    assert fill.intervals["trainer"][0][0] == pytest.approx(0.9)


def test_sync_simulation_matches_closed_form_and_is_on_policy():
    r = simulate(0.2, 0.1, 0.3, mode="sync", duration=60, initial_fill=0)
    assert r.steady_updates_per_minute == pytest.approx(100.0, rel=1e-6)
    assert r.staleness.size and (r.staleness == 0).all()
    assert r.batches == r.updates or r.batches == r.updates + 1


def test_async_rates_with_and_without_contention():
    # searchers slower than the trainer per batch, so the queue never fills
    alone = simulate(0.5, 0.1, 0.3, num_searchers=1, cores=2, duration=120)
    assert alone.steady_updates_per_minute == pytest.approx(200.0, rel=1e-6)
    two = simulate(0.5, 0.1, 0.3, num_searchers=2, cores=2, duration=120)
    assert two.steady_updates_per_minute == pytest.approx(200.0 / 1.5, rel=1e-6)
    free = simulate(0.5, 0.1, 0.3, num_searchers=2, cores=None, duration=120)
    assert free.steady_updates_per_minute == pytest.approx(200.0, rel=1e-6)
    assert all(b == 0 for b in two.blocked_fraction)


def test_full_queue_blocks_searchers():
    r = simulate(0.05, 0.0, 0.5, num_searchers=4, cores=None, queue_size=2, duration=60)
    assert min(r.blocked_fraction) > 0.5
    # each searcher waits for room before it generates: at most queue_size batches of each
    # searcher reach the trainer per drain (one drain per update)
    assert r.batches <= (r.updates + 1) * 2 * 4


def test_waiting_for_room_keeps_fresh_data_one_version_old_when_the_two_sides_keep_pace():
    """Trainer and searcher equally fast, the replay bound on, every batch from the freshest
    rollouts (m = 1): a searcher that may leave one batch untaken generates each batch from the
    weights published just before the trainer takes the previous one (staleness 1, the
    searcher never blocked); with room for two, the backlog the initial fill of two batches
    starts never drains: each batch waits a whole update and is trained on two versions later,
    at the same rate (the README's fifth round, measured)."""
    kw = dict(cores=None, duration=60, recency_prob=1.0, max_replay_ratio=1.0, initial_fill=256)
    one = simulate(0.4, 0.0, 0.4, queue_size=1, **kw)
    two = simulate(0.4, 0.0, 0.4, queue_size=2, **kw)
    assert one.staleness_mean == pytest.approx(1.0, abs=0.05)
    assert two.staleness_mean == pytest.approx(2.0, abs=0.05)
    assert one.steady_updates_per_minute == pytest.approx(two.steady_updates_per_minute, rel=0.02)
    assert one.blocked_fraction[0] < 0.05


def test_replay_bound_makes_the_simulated_trainer_wait_for_data():
    """rho = 1: the trainer trains on no more rows than were generated, so a trainer twice as
    fast as its searcher makes one update per batch; with no bound (rho = 0) it replays."""
    free = simulate(0.6, 0.0, 0.3, cores=None, duration=60, max_replay_ratio=0.0)
    bound = simulate(0.6, 0.0, 0.3, cores=None, duration=60, max_replay_ratio=1.0)
    assert free.steady_updates_per_minute == pytest.approx(200.0, rel=1e-6)
    assert bound.steady_updates_per_minute == pytest.approx(100.0, rel=0.02)
    assert bound.updates <= bound.batches


def test_staleness_grows_with_sync_period_and_publish_cost_favours_large_k():
    k1 = simulate(0.3, 0.05, 0.3, sync_period=1, duration=120)
    k8 = simulate(0.3, 0.05, 0.3, sync_period=8, duration=120)
    assert k8.staleness_mean > k1.staleness_mean
    assert k1.staleness.min() >= 0
    costly1 = simulate(0.3, 0.05, 0.3, sync_period=1, publish_seconds=0.3, duration=120)
    costly8 = simulate(0.3, 0.05, 0.3, sync_period=8, publish_seconds=0.3, duration=120)
    assert costly8.steady_updates_per_minute > 1.5 * costly1.steady_updates_per_minute


def test_start_up_fill_and_max_steps():
    r = simulate(0.2, 0.1, 0.3, searcher_start_seconds=5.0, initial_fill=256, duration=30)
    first = r.intervals["trainer"][0][0]
    assert first >= 5.0 + 2 * 0.3 - 1e-9  # two batches of 128 before the first update
    assert simulate(0.2, 0.1, 0.3, max_steps=7, duration=600).updates == 7
    with pytest.raises(ValueError):
        simulate(float("nan"), 0.1, 0.3)
    with pytest.raises(ValueError):
        simulate(0.2, 0.1, 0.3, mode="bogus")


def test_table():
    text = format_table([{"a": 1.23456, "b": None, "c": math.nan}], ["a", "b", "c"])
    assert "1.23" in text and text.count("-") >= 3


def test_moving_average_and_knobs(tmp_path):
    np.testing.assert_allclose(moving_average([1, 2, 3, 4], 2), [1, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(moving_average([1, 2, 3], 10), [1, 1.5, 2])
    assert moving_average([], 3).size == 0
    o = knob_overrides(algo="grpo", beta=0.04, beta_final=0.01, beta_anneal_steps=5)
    assert o["grpo"] == {"beta": 0.04} and "tb" not in o  # annealing is TB-only
    o = knob_overrides(algo="tb", beta=0.1, beta_final=0.02, beta_anneal_steps=50, sync_period=4)
    cfg = make_config(merge_overrides(o, {"training": {"max_steps": 3}}), 30, tmp_path / "run")
    assert cfg.tb.beta_final == 0.02 and cfg.async_.sync_period == 4
    assert cfg.training.max_steps == 3 and cfg.training.learning_rate == 5e-5
    assert cfg.max_minutes == pytest.approx(0.5)
    with pytest.raises(ValueError):
        knob_overrides(algo="ppo")


def test_timeline_counts_the_trainers_reference_pass_as_busy(tmp_path):
    """``reference_seconds`` (async.reference_pass: trainer) is drawn as trainer work just before
    the update, apart from waiting, and is part of the measured update time the simulator is fed."""
    import json

    from tba_lab.lab.timeline import busy_fraction, load_timeline, run_measurements

    (tmp_path / "config.yaml").write_text("async: {mode: async, sync_period: 1}\n")
    rows = [{"step": 1, "wall_seconds": 1.0, "update_seconds": 0.2, "reference_seconds": 0.1,
             "wait_seconds": 0.7},
            {"step": 2, "wall_seconds": 2.0, "update_seconds": 0.2, "reference_seconds": 0.3,
             "wait_seconds": 0.5}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "searchers.jsonl").write_text(json.dumps(
        {"searcher_id": 0, "t_start": 0.0, "t_end": 0.9, "gen_seconds": 0.8, "score_seconds": 0.1,
         "version": 0}) + "\n")
    (tmp_path / "summary.json").write_text(json.dumps({"wall_seconds": 2.0, "trainer_steps": 2}))
    tl = load_timeline(tmp_path)
    flat = lambda spans: [t for span in spans for t in span]
    assert flat(tl["trainer"]["update"]) == pytest.approx([0.7, 1.0, 1.5, 2.0])
    assert flat(tl["trainer"]["wait"]) == pytest.approx([0.0, 0.7, 1.0, 1.5])
    assert busy_fraction(tl["trainer"]["update"], (0.0, 2.0)) == pytest.approx(0.4)
    assert run_measurements(tmp_path)["update_seconds"] == pytest.approx(0.4)  # median of 0.3, 0.5


def test_simulate_run_takes_the_runs_buffer_settings_else_the_kits_defaults(monkeypatch):
    """The run's recency m (and the other buffer settings) reach the simulator; a row without
    them gets the kit's defaults (recency m 1.0 since f65d18f), not the simulator's own 0.8."""
    import tba_lab.lab.simulate as sim
    from tba_lab.config import AsyncConfig, BufferConfig

    seen = {}
    monkeypatch.setattr(sim, "simulate", lambda *a, **kw: seen.update(kw))
    row = {"gen_seconds": 1.0, "score_seconds": 0.0, "update_seconds": 0.2}
    sim.simulate_run(row)
    buf = BufferConfig()
    assert (seen["recency_prob"], seen["inv_temp"], seen["max_prompts"], seen["capacity_per_prompt"],
            seen["max_replay_ratio"], seen["queue_size"]) == (
        buf.recency_prob, buf.inv_temp, buf.max_prompts, buf.capacity_per_prompt,
        buf.max_replay_ratio, AsyncConfig().queue_size)
    sim.simulate_run({**row, "recency_prob": 0.5, "capacity_per_prompt": 16})
    assert seen["recency_prob"] == 0.5 and seen["capacity_per_prompt"] == 16


def _fake_run(run_dir, dedup=None):
    """A finished run folder that run_timings reads: 2 updates, 2 batches, and a buffer.pt whose
    groups of K = 8 hold 4 distinct responses each (unique_fraction 0.5)."""
    import json

    import torch

    buffer = {"initial_fill": 16, "max_replay_ratio": 0.0}
    if dedup is not None:
        buffer["dedup"] = dedup
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(json.dumps({  # JSON is YAML
        "max_minutes": 0.5, "async": {"mode": "async", "sync_period": 1, "num_searchers": 1,
                                      "queue_size": 1},
        "training": {"num_generations": 8, "num_prompts_per_step": 2}, "buffer": buffer}))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(
        {"step": i + 1, "wall_seconds": 1.0 + i, "update_seconds": 0.2, "wait_seconds": 0.1}) + "\n"
        for i in range(2)))
    (run_dir / "searchers.jsonl").write_text("".join(json.dumps(
        {"searcher_id": 0, "t_start": 0.5 * i, "t_end": 0.5 * i + 0.4, "gen_seconds": 0.4,
         "score_seconds": 0.0, "version": 0}) + "\n" for i in range(2)))
    (run_dir / "summary.json").write_text(json.dumps(
        {"wall_seconds": 3.0, "trainer_steps": 2, "staleness_mean": 0.5, "staleness_max": 1,
         "samples_generated": 32}))
    rows = [{"prompt_id": pid, "version": 0, "response_ids": [j % 4]}
            for pid in range(2) for j in range(8)]
    torch.save({"items": [(pid, [r for r in rows if r["prompt_id"] == pid]) for pid in range(2)]},
               run_dir / "buffer.pt")
    return run_dir


def test_simulate_run_dedups_only_when_the_run_did(tmp_path, monkeypatch):
    """A run's measured unique_fraction (repeated responses in its buffer) reaches the
    simulator, which then de-duplicates, only when that run had buffer.dedup on; the kit's
    default (off) keeps repeats as samples, so the simulated buffer must too."""
    import tba_lab.lab.simulate as sim

    off = sim.run_timings(_fake_run(tmp_path / "default"))
    on = sim.run_timings(_fake_run(tmp_path / "dedup", dedup=True))
    assert off["unique_fraction"] == on["unique_fraction"] == pytest.approx(0.5)
    assert (off["dedup"], on["dedup"]) == (False, True)
    assert sim.run_timings(_fake_run(tmp_path / "off", dedup=False))["dedup"] is False
    seen = {}
    monkeypatch.setattr(sim, "simulate", lambda *a, **kw: seen.update(kw))
    sim.simulate_run(off)
    assert seen["unique_fraction"] == 1.0
    sim.simulate_run(on)
    assert seen["unique_fraction"] == pytest.approx(0.5)
    # a measured.json row without the run's config: the kit's default, no dedup
    sim.simulate_run({"gen_seconds": 1.0, "score_seconds": 0.0, "update_seconds": 0.2,
                      "unique_fraction": 0.25})
    assert seen["unique_fraction"] == 1.0


def test_overhead_is_the_median_wait_or_with_a_replay_bound_the_smallest():
    """A replay-bound run's waits include waiting for data (which the simulator models), so
    only the smallest wait counts as per-update overhead; sync runs have none."""
    from tba_lab.lab.simulate import _overhead

    rows = [{"wait_seconds": w} for w in (9.0, 0.05, 0.06, 0.002, 0.07)]  # first: initial fill
    assert _overhead(rows, "async", 1.0) == 0.002
    assert _overhead(rows, "async", 0.0) == pytest.approx(0.055)
    assert _overhead(rows, "sync", 1.0) == 0.0 and _overhead(rows[:1], "async", 1.0) == 0.0


# ----------------------------------------------------------------------------------------------
# Reference pass placement, threads, shared devices and the scaling prediction
# ----------------------------------------------------------------------------------------------


def test_amdahl_and_processor_sharing_count_threads():
    from tba_lab.lab.simulate import actor_rates, amdahl_speedup

    assert amdahl_speedup(1, 0.7) == pytest.approx(1.0)
    assert amdahl_speedup(2, 0.5) == pytest.approx(4 / 3)      # 1 / (0.5 + 0.25)
    assert amdahl_speedup(8, 1.0) == pytest.approx(8.0)
    with pytest.raises(ValueError):
        amdahl_speedup(0, 0.5)
    # 8 + 8 threads on 16 cores: no sharing; measured with 1 thread, p = 0.5: S(8) = 1 / 0.5625
    assert actor_rates([("update", 8), ("generate", 8)], cores=16, timing_threads=1,
                       parallel_fraction=0.5) == pytest.approx([1 / 0.5625] * 2)
    # 3 processes x 4 threads on 6 cores: each thread gets half a core; no scaling asked
    assert actor_rates([("update", 4), ("generate", 4), ("generate", 4)], cores=6) == \
        pytest.approx([0.5, 0.5, 0.5])
    # a searcher in its hand-over (waiting, IPC) takes no core from the trainer
    assert actor_rates([("handover", 1), ("update", 1)], cores=1) == pytest.approx([1.0, 1.0])
    # the same in a simulated run: trainer and searcher with 2 threads each on 2 cores, both
    # always busy (slow searcher with room for 2 batches, no replay bound): the trainer runs
    # at half speed
    r = simulate(1.0, 0.0, 0.3, cores=2, trainer_threads=2, searcher_threads=2, queue_size=2,
                 max_replay_ratio=0.0, initial_fill=128, duration=60)
    assert r.steady_updates_per_minute == pytest.approx(100.0, rel=1e-6)  # 60 / (0.3 / 0.5)
    # thread scaling alone: 2 threads, measured with 1, update fully parallel: twice as fast
    r = simulate(1.0, 0.0, 0.3, cores=None, trainer_threads=2, timing_threads=1,
                 parallel_fraction={"update": 1.0}, max_replay_ratio=0.0, initial_fill=128,
                 duration=60)
    assert r.steady_updates_per_minute == pytest.approx(400.0, rel=1e-6)  # 60 / 0.15


def test_one_gpu_time_slices_among_busy_processes():
    from tba_lab.lab.simulate import actor_rates

    assert actor_rates([("update", 1)] * 3, gpu_slowdown=0.25) == pytest.approx([1 / 1.5] * 3)
    assert actor_rates([("update", 13), ("handover", 1)], cores=16, gpu_slowdown=0.25) == \
        pytest.approx([1.0, 1.0])
    # trainer + 2 searchers always busy (searchers slower than the trainer, no replay bound):
    # each runs 1 + 0.25 * 2 = 1.5 times slower
    r = simulate(0.5, 0.1, 0.3, num_searchers=2, cores=None, gpu_slowdown=0.25,
                 max_replay_ratio=0.0, duration=120)
    assert r.steady_updates_per_minute == pytest.approx(200.0 / 1.5, rel=1e-6)
    assert simulate(0.5, 0.1, 0.3, num_searchers=2, cores=None, gpu_slowdown=0.0,
                    max_replay_ratio=0.0, duration=120).steady_updates_per_minute == \
        pytest.approx(200.0, rel=1e-6)


def test_trainer_drained_reference_work_grows_with_searchers_sampled_does_not():
    """Fast searchers (one batch each per trainer cycle), no contention, no replay bound,
    newest rows first (m = 1). Drained: the trainer scores every batch it drains, so a cycle
    is 0.3 + n x 0.1 s; sampled: it scores the 128 rows it trains on, all new, 0.3 + 0.1 s."""
    kw = dict(cores=None, duration=60, max_replay_ratio=0.0, recency_prob=1.0, initial_fill=128,
              ref_seconds=0.1)
    d1 = simulate(0.1, 0.0, 0.3, num_searchers=1, reference_pass="trainer_drained", **kw)
    d4 = simulate(0.1, 0.0, 0.3, num_searchers=4, reference_pass="trainer_drained", **kw)
    s1 = simulate(0.1, 0.0, 0.3, num_searchers=1, reference_pass="trainer_sampled", **kw)
    s4 = simulate(0.1, 0.0, 0.3, num_searchers=4, reference_pass="trainer_sampled", **kw)
    assert d1.steady_updates_per_minute == pytest.approx(150.0, rel=0.01)   # 60 / 0.4
    assert d4.steady_updates_per_minute == pytest.approx(60 / 0.7, rel=0.01)
    assert s1.steady_updates_per_minute == pytest.approx(150.0, rel=0.01)
    assert s4.steady_updates_per_minute == pytest.approx(150.0, rel=0.01)
    for r in (s1, s4):
        assert r.trainer_reference_seconds <= 0.1 * r.updates_begun + 1e-9
    assert d4.trainer_reference_seconds == pytest.approx(0.1 * d4.batches, rel=0.02)


def test_sampled_reference_scores_each_row_once_and_searcher_pass_costs_the_searcher():
    # a slow searcher and a fast trainer replaying (no bound): only the first update on each
    # new batch scores it; the replays of scored rows cost nothing
    r = simulate(1.0, 0.0, 0.1, cores=None, duration=30, max_replay_ratio=0.0, recency_prob=1.0,
                 initial_fill=128, ref_seconds=0.1, reference_pass="trainer_sampled")
    assert r.updates > 3 * r.batches
    assert r.trainer_reference_seconds == pytest.approx(0.1 * r.batches, abs=0.1 + 1e-9)
    # with recency 0.5 some sampled groups were scored before: a pass whose cost follows the
    # rows (fixed fraction 0) costs less than a full one per update; a launch-bound pass
    # (fixed fraction 1) costs a full one whenever any row is new, here every update
    kw = dict(num_searchers=4, cores=None, duration=30, max_replay_ratio=0.0, recency_prob=0.5,
              initial_fill=512, ref_seconds=0.1, reference_pass="trainer_sampled")
    rows = simulate(0.1, 0.0, 0.3, ref_fixed_fraction=0.0, **kw)
    calls = simulate(0.1, 0.0, 0.3, ref_fixed_fraction=1.0, **kw)
    assert rows.trainer_reference_seconds / rows.updates_begun < 0.098
    assert calls.trainer_reference_seconds / calls.updates_begun == pytest.approx(0.1, rel=0.02)
    # in the searchers: the job grows by the pass, the trainer does none; rho = 1 binds the
    # trainer to one update per batch of 0.2 + 0.1 s
    s = simulate(0.2, 0.0, 0.1, cores=None, duration=60, max_replay_ratio=1.0, ref_seconds=0.1,
                 reference_pass="searcher", initial_fill=128)
    assert s.steady_updates_per_minute == pytest.approx(200.0, rel=0.02)
    assert s.trainer_reference_seconds == 0.0
    with pytest.raises(ValueError):
        simulate(0.2, 0.0, 0.1, reference_pass="elsewhere")


def test_handover_lengthens_the_sync_cycle():
    r = simulate(0.2, 0.1, 0.3, mode="sync", duration=60, initial_fill=0, handover_seconds=0.05)
    assert r.steady_updates_per_minute == pytest.approx(60 / 0.65, rel=1e-6)
    assert r.updates_begun in (r.updates, r.updates + 1)


def test_split_timings_from_logs():
    from tba_lab.lab.simulate import _split_timings

    metrics = [{"update_seconds": u, "reference_seconds": 0.1, "wait_seconds": w,
                "gen_seconds": 0.5, "score_seconds": 0.0} for u, w in
               ((0.3, 9.0), (0.2, 0.52), (0.2, 0.51), (0.2, 0.53))]
    batches = [{"searcher_id": 0, "t_start": s, "t_end": s + 0.5, "received": s + 0.6,
                "gen_seconds": g} for s, g in ((0.0, 0.9), (0.605, 0.5), (1.21, 0.5), (1.815, 0.5))]
    sync = _split_timings(metrics, batches, "sync", wall=10.3, budget=10.0)
    assert sync["handover_seconds"] == pytest.approx(0.02)      # median of 0.02, 0.01, 0.03
    assert sync["ref_seconds"] == pytest.approx(0.1)            # 0.4 s over 4 batches
    assert sync["update_only_seconds"] == pytest.approx(0.2)
    assert sync["searcher_warmup_seconds"] == pytest.approx(0.4)
    assert sync["stop_seconds"] == pytest.approx(0.3)
    asy = _split_timings(metrics, batches, "async", wall=10.0, budget=10.0)
    assert asy["handover_seconds"] == pytest.approx(0.005 + 0.1)  # drain -> start + fastest trip


def test_new_default_placement_agrees_with_placement_plan_on_a_grid():
    """new_default_placement asks tba_lab.actors.placement.plan (the one home of the rules) and
    translates: device "gpu" = everything on cuda:0, the plan's "trainer" = the simulator's
    "trainer_sampled", no reference read = "none"."""
    from tba_lab.actors import placement
    from tba_lab.config import from_dict
    from tba_lab.lab.predict import new_default_placement

    p = new_default_placement
    # the values placement's docstring gives for 16 and 2 cores
    assert p("cpu", "async", 1) == {"reference_pass": "trainer_sampled", "trainer_threads": 8,
                                    "searcher_threads": 8}
    assert p("cpu", "async", 4) == {"reference_pass": "searcher", "trainer_threads": 8,
                                    "searcher_threads": 2}
    assert p("cpu", "async", 8)["searcher_threads"] == 1
    assert p("cpu", "async", 1, cores=2) == {"reference_pass": "trainer_sampled",
                                             "trainer_threads": 1, "searcher_threads": 1}
    assert p("cpu", "async", 2, cores=2)["reference_pass"] == "trainer_sampled"  # 2 < n + 1
    assert p("gpu", "async", 3) == {"reference_pass": "searcher", "trainer_threads": 13,
                                    "searcher_threads": 1}
    assert p("gpu", "sync", 1, needs_reference=False) == {
        "reference_pass": "none", "trainer_threads": 16, "searcher_threads": 16}
    for device, mode, n, cores in [(d, "async", n, c) for d in ("cpu", "gpu") for n in (1, 2, 3, 8)
                                   for c in (2, 4, 16)] + [("cpu", "sync", 1, 16),
                                                           ("gpu", "sync", 1, 2)]:
        a = {"mode": mode, "num_searchers": n}
        if device == "gpu":
            a.update(trainer_device="cuda:0", searcher_devices=["cuda:0"])
        kit = placement.plan(from_dict({"async": a}), cores=cores)
        mine = p(device, mode, n, cores)
        assert (mine["trainer_threads"], mine["searcher_threads"]) == \
            (kit.trainer_threads, kit.searcher_threads), (device, mode, n, cores)
        assert mine["reference_pass"] == {"trainer": "trainer_sampled"}.get(
            kit.reference_pass, kit.reference_pass), (device, mode, n, cores)
        assert p(device, mode, n, cores, needs_reference=False)["reference_pass"] == "none"


# The 2026-12-04 measurements (one NVIDIA H200 + 16 CPU cores; runs of 25 s on CPU, 30 s on
# the GPU): the 1-searcher runs' timings (run_timings of cpu_async_tb_n1 and gpu_sync_tb) and,
# as targets only, the summary rates of the runs with more searchers.
CPU_N1 = {"run": "cpu_async_tb_n1", "gen_seconds": 0.3808, "score_seconds": 0.0020,
          "update_only_seconds": 0.2919, "ref_seconds": 0.0964, "overhead_seconds": 0.001,
          "handover_seconds": 0.0068, "jitter": 0.124, "searcher_start_seconds": 12.0482,
          "searcher_warmup_seconds": 0.0, "budget_seconds": 25.0, "stop_seconds": 0.4}
GPU_SYNC = {"run": "gpu_sync_tb", "gen_seconds": 0.1357, "score_seconds": 0.0014,
            "update_only_seconds": 0.0453, "ref_seconds": 0.0189, "overhead_seconds": 0.0,
            "handover_seconds": 0.0072, "jitter": 0.1721, "searcher_start_seconds": 12.5771,
            "searcher_warmup_seconds": 0.4668, "budget_seconds": 30.0, "stop_seconds": 0.2,
            "async_overhead_seconds": 0.001}  # a sync run has no async loop: the CPU run's
MEASURED = {  # (updates/min, samples/min), summary.json: per minute of wall_seconds
    ("cpu", 4): (44.19, 21135), ("cpu", 8): (35.71, 28952), ("gpu", 6): (243.56, 94543)}


@pytest.mark.parametrize("device, n", sorted(MEASURED))
def test_calibrated_on_one_searcher_predicts_more_searchers_within_25_percent(device, n):
    """Old defaults (the trainer scores every drained batch, 1 torch thread per process)."""
    from tba_lab.lab.predict import CALIBRATION_2026_12_04, MODEL_PARAMETERS, simulate_leg

    assert CALIBRATION_2026_12_04 == {"cpu": CPU_N1, "gpu": GPU_SYNC}  # the embedded constants
    calib = CPU_N1 if device == "cpu" else GPU_SYNC
    upm, spm = MEASURED[device, n]
    sim = simulate_leg(calib, MODEL_PARAMETERS, device, "async", n, calib["budget_seconds"],
                       "trainer_drained", seeds=3)
    assert sim["updates_per_minute"] == pytest.approx(upm, rel=0.25), sim
    assert sim["samples_per_minute"] == pytest.approx(spm, rel=0.25), sim


def test_prediction_report_and_script_help():
    import subprocess
    import sys
    from pathlib import Path

    from tba_lab.lab.predict import MODEL_PARAMETERS, predict_scaling, prediction_report

    result = predict_scaling(params={**MODEL_PARAMETERS, "seeds": 1}, validation_only=True)
    errors = {r["leg"]: r["updates_per_minute_err"] for r in result["validation"]}
    assert set(errors) >= {"cpu_async_tb_n4", "cpu_async_tb_n8", "gpu_async_tba_n6"}
    text = prediction_report(result, command="cmd")
    assert "| gpu_async_tba_n6 |" in text and "`cmd`" in text and "leaves out" in text
    script = Path(__file__).resolve().parents[1] / "bench" / "predict_scaling.py"
    out = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "--measurements" in out.stdout and "--measure" in out.stdout
