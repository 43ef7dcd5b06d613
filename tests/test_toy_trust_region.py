"""Notebook 02, section 5, on the toy of tba_lab/lab/course/toy.py: staleness in nats (the
behaviour KL), TB's fixed point on stale data (valid), and a learning-rate sweep at a fixed
staleness (TB has no trust region; GRPO-KL's clip holds at large steps and costs at moderate ones).

Every claim is checked over several seeds, each seed giving the toy problem and the sampling as
the notebook's SEED does, with plain SGD at the notebook's lag and learning rates. Runs are 150
updates (the notebook's SMOKE setting): a few seconds in all.
"""
import statistics

import pytest
import torch

from tba_lab.lab.course.nb02 import print_lr_sweep
from tba_lab.lab.course.toy import (kl_divergence, make_toy_problem, matched_lr, sample_batch,
                                    train_toy, tv_distance)

SEEDS = (0, 1, 2, 3, 4)
LAG, STEPS = 4, 150


def tail_tv(h, frac=0.25):
    """TV(pi, pi*) averaged over the last quarter of the updates, as the sweep reports it."""
    n = max(1, int(round(frac * len(h["tv"]))))
    return statistics.fmean(h["tv"][-n:])


def run(seed, method, lr, lag, steps=STEPS, **kw):
    problem = make_toy_problem(beta=0.5, seed=seed)
    return train_toy(problem, method, lag=lag, lr=matched_lr(method, lr, problem.beta),
                     steps=steps, seed=seed, optimizer="sgd", **kw)


def test_behaviour_kl_is_zero_on_fresh_data_and_positive_on_stale_data():
    for optimizer in ("sgd", "adam"):
        problem = make_toy_problem(seed=0)
        fresh = train_toy(problem, "tb", lag=0, lr=3.0 if optimizer == "sgd" else 0.05, steps=40,
                          optimizer=optimizer)
        assert fresh["behaviour_kl"] == [0.0] * 40  # exactly: mu is the current policy
    stale = run(0, "tb", 3.0, LAG, steps=60)
    assert len(stale["behaviour_kl"]) == 60 and stale["behaviour_kl"][0] == 0.0  # update 0: mu = pi
    assert statistics.fmean(stale["behaviour_kl"][LAG:]) > 1e-3
    never_synced = train_toy(problem, "tb", behaviour_logits=problem.ref_logits, steps=60)
    assert never_synced["behaviour_kl"][0] == 0.0
    assert statistics.fmean(never_synced["behaviour_kl"][10:]) > 0.05


def test_recorded_behaviour_kl_estimates_kl_of_mu_from_pi_in_nats():
    """What train_toy records is KL(mu || pi_theta), not the reverse KL(pi_theta || mu): with a
    never-synced behaviour policy and a zero learning rate, pi_theta stays at pi_ref, and the
    mean over many updates of the per-batch estimate matches the exact KL."""
    problem = make_toy_problem(num_prompts=3, num_candidates=6, seed=1)
    mu_logits = 2.0 * torch.randn(3, 6, generator=torch.Generator().manual_seed(0))
    mu, pi = torch.softmax(mu_logits, -1), problem.ref_logprobs.exp()
    forward, reverse = kl_divergence(mu, pi), kl_divergence(pi, mu)
    assert abs(forward - reverse) > 0.3  # the two directions are told apart
    h = train_toy(problem, "tb", behaviour_logits=mu_logits, lr=0.0, steps=200, k=64,
                  optimizer="sgd")
    assert statistics.fmean(h["behaviour_kl"]) == pytest.approx(forward, abs=0.03)
    # the same number from the samples directly: mean of log mu - log pi over a batch from mu
    batch = sample_batch(problem, mu_logits, 64, torch.Generator().manual_seed(0))
    diff = batch["behaviour_logps"] - problem.ref_logprobs[batch["prompt"], batch["idx"]]
    assert h["behaviour_kl"][0] == pytest.approx(diff.mean().item(), abs=1e-6)


def test_tb_fixed_point_does_not_move_with_staleness():
    """The validity half: at a small step TB ends at pi* on fresh, lagged and never-synced data."""
    for seed in SEEDS[:3]:
        problem = make_toy_problem(beta=0.5, seed=seed)
        fresh, lagged = run(seed, "tb", 3.0, 0), run(seed, "tb", 3.0, LAG)
        fixed = train_toy(problem, "tb", behaviour_logits=problem.ref_logits, lr=3.0, steps=300,
                          seed=seed, optimizer="sgd")
        for h in (fresh, lagged, fixed):
            assert tv_distance(h["final_probs"], problem.target) < 0.005, seed
        assert tv_distance(fresh["final_probs"], lagged["final_probs"]) < 0.005, seed


