"""The benchmarks' bookkeeping: the race (``tba-lab experiment race``, a preset of the sweep
runner: the legs, the report files with fake legs, the claims), the trade-off race on the other
tasks, the per-update benchmark, curves.png's two kinds of held-out evaluation
(tba_lab/runlog.py), and bench/scaling_check.py.

The legs themselves are measured by running the benchmarks, not in tests (timing is not a test)."""
import importlib.util
import json
import math
import os
from pathlib import Path

import pytest

from tba_lab.lab.experiments import (ExperimentError, analyse, experiment_settings, readings,
                                     run_experiment)
from tba_lab.lab.experiments import per_update, race
from tba_lab.lab.experiments.common import VERDICT_RULE


def leg(evals, updates=300, samples=38400, wall=120.0, stale=(0.0, 0)):
    return {"updates": updates, "samples_generated": samples, "wall_seconds": wall,
            "accuracy_before": evals[0]["accuracy"], "accuracy_after": evals[-1]["accuracy"],
            "evals": evals, "staleness_mean": stale[0], "staleness_max": stale[1]}


def curve(*points):
    """Evaluations at (seconds, accuracy) points."""
    return [{"wall_seconds": t, "step": i, "accuracy": a} for i, (t, a) in enumerate(points)]


def test_the_checkpoints_lie_strictly_inside_the_budget():
    assert race.checkpoints(2, 30) == [30, 60, 90]
    assert race.checkpoints(2.9, 60) == [60, 120]
    assert race.checkpoints(3, 15)[:2] == [15, 30] and race.checkpoints(3, 15)[-1] == 165


def two_seeds():
    """Seed 0 and seed 1 of legs a, b, c, e with 60-s evaluations over 3 minutes."""
    s0 = {"a": leg(curve((0, 0.35), (61, 0.41), (122, 0.46), (181, 0.46)), 480, 61440, 180),
          "b": leg(curve((0, 0.35), (62, 0.44), (124, 0.45), (181, 0.47)), 390, 49920, 180),
          "c": leg(curve((0, 0.35), (60, 0.45), (120, 0.47), (180, 0.48)), 540, 64800, 180, (4.0, 19)),
          "e": leg(curve((0, 0.35), (60, 0.40), (121, 0.45), (180, 0.46)), 300, 38400, 180)}
    s1 = {"a": leg(curve((0, 0.35), (61, 0.43), (122, 0.44), (180, 0.46)), 450, 57600, 180),
          "b": leg(curve((0, 0.35), (62, 0.38), (124, 0.43), (180, 0.45)), 360, 46080, 180),
          "c": leg(curve((0, 0.35), (60, 0.43), (120, 0.46), (180, 0.47)), 504, 60480, 180, (4.4, 21)),
          "e": leg(curve((0, 0.35), (60, 0.36), (121, 0.39), (180, 0.39)), 240, 30720, 180)}
    return {0: s0, 1: s1}


