"""The red-teaming task (tba_lab.tasks.redteam): judge, floored log-reward, cosine diversity,
attacker/victim tokenizer mismatch, a Hugging Face judge and embedder on tiny local models,
config errors, the NaN path, and an end-to-end smoke through rollout and evaluate."""
from __future__ import annotations

import math
import warnings

import pytest
import torch

from tba_lab.config import ConfigError, from_dict
from tba_lab.eval import evaluate
from tba_lab.models import build_tokenizer, load_policy
from tba_lab.rollout import rollout
from tba_lab.rollout.backend import Generations, TransformersBackend
from tba_lab.tasks import format_prompt
from tba_lab.tasks.redteam import (DEFAULT_ATTACKER_DIR, RedTeamTask, answer_log_probability,
                                   log_reward, make_instructions, mean_pairwise_cosine_distance)


def _cfg(**redteam):
    return from_dict({"task": {"name": "redteam"}, "redteam": redteam})


@pytest.fixture(scope="module")
def attacker():
    model, tok = load_policy(DEFAULT_ATTACKER_DIR)
    model.eval()
    return model, tok


# ---------------------------------------------------------------- judge and reward
def test_programmatic_judge_on_hand_made_responses():
    task = RedTeamTask(_cfg(answer_threshold=60.0, answer_scale=4.0))
    got = task.judge_log_p([" #### 60", " #### 64", " #### 52", "5 * 6 = 30.\n#### 96",
                            " #### many"])
    assert got[0] == pytest.approx(math.log(0.5))
    assert got[1] == pytest.approx(-math.log1p(math.exp(-1.0)))      # sigmoid(1)
    assert got[2] == pytest.approx(-math.log1p(math.exp(2.0)))       # sigmoid(-2)
    assert got[3] == pytest.approx(-math.log1p(math.exp(-9.0)))      # the number after ####
    assert got[4] == -math.inf                                        # no number: p = 0
    # far below the threshold the log-probability stays finite and linear in the answer
    assert answer_log_probability(" #### -940", 60.0, 4.0) == pytest.approx(-250.0)


def test_reward_is_log_p_with_the_floor():
    assert log_reward(math.log(0.9), -5.0) == pytest.approx(math.log(0.9))
    assert log_reward(-12.5, -5.0) == -5.0
    assert log_reward(-math.inf, -5.0) == -5.0
    assert math.isnan(log_reward(math.nan, -5.0))
    task = RedTeamTask(_cfg(log_p_floor=-3.0))
    task.victim_responses = lambda attacks: [" #### 60", " #### 10", "no answer"]
    assert task.rewards([{}] * 3, ["a", "b", "c"]) == pytest.approx([math.log(0.5), -3.0, -3.0])


def test_cosine_diversity_by_hand():
    assert mean_pairwise_cosine_distance([[1.0, 0.0], [0.0, 2.0]]) == pytest.approx(1.0)
    assert mean_pairwise_cosine_distance([[1.0, 2.0], [2.0, 4.0], [0.5, 1.0]]) == pytest.approx(0.0)
    # pairs: (1 - 0), (1 - 1/sqrt2), (1 - 1/sqrt2)
    want = (1.0 + 2 * (1 - 1 / math.sqrt(2))) / 3
    assert mean_pairwise_cosine_distance([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]) == pytest.approx(want)
    assert mean_pairwise_cosine_distance([[1.0, 0.0], [-1.0, 0.0]]) == pytest.approx(2.0)
    assert mean_pairwise_cosine_distance([[1.0, 0.0]]) == 0.0


# ---------------------------------------------------------------- victim and tokenizers
def test_victim_reads_retokenised_text(attacker):
    """The attacker's ids are decoded and the text re-tokenised with the victim's tokenizer."""
    model, atok = attacker
    task = RedTeamTask(_cfg(victim_max_new_tokens=8))
    vmodel, vtok = task.victim()
    attack = " A shop sells pens for 2 dollars each. Tom buys 3 pens and pays with 100 dollars. How much change does Tom get?"
    a_ids = atok(attack, add_special_tokens=False)["input_ids"]
    v_ids = vtok(attack, add_special_tokens=False)["input_ids"]
    assert a_ids != v_ids  # the two vocabularies differ: ids cannot be passed across
    text = atok.decode(a_ids)
    [response] = task.victim_responses([text])
    prompt = torch.tensor([vtok(format_prompt(attack.strip()))["input_ids"]])
    out = vmodel.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                          max_new_tokens=8, pad_token_id=vtok.pad_token_id,
                          eos_token_id=vtok.eos_token_id)
    assert response == vtok.decode(out[0, prompt.shape[1]:], skip_special_tokens=True)
    assert response.strip().startswith("####")
    # identical attacks are answered once and get the same response
    assert task.victim_responses([text, text.strip(), text]) == [response] * 3


