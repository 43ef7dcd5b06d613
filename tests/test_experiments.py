"""`tba-lab experiment`: time to target, the sweep runner's generated readings and table, the
diversity and KL measurements, bad input, and what a SMOKE run of all four through the real
trainer leaves (``assert_smoke_outputs``, applied to notebook 07's runs in the reproduce test)."""
import json
import math
import os
import subprocess
from pathlib import Path
import sys

import pytest
import torch

from tba_lab.eval import sample_diversity
from tba_lab.lab.experiments import (BENCHMARKS, EXPERIMENTS, ExperimentError, analyse,
                                     default_settings, experiment_settings, readings,
                                     run_experiment)
from tba_lab.lab.experiments import module as ex_module
from tba_lab.lab.experiments import beta, buffer_sampling, default, off_policy, race, scaling
from tba_lab.lab.experiments.common import spread, time_to_target
from tba_lab.rollout.backend import Generations

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def rows(*pairs):
    return [{"wall_seconds": t, "accuracy": a} for t, a in pairs]


# ------------------------------------------------------------------------- time to target
def test_time_to_target_interpolates_linearly_between_the_evaluations_around_the_crossing():
    # 0.38 at 15 s, 0.44 at 30 s: 0.40 is a third of the way, at 20 s
    assert time_to_target(rows((0, 0.35), (15, 0.38), (30, 0.44), (45, 0.47)), 0.40) == \
        pytest.approx(20.0)
    assert time_to_target(rows((30, 0.44), (0, 0.35), (15, 0.38)), 0.40) == pytest.approx(20.0)
    # the FIRST crossing counts, even if the accuracy falls back below later
    assert time_to_target(rows((0, 0.30), (10, 0.50), (20, 0.30), (30, 0.60)), 0.40) == \
        pytest.approx(5.0)
    assert time_to_target(rows((0, 0.42), (15, 0.30)), 0.40) == 0.0      # reached before training
    assert time_to_target(rows((0, 0.30), (12, 0.40)), 0.40) == pytest.approx(12.0)
    assert time_to_target(rows((0, 0.35), (15, 0.39)), 0.40) is None     # never reached
    assert time_to_target(rows((0, 0.3), (30, 0.5), (60, 0.2), (90, 0.6)), 0.4) == pytest.approx(15.0)
    # a slow race leg's evaluations land late (36, 71, 105 s): 45% is first reached at 71 s
    # (48%), from 41% at 36 s: 36 + 35 * (45 - 41) / (48 - 41) = 56 s
    late = rows((0, 0.35), (36, 0.41), (71, 0.48), (105, 0.41), (120.4, 0.50))
    assert time_to_target(late, 0.45) == pytest.approx(56.0)
    evals = rows((0, 0.35), (61.2, 0.39), (122, 0.41), (180.5, 0.40))
    assert time_to_target(evals, 0.40) == pytest.approx(61.2 + 60.8 * 0.5)  # 91.6
    assert time_to_target(evals, 0.35) == 0.0 and time_to_target(evals, 0.5) is None
    with pytest.raises(ValueError, match="empty"):
        time_to_target([], 0.4)


def test_spread():
    s = spread([0.1, None, 0.3])
    assert (s["mean"], s["min"], s["max"], s["n"], s["missing"]) == pytest.approx((0.2, 0.1, 0.3, 2, 1))
    assert spread([None])["mean"] is None and spread([None])["missing"] == 1


# ------------------------------------------------------------------------- readings
def off_policy_runs(accuracy: dict) -> list[dict]:
    """Runs as :func:`off_policy.measure` records them: ``accuracy[(arm, lag)]`` per seed."""
    return [{"variant": f"{a}_stale{lag}", "seed": i, "arm": a, "lag": lag,
             "accuracy": acc, "behaviour_kl": 0.4 * lag / 15,
             "clip_fraction": 0.01 if a == "grpo" else None,
             "evals": [{"step": 0, "accuracy": 0.34}, {"step": 20, "accuracy": acc - 0.01},
                       {"step": 40, "accuracy": acc + 0.01}]}
            for (a, lag), accs in accuracy.items() for i, acc in enumerate(accs)]