def test_the_race_runs_seed_major_and_writes_the_report(tmp_path, monkeypatch):
    """Fake legs (no training) through ``tba-lab experiment race``'s runner: the order, the
    overrides every leg gets, results.json, report.md's header, each leg's rates and time to
    target over seeds, the claims, and race.png."""
    order = []

    def fake(variant, overrides, run_dir, seed, s):
        order.append((seed, variant))
        assert run_dir == tmp_path / "race" / "runs" / f"{variant}_seed{seed}"
        assert overrides["task"]["defer_interim_eval"] is True and overrides["max_minutes"] == 3
        r = two_seeds()[seed % 2][variant]
        return {"seed": seed, "trainer_steps": r["updates"],
                **{k: r[k] for k in ("samples_generated", "wall_seconds", "accuracy_before",
                                     "accuracy_after", "staleness_mean", "staleness_max")}}, r["evals"]

    monkeypatch.setattr(race, "run", fake)
    full = experiment_settings("race")  # the committed race's settings (docs/results/race/)
    assert (full["minutes"], full["eval_every"], full["eval_size"], full["defer_eval"],
            full["target"], full["legs"]) == (2.0, 15.0, 1000, True, 0.40, ["a", "b", "c", "d", "e"])
    result = run_experiment("race", seeds=[0, 1], output_dir=tmp_path, log=None, settings={
        "legs": "e,a,b,c", "minutes": 3, "eval_every": 60})
    assert order == [(0, "e"), (0, "a"), (0, "b"), (0, "c"), (1, "e"), (1, "a"), (1, "b"), (1, "c")]
    md = (tmp_path / "race" / "report.md").read_text()
    assert "| seeds | 0 1 |" in md and f"| cores (`os.cpu_count()`) | {os.cpu_count()} |" in md
    assert "legs = ['e', 'a', 'b', 'c'], minutes = 3.0, eval_every = 60.0, eval_size = 1000" in md
    data = json.loads((tmp_path / "race" / "results.json").read_text())
    assert data["runs"][6]["evals"] == [{**e, "n": None} for e in two_seeds()[1]["b"]["evals"]]
    cells = {c["variant"]: c for c in data["analysis"]["cells"]}
    assert (cells["a"]["updates_per_minute"]["min"], cells["a"]["updates_per_minute"]["max"]) == \
        pytest.approx((150.0, 160.0))
    # time to 40%: (e) reaches it in seed 0 only (at 60 s); (b) seed 0 at 62 x 5/9 s
    assert (cells["e"]["time_to_target"]["n"], cells["e"]["time_to_target"]["missing"]) == (1, 1)
    assert cells["b"]["time_to_target"]["min"] == pytest.approx(62 * 5 / 9)
    assert cells["c"]["staleness_mean"]["mean"] == pytest.approx(4.2)
    claims = {c["name"]: c for c in data["analysis"]["claims"]}
    assert claims["race.updates_per_minute"]["estimate"] == pytest.approx(
        100 * ((540 / 390 + 504 / 360) / 2 - 1))
    assert claims["race.time_to_target"]["diffs"] == {  # c minus b per seed, in seconds
        "0": pytest.approx(30 - 62 * 5 / 9), "1": pytest.approx(37.5 - (62 + 62 * 2 / 5))}
    assert result["readings"][-1] == VERDICT_RULE
    assert "- trainer updates per minute: e " in md
    assert (tmp_path / "race" / "race.png").stat().st_size > 1000


def test_task_race_reads_the_headline_and_trade_off_over_seeds(tmp_path):
    """The preference race's rows from each leg's summary and evaluations, their means and
    min-max over seeds as the readings print them, and TB's claim against the baseline."""
    s = {**experiment_settings("race_preference"), "legs": ["c", "a"]}

    def row(leg, seed, before, after, ppl, updates):
        run_dir = tmp_path / f"{leg}{seed}"
        run_dir.mkdir()
        (run_dir / "eval.jsonl").write_text(json.dumps(
            {"step": 0, "wall_seconds": 0.0, "win_rate": before, "perplexity_sft": 3.0}) + "\n")
        summary = {"held_out_metrics": ["win_rate", "perplexity_sft"], "win_rate_before": before,
                   "win_rate_after": after, "perplexity_sft_before": 3.0,
                   "perplexity_sft_after": ppl, "trainer_steps": updates, "wall_seconds": 60.0,
                   "samples_generated": 128 * updates, "staleness_mean": 1.0}
        return {"variant": leg, "seed": seed, **race.measure(run_dir, summary, s, leg, [])}

    rows = [row("c", 0, 0.20, 0.40, 4.0, 100), row("a", 0, 0.20, 0.30, 3.2, 80),
            row("c", 1, 0.20, 0.34, 5.0, 120), row("a", 1, 0.20, 0.24, 3.4, 90)]
    a = analyse("race_preference", rows, s)
    text = readings("race_preference", a, s)
    assert text[0] == ("held-out win_rate at the end: c 37.0% (34.0% to 40.0%); "
                       "a 27.0% (24.0% to 30.0%).")
    assert text[1] == "win_rate gain (points): c +17.0 (+14.0 to +20.0); a +7.0 (+4.0 to +10.0)."
    assert text[2] == ("held-out perplexity_sft at the end: c 4.500 (4.000 to 5.000); "
                       "a 3.300 (3.200 to 3.400).")
    assert text[3] == "trainer updates per minute: c 110 (100 to 120); a 85 (80 to 90)."
    (claim,) = a["claims"]  # c minus a: +10 points in both seeds
    assert claim["name"] == "preference.win_rate.c-a" and claim["estimate"] == pytest.approx(10.0)
    with pytest.raises(ExperimentError, match="knows"):
        race.metrics_of("arithmetic")


