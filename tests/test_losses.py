"""Tests for tba_lab.losses: hand-computed values, properties, and slow-but-obvious references.

Tiny random tensors only; the whole file runs in well under a second of compute.
"""

import math

import numpy as np
import pytest
import torch

from tba_lab.losses import (
    beta_schedule,
    group_advantages,
    grpo_loss,
    kl_penalty,
    masked_mean,
    masked_sum,
    sequence_logprobs,
    token_logprobs,
    trajectory_balance_loss,
    vargrad_log_z,
)

D = torch.float64


def t(x, dtype=D, **kw):
    return torch.tensor(x, dtype=dtype, **kw)


# ----------------------------------------------------------------------------------------------
# log-prob utilities
# ----------------------------------------------------------------------------------------------

def _loop_token_logprobs(logits, target_ids, temperature):
    """Obviously-correct reference: python loops and math.exp, one position at a time."""
    n, tt, v = logits.shape
    out = torch.empty(n, tt, dtype=torch.float64)
    for i in range(n):
        for j in range(tt):
            row = [float(logits[i, j, k]) / temperature for k in range(v)]
            m = max(row)
            lse = m + math.log(sum(math.exp(z - m) for z in row))
            out[i, j] = row[int(target_ids[i, j])] - lse
    return out


def test_token_logprobs_matches_loop_reference_and_temperature():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g) * 3
    ids = torch.randint(0, 7, (2, 5), generator=g)
    for temp in (1.0, 0.6):
        got = token_logprobs(logits, ids, temperature=temp)
        assert got.dtype == torch.float32 and got.shape == (2, 5)
        torch.testing.assert_close(got.double(), _loop_token_logprobs(logits, ids, temp), atol=1e-5, rtol=1e-5)
    # temperature 0.6 is the same as dividing the logits by 0.6 first, and differs from T=1
    torch.testing.assert_close(token_logprobs(logits, ids, 0.6), token_logprobs(logits / 0.6, ids, 1.0))
    assert not torch.allclose(token_logprobs(logits, ids, 0.6), token_logprobs(logits, ids, 1.0))


def test_token_logprobs_errors():
    logits, ids = torch.zeros(1, 2, 3), torch.zeros(1, 2, dtype=torch.long)
    for bad in (0.0, -0.7):
        with pytest.raises(ValueError, match="temperature"):
            token_logprobs(logits, ids, bad)
    with pytest.raises(ValueError):
        token_logprobs(logits, torch.zeros(1, 3, dtype=torch.long))


def test_masked_sum_mean_and_sequence_logprobs():
    vals = t([[1.0, 2.0, float("nan")], [4.0, float("-inf"), 6.0]])  # garbage where masked out
    mask = torch.tensor([[True, True, False], [True, False, True]])
    torch.testing.assert_close(masked_sum(vals, mask), t([3.0, 10.0]))
    torch.testing.assert_close(sequence_logprobs(vals, mask), t([3.0, 10.0]))
    torch.testing.assert_close(masked_sum(vals, mask.double()), t([3.0, 10.0]))
    torch.testing.assert_close(masked_mean(vals, mask), t(13.0 / 4))
    torch.testing.assert_close(masked_mean(vals, mask, dim=1), t([1.5, 5.0]))
    # empty mask -> 0, not NaN
    empty = torch.zeros(2, 3, dtype=torch.bool)
    assert masked_mean(vals, empty).item() == 0.0
    torch.testing.assert_close(masked_mean(vals, torch.tensor([[1, 0, 0], [0, 0, 0]]).bool(), dim=1), t([1.0, 0.0]))


# ----------------------------------------------------------------------------------------------
# trajectory balance
# ----------------------------------------------------------------------------------------------

# B=2 prompts, K=2 responses each, beta=0.5; rows 0,1 -> prompt 0, rows 2,3 -> prompt 1.
LOGPS = [-1.0, -2.0, -3.0, 0.0]
REFS = [-1.5, -1.5, -2.0, -2.0]
REWARDS = [1.0, 0.0, 1.5, 0.5]
BETA, K = 0.5, 2


