"""``behaviour_kl``: how off-policy a training batch is, in nats per response.

    behaviour_kl = mean over rows of log mu(y|x) - log pi_theta(y|x)

(mu: the policy that sampled the row, pi_theta: the policy being trained, each summed over the
response's tokens), the Monte Carlo estimate of KL(mu || pi_theta). Checked against hand-computed
numbers, on the kit's real scoring path (``algorithms.compute_loss``) for every algorithm, after a
real update, and in real training runs (metrics.jsonl, TensorBoard), where ``clip_fraction``
appears only for the PPO-clipped losses.
"""
import copy
import math

import numpy as np
import pytest
import torch

from tba_lab.algorithms import Algorithm, PolicyBatch, compute_loss, make_algorithm
from tba_lab.config import from_dict
from tba_lab.losses import behaviour_kl

D = torch.float64


def _hand_batch():
    """Two prompts x two responses; masked positions hold 9.0, which must not count."""
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 0]], dtype=torch.bool)
    pi = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, 9.0, 9.0],
                       [-1.2, -0.4, 9.0], [-2.0, -1.0, 9.0]], dtype=D)
    mu = torch.tensor([[-0.8, -2.1, -0.2], [-0.5, 9.0, 9.0],
                       [-1.2, -0.4, 9.0], [-1.0, -1.5, 9.0]], dtype=D)
    return pi, mu, mask


def test_behaviour_kl_of_a_hand_built_batch():
    pi, mu, mask = _hand_batch()
    # log mu - log pi per row: (-3.1) - (-3.5) = 0.4; -0.5 - (-0.3) = -0.2; 0; -2.5 - (-3.0) = 0.5
    expected = (0.4 - 0.2 + 0.0 + 0.5) / 4  # 0.175 nats per response
    got = behaviour_kl(pi, mu, mask)
    assert got.dim() == 0 and got.dtype == D
    assert got.item() == pytest.approx(expected, abs=1e-12)
    batch = PolicyBatch(token_logps=pi.clone().requires_grad_(True), mask=mask,
                        rewards=torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=D),
                        behaviour_token_logps=mu, ref_token_logps=None, group_size=2)
    assert batch.behaviour_kl() == pytest.approx(expected, abs=1e-12)
    assert isinstance(batch.behaviour_kl(), float)
    with pytest.raises(ValueError, match="shape"):
        behaviour_kl(pi, mu[:, :2], mask)


def test_behaviour_kl_is_zero_on_policy_and_carries_no_grad():
    pi, _, mask = _hand_batch()
    x = pi.clone().requires_grad_(True)
    got = behaviour_kl(x, x.detach(), mask)
    assert got.item() == 0.0 and not got.requires_grad


