"""Extension points, used as a contributor would: everything new lives in THIS file.

* a toy task (``toy_chars``: reward = ``scale`` x characters of the completion, its own
  ``toy_chars`` options section) and a toy algorithm (``toy_reinforce``: REINFORCE with a
  group-mean baseline, its own ``toy_reinforce`` section, no reference pass) are registered
  here and trained through the real launcher (spawned searcher processes, the real trainer);
* an oracle generation backend (answers every problem correctly, after a preamble of 50
  tokens) shows that held-out evaluation uses the configured ``model.max_new_tokens``, not a
  fixed length: it reads 100% with 64 tokens and 0% with 40.

No package file is touched: registration is ``@TASKS.register`` / ``@ALGORITHMS.register`` /
``@BACKENDS.register``, and spawned searchers import this module to find the classes.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from tba_lab.algorithms import Algorithm, PolicyBatch
from tba_lab.buffer import ReplayBuffer
from tba_lab.config import ConfigError, check, check_choice, from_dict, load_yaml
from tba_lab.registry import ALGORITHMS, BACKENDS, TASKS
from tba_lab.rollout.backend import Generations, cut_at_eos
from tba_lab.tasks.arithmetic import ArithmeticTask
from tba_lab.tasks.gsm8k import extract_answer
from tests.test_async_smoke import _assert_no_children, _read_jsonl


# ---------------------------------------------------------------------------- a toy task
@dataclass
class ToyCharsConfig:
    scale: float = 0.01                 # reward per character of the completion

    def validate(self) -> None:
        check(self.scale > 0, f"toy_chars.scale={self.scale}: must be > 0")


@TASKS.register
class ToyCharsTask(ArithmeticTask):
    """The embedded prompts, but rewarded by length: r = scale * len(completion)."""
    name = "toy_chars"
    config_class = ToyCharsConfig

    def rewards(self, problems, completions):
        return [self.options.scale * len(c) for c in completions]

    def metrics(self, problems, completions, rewards):
        return {"mean_chars": sum(len(c) for c in completions) / len(completions)}


# ----------------------------------------------------------------------- a toy algorithm
@dataclass
class ToyReinforceConfig:
    baseline: str = "group"             # "group": subtract each group's mean reward; "none"

    def validate(self) -> None:
        check_choice(self.baseline, ("group", "none"), "toy_reinforce.baseline")


@ALGORITHMS.register
class ToyReinforce(Algorithm):
    """loss = -mean_ij (r_ij - b_i) * log pi(y_ij|x_i), b_i the group mean (or 0). No ``beta``
    option, so the base class reports beta 0."""
    name = "toy_reinforce"
    config_class = ToyReinforceConfig

    def needs_reference(self) -> bool:
        return False

    def loss(self, batch: PolicyBatch, step: int):
        r = batch.rewards.view(-1, batch.group_size)                         # (B, K)
        baseline = r.mean(dim=1, keepdim=True) if self.options.baseline == "group" else 0.0
        adv = (r - baseline).reshape(-1)                                     # (N,)
        return -(adv * batch.logps).mean(), {"advantage_abs_mean": adv.abs().mean().item()}


def _config(tmp_path, **data):
    base = {"output_dir": str(tmp_path), "max_minutes": 3.0,
            "training": {"max_steps": 3, "num_prompts_per_step": 4, "num_generations": 4},
            "buffer": {"initial_fill": 16},
            "task": {"eval_size": 8, "interim_eval_size": 8, "eval_every_seconds": 0},
            "async": {"searcher_threads": 1}}
    for key, value in data.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return from_dict(base)


def test_toy_options_sections_are_read_and_validated(tmp_path):
    cfg = _config(tmp_path, algo="toy_reinforce", task={"name": "toy_chars"},
                  toy_chars={"scale": 0.5}, toy_reinforce={"baseline": "none"})
    assert cfg.toy_chars.scale == 0.5 and cfg.toy_reinforce.baseline == "none"
    assert cfg.to_dict()["toy_chars"] == {"scale": 0.5}
    with pytest.raises(ConfigError, match="toy_reinforce.baseline"):
        _config(tmp_path, algo="toy_reinforce", toy_reinforce={"baseline": "median"})
    with pytest.raises(ConfigError, match="unknown config key 'toy_chars.bonus'"):
        _config(tmp_path, toy_chars={"bonus": 1.0})
    # the explorer's knobs read the table: no `beta` option here, so no beta override
    from tba_lab.lab.widgets import knob_overrides
    knobs = knob_overrides(algo="toy_reinforce", beta=0.3)
    assert knobs["algo"] == "toy_reinforce" and "toy_reinforce" not in knobs
    assert knob_overrides(algo="dr_grpo", beta=0.3)["grpo"] == {"beta": 0.3}


def test_toy_task_and_algorithm_train_through_the_real_launcher(tmp_path):
    from tba_lab.models import load_policy
    from tba_lab.trainer import train

    torch.set_num_threads(1)
    scale = 0.01
    cfg = _config(tmp_path, algo="toy_reinforce", task={"name": "toy_chars"},
                  toy_chars={"scale": scale})
    summary = train(cfg, progress=False)
    _assert_no_children()
    assert summary["algo"] == "toy_reinforce" and summary["task"] == "toy_chars"
    assert summary["trainer_steps"] == 3
    # the held-out metric is the toy task's, before and after
    assert summary["mean_chars_before"] > 0 and summary["mean_chars_after"] > 0
    assert summary["held_out_metrics"] == ["mean_chars"]
    evals = _read_jsonl(tmp_path / "eval.jsonl")
    assert [e["n"] for e in evals] == [8, 8] and all("mean_chars" in e for e in evals)
    # the loss is the toy algorithm's, with its own logged term and beta
    rows = _read_jsonl(tmp_path / "metrics.jsonl")
    assert len(rows) == 3 and all("advantage_abs_mean" in r and r["beta"] == 0.0 for r in rows)
    # the searchers rewarded with the toy task (r = scale * characters of the decoded response)
    # and skipped the reference pass the toy algorithm does not read
    _, tokenizer = load_policy(cfg.model.path)
    buffer = ReplayBuffer.load(tmp_path / "buffer.pt")
    items = [it for pid in buffer.prompt_ids() for it in buffer.items(pid)]
    assert len(items) >= 16
    for it in items:
        text = tokenizer.decode(it.response_ids, skip_special_tokens=True)
        assert it.reward == pytest.approx(scale * len(text))
        assert it.ref_token_logps is None
    assert len({it.reward for it in items}) > 1  # not a constant: lengths vary
    # config.yaml records the toy sections and reloads through the same registries
    assert load_yaml(tmp_path / "config.yaml") == cfg


# ------------------------------------------------------- an oracle generation backend
PREAMBLE_TOKENS = 50


@BACKENDS.register
class OracleBackend:
    """Answers every arithmetic problem correctly, after ``PREAMBLE_TOKENS`` tokens of " 0":
    the right answer needs 50 + about 4 tokens, so a 48-token cap cuts it off (the last number
    read is then 0, and no answer here is 0)."""
    name = "oracle_test"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        task = ArithmeticTask()
        self.answers = {task.format_prompt(p): extract_answer(p["answer"])
                        for split in ("train", "test") for p in task.load(split)}

    @classmethod
    def build(cls, cfg, model, tokenizer):
        return cls(tokenizer)

    def load_weights(self, weights) -> None:
        pass

    def generate(self, prompts, num_generations, temperature, max_new_tokens):
        responses = []
        for ids in prompts:
            prompt = self.tokenizer.decode(ids, skip_special_tokens=True)
            text = " 0" * PREAMBLE_TOKENS + f"\n#### {self.answers[prompt]:g}"
            tokens = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            tokens = (tokens + [self.tokenizer.eos_token_id])[:max_new_tokens]
            responses += [cut_at_eos(tokens, self.tokenizer.eos_token_id)] * num_generations
        logps = [[] if temperature == 0 else [0.0] * len(r) for r in responses]
        return Generations(responses, logps)


def test_evaluation_uses_the_configured_response_length(tmp_path):
    """With ``model.max_new_tokens`` 64 the oracle's answers fit and held-out accuracy is 100%
    before and after training; the trainer used to evaluate at a fixed 48 tokens (0% here)."""
    from tba_lab.eval import evaluate
    from tba_lab.models import load_policy
    from tba_lab.trainer import train

    torch.set_num_threads(1)
    cfg = _config(tmp_path, model={"backend": "oracle_test", "max_new_tokens": 64},
                  training={"max_steps": 1})
    summary = train(cfg, progress=False)
    _assert_no_children()
    assert summary["accuracy_before"] == 1.0 and summary["accuracy_after"] == 1.0
    evals = _read_jsonl(tmp_path / "eval.jsonl")
    assert [e["accuracy"] for e in evals] == [1.0, 1.0]
    # the same answers cut at 48 tokens (the old fixed length) are all wrong
    task = ArithmeticTask(cfg)
    backend = OracleBackend.build(cfg, None, load_policy(cfg.model.path)[1])
    problems = task.load("test")[:8]
    assert evaluate(task, backend, problems, max_new_tokens=64) == {"accuracy": 1.0}
    assert evaluate(task, backend, problems, max_new_tokens=48) == {"accuracy": 0.0}


# ------------------------------------------------------------------- registry mechanics
def test_registry_loads_builtins_before_a_replacement(tmp_path, monkeypatch):
    """A user class registered with replace=True before the table was ever used replaces the
    built-in (the built-ins are imported first), and the built-ins stay listed first."""
    import sys
    import types

    from tba_lab.registry import Registry

    holder = types.ModuleType("reg_holder")
    monkeypatch.setitem(sys.modules, "reg_holder", holder)
    (tmp_path / "reg_builtins.py").write_text(
        "import reg_holder\n\n@reg_holder.REG.register\nclass A:\n    name = 'a'\n\n"
        "@reg_holder.REG.register\nclass B:\n    name = 'b'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    holder.REG = Registry("thing", "thing.name", ("reg_builtins",))

    class Mine:
        name = "a"

    holder.REG.register(Mine, replace=True)
    assert holder.REG.get("a") is Mine and holder.REG.names() == ("a", "b")

    class Other:
        name = "b"

    with pytest.raises(ValueError, match="'b' is taken"):
        holder.REG.register(Other)
    with pytest.raises(KeyError, match="thing.name='c'.*\\['a', 'b'\\]"):
        holder.REG.get("c")


def test_section_assignment_and_reserved_names(tmp_path):
    from tba_lab.algorithms import TBConfig

    cfg = _config(tmp_path)
    cfg.tb = TBConfig(beta=0.5)  # lands in cfg.sections, so config.yaml and validation see it
    assert cfg.sections["tb"].beta == 0.5 and cfg.to_dict()["tb"]["beta"] == 0.5

    @TASKS.register
    class BadTask(ArithmeticTask):
        name, section, config_class = "bad_section_test", "task", ToyCharsConfig

    try:
        with pytest.raises(ConfigError, match="'task' is a core config key"):
            _config(tmp_path)
    finally:
        TASKS._entries.pop("bad_section_test")


def test_searchers_receive_only_their_own_options(tmp_path):
    """A searcher builds the task and the backend, so only their options travel to it: an
    algorithm's options (possibly defined where a child cannot import them) stay behind."""
    from tba_lab.actors.searcher import SearcherSpec

    cfg = _config(tmp_path, algo="toy_reinforce", task={"name": "toy_chars"},
                  toy_chars={"scale": 0.5})
    spec = SearcherSpec.from_config(cfg, use_reference=False)
    assert set(spec.cfg.sections) == {"toy_chars"} and spec.cfg.toy_chars.scale == 0.5
    assert spec.task_cls is ToyCharsTask and "tb" in cfg.sections  # the run's own config intact
