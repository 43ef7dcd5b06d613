"""Model and tokenizer pad with one id, so a text is scored the same alone and in a batch.

The checkpoints here have the shape of Llama-1-era ones: ``config.json`` says
``pad_token_id: 0`` (``<unk>``) and the tokenizer has no pad token. A decoder sequence
classifier pools at the rightmost token that is not ``config.pad_token_id``; padded with
another id (EOS), a short text beside a longer one is scored at a padding position. Every
loader of the kit goes through :func:`tba_lab.models.agree_on_pad`: the reward model, the
red-team judge, the policy / reference / victim (causal LMs, which read padding from the
attention mask, but whose tokenizer, config and generation config must still name one id).
"""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import torch

from tba_lab.models import PRETOKENIZE_PATTERN, load_policy
from tba_lab.reward_model import (RewardModel, build_reward_model, load_reward_model,
                                  score_texts)
from tba_lab.tasks import format_prompt

SHORT = "Post: Tom lost lamp.\nTL;DR: Tom lost lamp."
LONG = ("Post: Ana found phone. Ivy likes tea. Ben sold car.\n"
        "TL;DR: Ana found phone, Ivy likes tea, Ben sold car.")
ATTACKS = ["Tom has 3 apples. How many?", "Ana has 12 pens and buys 7 more pens. How many pens?"]
UNK, BOS, EOS = 0, 1, 2


def _llama1_tokenizer():
    """A word-level tokenizer with Llama-1's special tokens (``<unk>`` 0, ``<s>`` 1, ``</s>``
    2), ``<s>`` prepended, left padding, and NO pad token."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    texts = [SHORT, LONG, " #### 12 96"] + [format_prompt(a) for a in ATTACKS]
    pieces = set()
    for text in texts:
        pieces.update(re.findall(PRETOKENIZE_PATTERN, text))
    pieces.update(str(d) for d in range(10))
    pieces.update(f" {d}" for d in range(10))
    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>"] + sorted(pieces))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                       special_tokens=[("<s>", BOS)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", padding_side="left",
                                   clean_up_tokenization_spaces=False)


def _llama1_folder(path, kind="rm", num_labels=1, seed=0, tokenizer_pad=None):
    """Save a tiny Llama of ``kind`` ("rm"/"judge": sequence classifier, "lm": causal LM) with
    ``pad_token_id: 0`` in config.json and a tokenizer without a pad token (or with
    ``tokenizer_pad`` as its pad token). Returns the raw model (eval mode)."""
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    tok = _llama1_tokenizer()
    if tokenizer_pad is not None:
        tok.pad_token = tokenizer_pad
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, intermediate_size=64,
                      max_position_embeddings=512, num_labels=num_labels,
                      pad_token_id=UNK, bos_token_id=BOS, eos_token_id=EOS)
    if kind == "lm":
        model = LlamaForCausalLM(cfg)
    else:
        model = LlamaForSequenceClassification(cfg)
        torch.nn.init.normal_(model.score.weight, std=1.0)  # visible differences between texts
    model.save_pretrained(path)
    tok.save_pretrained(path)
    assert json.loads((path / "config.json").read_text())["pad_token_id"] == UNK
    saved_tok = json.loads((path / "tokenizer_config.json").read_text())
    assert saved_tok.get("pad_token") == tokenizer_pad
    return model.eval()


def _alone(model, tok, text):
    """The classifier's logits for ``text`` by itself: one row, no padding anywhere."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([tok(text)["input_ids"]])).logits[0]


# ------------------------------------------------------------------------ reward model
def test_reward_model_scores_a_short_text_alone_as_beside_a_longer_one(tmp_path):
    raw = _llama1_folder(tmp_path / "rm")
    rm = RewardModel.from_pretrained(tmp_path / "rm")
    alone = rm.score([SHORT])[0]
    beside = rm.score([SHORT, LONG])
    assert len(rm.tokenizer(SHORT)["input_ids"]) < len(rm.tokenizer(LONG)["input_ids"])
    assert beside[0] == pytest.approx(alone, abs=1e-5)
    # the config's pad id is a special token (<unk>): it pads, and both sides name it
    assert rm.tokenizer.pad_token_id == rm.model.config.pad_token_id == UNK
    assert beside[1] == pytest.approx(rm.score([LONG])[0], abs=1e-5)
    want = [float(_alone(raw, rm.tokenizer, t)[0]) for t in (SHORT, LONG)]
    assert beside == pytest.approx(want, abs=1e-5)
    left = score_texts(rm.model, rm.tokenizer, [SHORT, LONG], padding_side="left")
    assert left == pytest.approx(want, abs=1e-5)


