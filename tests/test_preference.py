"""The preference task (TL;DR in miniature): gold judge, Bradley-Terry loss, RM scoring with
padding and with a foreign tokenizer, config errors, NaN rows, and an end-to-end smoke run."""
from __future__ import annotations

import json
import math
import os
import warnings

import pytest
import torch

from tba_lab.config import ConfigError, from_dict, validate
from tba_lab.paths import DATA_DIR
from tba_lab.reward_model import RewardModel, bradley_terry_loss, score_texts
from tba_lab.tasks.preference import (EVENTS, FILLERS, PreferenceTask, gold_breakdown,
                                      gold_score, load_rows,
                                      make_candidate, make_post, make_splits, summary_items,
                                      win_rate)

POLICY = DATA_DIR / "tiny-llama-preference"
RM = DATA_DIR / "tiny-rm-preference"
needs_embedded = pytest.mark.skipif(
    not (POLICY / "config.json").is_file() or not (RM / "config.json").is_file(),
    reason="embedded preference models missing (tba-lab sft --task preference)")

PROBLEM = {"prompt": "Post: ...\nTL;DR:", "reference": "Tom broke the lamp.",
           "key_facts": ["Tom broke the lamp", "Ana lost the keys", "Ben sold the car"],
           "filler_facts": ["Mia likes tea"]}


# ------------------------------------------------------------------------------ gold judge
@pytest.mark.parametrize("summary, expected", [
    (" Tom broke the lamp.", 1.0),                                  # one key fact
    (" Tom broke the lamp, Ana lost the keys, Ben sold the car.", 3.0),  # all of them
    (" tom broke  the lamp , ana lost the keys", 2.0),             # case, spaces, no final "."
    (" Tom broke the lamp, Mia likes tea.", 0.5),                   # + filler -0.5
    (" Tom broke the lamp, Sam broke the lamp.", 0.0),              # + hallucinated -1
    (" Tom broke the lamp, Tom broke the lamp, Tom broke the lamp.", -1.0),  # 2 repeats -2
    ("", 0.0),                                                      # says nothing
    # 7 items, 28 words: 3 covered, 4 repeats (-4), 8 words over 20 (-0.8)
    (" Tom broke the lamp, Ana lost the keys, Ben sold the car, Tom broke the lamp, "
     "Ana lost the keys, Ben sold the car, Tom broke the lamp.", 3.0 - 4.0 - 0.8),
])
def test_gold_judge_hand_written(summary, expected):
    assert gold_score(PROBLEM, summary) == pytest.approx(expected)


def test_gold_breakdown_and_items():
    assert summary_items(" A b, c d.") == ["a b", "c d"]
    b = gold_breakdown(PROBLEM, " Ana lost the keys, Mia likes tea, Zoe hid the boat, Ana lost the keys.")
    assert (b["covered"], b["filler"], b["hallucinated"], b["repeated"], b["words"]) == (1, 1, 1, 1, 15)
    assert b["score"] == pytest.approx(1 - 0.5 - 1 - 1)


def test_win_rate_ties_count_half():
    assert win_rate([2.0, 1.0, 0.0, 1.5], [1.0, 1.0, 1.0, 1.5]) == pytest.approx((1 + 0.5 + 0 + 0.5) / 4)
    with pytest.raises(ValueError):
        win_rate([1.0], [])


def test_splits_deterministic_and_disjoint():
    a = make_splits(seed=3, num_train=50, num_test=20, num_pairs=30, heldout_pairs=5)
    b = make_splits(seed=3, num_train=50, num_test=20, num_pairs=30, heldout_pairs=5)
    assert a == b
    train, test, pairs = a
    assert not {p["post"] for p in train} & {p["post"] for p in test}
    assert sum(p["heldout"] for p in pairs) == 5
    for p in train:  # the reference is made of the post's facts only, never repeats
        bd = gold_breakdown(p, p["reference"])
        assert bd["hallucinated"] == 0 and bd["repeated"] == 0 and bd["covered"] >= 1
    for pair in pairs:  # chosen strictly better under the gold judge
        post = next(iter(pair["prompt"].split("\n")))
        assert pair["chosen"] != pair["rejected"] and post.startswith("Post: ")


