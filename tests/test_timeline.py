"""tba_lab.lab.timeline on hand-made logs: the union of busy intervals, the fresh-data staleness
bound, and a loop of one's own written and read back (notebook 04's path)."""
import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from tba_lab.lab.timeline import (arrival_lags, busy_fraction, fresh_staleness_max,  # noqa: E402
                                  load_timeline, plot_timeline, run_measurements, write_timeline)


def test_busy_fraction_counts_overlaps_once_and_only_inside_the_window():
    assert busy_fraction([], (0, 10)) == 0.0
    assert busy_fraction([(0, 2), (1, 3)], (0, 10)) == pytest.approx(0.3)     # overlap once
    assert busy_fraction([(0, 2), (2, 4)], (0, 10)) == pytest.approx(0.4)     # touching
    assert busy_fraction([(1, 9), (2, 3)], (0, 10)) == pytest.approx(0.8)     # nested
    assert busy_fraction([(-5, 1), (9, 20)], (0, 10)) == pytest.approx(0.2)   # clipped
    assert busy_fraction([(11, 12), (-3, -1), (4, 4)], (0, 10)) == 0.0        # outside, empty
    assert busy_fraction([(5, 6), (0, 1), (0.5, 2)], (0, 4)) == pytest.approx(0.5)  # unsorted
    with pytest.raises(ValueError, match="end must be after the start"):
        busy_fraction([(0, 1)], (2, 2))


def test_fresh_staleness_max_is_k_floor_a_over_k_plus_k_minus_1():
    assert fresh_staleness_max(0, 1) == 0 and fresh_staleness_max(3, 1) == 3
    assert fresh_staleness_max(0, 4) == 3 and fresh_staleness_max(7, 4) == 7
    assert fresh_staleness_max(8, 4) == 11
    np.testing.assert_array_equal(fresh_staleness_max(np.array([0, 1, 2, 5]), 2), [1, 1, 3, 5])


def test_a_loop_of_ones_own_reads_back_as_a_timeline(tmp_path):
    batches = [{"searcher_id": 0, "t_start": -0.5, "t_end": 1.0, "gen_seconds": 1.0,
                "score_seconds": 0.5, "version": 0, "trainer_step": 0},
               {"searcher_id": 0, "t_start": 1.0, "t_end": 2.5, "gen_seconds": 1.2,
                "score_seconds": 0.3, "version": 2, "trainer_step": 3}]
    updates = [{"step": s, "wall_seconds": float(s), "update_seconds": 0.5, "wait_seconds": 0.25,
                "staleness_mean": 0.0, "staleness_max": 0} for s in (1, 2, 3, 4)]
    run = write_timeline(tmp_path / "loop", batches, updates, sync_period=2)
    tl = load_timeline(run)
    assert (tl["mode"], tl["sync_period"], tl["wall_seconds"]) == ("async", 2, 4.0)
    assert tl["searchers"][0]["gen"] == [(-0.5, 0.5), (1.0, 2.2)]
    assert tl["searchers"][0]["score"] == [(0.5, 1.0), (2.2, 2.5)]
    assert tl["trainer"]["update"][0] == (0.5, 1.0) and tl["trainer"]["wait"][0] == (0.25, 0.5)
    assert tl["publish"] == [2.0, 4.0]  # after every k-th update
    assert tl["trainer"]["behaviour_kl"] == [None] * 4  # not logged
    assert arrival_lags(run) == [0, 1]
    m = run_measurements(run)
    assert (m["gen_seconds"], m["score_seconds"], m["update_seconds"]) == (1.1, 0.4, 0.5)
    assert m["trainer_steps"] is None  # write_timeline's summary has the length only
    ax = plot_timeline(run)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["trainer", "searcher 0"]
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        load_timeline(tmp_path)


def test_a_simulation_draws_as_a_run_does():
    """plot_timeline draws a SimResult with the run's rows and colours; ``last`` is the window
    of the last seconds of either."""
    from matplotlib.colors import to_rgba

    from tba_lab.lab.simulate import simulate
    from tba_lab.lab.timeline import _STYLES

    sim = simulate(0.3, 0.2, num_searchers=2, duration=5.0, drain_seconds=0.05)
    ax = plot_timeline(sim, last=2.0)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["trainer", "searcher 0", "searcher 1"]
    assert ax.get_xlim() == pytest.approx((sim.duration - 2.0, sim.duration))
    colours = {tuple(c) for bars in ax.collections for c in bars.get_facecolor()}
    assert {to_rgba(_STYLES[p]["facecolor"]) for p in ("update", "generation")} <= colours
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "searcher generation" in legend and "weights published" not in legend