def test_per_update_is_deterministic_and_replays_the_batch(monkeypatch, tmp_path):
    """``per_update`` has no timing in it: the same seed gives the same evaluations; with
    reuse 2 the second update trains on the batch of the first (one rollout for two updates);
    a variant's name gives its config, staleness and replay."""
    import tba_lab.rollout as rollout_module

    calls = []
    original = rollout_module.rollout
    monkeypatch.setattr(rollout_module, "rollout",
                        lambda *a, **kw: ("version" in kw and calls.append(kw["version"]))
                        or original(*a, **kw))  # training rollouts (evaluation passes none)
    small = {"training": {"num_prompts_per_step": 4, "num_generations": 4}}  # B x K = 16 rows
    a = per_update.run_variant("tb", 0, updates=2, eval_every=1, eval_size=8, overrides=small)
    b = per_update.run_variant("tb", 0, updates=2, eval_every=1, eval_size=8, overrides=small)
    assert a["evals"] == b["evals"] and [e["step"] for e in a["evals"]] == [0, 1, 2]
    acc = [e["accuracy"] for e in a["evals"]]
    assert calls == [0, 1, 0, 1]
    calls.clear()
    per_update.run_variant("tb_reuse2", 0, updates=2, eval_every=2, eval_size=8, overrides=small)
    assert calls == [0]  # one batch rolled out, trained on twice
    s = {"updates": 2, "eval_every": 1, "eval_size": 8}
    summary, evals = per_update.run("tb", small, tmp_path / "tb", 0, s)
    assert [{k: e[k] for k in a["evals"][0]} for e in evals] == a["evals"]  # the files say the same
    row = per_update.measure(tmp_path / "tb", summary, s, "tb", [])
    assert row["mean_after_first"] == pytest.approx((acc[1] + acc[2]) / 2)
    assert (row["stale"], row["reuse"], row["accuracy_after"]) == (0, 1, acc[2])
    # with kl_prompts, each evaluation also measures the KL to the reference, on its own RNG:
    # the training samples and so the accuracies stay those of the run without it
    c = per_update.run_variant("tb", 0, updates=2, eval_every=1, eval_size=8, overrides=small,
                               kl_prompts=2, kl_k=2)
    assert [e["accuracy"] for e in c["evals"]] == acc and c["evals"][0]["kl"] == 0.0
    assert all(math.isfinite(e["kl"]) for e in c["evals"])
    assert per_update.parse_variant("tb_len_std_lr2.5e-5_stale10") == (
        {"algo": "tb", "tb": {"loss_type": "token_mean", "scale_rewards": "group"},
         "training": {"learning_rate": 2.5e-5}}, 10, 1)
    assert per_update.parse_variant("online_dpo_stale2") == ({"algo": "online_dpo"}, 2, 1)
    assert per_update.parse_variant("grpo_noclip") == ({"algo": "grpo",
                                                        "grpo": {"epsilon": math.inf}}, 0, 1)


