"""Task stop strings: a response ends at the first stop string its task
declares, in the sampler, in the rollout's tokens and log-probs, and in the text that is graded."""
import torch

from tba_lab.eval import evaluate
from tba_lab.rollout import TransformersBackend, rollout
from tba_lab.rollout.backend import Generations
from tba_lab.tasks import format_prompt
from tba_lab.tasks.arithmetic import ArithmeticTask
from tba_lab.tasks.gsm8k import GSM8KTask
from tba_lab.tasks.preference import PreferenceTask
from tba_lab.tasks.redteam import RedTeamTask

# A base model's answer followed by a question and answer it made up (llm-reasoners#131).
INVENTED = " 2 + 3 = 5\n#### 5\n\nQuestion: Tom has 3 apples.\nAnswer: 3 + 4 = 7\n#### 7"
PROBLEM = {"question": "Ann has 2 pens and buys 3. How many?", "answer": "2 + 3 = 5\n#### 5"}


class _RunOnBackend:
    """A backend stub whose generation runs past the stop string: it returns ``INVENTED`` with
    made-up behaviour log-probs -0.01, -0.02, ..., and records the stop strings it was given."""

    def __init__(self, tokenizer):
        self.tokenizer, self.eos_ids, self.stops = tokenizer, [tokenizer.eos_token_id], None
        self.ids = tokenizer(INVENTED, add_special_tokens=False)["input_ids"]

    def generate(self, prompts, num_generations, temperature, max_new_tokens, stop=()):
        self.stops = tuple(stop)
        rows = len(prompts) * num_generations
        return Generations([list(self.ids) for _ in range(rows)],
                           [[-0.01 * (i + 1) for i in range(len(self.ids))] for _ in range(rows)])


def test_gsm8k_grades_its_own_answer_not_an_invented_follow_up(tiny):
    _, tok, _ = tiny
    task = GSM8KTask()
    assert "Question:" in task.stop_strings and ArithmeticTask.stop_strings == ()
    assert PreferenceTask.stop_strings == ("\nPost:", "\nTL;DR:") and RedTeamTask.stop_strings == ()
    # graded on 5 (the answer to the question asked), not on the invented question's 7
    assert task.rewards([PROBLEM, dict(PROBLEM, answer="#### 7")], [INVENTED, INVENTED]) == [1.0, 0.0]

    backend = _RunOnBackend(tok)
    batch = rollout(backend, task, [PROBLEM], 2, 1.0, 64)
    assert backend.stops == task.stop_strings                     # the sampler is asked to stop
    assert batch.completions == [" 2 + 3 = 5\n#### 5\n\n"] * 2    # the graded text
    assert batch.rewards == [1.0, 1.0]
    assert evaluate(task, backend, [PROBLEM, dict(PROBLEM, answer="#### 7")], 64) == {"accuracy": 0.5}
    kept = tok(" 2 + 3 = 5\n#### 5\n\nQuestion:", add_special_tokens=False)["input_ids"]
    for r in batch.rollouts:  # tokens through the stop string; log-probs of those tokens only
        assert r.response_ids == kept
        assert r.behaviour_token_logps == [-0.01 * (i + 1) for i in range(len(kept))]


def test_transformers_sampler_stops_at_a_stop_string(tiny):
    """With ``stop``, a row ends at the token that completes a stop string (kept), its
    log-probs are those of the same draws without ``stop``, and decoding stops early."""
    model, tok, train = tiny
    backend = TransformersBackend(model, tok)
    prompts = [tok(format_prompt(r["question"]))["input_ids"] for r in train[:2]]
    torch.manual_seed(0)
    free = backend.generate(prompts, 3, temperature=1.0, max_new_tokens=40)
    texts = tok.batch_decode(free.responses, skip_special_tokens=True)
    stop = max("0123456789", key=lambda c: sum(c in t for t in texts))  # a digit most rows sample
    calls = []
    hook = model.register_forward_hook(lambda *a: calls.append(1))
    torch.manual_seed(0)
    try:
        got = backend.generate(prompts, 3, temperature=1.0, max_new_tokens=40, stop=(stop,))
    finally:
        hook.remove()
    stopped = 0
    for f, r, lf, lr, t in zip(free.responses, got.responses, free.token_logps, got.token_logps, texts):
        if stop not in t:
            assert r == f and lr == lf
            continue
        stopped += 1
        assert stop in tok.decode(r, skip_special_tokens=True)
        assert stop not in tok.decode(r[:-1], skip_special_tokens=True)
        assert r == f[:len(r)] and len(r) < len(f) and lr == lf[:len(r)]
    assert stopped >= 3
    # decoding ended once every row had stopped (a shared prefill, then one step a token)
    assert len(calls) <= 1 + max(len(r) for r in got.responses) < max(len(f) for f in free.responses)


