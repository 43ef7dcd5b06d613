"""The timeline simulator and the scaling prediction built on it (tba_lab.lab.simulate), and the
explorer's helpers (tba_lab.lab.widgets): closed forms, steady-state rates of the event loop,
queue waiting, staleness, the validation against the recorded H200 runs, knobs."""
import math

import numpy as np
import pytest

from tba_lab.config import short_run
from tba_lab.lab import recorded
from tba_lab.lab.simulate import (async_throughput, predict, predict_leg, prediction_report,
                                  run_timings, share_cores, share_gpu, simulate, simulate_run)
from tba_lab.lab.timeline import busy_fraction, format_table
from tba_lab.lab.widgets import knob_overrides, merge_overrides
from tba_lab.runlog import moving_average


def busy(result, actor):
    """Fraction of the simulated run the actor worked."""
    return busy_fraction([(s, e) for s, e, _ in result.intervals[actor]], (0.0, result.duration))


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


def test_loop_matches_its_closed_forms_where_they_hold():
    """Sync: one update per generate + update cycle, on-policy. Async with searchers slower
    than the trainer (no queue ever full): the closed form with the replay bound, on cores
    shared or not. A trainer slower than two searchers makes them wait on full queues, which
    frees cores: then the loop beats the closed form's all-busy rate."""
    sync = simulate(0.35, 0.25, mode="sync", duration=60)
    assert sync.steady_updates_per_minute == pytest.approx(100.0, rel=1e-6)
    assert sync.staleness.size and (sync.staleness == 0).all()
    assert sync.batches in (sync.updates, sync.updates + 1)
    for n, cores in ((1, 2), (2, 2), (3, 2), (2, None)):
        got = simulate(0.6, 0.3, n, cores, duration=120).steady_updates_per_minute
        assert got == pytest.approx(async_throughput(0.6, 0.0, 0.3, n, cores, 1.0)[0], rel=0.02), (n, cores)
    replay = simulate(0.6, 0.3, 1, None, duration=60, max_replay_ratio=0.0)
    assert replay.steady_updates_per_minute == pytest.approx(200.0, rel=1e-6)
    blocked = simulate(0.3, 0.4, 2, 2, duration=120).steady_updates_per_minute
    assert blocked > 1.02 * async_throughput(0.3, 0.0, 0.4, 2, 2, 1.0)[0]
    fill = simulate(0.3, 0.1, 1, None, initial_fill=3, duration=10)
    assert fill.intervals["trainer"][0][0] == pytest.approx(0.9)


def test_async_rates_with_and_without_contention():
    # searchers slower than the trainer per batch (no replay bound): the queue never fills,
    # and the searchers never stop working
    alone = simulate(0.6, 0.3, 1, 2, duration=120, max_replay_ratio=0.0)
    assert alone.steady_updates_per_minute == pytest.approx(200.0, rel=1e-6)
    two = simulate(0.6, 0.3, 2, 2, duration=120, max_replay_ratio=0.0)
    assert two.steady_updates_per_minute == pytest.approx(200.0 / 1.5, rel=1e-6)
    free = simulate(0.6, 0.3, 2, None, duration=120, max_replay_ratio=0.0)
    assert free.steady_updates_per_minute == pytest.approx(200.0, rel=1e-6)
    assert min(busy(two, f"searcher {i}") for i in range(2)) > 0.99


def test_full_queue_stops_searchers():
    r = simulate(0.05, 0.5, 4, None, queue_size=2, duration=60, max_replay_ratio=0.0)
    assert max(busy(r, f"searcher {i}") for i in range(4)) < 0.5
    # each searcher waits for room before it generates: at most queue_size batches of each
    # searcher reach the trainer per drain (one drain per update)
    assert r.batches <= (r.updates + 1) * 2 * 4


def test_waiting_for_room_keeps_fresh_data_one_version_old_when_the_two_sides_keep_pace():
    """Trainer and searcher equally fast, the replay bound on, the newest batch trained on: a
    searcher that may leave one batch untaken generates each batch from the weights published
    just before the trainer takes the previous one (staleness 1, the searcher never idle); with
    room for two, the backlog the initial fill of two batches starts never drains: each batch
    waits a whole update and is trained on two versions later, at the same rate (docs/log.md,
    fifth round)."""
    kw = dict(cores=None, duration=60, max_replay_ratio=1.0, initial_fill=2)
    one = simulate(0.4, 0.4, queue_size=1, **kw)
    two = simulate(0.4, 0.4, queue_size=2, **kw)
    assert one.staleness_mean == pytest.approx(1.0, abs=0.05)
    assert two.staleness_mean == pytest.approx(2.0, abs=0.05)
    assert one.steady_updates_per_minute == pytest.approx(two.steady_updates_per_minute, rel=0.02)
    assert busy(one, "searcher 0") > 0.95