# ------------------------------------------------------------------ curves.png (tba_lab/runlog.py)
def fake_run(path: Path, interim_n: int, eval_n: int, summary: dict | None, after: bool = True):
    path.mkdir()
    rows = [{"step": 0, "wall_seconds": 0.0, "accuracy": 0.346, "n": eval_n}]
    rows += [{"step": 100 * i, "wall_seconds": 60.0 * i + 1.3, "accuracy": a, "n": interim_n}
             for i, a in enumerate([0.375, 0.38, 0.48, 0.50], start=1)]
    if after:
        rows.append({"step": 540, "wall_seconds": 270.2, "accuracy": 0.488, "n": eval_n})
    (path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "wall_seconds": s / 2, "reward_mean": 0.2 + s / 2000,
                    "searcher_reward_mean": 0.25 + s / 2000}) + "\n" for s in range(1, 541, 9)))
    if summary is not None:
        (path / "summary.json").write_text(json.dumps(summary))
    return rows


def legend_texts(fig):  # of the held-out panel, the last of draw_runs' four
    return [t.get_text() for t in fig.axes[3].get_legend().get_texts()]


def test_curves_png_draws_interim_and_before_after_as_two_labelled_series(tmp_path):
    from tba_lab.runlog import plot_curves, split_evals

    summary = {"accuracy_after": 0.488, "wall_seconds": 270.2, "interrupted": False}
    rows = fake_run(tmp_path / "r", 200, 500, summary)
    fig = plot_curves(tmp_path / "r")
    assert (tmp_path / "r" / "curves.png").stat().st_size > 1000
    assert legend_texts(fig) == ["interim, 200 problems", "before/after, 500 problems"]
    interim, ends = fig.axes[3].get_lines()
    assert list(interim.get_xdata()) == [61.3, 121.3, 181.3, 241.3]  # 50% at 241 s is not the end
    assert list(ends.get_xdata()) == [0.0, 270.2] and list(ends.get_ydata()) == pytest.approx([34.6, 48.8])
    assert interim.get_linestyle() == "-" and ends.get_linestyle() == "None"
    assert ends.get_markersize() > interim.get_markersize()
    assert split_evals(rows, summary) == ([rows[0]], rows[1:-1], [rows[-1]])

    # the race's runs use one size for both: the kinds still come apart (by position + summary)
    summary = {"accuracy_after": 0.488, "wall_seconds": 270.2, "interrupted": False}
    rows = fake_run(tmp_path / "same", 200, 200, summary)
    assert legend_texts(plot_curves(tmp_path / "same")) == ["interim, 200 problems",
                                                            "before/after, 200 problems"]
    assert split_evals(rows, summary) == ([rows[0]], rows[1:-1], [rows[-1]])

    # an interrupted run has no after-evaluation: its last row is an interim one
    rows = fake_run(tmp_path / "stopped", 200, 200, {"accuracy_after": None, "wall_seconds": 241.3,
                                                      "interrupted": True}, after=False)
    assert legend_texts(plot_curves(tmp_path / "stopped")) == ["interim, 200 problems",
                                                               "before, 200 problems"]
    # no summary.json: told apart by size when they differ
    rows = fake_run(tmp_path / "nosummary", 100, 500, None)
    assert split_evals(rows) == ([rows[0]], rows[1:-1], [rows[-1]])
    assert legend_texts(plot_curves(tmp_path / "nosummary")) == ["interim, 100 problems",
                                                                 "before/after, 500 problems"]


_sspec = importlib.util.spec_from_file_location(
    "scaling_check", Path(__file__).parents[1] / "bench" / "scaling_check.py")
scaling = importlib.util.module_from_spec(_sspec)
_sspec.loader.exec_module(scaling)
ROOT = Path(__file__).parents[1]


