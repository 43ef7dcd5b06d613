"""Every claim on the scorecard gets a premise, an interval and a verdict by a stated rule
(``common.VERDICT_RULE``, ``common.claim_test``): the claims that the presets ``beta``,
``buffer``, ``scaling``, ``race``, the task races, ``off_policy``, ``asynchrony`` and
``tradeoff`` declare on per-seed paired differences, checked against means and 95% t-intervals
computed by hand on made-up runs, each verdict of the five; a premise not met never gives
supported, contradicted or negligible; and the committed results under docs/results/ carry
each claim's premise, estimate, interval, minimal detectable effect and verdict, as their
stored runs give them today.

Hand computations use Student's t quantiles t(0.975, 2) = 4.302653, t(0.8, 2) = 1.060660 and
t(0.975, 1) = 12.706205: with three seeds the half-width is 4.302653 x SD / sqrt(3).
"""
import json
import math
from pathlib import Path

import pytest

from tba_lab.lab.experiments import (analyse, asynchrony, beta, buffer_sampling, default_settings,
                                     off_policy, race, readings, scaling, tradeoff)
from tba_lab.lab.experiments.common import VERDICT_RULE, VERDICTS, value_at

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
FIELDS = ("estimate", "ci_low", "ci_high", "min_detectable_effect", "verdict")
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
             "gain": accuracy[v][s] - 0.35, "trainer_steps": 64}
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
    assert kl["premise"]["met"] and "same number of updates" in kl["premise"]["condition"]
    # a run cut short by the time cap: not at equal updates, so not testable
    runs[1]["trainer_steps"] = 50  # const_small, seed 0
    assert {c["verdict"] for c in beta.claims(runs, s)} == {"not testable here"}


# ------------------------------------------------------------------------- buffer
def buffer_runs(accuracy, generated=3.0):
    """``accuracy``: {(m, inv_temp): per-seed list}; ``generated``: rollouts generated per
    rollout trained (64 updates of 16 x 8 in 60 s)."""
    return [{"variant": f"m{m:g}_inv{it:g}", "seed": s, "recency_prob": m, "inv_temp": it,
             "accuracy_before": 0.35, "accuracy_after": a[s], "gain": a[s] - 0.35,
             "div_distinct_correct": 1.0, "div_pass_at_k": a[s], "staleness_mean": 1.0,
             "trainer_steps": 64, "wall_seconds": 60.0, "samples_per_minute": generated * 64 * 128,
             "overrides": {"training": {"num_prompts_per_step": 16, "num_generations": 8}}}
            for s in range(3) for (m, it), a in accuracy.items()]


def test_buffer_claims_negligible_within_delta_and_contradicted_on_the_other_side():
    s = {**buffer_sampling.settings(False), "recency": [0.0, 0.95], "inv_temp_at": [0.95]}
    accuracy = {(0.0, 0.0): [0.40, 0.41, 0.42], (0.95, 0.0): [0.41, 0.41, 0.41],
                (0.95, 1.0): [0.36, 0.35, 0.37]}
    c = by_name(buffer_sampling.claims(buffer_runs(accuracy), s))
    assert set(c) == {"buffer.recency", "buffer.reward_m0.95"}
    recency = c["buffer.recency"]  # diffs +1, 0, -1 points: the interval lies within +-3
    assert recency["estimate"] == pytest.approx(0.0, abs=1e-9)
    assert (recency["ci_low"], recency["ci_high"]) == interval(0.0, 1.0)  # -2.48 to +2.48
    assert recency["verdict"] == "negligible" and recency["premise"]["met"]
    assert recency["premise"]["observed"] == "generated / trained 3.00"
    reward = c["buffer.reward_m0.95"]  # diffs -5, -6, -4 points: wholly below -3
    assert reward["estimate"] == pytest.approx(-5.0)
    assert (reward["ci_low"], reward["ci_high"]) == interval(-5.0, 1.0)  # -7.48 to -2.52
    assert reward["verdict"] == "contradicted" and reward["direction"] == 1
    # one searcher that generates what the trainer trains on: the sampler has no choice
    one = by_name(buffer_sampling.claims(buffer_runs(accuracy, generated=1.0), s))
    assert {x["verdict"] for x in one.values()} == {"not testable here"}
    assert "NOT met (generated / trained 1.00)" in " ".join(readings(
        "buffer", analyse("buffer", buffer_runs(accuracy, generated=1.0), s), s))
    # one m only: no recency claim
    s1 = {**s, "recency": [0.95]}
    assert [x["name"] for x in buffer_sampling.claims(
        [r for r in buffer_runs(accuracy) if r["recency_prob"] == 0.95], s1)] == \
        ["buffer.reward_m0.95"]