FRESH = [0.40, 0.42, 0.38, 0.41, 0.39]
LAG15 = {"lags": [0, 15], "noclip_lags": [], "common_lags": []}  # the first design's two lags
OFF_POLICY_CLAIMS = [  # (TB at L = 15, GRPO at L = 15, D per seed in points, verdict)
    # TB loses 1 point on every seed, GRPO 6 +- 1: D = -5 +- 1, wholly below -3
    ([a - 0.01 for a in FRESH], [a - d for a, d in zip(FRESH, (0.05, 0.06, 0.07, 0.06, 0.06))],
     [-4, -5, -6, -5, -5], "supported"),
    # TB loses 10, GRPO 5: D = +5, wholly above +3
    ([a - d for a, d in zip(FRESH, (0.09, 0.10, 0.11, 0.10, 0.10))], [a - 0.05 for a in FRESH],
     [4, 5, 6, 5, 5], "contradicted"),
    # both lose about 4 points: D within +-1 of 0, wholly inside +-3 (no effect of 3 points)
    ([a - 0.04 for a in FRESH], [a - d for a, d in zip(FRESH, (0.04, 0.05, 0.03, 0.04, 0.04))],
     [0, -1, 1, 0, 0], "negligible"),
    # D from -8 to +6: the interval spans 0 and reaches past +-3
    ([a - d for a, d in zip(FRESH, (0.03, 0.11, 0.03, 0.09, 0.05))], [a - 0.05 for a in FRESH],
     [-2, 6, -2, 4, 0], "inconclusive"),
    # GRPO itself loses 1 point: the premise fails, whatever D is
    ([a - 0.06 for a in FRESH], [a - 0.01 for a in FRESH], [5, 5, 5, 5, 5], "not testable here"),
]


@pytest.mark.parametrize("tb15, grpo15, d_points, verdict", OFF_POLICY_CLAIMS)
def test_off_policy_claim_is_the_paired_difference_of_drops(tb15, grpo15, d_points, verdict):
    """D = TB's drop - GRPO's drop per seed, its mean and 95% t-interval (t(0.975, 4) =
    2.776445) and the verdict by the rule written before the runs (the matched-nats claim
    beside it: here both losses' KL grows alike with the lag, so it is the same D)."""
    import statistics

    runs = off_policy_runs({("tb", 0): FRESH, ("grpo", 0): FRESH, ("tb", 15): tb15,
                            ("grpo", 15): grpo15})
    s = experiment_settings("off_policy", settings=LAG15)
    a = analyse("off_policy", runs, s)
    c, nats = a["claims"]
    assert [round(v, 6) for v in c["diffs"].values()] == d_points
    assert [round(v, 6) for v in nats["diffs"].values()] == d_points
    mean, sd = statistics.mean(d_points), statistics.stdev(d_points)
    half = 2.776445 * sd / 5 ** 0.5
    assert c["estimate"] == pytest.approx(mean, abs=1e-6)
    if sd:
        assert (c["ci_low"], c["ci_high"]) == (pytest.approx(mean - half, abs=1e-4),
                                               pytest.approx(mean + half, abs=1e-4))
        assert c["min_detectable_effect"] == pytest.approx(
            (2.776445 + 0.940965) * sd / 5 ** 0.5, abs=1e-4)
    assert c["verdict"] == verdict and c["delta"] == 3.0
    text = " ".join(readings("off_policy", a, s))
    assert f"**{verdict}**" in text and "behaviour KL per response" in text
    assert "TB loses less accuracy than GRPO on rollouts 15 updates stale, each at its tuned " \
           "rate (paper: Table 1" in text
    assert f"D = TB's drop - GRPO's drop from L = 0 to L = 15, per seed). Premise: GRPO's own " \
           f"drop at L = 15 is at least 3 points; " in text
    assert f"Estimate {mean:+.1f} points" in text


def test_claim_test_rule_at_its_edges():
    """One seed gives no interval; a claim of no change (direction 0) is supported inside
    +-delta and contradicted outside; a non-finite difference or a bad direction is refused."""
    from tba_lab.lab.experiments.common import claim_test

    assert claim_test("c", [0.01, -0.01, 0.0, 0.005], 0, 0.03)["verdict"] == "supported"
    assert claim_test("c", [0.05, 0.06, 0.07], 0, 0.03)["verdict"] == "contradicted"
    assert claim_test("c", [-0.05, 0.06, 0.0], 0, 0.03)["verdict"] == "inconclusive"

    one = claim_test("c", [0.05], 1, 0.03, scale=100)
    assert (one["estimate"], one["ci_low"], one["verdict"]) == (5.0, None, "inconclusive")
    missing = claim_test("c", [0.05, None, 0.07], 1, 0.03, scale=100)
    assert (missing["n"], missing["missing"], missing["estimate"]) == (2, 1, pytest.approx(6.0))
    assert claim_test("c", [0.04, 0.05, 0.06], 1, 0.03)["verdict"] == "supported"
    for bad in (dict(diffs=[float("nan"), 0.1]), dict(direction=2), dict(delta=0.0)):
        with pytest.raises(ValueError):
            claim_test(**{"claim": "c", "diffs": [0.1, 0.2], "direction": 1, "delta": 0.03, **bad})


