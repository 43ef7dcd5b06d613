"""Every float option refuses NaN and -inf, and +inf except where +inf means "no limit", from a
YAML file (`.nan`, `.inf`), the command line and code alike, before any process starts (after
vllm router#261: non-finite configuration values passed validation).

The table is generated from the dataclasses (the core sections and every registered section),
so a float option added later is checked without a new line here."""
from __future__ import annotations

import dataclasses
import math

import pytest

from tba_lab import cli
from tba_lab.config import (_CORE_SECTIONS, ConfigError, RunConfig, inf_means_no_limit,
                            load_yaml, section_classes, short_run, validate)

# +inf accepted: each reads as "never" / "no clipping" in the code that uses it.
NO_LIMIT = {"status_every_seconds", "task.eval_every_seconds", "training.max_grad_norm",
            "training.save_seconds", "async.searcher_timeout", "grpo.epsilon", "rloo.epsilon"}


def _is_float(f) -> bool:
    return isinstance(f.default, float) or "float" in str(f.type)


def float_options() -> list[str]:
    """Dotted names of every float option a YAML file can set (``async.searcher_timeout``)."""
    out = [f.name for f in dataclasses.fields(RunConfig) if _is_float(f)]
    for key, cls in _CORE_SECTIONS.items():
        out += [f"{'async' if key == 'async_' else key}.{f.name}" for f in dataclasses.fields(cls)
                if _is_float(f)]
    for key, cls in section_classes().items():
        out += [f"{key}.{f.name}" for f in dataclasses.fields(cls) if _is_float(f)]
    return out


CASES = [(name, text) for name in float_options() for text in (".nan", ".inf", "-.inf", "'NaN'")]


def _yaml(name: str, text: str) -> str:
    section, _, field = name.rpartition(".")
    return f"{section}:\n  {field}: {text}\n" if section else f"{name}: {text}\n"


def test_the_table_covers_the_kits_float_options():
    names = float_options()
    assert len(names) >= 25 and len(set(names)) == len(names)
    for name in ("max_minutes", "model.temperature", "training.learning_rate",
                 "training.weight_decay", "tb.beta", "tb.beta_final", "grpo.beta", "ray.start_timeout"):
        assert name in names
    assert NO_LIMIT <= set(names)
    assert set(inf_means_no_limit()) == NO_LIMIT  # what the kit declares is what this file tests


@pytest.mark.parametrize("name, text", CASES)
def test_a_non_finite_value_in_a_yaml_file_is_refused_by_name(tmp_path, name, text):
    path = tmp_path / "c.yaml"
    path.write_text(_yaml(name, text))
    if text == ".inf" and name in NO_LIMIT:
        cfg = load_yaml(path)
        section, _, field = name.rpartition(".")
        owner = getattr(cfg, section.replace("async", "async_")) if section else cfg
        assert getattr(owner, field) == math.inf
        return
    with pytest.raises(ConfigError) as e:
        load_yaml(path)
    message = str(e.value)
    assert message.startswith(f"{name}=") and "finite" in message, message


@pytest.mark.parametrize("name", ["tb.beta", "training.learning_rate", "training.weight_decay",
                                  "model.temperature", "max_minutes"])
def test_a_value_set_in_code_is_checked_by_validate(name):
    cfg = short_run("runs/unused", 60)
    section, _, field = name.rpartition(".")
    owner = getattr(cfg, section) if section else cfg
    for value in (math.nan, math.inf, -math.inf):
        setattr(owner, field, value)
        with pytest.raises(ConfigError, match=rf"^{name}="):
            validate(cfg)


def test_short_run_overrides_refuse_inf_beta():
    with pytest.raises(ConfigError, match=r"^tb\.beta=inf: .*finite"):
        short_run("runs/unused", 60, {"tb": {"beta": math.inf}})


@pytest.mark.parametrize("argv, field", [
    (["--max-minutes", "nan"], "max_minutes"),
    (["--max-minutes", "inf"], "max_minutes"),
    (["--max-minutes=-inf"], "max_minutes"),
])
def test_the_train_command_refuses_non_finite_flags(tmp_path, capsys, monkeypatch, argv, field):
    monkeypatch.setattr("tba_lab.trainer.train", lambda *a, **k: pytest.fail("a run started"))
    assert cli.main(["train", "--output-dir", str(tmp_path / "run"), *argv]) == 2
    err = capsys.readouterr().err
    assert f"{field}=" in err and "finite" in err, err


@pytest.mark.parametrize("text", ["training: {weight_decay: .nan}", "tb: {beta: .inf}",
                                  "model: {temperature: .inf}"])
def test_train_and_experiment_config_files_refuse_them_before_any_run(tmp_path, capsys,
                                                                      monkeypatch, text):
    monkeypatch.setattr("tba_lab.trainer.train", lambda *a, **k: pytest.fail("a run started"))
    monkeypatch.setattr("tba_lab.lab.experiments.run_experiment",
                        lambda *a, **k: pytest.fail("an experiment started"))
    conf = tmp_path / "c.yaml"
    conf.write_text(text + "\n")
    field = text.split(":")[0] + "." + text.split("{")[1].split(":")[0]
    assert cli.main(["train", "--config", str(conf), "--output-dir", str(tmp_path / "r")]) == 2
    assert f"{field}=" in capsys.readouterr().err
    assert cli.main(["experiment", "race", "--smoke", "--config", str(conf),
                     "--output-dir", str(tmp_path / "x")]) == 2
    assert f"{field}=" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_experiment_set_refuses_non_finite_settings_before_any_run(tmp_path, capsys, monkeypatch,
                                                                    value):
    monkeypatch.setattr("tba_lab.lab.experiments.run_experiment",
                        lambda *a, **k: pytest.fail("an experiment started"))
    assert cli.main(["experiment", "race", "--smoke", "--set", f"minutes={value}",
                     "--output-dir", str(tmp_path / "x")]) == 2
    assert f"--set minutes={float(value)}: give a finite number" in capsys.readouterr().err
