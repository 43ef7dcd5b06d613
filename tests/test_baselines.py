"""The baselines beside TB: Dr. GRPO, RLOO, online DPO, and TB with a learned log Z.

Hand-computed values and slow-but-obvious references on tiny float64 tensors, plus one batch
through ``algorithms.compute_loss`` for every ``--algo`` on a small real model.
"""
import math

import numpy as np
import pytest
import torch

from tba_lab.losses import (dpo_pairs, group_advantages, grpo_loss, online_dpo_loss,
                            rloo_advantages, rloo_loss, trajectory_balance_loss)

D = torch.float64
K = 8
EQUAL = torch.full((K,), 0.35, dtype=torch.float32)  # mean() of this is not exactly 0.35 in float32
OTHER = torch.tensor([0.0, 1.0, 0.5, 0.2, 0.9, 0.1, 0.3, 0.7])


def test_all_equal_group_has_exactly_zero_advantage_for_every_algorithm():
    rewards = torch.cat([EQUAL, OTHER])
    assert (EQUAL - EQUAL.mean()).abs().max().item() > 0  # the naive centring is not 0: the test bites
    for mode in ("group", "batch", "none"):  # grpo (all scalings) and dr_grpo ("none")
        assert torch.equal(group_advantages(rewards, K, mode)[:K], torch.zeros(K)), mode
    loo = rloo_advantages(rewards, K)
    assert torch.equal(loo[:K], torch.zeros(K)) and loo[K:].abs().max() > 0.1
    # KL shaping with the same KL on every row keeps the group all-equal
    shaped = rloo_advantages(rewards, K, kl=torch.full((2 * K,), 0.3), beta=0.05)
    assert torch.equal(shaped[:K], torch.zeros(K))
    # online DPO: an all-equal group yields no pair, so no loss and no gradient
    chosen, rejected = dpo_pairs(rewards, K)
    assert chosen.tolist() == [K + 1] and rejected.tolist() == [K + 0]
    logps = torch.randn(K, dtype=torch.float32, requires_grad=True)
    loss, info = online_dpo_loss(logps, torch.zeros(K), EQUAL, 0.1, K)
    loss.backward()
    assert loss.item() == 0.0 and info["pairs"] == 0 and torch.equal(logps.grad, torch.zeros(K))
    # TB has no advantage, but an all-equal reward must not change its gradient at all
    grads = []
    for r in (EQUAL, torch.zeros(K)):
        x = torch.linspace(-3, -1, K).requires_grad_(True)
        l, _ = trajectory_balance_loss(x, torch.full((K,), -2.0), r, 0.1, K)
        (g,) = torch.autograd.grad(l, x)
        grads.append(g)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-5, rtol=0)


def _loo_reference(rewards, k):
    """Obviously-correct leave-one-out: loops over the other members of the group."""
    out = []
    for i, r in enumerate(rewards):
        g = i // k
        others = [rewards[j] for j in range(g * k, g * k + k) if j != i]
        out.append(r - sum(others) / len(others))
    return out


def test_rloo_advantages_vs_loop_and_kl_folded_into_reward():
    r = [1.0, 0.0, 0.0, 1.0, 0.5, 0.2]
    kl = [0.4, -0.2, 1.0, 0.0, 0.3, 0.3]
    beta = 0.5
    got = rloo_advantages(torch.tensor(r, dtype=D), 3)
    np.testing.assert_allclose(got.numpy(), _loo_reference(r, 3), rtol=1e-12)
    shaped = [ri - beta * ki for ri, ki in zip(r, kl)]
    got = rloo_advantages(torch.tensor(r, dtype=D), 3, kl=torch.tensor(kl, dtype=D), beta=beta)
    np.testing.assert_allclose(got.numpy(), _loo_reference(shaped, 3), rtol=1e-12)
    # K/(K-1) times the mean-centred reward: the identity the docstring states
    c = (torch.tensor(shaped).view(2, 3) - torch.tensor(shaped).view(2, 3).mean(1, keepdim=True))
    np.testing.assert_allclose(got.numpy(), (1.5 * c).reshape(-1).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="K >= 2"):
        rloo_advantages(torch.zeros(3), 1)
    with pytest.raises(ValueError, match="group_size"):
        rloo_advantages(torch.zeros(5), 2)
    with pytest.raises(ValueError, match="beta"):
        rloo_advantages(torch.zeros(4), 2, kl=torch.zeros(4), beta=-1.0)