# ------------------------------------------------------------------------- scaling
def scaling_runs(upm, samples, cores=3):
    """``upm``, ``samples``: {n: per-seed list} of updates and samples per minute."""
    return [{"variant": f"n{n}", "seed": s, "searchers": n, "updates_per_minute": upm[n][s],
             "cores_available": cores,
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
    assert upm["verdict"] == "inconclusive" and "a verdict needs 3" in upm["reason"]
    assert scaling.claims(runs, {**s, "searchers": [1]}) == []
    # on 2 cores the second searcher takes the trainer's core: not the paper's regime
    two = by_name(scaling.claims(scaling_runs({1: [100] * 3, 2: [60, 62, 64]},
                                              {1: [10000] * 3, 2: [15000, 16000, 14000]},
                                              cores=2), s))
    assert {c["verdict"] for c in two.values()} == {"not testable here"}
    assert two["scaling.samples_per_minute.n2"]["premise"]["observed"] == "2 usable cores"


# ------------------------------------------------------------------------- race
def race_leg(variant, seed, updates, evals):
    return {"variant": variant, "seed": seed, "updates": updates, "samples_generated": 128 * updates,
            "wall_seconds": 60.0, "accuracy_before": evals[0][1], "accuracy_after": evals[-1][1],
            "staleness_mean": 0.0, "staleness_max": 0, "cores_available": 2,
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
    assert "2 seed(s) with a value; a verdict needs 3" in ttt["reason"]
    high = c["race.time_to_target_high"]  # 45%: c at 22.5 s and 45 s, b at 60 s in both
    assert high["diffs"] == {"0": pytest.approx(-37.5), "1": pytest.approx(-15.0), "2": None}
    assert rate["premise"]["met"] and rate["premise"]["observed"] == "2 usable cores"
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


def test_task_race_claims_are_not_testable_at_equal_wall_clock():
    """A task race compares TB with each baseline at equal wall clock, each at its own beta,
    where the paper compares at a matched KL: every claim is 'not testable here', whatever its
    interval, and the report says what a test needs."""
    s = {**default_settings("race_preference"), "minutes": 1.0, "eval_every": 30.0}
    runs = [task_leg(leg, seed, w) for seed, row in enumerate(
        [{"c": 0.40, "d": 0.30, "g": 0.40}, {"c": 0.34, "d": 0.25, "g": 0.34},
         {"c": 0.37, "d": 0.26, "g": 0.38}]) for leg, w in row.items()]
    c = by_name(race.claims(runs, s))
    assert set(c) == {"preference.win_rate.c-d", "preference.win_rate.c-g"}
    d = c["preference.win_rate.c-d"]  # +10, +9, +11 points: wholly above 0, yet not testable
    assert (d["ci_low"], d["ci_high"]) == interval(10.0, 1.0)  # +7.5 to +12.5
    assert d["verdict"] == "not testable here" and "Fig. 3" in d["paper"]
    assert not d["premise"]["met"] and "tradeoff" in d["premise"]["needs"]
    g = c["preference.win_rate.c-g"]  # 0, 0, -1 points: within +-3, yet not negligible
    assert g["verdict"] == "not testable here"
    text = " ".join(readings("race_preference", analyse("race_preference", runs, s), s))
    assert "NOT met" in text and "A test would need: a comparison at matched KL" in text


# ------------------------------------------------------------------------- off_policy
def dose_runs(acc, kl):
    """Runs as :func:`off_policy.measure` records them: ``acc[(arm, lag)]`` and
    ``kl[(arm, lag)]`` per seed (three seeds)."""
    return [{"variant": f"{arm}_stale{lag}", "seed": i, "arm": arm, "lag": lag,
             "accuracy": a, "behaviour_kl": kl[arm, lag][i], "clip_fraction": None}
            for (arm, lag), accs in acc.items() for i, a in enumerate(accs)]


DOSE_S = {**off_policy.settings(False), "lags": [0, 15, 60], "noclip_lags": [60],
          "common_lags": []}


def test_off_policy_claims_at_matched_lag_and_matched_nats_by_hand():
    """D at the largest lag, TB against GRPO without its clip, and D at matched behaviour KL:
    GRPO's KL reaches 0.10 at L = 60, TB's 0.10 already at L = 15, so at kappa = 0.10 TB's
    drop is its L = 15 drop and GRPO's its L = 60 drop."""
    fresh = [0.40, 0.41, 0.39]
    acc = {("tb", 0): fresh, ("grpo", 0): fresh,
           ("tb", 15): [a - d for a, d in zip(fresh, (0.01, 0.02, 0.03))],   # drops 1 2 3
           ("grpo", 15): [a - 0.02 for a in fresh],                          # 2 2 2
           ("tb", 60): [a - d for a, d in zip(fresh, (0.09, 0.10, 0.11))],   # 9 10 11
           ("grpo", 60): [a - d for a, d in zip(fresh, (0.04, 0.05, 0.06))],  # 4 5 6
           ("grpo_noclip", 60): [a - d for a, d in zip(fresh, (0.12, 0.13, 0.17))]}  # 12 13 17
    kl = {("tb", 0): [0.0] * 3, ("grpo", 0): [0.0] * 3, ("tb", 15): [0.10] * 3,
          ("grpo", 15): [0.05] * 3, ("tb", 60): [0.30] * 3, ("grpo", 60): [0.10] * 3,
          ("grpo_noclip", 60): [0.40] * 3}
    c = by_name(off_policy.claims(dose_runs(acc, kl), DOSE_S))
    assert set(c) == {"off_policy.lag", "off_policy.noclip", "off_policy.nats"}
    lag = c["off_policy.lag"]  # D = 9-4, 10-5, 11-6 = +5 +5 +5: no spread, no verdict
    assert lag["estimate"] == pytest.approx(5.0) and lag["verdict"] == "inconclusive"
    assert "no spread" in lag["reason"] and lag["premise"]["met"]
    noclip = c["off_policy.noclip"]  # 9-12, 10-13, 11-17 = -3 -3 -6: mean -4, SD sqrt(3)
    assert (noclip["ci_low"], noclip["ci_high"]) == interval(-4.0, math.sqrt(3))  # -8.3 to +0.3
    assert noclip["verdict"] == "inconclusive"
    nats = c["off_policy.nats"]  # kappa 0.10: TB 1 2 3, GRPO 4 5 6: D = -3 -3 -3, no spread
    assert nats["diffs"] == {"0": pytest.approx(-3.0), "1": pytest.approx(-3.0),
                             "2": pytest.approx(-3.0)}
    assert "kappa 0.100 nats" in nats["premise"]["observed"] and nats["premise"]["met"]
    m = off_policy.matched_kl(dose_runs(acc, kl), DOSE_S)
    assert m[0] == {"kappa": pytest.approx(0.10), "tb": pytest.approx(0.01),
                    "grpo": pytest.approx(0.04)}
    # interpolation halfway: TB's (0.10, 1) -> (0.30, 9) at 0.20 gives 5
    assert value_at([(0.0, 0.0), (0.10, 1.0), (0.30, 9.0)], 0.20) == pytest.approx(5.0)
    assert value_at([(0.0, 0.0), (0.10, 1.0)], 0.5) is None
    assert value_at([(0.0, 0.0), (0.4, 2.0), (0.2, 0.0)], 0.3) == pytest.approx(1.5)  # first


@pytest.mark.parametrize("tb_drops, grpo_drops, verdict", [
    ((1, 2, 1), (6, 7, 5), "supported"),        # D = -5 -5 -4
    ((10, 12, 11), (4, 5, 4), "contradicted"),  # D = +6 +7 +7
    ((5, 6, 4), (5, 5, 5), "negligible"),       # D = 0 +1 -1
    ((6, 7, 5), (1, 2, 1), "not testable here"),  # GRPO's own drop 1.3 < 3
])
def test_off_policy_verdict_needs_the_baseline_to_degrade(tb_drops, grpo_drops, verdict):
    fresh = [0.40, 0.41, 0.39]
    acc = {("tb", 0): fresh, ("grpo", 0): fresh,
           ("tb", 60): [a - d / 100 for a, d in zip(fresh, tb_drops)],
           ("grpo", 60): [a - d / 100 for a, d in zip(fresh, grpo_drops)]}
    kl = {k: [0.0 if k[1] == 0 else 0.2] * 3 for k in acc}
    s = {**DOSE_S, "lags": [0, 60], "noclip_lags": []}
    c = by_name(off_policy.claims(dose_runs(acc, kl), s))["off_policy.lag"]
    assert c["verdict"] == verdict
    # a missing seed is named, not dropped silently
    runs = [r for r in dose_runs(acc, kl) if not (r["variant"] == "tb_stale60" and r["seed"] == 2)]
    c = by_name(off_policy.claims(runs, s))["off_policy.lag"]
    assert c["missing_seeds"] == ["2"] and c["n"] == 2
    assert "Left out: seed(s) 2 (an arm's run is missing)" in " ".join(
        readings("off_policy", analyse("off_policy", runs, s), s))


# ------------------------------------------------------------------------- asynchrony
def test_asynchrony_claims_no_change_for_tb_and_its_drop_against_grpo():
    s = {**asynchrony.settings(False), "sync_periods": [1, 64]}
    acc = {"tb_k1": [0.40, 0.42, 0.41], "tb_k64": [0.39, 0.42, 0.42],    # -1 0 +1
           "grpo_k1": [0.41, 0.40, 0.42], "grpo_k64": [0.36, 0.34, 0.37]}  # drops 5 6 5
    runs = [{"variant": v, "seed": i, "accuracy_after": a, "staleness_mean": 20.0}
            for v, accs in acc.items() for i, a in enumerate(accs)]
    c = by_name(asynchrony.claims(runs, s))
    holds = c["asynchrony.tb_holds"]  # within +-3 (interval -2.5 to +2.5): supported
    assert holds["direction"] == 0 and holds["verdict"] == "supported"
    assert (holds["ci_low"], holds["ci_high"]) == interval(0.0, 1.0)
    vs = c["asynchrony.tb_vs_grpo"]  # TB drops +1 0 -1, GRPO 5 6 5: D = -4 -6 -6
    assert vs["estimate"] == pytest.approx(-16 / 3) and vs["verdict"] == "supported"
    for r in runs:  # data barely stale at k = 64: the claim of no change is not testable
        r["staleness_mean"] = 3.0
    assert by_name(asynchrony.claims(runs, s))["asynchrony.tb_holds"]["verdict"] == \
        "not testable here"


# ------------------------------------------------------------------------- tradeoff
def trajectory(kls, values, metric="diversity"):
    return [{"step": i, "kl": k, metric: v} for i, (k, v) in enumerate(zip(kls, values))]


def test_tradeoff_compares_at_the_larger_kl_both_runs_reached():
    """TB's trajectory reaches KL 0.2, GRPO's 0.8: at kappa 0.2 GRPO's diversity is read
    halfway along its first interval (0 -> 0.4 nats)."""
    s = default_settings("tradeoff_redteam")
    runs = []
    for seed, (tb_div, grpo_drop) in enumerate([(0.28, 0.10), (0.29, 0.12), (0.27, 0.08)]):
        runs += [{"variant": "tb", "seed": seed,
                  "trajectory": trajectory([0.0, 0.1, 0.2], [0.30, 0.29, tb_div])},
                 {"variant": "grpo", "seed": seed,
                  "trajectory": trajectory([0.0, 0.4, 0.8], [0.30, 0.30 - 2 * grpo_drop, 0.05])}]
    (c,) = tradeoff.claims(runs, s)
    # GRPO at 0.2 = 0.30 - grpo_drop; TB - GRPO = tb_div - 0.30 + grpo_drop = 0.08 0.11 0.05
    assert [round(v, 6) for v in c["diffs"].values()] == [0.08, 0.11, 0.05]
    assert c["premise"]["met"] and c["verdict"] == "supported"
    m = tradeoff.matched(runs, "tb", "grpo", "diversity")
    assert m[1] == {"kappa": pytest.approx(0.2), "tb": pytest.approx(0.29),
                    "base": pytest.approx(0.18)}  # GRPO halfway along 0 -> 0.4 nats
    for r in runs:  # trajectories that meet only near the start: not testable
        r["trajectory"] = [dict(e, kl=e["kl"] / 10) for e in r["trajectory"]]
    (c,) = tradeoff.claims(runs, s)
    assert c["verdict"] == "not testable here" and "kappa 0.020" in c["premise"]["observed"]


# ------------------------------------------------------------------------- the rule itself
def test_a_premise_not_met_never_gives_a_verdict_on_the_numbers():
    """Whatever the differences and the claim's direction, premise_met=False gives 'not
    testable here'; with the premise met the same numbers give each of the other four."""
    from tba_lab.lab.experiments.common import claim_test

    cases = {"supported": [0.05, 0.06, 0.07], "contradicted": [-0.05, -0.06, -0.07],
             "negligible": [0.001, -0.002, 0.0015], "inconclusive": [-0.05, 0.06, 0.01]}
    for verdict, diffs in cases.items():
        assert claim_test("c", diffs, +1, 0.03)["verdict"] == verdict
        for direction in (1, -1, 0):
            assert claim_test("c", diffs, direction, 0.03, premise_met=False)["verdict"] == \
                "not testable here"
    assert set(cases) | {"not testable here"} == set(VERDICTS)


def test_no_verdict_on_fewer_than_three_seeds_or_on_zero_spread():
    from tba_lab.lab.experiments.common import claim_test

    two = claim_test("c", [0.05, 0.07], 1, 0.03)  # far above delta, yet two seeds
    assert two["verdict"] == "inconclusive" and two["ci_low"] is not None
    flat = claim_test("c", [0.02, 0.02, 0.02], 1, 0.03)  # +2 +2 +2: a zero-width interval
    assert flat["verdict"] == "inconclusive" and flat["min_detectable_effect"] == 0.0
    assert "no spread" in flat["reason"]
    assert claim_test("c", [0.0] * 4, 0, 0.03)["verdict"] == "inconclusive"
    # delta is the same on both sides: +-2 points either way is negligible
    assert claim_test("c", [0.018, 0.02, 0.022], 1, 0.03)["verdict"] == "negligible"
    assert claim_test("c", [-0.018, -0.02, -0.022], 1, 0.03)["verdict"] == "negligible"


# ------------------------------------------------------------------------- the committed files
def check_fields(claims):
    assert claims, "no claim recorded"
    for c in claims:
        assert c["verdict"] in VERDICTS and c["paper"] and c["estimand"]
        if c["n"] < 2:  # e.g. a target no seed reached on both legs: named, no verdict
            assert c["ci_low"] is None and c["missing_seeds"]
            assert c["verdict"] in ("inconclusive", "not testable here"), c["claim"]
        else:
            assert all(c[f] is not None for f in FIELDS), c["claim"]
            assert c["ci_low"] <= c["estimate"] <= c["ci_high"]
        p = c["premise"]
        assert p["condition"] and p["observed"] and isinstance(p["met"], bool)
        if not p["met"]:
            assert c["verdict"] == "not testable here" and p["needs"], c["claim"]


def committed_results() -> list[Path]:
    """Every results file of a sweep under docs/results/ whose analysis holds claims."""
    found = [(p, json.loads(p.read_text())) for p in sorted(RESULTS.rglob("*.json"))]
    return [p for p, d in found if isinstance(d, dict) and (d.get("analysis") or {}).get("claims")]


@pytest.mark.parametrize("path", committed_results(), ids=lambda p: str(p.relative_to(RESULTS)))
def test_committed_results_carry_each_claims_premise_interval_and_verdict(path):
    """Each committed sweep (``tba-lab experiment NAME``, or ``--report-only`` of an older
    one): premise, estimate, interval, detectable effect and verdict per claim, equal to what
    the stored runs give today, and its report says them."""
    from tba_lab.lab.experiments import module

    data = json.loads(path.read_text())
    claims = data["analysis"]["claims"]
    check_fields(claims)
    mod = module(data["experiment"])
    assert json.loads(json.dumps(mod.claims(data["runs"], data["settings"]))) == claims
    report = (path.parent / "report.md" if path.name == "results.json"
              else path.with_suffix(".md")).read_text()
    assert VERDICT_RULE in report and all(f"**{c['verdict']}**" in report for c in claims)


def test_the_committed_results_include_every_claim_of_the_scorecard():
    names = {json.loads(p.read_text())["experiment"] for p in committed_results()}
    assert {"beta", "buffer", "scaling", "off_policy", "minimal", "default"} <= names


@pytest.mark.parametrize("folder, mod, file", [("race_preference", race, "task_race.json"),
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


def test_nb07_prints_a_recorded_sweep_with_its_table_premises_and_verdicts(capsys):
    from tba_lab.lab.course.nb07 import print_recorded

    data = print_recorded(RESULTS / "beta")
    out = capsys.readouterr().out
    assert out.startswith("`tba-lab experiment beta`, started 2026-12-02T07:28:40 on 2 cores, "
                          "seeds 0 1 2; design commit not recorded")
    assert "| const_small | 41.7% (37.0% to 44.0%) |" in out  # the report's table
    assert "premise: both settings made the same number of updates in every seed: met" in out
    assert out.count("->  ") == len(data["analysis"]["claims"]) == 2
    print_recorded(RESULTS / "off_policy" / "lag15_2026-12-06")  # a preset's own table
    out = capsys.readouterr().out
    assert "| arm | lag L | drop (points) | behaviour KL (nats) | clip fraction |" in out
    assert "| grpo | 15 | +0.9 (+0.3 to +1.5) | 0.069 | 0.016 |" in out
    assert "NOT TESTABLE HERE (the premise was not met)" in out