def test_on_fresh_data_tb_and_grpo_kl_take_the_same_steps_at_matched_learning_rates():
    """GRPO-KL at lr * 2 / beta follows TB's trajectory on fresh data (ratio 1, nothing clipped);
    stale data, through the ratio and its clip, tell them apart."""
    tb, gk = run(0, "tb", 3.0, 0, steps=60), run(0, "grpo_kl", 3.0, 0, steps=60)
    assert max(abs(a - b) for a, b in zip(tb["tv"], gk["tv"])) < 1e-5
    assert gk["clip_fraction"] == [0.0] * 60
    tb, gk = run(0, "tb", 3.0, LAG, steps=60), run(0, "grpo_kl", 3.0, LAG, steps=60)
    assert max(abs(a - b) for a, b in zip(tb["tv"], gk["tv"])) > 0.01
    assert matched_lr("grpo_kl", 3.0, 0.5) == 12.0 and matched_lr("tb", 3.0, 0.5) == 3.0


def test_at_a_large_step_on_stale_data_tb_overshoots_and_the_clip_holds():
    """No trust region: at lr 20 TB ends further from pi* on stale than on fresh data, its data
    drift many times further in nats than GRPO-KL's, and GRPO-KL ends closer to pi*."""
    for seed in SEEDS:
        tb_stale, tb_fresh = run(seed, "tb", 20.0, LAG), run(seed, "tb", 20.0, 0)
        gk_stale = run(seed, "grpo_kl", 20.0, LAG)
        assert tail_tv(tb_stale) > tail_tv(tb_fresh) + 0.2, seed
        assert tail_tv(tb_stale) > tail_tv(gk_stale) + 0.3, seed
        kl_tb, kl_gk = (statistics.fmean(h["behaviour_kl"]) for h in (tb_stale, gk_stale))
        assert kl_tb > 3 * kl_gk > 0, (seed, kl_tb, kl_gk)


def test_at_a_moderate_step_the_clip_costs_and_tb_reaches_the_target():
    """The clip's cost: at lr 10 (and 3) TB on stale data ends at pi*, GRPO-KL does not."""
    for seed in SEEDS:
        for lr in (3.0, 10.0):
            tb, gk = run(seed, "tb", lr, LAG), run(seed, "grpo_kl", lr, LAG)
            assert tail_tv(tb) < 0.005, (seed, lr)
            assert tail_tv(gk) > tail_tv(tb) + 0.02, (seed, lr)
            assert statistics.fmean(gk["clip_fraction"]) > 0.02, (seed, lr)  # the clip binds


def _sweeps(tb_stale_tv, gk_stale_tv):
    row = lambda tv, kl: {"lrs": [1.0, 20.0], "tv_mean": tv, "tv_std": [0, 0],
                          "behaviour_kl_mean": kl, "clip_fraction_mean": [0.0, 0.5]}
    return {0: {"tb": row([0.001, 0.3], [0, 0]), "grpo_kl": row([0.001, 0.3], [0, 0])},
            4: {"tb": row(tb_stale_tv, [0.001, 2.0]), "grpo_kl": row(gk_stale_tv, [0.001, 0.2])}}


def test_printed_findings_follow_the_numbers(capsys):
    """The printed words (further / closer / which learning rates) come from the numbers, so
    the finding agrees with the plot whatever the run."""
    found = print_lr_sweep(_sweeps([0.001, 0.8], [0.05, 0.2]), 4)
    out = capsys.readouterr().out
    assert "ends at TV 0.800, further from pi* than on fresh data (0.300)" in out
    assert "ends at TV 0.200, closer to pi* than TB" in out
    assert "at 1 of the 1 learning rates of line 1 (lr 1)" in out
    assert found["clip_costly_lrs"] == 1 and found["behaviour_kl_ratio_largest_lr"] == pytest.approx(10)
    print_lr_sweep(_sweeps([0.001, 0.1], [0.001, 0.2]), 4)  # the opposite outcome, worded so
    out = capsys.readouterr().out
    assert "no further from pi* than on fresh data" in out and "no closer to pi* than TB" in out
    assert "at 0 of the 1 learning rates of line 1 (lr none)" in out


def test_bad_arguments_are_refused():
    problem = make_toy_problem()
    with pytest.raises(ValueError, match="optimizer"):
        train_toy(problem, "tb", optimizer="rmsprop", steps=1)
    with pytest.raises(ValueError, match="method"):
        matched_lr("ppo", 1.0, 0.5)