def test_report_only_rewrites_the_readings_from_the_stored_runs(tmp_path, capsys):
    """``tba-lab experiment NAME --report-only`` repeats no run: it redoes the analysis,
    figure, readings and report.md from results.json, keeps the recorded date and seeds, and
    refuses flags that would have no effect."""
    import tba_lab.lab.experiments as ex
    from tba_lab import cli

    s = experiment_settings("off_policy", settings=LAG15)
    runs = off_policy_runs({("tb", 0): FRESH, ("grpo", 0): FRESH,
                            ("tb", 15): [a - 0.01 for a in FRESH],
                            ("grpo", 15): [a - 0.06 for a in FRESH]})
    out = tmp_path / "off_policy"
    out.mkdir()
    old = {"experiment": "off_policy", "smoke": False, "started": "2026-01-01T00:00:00",
           "cores": 2, "seeds": [0, 1, 2, 3, 4], "settings": s, "estimate_seconds": 60.0,
           "seconds": 61.0, "runs": runs, "analysis": {}, "readings": ["an old reading"]}
    (out / "results.json").write_text(json.dumps(old))  # written before --config existed
    assert cli.main(["experiment", "off_policy", "--report-only", "--output-dir", str(tmp_path)]) == 0
    said = "Estimate -5.0 points, 95% interval -5.0 to -5.0 over 5 seeds"
    assert said in capsys.readouterr().out
    data = json.loads((out / "results.json").read_text())
    assert data["started"] == old["started"] and data["config"] == {}
    # the runs as stored, each given the recorded cores (rows older than scaling's premise)
    assert data["runs"] == [{**r, "cores_available": 2} for r in runs]
    assert "an old reading" not in data["readings"] and any(said in r for r in data["readings"])
    assert data["analysis"]["claims"][0]["verdict"] == "inconclusive"  # -5 on every seed
    report = (out / "report.md").read_text()
    assert "2026-01-01T00:00:00" in report and said in report
    assert report.index("## Design (fixed before the runs)") < report.index(said)
    assert (out / "off_policy.png").stat().st_size > 10_000

    assert cli.main(["experiment", "off_policy", "--report-only", "--seeds", "4",
                     "--output-dir", str(tmp_path)]) == 2
    assert "--report-only runs nothing, so --seeds would have no effect" in capsys.readouterr().err
    for name, said in (("beta", "no finished experiment"), ("all", "rewrites one experiment")):
        assert cli.main(["experiment", name, "--report-only", "--output-dir", str(tmp_path)]) == 2
        assert said in capsys.readouterr().err
    with pytest.raises(ExperimentError, match="rewrites one experiment"):
        ex.rewrite_report("all", tmp_path)


def test_readings_and_table_follow_the_numbers():
    """The runner's generated reading: a sentence per metric with a value (each variant's mean
    and min to max over seeds, as the metric's formatter prints it), then each claim's sentence
    and the verdict rule once; the table holds the same cells."""
    from tba_lab.lab.experiments import table
    from tba_lab.lab.experiments.common import VERDICT_RULE

    s = {**experiment_settings("buffer"), "recency": [0.0, 0.95], "inv_temp_at": [0.95]}
    cells = {"m0_inv0": ([0.30, 0.32], [2.0, 2.2]), "m0.95_inv0": ([0.45, 0.47], [1.0, 1.2]),
             "m0.95_inv1": ([0.40, 0.44], [2.5, 2.7])}
    runs = [{"variant": v, "seed": seed, "accuracy_after": acc[seed],
             "div_distinct_correct": div[seed], "staleness_mean": 2.0}
            for seed in (0, 1) for v, (acc, div) in cells.items()]
    a = analyse("buffer", runs, s)
    text = readings("buffer", a, s)
    assert text[0] == ("held-out accuracy after training: m0_inv0 31.0% (30.0% to 32.0%); "
                       "m0.95_inv0 46.0% (45.0% to 47.0%); m0.95_inv1 42.0% (40.0% to 44.0%).")
    assert text[1] == ("distinct correct of K = 8 samples: m0_inv0 2.10 (2.00 to 2.20); "
                       "m0.95_inv0 1.10 (1.00 to 1.20); m0.95_inv1 2.60 (2.50 to 2.70).")
    assert not any(t.startswith(("pass@K", "share of stored")) for t in text)  # no values
    # recency: +15 points in both seeds; reward at m = 0.95: -5 and -3, t(0.975, 1) = 12.706
    # these rows record no generation rate, so the premise (generation outpaces training) fails
    assert "m = 0, inv_temp 0, same seed, equal updates). Premise: the searchers generate at " \
           "least twice" in text[3] and "NOT met (generated / trained unrecorded)" in text[3]
    assert "Estimate +15.0 points, 95% interval +15.0 to +15.0 over 2 seeds" in text[3]
    assert "**not testable here**" in text[3]
    assert "Estimate -4.0 points, 95% interval -16.7 to +8.7 over 2 seeds" in text[4]
    assert "**not testable here**" in text[4] and text[-1] == VERDICT_RULE
    rows = table("buffer", a, s)
    assert rows[0].startswith("| variant | held-out accuracy after training | distinct correct")
    assert rows[2] == ("| m0_inv0 | 31.0% (30.0% to 32.0%) | 2.10 (2.00 to 2.20) | n/a | n/a "
                       "| 2.0 (2.0 to 2.0) |")


