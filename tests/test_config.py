"""Run configuration: defaults, YAML round trip, unknown keys and bad values (tba_lab.config)."""
import dataclasses

import pytest
import yaml

from tba_lab.config import (ConfigError, RunConfig, from_dict, load_yaml, validate, write_yaml)
from tba_lab.models import DEFAULT_MODEL_DIR, DEFAULT_TASK_DIR


def test_defaults_validate():
    cfg = validate(RunConfig())
    assert cfg.algo == "tb"
    assert cfg.async_.mode == "async" and cfg.async_.sync_period == 1
    assert cfg.training.num_generations >= 2
    assert cfg.model.path == str(DEFAULT_MODEL_DIR)
    assert cfg.task.name == "arithmetic" and cfg.task.train_path == ""  # "" = the task's default
    from tba_lab.tasks import make_task
    assert make_task(cfg).source("train") == str(DEFAULT_TASK_DIR / "train.jsonl")
    # empty YAML == the defaults, with the default task's config_defaults (arithmetic's tuned
    # learning rate and beta, docs/results/tune/) over the kit-wide ones
    assert (from_dict({}).training.learning_rate, from_dict({}).tb.beta) == (2.5e-5, 0.03)
    assert from_dict({"training": {"learning_rate": 5e-5}, "tb": {"beta": 0.1}}) == validate(RunConfig())
    assert RunConfig().model.path == ""  # "" = the task's embedded model, filled in by validate


def test_yaml_round_trip(tmp_path):
    text = """
algo: grpo
seed: 7
max_minutes: 2.5
model: {temperature: 0.7, max_new_tokens: 24}
training:
  num_prompts_per_step: 4
  num_generations: 3
tb:
  beta: 0.014
  beta_final: 0.004
  beta_anneal_steps: 500
grpo: {loss_type: dr_grpo, scale_rewards: none}
buffer: {recency_prob: 0.25, inv_temp: 2.0}
async:
  mode: async
  num_searchers: 2
  sync_period: 3
"""
    path = tmp_path / "run.yaml"
    path.write_text(text)
    cfg = load_yaml(path)
    assert cfg.algo == "grpo" and cfg.seed == 7 and cfg.max_minutes == 2.5
    assert cfg.model.temperature == 0.7 and cfg.model.max_new_tokens == 24
    assert cfg.training.num_prompts_per_step == 4 and cfg.training.num_generations == 3
    assert (cfg.tb.beta, cfg.tb.beta_final, cfg.tb.beta_anneal_steps) == (0.014, 0.004, 500)
    assert cfg.grpo.loss_type == "dr_grpo" and cfg.grpo.scale_rewards == "none"
    assert cfg.buffer.recency_prob == 0.25 and cfg.buffer.inv_temp == 2.0
    assert cfg.async_.num_searchers == 2 and cfg.async_.sync_period == 3
    # untouched fields keep their defaults
    assert cfg.training.learning_rate == from_dict({}).training.learning_rate
    assert cfg.buffer.capacity_per_prompt == RunConfig().buffer.capacity_per_prompt

    # dump (as the trainer writes config.yaml: "async" spelled without the underscore) and reload
    data = cfg.to_dict()
    assert "async" in data and "async_" not in data and "sections" not in data
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_yaml(again) == cfg
    # the Python spelling "async_" is accepted too
    assert from_dict({"async_": {"sync_period": 3}}).async_.sync_period == 3


def test_trainer_writes_loadable_config(tmp_path):
    cfg = from_dict({"seed": 3, "async": {"sync_period": 2}, "tb": {"beta": 0.5}})
    write_yaml(cfg, tmp_path / "config.yaml")
    assert load_yaml(tmp_path / "config.yaml") == cfg


def test_section_given_twice_is_refused():
    """`async` and `async_` are one section: both at once is an error, not "the later wins"."""
    with pytest.raises(ConfigError, match="both `async` and `async_`"):
        from_dict({"async": {"sync_period": 2}, "async_": {"sync_period": 3}})


def test_importing_config_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, tba_lab.config, tba_lab.registry, tba_lab.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_option_lists_come_from_where_they_are_defined():
    """Validation names the choices the loss code accepts, and the registered algorithms."""
    from tba_lab.losses import GRPO_LOSS_TYPES
    from tba_lab.registry import ALGORITHMS

    with pytest.raises(ConfigError) as e:
        from_dict({"grpo": {"loss_type": "sum"}})
    assert str(list(GRPO_LOSS_TYPES)) in str(e.value)
    with pytest.raises(ConfigError) as e:
        from_dict({"algo": "ppo"})
    assert str(list(ALGORITHMS.names())) in str(e.value)


def test_gsm8k_task_paths():
    """task.name gsm8k: a missing local file is refused up front; a hub name is left to load."""
    with pytest.raises(ConfigError, match="task.train_path"):
        from_dict({"task": {"name": "gsm8k", "train_path": "/nonexistent/train.jsonl"}})
    cfg = from_dict({"task": {"name": "gsm8k"}})
    from tba_lab.tasks import make_task
    assert make_task(cfg).source("test") == "openai/gsm8k"


@pytest.mark.parametrize("data, name", [
    ({"learning_rate": 1e-4}, "'learning_rate'"),                # top level, belongs in training
    ({"training": {"lr": 1e-4}}, "'training.lr'"),
    ({"async": {"sync_periods": 2}}, "'async.sync_periods'"),
    ({"tb": {"beta": 0.1, "gamma": 2}}, "'tb.gamma'"),
])
def test_unknown_key_names_the_key(data, name):
    with pytest.raises(ConfigError, match="unknown config key") as e:
        from_dict(data)
    assert name in str(e.value)


