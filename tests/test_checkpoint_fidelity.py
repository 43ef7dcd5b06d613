"""Real checkpoints sample exactly what the trainer scores.

A checkpoint folder carries more than weights: ``generation_config.json`` may ask for a
repetition penalty, banned words, top-k..., ``config.json`` may declare several EOS ids, the
tokenizer may have no pad token. None of it may change the distribution the searchers sample
from behind the loss's back (plain softmax(logits / T) over the full vocabulary), and every
declared EOS id must end a response. The checkpoints here are copies of the embedded
``data/tiny-llama`` with edited JSON files (trained weights, so greedy answers mean something).
"""
import json
import math
import re
import shutil
import warnings

import pytest
import torch

from tba_lab.models import DEFAULT_MODEL_DIR, load_policy
from tba_lab.rollout import rollout
from tba_lab.rollout.backend import Generations, TransformersBackend
from tba_lab.rollout.scoring import response_logprobs
from tba_lab.tasks import Task
from tba_lab.tasks.arithmetic import ArithmeticTask

T = 0.6
# Everything a checkpoint's generation_config.json can ask of generate() that would change the
# sampled distribution or the greedy answers (each one does on its own for the tiny model).
DIRTY = {"repetition_penalty": 1.1, "no_repeat_ngram_size": 2, "min_new_tokens": 6,
         "bad_words_ids": [[7]], "top_k": 5, "top_p": 0.8, "temperature": 2.0, "do_sample": True,
         "suppress_tokens": [8], "begin_suppress_tokens": [9], "typical_p": 0.9, "min_p": 0.1,
         "epsilon_cutoff": 3e-4, "encoder_repetition_penalty": 1.2, "renormalize_logits": True,
         "sequence_bias": [[[10], 2.0]], "length_penalty": 0.5, "max_length": 12}


def _checkpoint(root, name, generation=None, config=None, tokenizer=None, drop_tokens=()):
    """Copy of the embedded checkpoint with ``generation_config.json`` / ``config.json`` /
    ``tokenizer_config.json`` updated by the given dicts (and ``drop_tokens`` keys removed
    from the tokenizer config)."""
    path = root / name
    shutil.copytree(DEFAULT_MODEL_DIR, path)
    for file, update in [("generation_config.json", generation), ("config.json", config),
                         ("tokenizer_config.json", tokenizer)]:
        data = json.loads((path / file).read_text())
        data.update(update or {})
        for key in drop_tokens if file == "tokenizer_config.json" else ():
            data.pop(key, None)
        (path / file).write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def problems():
    return ArithmeticTask().load("test")[:40]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    torch.set_num_threads(1)
    return load_policy(_checkpoint(tmp_path_factory.mktemp("ckpt"), "clean"))


@pytest.fixture(scope="module")
def dirty(tmp_path_factory):
    return load_policy(_checkpoint(tmp_path_factory.mktemp("ckpt"), "dirty", generation=DIRTY))


def _prompts(tok, problems):
    task = ArithmeticTask()
    return [tok(task.format_prompt(p))["input_ids"] for p in problems]


def _spy_scores(model):
    """Make ``model.generate`` also return ``scores`` (the logits AFTER generate's processors and
    warpers, i.e. what it really sampled from); returns the list the outputs are appended to."""
    seen, generate = [], model.generate

    def spy(*args, **kwargs):
        gc = kwargs.get("generation_config")
        if gc is None:
            kwargs["output_scores"] = True
        else:
            gc = kwargs["generation_config"] = gc.__class__.from_dict(gc.to_dict())
            gc.output_scores = True
        out = generate(*args, **kwargs)
        seen.append(out)
        return out

    model.generate = spy
    return seen