def test_tb_loss_hand_computed():
    # r/beta              = [2, 0, 3, 1]
    # logp - ref          = [0.5, -0.5, -1, 2]
    # r/beta - logp + ref = [1.5, 0.5, 4, -1]  -> logZ_hat = [(1.5+0.5)/2, (4-1)/2] = [1.0, 1.5]
    # residual = logZ + (logp - ref) - r/beta
    #   row0: 1.0 + 0.5 - 2 = -0.5     row1: 1.0 - 0.5 - 0 = 0.5
    #   row2: 1.5 - 1.0 - 3 = -2.5     row3: 1.5 + 2.0 - 1 = 2.5
    # squares = [0.25, 0.25, 6.25, 6.25]: sum 13, mean 3.25
    logps, refs, rew = t(LOGPS), t(REFS), t(REWARDS)
    torch.testing.assert_close(vargrad_log_z(logps, refs, rew, BETA, K), t([1.0, 1.5]))
    loss, info = trajectory_balance_loss(logps, refs, rew, BETA, K)
    assert loss.item() == pytest.approx(3.25)
    assert info["log_z"] == pytest.approx(1.25)
    assert info["residual_abs_mean"] == pytest.approx(1.5)
    assert info["kl"] == pytest.approx(0.25)  # mean of [0.5, -0.5, -1, 2]
    assert all(isinstance(v, float) for v in info.values())
    assert trajectory_balance_loss(logps, refs, rew, BETA, K, reduction="sum")[0].item() == pytest.approx(13.0)
    torch.testing.assert_close(trajectory_balance_loss(logps, refs, rew, BETA, K, reduction="none")[0],
                               t([0.25, 0.25, 6.25, 6.25]))


def test_tb_loss_zero_at_optimum():
    g = torch.Generator().manual_seed(1)
    b, k, beta = 3, 4, 0.2
    rew = torch.rand(b * k, generator=g, dtype=D)
    refs = -5 * torch.rand(b * k, generator=g, dtype=D)
    c = torch.randn(b, generator=g, dtype=D)             # arbitrary per-prompt constant
    logps = refs + rew / beta - c.repeat_interleave(k)   # log pi - log pi_ref = r/beta - c_i
    loss, info = trajectory_balance_loss(logps, refs, rew, beta, k)
    assert loss.item() == pytest.approx(0.0, abs=1e-20)
    torch.testing.assert_close(vargrad_log_z(logps, refs, rew, beta, k), c)  # log Z_hat = c_i
    # and away from the optimum it is not zero
    assert trajectory_balance_loss(logps + torch.randn(b * k, generator=g, dtype=D), refs, rew, beta, k)[0].item() > 1e-3


def test_tb_gradient_is_two_residual_over_n():
    g = torch.Generator().manual_seed(2)
    b, k, beta = 2, 3, 0.1
    n = b * k
    rew = torch.rand(n, generator=g, dtype=D)
    refs = -3 * torch.rand(n, generator=g, dtype=D)
    logps = (-3 * torch.rand(n, generator=g, dtype=D)).requires_grad_(True)
    loss, _ = trajectory_balance_loss(logps, refs, rew, beta, k)
    (grad,) = torch.autograd.grad(loss, logps)

    # hand formula, written independently
    x = logps.detach().view(b, k)
    d = x - refs.view(b, k) - rew.view(b, k) / beta        # (B, K)
    log_z = -d.mean(dim=1, keepdim=True)
    residual = (log_z + d).reshape(-1)
    torch.testing.assert_close(grad, 2 * residual / n)

    # and against autograd of the hand-written loss
    logps2 = logps.detach().clone().requires_grad_(True)
    hand = ((log_z.reshape(-1).repeat_interleave(k) + logps2 - refs - rew / beta) ** 2).mean()
    (grad2,) = torch.autograd.grad(hand, logps2)
    torch.testing.assert_close(grad, grad2)


def test_tb_log_z_is_detached():
    logps = t(LOGPS, requires_grad=True)
    log_z = vargrad_log_z(logps, t(REFS), t(REWARDS), BETA, K)
    assert not log_z.requires_grad and log_z.grad_fn is None
    # With 'none', the gradient of row 0's squared residual touches only row 0. Were log Z not
    # detached, row 1 (same prompt) would get -2 * residual_0 / K.
    per_row, _ = trajectory_balance_loss(logps, t(REFS), t(REWARDS), BETA, K, reduction="none")
    (grad,) = torch.autograd.grad(per_row[0], logps)
    torch.testing.assert_close(grad, t([2 * -0.5, 0.0, 0.0, 0.0]))