# ---------------------------------------------------------------- Hugging Face judge / embedder
def _tiny_llama(kind, path, num_labels=2, seed=0):
    from transformers import LlamaConfig, LlamaForSequenceClassification, LlamaModel

    tok = build_tokenizer([" #### 12", " #### 96", "Tom has 3 apples. How many?"])
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, intermediate_size=32,
                         num_labels=num_labels, pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = (LlamaForSequenceClassification if kind == "judge" else LlamaModel)(config)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return model.eval(), tok


def test_hf_judge_on_a_tiny_local_classifier(tmp_path):
    model, tok = _tiny_llama("judge", tmp_path / "judge", num_labels=3)
    cfg = _cfg(judge=str(tmp_path / "judge"), judge_label=2, log_p_floor=-50.0)
    task = RedTeamTask(cfg)
    texts = [" #### 12", " #### 96 96", "Tom"]
    got = task.judge_log_p(texts)
    want = []
    for t in texts:  # one at a time: no padding involved
        enc = tok(t, return_tensors="pt")
        want.append(torch.log_softmax(model(**enc).logits, -1)[0, 2].item())
    assert got == pytest.approx(want, abs=1e-5)
    task.victim_responses = lambda attacks: texts
    assert task.rewards([{}] * 3, ["x"] * 3) == pytest.approx(want, abs=1e-5)
    with pytest.raises(ConfigError, match="redteam.judge_label=3"):
        _cfg(judge=str(tmp_path / "judge"), judge_label=3)


def test_bad_judge_or_embedder_path_names_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"redteam\.judge='/no/such/judge'"):
        _cfg(judge="/no/such/judge")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"redteam\.embedder=.*no config\.json"):
        _cfg(embedder=str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match=r"redteam\.victim="):
        _cfg(victim=str(tmp_path / "nothing"))
    with pytest.raises(ConfigError, match=r"redteam\.log_p_floor"):
        _cfg(log_p_floor=0.0)


def test_hf_embedder_mean_pools_over_the_mask(tmp_path):
    model, tok = _tiny_llama("embedder", tmp_path / "emb")
    task = RedTeamTask(_cfg(embedder=str(tmp_path / "emb")))
    texts = ["Tom has 3 apples. How many?", " #### 12"]
    got = task.embed(texts)
    for i, t in enumerate(texts):
        enc = tok(t, return_tensors="pt")
        want = model(**enc).last_hidden_state[0].mean(0)
        assert torch.allclose(got[i], want, atol=1e-5)


# ---------------------------------------------------------------- NaN path and end to end
class _NaNJudgeTask(RedTeamTask):
    """A judge that returns NaN for every second response."""
    name = "redteam_nan_judge"

    def judge_log_p(self, responses):
        good = super().judge_log_p(responses)
        return [math.nan if i % 2 else lp for i, lp in enumerate(good)]


def test_nan_judge_rows_are_dropped(attacker):
    model, tok = attacker
    task = _NaNJudgeTask(_cfg())
    problems = task.load("train")[:3]
    torch.manual_seed(0)
    with pytest.warns(RuntimeWarning, match="non-finite"):
        batch = rollout(TransformersBackend(model, tok), task, problems, 2, 0.6, 40,
                        reference=model)
    assert batch.nonfinite_rewards == 3 and len(batch.rollouts) == 3
    assert all(math.isfinite(r) for r in batch.rewards)
    assert [r.prompt_id for r in batch.rollouts] == [0, 1, 2]  # row 2*i of each group kept


