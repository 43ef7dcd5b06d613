"""Every claim on the scorecard gets an interval and a verdict by a stated rule
(``common.VERDICT_RULE``, ``common.claim_test``): the claims that the presets ``beta``,
``buffer``, ``scaling``, ``race`` and the task races declare on per-seed paired differences,
checked against means and 95% t-intervals computed by hand on made-up runs, one verdict of
each kind; and the committed results under docs/results/ carry each claim's estimate,
interval, minimal detectable effect and verdict, as their stored runs give them today.

Hand computations use Student's t quantiles t(0.975, 2) = 4.302653, t(0.8, 2) = 1.060660 and
t(0.975, 1) = 12.706205: with three seeds the half-width is 4.302653 x SD / sqrt(3).
"""
import json
import math
from pathlib import Path

import pytest

from tba_lab.lab.experiments import (analyse, beta, buffer_sampling, default_settings, race,
                                     readings, scaling)
from tba_lab.lab.experiments.common import VERDICT_RULE

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
FIELDS = ("estimate", "ci_low", "ci_high", "min_detectable_effect", "verdict")
VERDICTS = {"supported", "falsified", "inconclusive"}
T2, T2_POWER, T1 = 4.302653, 1.060660, 12.706205


def by_name(claims):
    return {c["name"]: c for c in claims}


def interval(mean, sd, n=3, t=T2):
    half = t * sd / math.sqrt(n)
    return pytest.approx((mean - half, mean + half), abs=1e-4)


# ------------------------------------------------------------------------- beta
def beta_runs(kl, accuracy):
    """Three seeds of the three beta settings; ``kl``, ``accuracy``: {variant: per-seed list}."""
    return [{"variant": v, "seed": s, "kl": kl[v][s], "accuracy_after": accuracy[v][s],
             "gain": accuracy[v][s] - 0.35}
            for s in range(3) for v in ("const_default", "const_small", "annealed")]


def test_beta_claims_kl_supported_and_accuracy_inconclusive():
    s = {**beta.settings(False), "beta_default": 0.1, "beta_small": 0.03}
    runs = beta_runs(kl={"const_default": [0.10, 0.20, 0.30], "const_small": [0.30, 0.50, 0.70],
                         "annealed": [0.2, 0.3, 0.4]},
                     accuracy={"const_default": [0.40, 0.40, 0.40],
                               "const_small": [0.45, 0.37, 0.41], "annealed": [0.4] * 3})
    c = by_name(beta.claims(runs, s))
    kl = c["beta.kl"]  # diffs 0.2, 0.3, 0.4: mean 0.3, SD 0.1
    assert kl["estimate"] == pytest.approx(0.3) and kl["n"] == 3 and kl["missing"] == 0
    assert (kl["ci_low"], kl["ci_high"]) == interval(0.3, 0.1)  # 0.0516 to 0.5484
    assert kl["min_detectable_effect"] == pytest.approx((T2 + T2_POWER) * 0.1 / math.sqrt(3), abs=1e-4)
    assert kl["verdict"] == "supported" and kl["delta"] == pytest.approx(0.05) and kl["unit"] == "nats"
    assert kl["diffs"] == pytest.approx({"0": 0.2, "1": 0.3, "2": 0.4})
    acc = c["beta.accuracy"]  # diffs +5, -3, +1 points: mean +1, SD 4
    assert acc["estimate"] == pytest.approx(1.0)
    assert (acc["ci_low"], acc["ci_high"]) == interval(1.0, 4.0)  # -8.94 to +10.94
    assert acc["verdict"] == "inconclusive" and acc["delta"] == pytest.approx(3.0)
    assert "Eq. 2" in acc["paper"] and "same seed" in acc["estimand"]


# ------------------------------------------------------------------------- buffer
def buffer_runs(accuracy):
    """``accuracy``: {(m, inv_temp): per-seed list}."""
    return [{"variant": f"m{m:g}_inv{it:g}", "seed": s, "recency_prob": m, "inv_temp": it,
             "accuracy_before": 0.35, "accuracy_after": a[s], "gain": a[s] - 0.35,
             "div_distinct_correct": 1.0, "div_pass_at_k": a[s], "staleness_mean": 1.0}
            for s in range(3) for (m, it), a in accuracy.items()]