def test_replay_bound_makes_the_simulated_trainer_wait_for_data():
    """rho = 1: the trainer trains on no more rows than were generated, so a trainer twice as
    fast as its searcher makes one update per batch; with no bound (rho = 0) it replays."""
    free = simulate(0.6, 0.3, duration=60, max_replay_ratio=0.0)
    bound = simulate(0.6, 0.3, duration=60, max_replay_ratio=1.0)
    assert free.steady_updates_per_minute == pytest.approx(200.0, rel=1e-6)
    assert bound.steady_updates_per_minute == pytest.approx(100.0, rel=0.02)
    assert bound.updates <= bound.batches


def test_staleness_grows_with_sync_period():
    k1 = simulate(0.35, 0.3, cores=2, sync_period=1, duration=120)
    k8 = simulate(0.35, 0.3, cores=2, sync_period=8, duration=120)
    assert k8.staleness_mean > k1.staleness_mean + 2
    assert k1.staleness.min() >= 0


def test_start_up_fill_max_steps_jitter_and_errors():
    r = simulate(0.3, 0.3, start_seconds=5.0, initial_fill=2, duration=30)
    assert r.intervals["trainer"][0][0] == pytest.approx(5.0 + 2 * 0.3)  # two batches first
    assert r.intervals["searcher 0"][0][0] == pytest.approx(5.0)
    assert simulate(0.3, 0.3, max_steps=7, duration=600).updates == 7
    # jitter: job times vary around the given ones, the mean rate stays near the constant one
    jit = simulate(0.3, 0.6, duration=600, jitter=0.2, seed=1)
    gens = [e - s for s, e, _ in jit.intervals["searcher 0"]]
    assert np.std(gens) > 0.03 and jit.steady_updates_per_minute == pytest.approx(100.0, rel=0.05)
    for bad in (dict(gen_seconds=float("nan")), dict(mode="bogus"), dict(queue_size=0),
                dict(drain_seconds=-1.0)):
        with pytest.raises(ValueError):
            simulate(**{"gen_seconds": 0.2, "update_seconds": 0.3, **bad})


def test_trainer_scoring_every_drained_batch_slows_it_with_more_searchers():
    """Fast searchers (one batch each per trainer cycle), no contention, no replay bound: the
    trainer's cycle is 0.3 s plus 0.1 s per batch drained, so 0.4 s with one searcher and
    0.7 s with four; the trainer is busy all the time."""
    d1 = simulate(0.1, 0.3, 1, None, duration=60, max_replay_ratio=0.0, drain_seconds=0.1)
    d4 = simulate(0.1, 0.3, 4, None, duration=60, max_replay_ratio=0.0, drain_seconds=0.1)
    assert d1.steady_updates_per_minute == pytest.approx(60 / 0.4, rel=0.01)
    assert d4.steady_updates_per_minute == pytest.approx(60 / 0.7, rel=0.01)
    assert d4.trainer_busy_fraction == pytest.approx(1.0)


def test_one_gpu_time_slices_among_busy_processes():
    dt, left = share_gpu(0.25)([0.3, 0.6, 0.9], None, 10.0)  # 3 busy: each 1.5 times slower
    assert dt == pytest.approx(0.45) and left == pytest.approx([0.0, 0.3, 0.6])
    assert share_gpu(0.25)([], None, 2.0) == (2.0, [])
    with pytest.raises(ValueError):
        share_gpu(-0.1)
    # trainer + 2 searchers always busy (searchers slower than the trainer, no replay bound)
    r = simulate(0.6, 0.3, 2, None, max_replay_ratio=0.0, duration=120, step=share_gpu(0.25))
    assert r.steady_updates_per_minute == pytest.approx(200.0 / 1.5, rel=1e-6)
    r = simulate(0.6, 0.3, 2, None, max_replay_ratio=0.0, duration=120, step=share_gpu(0.0))
    assert r.steady_updates_per_minute == pytest.approx(200.0, rel=1e-6)