def test_share_over_k_counts_prompts_with_more_than_k_rollouts(tmp_path):
    """Reward prioritisation needs a prompt holding more than K rollouts; the measure counts
    them in a saved buffer (here 1 of 3 prompts holds 6 > K = 4)."""
    from tba_lab.buffer import ReplayBuffer, Rollout

    buffer = ReplayBuffer(capacity_per_prompt=8, recency_prob=0.0, inv_temp=1.0, seed=0)
    buffer.add([Rollout(prompt_id=p, prompt_ids=[1], response_ids=[2, i], reward=float(i),
                        ref_token_logps=[0.0, 0.0], behaviour_token_logps=[0.0, 0.0], version=0)
                for p, n in ((0, 4), (1, 6), (2, 4)) for i in range(n)])
    buffer.save(tmp_path / "buffer.pt")
    assert buffer_sampling.share_over_k(tmp_path / "buffer.pt", 4) == pytest.approx(1 / 3)
    assert buffer_sampling.share_over_k(tmp_path / "missing.pt", 4) is None
    # and the reason it matters: with exactly K items, K drawn without replacement are all of
    # them at any inv_temp
    groups = {pid: sorted(r.response_ids[1] for r in buffer._by_reward(pid, 4)) for pid in (0, 2)}
    assert groups == {0: [0, 1, 2, 3], 2: [0, 1, 2, 3]}


# ------------------------------------------------------------------------- diversity
class FakeTokenizer:
    eos_token_id = pad_token_id = 0

    def __call__(self, texts):
        return {"input_ids": [[100 + int(t.split()[1])] for t in texts]}  # "problem i" -> [100+i]

    def batch_decode(self, responses, skip_special_tokens=True):
        return [" ".join(str(t) for t in r if t != 0) for r in responses]


class FakeBackend:
    """Fixed K = 4 responses per problem (0 is EOS)."""
    eos_ids = [0]
    RESPONSES = {0: [[5, 0], [5, 0], [6, 0], [7, 0]],       # correct 5, 6: distinct correct 2
                 1: [[9, 0], [9, 1, 0], [8, 0], [8, 0]],    # correct 9, "9 1": 2 token sequences
                 2: [[4, 0], [4, 0], [4, 0], [4, 0]]}       # none correct, one distinct

    def __init__(self):
        self.tokenizer = FakeTokenizer()

    def generate(self, prompts, num_generations, temperature, max_new_tokens):
        assert num_generations == 4 and temperature == 0.6
        out = [r for p in prompts for r in self.RESPONSES[p[0] - 100]]
        return Generations(out, [[-1.0] * len(r) for r in out])


class FakeTask:
    name = "fake"

    def format_prompt(self, problem):
        return f"problem {problem['i']}"

    def rewards(self, problems, completions):
        return [1.0 if c.split()[0] in p["good"] else 0.0 for p, c in zip(problems, completions)]


@pytest.mark.parametrize("batch_size", [50, 2])
def test_sample_diversity_counts_distinct_correct_responses(batch_size):
    problems = [{"i": 0, "good": {"5", "6"}}, {"i": 1, "good": {"9"}}, {"i": 2, "good": {"3"}}]
    d = sample_diversity(FakeTask(), FakeBackend(), problems, k=4, max_new_tokens=5,
                         temperature=0.6, batch_size=batch_size)
    assert d["distinct_correct"] == pytest.approx((2 + 2 + 0) / 3)
    assert d["distinct"] == pytest.approx((3 + 3 + 1) / 3)
    assert d["pass_at_k"] == pytest.approx(2 / 3)
    assert d["correct_fraction"] == pytest.approx(5 / 12)
    assert (d["n"], d["k"]) == (3, 4)


def test_sample_diversity_refuses_greedy_and_empty_input():
    with pytest.raises(ValueError, match="temperature"):
        sample_diversity(FakeTask(), FakeBackend(), [{"i": 0, "good": set()}], 4, 5, 0.0)
    with pytest.raises(ValueError, match="empty"):
        sample_diversity(FakeTask(), FakeBackend(), [], 4, 5, 0.6)


# ------------------------------------------------------------------------- KL to the reference
def test_kl_estimate_equals_the_hand_computed_value():
    lp = torch.log(torch.tensor([[0.5, 0.5, 0.9], [0.5, 1.0, 0.9]]))
    ref = torch.log(torch.tensor([[0.25, 0.5, 0.1], [0.125, 1.0, 0.1]]))
    mask = torch.tensor([[True, True, False], [True, True, False]])  # the third token is padding
    # row 0: log 2 + log 1; row 1: log 4 + log 1; mean 1.5 log 2
    assert beta.kl_estimate(lp, ref, mask) == pytest.approx(1.5 * math.log(2), rel=1e-6)