def test_tb_wrong_layout_changes_loss_and_bad_group_size_raises():
    logps, refs, rew = t(LOGPS), t(REFS), t(REWARDS)
    base = trajectory_balance_loss(logps, refs, rew, BETA, K)[0].item()
    # permuting rows WITHIN a prompt's group does not change the loss ...
    within = torch.tensor([1, 0, 3, 2])
    assert trajectory_balance_loss(logps[within], refs[within], rew[within], BETA, K)[0].item() == pytest.approx(base)
    # ... mixing rows ACROSS prompts (rows 1 and 2 swapped) does.
    across = torch.tensor([0, 2, 1, 3])
    mixed = trajectory_balance_loss(logps[across], refs[across], rew[across], BETA, K)[0].item()
    assert abs(mixed - base) > 0.1
    with pytest.raises(ValueError, match="group_size"):
        trajectory_balance_loss(logps, refs, rew, BETA, 3)
    with pytest.raises(ValueError, match="group_size"):
        trajectory_balance_loss(logps, refs, rew, BETA, 0)
    with pytest.raises(ValueError, match="group_size"):
        vargrad_log_z(logps, refs, rew, BETA, 3)


def test_tb_input_errors():
    logps, refs, rew = t(LOGPS), t(REFS), t(REWARDS)
    for bad_beta in (0.0, -0.1):
        with pytest.raises(ValueError, match="beta"):
            trajectory_balance_loss(logps, refs, rew, bad_beta, K)
        with pytest.raises(ValueError, match="beta"):
            vargrad_log_z(logps, refs, rew, bad_beta, K)
    with pytest.raises(ValueError, match="shape"):
        trajectory_balance_loss(logps, refs[:2], rew, BETA, K)
    for bad in (float("nan"), float("inf")):
        r = rew.clone()
        r[1] = bad
        with pytest.raises(ValueError, match="non-finite rewards.*reward function"):
            trajectory_balance_loss(logps, refs, r, BETA, K)
    with pytest.raises(ValueError, match="reduction"):
        trajectory_balance_loss(logps, refs, rew, BETA, K, reduction="avg")


def test_tb_loss_token_mean_hand_computed():
    # residuals as in test_tb_loss_hand_computed: [-0.5, 0.5, -2.5, 2.5], squares [0.25, 0.25,
    # 6.25, 6.25]; lengths [1, 2, 5, 5] -> [0.25, 0.125, 1.25, 1.25]: sum 2.875, mean 0.71875
    logps, refs, rew = t(LOGPS, requires_grad=True), t(REFS), t(REWARDS)
    lengths = torch.tensor([1, 2, 5, 5])
    loss, info = trajectory_balance_loss(logps, refs, rew, BETA, K, lengths=lengths)
    assert loss.item() == pytest.approx(0.71875)
    assert info["residual_abs_mean"] == pytest.approx(1.5)  # the residuals themselves are unchanged
    # d loss / d log pi_i = 2 * residual_i / (T_i * N): the mean over the row's tokens
    (grad,) = torch.autograd.grad(loss, logps)
    torch.testing.assert_close(grad, t([-0.25, 0.125, -0.25, 0.25]))
    with pytest.raises(ValueError, match="lengths.*> 0"):
        trajectory_balance_loss(logps, refs, rew, BETA, K, lengths=torch.tensor([1, 0, 5, 5]))
    with pytest.raises(ValueError, match="shape"):
        trajectory_balance_loss(logps, refs, rew, BETA, K, lengths=torch.tensor([1, 2, 5]))


# ----------------------------------------------------------------------------------------------
# GRPO family
# ----------------------------------------------------------------------------------------------

def test_group_advantages_all_equal_group_is_exactly_zero():
    k = 8
    equal = torch.full((k,), 0.35, dtype=torch.float32)
    other = torch.tensor([0.0, 1.0, 0.5, 0.2, 0.9, 0.1, 0.3, 0.7])
    rewards = torch.cat([equal, other])
    # the naive formula is NOT exactly zero here (float32 rounding of the mean), so this test bites
    naive = (equal - equal.mean()) / (equal.std() + 1e-4)
    assert naive.abs().max().item() > 0
    for mode in ("group", "batch", "none"):
        adv = group_advantages(rewards, k, scale_rewards=mode)
        assert adv.dtype == torch.float32
        assert torch.equal(adv[:k], torch.zeros(k)), mode
        assert adv[k:].abs().max().item() > 0.1, mode
    # K = 1: every group is trivially all-equal
    assert torch.equal(group_advantages(torch.tensor([1.0, 2.0]), 1), torch.zeros(2))