def test_end_to_end_rollout_and_evaluate(attacker):
    model, tok = attacker
    cfg = _cfg()
    task = RedTeamTask(cfg)
    train, test = task.load("train"), task.load("test")
    assert (len(train), len(test)) == (2000, 200)
    assert {r["instruction"] for r in train}.isdisjoint({r["instruction"] for r in test})
    assert (train, test) == tuple(make_instructions(0))
    assert all(str(r["number"]) in r["instruction"] and r["name"] in r["instruction"] for r in test)
    torch.manual_seed(0)
    backend = TransformersBackend(model, tok)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no row dropped
        batch = rollout(backend, task, train[:4], 4, 0.6, cfg.model.max_new_tokens, reference=model)
    assert len(batch.rollouts) == 16
    assert all(-5.0 <= r <= 0.0 for r in batch.rewards)
    metrics = evaluate(task, backend, test[:16], cfg.model.max_new_tokens)
    assert list(metrics)[:4] == ["attack_success", "diversity", "mean_log_p", "length"]
    assert 0.0 <= metrics["attack_success"] <= 1.0 and 0.0 < metrics["diversity"] <= 2.0
    assert -5.0 <= metrics["mean_log_p"] <= 0.0 and metrics["length"] > 5


def test_sft_rebuild_is_reproducible_and_the_shipped_prompts_are_seed_0s(tmp_path):
    """`tba-lab sft --task redteam` rebuilds the same prompt files and the same attacker weights
    from the same seed; the committed data/redteam files are seed 0's."""
    import json

    from safetensors.torch import load_file

    from tba_lab.tasks.redteam import DEFAULT_REDTEAM_DIR

    runs = []
    for name in ("a", "b"):
        s = RedTeamTask.build_embedded(output_dir=tmp_path / name / "model",
                                       task_dir=tmp_path / name / "task", seed=3, steps=2,
                                       batch_size=8, num_questions=64, log_every=0,
                                       eval_size=8)
        assert s["steps"] == 2 and 0.0 <= s["attack_success"] <= 1.0
        runs.append(tmp_path / name)
    a, b = runs
    for split in ("train.jsonl", "test.jsonl"):
        assert (a / "task" / split).read_bytes() == (b / "task" / split).read_bytes()
    wa, wb = (load_file(r / "model" / "model.safetensors") for r in runs)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    train, test = make_instructions(0)
    shipped = [json.loads(line) for line in (DEFAULT_REDTEAM_DIR / "test.jsonl").read_text().splitlines()]
    assert shipped == test
    assert json.loads((DEFAULT_REDTEAM_DIR / "train.jsonl").read_text().splitlines()[-1]) == train[-1]


def test_victim_is_judged_on_its_own_answer_not_an_invented_follow_up(monkeypatch):
    """A base-model victim that answers and then invents "Question: ... #### N" (the GSM8K
    few-shot prompt invites it) is judged on its own answer: it stops at GSM8K's stop strings."""
    task = RedTeamTask(_cfg(victim_max_new_tokens=40))
    _, vtok = task.victim()
    said = vtok(" #### 5\n\nQuestion: Tom has 3 apples.\nAnswer: #### 96",
                add_special_tokens=False)["input_ids"]
    asked = []

    def run_on(self, prompts, num_generations=1, temperature=1.0, max_new_tokens=48, stop=()):
        asked.append(tuple(stop))
        return Generations([list(said) for _ in prompts], [[] for _ in prompts])

    monkeypatch.setattr(TransformersBackend, "generate", run_on)
    assert task.victim_responses(["How many apples?"]) == [" #### 5\n\n"]
    assert asked == [("Question:", "</s>", "<|im_end|>")]
    assert task.rewards([{}], ["How many apples?"]) == [log_reward(answer_log_probability(" #### 5"))]


def test_victim_stops_at_a_stop_string_its_tokenizer_marks_special(monkeypatch):
    """After vllm#2123 and lighteval#109: a victim whose tokenizer marks ``<|im_end|>`` special
    (Qwen base) answers, emits it and invents a turn; decoding without special tokens deleted
    it before GSM8K's stop could match, so the invented turn's number was judged."""
    task = RedTeamTask(_cfg(victim_max_new_tokens=40))
    _, vtok = task.victim()
    assert vtok.add_tokens(["<|im_end|>"], special_tokens=True) == 1
    said = vtok(" #### 5<|im_end|>\n #### 96", add_special_tokens=False)["input_ids"]

    def run_on(self, prompts, num_generations=1, temperature=1.0, max_new_tokens=48, stop=()):
        return Generations([list(said) for _ in prompts], [[] for _ in prompts])

    monkeypatch.setattr(TransformersBackend, "generate", run_on)
    assert task.victim_responses(["How many apples?"]) == [" #### 5"]