def test_table():
    text = format_table([{"a": 1.23456, "b": None, "c": math.nan}], ["a", "b", "c"])
    assert "1.23" in text and text.count("-") >= 3
    assert format_table([{"a": 1.5, "b": "x"}], ["a", "b"], markdown=True).splitlines() == [
        "| a | b |", "| --- | --- |", "| 1.5 | x |"]


def test_moving_average_and_knobs(tmp_path):
    np.testing.assert_allclose(moving_average([1, 2, 3, 4], 2), [1, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(moving_average([1, 2, 3], 10), [1, 1.5, 2])
    assert moving_average([], 3).size == 0
    o = knob_overrides(algo="grpo", beta=0.04, beta_final=0.01, beta_anneal_steps=5)
    assert o["grpo"] == {"beta": 0.04} and "tb" not in o  # annealing is TB-only
    o = knob_overrides(algo="tb", beta=0.1, beta_final=0.02, beta_anneal_steps=50, sync_period=4)
    cfg = short_run(tmp_path / "run", 30, merge_overrides(o, {"training": {"max_steps": 3}}))
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


def test_overhead_is_the_median_wait_or_with_a_replay_bound_the_smallest():
    """A replay-bound run's waits include waiting for data (which the simulator models), so
    only the smallest wait counts as per-update overhead; sync runs have none."""
    from tba_lab.lab.simulate import _overhead

    rows = [{"wait_seconds": w} for w in (9.0, 0.05, 0.06, 0.002, 0.07)]  # first: initial fill
    assert _overhead(rows, "async", 1.0) == 0.002
    assert _overhead(rows, "async", 0.0) == pytest.approx(0.055)
    assert _overhead(rows, "sync", 1.0) == 0.0 and _overhead(rows[:1], "async", 1.0) == 0.0


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


def _fake_run(run_dir):
    """A finished run folder that run_timings reads: 2 updates of 0.2 s (+ waits of 0.1 s), 2
    batches of 0.4 s from one searcher, groups of K = 8 on B = 2 prompts, a fill of 16 rows."""
    import json

    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(json.dumps({  # JSON is YAML
        "max_minutes": 0.5, "async": {"mode": "async", "sync_period": 1, "num_searchers": 1,
                                      "queue_size": 1},
        "training": {"num_generations": 8, "num_prompts_per_step": 2},
        "buffer": {"initial_fill": 16, "max_replay_ratio": 0.0}}))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(
        {"step": i + 1, "wall_seconds": 1.0 + i, "update_seconds": 0.2, "wait_seconds": 0.1}) + "\n"
        for i in range(2)))
    (run_dir / "searchers.jsonl").write_text("".join(json.dumps(
        {"searcher_id": 0, "t_start": 0.5 * i, "t_end": 0.5 * i + 0.4, "gen_seconds": 0.4,
         "score_seconds": 0.0, "version": 0}) + "\n" for i in range(2)))
    (run_dir / "summary.json").write_text(json.dumps(
        {"wall_seconds": 3.0, "trainer_steps": 2, "staleness_mean": 0.5, "staleness_max": 1,
         "samples_generated": 32}))
    return run_dir


def test_run_timings_reads_a_run_folder(tmp_path):
    t = run_timings(_fake_run(tmp_path / "run"))
    assert (t["mode"], t["num_searchers"], t["initial_fill"], t["max_replay_ratio"]) == \
        ("async", 1, 16, 0.0)
    assert (t["gen_seconds"], t["update_seconds"]) == pytest.approx((0.4, 0.2))
    assert t["overhead_seconds"] == pytest.approx(0.1)  # the median wait after the first (no bound)
    assert t["steady_updates_per_minute"] == pytest.approx(60.0)
    assert t["samples_per_minute"] == pytest.approx(640.0) and t["budget_seconds"] == 30.0
    with pytest.raises(FileNotFoundError, match="summary.json"):
        run_timings(tmp_path)