def test_checkpoint_generation_config_does_not_change_what_is_sampled(clean, dirty, problems):
    """Behaviour log-probs recorded at sampling = the distribution generate() really sampled
    from = the trainer's rescoring; the same seed draws the same tokens as the same weights
    with a clean generation_config; and the checkpoint's own settings survive the call."""
    (model, tok), (clean_model, _) = dirty, clean
    prompts = _prompts(tok, problems[:8])
    seen = _spy_scores(model)
    try:
        torch.manual_seed(0)
        gen = TransformersBackend(model, tok).generate(prompts, 4, temperature=T, max_new_tokens=48)
    finally:
        del model.generate
    assert len(gen.responses) == 32
    rows = [prompts[i // 4] for i in range(32)]
    with torch.no_grad():
        scored, mask = response_logprobs(model, rows, gen.responses, tok.pad_token_id, T)
    # what generate() sampled from: log_softmax of the processed scores at the sampled tokens
    (out,) = seen
    processed = torch.log_softmax(torch.stack(out.scores, 1).float(), -1)  # (32, S, V)
    raw = torch.stack(out.logits, 1).float() / T
    worst_seq = worst_tok = 0.0
    for i, r in enumerate(gen.responses):
        rec = torch.tensor(gen.token_logps[i])
        sampled_from = processed[i, torch.arange(len(r)), r]
        torch.testing.assert_close(rec, scored[i, :len(r)], atol=1e-4, rtol=1e-4)
        worst_seq = max(worst_seq, abs(rec.sum().item() - sampled_from.sum().item()))
        worst_tok = max(worst_tok, (rec - sampled_from).abs().max().item())
        assert mask[i].sum().item() == len(r)
    assert worst_seq < 1e-3 and worst_tok < 1e-4, (worst_seq, worst_tok)
    # with every processor gone, the scores generate() samples from ARE the raw logits / T
    torch.testing.assert_close(torch.stack(out.scores, 1).float(), raw, atol=1e-5, rtol=1e-5)
    # the same seed with the same weights and a clean generation_config draws the same tokens
    torch.manual_seed(0)
    same = TransformersBackend(clean_model, clean[1]).generate(prompts, 4, temperature=T,
                                                               max_new_tokens=48)
    assert gen.responses == same.responses
    assert max(len(r) for r in gen.responses) > 12  # the checkpoint's max_length did not cut
    # the checkpoint's own settings are left on the model (saving it keeps them)
    assert model.generation_config.repetition_penalty == 1.1
    assert model.generation_config.bad_words_ids == [[7]]


def test_checkpoint_generation_config_does_not_change_greedy_answers(clean, dirty, problems):
    answers = []
    for model, tok in (clean, dirty):
        gen = TransformersBackend(model, tok).generate(_prompts(tok, problems), 1, temperature=0.0,
                                                       max_new_tokens=48)
        assert gen.token_logps == [[]] * len(problems)
        answers.append(gen.responses)
    changed = sum(a != b for a, b in zip(*answers))
    assert changed == 0, f"{changed} of {len(problems)} greedy answers changed"
    assert sum(r[-1] == clean[1].eos_token_id for r in answers[0]) >= 30  # answers do end


def test_eos_token_ids_gathers_every_declared_id():
    from types import SimpleNamespace

    from tba_lab.rollout.backend import cut_at_eos, eos_token_ids

    model = SimpleNamespace(config=SimpleNamespace(eos_token_id=[2, 7]),
                            generation_config=SimpleNamespace(eos_token_id=9))
    assert eos_token_ids(model, SimpleNamespace(eos_token_id=2)) == [2, 7, 9]
    assert eos_token_ids(model, SimpleNamespace(eos_token_id=None)) == [2, 7, 9]
    bare = SimpleNamespace(config=SimpleNamespace(eos_token_id=None))  # no generation_config
    assert eos_token_ids(bare, SimpleNamespace(eos_token_id=5)) == [5]
    assert eos_token_ids(bare, SimpleNamespace(eos_token_id=None)) == []
    assert cut_at_eos([5, 7, 2, 3], [2, 7]) == [5, 7]
    assert cut_at_eos([5, 6, 2, 2], 2) == [5, 6, 2]  # an int still works
    assert cut_at_eos([5, 6], [2, 7]) == [5, 6]


@pytest.mark.parametrize("declared_in", ["generation", "config"])
def test_every_declared_eos_id_ends_the_response(tmp_path, problems, declared_in):
    """A chat checkpoint declares an end-of-turn token besides EOS. Here the second EOS is
    " 1", a frequent token: every response must end at the first of either, in sampling,
    in what the task scores, in the rollouts the trainer masks, and in greedy evaluation."""
    first = load_policy(DEFAULT_MODEL_DIR)[1]
    eos, turn = first.eos_token_id, first(" 1", add_special_tokens=False)["input_ids"][0]
    path = _checkpoint(tmp_path, "chat", **{declared_in: {"eos_token_id": [eos, turn]}})
    model, tok = load_policy(path)
    backend = TransformersBackend(model, tok)
    task = ArithmeticTask()
    torch.manual_seed(0)
    batch = rollout(backend, task, problems[:16], 4, T, 48)
    responses = [r.response_ids for r in batch.rollouts]
    past = sum(any(t in (eos, turn) for t in r[:-1]) for r in responses)
    assert past == 0, f"{past} of {len(responses)} responses ran past a declared EOS"
    assert backend.eos_ids == [eos, turn] and tok.eos_token_id == eos
    assert sorted(model.generation_config.eos_token_id) == [eos, turn]  # the full list is kept
    assert sum(r[-1] == turn for r in responses) >= 10  # the end-of-turn token does end some
    assert batch.completions == tok.batch_decode(responses, skip_special_tokens=True)
    for r, text in zip(responses, batch.completions):
        if r[-1] == turn:
            assert text.endswith(" 1")  # nothing after the end-of-turn token is scored
    assert batch.rewards == task.rewards([problems[i // 4] for i in range(64)], batch.completions)
    for r in batch.rollouts:
        assert len(r.behaviour_token_logps) == len(r.response_ids)
    greedy = backend.generate(_prompts(tok, problems), 1, temperature=0.0, max_new_tokens=48)
    assert not any(t in (eos, turn) for r in greedy.responses for t in r[:-1])
    assert sum(r[-1] == turn for r in greedy.responses) >= 1


def test_tokenizer_without_pad_token_pads_with_eos_and_keeps_it_in_the_mask(tmp_path, problems):
    path = _checkpoint(tmp_path, "nopad", generation={"pad_token_id": None},
                       config={"pad_token_id": None}, drop_tokens=("pad_token",))
    model, tok = load_policy(path)
    assert tok.pad_token_id == tok.eos_token_id == 2
    torch.manual_seed(1)
    batch = rollout(TransformersBackend(model, tok), ArithmeticTask(), problems[:8], 4, T, 48)
    responses = [r.response_ids for r in batch.rollouts]
    ended = [i for i, r in enumerate(responses) if r[-1] == 2]
    assert len(ended) >= 16
    assert all(2 not in r[:-1] for r in responses)  # the first EOS ends it, no padding inside
    prompts = [r.prompt_ids for r in batch.rollouts]
    with torch.no_grad():
        scored, mask = response_logprobs(model, prompts, responses, tok.pad_token_id, T)
    for i in ended:  # the terminating EOS is a response token: masked in, scored, recorded
        n = len(responses[i])
        assert mask[i].sum().item() == n and mask[i, n - 1]
        rec = batch.rollouts[i].behaviour_token_logps
        assert len(rec) == n and math.isfinite(rec[-1]) and rec[-1] <= 0
        assert abs(rec[-1] - scored[i, n - 1].item()) < 1e-4


def test_tokenizer_without_pad_and_eos_is_refused_with_the_fix(tmp_path):
    path = _checkpoint(tmp_path, "bare", drop_tokens=("pad_token", "eos_token"))
    with pytest.raises(ValueError, match="pad_token") as err:
        load_policy(path)
    assert "eos_token" in str(err.value) and "tokenizer_config.json" in str(err.value)


class _Flaky(Task):
    """Reward = the row index, except NaN / +inf / -inf on some rows (a broken reward model)."""
    name = "flaky"
    bad = {1: math.nan, 5: math.nan, 6: math.inf, 9: math.nan, 11: -math.inf}

    def format_prompt(self, problem):
        return problem

    def rewards(self, problems, completions):
        return [self.bad.get(j, float(j)) for j in range(len(completions))]


class _Fixed:
    """A backend that answers row j with tokens [10 + j, 11 + j, eos] (log-prob -0.5 each)."""
    name = "fixed"

    def __init__(self, tokenizer):
        self.tokenizer, self.eos_ids = tokenizer, [tokenizer.eos_token_id]

    def generate(self, prompts, num_generations, temperature, max_new_tokens):
        rows = [[10 + j, 11 + j, self.tokenizer.eos_token_id]
                for j in range(len(prompts) * num_generations)]
        return Generations(rows, [[-0.5] * 3 for _ in rows])


def test_nonfinite_rewards_are_counted_dropped_and_warned(tiny):
    model, tok, _ = tiny
    problems = ["Question: 1 + 1\nAnswer:", "Question: 2 + 3\nAnswer:",
                "Question: 7 + 1\nAnswer:", "Question: 4 + 4\nAnswer:"]
    with pytest.warns(RuntimeWarning, match=r"5 of 12 rewards.*non-finite.*dropped"):
        batch = rollout(_Fixed(tok), _Flaky(), problems, 3, T, 8, reference=model,
                        problem_ids=[40, 41, 42, 43])
    kept = [0, 2, 3, 4, 7, 8, 10]
    assert batch.nonfinite_rewards == 5
    assert batch.rewards == [float(j) for j in kept]
    assert [r.prompt_id for r in batch.rollouts] == [40, 40, 41, 41, 42, 42, 43]  # prompt-major
    assert [r.response_ids[0] for r in batch.rollouts] == [10 + j for j in kept]
    assert batch.completions == tok.batch_decode([[10 + j, 11 + j] for j in kept])
    prompt_ids = tok(problems)["input_ids"]
    with torch.no_grad():
        ref, _ = response_logprobs(model, [prompt_ids[j // 3] for j in kept],
                                   [r.response_ids for r in batch.rollouts], tok.pad_token_id, T)
    for i, r in enumerate(batch.rollouts):  # the reference scored the row it is attached to
        assert r.prompt_ids == prompt_ids[kept[i] // 3]
        torch.testing.assert_close(torch.tensor(r.ref_token_logps), ref[i, :3], atol=1e-5, rtol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # all finite: no warning, nothing dropped
        fine = rollout(_Fixed(tok), ArithmeticTask(), [{"question": "1 + 1", "answer": "#### 2"}],
                       2, T, 8)
    assert fine.nonfinite_rewards == 0 and len(fine.rollouts) == 2


def test_reward_count_mismatch_is_still_an_error(tiny):
    _, tok, _ = tiny

    class Short(_Flaky):
        def rewards(self, problems, completions):
            return [0.0] * (len(completions) - 1)

    with pytest.raises(ValueError, match="returned 5 rewards for 6"):
        rollout(_Fixed(tok), Short(), ["a b", "c d"], 3, T, 8)


def test_evaluation_scores_only_finite_rewards(tiny):
    from tba_lab.eval import evaluate

    _, tok, _ = tiny

    class Half(_Flaky):
        def rewards(self, problems, completions):
            return [math.nan if p.startswith("x") else float(len(p)) for p in problems]

        def metrics(self, problems, completions, rewards):
            self.seen = problems, completions
            return super().metrics(problems, completions, rewards)

    task = Half()
    with pytest.warns(RuntimeWarning, match="non-finite"):
        assert evaluate(task, _Fixed(tok), ["x a", "b", "x c", "d e"], 8) == {"reward": 2.0}
    # the metrics see the kept problems with their own completions (rows 1 and 3)
    assert task.seen == (["b", "d e"], tok.batch_decode([[11, 12], [13, 14]]))
    with pytest.raises(ValueError, match="all 2 rewards"), pytest.warns(RuntimeWarning):
        evaluate(Half(), _Fixed(tok), ["x a", "x b"], 8)


def test_a_row_the_reward_function_raises_on_is_dropped_not_fatal(tiny):
    """``rollout`` scores row by row when the batch call raises: the row that raises is
    dropped and counted; when no row scores, the reward function's own error is raised."""
    _, tok, _ = tiny

    class Picky(_Flaky):
        def rewards(self, problems, completions):
            if "Question: 2 + 3\nAnswer:" in problems:
                raise KeyError("no answer for 2 + 3")
            return [float(len(p)) for p in problems]

    problems = ["Question: 1 + 1\nAnswer:", "Question: 2 + 3\nAnswer:"]
    with pytest.warns(RuntimeWarning) as caught:
        batch = rollout(_Fixed(tok), Picky(), problems, 3, T, 8, problem_ids=[5, 6])
    # one warning, naming the error (not also a "non-finite rewards" one for the same rows)
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert re.search(r"raised KeyError.*3 of 6 rows could not be scored", str(caught[0].message))
    assert batch.nonfinite_rewards == 3 and [r.prompt_id for r in batch.rollouts] == [5, 5, 5]
    assert batch.rewards == [float(len(problems[0]))] * 3
    with pytest.raises(KeyError, match="no answer"):
        rollout(_Fixed(tok), Picky(), problems[1:], 3, T, 8)

    class PickyNaN(Picky):  # scored alone, 1 + 1 gives NaN: its rows get the non-finite warning
        def rewards(self, problems, completions):
            return [math.nan if "1 + 1" in p else r
                    for p, r in zip(problems, super().rewards(problems, completions))]

    with pytest.warns(RuntimeWarning) as caught:
        rollout(_Fixed(tok), PickyNaN(), problems + ["Question: 4 + 4\nAnswer:"], 3, T, 8)
    raised, nonfinite = sorted((str(w.message) for w in caught), key=lambda m: "non-finite" in m)
    assert len(caught) == 2 and "3 of 9 rows could not be scored" in raised
    assert "3 of 9 rewards are non-finite" in nonfinite
