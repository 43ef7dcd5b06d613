"""tba_lab.lab.timeline.time_per_update / plot_time_per_update on a small fake run folder, and
tba_lab.lab.recorded's 2026-12-04 H200 legs (drawable, consistent with the calibration of the
scaling prediction, tba_lab.lab.simulate.predict, which reads its validation targets from them)."""
import json

import matplotlib
import pytest

matplotlib.use("Agg")

from tba_lab.lab import recorded  # noqa: E402
from tba_lab.lab.timeline import (format_time_per_update, plot_time_per_update,  # noqa: E402
                                  time_per_update)


def _write_run(run_dir, metrics, batches, summary=None, config=None):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    (run_dir / "searchers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in batches))
    if summary is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary))
    if config is not None:
        import yaml

        (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    return run_dir


def _update(step, update, reference, wait):
    return {"step": step, "wall_seconds": float(step), "update_seconds": update,
            "reference_seconds": reference, "wait_seconds": wait}


def _batch(sid, gen, score, sync):
    return {"searcher_id": sid, "version": 0, "t_start": 0.0, "t_end": gen + score,
            "trainer_step": 0, "gen_seconds": gen, "score_seconds": score, "sync_seconds": sync}


@pytest.fixture
def fake_run(tmp_path):
    # five updates: the first waits for the initial fill (7.0 s), which the median ignores
    metrics = [_update(1, 0.30, 0.10, 7.00), _update(2, 0.32, 0.12, 0.01),
               _update(3, 0.28, 0.08, 0.02), _update(4, 0.31, 0.11, 0.00),
               _update(5, 0.40, 0.09, 0.03)]
    # searcher 0: three batches, searcher 1: two (even count: mean of the middle two)
    batches = [_batch(0, 0.40, 0.002, 0.001), _batch(1, 0.50, 0.004, 0.003),
               _batch(0, 0.44, 0.003, 0.000), _batch(1, 0.46, 0.006, 0.000),
               _batch(0, 0.42, 0.001, 0.002)]
    summary = {"updates_per_minute": 42.5, "trainer_steps": 5, "samples_generated": 160,
               "wall_seconds": 8.0,
               "placement": {"reference_pass": "trainer", "searcher_threads": 1}}
    config = {"async": {"mode": "async", "num_searchers": 2, "reference_pass": "auto"}}
    return _write_run(tmp_path / "run", metrics, batches, summary, config)


def test_medians_match_hand_computed_values(fake_run):
    t = time_per_update(fake_run)
    # update 0.28 0.30 0.31 0.32 0.40 -> 0.31; reference 0.08 0.09 0.10 0.11 0.12 -> 0.10;
    # wait 0.00 0.01 0.02 0.03 7.00 -> 0.02
    assert t["trainer"] == pytest.approx({"update": 0.31, "reference": 0.10, "wait": 0.02})
    # all five batches: gen 0.40 0.42 0.44 0.46 0.50 -> 0.44; score 1..6 ms -> 0.003;
    # sync 0 0 1 2 3 ms -> 0.001
    assert t["searcher"] == pytest.approx({"generation": 0.44, "scoring": 0.003, "sync": 0.001})
    # searcher 0: gen 0.40 0.42 0.44 -> 0.42, score 1 2 3 ms -> 0.002, sync 0 1 2 ms -> 0.001
    # searcher 1: gen (0.46 + 0.50) / 2 = 0.48, score (4 + 6) / 2 = 5 ms, sync (0 + 3) / 2 ms
    assert t["per_searcher"][0] == pytest.approx(
        {"generation": 0.42, "scoring": 0.002, "sync": 0.001, "batches": 3})
    assert t["per_searcher"][1] == pytest.approx(
        {"generation": 0.48, "scoring": 0.005, "sync": 0.0015, "batches": 2})
    assert (t["mode"], t["num_searchers"], t["updates"], t["batches"]) == ("async", 2, 5, 5)
    assert t["reference_pass"] == "trainer"  # the resolved placement wins over "auto"
    assert t["updates_per_minute"] == 42.5
    assert t["samples_per_minute"] == pytest.approx(60 * 160 / 8.0)


def test_missing_fields_count_zero_reference_and_none_elsewhere(tmp_path):
    # a log without reference_seconds (the searchers scored) and without sync_seconds
    metrics = [{"step": s, "wall_seconds": float(s), "update_seconds": u, "wait_seconds": w}
               for s, u, w in ((1, 0.2, 0.5), (2, 0.4, 0.1), (3, 0.3, 0.2))]
    batches = [{"searcher_id": 0, "gen_seconds": 0.6, "score_seconds": 0.2}]
    t = time_per_update(_write_run(tmp_path / "run", metrics, batches))
    assert t["trainer"] == pytest.approx({"update": 0.3, "reference": 0.0, "wait": 0.2})
    assert t["searcher"]["sync"] is None and t["searcher"]["generation"] == pytest.approx(0.6)
    assert t["reference_pass"] is None and t["updates_per_minute"] is None
    assert t["num_searchers"] == 1  # no config.yaml: the searcher ids seen


def test_table_prints_the_medians_dashes_and_each_searcher(fake_run):
    text = format_time_per_update({"fake": time_per_update(fake_run),
                                   "rec": recorded.H200_2026_12_04["gpu_async_tba_n3"]})
    fake = next(line for line in text.splitlines() if line.split()[:1] == ["fake"])
    assert fake.split() == ["fake", "2", "trainer", "0.310", "0.100", "0.020", "0.440", "0.003",
                            "0.001", "42", "1200"]
    rec = next(line for line in text.splitlines() if line.split()[:1] == ["rec"])
    # a recorded leg: what the record lacks prints as "-", not as a number
    assert rec.split()[-8:] == ["0.052", "0.025", "-", "0.167", "-", "-", "401", "58684"]
    assert ("fake, searcher 1: generation 0.480, scoring 0.005, weight sync 0.0015 s per batch "
            "(2 batches)") in text


def test_not_a_run_folder_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        time_per_update(tmp_path)


def test_plot_draws_stacked_parts_and_skips_missing_ones(fake_run):
    legs = {"run": time_per_update(fake_run), **recorded.legs(recorded.GPU_LEGS)}
    ax_t, ax_s = plot_time_per_update(legs, title="test")
    heights = [p.get_height() for p in ax_t.patches]
    assert len(ax_t.patches) == 3 * len(legs)  # update, reference, wait per leg
    assert heights[0] == pytest.approx(0.31)  # first leg's update bar
    # the bars stack: the fake run's wait bar starts at update + reference
    assert ax_t.patches[2 * len(legs)].get_y() == pytest.approx(0.41)
    # async legs without a recorded wait draw a zero-height part, not a guess
    assert ax_t.patches[2 * len(legs) + 2].get_height() == 0.0
    assert [t.get_text() for t in ax_s.get_xticklabels()] == list(legs)
    import matplotlib.pyplot as plt

    plt.close("all")


def test_recorded_legs_name_their_source_and_agree_with_the_calibration():
    assert "2026-12-04" in recorded.SOURCE and "H200" in recorded.SOURCE and "bd662ce" in recorded.SOURCE
    legs = recorded.H200_2026_12_04
    for name, leg in legs.items():
        assert set(leg["trainer"]) == {"update", "reference", "wait"}
        assert set(leg["searcher"]) == {"generation", "scoring", "sync"}
        assert leg["run_seconds"] == (25.0 if leg["device"] == "cpu" else 30.0)
    # every validation target (each leg with samples) is a recorded figure (none missing: None
    # would break the errors), and the 60-s check run is one
    targets = [leg for leg in {**legs, **recorded.GPU_CHECK_2026_12_04}.values()
               if leg["samples_per_minute"] is not None]
    assert len(targets) == 7
    assert all(leg[k] is not None for leg in targets
               for k in ("updates_per_minute", "samples_per_minute", "staleness_mean"))
    # the calibration's medians (run_timings of the same two runs, written down apart) round to
    # the recorded per-update medians
    assert {c["run"] for c in recorded.CALIBRATION_2026_12_04.values()} == {"cpu_async_tb_n1",
                                                                             "gpu_sync_tb"}
    for calib in recorded.CALIBRATION_2026_12_04.values():
        leg = legs[calib["run"]]
        assert calib["update_only_seconds"] == pytest.approx(leg["trainer"]["update"], abs=5e-4)
        assert calib["gen_seconds"] == pytest.approx(leg["searcher"]["generation"], abs=5e-4)
    # a sync run trains once on each batch of B x K = 128 rows, and never on stale ones
    sync = legs["gpu_sync_tb"]
    assert sync["samples_per_minute"] == pytest.approx(128 * sync["updates_per_minute"], abs=1)
    assert sync["staleness_mean"] == 0.0
    # the old rule's signature: the trainer's reference time per update grows with searchers
    cpu = [legs[k]["trainer"]["reference"] for k in recorded.CPU_LEGS.values()]
    assert cpu == sorted(cpu) and cpu[-1] > 2 * legs["cpu_async_tb_n1"]["trainer"]["update"]