def test_simulate_run_takes_the_runs_settings_else_the_kits_defaults(tmp_path, monkeypatch):
    """The run's fill (rows, rounded up to whole batches of B x K), replay bound, queue and
    searchers reach the loop, its async trainer overhead adds to the update; a row without
    them gets the kit's defaults."""
    import tba_lab.lab.simulate as sim
    from tba_lab.config import AsyncConfig, BufferConfig

    seen = {}
    monkeypatch.setattr(sim, "simulate", lambda *a, **kw: seen.update(kw, args=a))
    sim.simulate_run(run_timings(_fake_run(tmp_path / "run")))
    assert seen["args"] == pytest.approx((0.4, 0.3))                  # gen + score, update + overhead
    assert (seen["initial_fill"], seen["max_replay_ratio"], seen["queue_size"]) == (1, 0.0, 1)
    assert (seen["num_searchers"], seen["duration"], seen["cores"]) == (1, 30.0, 2)
    sim.simulate_run({"gen_seconds": 1.0, "score_seconds": 0.0, "update_seconds": 0.2,
                      "mode": "sync", "overhead_seconds": 0.5}, initial_fill=2)
    buf = BufferConfig()
    assert seen["args"] == pytest.approx((1.0, 0.2))                  # sync: no overhead
    assert (seen["max_replay_ratio"], seen["queue_size"], seen["initial_fill"]) == (
        buf.max_replay_ratio, AsyncConfig().queue_size, 2)            # overrides win
    monkeypatch.undo()
    r = simulate_run({"gen_seconds": 0.6, "score_seconds": 0.0, "update_seconds": 0.3,
                      "max_replay_ratio": 0.0}, cores=None, duration=60.0)
    assert r.steady_updates_per_minute == pytest.approx(200.0, rel=1e-6)


# ----------------------------------------------------------------------------------------------
# The scaling prediction: calibrated on the recorded 1-searcher runs, checked on the others
# ----------------------------------------------------------------------------------------------


def test_prediction_is_within_15_percent_of_every_recorded_leg():
    """Fed only the 1-searcher runs (the trainer scores every drained batch, 1 torch thread per
    process; on the GPU all share the H200), the loop predicts every recorded leg's updates and
    samples per minute within 15%."""
    result = predict()
    legs = [r["leg"].split()[0] for r in result["validation"]]
    assert legs == ["cpu_async_tb_n1", "cpu_async_tb_n4", "cpu_async_tb_n8", "gpu_sync_tb",
                    "gpu_async_tba_n3", "gpu_async_tba_n6", "gpu_check_async_n3_60s"]
    for r in result["validation"]:
        for what in ("updates/min", "samples/min"):
            assert abs(r[f"{what} error %"]) < 15.0, r
            assert r[f"{what} error %"] == pytest.approx(
                100 * (r[f"{what} predicted"] / r[f"{what} measured"] - 1))
    measured = {**recorded.H200_2026_12_04, **recorded.GPU_CHECK_2026_12_04}
    assert result["validation"][2]["updates/min measured"] == measured["cpu_async_tb_n8"]["updates_per_minute"]
    # the prediction: the reference pass moved to the searchers frees the trainer once they
    # deliver more than it trains on (6 searchers on the GPU), not with one
    pred = {(r["device"], r["searchers"], r["reference pass"]): r for r in result["prediction"]}
    assert pred["cuda", 6, "searcher"]["updates/min"] > 1.2 * pred["cuda", 6, "trainer"]["updates/min"]
    assert pred["cpu", 1, "searcher"]["updates/min"] < pred["cpu", 1, "trainer"]["updates/min"]


def test_predict_leg_places_the_reference_pass_and_refuses_unknown_ones():
    gpu = recorded.CALIBRATION_2026_12_04["cuda"]
    sync = predict_leg("cuda", "sync", 1, 30.0, seeds=3)
    cycle = gpu["gen_seconds"] + gpu["score_seconds"] + gpu["handover_seconds"] \
        + gpu["ref_seconds"] + gpu["update_only_seconds"]
    assert sync["steady_updates_per_minute"] == pytest.approx(60 / cycle, rel=0.05)
    assert sync["staleness_mean"] == 0.0
    with pytest.raises(ValueError, match="reference_pass"):
        predict_leg("cpu", "async", 2, 30.0, reference_pass="elsewhere")
    with pytest.raises(ValueError, match="device"):
        predict_leg("tpu", "async", 2, 30.0)


def test_prediction_report_and_command(tmp_path):
    import subprocess
    import sys

    from tba_lab.lab.simulate import main

    text = prediction_report(predict(seeds=1), command="cmd")
    assert "| gpu_async_tba_n6 |" in text and "`cmd`" in text and "leaves out" in text
    assert "| cpu_async_tb_n1 (calibration run) |" in text and "| cuda | 6 | searcher |" in text
    out = tmp_path / "report.md"
    assert main(["--out", str(out)]) == 0
    assert "python -m tba_lab.lab.simulate --out" in out.read_text()
    help_ = subprocess.run([sys.executable, "-m", "tba_lab.lab.simulate", "--help"],
                           capture_output=True, text=True, timeout=60)
    assert help_.returncode == 0 and "--out" in help_.stdout