def test_group_advantages_values_vs_numpy():
    r = np.array([1.0, 0.0, 0.0, 0.5, 0.2, 0.9], dtype=np.float64)
    k, eps = 3, 1e-4
    g = r.reshape(2, k)
    centered = (g - g.mean(axis=1, keepdims=True)).reshape(-1)
    exp_group = ((g - g.mean(1, keepdims=True)) / (g.std(1, ddof=1, keepdims=True) + eps)).reshape(-1)
    exp_batch = centered / (r.std(ddof=1) + eps)
    rt = torch.tensor(r)
    np.testing.assert_allclose(group_advantages(rt, k, "group", eps).numpy(), exp_group, rtol=1e-12)
    np.testing.assert_allclose(group_advantages(rt, k, "batch", eps).numpy(), exp_batch, rtol=1e-12)
    np.testing.assert_allclose(group_advantages(rt, k, "none", eps).numpy(), centered, rtol=1e-12)
    assert not np.allclose(exp_group, exp_batch)  # the two modes really differ on this data


def test_group_advantages_errors():
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(torch.zeros(5), 2)
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(torch.zeros(4), 0)
    with pytest.raises(ValueError, match="'group', 'batch', 'none'"):
        group_advantages(torch.zeros(4), 2, scale_rewards="std")


def test_kl_penalty_values():
    logp = t([[math.log(0.5), math.log(0.2)]])
    ref = t([[math.log(0.25), math.log(0.2)]])
    # k1 = log(0.5) - log(0.25) = log 2;  k3 = 0.5 - log(0.5) - 1 = log 2 - 0.5;  equal -> 0
    torch.testing.assert_close(kl_penalty(logp, ref, "k1"), t([[math.log(2), 0.0]]))
    torch.testing.assert_close(kl_penalty(logp, ref, "k3"), t([[math.log(2) - 0.5, 0.0]]))
    torch.testing.assert_close(kl_penalty(logp, ref), kl_penalty(logp, ref, "k3"))
    with pytest.raises(ValueError, match="k1"):
        kl_penalty(logp, ref, "k2")


def _grpo_inputs():
    """N=2, T=4; sequence 0 has 3 response tokens, sequence 1 has 1; padding holds garbage."""
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)
    logp = t([[-1.0, -2.0, -0.5, 99.0], [-1.5, 99.0, 99.0, 99.0]])
    # log pi - log pi_ref (k1) on real tokens: [0.2, 0.4, -0.3] and [0.6]
    ref = logp - t([[0.2, 0.4, -0.3, 0.0], [0.6, 0.0, 0.0, 0.0]])
    adv = t([1.0, -2.0])
    return logp, ref, adv, mask


def test_grpo_aggregations_hand_computed():
    logp, ref, adv, mask = _grpo_inputs()
    beta = 0.5
    # old == current -> ratio 1 -> per_token = -A + beta * k3,  k3 = exp(-k1) + k1 - 1
    k3 = [[math.exp(-d) + d - 1 for d in row] for row in ([0.2, 0.4, -0.3], [0.6])]
    seq0 = [-1 + beta * k for k in k3[0]]
    seq1 = [2 + beta * k3[1][0]]
    kw = dict(beta=beta, kl_estimator="k3")
    grpo, info = grpo_loss(logp, logp.detach(), ref, adv, mask, loss_type="grpo", **kw)
    assert grpo.item() == pytest.approx((sum(seq0) / 3 + seq1[0]) / 2)
    bnpo, _ = grpo_loss(logp, logp.detach(), ref, adv, mask, loss_type="bnpo", **kw)
    assert bnpo.item() == pytest.approx((sum(seq0) + seq1[0]) / 4)
    dr, _ = grpo_loss(logp, logp.detach(), ref, adv, mask, loss_type="dr_grpo", **kw)
    assert dr.item() == pytest.approx((sum(seq0) + seq1[0]) / (2 * 4))      # T = 4 by default
    dr8, _ = grpo_loss(logp, logp.detach(), ref, adv, mask, loss_type="dr_grpo", max_completion_length=8, **kw)
    assert dr8.item() == pytest.approx((sum(seq0) + seq1[0]) / (2 * 8))
    assert info["ratio_mean"] == pytest.approx(1.0)
    assert info["clip_fraction"] == 0.0
    assert info["kl"] == pytest.approx((sum(k3[0]) + k3[1][0]) / 4)
    # beta = 0 or no reference: KL term skipped
    no_kl, _ = grpo_loss(logp, logp.detach(), ref, adv, mask, beta=0.0, loss_type="bnpo")
    assert no_kl.item() == pytest.approx((-3 + 2) / 4)
    no_ref, info = grpo_loss(logp, logp.detach(), None, adv, mask, loss_type="bnpo")
    assert no_ref.item() == pytest.approx((-3 + 2) / 4)
    assert math.isnan(info["kl"])