def test_kl_to_reference_is_zero_for_the_reference_itself_and_not_for_another_policy(tiny):
    import copy

    from tba_lab.rollout.backend import TransformersBackend
    from tba_lab.tasks.arithmetic import ArithmeticTask

    model, tok, train = tiny
    backend = TransformersBackend(model, tok)
    torch.manual_seed(0)
    same = beta.kl_to_reference(model, model, backend, ArithmeticTask(None), train[:3], 4, 6, 0.7)
    assert same["kl"] == pytest.approx(0.0, abs=1e-6) and same["n"] == 12
    other = copy.deepcopy(model)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.5 * torch.randn_like(p))
    torch.manual_seed(0)
    diff = beta.kl_to_reference(model, other, backend, ArithmeticTask(None), train[:3], 4, 6, 0.7)
    assert abs(diff["kl"]) > 1e-3


# ------------------------------------------------------------------------- bad input
def test_cli_refuses_an_unknown_name_listing_the_names(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tba_lab", "experiment", "offpolicy", "--smoke",
                        "--output-dir", str(tmp_path)], capture_output=True, text=True,
                       timeout=120, env=ENV)
    assert r.returncode == 2
    for name in [*EXPERIMENTS, "all", *BENCHMARKS]:
        assert name in r.stderr
    assert "offpolicy" in r.stderr and "Traceback" not in r.stderr
    assert not any(tmp_path.iterdir())


def test_empty_seeds_and_unknown_settings_are_refused(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tba_lab", "experiment", "beta", "--seeds"],
                       capture_output=True, text=True, timeout=120, env=ENV)
    assert r.returncode == 2 and "--seeds" in r.stderr
    with pytest.raises(ExperimentError, match="--seeds"):
        run_experiment("beta", smoke=True, seeds=[], output_dir=tmp_path)
    with pytest.raises(ExperimentError, match="repeated"):
        run_experiment("beta", smoke=True, seeds=[1, 1], output_dir=tmp_path)
    with pytest.raises(ExperimentError, match="no setting 'targte'"):
        experiment_settings("scaling", settings={"targte": 0.5})
    with pytest.raises(ExperimentError, match="--set target=40"):
        experiment_settings("scaling", settings={"target": 40})
    for bad in ([], [0, 2], [2, 2], "2,2"):
        with pytest.raises(ExperimentError, match="--set searchers="):
            experiment_settings("scaling", settings={"searchers": bad})
    assert not any(tmp_path.iterdir())