def test_rloo_loss_is_sequence_reinforce_on_policy_and_uses_behaviour_logprobs():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)
    logp = torch.tensor([[-1.0, -2.0, -0.5, 9.0], [-1.5, 9.0, 9.0, 9.0]], dtype=D)
    adv = torch.tensor([1.0, -2.0], dtype=D)

    def grad_for(old):
        x = logp.clone().requires_grad_(True)
        loss, info = rloo_loss(x, old, adv, mask, clip_eps=0.2)
        (g,) = torch.autograd.grad(loss, x)
        return loss, g

    loss, g = grad_for(logp)
    # ratio 1: loss = -(1*3 tokens... ) per token -A, summed per sequence, mean over N=2
    assert loss.item() == pytest.approx(-(3 * 1.0 + 1 * -2.0) / 2)
    # gradient of -1/N sum_i A_i log pi(y_i): -A_i / N on every real token (no length normalising)
    torch.testing.assert_close(g, torch.tensor([[-0.5, -0.5, -0.5, 0], [1.0, 0, 0, 0]], dtype=D))
    _, g_stale = grad_for(logp - 0.1)  # behaviour policy was less likely: ratio e^0.1
    torch.testing.assert_close(g_stale, g * math.exp(0.1))


def test_online_dpo_loss_hand_computed_and_gradient_direction():
    # two groups of K=3; pairs: group 0 best row 1, worst row 0; group 1 best row 5, worst row 3
    rewards = torch.tensor([0.0, 1.0, 0.5, 0.2, 0.4, 0.9])
    chosen, rejected = dpo_pairs(rewards, 3)
    assert chosen.tolist() == [1, 5] and rejected.tolist() == [0, 3]
    logps = torch.tensor([-3.0, -2.0, -9.0, -1.0, -9.0, -4.0], dtype=D, requires_grad=True)
    ref = torch.tensor([-2.0, -2.5, -9.0, -1.5, -9.0, -3.0], dtype=D)
    beta = 0.5
    # h0 = (-2 + 2.5) - (-3 + 2) = 1.5 ; h1 = (-4 + 3) - (-1 + 1.5) = -1.5
    expected = (-math.log(1 / (1 + math.exp(-0.75))) - math.log(1 / (1 + math.exp(0.75)))) / 2
    loss, info = online_dpo_loss(logps, ref, rewards, beta, 3)
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    assert info["pairs"] == 2 and info["pair_accuracy"] == 0.5 and info["margin"] == pytest.approx(0.0)
    loss.backward()
    g = logps.grad
    assert g[1] < 0 and g[5] < 0 and g[0] > 0 and g[3] > 0  # descent raises chosen, lowers rejected
    assert g[2] == 0 and g[4] == 0                          # rows in no pair get no gradient
    with pytest.raises(ValueError, match="beta"):
        online_dpo_loss(logps, ref, rewards, 0.0, 3)