def _rollouts(model, tok, train, k=4, shift=0.0, temperature=0.6):
    """Two prompts x k responses sampled from ``model`` (rewards mixed in every group); the
    behaviour log-probs are the sampler's own plus ``shift`` nats per token."""
    from tba_lab.buffer import Rollout
    from tba_lab.rollout.backend import TransformersBackend
    from tba_lab.tasks import format_prompt

    torch.manual_seed(0)
    prompts = [tok(format_prompt(r["question"]))["input_ids"] for r in train[:2]]
    gen = TransformersBackend(model, tok).generate(prompts, k, temperature=temperature,
                                                   max_new_tokens=8)
    rows = [prompts[i // k] for i in range(2 * k)]
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    return [Rollout(prompt_id=i // k, prompt_ids=rows[i], response_ids=gen.responses[i],
                    reward=rewards[i], version=0,
                    ref_token_logps=[lp - 0.1 for lp in gen.token_logps[i]],
                    behaviour_token_logps=[lp + shift for lp in gen.token_logps[i]])
            for i in range(2 * k)]


def _cfg(algo, tmp_path, **extra):
    return from_dict({"algo": algo, "output_dir": str(tmp_path), "model": {"temperature": 0.6},
                      "training": {"num_generations": 4, "num_prompts_per_step": 2},
                      "buffer": {"max_prompts": 0}, **extra})


class _PlainReinforce(Algorithm):
    """A loss of one's own that returns no info at all: it still gets behaviour_kl."""
    name = "plain_reinforce_for_this_test"

    def needs_reference(self) -> bool:
        return False

    def loss(self, batch, step):
        return -(batch.rewards * batch.logps).mean(), {}


@pytest.mark.parametrize("algo", ["tb", "grpo", "dr_grpo", "rloo", "online_dpo", "own"])
def test_every_loss_logs_behaviour_kl_through_compute_loss(tiny, algo, tmp_path):
    """The sampler's own log-probs shifted by +0.05 nats per token: log mu - log pi_theta is
    0.05 x the response's length, so behaviour_kl is 0.05 x the mean length, for every loss,
    one of the user's own included; clip_fraction only from the PPO-clipped losses."""
    model, tok, train = tiny
    batch = _rollouts(model, tok, train, shift=0.05)
    algorithm = (_PlainReinforce(_cfg("tb", tmp_path)) if algo == "own"
                 else make_algorithm(_cfg(algo, tmp_path)))
    _, info = compute_loss(algorithm, model, batch, tok.pad_token_id, step=0)
    expected = 0.05 * np.mean([len(r.response_ids) for r in batch])
    assert info["behaviour_kl"] == pytest.approx(expected, abs=1e-4)
    assert ("clip_fraction" in info) == (algo in ("grpo", "dr_grpo", "rloo"))


def test_behaviour_kl_is_zero_on_the_samplers_own_logprobs_and_grows_after_an_update(tiny, tmp_path):
    """On-policy (the behaviour log-probs are what the sampler recorded for these weights) it is
    0 up to float rounding. After one real update it equals the sampler's sequence log-probs
    minus the updated policy's, recomputed here independently."""
    from tba_lab.rollout.scoring import response_logprobs

    model, tok, train = tiny
    model = copy.deepcopy(model)  # the session fixture stays untouched
    batch = _rollouts(model, tok, train)
    algorithm = make_algorithm(_cfg("tb", tmp_path))
    loss, info = compute_loss(algorithm, model, batch, tok.pad_token_id, step=0)
    assert abs(info["behaviour_kl"]) < 1e-4
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    opt.zero_grad()
    loss.backward()
    opt.step()
    _, info = compute_loss(algorithm, model, batch, tok.pad_token_id, step=1)
    with torch.no_grad():
        lp, mask = response_logprobs(model, [r.prompt_ids for r in batch],
                                     [r.response_ids for r in batch], tok.pad_token_id, 0.6)
    log_pi = (lp * mask).sum(1).double().numpy()
    log_mu = np.array([sum(r.behaviour_token_logps) for r in batch])
    assert info["behaviour_kl"] == pytest.approx(float(np.mean(log_mu - log_pi)), abs=1e-4)
    assert abs(info["behaviour_kl"]) > 1e-3  # the update moved the policy off the data


@pytest.mark.parametrize("algo,mode", [("tb", "sync"), ("grpo", "async")])
def test_a_training_run_logs_behaviour_kl_in_every_row_and_clip_fraction_only_when_clipped(
        tmp_path, algo, mode):
    """A real 3-update run: behaviour_kl in every metrics.jsonl row and in TensorBoard
    (train/behaviour_kl); about 0 for every batch of staleness 0 (all of sync mode's: on-policy);
    clip_fraction for the PPO-clipped GRPO, in both, and never for TB (every loss's info is
    checked without a run in test_every_loss_logs_behaviour_kl_through_compute_loss)."""
    from tba_lab.reporting import read_tensorboard
    from tba_lab.trainer import train
    from tests.test_async_smoke import _assert_no_children, _config, _read_jsonl

    torch.set_num_threads(1)
    cfg = _config(tmp_path, algo=algo, training={"max_steps": 3}, report_to=["tensorboard"],
                  model={"temperature": 0.6, "max_new_tokens": 24},
                  task={"eval_size": 4, "interim_eval_size": 4, "eval_every_seconds": 0},
                  async_={"mode": mode, "searcher_threads": 1})
    summary = train(cfg, progress=False)
    _assert_no_children()
    assert summary["trainer_steps"] == 3
    rows = _read_jsonl(tmp_path / "metrics.jsonl")
    assert len(rows) == 3
    assert all(math.isfinite(r["behaviour_kl"]) for r in rows), rows
    on_policy = [r["behaviour_kl"] for r in rows if r["staleness_max"] == 0]
    if mode == "sync":
        assert len(on_policy) == 3
    assert all(abs(kl) < 1e-2 for kl in on_policy), on_policy  # data of the weights it trains
    clipped = algo == "grpo"
    assert all(("clip_fraction" in r) == clipped for r in rows)
    tb = read_tensorboard(tmp_path)
    assert [s for s, _ in tb["train/behaviour_kl"]] == [r["step"] for r in rows]
    np.testing.assert_allclose([v for _, v in tb["train/behaviour_kl"]],
                               [r["behaviour_kl"] for r in rows], rtol=1e-6, atol=1e-7)
    assert ("train/clip_fraction" in tb) == clipped