def test_buffer_claims_falsified_within_delta_and_on_the_other_side():
    s = {**buffer_sampling.settings(False), "recency": [0.0, 0.95], "inv_temp_at": [0.95]}
    runs = buffer_runs({(0.0, 0.0): [0.40, 0.41, 0.42], (0.95, 0.0): [0.41, 0.41, 0.41],
                        (0.95, 1.0): [0.36, 0.35, 0.37]})
    c = by_name(buffer_sampling.claims(runs, s))
    assert set(c) == {"buffer.recency", "buffer.reward_m0.95"}
    recency = c["buffer.recency"]  # diffs +1, 0, -1 points: the interval lies within +-3
    assert recency["estimate"] == pytest.approx(0.0, abs=1e-9)
    assert (recency["ci_low"], recency["ci_high"]) == interval(0.0, 1.0)  # -2.48 to +2.48
    assert recency["verdict"] == "falsified"
    reward = c["buffer.reward_m0.95"]  # diffs -5, -6, -4 points: wholly below 0
    assert reward["estimate"] == pytest.approx(-5.0)
    assert (reward["ci_low"], reward["ci_high"]) == interval(-5.0, 1.0)  # -7.48 to -2.52
    assert reward["verdict"] == "falsified" and reward["direction"] == 1
    # one m only: no recency claim
    s1 = {**s, "recency": [0.95]}
    assert [x["name"] for x in buffer_sampling.claims(
        [r for r in runs if r["recency_prob"] == 0.95], s1)] == ["buffer.reward_m0.95"]


# ------------------------------------------------------------------------- scaling
def scaling_runs(upm, samples):
    """``upm``, ``samples``: {n: per-seed list} of updates and samples per minute."""
    return [{"variant": f"n{n}", "seed": s, "searchers": n, "updates_per_minute": upm[n][s],
             "samples_per_minute": samples[n][s], "time_to_target": None, "accuracy_after": 0.4,
             "measured_steady_upm": None, "predicted_steady_upm": None, "closed_form_upm": None,
             "evals": [{"wall_seconds": 0.0, "accuracy": 0.35}]}
            for s in range(3) for n in upm]


def test_scaling_claims_are_relative_to_the_same_seeds_one_searcher_run():
    s = {**scaling.settings(False), "searchers": [1, 2]}
    runs = scaling_runs({1: [100, 100, 100], 2: [120, 130, 110]},
                        {1: [10000] * 3, 2: [15000, 16000, 14000]})
    c = by_name(scaling.claims(runs, s))
    upm = c["scaling.updates_per_minute.n2"]  # +20%, +30%, +10%: mean 20, SD 10
    assert upm["estimate"] == pytest.approx(20.0)
    assert (upm["ci_low"], upm["ci_high"]) == interval(20.0, 10.0)  # -4.84 to +44.84
    assert upm["verdict"] == "inconclusive" and upm["delta"] == pytest.approx(10.0)
    samples = c["scaling.samples_per_minute.n2"]  # +50%, +60%, +40%
    assert (samples["ci_low"], samples["ci_high"]) == interval(50.0, 10.0)  # +25.2 to +74.8
    assert samples["verdict"] == "supported"
    # a 1-searcher run that made no update gives that seed no ratio: left out, counted
    runs[4]["updates_per_minute"] = 0  # seed 2, n = 1
    upm = by_name(scaling.claims(runs, s))["scaling.updates_per_minute.n2"]
    assert (upm["n"], upm["missing"], upm["missing_seeds"]) == (2, 1, ["2"])
    assert upm["estimate"] == pytest.approx(25.0)
    assert scaling.claims(runs, {**s, "searchers": [1]}) == []


# ------------------------------------------------------------------------- race
def race_leg(variant, seed, updates, evals):
    return {"variant": variant, "seed": seed, "updates": updates, "samples_generated": 128 * updates,
            "wall_seconds": 60.0, "accuracy_before": evals[0][1], "accuracy_after": evals[-1][1],
            "staleness_mean": 0.0, "staleness_max": 0,
            "evals": [{"wall_seconds": t, "step": i, "accuracy": a} for i, (t, a) in enumerate(evals)]}


B_REACHES = [(0, 0.30), (30, 0.35), (60, 0.45)]   # 40% at 45 s
B_MISSES = [(0, 0.30), (30, 0.35), (60, 0.38)]    # never
RACE_RUNS = [race_leg("b", 0, 60, B_REACHES), race_leg("c", 0, 90, [(0, 0.30), (30, 0.50), (60, 0.5)]),
             race_leg("b", 1, 60, B_REACHES), race_leg("c", 1, 84, [(0, 0.30), (30, 0.40), (60, 0.5)]),
             race_leg("b", 2, 60, B_MISSES), race_leg("c", 2, 87, [(0, 0.30), (30, 0.50), (60, 0.5)])]