def test_set_flags_set_the_settings(tmp_path, capsys, monkeypatch):
    """`tba-lab experiment scaling --set searchers=8,1,2,4` (a many-core machine) runs n1..n8
    in order; the setting is refused for another experiment. `--set KEY=VALUE` sets any
    setting in its default's type; a bad value or key stops the command."""
    import tba_lab.lab.experiments as ex
    from tba_lab import cli

    seen = {}
    monkeypatch.setattr(ex, "run_experiment", lambda name, smoke, seeds, out, settings=None, **kw:
                        seen.update(name=name, settings=settings) or {"report": "r", "readings": []})
    assert cli.main(["experiment", "scaling", "--set", "searchers=8,1,2,4",
                     "--output-dir", str(tmp_path)]) == 0
    s = experiment_settings("scaling", settings=seen["settings"])
    assert [v for v, _ in scaling.variants(s)] == ["n1", "n2", "n4", "n8"]
    assert cli.main(["experiment", "beta", "--set", "searchers=2"]) == 2
    assert "experiment 'beta' has no setting 'searchers'" in capsys.readouterr().err
    assert cli.main(["experiment", "race", "--set", "target=0.45", "minutes=3", "legs=a,c",
                     "--output-dir", str(tmp_path)]) == 0
    s = experiment_settings("race", settings=seen["settings"])
    assert (s["minutes"], s["legs"], s["target"], s["eval_size"]) == (3.0, ["a", "c"], 0.45, 1000)
    assert cli.main(["experiment", "race", "--set", "minutes=3", "--set", "legs=a,c",
                     "--output-dir", str(tmp_path)]) == 0  # --set repeated: both count
    assert seen["settings"] == {"minutes": "3", "legs": "a,c"}
    s = experiment_settings("default", settings={"other": 1234567, "minutes": "2"})
    assert (s["other"], s["minutes"]) == ("1234567", 2)  # a commit, and the config's type
    s = experiment_settings("default", settings={"other": "HEAD", "report_to": "tensorboard"})
    assert [(v, o.get("report_to")) for v, o in default.variants(s)] == [
        ("other", None), ("this", ["tensorboard"])]  # the other checkout may predate report_to
    head = subprocess.run(["git", "-C", str(default.REPO_DIR), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert s["other"] == head  # resolved once: a commit made during the runs changes nothing
    with pytest.raises(ExperimentError, match="not a folder and not a commit"):
        default.variants(experiment_settings("default", settings={"other": "no-such-commit"}))
    seen.clear()
    for args, said in ((["--set", "minutes=abc"], "minutes takes a float"),
                       (["--set", "minutes"], "write KEY=VALUE"),
                       (["--set", "legz=a"], "no setting 'legz'"),
                       (["--set", "legs=a,x"], "unknown leg(s) ['x']")):
        assert cli.main(["experiment", "race", *args, "--output-dir", str(tmp_path)]) == 2
        assert said in capsys.readouterr().err and not seen


def test_config_applies_to_every_run_and_refuses_what_the_experiment_sets(tmp_path, capsys,
                                                                         monkeypatch):
    """``--config`` (``with_config``) puts RunConfig fields under every variant's overrides:
    the grid stays the experiment's, a field it sets is refused by name, a bad field stops
    the command before any run, and the report's header shows what every run got."""
    import tba_lab.lab.experiments as ex
    from tba_lab import cli
    from tba_lab.config import ConfigError, from_dict
    from tba_lab.lab.experiments.common import header

    plan = buffer_sampling.variants(experiment_settings("buffer"))
    lr = {"training": {"learning_rate": 1.25e-5}}
    merged = ex.with_config("buffer", plan, lr)
    assert [v for v, _ in merged] == [v for v, _ in plan]
    for (_, o), (_, m) in zip(plan, merged):
        cfg, base = from_dict(m), from_dict(o)
        assert cfg.training.learning_rate == 1.25e-5 and base.training.learning_rate != 1.25e-5
        assert (cfg.algo, cfg.async_.sync_period, cfg.training.max_steps) == (
            base.algo, base.async_.sync_period, base.training.max_steps)
    assert ex.with_config("buffer", plan, None) is plan
    for bad, field in (({"async": {"mode": "sync"}}, "async.mode"),
                       ({"buffer": {"recency_prob": 0.5}}, "buffer.recency_prob"),
                       ({"training": {"max_steps": 9}}, "training.max_steps"), ({"seed": 3}, "seed")):
        with pytest.raises(ExperimentError, match=rf"--config sets {field}, which experiment "
                                                  r"'buffer' sets itself .*remove it"):
            ex.with_config("buffer", plan, bad)
    with pytest.raises(ConfigError, match="trainin"):
        ex.with_config("buffer", plan, {"trainin": {"learning_rate": 1e-5}})
    with pytest.raises(ExperimentError, match="YAML mapping"):
        ex.with_config("buffer", plan, [1, 2])
    assert "| run config (`--config`, every run) | `{\"training\": {\"learning_rate\": 1.25e-05}}` |" \
        in header("off_policy", "t", "c", [0], False, {}, "now", 60, 1, 60, lr)
    assert not any("--config" in line for line in header("b", "t", "c", [0], False, {}, "now", 60, 1, 60))

    seen = {}
    monkeypatch.setattr(ex, "run_experiment", lambda *a, config=None, **k:
                        seen.update(config=config) or {"report": "r", "readings": []})
    good, typo, clash = (tmp_path / f"{n}.yaml" for n in ("good", "typo", "clash"))
    good.write_text("training:\n  learning_rate: 1.25e-5\n")
    typo.write_text("trainin:\n  learning_rate: 1.25e-5\n")
    clash.write_text("async:\n  mode: sync\n")
    assert cli.main(["experiment", "buffer", "--config", str(good)]) == 0
    assert seen["config"] == lr
    seen.clear()
    assert cli.main(["experiment", "off_policy", "--config", str(good)]) == 2  # its tuned rates
    assert "sets training.learning_rate, which experiment 'off_policy' sets itself" in \
        capsys.readouterr().err and not seen
    for path, said in ((typo, "unknown config key 'trainin'"), (clash, "async.mode"),
                       (tmp_path / "none.yaml", "not found")):
        assert cli.main(["experiment", "buffer", "--config", str(path)]) == 2
        assert said in capsys.readouterr().err and not seen  # refused before any run


def test_default_runs_other_then_this_per_seed_and_compares_them(tmp_path, monkeypatch):
    """`tba-lab experiment default --set other=DIR`: a `tba-lab train` process per run with
    the checkout's package first on PYTHONPATH, `other` then `this` per seed, and a reading
    that calls rates whose seed ranges overlap within noise (processes faked)."""
    calls = []
    upm = {("other", 0): 121.0, ("this", 0): 122.4, ("other", 1): 117.0, ("this", 1): 118.3}

    def fake_train(cmd, env, cwd, check, stdout):
        out, seed = Path(cmd[cmd.index("--output-dir") + 1]), int(cmd[cmd.index("--seed") + 1])
        label = "this" if Path(cwd) == default.REPO_DIR else "other"
        calls.append((seed, label, env["PYTHONPATH"], cmd[3:4] + cmd[-2:]))
        out.mkdir(parents=True)
        (out / "summary.json").write_text(json.dumps({
            "seed": seed, "held_out_metrics": ["accuracy"], "accuracy_before": 0.346,
            "accuracy_after": 0.494 - 0.008 * seed, "trainer_steps": 1102, "samples_generated": 141056,
            "updates_per_minute": upm[label, seed], "staleness_mean": 1.0, "staleness_max": 2}))
        (out / "eval.jsonl").write_text(json.dumps({"step": 0, "wall_seconds": 0.0, "accuracy": 0.346}) + "\n")
        (out / "metrics.jsonl").write_text("".join(json.dumps(
            {"update_seconds": u, "reference_seconds": 0.05}) + "\n" for u in (9.0, 0.3, 0.2, 0.4)))

    monkeypatch.setattr(default.subprocess, "run", fake_train)
    (tmp_path / "old").mkdir()
    r = run_experiment("default", seeds=[0, 1], output_dir=tmp_path / "out", log=None,
                       settings={"other": str(tmp_path / "old")})
    assert [(c[0], c[1]) for c in calls] == [(0, "other"), (0, "this"), (1, "other"), (1, "this")]
    assert calls[0][2] == str(tmp_path / "old") and calls[1][2] == str(default.REPO_DIR)
    assert calls[1][3] == ["train", "--task", "arithmetic"]  # the defaults: no config file
    report = (tmp_path / "out" / "default" / "report.md").read_text()
    # the median update seconds leave out the first update's 9 s
    assert ("| this | 49.0% (48.6% to 49.4%) | +14.4 (+14.0 to +14.8) | 120.3 (118.3 to 122.4) "
            "| 0.300 (0.300 to 0.300) | 0.050 (0.050 to 0.050) | 1.0 (1.0 to 1.0) |") in report
    assert r["readings"][1] == ("accuracy gain (points): other +14.4 (+14.0 to +14.8); "
                                "this +14.4 (+14.0 to +14.8).")
    assert r["readings"][2] == ("trainer updates per minute: other 119.0 (117.0 to 121.0); "
                                "this 120.3 (118.3 to 122.4).")
    # claims of no change: the gains are equal (0 +- 0 points), the rates 1.13% apart (+1.16%
    # and +1.11%): both intervals lie within the deltas of 3 points and 10%, but two seeds
    # give no verdict
    gain, rate = r["analysis"]["claims"]
    assert (gain["estimate"], gain["verdict"], gain["direction"]) == (0.0, "inconclusive", 0)
    assert rate["estimate"] == pytest.approx(100 * (122.4 / 121 + 118.3 / 117 - 2) / 2)
    assert rate["verdict"] == "inconclusive" and rate["ci_high"] < 10
    assert "a verdict needs 3 or more" in rate["reason"] and gain["premise"]["met"]
    assert (tmp_path / "out" / "default" / "default.png").stat().st_size > 1000


def test_full_settings_and_the_seed_major_plan():
    s = experiment_settings("off_policy")
    assert s["lags"] == [0, 4, 8, 15, 30, 60] and s["updates"] == 120 and s["eval_size"] == 1000
    plan = [v for v, _ in off_policy.variants(s)]
    assert plan[:4] == ["tb_stale0", "grpo_stale0", "tb_lr1.25e-05_stale0",
                        "grpo_lr1.25e-05_stale0"]  # lag-major: a stopped sweep has whole lags
    assert len(plan) == 19 and "grpo_noclip_stale0" not in plan  # no clip shares GRPO's L = 0
    noclip = dict(off_policy.variants(s))["grpo_noclip_stale60"]
    assert noclip["grpo"]["epsilon"] == math.inf and noclip["training"]["learning_rate"] == 2.5e-5
    assert dict(off_policy.variants(s))["tb_lr1.25e-05_stale60"]["training"]["learning_rate"] \
        == 1.25e-5
    with pytest.raises(ExperimentError, match="lags=0,15"):
        off_policy.variants({**s, "lags": [15]})
    from tba_lab.config import from_dict

    for name in [*EXPERIMENTS, *BENCHMARKS]:  # every variant is a valid config of the trainer
        for smoke in (False, True):
            for _, overrides in ex_module(name).variants(default_settings(name, smoke)):
                from_dict(overrides)
    assert [v for v, _ in race.variants(default_settings("race_redteam"))] == [
        "c", "d", "g", "c2", "c3"]  # the legs of docs/results/race_redteam/
    from tba_lab.algorithms import TBConfig

    assert beta.settings(False)["beta_default"] == TBConfig().beta  # the kit-wide default


# ------------------------------------------------------------------------- the real thing
def test_experiment_all_smoke_runs_the_real_trainer(tmp_path):
    """`tba-lab experiment all --smoke` for real (about 3 minutes on 2 cores): the five
    experiments, seed 0, through the real trainer (:func:`assert_smoke_outputs`)."""
    from tba_lab.lab.experiments import run_all

    run_all(smoke=True, output_dir=tmp_path, log=None)
    assert_smoke_outputs(tmp_path)


def assert_smoke_outputs(root):
    """What a SMOKE run of all five experiments (seed 0) leaves under ``root``: a report with
    its figure, cores, seeds and design commit, every planned variant's run with evaluations,
    readings, and claims that each carry a premise."""
    figure = {name: f"{name}.png" for name in EXPERIMENTS}
    for name, mod in EXPERIMENTS.items():
        out = root / name
        report = (out / "report.md").read_text()
        assert (out / figure[name]).stat().st_size > 10_000
        assert f"]({figure[name]})" in report and "Reading" in report
        assert f"| cores (`os.cpu_count()`) | {os.cpu_count()} |" in report
        assert "| seeds | 0 |" in report
        data = json.loads((out / "results.json").read_text())
        want = [v for v, _ in mod.variants(mod.settings(True))]
        assert [run["variant"] for run in data["runs"]] == want
        assert all(run["seed"] == 0 and run["evals"] for run in data["runs"])
        assert data["readings"] and data["cores"] == os.cpu_count()
        assert "Design commit: `" in report or not data["design"]  # a checkout records it
        assert all(c["premise"]["condition"] for c in data["analysis"]["claims"])
    runs = {name: json.loads((root / name / "results.json").read_text())["runs"]
            for name in EXPERIMENTS}
    assert all(r["summary"]["trainer_steps"] == 4 for r in runs["off_policy"])  # equal updates
    assert all(math.isfinite(r["behaviour_kl"]) for r in runs["off_policy"])  # nats, every arm
    assert all(0 <= r["div_distinct_correct"] <= 4 for r in runs["buffer"])
    assert all(math.isfinite(r["kl"]) for r in runs["beta"])
    assert [r["searchers"] for r in runs["scaling"]] == [1, 2]
    assert [r["variant"] for r in runs["asynchrony"]] == ["tb_k1", "grpo_k1", "tb_k4", "grpo_k4"]
    assert all(r["summary"]["trainer_steps"] == 6 and r["staleness_mean"] is not None
               for r in runs["asynchrony"])


def test_tradeoff_smoke_reads_every_arm_at_a_matched_kl(tmp_path):
    """`tba-lab experiment tradeoff_redteam --smoke` for real (about 30 s): four arms, a KL
    to the reference at every evaluation, four claims with their premise, the KL figure."""
    r = run_experiment("tradeoff_redteam", smoke=True, output_dir=tmp_path, log=None)
    assert [x["variant"] for x in r["runs"]] == ["tb", "tb_beta0.1", "grpo", "online_dpo"]
    for x in r["runs"]:
        assert [e["step"] for e in x["trajectory"]] == [0, 2, 4]
        assert x["trajectory"][0]["kl"] == 0.0 and all(math.isfinite(e["kl"]) for e in x["trajectory"])
    claims = r["analysis"]["claims"]
    assert len(claims) == 4 and all("kappa" in c["premise"]["observed"] for c in claims)
    assert (tmp_path / "tradeoff_redteam" / "tradeoff_kl.png").stat().st_size > 10_000
    assert "## At the matched KL (no verdicts)" in (tmp_path / "tradeoff_redteam" / "report.md").read_text()


def test_experiment_all_runs_the_five_in_order_with_the_smoke_settings(tmp_path, capsys,
                                                                         monkeypatch):
    """`tba-lab experiment all --smoke`: the estimate first, then each experiment once, SMOKE,
    seed 0, into one folder; the readings printed. (The runs themselves: assert_smoke_outputs.)"""
    import tba_lab.lab.experiments as ex
    from tba_lab import cli

    calls = []

    def fake(name, smoke, seeds, output_dir, settings=None, log=print, config=None):
        calls.append((name, smoke, list(seeds), str(output_dir), settings, config))
        return {"report": f"{output_dir}/{name}/report.md", "readings": [f"{name} reading"]}

    monkeypatch.setattr(ex, "run_experiment", fake)
    assert cli.main(["experiment", "all", "--smoke", "--output-dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert printed.index("estimate:") < printed.index("off_policy: ")
    assert calls == [(n, True, [0], str(tmp_path), {}, None) for n in EXPERIMENTS]
    assert all(f"  - {n} reading" in printed for n in EXPERIMENTS)
