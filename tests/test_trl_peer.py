"""Peer check: our GRPO loss and advantages against TRL's own code on the same tensors.

Nothing of TRL is copied here. A real ``trl.GRPOTrainer`` is built on the committed tiny model
(``data/tiny-llama``) and its own methods are called:

* ``GRPOTrainer._compute_loss(model, inputs)`` -- TRL's GRPO loss (token log-probs through its
  fused LM head, PPO clipping, k3 KL, "grpo" / "bnpo" / "dr_grpo" aggregation); gradients are
  compared too.
* ``GRPOTrainer._get_per_token_logps_and_entropies`` -- TRL's temperature-scaled token log-probs,
  compared with ``tba_lab.rollout.scoring.response_logprobs``.
* ``GRPOTrainer._generate_and_score_completions`` -- the method in which TRL computes the group
  advantages inline (there is no separate callable); only the sampler,
  ``_generate_single_turn``, is stubbed so that the completions are fixed. The reward function
  is a normal TRL reward function that returns prescribed rewards.

What TRL 1.16 does differently from ``tba_lab.losses`` (each difference is pinned by a test):

* ``use_bias_correction_kl`` defaults to True in TRL 1.16: the k3 KL term is multiplied by the
  (differentiable) importance ratio exp(log pi - log pi_old), DeepSeek-V3.2 style. Our
  ``grpo_loss`` adds the plain k3 KL. The two agree when it is False; with the default the
  values differ off-policy and the gradients differ even on-policy (ratio == 1 in value only).
* TRL's scoring forward passes no ``position_ids`` (so they are 0..L-1 including left padding);
  ours derives them from the attention mask, as ``generate`` does. RoPE is relative, so the
  log-probs agree up to float rounding (~1e-5 on left-padded rows, ~1e-6 without padding).
* Everything else matches exactly: ratio and two-sided clip at epsilon 0.2, KL added per token
  before aggregation, "grpo" = mean of per-sequence token means, "bnpo" = batch token mean,
  "dr_grpo" normalised by N * ``args.max_completion_length`` (the config's cap, not the padded
  width T -- pass it as our ``max_completion_length``), advantages with Bessel-corrected std and
  eps = 1e-4 for scale_rewards "group" / "batch" / "none". TRL also divides the loss by
  ``gradient_accumulation_steps`` in train mode (1 here).

Runs in ~10 s on one CPU thread (most of it importing TRL).
"""
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
trl = pytest.importorskip("trl")
# TRL 1.16 calls transformers' deprecated is_gradient_checkpointing while scoring; harmless here.
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

import torch  # noqa: E402

from tba_lab.losses import group_advantages, grpo_loss, kl_penalty, masked_mean  # noqa: E402
from tba_lab.models import DEFAULT_MODEL_DIR, load_policy  # noqa: E402
from tba_lab.rollout.scoring import collate, response_logprobs  # noqa: E402

TEMPERATURE = 0.6          # not 1.0, so a temperature mismatch would show
MAX_COMPLETION_LENGTH = 16  # TRL's dr_grpo normaliser; larger than the padded width below
BETA = 0.04
EPSILON = 0.2
K = 4                       # completions per prompt
LENGTHS = [3, 7, 12, 1, 5, 9, 12, 2]  # completion lengths (T = 12 < MAX_COMPLETION_LENGTH)
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo")