def test_race_claims_rate_supported_and_time_to_target_with_a_seed_left_out():
    s = {**race.settings(False), "minutes": 1.0, "eval_every": 30.0, "target": 0.40}
    a = analyse("race", RACE_RUNS, s)
    c = by_name(a["claims"])
    rate = c["race.updates_per_minute"]  # 90/60, 84/60, 87/60 - 1: +50%, +40%, +45%
    assert rate["estimate"] == pytest.approx(45.0)
    assert (rate["ci_low"], rate["ci_high"]) == interval(45.0, 5.0)  # +32.6 to +57.4
    assert rate["verdict"] == "supported"
    ttt = c["race.time_to_target"]  # seed 0: 15 - 45 s, seed 1: 30 - 45 s, seed 2: b never
    assert ttt["diffs"] == {"0": pytest.approx(-30.0), "1": pytest.approx(-15.0), "2": None}
    assert (ttt["n"], ttt["missing"], ttt["missing_seeds"]) == (2, 1, ["2"])
    assert ttt["estimate"] == pytest.approx(-22.5) and ttt["delta"] == pytest.approx(30.0)
    assert (ttt["ci_low"], ttt["ci_high"]) == interval(-22.5, 15 / math.sqrt(2), n=2, t=T1)
    assert ttt["verdict"] == "inconclusive" and ttt["direction"] == -1
    text = readings("race", a, s)
    assert text.count(VERDICT_RULE) == 1 and text[-1] == VERDICT_RULE  # the rule once, last
    assert any("Left out: seed(s) 2 (async TBA or sync TB never reached 40%" in x for x in text)
    assert any("95% interval +32.6 to +57.4 over 3 seeds" in x and "**supported**" in x
               for x in text)
    # without leg (b) there is no claim, and no rule printed
    no_b = analyse("race", [r for r in RACE_RUNS if r["variant"] != "b"], s)
    assert no_b["claims"] == [] and VERDICT_RULE not in readings("race", no_b, s)


def stored_rows(runs: dict) -> list[dict]:
    """The runner's rows from a race stored before the presets (``{seed: {leg: row}}``)."""
    return [{"variant": leg, "seed": seed, **row} for seed, by_leg in runs.items()
            for leg, row in by_leg.items()]


def test_race_claims_read_a_race_stored_before_the_presets():
    """A race stored by the script before the presets (``race.json``: ``runs`` as {seed: {leg:
    row}}) gives the same claims as the runner's rows."""
    runs = {str(r["seed"]): {} for r in RACE_RUNS}
    for r in RACE_RUNS:
        runs[str(r["seed"])][r["variant"]] = {k: v for k, v in r.items() if k not in ("variant", "seed")}
    s = {**race.settings(False), "minutes": 1.0, "eval_every": 30.0, "target": 0.40}
    stored = race.claims(stored_rows(runs), s)
    assert stored == race.claims(RACE_RUNS, s) and stored[1]["missing_seeds"] == ["2"]


# ------------------------------------------------------------------------- task races
def task_leg(variant, seed, win_rate):
    return {"variant": variant, "seed": seed, "updates_per_minute": 100.0,
            "samples_per_minute": 12800.0, "staleness_mean": 1.0,
            "evals": [{"wall_seconds": 0.0, "step": 0, "win_rate": 0.15, "perplexity_sft": 1.4},
                      {"wall_seconds": 60.0, "step": 100, "win_rate": win_rate, "perplexity_sft": 1.6}],
            "before": {"win_rate": 0.15, "perplexity_sft": 1.4},
            "after": {"win_rate": win_rate, "perplexity_sft": 1.6}}