def test_grpo_k1_goes_into_the_advantage_hand_computed():
    """k1 is a detached reward term: A' = A - beta * (k1_seq - leave-one-out mean), and no
    gradient flows through k1 itself (its pathwise gradient would be grad log pi)."""
    logp, ref, adv, mask = _grpo_inputs()
    beta = 0.5
    # sequence k1: 0.2 + 0.4 - 0.3 = 0.3 and 0.6; leave-one-out mean over the batch: 0.6, 0.3
    # A' = [1 - 0.5 * (0.3 - 0.6), -2 - 0.5 * (0.6 - 0.3)] = [1.15, -2.15]
    x = logp.detach().clone().requires_grad_(True)
    bnpo, info = grpo_loss(x, logp.detach(), ref, adv, mask, beta=beta, kl_estimator="k1",
                           loss_type="bnpo")
    assert bnpo.item() == pytest.approx((-1.15 * 3 + 2.15) / 4)
    (g,) = torch.autograd.grad(bnpo, x)
    torch.testing.assert_close(g, t([[-1.15 / 4] * 3 + [0.0], [2.15 / 4, 0.0, 0.0, 0.0]]))
    assert info["kl"] == pytest.approx((0.2 + 0.4 - 0.3 + 0.6) / 4)        # the value is still k1's
    grpo, _ = grpo_loss(logp, logp.detach(), ref, adv, mask, beta=beta, kl_estimator="k1")
    assert grpo.item() == pytest.approx((-1.15 + 2.15) / 2)
    same, _ = grpo_loss(logp, logp.detach(), ref, adv, mask, beta=beta, kl_estimator="k1",
                        group_size=2)                                     # one group of 2 = the batch
    assert same.item() == pytest.approx(grpo.item())
    alone, _ = grpo_loss(logp, logp.detach(), ref, adv, mask, beta=beta, kl_estimator="k1",
                         group_size=1)                                    # no other row: no baseline
    assert alone.item() == pytest.approx((-(1 - 0.15) + (2 + 0.3)) / 2)
    with pytest.raises(ValueError, match="group_size"):
        grpo_loss(logp, logp.detach(), ref, adv, mask, beta=beta, kl_estimator="k1", group_size=3)


def test_grpo_ratio_uses_behaviour_logprobs():
    logp, ref, adv, mask = _grpo_inputs()
    eps = 0.2

    def grad_for(old):
        x = logp.detach().clone().requires_grad_(True)
        loss, info = grpo_loss(x, old, None, adv, mask, clip_eps=eps, beta=0.0, loss_type="bnpo")
        (g,) = torch.autograd.grad(loss, x)
        return g, info

    on_policy, info = grad_for(logp.detach())
    assert info["ratio_mean"] == pytest.approx(1.0)
    # d/dlogp of -ratio * A / n_tokens with ratio = 1: -A / 4 on real tokens, 0 on padding
    torch.testing.assert_close(on_policy, t([[-0.25, -0.25, -0.25, 0.0], [0.5, 0.0, 0.0, 0.0]]))

    # behaviour policy 0.1 nats less likely on every token: ratio e^0.1 = 1.105, inside the clip range
    stale, info = grad_for(logp.detach() - 0.1)
    r = math.exp(0.1)
    torch.testing.assert_close(stale, t([[-0.25 * r, -0.25 * r, -0.25 * r, 0.0], [0.5 * r, 0.0, 0.0, 0.0]]))
    assert info["ratio_mean"] == pytest.approx(r)
    assert not torch.allclose(stale, on_policy)  # a `logp - logp.detach()` ratio would fail this

    # ratio e^0.5 = 1.65 > 1 + eps: clipped (zero grad) where A > 0; A < 0 stays unclipped
    far, info = grad_for(logp.detach() - 0.5)
    r = math.exp(0.5)
    torch.testing.assert_close(far, t([[0.0, 0.0, 0.0, 0.0], [0.5 * r, 0.0, 0.0, 0.0]]))
    assert info["clip_fraction"] == pytest.approx(3 / 4)