def _fake_scaling_run(path: Path, summary: bool = True) -> None:
    """A run folder with numbers worked out by hand in the test below."""
    path.mkdir(parents=True)
    rows = [(1, 5.0, 0.5, 4.0, 0.1), (2, 6.0, 0.6, 0.2, 0.2), (3, 7.0, 0.8, 0.1, 0.1),
            (4, 8.0, 0.4, 0.5, 0.1)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(
        {"step": s, "wall_seconds": w, "update_seconds": u, "wait_seconds": q,
         "reference_seconds": r, "samples_generated": 16 * s}) + "\n" for s, w, u, q, r in rows))
    (path / "searchers.jsonl").write_text("".join(json.dumps(
        {"searcher_id": 0, "received": t, "gen_seconds": g, "rollouts": 16}) + "\n"
        for t, g in [(4.0, 1.0), (5.5, 2.0), (7.9, 3.0), (8.5, 4.0)]))
    (path / "eval.jsonl").write_text("".join(json.dumps(
        {"step": i, "wall_seconds": t, "accuracy": a, "n": 200}) + "\n"
        for i, (t, a) in enumerate([(0.0, 0.35), (4.0, 0.38), (8.0, 0.44), (10.0, 0.46)])))
    (path / "config.yaml").write_text("algo: tb\nasync:\n  mode: async\n  num_searchers: 3\n"
                                      "  searcher_threads: 0\n  trainer_threads: 0\n"
                                      "  reference_pass: auto\ntb:\n  beta: 0.1\n")
    if summary:
        (path / "summary.json").write_text(json.dumps(
            {"trainer_steps": 4, "wall_seconds": 10.0, "samples_generated": 64,
             "updates_per_minute": 24.0, "staleness_mean": 0.5, "staleness_max": 2,
             "accuracy_before": 0.35, "accuracy_after": 0.46, "searcher_failures": [],
             "placement": {"reference_pass": "searcher", "trainer_threads": 8,
                           "searcher_threads": 1, "cores": 16}}))


def test_scaling_check_time_to_target_is_the_first_crossing_interpolated(tmp_path):
    def reach(name, points, target):
        _fake_scaling_run(tmp_path / name)
        (tmp_path / name / "eval.jsonl").write_text("".join(json.dumps(
            {"step": i, "wall_seconds": t, "accuracy": a, "n": 200}) + "\n" for i, (t, a) in enumerate(points)))
        return scaling.leg_metrics(tmp_path / name)[f"time_to_{round(100 * target)}"]

    evals = [(0.0, 0.35), (4.0, 0.38), (8.0, 0.44), (10.0, 0.46)]
    assert reach("a", evals, 0.40) == pytest.approx(4 + 4 * 0.02 / 0.06, abs=0.05)  # 5.3 s
    assert reach("b", evals, 0.45) == pytest.approx(9.0)
    assert reach("c", [(0, 0.45), (10, 0.5)], 0.40) == 0.0 and reach("d", evals[:2], 0.45) is None
    assert reach("e", [(0, 0.3), (10, 0.5), (20, 0.2), (30, 0.6)], 0.40) == pytest.approx(5.0)
    assert reach("f", [], 0.40) is None


def test_scaling_check_leg_metrics_by_hand(tmp_path):
    _fake_scaling_run(tmp_path / "r")
    m = scaling.leg_metrics(tmp_path / "r")
    # rows after the first: update 0.6 + 0.8 + 0.4, wait 0.2 + 0.1 + 0.5, reference 0.2 + 0.1 + 0.1
    assert m["trainer_busy"] == pytest.approx(1.8 / 3.0)
    assert (m["update_seconds"], m["wait_seconds"], m["reference_seconds"]) == (0.6, 0.2, 0.1)
    assert m["steady_updates_per_minute"] == pytest.approx(60.0 * 3 / 3.0)  # steps 1..4 in 5..8 s
    # received in (4.5 s, 8 s]: two batches of 16 in 3.5 s
    assert m["steady_samples_per_minute"] == pytest.approx(60 * 32 / 3.5, abs=0.1)
    assert m["samples_per_minute"] == 384.0 and m["updates_per_minute"] == 24.0
    assert m["gen_seconds"] == 2.5 and m["generation_batches"] == 4
    assert (m["staleness_mean"], m["staleness_max"], m["updates"]) == (0.5, 2, 4)
    assert m["evals"][0] == [0.0, 0.35] and m["time_to_45"] == pytest.approx(9.0)
    assert m["resolved"]["reference_pass"] == "searcher"
    assert m["configured"]["reference_pass"] == "auto" and m["configured"]["searcher_threads"] == 0
    # a leg stopped before its summary: the rates come from metrics.jsonl
    _fake_scaling_run(tmp_path / "stopped", summary=False)
    m = scaling.leg_metrics(tmp_path / "stopped")
    assert m["updates"] == 4 and m["wall_seconds"] == 8.0 and m["samples_per_minute"] == 480.0
    assert m["updates_per_minute"] is None and m["trainer_busy"] == pytest.approx(0.6)