def test_tb_with_learned_log_z_hand_computed_and_trains_log_z():
    logps = torch.tensor([-1.0, -2.0, -3.0, -4.0], dtype=D, requires_grad=True)
    ref = torch.tensor([-1.5, -2.0, -2.0, -4.5], dtype=D)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=D)
    beta = 0.5
    log_z = torch.tensor(0.25, dtype=D, requires_grad=True)
    # residual = log_z + (logp - ref) - r/beta = 0.25 + [0.5, 0, -1, 0.5] - [2, 0, 0, 2]
    res = [0.25 + 0.5 - 2, 0.25, 0.25 - 1, 0.25 + 0.5 - 2]
    loss, info = trajectory_balance_loss(logps, ref, rewards, beta, 2, log_z=log_z)
    assert loss.item() == pytest.approx(sum(x * x for x in res) / 4)
    assert info["log_z"] == pytest.approx(0.25)
    loss.backward()
    assert log_z.grad.item() == pytest.approx(2 * sum(res) / 4)  # d/dlogZ of mean residual^2
    # per-prompt (B,) log Z is accepted too; a wrong shape names the fix
    per_prompt = torch.tensor([0.25, 0.25], dtype=D)
    l2, _ = trajectory_balance_loss(logps.detach(), ref, rewards, beta, 2, log_z=per_prompt)
    assert l2.item() == pytest.approx(loss.item())
    with pytest.raises(ValueError, match="log_z"):
        trajectory_balance_loss(logps, ref, rewards, beta, 2, log_z=torch.zeros(3, dtype=D))
    # VarGrad is the learned log Z at its per-prompt optimum: same loss as the best (B,) log Z
    vg, vinfo = trajectory_balance_loss(logps.detach(), ref, rewards, beta, 2)
    terms = (rewards / beta - logps.detach() + ref).view(2, 2).mean(1)
    best, _ = trajectory_balance_loss(logps.detach(), ref, rewards, beta, 2, log_z=terms)
    assert vg.item() == pytest.approx(best.item())


@pytest.mark.parametrize("loss_type,scale_rewards", [("sum", "none"), ("token_mean", "none"),
                                                     ("sum", "group"), ("token_mean", "group")])
def test_tb_loss_type_and_scale_rewards_vs_numpy(loss_type, scale_rewards):
    """``tb.loss_type`` and ``tb.scale_rewards`` through ``TrajectoryBalance.loss``, against the
    loss written out in numpy (the defaults, "sum" and "none", are Eq. 5 on raw rewards)."""
    from tba_lab.algorithms import PolicyBatch, make_algorithm
    from tba_lab.config import from_dict

    g = torch.Generator().manual_seed(3)
    k, beta = 4, 0.1
    lengths = np.array([3, 1, 2, 4, 2, 2, 3, 1])
    mask = torch.arange(4).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)       # (8, 4)
    tok = torch.where(mask, -torch.rand(8, 4, generator=g, dtype=D), torch.zeros((), dtype=D))
    ref_tok = torch.where(mask, -torch.rand(8, 4, generator=g, dtype=D), torch.zeros((), dtype=D))
    rewards = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])  # the second group all equal
    batch = PolicyBatch(token_logps=tok, mask=mask, rewards=torch.tensor(rewards, dtype=D),
                        behaviour_token_logps=tok.clone(), ref_token_logps=ref_tok, group_size=k)
    cfg = from_dict({"algo": "tb", "tb": {"beta": beta, "loss_type": loss_type,
                                          "scale_rewards": scale_rewards}})
    loss, _ = make_algorithm(cfg).loss(batch, step=0)

    r = rewards.reshape(2, k)
    if scale_rewards == "group":  # GRPO's (r - mean) / (std + 1e-4), Bessel std; 0 if all equal
        std = r.std(axis=1, ddof=1, keepdims=True)
        r = np.where(std > 0, (r - r.mean(axis=1, keepdims=True)) / (std + 1e-4), 0.0)
    d = (tok.sum(1) - ref_tok.sum(1)).numpy().reshape(2, k) - r / beta  # log pi - log pi_ref - r/beta
    residual = (d - d.mean(axis=1, keepdims=True)).reshape(-1)          # + VarGrad log Z (Eq. 4)
    weight = 1.0 / lengths if loss_type == "token_mean" else np.ones(8)
    assert loss.item() == pytest.approx(float(np.mean(weight * residual ** 2)), rel=1e-9)