def test_grpo_errors():
    logp, ref, adv, mask = _grpo_inputs()
    with pytest.raises(ValueError, match="'grpo', 'bnpo', 'dr_grpo'"):
        grpo_loss(logp, logp, ref, adv, mask, loss_type="dapo")
    with pytest.raises(ValueError, match="'k1', 'k3'"):
        grpo_loss(logp, logp, ref, adv, mask, kl_estimator="k2")
    with pytest.raises(ValueError, match="shape"):
        grpo_loss(logp, logp[:, :3], ref, adv, mask)
    with pytest.raises(ValueError, match="advantages"):
        grpo_loss(logp, logp, ref, adv[:1], mask)


# ----------------------------------------------------------------------------------------------
# beta schedule
# ----------------------------------------------------------------------------------------------

def test_beta_schedule():
    assert beta_schedule(0, 0.014, 0.004, 500) == pytest.approx(0.014)
    assert beta_schedule(250, 0.014, 0.004, 500) == pytest.approx(0.009)
    assert beta_schedule(500, 0.014, 0.004, 500) == pytest.approx(0.004)
    assert beta_schedule(10_000, 0.014, 0.004, 500) == pytest.approx(0.004)
    assert beta_schedule(0, 1.0, 0.05, 0) == 0.05
    assert beta_schedule(7, 1.0, 0.05, 0) == 0.05
    with pytest.raises(ValueError, match="beta"):
        beta_schedule(0, 0.0, 0.004, 500)
    with pytest.raises(ValueError, match="beta"):
        beta_schedule(0, 0.014, -0.004, 500)
    with pytest.raises(ValueError, match="anneal_steps"):
        beta_schedule(0, 0.014, 0.004, -1)


# ----------------------------------------------------------------------------------------------
# the KL term alone must pull the policy to the reference
# ----------------------------------------------------------------------------------------------

def _kl_only_runs():
    """(algo, section options) of every accepted configuration whose loss carries a KL term."""
    from tba_lab.losses import GRPO_LOSS_TYPES, KL_ESTIMATORS

    runs = [("tb", {}), ("rloo", {})]
    runs += [("grpo", {"kl_estimator": e, "loss_type": lt}) for e in KL_ESTIMATORS
             for lt in GRPO_LOSS_TYPES]
    runs += [("dr_grpo", {"kl_estimator": e}) for e in KL_ESTIMATORS]
    return runs


@pytest.mark.parametrize("algo, options", _kl_only_runs(),
                         ids=lambda x: x if isinstance(x, str) else "-".join(x.values()))
def test_with_only_the_kl_term_acting_the_policy_moves_to_the_reference(algo, options):
    """After prime-rl#1390 / seed_rl#81: with equal rewards only the KL term acts, so KL(pi ||
    pi_ref) must fall. k1 (log pi - log pi_ref) as a loss on samples of pi has gradient
    E[grad log pi] = 0 and leaves the policy where it is (2.131 -> 2.159 in the report); it
    belongs in the reward ("A Comedy of Estimators", arXiv 2512.21852).

    A policy of 3 independent positions over 6 tokens (exact KL), 8 prompts x 8 samples per
    update, beta 0.5, Adam, 150 updates through the algorithm class the trainer uses."""
    from tba_lab.algorithms import PolicyBatch, make_algorithm
    from tba_lab.config import from_dict

    section = "grpo" if algo == "dr_grpo" else algo
    cfg = from_dict({"algo": algo, section: {"beta": 0.5, **options}})
    algorithm = make_algorithm(cfg)
    g = torch.Generator().manual_seed(0)
    T, V, B, K = 3, 6, 8, 8
    ref_logits = 1.5 * torch.randn(T, V, generator=g)
    theta = (1.5 * torch.randn(T, V, generator=g)).requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=0.05)

    def kl() -> float:
        with torch.no_grad():
            lp, lr = theta.log_softmax(-1), ref_logits.log_softmax(-1)
            return float((lp.exp() * (lp - lr)).sum())

    before = kl()
    assert before > 1.0
    mask = torch.ones(B * K, T, dtype=torch.bool)
    for step in range(150):
        with torch.no_grad():
            ys = torch.multinomial(theta.softmax(-1), B * K, replacement=True, generator=g).T  # (N, T)
        token_logps = theta.log_softmax(-1).gather(1, ys.T).T                             # (N, T)
        ref = ref_logits.log_softmax(-1).gather(1, ys.T).T
        batch = PolicyBatch(token_logps=token_logps, mask=mask, rewards=torch.zeros(B * K),
                            behaviour_token_logps=token_logps.detach(), ref_token_logps=ref,
                            group_size=K)
        loss, _ = algorithm.loss(batch, step)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = kl()
    assert after < 0.25 * before, (before, after)
