"""The timeline simulator (tba_lab.lab.simulate) and the explorer's helpers (tba_lab.lab.widgets):
closed forms, steady-state rates of the event simulation, queue blocking, staleness, knobs."""
import math

import numpy as np
import pytest

from tba_lab.lab.simulate import (async_throughput, format_table, plan_placement, simulate,
                              sync_updates_per_minute)
from tba_lab.lab.widgets import knob_overrides, make_config, merge_overrides, moving_average


def test_closed_forms():
    assert sync_updates_per_minute(0.2, 0.1, 0.3) == pytest.approx(100.0)
    assert async_throughput(0.2, 0.1, 0.3, 1, 2) == pytest.approx((200.0, 200.0))
    up, bp = async_throughput(0.2, 0.1, 0.3, 2, 2)  # 3 busy on 2 cores: 1.5x slower
    assert (up, bp) == pytest.approx((200.0 / 1.5, 400.0 / 1.5))
    assert async_throughput(0.2, 0.1, 0.3, 5, None) == pytest.approx((200.0, 1000.0))


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


def test_placement_and_table(capsys):
    assert set(plan_placement(2, num_gpus=0, verbose=False).values()) == {"cpu"}
    plan = plan_placement(3, num_gpus=4, verbose=False)
    assert plan["trainer"] == "cuda:0" and "cuda:0" not in [plan[f"searcher {i}"] for i in range(3)]
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


def test_overhead_is_the_median_wait_or_with_a_replay_bound_the_smallest():
    """A replay-bound run's waits include waiting for data (which the simulator models), so
    only the smallest wait counts as per-update overhead; sync runs have none."""
    from tba_lab.lab.simulate import _overhead

    rows = [{"wait_seconds": w} for w in (9.0, 0.05, 0.06, 0.002, 0.07)]  # first: initial fill
    assert _overhead(rows, "async", 1.0) == 0.002
    assert _overhead(rows, "async", 0.0) == pytest.approx(0.055)
    assert _overhead(rows, "sync", 1.0) == 0.0 and _overhead(rows[:1], "async", 1.0) == 0.0