def test_scale_rewards_batch_uses_the_batch_std():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0], dtype=D)  # 2 groups of 4
    batch = group_advantages(r, 4, "batch", eps=0.0)
    centred = r.view(2, 4) - r.view(2, 4).mean(1, keepdim=True)
    torch.testing.assert_close(batch, (centred / r.std()).reshape(-1))
    group = group_advantages(r, 4, "group", eps=0.0)
    torch.testing.assert_close(group[:4], (centred[0] / r[:4].std()))
    assert torch.equal(group[4:], torch.zeros(4))  # group 2 is all-equal


def test_clipped_objective_gradient_changes_with_behaviour_logprobs():
    torch.manual_seed(0)
    logp = torch.randn(4, 5, dtype=D) - 2
    mask = torch.ones(4, 5, dtype=torch.bool)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=D)

    def grad(old):
        x = logp.clone().requires_grad_(True)
        loss, _ = grpo_loss(x, old, None, adv, mask, beta=0.0)
        return torch.autograd.grad(loss, x)[0]

    on = grad(logp)
    # on-policy the ratio is 1 and the gradient is the policy gradient -A / (N * |y|) per token
    torch.testing.assert_close(on, (-adv / (4 * 5)).unsqueeze(1).expand(4, 5))
    assert not torch.allclose(grad(logp - 0.05), on)  # `logp - logp.detach()` would not change


@pytest.mark.parametrize("algo", ["tb", "grpo", "dr_grpo", "rloo", "online_dpo"])
def test_compute_loss_every_algo_on_a_real_batch(tiny, algo, tmp_path):
    """One prompt-major batch of sampled rollouts through ``algorithms.compute_loss``: finite loss,
    a gradient, and (ratio-based losses) an on-policy ratio of 1 at temperature 0.6."""
    from tba_lab.buffer import Rollout
    from tba_lab.config import from_dict
    from tba_lab.rollout.backend import TransformersBackend
    from tba_lab.rollout.scoring import response_logprobs
    from tba_lab.tasks import format_prompt
    from tba_lab.algorithms import compute_loss, make_algorithm

    model, tok, train = tiny
    torch.manual_seed(0)
    k = 4
    prompts = [tok(format_prompt(r["question"]))["input_ids"] for r in train[:2]]
    gen = TransformersBackend(model, tok).generate(prompts, k, temperature=0.6, max_new_tokens=8)
    rows = [prompts[i // k] for i in range(2 * k)]
    with torch.no_grad():
        ref, _ = response_logprobs(model, rows, gen.responses, tok.pad_token_id, 0.6)
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0]  # mixed groups so every loss is non-zero
    batch = [Rollout(prompt_id=i // k, prompt_ids=rows[i], response_ids=gen.responses[i],
                     reward=rewards[i], version=0, ref_token_logps=(ref[i, :len(gen.responses[i])] - 0.1).tolist(),
                     behaviour_token_logps=gen.token_logps[i]) for i in range(2 * k)]
    cfg = from_dict({"algo": algo, "output_dir": str(tmp_path), "model": {"temperature": 0.6},
                     "training": {"num_generations": k, "num_prompts_per_step": 2},
                     "buffer": {"max_prompts": 0}})
    model.zero_grad()
    loss, info = compute_loss(make_algorithm(cfg), model, batch, tok.pad_token_id, step=0)
    loss.backward()
    assert math.isfinite(loss.item())
    if algo in ("tb", "online_dpo"):  # a surrogate loss at ratio 1 may be 0 in value, not in grad
        assert loss.item() != 0.0
    gnorm = sum(p.grad.norm() ** 2 for p in model.parameters() if p.grad is not None) ** 0.5
    assert gnorm > 0
    if algo in ("grpo", "dr_grpo", "rloo"):
        assert info["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    if algo == "rloo":  # behaviour - reference = 0.1 nats per token
        expected_kl = np.mean([0.1 * len(r) for r in gen.responses])
        assert info["kl"] == pytest.approx(expected_kl, rel=1e-4)
    if algo == "online_dpo":
        assert info["pairs"] == 2.0
    model.zero_grad()