def test_task_race_claims_tb_minus_each_baseline():
    s = {**default_settings("race_preference"), "minutes": 1.0, "eval_every": 30.0}
    runs = [task_leg(leg, seed, w) for seed, row in enumerate(
        [{"c": 0.40, "d": 0.30, "g": 0.40}, {"c": 0.34, "d": 0.25, "g": 0.34},
         {"c": 0.37, "d": 0.26, "g": 0.38}]) for leg, w in row.items()]
    c = by_name(race.claims(runs, s))
    assert set(c) == {"preference.win_rate.c-d", "preference.win_rate.c-g"}
    d = c["preference.win_rate.c-d"]  # +10, +9, +11 points
    assert (d["ci_low"], d["ci_high"]) == interval(10.0, 1.0)  # +7.5 to +12.5
    assert d["verdict"] == "supported" and "Fig. 3" in d["paper"]
    g = c["preference.win_rate.c-g"]  # 0, 0, -1 points: mean -1/3, within +-3
    assert g["estimate"] == pytest.approx(-1 / 3)
    assert (g["ci_low"], g["ci_high"]) == interval(-1 / 3, math.sqrt(1 / 3))  # -1.77 to +1.10
    assert g["verdict"] == "falsified"
    # one seed: an estimate, no interval, inconclusive
    one = by_name(race.claims([r for r in runs if r["seed"] == 0], s))
    assert one["preference.win_rate.c-d"]["estimate"] == pytest.approx(10.0)
    assert one["preference.win_rate.c-d"]["ci_low"] is None
    assert one["preference.win_rate.c-d"]["verdict"] == "inconclusive"
    seed0 = [r for r in runs if r["seed"] == 0]
    assert "from one seed, no interval" in " ".join(
        readings("race_preference", analyse("race_preference", seed0, s), s))


# ------------------------------------------------------------------------- the committed files
def check_fields(claims):
    assert claims, "no claim recorded"
    for c in claims:
        assert all(c[f] is not None for f in FIELDS), c["claim"]
        assert c["verdict"] in VERDICTS and c["ci_low"] <= c["estimate"] <= c["ci_high"]
        assert c["n"] >= 2 and c["paper"] and c["estimand"]


@pytest.mark.parametrize("name, mod", [("beta", beta), ("buffer", buffer_sampling),
                                       ("scaling", scaling)])
def test_committed_results_carry_each_claims_interval_and_verdict(name, mod):
    """docs/results/NAME/results.json (``tba-lab experiment NAME --report-only``): the five
    fields per claim, equal to what the stored runs give today, and the report says them."""
    data = json.loads((RESULTS / name / "results.json").read_text())
    claims = data["analysis"]["claims"]
    check_fields(claims)
    assert json.loads(json.dumps(mod.claims(data["runs"], data["settings"]))) == claims
    report = (RESULTS / name / "report.md").read_text()
    assert VERDICT_RULE in report and all(f"**{c['verdict']}**" in report for c in claims)


@pytest.mark.parametrize("folder, mod, file", [("race", race, "race.json"),
                                               ("race_preference", race, "task_race.json"),
                                               ("race_redteam", race, "task_race.json")])
def test_committed_legacy_races_carry_each_claims_interval_and_verdict(folder, mod, file):
    """The races stored before the presets: claims.json beside race.json / task_race.json,
    equal to the preset's claims of the stored runs today."""
    data = json.loads((RESULTS / folder / "claims.json").read_text())
    check_fields(data["claims"])
    stored = json.loads((RESULTS / folder / file).read_text())
    claims = mod.claims(stored_rows(stored["runs"]), stored["settings"])
    assert json.loads(json.dumps(claims)) == data["claims"]
    assert data["verdict_rule"] == VERDICT_RULE


# ------------------------------------------------------------------------- notebook 07's helpers
def test_nb07_prints_and_draws_claims_with_and_without_an_interval(tmp_path, capsys):
    from tba_lab.lab.course.nb07 import draw_claims, print_claims

    claims = [{**by_name(race.claims(RACE_RUNS, {**race.settings(False), "minutes": 1.0,
                                                "eval_every": 30.0}))[name],
               "experiment": "race"} for name in ("race.updates_per_minute", "race.time_to_target")]
    claims.append({"claim": "D = TB's drop - GRPO's drop", "estimate": -1.0, "ci_low": None,
                   "ci_high": None, "min_detectable_effect": None, "delta": 3.0,
                   "verdict": "inconclusive", "n": 1, "unit": "points", "direction": -1,
                   "experiment": "off_policy"})  # a claim_test dict without the extra keys
    print_claims(claims)
    out = capsys.readouterr().out
    assert "[race] Async TBA makes more trainer updates per minute than sync TB" in out
    assert "95% interval +32.6 to +57.4 over 3 seed(s); detectable" in out and "SUPPORTED" in out
    assert "over 2 seed(s) (1 left out)" in out
    assert "[off_policy] D = TB's drop - GRPO's drop" in out and "interval n/a to n/a" in out
    path = draw_claims(claims, tmp_path / "claims.png")
    assert path.stat().st_size > 10_000
