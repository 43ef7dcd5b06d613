"""Embedded model and tokenizer, offline loading, generation and log-prob scoring."""
import json

import pytest
import torch

from tba_lab.models import DEFAULT_MODEL_DIR, DEFAULT_TASK_DIR, load_policy
from tba_lab.rollout.backend import TransformersBackend, cut_at_eos
from tba_lab.rollout.scoring import collate, response_logprobs
from tba_lab.tasks import format_prompt


def test_tokenizer_round_trip_exact(tiny):
    _, tok, train = tiny
    for row in train[:50]:
        text = format_prompt(row["question"]) + " " + row["answer"]
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == text
    assert tok("Question: 12")["input_ids"][0] == tok.bos_token_id  # prompts start with <bos>
    # digits are single tokens, so "123" is three tokens
    assert len(tok(" 123", add_special_tokens=False)["input_ids"]) == 3


def test_save_and_load_offline_round_trip(tiny, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tok, train = tiny
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    model2 = AutoModelForCausalLM.from_pretrained(tmp_path)
    tok2 = AutoTokenizer.from_pretrained(tmp_path)
    text = format_prompt(train[0]["question"])
    assert tok2(text)["input_ids"] == tok(text)["input_ids"]
    ids = torch.tensor([tok(text)["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(model2(ids).logits, model(ids).logits)


def test_embedded_model_is_committed_and_loads_offline():
    model, tok = load_policy(DEFAULT_MODEL_DIR)
    n = sum(p.numel() for p in model.parameters())
    assert 0.5e6 < n < 2e6, n
    summary = json.loads((DEFAULT_MODEL_DIR / "sft_summary.json").read_text())
    assert 0.20 <= summary["accuracy"] <= 0.60  # room for RL, yet decent
    assert (DEFAULT_TASK_DIR / "train.jsonl").is_file() and (DEFAULT_TASK_DIR / "test.jsonl").is_file()


def test_load_policy_missing_path_says_how_to_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"model.path=.*is not a local folder") as e:
        load_policy(tmp_path / "nope")
    assert "tba-lab sft" not in str(e.value)  # rebuilding the embedded model is not the fix here


def test_cut_at_eos_keeps_terminating_eos_even_when_pad_is_eos():
    eos = 2
    assert cut_at_eos([5, 6, eos, eos, eos], eos) == [5, 6, eos]  # pad == eos: first EOS kept
    assert cut_at_eos([5, 6, 7], eos) == [5, 6, 7]
    _, _, mask, _ = collate([[1, 9]], [[5, 6, eos]], pad_id=eos)
    assert mask.tolist() == [[True, True, True]]  # the EOS is inside the response mask


def _loop_logps(model, prompt, response, temperature):
    """Obviously-correct reference: one unpadded sequence at a time."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(ids).logits[0] / temperature
    lp = torch.log_softmax(logits, -1)
    return [lp[len(prompt) - 1 + t, response[t]].item() for t in range(len(response))]


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_batched_logprobs_match_per_sequence_loop(tiny, temperature):
    model, tok, train = tiny
    prompts = [tok(format_prompt(r["question"]))["input_ids"] for r in train[:4]]
    responses = [[7, 8, 9], [10], [11, 12, 13, 14, 15], [16, 17]]
    with torch.no_grad():
        logps, mask = response_logprobs(model, prompts, responses, tok.pad_token_id, temperature)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ref = _loop_logps(model, p, r, temperature)
        assert mask[i].sum().item() == len(r)
        torch.testing.assert_close(logps[i, :len(r)], torch.tensor(ref), atol=1e-5, rtol=1e-5)
        assert (logps[i, len(r):] == 0).all()


def test_trainer_side_reference_pass_fills_only_missing_logprobs(tiny):
    """``fill_reference`` (async.reference_pass: trainer) gives each rollout without reference
    log-probs the per-sequence loop's values, in place, leaves the others as they are, scores a
    row that appears twice once, and scores nothing the second time."""
    from tba_lab.buffer import Rollout
    from tba_lab.rollout.collect import fill_reference

    model, tok, train = tiny
    prompts = [tok(format_prompt(r["question"]))["input_ids"] for r in train[:2]]
    rows = [(prompts[0], [7, 8, 9], None), (prompts[1], [10], None), (prompts[0], [7, 8, 9], None),
            (prompts[1], [11, 12], [-1.0, -2.0])]
    rollouts = [Rollout(prompt_id=0, prompt_ids=p, response_ids=r, reward=0.0, ref_token_logps=ref,
                        behaviour_token_logps=[0.0] * len(r), version=0) for p, r, ref in rows]
    batch = rollouts + [rollouts[1]]  # a replayed row, the same object twice
    assert fill_reference(model, batch, tok.pad_token_id, 0.6) == 3
    for got, (p, r, ref) in zip(rollouts[:3], rows):
        torch.testing.assert_close(torch.tensor(got.ref_token_logps),
                                   torch.tensor(_loop_logps(model, p, r, 0.6)), atol=1e-5, rtol=1e-5)
    assert rollouts[3].ref_token_logps == [-1.0, -2.0]
    assert fill_reference(model, batch, tok.pad_token_id, 0.6) == 0


def test_sampler_logprobs_match_scoring(tiny):
    """The behaviour log-probs recorded at generation equal a fresh forward pass (ratio == 1)."""
    model, tok, train = tiny
    torch.manual_seed(0)
    backend = TransformersBackend(model, tok)
    prompts = [tok(format_prompt(r["question"]))["input_ids"] for r in train[:3]]
    gen = backend.generate(prompts, num_generations=4, temperature=0.6, max_new_tokens=12)
    assert len(gen.responses) == 12
    rows = [prompts[i // 4] for i in range(12)]  # prompt-major
    with torch.no_grad():
        logps, mask = response_logprobs(model, rows, gen.responses, tok.pad_token_id, 0.6)
    for i, r in enumerate(gen.responses):
        assert len(gen.token_logps[i]) == len(r)
        torch.testing.assert_close(torch.tensor(gen.token_logps[i]), logps[i, :len(r)],
                                   atol=1e-4, rtol=1e-4)
    # scoring without the temperature (T = 1) describes another distribution: ratio != 1
    with torch.no_grad():
        wrong, _ = response_logprobs(model, rows, gen.responses, tok.pad_token_id, 1.0)
    sampled = torch.cat([torch.tensor(t) for t in gen.token_logps])
    assert (torch.cat([wrong[i, :len(r)] for i, r in enumerate(gen.responses)]) - sampled).abs().max() > 0.01


def test_greedy_generation_matches_naive_loop(tiny):
    model, tok, train = tiny
    prompts = [tok(format_prompt(r["question"]))["input_ids"] for r in train[:3]]
    out = TransformersBackend(model, tok).generate(prompts, 1, temperature=0.0, max_new_tokens=6)
    for p, r in zip(prompts, out.responses):
        seq = list(p)
        with torch.no_grad():
            for _ in range(6):
                nxt = model(torch.tensor([seq])).logits[0, -1].argmax().item()
                seq.append(nxt)
                if nxt == tok.eos_token_id:
                    break
        assert r == seq[len(p):]


def test_sft_is_reproducible_from_seed(tmp_path):
    """`tba-lab sft` rebuilds the same task files and the same weights from the same seed."""
    from safetensors.torch import load_file

    from tba_lab.tasks.arithmetic import sft

    runs = []
    for name in ("a", "b"):
        summary = sft(output_dir=tmp_path / name / "model", task_dir=tmp_path / name / "task",
                      seed=3, steps=3, batch_size=8, num_threads=1, eval_size=5, log_every=0)
        assert summary["steps"] == 3 and 0.0 <= summary["accuracy"] <= 1.0
        runs.append(tmp_path / name)
    a, b = runs
    assert (a / "task" / "test.jsonl").read_text() == (b / "task" / "test.jsonl").read_text()
    wa, wb = (load_file(r / "model" / "model.safetensors") for r in runs)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    # and the committed task was written by the same generator (seed 0)
    from tba_lab.tasks.arithmetic import make_splits
    assert json.loads((DEFAULT_TASK_DIR / "test.jsonl").read_text().splitlines()[0]) == make_splits(0)[1][0]


def test_load_policy_treats_org_slash_name_as_hub_id():
    """'org/name' goes to the hub loader (offline here, so it fails there), not to the
    local-path check that suggests `tba-lab sft`."""
    with pytest.raises(OSError) as err:
        load_policy("some-org/some-model")
    assert "tba-lab sft" not in str(err.value)


def test_shared_prompt_scoring_matches_full_rows_values_and_gradients(tiny):
    """Prompt sharing (one prompt pass per group) gives the full-row log-probs and gradients."""
    model, tok, train = tiny
    k = 3
    prompts = [tok(format_prompt(r["question"]))["input_ids"] for r in train[:3]]
    assert len({len(p) for p in prompts}) > 1  # different lengths: left padding is exercised
    rows = [prompts[i // k] for i in range(3 * k)]
    eos = tok.eos_token_id
    responses = [[7, 8, eos], [9], [10, 11, 12, 13], [7], [8, 9, eos], [5, 5], [6], [7, 7, 7, 7, 7], [eos]]
    grads = []
    for share in (True, False):
        model.zero_grad()
        logps, mask = response_logprobs(model, rows, responses, tok.pad_token_id, 0.6,
                                        share_prompts=share)
        (logps.sum(dim=1) * torch.arange(1.0, 10.0)).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        if share:
            shared, shared_mask = logps.detach(), mask
        else:
            torch.testing.assert_close(shared, logps.detach(), atol=1e-5, rtol=1e-5)
            assert torch.equal(shared_mask, mask)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    for i in (0, 4, 8):  # against the one-sequence-at-a-time reference too
        torch.testing.assert_close(shared[i, :len(responses[i])],
                                   torch.tensor(_loop_logps(model, rows[i], responses[i], 0.6)),
                                   atol=1e-5, rtol=1e-5)
    model.zero_grad()


def test_repeated_responses_are_scored_once_with_the_same_values_and_gradients(tiny, monkeypatch):
    """Rows repeating a whole (prompt, response) pair are scored once and gathered back: the
    log-probs and the gradients (each copy weighted differently below, so every copy's
    gradient must be summed in) equal those of the full rows, and the model sees 4 rows, not 7."""
    import tba_lab.rollout.scoring as scoring

    model, tok, train = tiny
    eos = tok.eos_token_id
    a, b = (tok(format_prompt(r["question"]))["input_ids"] for r in train[:2])
    rows = [a, a, a, a, b, b, b]
    responses = [[7, 8, eos], [9], [7, 8, eos], [7, 8, eos], [5, 5], [5, 5], [6]]
    seen = []
    forward = type(model).forward
    monkeypatch.setattr(type(model), "forward",
                        lambda self, *args, **kw: seen.append(kw["input_ids"].shape[0])
                        or forward(self, *args, **kw))
    grads, out = [], []
    for share in (True, False):
        seen.clear()
        model.zero_grad()
        logps, mask = scoring.response_logprobs(model, rows, responses, tok.pad_token_id, 0.6,
                                                share_prompts=share)
        (logps.sum(dim=1) * torch.arange(1.0, 8.0)).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        out.append((logps.detach(), mask, list(seen)))
    (shared, shared_mask, shared_rows), (full, full_mask, full_rows) = out
    assert shared_rows == [2, 4] and full_rows == [7]  # 2 prompts, then 4 distinct responses
    torch.testing.assert_close(shared, full, atol=1e-5, rtol=1e-5)
    assert torch.equal(shared_mask, full_mask)
    assert torch.equal(shared[0], shared[2]) and torch.equal(shared[4], shared[5])
    for x, y in zip(*grads):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-4)
    model.zero_grad()


def test_shared_prefill_generation_matches_plain_generate(tiny):
    """The shared-prefill path continues exactly where a full prefill would: greedy responses
    are identical, and sampled behaviour log-probs agree with a fresh forward pass (above)."""
    model, tok, train = tiny
    prompts = [tok(format_prompt(r["question"]))["input_ids"] for r in train[:4]]
    shared = TransformersBackend(model, tok).generate(prompts, 2, temperature=0.0, max_new_tokens=10)
    plain = TransformersBackend(model, tok).generate(prompts, 1, temperature=0.0, max_new_tokens=10)
    assert shared.responses == [r for r in plain.responses for _ in range(2)]
    assert len({len(p) for p in prompts}) > 1  # left padding is exercised
    torch.manual_seed(3)
    a = TransformersBackend(model, tok).generate(prompts, 3, temperature=1.0, max_new_tokens=10)
    torch.manual_seed(3)
    b = TransformersBackend(model, tok, share_prompts=False).generate(prompts, 3, temperature=1.0,
                                                                     max_new_tokens=10)
    same = sum(x == y for x, y in zip(a.responses, b.responses))
    assert same >= 10  # same seed, same distribution: (nearly) the same draws
    for x, y, lx, ly in zip(a.responses, b.responses, a.token_logps, b.token_logps):
        if x == y:
            torch.testing.assert_close(torch.tensor(lx), torch.tensor(ly), atol=1e-4, rtol=1e-4)


def test_trainer_scores_a_dropout_checkpoint_deterministically(tiny, tmp_path, monkeypatch):
    """A checkpoint with dropout 0.1 (as GPT-2 and OPT ship): in a sync run every update's
    batch is on-policy, so the trainer's log-probs (scored with gradients, as the loss does,
    after the "before" evaluation) equal the searcher's behaviour log-probs, and scoring the
    same batch twice gives the same numbers: the network is the same deterministic one."""
    import tba_lab.trainer as trainer
    from tba_lab.algorithms import PolicyBatch
    from tba_lab.config import from_dict

    model, tok, _ = tiny
    config = model.config.to_dict()
    config["attention_dropout"] = 0.1
    dropout_model = type(model)(type(model.config).from_dict(config))
    dropout_model.load_state_dict(model.state_dict())
    dropout_model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    cfg = from_dict({"output_dir": str(tmp_path / "run"), "max_minutes": 2.0, "algo": "grpo",
                     "model": {"path": str(tmp_path / "model"), "max_new_tokens": 12},
                     "training": {"max_steps": 3, "num_prompts_per_step": 2, "num_generations": 4,
                                  "save_steps": 0, "save_seconds": 0},
                     "async": {"mode": "sync"}, "task": {"eval_size": 2, "interim_eval_size": 2}})
    real, gaps = trainer.compute_loss, []

    def scored_twice(algorithm, policy, batch, pad_id, step):
        assert all(r.version == step for r in batch)  # on-policy
        first, again = (PolicyBatch.from_rollouts(policy, batch, pad_id, cfg.model.temperature,
                                                  4, False) for _ in range(2))
        mask = first.mask.bool()
        gaps.append(((first.token_logps - first.behaviour_token_logps)[mask].abs().max().item(),
                     (first.token_logps - again.token_logps)[mask].abs().max().item()))
        return real(algorithm, policy, batch, pad_id, step)

    monkeypatch.setattr(trainer, "compute_loss", scored_twice)
    assert trainer.train(cfg, progress=False)["trainer_steps"] == 3
    assert len(gaps) == 3
    assert all(to_behaviour < 1e-5 and twice < 1e-6 for to_behaviour, twice in gaps), gaps