def test_scaling_check_legs_are_valid_configs_that_leave_the_defaults_alone(tmp_path):
    """Every leg builds (validation included) and sets only algo, mode, searchers and, for the
    GPU group, the placement: thread counts and the reference pass stay the kit's defaults."""
    from tba_lab.config import AsyncConfig, short_run

    assert list(scaling.LEGS)[:3] == ["gpu_async_tba_n3", "gpu_async_tba_n6", "gpu_sync_tb"]
    for name, (group, _) in scaling.LEGS.items():
        over = scaling.leg_overrides(name, dry=False)
        assert not {"reference_pass", "searcher_threads", "trainer_threads"} & set(over["async"])
        cfg = short_run(tmp_path / name, 30, over, eval_size=200, interim_eval_size=200,
                        eval_every_seconds=10)
        a = cfg.async_
        assert a.reference_pass == AsyncConfig().reference_pass and a.searcher_threads == 0
        assert (a.trainer_device, a.searcher_devices) == (
            ("cuda:0", ["cuda:0"]) if group == "gpu" else ("cpu", []))
        assert cfg.training.num_prompts_per_step == 16 and cfg.training.max_steps == 0
        dry = short_run(tmp_path / name, 20, scaling.leg_overrides(name, dry=True, max_updates=4))
        assert dry.async_.trainer_device == "cpu" and dry.training.num_generations == 4
        assert dry.training.max_steps == 4 and dry.async_.num_searchers == a.num_searchers
    assert scaling.LEGS["gpu_async_tba_n6"][1]["async"]["num_searchers"] == 6
    assert scaling.LEGS["gpu_sync_grpo"][1] == {"algo": "grpo", "async": {"mode": "sync", "num_searchers": 1}}