def test_reward_model_folder_whose_tokenizer_pads_with_eos_follows_the_tokenizer(tmp_path):
    """What an RM trained from such a policy was saved as: tokenizer pad = EOS, config 0."""
    raw = _llama1_folder(tmp_path / "rm", tokenizer_pad="</s>")
    model, tok = load_reward_model(tmp_path / "rm")
    scores = score_texts(model, tok, [SHORT, LONG])
    assert scores == pytest.approx([float(_alone(raw, tok, t)[0]) for t in (SHORT, LONG)], abs=1e-5)
    assert tok.pad_token_id == model.config.pad_token_id == EOS


def test_reward_model_built_from_a_llama1_policy_saves_one_pad_id(tmp_path):
    _llama1_folder(tmp_path / "policy", kind="lm")
    model, tok = build_reward_model(tmp_path / "policy")
    torch.nn.init.normal_(model.score.weight, std=1.0)
    model.save_pretrained(tmp_path / "rm")
    tok.save_pretrained(tmp_path / "rm")
    rm = RewardModel.from_pretrained(tmp_path / "rm")
    assert rm.score([SHORT, LONG])[0] == pytest.approx(rm.score([SHORT])[0], abs=1e-5)
    saved_cfg = json.loads((tmp_path / "rm" / "config.json").read_text())
    assert saved_cfg["pad_token_id"] == tok.pad_token_id == UNK
    saved_tok = json.loads((tmp_path / "rm" / "tokenizer_config.json").read_text())
    assert saved_tok["pad_token"] == "<unk>"


def test_score_texts_refuses_a_model_and_tokenizer_that_pad_differently():
    tok = _llama1_tokenizer()
    tok.pad_token = "</s>"
    model = SimpleNamespace(config=SimpleNamespace(pad_token_id=UNK))
    with pytest.raises(ValueError, match=r"config\.pad_token_id is 0 but its tokenizer pads "
                                         r"with 2.*agree_on_pad"):
        score_texts(model, tok, [SHORT, LONG])


# ------------------------------------------------------------------------ red-team judge
def test_judge_scores_a_short_response_alone_as_beside_a_longer_one(tmp_path):
    from tba_lab.config import from_dict
    from tba_lab.tasks.redteam import RedTeamTask, load_judge

    raw = _llama1_folder(tmp_path / "judge", kind="judge", num_labels=3)
    model, tok = load_judge(str(tmp_path / "judge"), 2)
    task = RedTeamTask(from_dict({"task": {"name": "redteam"},
                                  "redteam": {"judge": str(tmp_path / "judge"), "judge_label": 2,
                                              "log_p_floor": -50.0}}))
    alone = task.judge_log_p([SHORT])[0]
    beside = task.judge_log_p([SHORT, LONG])
    assert beside[0] == pytest.approx(alone, abs=1e-5)
    want = [float(torch.log_softmax(_alone(raw, tok, t), -1)[2]) for t in (SHORT, LONG)]
    assert beside == pytest.approx(want, abs=1e-5)
    assert tok.pad_token_id == model.config.pad_token_id == UNK


# ------------------------------------------------------------------------ policy, reference, victim
@pytest.fixture(scope="module")
def llama1_lm(tmp_path_factory):
    path = tmp_path_factory.mktemp("lm") / "policy"
    _llama1_folder(path, kind="lm")
    return path


def test_policy_tokenizer_config_and_generation_config_name_one_pad_id(llama1_lm):
    model, tok = load_policy(llama1_lm)
    assert tok.pad_token_id == model.config.pad_token_id == UNK
    assert model.generation_config.pad_token_id == UNK
    assert tok.padding_side == "left"


