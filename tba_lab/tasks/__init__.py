"""Tasks: where prompts come from, how they are shown to the model, and how responses are scored.

A :class:`Task` is one object with

* ``load(split)``: the problems of ``"train"`` (the searchers' prompts) or ``"test"`` (held out);
* ``format_prompt(problem)``: the text the policy continues;
* ``rewards(problems, completions)``: one float per completion, in a batch, so a reward model
  can score them together (``problems[i]`` is the problem ``completions[i]`` answers);
* ``metrics(problems, completions, rewards)``: held-out metrics, a dict of floats;
* ``check_config(cfg)``: data paths and options checked before any process starts;
* ``default_model``: the folder under ``data/`` of the task's embedded starting policy, used
  when ``model.path`` is left empty (None: the arithmetic model ``data/tiny-llama``);
* ``stop_strings``: strings that end a response (besides EOS), for prompt formats a base model
  continues past its answer (GSM8K's few-shot "Question:"); the sampler stops at the first,
  the rollout keeps the tokens through it and grades the text before it (:func:`cut_at_stop`);
  they are looked for in text decoded with special tokens, so one the tokenizer marks special
  (``<|im_end|>`` on Qwen base checkpoints) ends a response too;
* ``config_defaults``: nested config values the task recommends (e.g. redteam's
  ``{"tb": {"beta": 0.5}}``); :func:`tba_lab.config.from_dict` puts them under the user's own,
  so any value the user gives wins, and the run's saved ``config.yaml`` shows what was used;
* ``build_embedded(output_dir, task_dir, seed, steps)``: what ``tba-lab sft --task NAME`` runs to
  rebuild that model (and the task's data) reproducibly from a seed.

Searchers and evaluation call the task through :func:`tba_lab.rollout.rollout`, never a
reward function of their own. Implementations registered in :data:`tba_lab.registry.TASKS`:

* :class:`tba_lab.tasks.arithmetic.ArithmeticTask` (``arithmetic``, the default): the embedded
  synthetic GSM8K-format task in ``data/arithmetic``.
* :class:`tba_lab.tasks.gsm8k.GSM8KTask` (``gsm8k``): GSM8K through ``datasets`` (a local
  JSONL file or dataset folder, or a hub name), same prompt and exact-match reward.
* :class:`tba_lab.tasks.preference.PreferenceTask` (``preference``) and
  :class:`tba_lab.tasks.redteam.RedTeamTask` (``redteam``): the paper's other two tasks in
  miniature (docs/usage.md#the-other-tasks-preference-and-red-teaming).

Every math task shares one prompt format (:func:`format_prompt`) so the SFT model, the
searchers and the evaluation see the same text.
"""
from __future__ import annotations

from tba_lab.registry import TASKS, section_key

PROMPT_TEMPLATE = "Question: {question}\nAnswer:"


def format_prompt(question: str, template: str = PROMPT_TEMPLATE) -> str:
    """The prompt text for one question; the model continues with ``" <solution>\\n#### N"``."""
    return template.format(question=question)


class Task:
    """Base of the task table's entries (see the module docstring).

    Args:
        cfg: the run's :class:`~tba_lab.config.RunConfig` (``self.options`` is the task's own
            section when it declares ``config_class``), or None for the task's defaults.
    """
    name: str = ""
    config_class: type | None = None
    section: str | None = None
    default_model: str | None = None  # folder under data/ of the embedded policy (None: tiny-llama)
    config_defaults: dict = {}  # nested config values recommended for this task; the user's win
    stop_strings: tuple[str, ...] = ()  # a response ends at the first of these (none: EOS only)

    def __init__(self, cfg=None):
        self.cfg = cfg
        self.options = None
        if cfg is not None and self.config_class is not None:
            self.options = cfg.section(section_key(self))

    @classmethod
    def check_config(cls, cfg) -> None:
        """Raise :class:`~tba_lab.config.ConfigError` for missing data or bad options."""

    @classmethod
    def build_embedded(cls, output_dir=None, task_dir=None, seed: int = 0, steps: int | None = None,
                       **kwargs) -> dict:
        """Rebuild the task's embedded data and starting policy (``tba-lab sft --task NAME``);
        returns a summary dict (also saved as ``output_dir/sft_summary.json``).

        Raises:
            NotImplementedError: the task ships no embedded model (train it from a model of
                your own: ``tba-lab train --task NAME --model PATH``).
        """
        raise NotImplementedError(f"task {cls.name!r} has no embedded model to build; train on it "
                                  f"from a model of your own with `tba-lab train --task {cls.name} "
                                  f"--model PATH` (model.path: a Hugging Face model folder)")

    def load(self, split: str) -> list:
        """Problems of ``split`` ("train" or "test"), any picklable objects."""
        raise NotImplementedError

    def format_prompt(self, problem) -> str:
        raise NotImplementedError

    def rewards(self, problems: list, completions: list[str]) -> list[float]:
        """Finite float rewards r(x, y), one per completion."""
        raise NotImplementedError

    def metrics(self, problems: list, completions: list[str], rewards: list[float]) -> dict[str, float]:
        """Held-out metrics of greedy completions (default: the mean reward)."""
        return {"reward": sum(rewards) / len(rewards)}


def cut_at_stop(text: str, stops) -> str:
    """``text`` before the earliest occurrence of any of ``stops`` (all of it when none occurs):
    the part of a response that is its own, graded without what follows a stop string.

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"cut_at_stop expects str, got {type(text).__name__}")
    found = [i for i in (text.find(s) for s in stops if s) if i != -1]
    return text[:min(found)] if found else text


def embedded_model_dir(task_name: str):
    """The folder (``pathlib.Path``) of ``task_name``'s embedded starting policy: ``data/`` +
    the task's ``default_model``, or ``data/tiny-llama`` when it declares none.
    Raises KeyError for an unknown task name."""
    from tba_lab.paths import DATA_DIR, DEFAULT_MODEL_DIR

    folder = TASKS.get(task_name).default_model
    return DATA_DIR / folder if folder else DEFAULT_MODEL_DIR


def make_task(cfg) -> Task:
    """The task ``cfg.task.name`` names, built for ``cfg``. Raises KeyError for an unknown name."""
    return TASKS.get(cfg.task.name)(cfg)


__all__ = ["PROMPT_TEMPLATE", "Task", "cut_at_stop", "embedded_model_dir", "format_prompt", "make_task"]