# ---- a stop string the tokenizer marks special (Qwen base: <|im_end|>, not an EOS id) ---------

def test_a_special_token_stop_string_is_seen_in_the_tokens_the_sampler_and_the_graded_text():
    """After vllm#2123, lighteval#109 and FastChat PR 2083: decoding with
    ``skip_special_tokens=True`` deletes ``<|im_end|>`` before it can match GSM8K's stop, and a
    base model that answers 5, emits it and invents a turn ending in 7 is graded on the 7."""
    from tba_lab.rollout.backend import cut_tokens_at_stop, stop_string_criteria
    from tests._special_stop import ANSWER, STOP, SAID, special_stop_tokenizer

    tok = special_stop_tokenizer()
    said = tok(SAID, add_special_tokens=False)["input_ids"]
    kept = tok(ANSWER + STOP, add_special_tokens=False)["input_ids"]
    assert said[:len(kept)] == kept and len(kept) < len(said)
    stops = GSM8KTask.stop_strings
    assert cut_tokens_at_stop(said, tok, stops) == kept
    done = stop_string_criteria(tok, stops, prompt_len=2)(
        torch.tensor([[7, 7] + kept, [7, 7, 7] + kept[:-1]]), None)
    assert done.tolist() == [True, False]
    # the graded text: before the stop, without EOS text, whatever the backend left after it
    from tba_lab.rollout.backend import cut_responses

    tokens, texts = cut_responses([said, kept, kept[:-1] + [tok.eos_token_id, 5]], tok,
                                  [tok.eos_token_id], stops)
    assert tokens == [kept, kept, kept[:-1] + [tok.eos_token_id]]
    assert texts == [ANSWER] * 3


class _SaysBackend(_RunOnBackend):
    """``_RunOnBackend`` that says ``tests._special_stop.SAID`` (runs past ``<|im_end|>``)."""

    def __init__(self, tokenizer, said):
        super().__init__(tokenizer)
        self.ids = tokenizer(said, add_special_tokens=False)["input_ids"]


def test_rollout_and_evaluation_stop_at_a_special_token_stop_string():
    """The rollout cuts a backend's row at ``<|im_end|>`` (kept, with its log-prob) and grades
    the answer before it; a real transformers sampler stops there, greedy and sampled; an EOS
    still ends a response and its text is not graded."""
    from tests._special_stop import ANSWER, PROBLEM, SAID, STOP, scripted_model, special_stop_tokenizer

    tok = special_stop_tokenizer()
    task = GSM8KTask()
    kept = tok(ANSWER + STOP, add_special_tokens=False)["input_ids"]
    wrong = dict(PROBLEM, answer="#### 7")

    batch = rollout(_SaysBackend(tok, SAID), task, [PROBLEM], 2, 1.0, 64)
    assert batch.completions == [ANSWER] * 2 and batch.rewards == [1.0, 1.0]
    assert [r.response_ids for r in batch.rollouts] == [kept] * 2
    assert batch.rollouts[0].behaviour_token_logps == [-0.01 * (i + 1) for i in range(len(kept))]

    model = scripted_model(tok)
    backend = TransformersBackend(model, tok)
    assert evaluate(task, backend, [PROBLEM, PROBLEM, wrong], 64) == {"accuracy": 2 / 3}
    model.calls = 0
    batch = rollout(backend, task, [PROBLEM], 2, 1.0, 64)
    assert batch.completions == [ANSWER] * 2 and batch.rewards == [1.0, 1.0]
    assert [r.response_ids for r in batch.rollouts] == [kept] * 2
    assert all(abs(lp) < 1e-3 for r in batch.rollouts for lp in r.behaviour_token_logps)
    assert model.calls <= 1 + len(kept)          # decoding stopped at the stop string
    # an EOS (not a stop string) still ends the response and stays out of the graded text
    eos_model = scripted_model(tok, ANSWER)
    batch = rollout(TransformersBackend(eos_model, tok), task, [PROBLEM], 1, 0.0, 64)
    assert batch.rollouts[0].response_ids[-1] == tok.eos_token_id
    assert batch.completions == [ANSWER] and batch.rewards == [1.0]