def test_posts_copyable_and_candidates_never_repeat():
    import random

    rng = random.Random(0)
    for _ in range(200):
        p = make_post(rng)
        assert set(p["key_facts"]) <= set(EVENTS) and set(p["filler_facts"]) <= set(FILLERS)
        actors = [s.split()[0] for s in p["post"].split(".") if s.strip()]
        assert len(actors) == len(set(actors))  # one sentence per actor: naming it is enough
        assert 2 <= len(p["key_facts"]) <= 4 and 1 <= len(p["filler_facts"]) <= 2
        for item in p["key_facts"] + p["filler_facts"]:
            assert item + "." in p["post"]  # items are verbatim sentences of the post
        assert all(f.split()[1] in ("likes", "feels") for f in p["filler_facts"])
        bd = gold_breakdown(p, make_candidate(rng, p))
        assert bd["repeated"] == 0  # the RM's blind spot: pairs never show a repeat


def test_load_rows_field_names(tmp_path):
    path = tmp_path / "tldr.jsonl"
    path.write_text(json.dumps({"post": "I lost my keys.", "summary": "lost keys",
                                "subreddit": "help", "title": "Keys"}) + "\n"
                    + json.dumps({"prompt": "P: x\nTL;DR:", "reference": "x"}) + "\n")
    rows = load_rows(str(path), "train")
    assert rows[0] == {"prompt": "Post: SUBREDDIT: r/help\nKeys\nI lost my keys.\nTL;DR:",
                       "reference": "lost keys"}
    assert rows[1] == {"prompt": "P: x\nTL;DR:", "reference": "x"}
    path.write_text(json.dumps({"text": "no post"}) + "\n")
    with pytest.raises(ValueError, match="'post' or 'prompt'"):
        load_rows(str(path), "train")


@pytest.mark.parametrize("layout", ["json file", "dataset folder"])
def test_load_rows_reads_a_corrected_copy_with_the_same_mtime(tmp_path, layout):
    """After datasets#2956 and #444: a ``.json`` file or dataset folder replaced by a corrected
    copy that keeps the old modification time (``cp -p``, ``rsync -a``) is read as it is now,
    not from ``datasets``' cache of the old file (keyed on path and mtime)."""
    old = [{"prompt": "P: a\nTL;DR:", "reference": "wrong"}]
    new = [{"prompt": "P: a\nTL;DR:", "reference": "right"}]
    path = tmp_path / "tldr.json" if layout == "json file" else tmp_path / "d" / "train.jsonl"
    path.parent.mkdir(exist_ok=True)
    source = str(path if layout == "json file" else path.parent)
    path.write_text(json.dumps(old) if layout == "json file" else json.dumps(old[0]) + "\n")
    assert load_rows(source, "train") == old
    stamp = path.stat()
    path.write_text(json.dumps(new) if layout == "json file" else json.dumps(new[0]) + "\n")
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # what cp -p does
    assert load_rows(source, "train") == new


# ------------------------------------------------------------------------------ RM pieces
def test_bradley_terry_loss_hand_computed():
    chosen, rejected = torch.tensor([1.0, 0.0, 3.0]), torch.tensor([0.0, 2.0, 3.0])
    # -log sigmoid(1) = log(1 + e^-1) = 0.313262; -log sigmoid(-2) = log(1 + e^2) = 2.126928;
    # equal scores: log 2 = 0.693147
    expected = (0.3132617 + 2.1269280 + 0.6931472) / 3
    assert float(bradley_terry_loss(chosen, rejected)) == pytest.approx(expected, abs=1e-6)
    with pytest.raises(ValueError):
        bradley_terry_loss(chosen, rejected[:2])


def _tiny_rm(tokenizer, hidden=32, seed=0):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, intermediate_size=64,
                      max_position_embeddings=512, num_labels=1,
                      pad_token_id=tokenizer.pad_token_id)
    model = LlamaForSequenceClassification(cfg)
    torch.nn.init.normal_(model.score.weight, std=1.0)  # visible differences between texts
    return model.eval()


TEXTS = ["Post: Tom lost lamp.\nTL;DR: Tom lost lamp.",
         "Post: Ana found phone. Ivy likes tea.\nTL;DR: Ana found phone, Ivy likes tea.",
         "Post: x\nTL;DR:"]