def test_scaling_check_runs_seed_major_skips_at_the_deadline_and_keeps_out_clean(
        tmp_path, monkeypatch):
    """Fake legs (no training): seed-major order, keys per seed, the deadline's skips in both
    reports, one tar of the logs, and no run folder in the output or the temporary folder."""
    order = []

    def fake(spec, limit):
        order.append((spec["seed"], spec["leg"]))
        _fake_scaling_run(Path(spec["run_dir"]))
        (Path(spec["run_dir"]) / "buffer.pt").write_text("x")  # not a log: left out of the tar
        return scaling.leg_metrics(spec["run_dir"])

    monkeypatch.setattr(scaling, "run_leg", fake)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    out = tmp_path / "out"
    assert scaling.main(["--out", str(out), "--cpu-dry-run", "--legs", "cpu_sync_tb",
                         "gpu_sync_tb", "--seeds", "0", "1"]) == 0
    assert order == [(0, "cpu_sync_tb"), (0, "gpu_sync_tb"), (1, "cpu_sync_tb"), (1, "gpu_sync_tb")]
    data = json.loads((out / "scaling_check.json").read_text())
    assert list(data["legs"]) == ["cpu_sync_tb_s0", "gpu_sync_tb_s0", "cpu_sync_tb_s1", "gpu_sync_tb_s1"]
    assert data["legs"]["gpu_sync_tb_s1"]["trainer_busy"] == pytest.approx(0.6)
    assert data["settings"]["dry_run"] is True and data["environment"]["cpu_count"] >= 1
    assert sorted(p.name for p in out.iterdir()) == ["scaling_check.json", "scaling_check.md",
                                                     "scaling_runs.tgz"]
    import tarfile
    names = tarfile.open(out / "scaling_runs.tgz").getnames()
    assert "scaling_runs/gpu_sync_tb_s1/metrics.jsonl" in names and not any("buffer" in n for n in names)
    md = (out / "scaling_check.md").read_text()
    assert "| cpu_sync_tb_s0 | 24.0 | 60.0 | 384 | 549 | 0.50/2 | 0.60 | searcher, 8/1 |" in md
    assert list((tmp_path / "tmp").iterdir()) == []  # the temporary folder is gone
    # no time left: every leg is skipped, and says so
    assert scaling.main(["--out", str(out), "--cpu-dry-run", "--deadline", "0"]) == 0
    data = json.loads((out / "scaling_check.json").read_text())
    assert list(data["legs"]) == scaling.DRY_LEGS
    assert all("left before the deadline" in r["skipped"] for r in data["legs"].values())
    assert "skipped: 0 s left before the deadline" in (out / "scaling_check.md").read_text()


def test_scaling_check_cpu_dry_run(tmp_path):
    """bench/scaling_check.sh --cpu-dry-run: the real code path (a process per leg, training,
    the logs read back) on tiny budgets: real rates, no error, at most 8 files, no run folders."""
    import subprocess
    import sys
    import time

    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    t0 = time.time()
    proc = subprocess.run(["bash", str(ROOT / "bench" / "scaling_check.sh"), str(out), "--cpu-dry-run"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "scaling_check.json").read_text())
    assert data["settings"]["dry_run"] is True and list(data["legs"]) == scaling.DRY_LEGS
    for name, r in data["legs"].items():
        assert "error" not in r and "skipped" not in r, (name, r)
        assert r["updates"] >= 2 and not r["searcher_failures"], (name, r)
        for key in ("updates_per_minute", "steady_updates_per_minute", "samples_per_minute",
                    "steady_samples_per_minute", "update_seconds", "gen_seconds"):
            assert r[key] > 0, (name, key, r[key])
        assert 0 < r["trainer_busy"] <= 1 and r["staleness_max"] >= 0
        assert r["evals"][0][0] == 0.0 and len(r["evals"]) >= 2  # before and after at least
        assert r["configured"]["mode"] == name.split("_")[1]  # sync or async
        assert r["overrides"]["training"]["num_generations"] == 4
    assert data["legs"]["cpu_sync_tb"]["staleness_max"] == 0
    files = [p for p in out.rglob("*")]
    assert sorted(p.name for p in files) == ["scaling_check.json", "scaling_check.log",
                                             "scaling_check.md", "scaling_runs.tgz"]
    assert len(files) <= 8 and not any(p.is_dir() for p in files)
    assert not list(tmp.glob("scaling_check_*"))  # run folders removed with their temporary folder
    md = (out / "scaling_check.md").read_text()
    assert md.startswith("# Scaling check (CPU dry run)") and "| gpu_async_tba_n3 | " in md
    print(f"scaling_check dry run took {time.time() - t0:.0f} s")


def test_scaling_check_repeated_list_flags_add_up():
    """`--seeds 0 --seeds 1` runs both seeds (argparse's nargs="+" alone keeps the last)."""
    a = scaling.parse(["--seeds", "0", "--seeds", "1", "--legs", "cpu_sync_tb", "--legs",
                       "cpu_async_tba_n1"])
    assert (a.seeds, a.legs) == ([0, 1], ["cpu_sync_tb", "cpu_async_tba_n1"])
    assert (scaling.parse([]).seeds, scaling.parse([]).legs) == ([0], None)