def _make_trainer(out_dir, **overrides):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    for name in ("_compute_loss", "_get_per_token_logps_and_entropies",
                 "_generate_and_score_completions", "_generate_single_turn"):
        assert hasattr(GRPOTrainer, name), (
            f"trl {trl.__version__}: GRPOTrainer.{name} is gone; this peer check targets trl 1.16's "
            "internals and must be updated to the installed version")
    model, tok = load_policy(DEFAULT_MODEL_DIR)
    kwargs = dict(output_dir=str(out_dir), per_device_train_batch_size=2 * K, num_generations=K,
                  max_completion_length=MAX_COMPLETION_LENGTH, temperature=TEMPERATURE, top_k=0,
                  top_p=1.0, beta=BETA, epsilon=EPSILON, loss_type="grpo", scale_rewards="group",
                  use_vllm=False, report_to="none", bf16=False, use_cpu=True,
                  activation_checkpointing=False, gradient_checkpointing=False,
                  save_strategy="no", logging_strategy="no", disable_tqdm=True,
                  use_bias_correction_kl=False)
    kwargs.update(overrides)
    args = GRPOConfig(**kwargs)

    def reward_from_column(completions, reward, **_):  # rewards prescribed by the dataset rows
        return [float(r) for r in reward]

    ds = Dataset.from_dict({"prompt": ["Question: 1 + 1?\nAnswer:"] * 2, "reward": [0.0, 1.0]})
    trainer = GRPOTrainer(model=model, reward_funcs=reward_from_column, args=args,
                          train_dataset=ds, processing_class=tok)
    model.train()
    # Set by transformers' training loop before each update; 1 = no gradient accumulation.
    trainer.current_gradient_accumulation_steps = 1
    return trainer, model, tok


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    trainer, model, tok = _make_trainer(tmp_path_factory.mktemp("trl_peer"))
    g = torch.Generator().manual_seed(0)
    texts = ["Question: Tom has 3 apples.\nAnswer:",
             "Question: Sam buys 11 boxes of 4 pens each. How many pens?\nAnswer:"]
    enc = tok(texts)["input_ids"]                      # different lengths: left padding is exercised
    prompts = [enc[i // K] for i in range(2 * K)]      # prompt-major, K completions per prompt
    responses = [torch.randint(4, len(tok), (n,), generator=g).tolist() for n in LENGTHS]
    ids, attn, mask, p_len = collate(prompts, responses, tok.pad_token_id)
    with torch.no_grad():
        cur, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attn, ids.shape[1] - p_len)
    # Behaviour and reference log-probs that differ from the current ones, so ratios != 1,
    # some tokens clip on each side, and the KL is nonzero.
    old = (cur + 0.3 * torch.randn(cur.shape, generator=g)) * mask
    ref = (cur + 0.3 * torch.randn(cur.shape, generator=g)) * mask
    adv = torch.randn(2 * K, generator=g)
    inputs = {"prompt_ids": ids[:, :p_len], "prompt_mask": attn[:, :p_len],
              "completion_ids": ids[:, p_len:], "completion_mask": attn[:, p_len:],
              "advantages": adv, "old_per_token_logps": old, "ref_per_token_logps": ref}
    yield {"trainer": trainer, "model": model, "tok": tok, "prompts": prompts,
           "responses": responses, "ids": ids, "attn": attn, "mask": mask, "p_len": p_len,
           "old": old, "ref": ref, "adv": adv, "inputs": inputs}
    torch.set_num_threads(threads)


def _trl_loss(peer, loss_type, inputs=None, backward=False):
    trainer, model = peer["trainer"], peer["model"]
    trainer.loss_type = loss_type  # read by _compute_loss at call time
    model.zero_grad(set_to_none=True)
    loss = trainer._compute_loss(model, peer["inputs"] if inputs is None else inputs)
    if not backward:
        return loss.detach(), None
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def _our_loss(peer, loss_type, backward=False, beta=BETA, **kw):
    """Our grpo_loss on TRL's own token log-probs (same forward), so only the loss differs."""
    trainer, model, ids, attn = peer["trainer"], peer["model"], peer["ids"], peer["attn"]
    model.zero_grad(set_to_none=True)
    logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attn,
                                                           ids.shape[1] - peer["p_len"])
    kw.setdefault("max_completion_length", MAX_COMPLETION_LENGTH)
    loss, info = grpo_loss(logps, peer["old"], peer["ref"], peer["adv"], peer["mask"],
                           clip_eps=EPSILON, beta=beta, kl_estimator="k3", loss_type=loss_type, **kw)
    if not backward:
        return loss.detach(), info, None
    loss.backward()
    return loss.detach(), info, [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_grpo_loss_and_gradients_match_trl(peer, loss_type):
    trl_value, trl_grads = _trl_loss(peer, loss_type, backward=True)
    ours, info, our_grads = _our_loss(peer, loss_type, backward=True)
    torch.testing.assert_close(ours, trl_value, atol=1e-5, rtol=1e-5)
    for a, b in zip(our_grads, trl_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    # The case is a real one: both clip sides active, ratios != 1, KL in the loss. TRL's own
    # metrics (same definitions) agree with ours.
    metrics = peer["trainer"]._metrics["train"]
    assert 0.05 < info["clip_fraction"] < 0.95
    assert info["clip_fraction"] == pytest.approx(metrics["clip_ratio/region_mean"][-1], abs=1e-6)
    assert metrics["clip_ratio/low_mean"][-1] > 0 and metrics["clip_ratio/high_mean"][-1] > 0
    assert info["kl"] == pytest.approx(metrics["kl"][-1], abs=1e-6) and info["kl"] > 1e-3


def test_peer_check_is_sensitive(peer):
    """The comparison above would catch a wrong loss: each ingredient moves TRL's value."""
    base = {lt: _trl_loss(peer, lt)[0] for lt in LOSS_TYPES}
    # the three aggregations differ on this batch (unequal lengths, T < max_completion_length)
    assert min(abs(base[a] - base[b]) for a in LOSS_TYPES for b in LOSS_TYPES if a < b) > 1e-3
    inputs = peer["inputs"]
    on_policy = dict(inputs, old_per_token_logps=None)  # TRL then uses per_token_logps.detach()
    assert abs(_trl_loss(peer, "grpo", on_policy)[0] - base["grpo"]) > 1e-3  # ratio / clipping
    flipped = dict(inputs, advantages=-inputs["advantages"])
    assert abs(_trl_loss(peer, "grpo", flipped)[0] - base["grpo"]) > 1e-3
    # our variants that are NOT TRL's loss are told apart at the test's tolerance
    assert abs(_our_loss(peer, "grpo", beta=0.0)[0] - base["grpo"]) > 1e-4              # KL omitted
    assert abs(_our_loss(peer, "dr_grpo", max_completion_length=None)[0] - base["dr_grpo"]) > 1e-3
    trainer = peer["trainer"]
    trainer.loss_type = "grpo"
    logps, _, _ = trainer._get_per_token_logps_and_entropies(
        peer["model"], peer["ids"], peer["attn"], peer["ids"].shape[1] - peer["p_len"])
    k1, _ = grpo_loss(logps, peer["old"], peer["ref"], peer["adv"], peer["mask"], clip_eps=EPSILON,
                      beta=BETA, kl_estimator="k1", loss_type="grpo")
    assert abs(k1.detach() - base["grpo"]) > 1e-4                                          # k1 != k3


def test_trl_default_bias_corrected_kl_differs_from_ours(peer, tmp_path):
    """TRL 1.16 default use_bias_correction_kl=True weights the k3 KL by the importance ratio;
    our grpo_loss does not. The difference is exactly beta * agg((ratio - 1) * k3)."""
    default, model, _ = _make_trainer(tmp_path, use_bias_correction_kl=True)
    model.load_state_dict(peer["model"].state_dict())
    default.loss_type = "grpo"
    biased = default._compute_loss(model, peer["inputs"]).detach()
    plain = _trl_loss(peer, "grpo")[0]
    ours = _our_loss(peer, "grpo")[0]
    torch.testing.assert_close(ours, plain, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        logps, _, _ = default._get_per_token_logps_and_entropies(
            model, peer["ids"], peer["attn"], peer["ids"].shape[1] - peer["p_len"])
        ratio = torch.exp(logps - peer["old"])
        extra = (ratio - 1) * kl_penalty(logps, peer["ref"], "k3")
        expected_gap = BETA * masked_mean(extra, peer["mask"], dim=1).mean()
    assert abs(expected_gap) > 1e-6
    torch.testing.assert_close(biased - plain, expected_gap, atol=2e-6, rtol=1e-3)


def test_token_logprobs_match_trl(peer):
    """response_logprobs (our scorer, temperature-scaled, position ids from the mask) against
    TRL's fused-LM-head log-probs at the config temperature."""
    trainer, model, tok = peer["trainer"], peer["model"], peer["tok"]
    pad, mask = tok.pad_token_id, peer["mask"]
    with torch.no_grad():
        trl_lp, _, _ = trainer._get_per_token_logps_and_entropies(
            model, peer["ids"], peer["attn"], peer["ids"].shape[1] - peer["p_len"])
        ours, our_mask = response_logprobs(model, peer["prompts"], peer["responses"], pad,
                                           temperature=TEMPERATURE)
        assert torch.equal(our_mask, mask)
        # left-padded prompts: TRL's position ids include the padding, ours skip it (RoPE is
        # relative, so only rounding differs)
        torch.testing.assert_close(ours * mask, trl_lp * mask, atol=1e-4, rtol=0)
        at_t1, _ = response_logprobs(model, peer["prompts"], peer["responses"], pad, temperature=1.0)
        assert ((at_t1 - trl_lp) * mask).abs().max() > 0.1  # a temperature mismatch would show
        # no padding at all (one prompt): identical positions, so a tight match
        half = slice(0, K)
        ids, attn, m, p_len = collate(peer["prompts"][half], peer["responses"][half], pad)
        trl_lp, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attn, ids.shape[1] - p_len)
        ours, _ = response_logprobs(model, peer["prompts"][half], peer["responses"][half], pad,
                                    temperature=TEMPERATURE)
        torch.testing.assert_close(ours * m, trl_lp * m, atol=1e-5, rtol=0)


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_group_advantages_match_trl(peer, scale_rewards):
    """TRL computes advantages inline in _generate_and_score_completions; we drive that method
    with the sampler stubbed (fixed completions) and rewards prescribed through the rows."""
    trainer, tok = peer["trainer"], peer["tok"]
    rewards = torch.tensor([0.0, 1.0, 1.0, 0.0,      # binary, like exact match
                            0.3, -1.2, 2.5, 0.7,     # arbitrary real rewards
                            1.0, 1.0, 1.0, 1.0,      # constant group: advantage 0 in every mode
                            0.0, 0.0, 0.0, 1.0])     # one success out of K
    rows = [{"prompt": f"Question: problem {i // K}?\nAnswer:", "reward": float(r)}
            for i, r in enumerate(rewards)]          # prompt-major, as TRL's RepeatSampler yields

    def fixed_completions(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        return [[5, 6, tok.eos_token_id] for _ in prompt_ids], None

    trainer._generate_single_turn = fixed_completions  # instance attribute: only the sampler is stubbed
    trainer.scale_rewards = scale_rewards              # read by the method at call time
    try:
        out = trainer._generate_and_score_completions(rows)
    finally:
        del trainer._generate_single_turn
    trl_adv = out["advantages"]
    # TRL's eps is the literal 1e-4 in grpo_trainer.py (std + 1e-4), the same as our default
    ours = group_advantages(rewards, K, scale_rewards, eps=1e-4)
    torch.testing.assert_close(ours, trl_adv, atol=1e-6, rtol=1e-5)
    assert trl_adv[:8].abs().min() > 0.05 and torch.all(trl_adv[8:12] == 0)
    # sensitivity: a wrong eps or a population (biased) std would be caught at this tolerance
    if scale_rewards == "group":
        assert (group_advantages(rewards, K, "group", eps=1e-2) - trl_adv).abs().max() > 1e-3
        grouped = rewards.view(-1, K)
        biased = (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, correction=0, keepdim=True) + 1e-4)
        assert (biased.reshape(-1)[:8] - trl_adv[:8]).abs().max() > 1e-2
    # on-policy: with one update per generation batch TRL keeps no behaviour log-probs
    assert "old_per_token_logps" not in out