def test_policy_and_reference_log_probs_alone_match_a_batch(llama1_lm):
    """Causal LMs find padding by the attention mask: the same log-probs with any pad id."""
    from tba_lab.rollout.scoring import response_logprobs

    model, tok = load_policy(llama1_lm)
    reference = load_policy(llama1_lm)[0].eval()
    short, long = (tok(format_prompt(a))["input_ids"] for a in ATTACKS)
    responses = [tok(" #### 12", add_special_tokens=False)["input_ids"] + [EOS],
                 tok(" 96 96 96 #### 96", add_special_tokens=False)["input_ids"]]
    for m in (model, reference):
        with torch.no_grad():
            alone, _ = response_logprobs(m, [short], responses[:1], tok.pad_token_id, 0.6)
            for share in (True, False):
                batch, mask = response_logprobs(m, [short, long, short], responses + responses[:1],
                                                tok.pad_token_id, 0.6, share_prompts=share)
                n = len(responses[0])
                assert mask[0].sum() == n
                assert torch.allclose(batch[0, :n], alone[0, :n], atol=1e-5)
                assert torch.allclose(batch[2, :n], alone[0, :n], atol=1e-5)


def test_victim_answers_an_attack_alone_as_in_a_batch(llama1_lm):
    from tba_lab.config import from_dict
    from tba_lab.rollout.backend import TransformersBackend
    from tba_lab.tasks.redteam import RedTeamTask

    task = RedTeamTask(from_dict({"task": {"name": "redteam"},
                                  "redteam": {"victim": str(llama1_lm),
                                              "victim_max_new_tokens": 8}}))
    model, tok = task.victim()
    assert task.victim_responses(ATTACKS[:1]) == task.victim_responses(ATTACKS)[:1]
    backend = TransformersBackend(model, tok)
    ids = [tok(format_prompt(a))["input_ids"] for a in ATTACKS]
    alone = backend.generate(ids[:1], 1, temperature=0.0, max_new_tokens=8).responses
    assert backend.generate(ids, 1, temperature=0.0, max_new_tokens=8).responses[:1] == alone
    assert tok.pad_token_id == model.config.pad_token_id == UNK
    assert model.generation_config.pad_token_id == UNK


# ------------------------------------------------------------------------ the rule itself
def _fake_model(pad_token_id, text_config=None):
    config = SimpleNamespace(pad_token_id=pad_token_id)
    config.get_text_config = lambda: text_config if text_config is not None else config
    return SimpleNamespace(config=config, generation_config=SimpleNamespace(pad_token_id=None))


@pytest.mark.parametrize("declared, tokenizer_pad, want", [
    (UNK, None, UNK),         # the config's pad id is a special token: kept
    (None, None, EOS),        # nothing declared: EOS pads (TRL's fallback)
    (-1, None, EOS),          # not a token id: EOS
    (10_000, None, EOS),      # past the vocabulary: EOS
    (5, None, EOS),           # an ordinary word: never padding
    (UNK, "</s>", EOS),       # the tokenizer's own pad token wins, the config follows it
    (EOS, "<unk>", UNK),
])
def test_agree_on_pad_rule(declared, tokenizer_pad, want):
    from tba_lab.models import agree_on_pad, check_same_pad

    tok = _llama1_tokenizer()
    if tokenizer_pad is not None:
        tok.pad_token = tokenizer_pad
    model = _fake_model(declared)
    assert agree_on_pad(model, tok) == want
    assert tok.pad_token_id == model.config.pad_token_id == want
    assert model.generation_config.pad_token_id == want
    check_same_pad(model, tok)


def test_agree_on_pad_writes_a_composite_models_text_config():
    """The classification head reads get_text_config().pad_token_id (trl PR 7318)."""
    from tba_lab.models import agree_on_pad

    tok = _llama1_tokenizer()
    text = SimpleNamespace(pad_token_id=UNK)
    model = _fake_model(None, text_config=text)
    assert agree_on_pad(model, tok) == UNK  # the text config's id is the declared one
    assert model.config.pad_token_id == text.pad_token_id == tok.pad_token_id == UNK


def test_agree_on_pad_refuses_a_tokenizer_without_pad_and_eos():
    from transformers import PreTrainedTokenizerFast

    from tba_lab.models import agree_on_pad

    tok = _llama1_tokenizer()
    bare = PreTrainedTokenizerFast(tokenizer_object=tok.backend_tokenizer, unk_token="<unk>")
    with pytest.raises(ValueError, match=r"neither a pad token nor an EOS token.*"
                                         r"tokenizer_config\.json"):
        agree_on_pad(_fake_model(UNK), bare)