def test_last_non_pad_scoring_left_and_right_padding_match_unpadded():
    from tba_lab.models import build_tokenizer

    tok = build_tokenizer(TEXTS)
    model = _tiny_rm(tok)
    with torch.no_grad():
        alone = [float(model(input_ids=torch.tensor([tok(t)["input_ids"]])).logits[0, 0]) for t in TEXTS]
    right = score_texts(model, tok, TEXTS, padding_side="right")
    left = score_texts(model, tok, TEXTS, padding_side="left")
    assert right == pytest.approx(alone, abs=1e-5)
    assert left == pytest.approx(alone, abs=1e-5)
    assert len({round(s, 4) for s in alone}) == 3  # the texts really score differently
    # the library's own pooling with LEFT padding and no position ids: rightmost non-pad token,
    # positions shifted by the pad count, which rotary embeddings leave equal up to rounding
    enc = tok(TEXTS, padding=True, padding_side="left", return_tensors="pt")
    with torch.no_grad():
        lib = model(**{k: enc[k] for k in ("input_ids", "attention_mask")}).logits[:, 0].tolist()
    assert lib == pytest.approx(alone, abs=1e-4)


def _char_tokenizer(texts):
    """A character-level tokenizer, nothing like the policy's word-level one."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set("".join(texts)) | set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,;: \n"))
    vocab = {c: i for i, c in enumerate(["[PAD]", "[UNK]", "[END]"] + chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                   eos_token="[END]", padding_side="left")


@needs_embedded
def test_reward_model_with_another_tokenizer_scores_retokenised_text(tmp_path):
    from tba_lab.models import load_policy

    task0 = PreferenceTask()
    problems = task0.load("test")[:3]
    _, policy_tok = load_policy(POLICY)
    # what a searcher hands the task: the policy's decoded completions
    completions = [policy_tok.decode(policy_tok(" " + p["reference"], add_special_tokens=False)["input_ids"])
                   for p in problems]
    prompts = [task0.format_prompt(p) for p in problems]
    char_tok = _char_tokenizer(prompts + completions)
    rm = _tiny_rm(char_tok, seed=1)
    rm.save_pretrained(tmp_path / "rm")
    char_tok.save_pretrained(tmp_path / "rm")
    assert len(char_tok) != len(policy_tok)

    cfg = validate(from_dict({"task": {"name": "preference"},
                              "preference": {"reward_model": str(tmp_path / "rm")}}))
    got = PreferenceTask(cfg).rewards(problems, completions)
    with torch.no_grad():
        want = [float(rm(input_ids=torch.tensor([char_tok(p + c)["input_ids"]])).logits[0, 0])
                for p, c in zip(prompts, completions)]
    assert got == pytest.approx(want, abs=1e-5)  # no rm_summary.json: raw scores
    assert char_tok(prompts[0] + completions[0])["input_ids"] != policy_tok(prompts[0] + completions[0])["input_ids"]


@needs_embedded
def test_bad_reward_model_path_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"preference\.reward_model=.*no such folder.*fix: set "
                                          r"preference\.reward_model"):
        validate(from_dict({"task": {"name": "preference"},
                            "preference": {"reward_model": str(tmp_path / "nope")}}))
    # a causal LM is not a reward model
    with pytest.raises(ConfigError, match=r"LlamaForCausalLM, not a sequence-classification"):
        validate(from_dict({"task": {"name": "preference"},
                            "preference": {"reward_model": str(POLICY)}}))
    with pytest.raises(ConfigError, match=r"preference\.reward_scale"):
        validate(from_dict({"task": {"name": "preference"}, "preference": {"reward_scale": 0}}))


@needs_embedded
def test_missing_key_facts_needs_gold_model(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text(json.dumps({"post": "a", "summary": "b"}) + "\n")
    with pytest.raises(ConfigError, match=r"key_facts.*preference\.gold_model"):
        validate(from_dict({"task": {"name": "preference", "test_path": str(path)}}))


# ------------------------------------------------------------------------------ through rollout
class _NaNRM:
    """Stands in for the RM: NaN for the first text, 1.0 for the rest."""
    def score(self, texts, batch_size=64):
        return [math.nan] + [1.0] * (len(texts) - 1)


@needs_embedded
def test_nan_reward_row_is_dropped():
    from tba_lab.models import load_policy
    from tba_lab.rollout import rollout
    from tba_lab.rollout.backend import TransformersBackend

    task = PreferenceTask()
    task._rm = _NaNRM()
    model, tok = load_policy(POLICY)
    problems = task.load("train")[:2]
    torch.manual_seed(0)
    with pytest.warns(RuntimeWarning, match="non-finite"):
        batch = rollout(TransformersBackend(model, tok), task, problems, 2, 0.6, 20,
                        reference=model)
    assert batch.nonfinite_rewards == 1 and len(batch.rollouts) == 3
    assert batch.rewards == [1.0, 1.0, 1.0]
    assert [r.prompt_id for r in batch.rollouts] == [0, 1, 1]  # row 0 of prompt 0 is gone


@needs_embedded
def test_end_to_end_rewards_and_metrics_on_embedded_models():
    from tba_lab.eval import evaluate
    from tba_lab.models import load_policy
    from tba_lab.rollout import rollout
    from tba_lab.rollout.backend import TransformersBackend

    cfg = validate(from_dict({"task": {"name": "preference"}}))
    task = PreferenceTask(cfg)
    model, tok = load_policy(cfg.model.path)
    backend = TransformersBackend(model, tok)
    problems = task.load("test")[:8]
    batch = rollout(backend, task, problems[:2], 2, 0.6, 40)
    assert len(batch.rewards) == 4 and all(math.isfinite(r) and abs(r) < 20 for r in batch.rewards)
    # the RM prefers the references of the post to a summary that is no fact of it
    good = task.rewards(problems[:4], [" " + p["reference"] for p in problems[:4]])
    bad = task.rewards(problems[:4], [" Zoe ate moon, Zoe ate moon."] * 4)
    assert sum(good) > sum(bad)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no dropped rows
        m = evaluate(task, backend, problems, 40)
    assert list(m) == ["win_rate", "gold_score", "proxy_reward", "perplexity_sft", "length"]
    assert 0 <= m["win_rate"] <= 1 and 1 < m["perplexity_sft"] < 100 and m["length"] > 0
    assert all(isinstance(v, float) and math.isfinite(v) for v in m.values())
    # the references themselves tie with themselves: win rate exactly 1/2
    refs = [" " + p["reference"] for p in problems]
    m_ref = task.metrics(problems, refs, task.rewards(problems, refs))
    assert m_ref["win_rate"] == 0.5 and m_ref["proxy_reward"] == pytest.approx(
        sum(task.rewards(problems, refs)) / 8)


@needs_embedded
def test_embedded_rm_summary_and_standardisation():
    summary = json.loads((RM / "rm_summary.json").read_text())
    assert summary["pair_accuracy"] > 0.7 and summary["score_std"] > 0
    rm = RewardModel.from_pretrained(RM)
    raw = RewardModel.from_pretrained(RM, normalize=False)
    text = ["Post: Tom lost lamp. Ivy likes tea.\nTL;DR: Tom lost lamp."]
    assert rm.score(text)[0] == pytest.approx((raw.score(text)[0] - summary["score_mean"])
                                              / summary["score_std"], abs=1e-5)


def test_reward_model_is_task_agnostic(tmp_path):
    """train_reward_model standardises on the texts it is given (no import of the task)."""
    import ast
    import inspect

    import tba_lab.reward_model as rm_mod

    tree = ast.parse(inspect.getsource(rm_mod))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m and m.startswith("tba_lab.tasks.preference") for m in imported)
    assert "standardize_texts" in inspect.signature(rm_mod.train_reward_model).parameters


def test_rebuild_is_reproducible_and_the_shipped_data_are_seed_0s(tmp_path):
    """`tba-lab sft --task preference` writes seed 0's data files byte for byte as committed;
    `train-rm` on the same pairs and seed gives the same weights. (The SFT step is
    ``train_sft``, whose reproducibility tests/test_models_rollout.py checks.)"""
    from safetensors.torch import load_file

    from tba_lab.reward_model import train_reward_model
    from tba_lab.tasks.gsm8k import write_jsonl
    from tba_lab.tasks.preference import RM_MODEL, SFT_MODEL, TASK_DIR

    for rows, name in zip(make_splits(seed=0), ("train.jsonl", "test.jsonl", "pairs.jsonl")):
        write_jsonl(rows, tmp_path / name)
        assert (tmp_path / name).read_bytes() == (TASK_DIR / name).read_bytes(), name
    pairs = tmp_path / "few_pairs.jsonl"
    pairs.write_text("".join((TASK_DIR / "pairs.jsonl").read_text().splitlines(True)[:64]))
    for name in ("a", "b"):
        train_reward_model(pairs_path=pairs, output_dir=tmp_path / name, init_from=DATA_DIR / SFT_MODEL,
                           seed=3, steps=2, batch_size=8, num_threads=1, log_every=0,
                           standardize_texts=["Post: a b c\nTL;DR: a", "Post: d\nTL;DR: d"])
    wa, wb = (load_file(tmp_path / n / "model.safetensors") for n in ("a", "b"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    shipped = load_file(DATA_DIR / RM_MODEL / "model.safetensors")
    assert any(not torch.equal(wa[k], shipped[k]) for k in wa)  # 2 steps from the SFT: not the shipped RM