def test_unknown_key_in_yaml_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("buffer:\n  recency: 0.5\n")
    with pytest.raises(ConfigError, match=r"buffer\.recency"):
        load_yaml(path)
    # A removed option loads at the value that behaves as the kit does now (an old run folder's
    # config, to resume) and is refused by name at any other.
    path.write_text("buffer:\n  recency_fallback: newest\nasync:\n  wait_for_room: true\n")
    assert load_yaml(path).buffer.recency_prob == from_dict({}).buffer.recency_prob
    path.write_text("async:\n  wait_for_room: false\n")
    with pytest.raises(ConfigError, match=r"async\.wait_for_room=False: this option was removed"):
        load_yaml(path)


def test_missing_yaml_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        load_yaml(tmp_path / "nope.yaml")


@pytest.mark.parametrize("data, field", [
    ({"algo": "ppo"}, "algo"),
    ({"task": {"name": "tldr"}}, "task.name"),
    ({"model": {"backend": "vllm2"}}, "model.backend"),
    ({"async": {"launcher": "slurm"}}, "async.launcher"),
    ({"training": {"num_generations": 1}}, "training.num_generations"),
    ({"buffer": {"recency_prob": 2}}, "buffer.recency_prob"),
    ({"buffer": {"recency_prob": -0.1}}, "buffer.recency_prob"),
    ({"buffer": {"max_replay_ratio": 0.5}}, "buffer.max_replay_ratio"),
    ({"async": {"mode": "sync", "sync_period": 2}}, "async.sync_period"),
    ({"async": {"mode": "sync", "num_searchers": 2}}, "async.num_searchers"),
    ({"async": {"mode": "lockstep"}}, "async.mode"),
    ({"async": {"sync_period": 0}}, "async.sync_period"),
    ({"async": {"reference_pass": "learner"}}, "async.reference_pass"),
    ({"task": {"train_path": "/nonexistent/train.jsonl"}}, "task.train_path"),
    ({"task": {"test_path": "/nonexistent/test.jsonl"}}, "task.test_path"),
    ({"model": {"temperature": 0}}, "model.temperature"),
    ({"tb": {"beta": 0}}, "tb.beta"),
    ({"max_minutes": 0}, "max_minutes"),
    ({"grpo": {"loss_type": "sum"}}, "grpo.loss_type"),
    ({"tb": {"loss_type": "grpo"}}, "tb.loss_type"),
    ({"tb": {"scale_rewards": "std"}}, "tb.scale_rewards"),
])
def test_bad_value_names_the_field(data, field):
    with pytest.raises(ConfigError) as e:
        from_dict(data)
    assert field in str(e.value)


def test_validate_catches_fields_set_after_construction():
    """The CLI sets flags onto a built config and re-validates; that path must catch bad values."""
    cfg = RunConfig()
    cfg.async_.mode, cfg.async_.sync_period = "sync", 2
    with pytest.raises(ConfigError, match="sync_period=2 with mode=sync"):
        validate(cfg)
    cfg = dataclasses.replace(RunConfig(), algo="dpo")
    with pytest.raises(ConfigError, match="algo='dpo'"):
        validate(cfg)


def test_section_must_be_a_mapping():
    with pytest.raises(ConfigError, match=r"^training must be a mapping, got list"):
        from_dict({"training": [1, 2]})


@pytest.mark.parametrize("data, field", [
    ({"max_minutes": "five"}, "max_minutes"),
    ({"seed": "x"}, "seed"),
    ({"training": {"num_prompts_per_step": 4.5}}, "training.num_prompts_per_step"),
    ({"training": {"max_steps": True}}, "training.max_steps"),
    ({"async": {"mode": 1}}, "async.mode"),
    ({"tb": {"beta_final": "low"}}, "tb.beta_final"),
])
def test_wrong_type_names_the_field(data, field):
    """A wrong type is a ConfigError naming the field, never a TypeError from a comparison."""
    with pytest.raises(ConfigError) as e:
        from_dict(data)
    assert str(e.value).startswith(field + "=")


def test_yaml_exponent_without_dot_is_a_number(tmp_path):
    """PyYAML reads 5e-5 (no dot) as a string; float fields accept it as the number."""
    path = tmp_path / "lr.yaml"
    path.write_text("training: {learning_rate: 5e-5}\ntb: {beta: 1e-2, beta_final: 4e-3}\n")
    cfg = load_yaml(path)
    assert cfg.training.learning_rate == 5e-5 and isinstance(cfg.training.learning_rate, float)
    assert cfg.tb.beta == 0.01 and cfg.tb.beta_final == 0.004
    assert from_dict({"tb": {"beta_final": None}}).tb.beta_final is None
    assert from_dict({"max_minutes": 2}).max_minutes == 2  # an int is fine for a float


def test_task_config_defaults_sit_under_the_users_values():
    """Task.config_defaults (redteam: tb.beta 0.5) apply when the user gives no value; any value
    the user gives, in any form of input, wins; other tasks keep the kit's defaults."""
    from tba_lab.config import short_run

    assert from_dict({"task": {"name": "redteam"}}).tb.beta == 0.5
    assert from_dict({"task": {"name": "redteam"}, "tb": {"beta": 0.1}}).tb.beta == 0.1
    assert from_dict({"task": {"name": "redteam"}, "tb": {"beta_final": 0.2}}).tb.beta == 0.5
    assert from_dict({}).tb.beta == 0.03 and from_dict({"task": {"name": "preference"}}).tb.beta == 0.1
    assert short_run("/tmp/x", 10, {"task": {"name": "redteam"}}).tb.beta == 0.5
    with pytest.raises(ConfigError, match="task.name"):  # an unknown task still named
        from_dict({"task": {"name": "nope"}})
