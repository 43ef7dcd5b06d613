"""Bad input is refused before any process starts and before anything is written, with a message
naming the field and the fix (tba_lab.preflight, config, task readers, batch layout, notebooks)."""
import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tba_lab import paths
from tba_lab.config import ConfigError, from_dict, load_yaml, short_run
from tba_lab.preflight import check_model, check_task_data, model_path_problem, preflight

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "OMP_NUM_THREADS": "1"}
ROWS = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}.\n#### {i + 1}"}
        for i in range(6)]


def _jsonl(path: Path, rows=ROWS, lines: list[str] | None = None) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "".join(lines or []))
    return path


def _cfg(tmp_path, **task) -> "object":
    """A config on the embedded model whose task reads small files (B = 4, K = 2)."""
    return from_dict({"output_dir": str(tmp_path / "run"),
                      "training": {"num_prompts_per_step": 4, "num_generations": 2},
                      "buffer": {"max_prompts": 0}, "task": task})


# ----------------------------------------------------------------------------------------------
# 1. model.path
# ----------------------------------------------------------------------------------------------

def test_missing_path_that_is_no_hub_id_names_the_field_and_not_sft(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    msg = model_path_problem("some/missing/dir")
    assert msg.startswith("model.path='some/missing/dir' is not a local folder")
    assert f"no folder '{tmp_path / 'some/missing/dir'}'" in msg
    assert "not a Hugging Face hub id" in msg and "fix: set model.path (--model)" in msg
    assert "tba-lab sft" not in msg


def test_relative_path_read_as_hub_id_offline_says_not_cached(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    msg = model_path_problem("data/foo")
    assert msg.startswith("model.path='data/foo' is not a local folder")
    assert "'data' is a local folder here, so this may be a mistyped local path" in msg
    assert "not in the local cache" in msg and "HF_HUB_OFFLINE" in msg
    assert "tba-lab sft" not in msg
    import tba_lab.preflight as pf

    monkeypatch.setattr(pf, "_in_hub_cache", lambda repo_id: repo_id == "data/foo")
    assert model_path_problem("data/foo") is None  # a cached hub model loads offline


def test_hub_id_with_downloads_allowed_asks_the_hub_once(tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    asked = []

    def unreachable(repo_id, filename):
        asked.append((repo_id, filename))
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(huggingface_hub, "file_exists", unreachable)
    msg = model_path_problem("some-org/some-model")
    assert asked == [("some-org/some-model", "config.json")]
    assert "the hub cannot be asked for it (ConnectionError: Name or service not known)" in msg
    monkeypatch.setattr(huggingface_hub, "file_exists", lambda repo_id, filename: False)
    assert "the Hugging Face hub has no model 'some-org/some-model'" in model_path_problem(
        "some-org/some-model")
    monkeypatch.setattr(huggingface_hub, "file_exists", lambda repo_id, filename: True)
    assert model_path_problem("some-org/some-model") is None  # the loader may download it


def test_only_the_embedded_default_suggests_sft(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "DEFAULT_MODEL_DIR", tmp_path / "tiny-llama")
    msg = model_path_problem(tmp_path / "tiny-llama")
    assert msg.startswith(f"model.path='{tmp_path / 'tiny-llama'}': the embedded model is missing")
    assert "run `tba-lab sft` to rebuild the embedded model" in msg
    (tmp_path / "tiny-llama").mkdir()  # a half-written folder: no config.json yet
    assert "run `tba-lab sft`" in model_path_problem(tmp_path / "tiny-llama")
    assert "tba-lab sft" not in model_path_problem(tmp_path / "elsewhere")


def test_folder_without_config_or_tokenizer_files(tmp_path):
    d = tmp_path / "run"
    (d / "policy").mkdir(parents=True)
    msg = model_path_problem(d)
    assert msg == (f"model.path='{d}' is a folder without config.json, so it is not a model saved "
                   f"with save_pretrained; fix: point model.path at the folder that holds "
                   f"config.json")
    shutil.copy(paths.DEFAULT_MODEL_DIR / "config.json", d / "policy" / "config.json")
    assert f"(a model folder inside it: '{d / 'policy'}')" in model_path_problem(d)
    msg = model_path_problem(d / "policy")
    assert msg.startswith(f"model.path='{d / 'policy'}' has config.json but no tokenizer files")
    assert "tokenizer.save_pretrained" in msg
    f = d / "policy" / "config.json"
    assert model_path_problem(f) == (f"model.path='{f}' is a file, not a model folder; fix: set "
                                     f"model.path (--model) to a folder written by "
                                     f"save_pretrained (config.json and tokenizer files)")
    assert model_path_problem(paths.DEFAULT_MODEL_DIR) is None


def test_load_policy_gives_the_same_message(tmp_path):
    from tba_lab.models import load_policy

    with pytest.raises(FileNotFoundError) as err:
        load_policy(tmp_path / "nope")
    assert str(err.value) == model_path_problem(tmp_path / "nope")
    assert "tba-lab sft" not in str(err.value)


def _tokenizer_folder(tmp_path, eos_in_config=None, pad=False, eos=False) -> Path:
    """A model folder (config.json copied from the embedded model) whose tokenizer has the
    given special tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    d = tmp_path / "model"
    vocab = {"<unk>": 0, "<pad>": 1, "</s>": 2, "a": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    special = {"pad_token": "<pad>"} if pad else {}
    special.update({"eos_token": "</s>"} if eos else {})
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", **special).save_pretrained(d)
    cfg = json.loads((paths.DEFAULT_MODEL_DIR / "config.json").read_text())
    cfg.update(eos_token_id=eos_in_config, pad_token_id=None, bos_token_id=None)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_tokenizer_with_neither_pad_nor_eos_is_refused(tmp_path):
    d = _tokenizer_folder(tmp_path)
    with pytest.raises(ConfigError) as err:
        check_model(d)
    assert str(err.value).startswith(f"model.path='{d}': the tokenizer has neither a pad token "
                                     f"nor an EOS token")
    assert "tokenizer.add_special_tokens({'pad_token': '<pad>'})" in str(err.value)


def test_eos_must_be_declared_somewhere(tmp_path):
    d = _tokenizer_folder(tmp_path, pad=True)  # pads, but nothing ends a response
    with pytest.raises(ConfigError, match="declares no EOS token .not in the tokenizer, "
                                          "config.json or generation_config.json"):
        check_model(d)
    shutil.rmtree(d)
    d = _tokenizer_folder(tmp_path, pad=True, eos_in_config=2)  # config.json's EOS is enough
    assert check_model(d).pad_token == "<pad>"
    shutil.rmtree(d)
    d = _tokenizer_folder(tmp_path, eos=True)  # EOS pads too (load_policy's fallback)
    assert check_model(d).eos_token_id == 2


def test_tokenizer_that_does_not_load(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    shutil.copy(paths.DEFAULT_MODEL_DIR / "config.json", d / "config.json")
    (d / "tokenizer.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"^model.path='.*': the tokenizer does not load \("):
        check_model(d)


def test_preflight_of_the_default_config_loads_no_weights(tmp_path):
    cfg = from_dict({"output_dir": str(tmp_path / "run")})
    assert preflight(cfg) == {"model_path": str(paths.DEFAULT_MODEL_DIR),
                              "train_problems": 20000, "test_problems": 1000}
    assert not (tmp_path / "run").exists()  # nothing written
    cfg.model.path = str(tmp_path / "missing")
    with pytest.raises(ConfigError, match=r"^model.path='.*missing' is not a local folder"):
        preflight(cfg)
    cfg.model.path = str(paths.DEFAULT_MODEL_DIR)
    cfg.training.num_generations = 1  # set after construction: preflight validates again
    with pytest.raises(ConfigError, match="training.num_generations=1"):
        preflight(cfg)


def test_output_dir_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    cfg = from_dict({"output_dir": str(tmp_path / "f")})
    with pytest.raises(ConfigError, match=r"output_dir='.*f' is a file; fix: choose a folder"):
        preflight(cfg)
    cfg.output_dir = str(tmp_path / "f" / "sub")
    with pytest.raises(ConfigError, match=r"cannot be created \('.*f' is not a folder\)"):
        preflight(cfg)


# ----------------------------------------------------------------------------------------------
# 2. YAML duplicate keys and other aliasing
# ----------------------------------------------------------------------------------------------

def test_yaml_duplicate_keys_name_the_key_and_lines(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("algo: tb\ntb:\n  beta: 0.1\n  beta: 0.5\n")
    with pytest.raises(ConfigError) as err:
        load_yaml(p)
    assert str(err.value) == (f"{p}, line 4: `tb.beta` is given twice (first on line 3); YAML "
                              f"would silently keep only the last value, so delete one of them")
    p.write_text("tb: {beta: 0.1}\nalgo: grpo\ntb: {beta: 0.2}\n")
    with pytest.raises(ConfigError, match=r"line 3: `tb` is given twice \(first on line 1\)"):
        load_yaml(p)
    p.write_text("training: {num_generations: 4, num_generations: 2}\n")
    with pytest.raises(ConfigError, match="line 1: `training.num_generations` is given twice"):
        load_yaml(p)


def test_yaml_merge_keys_may_still_override(tmp_path):
    p = tmp_path / "merge.yaml"
    p.write_text("tb: &t {beta: 0.1}\ngrpo: {<<: {beta: 0.3, epsilon: 0.1}, beta: 0.2}\n")
    cfg = load_yaml(p)
    assert (cfg.tb.beta, cfg.grpo.beta, cfg.grpo.epsilon) == (0.1, 0.2, 0.1)


def test_yaml_syntax_error_is_a_config_error_with_the_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("tb: {beta: 0.1\nalgo: tb\n")
    with pytest.raises(ConfigError, match=rf"^config file '{p}', line 2, column 5 is not valid "
                                          rf"YAML: .*; fix the syntax there$"):
        load_yaml(p)


def test_aliases_are_refused():
    with pytest.raises(ConfigError, match="both `async` and `async_` are given"):
        from_dict({"async": {"mode": "sync"}, "async_": {"mode": "async"}})
    with pytest.raises(ConfigError, match="both `async` and `async_` are given in overrides"):
        short_run("runs/x", 10, {"async": {"mode": "sync"}, "async_": {"num_searchers": 2}})
    with pytest.raises(ConfigError, match="unknown config key 'dr_grpo'"):  # its options are `grpo`
        from_dict({"algo": "dr_grpo", "dr_grpo": {"epsilon": 0.1}})
    with pytest.raises(ConfigError, match="unknown config key 'sections'"):
        from_dict({"sections": {}})
    with pytest.raises(ConfigError, match="unknown config key 'tb.betta'"):
        from_dict({"tb": {"betta": 0.1}})


# ----------------------------------------------------------------------------------------------
# 3./4. task data: malformed lines, too few problems
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("task", ["arithmetic", "gsm8k"])
def test_malformed_jsonl_line_names_file_line_and_field(tmp_path, task):
    test = _jsonl(tmp_path / "test.jsonl")
    bad = _jsonl(tmp_path / "train.jsonl", lines=["\n", '{"question": "q", "answer": \n'])
    cfg = _cfg(tmp_path, name=task, train_path=str(bad), test_path=str(test))
    with pytest.raises(ConfigError) as err:
        check_task_data(cfg)
    assert str(err.value) == (  # line 7 is blank: skipped
        f"task.train_path='{bad}' does not load: {bad}:8: invalid JSON (Expecting value, column "
        f"29); fix: make the line one JSON object or delete it")
    _jsonl(bad, rows=ROWS[:2] + [{"question": "q"}])
    with pytest.raises(ConfigError, match=rf"{bad}:3: row 2 \(0-based; line 3\) is missing "
                                          rf"required field 'answer'"):
        check_task_data(cfg)
    _jsonl(bad, lines=['["question", "answer"]\n'])
    with pytest.raises(ConfigError, match=rf"{bad}:7: expected a JSON object, got list"):
        check_task_data(cfg)


def test_blank_lines_are_skipped(tmp_path):
    from tba_lab.tasks.arithmetic import ArithmeticTask

    p = tmp_path / "train.jsonl"
    p.write_text("\n" + json.dumps(ROWS[0]) + "\n   \n" + json.dumps(ROWS[1]) + "\n\n")
    cfg = _cfg(tmp_path, train_path=str(p))
    assert ArithmeticTask(cfg).load("train") == ROWS[:2]


def test_too_few_train_problems_and_empty_test(tmp_path):
    train = _jsonl(tmp_path / "train.jsonl", rows=ROWS[:3])
    test = _jsonl(tmp_path / "test.jsonl", rows=[])
    cfg = _cfg(tmp_path, train_path=str(train), test_path=str(test))
    with pytest.raises(ConfigError) as err:
        check_task_data(cfg)
    assert str(err.value) == (
        f"task.train_path='{train}' has 3 problems, fewer than training.num_prompts_per_step=4 "
        f"(each generation batch takes 4 different prompts); fix: give task.train_path at least 4 "
        f"problems or lower training.num_prompts_per_step")
    _jsonl(train, rows=ROWS[:4])
    with pytest.raises(ConfigError) as err:
        check_task_data(cfg)
    assert str(err.value) == (
        f"task.test_path='{test}' has no problems, but held-out evaluation scores up to "
        f"task.eval_size=500 of them before and after training; fix: point task.test_path at a "
        f"non-empty GSM8K-format .jsonl file")
    assert check_task_data(cfg, splits=("train",)) == {"train": 4}


def test_unloadable_default_split_names_the_task_default(tmp_path):
    cfg = from_dict({"task": {"name": "gsm8k"}, "output_dir": str(tmp_path / "run")})
    with pytest.raises(ConfigError, match=r"^task.train_path='' \(the gsm8k task's default "
                                          r"'openai/gsm8k'\) does not load: "):
        check_task_data(cfg)  # offline, not cached


# ----------------------------------------------------------------------------------------------
# 6. batches that are not whole groups
# ----------------------------------------------------------------------------------------------

def _rollouts(prompt_of_row: list[int]):
    from tba_lab.buffer import Rollout

    return [Rollout(prompt_id=p, prompt_ids=[5, 6 + p], response_ids=[7], reward=0.0,
                    ref_token_logps=[-1.0], behaviour_token_logps=[-1.0], version=0)
            for p in prompt_of_row]


def test_batch_not_a_multiple_of_the_group_size(tmp_path):
    from tba_lab.algorithms import PolicyBatch, check_group_layout, compute_loss, make_algorithm

    with pytest.raises(ValueError) as err:
        check_group_layout(_rollouts([0, 0, 0, 0, 1, 1, 1]), 4)
    assert str(err.value).startswith("a batch of 7 rollouts is not a whole number of groups of "
                                     "training.num_generations=4 (7 % 4 = 3)")
    with pytest.raises(ValueError, match="a batch of 0 rollouts"):
        check_group_layout([], 4)
    # raised before any scoring: no model is needed to see it
    with pytest.raises(ValueError, match="6 rollouts .* training.num_generations=4"):
        PolicyBatch.from_rollouts(None, _rollouts([0] * 6), 0, 1.0, 4, with_reference=True)
    cfg = from_dict({"output_dir": str(tmp_path), "training": {"num_generations": 4}})
    with pytest.raises(ValueError, match="6 rollouts .* training.num_generations=4"):
        compute_loss(make_algorithm(cfg), None, _rollouts([0] * 6), 0, step=0)
    assert check_group_layout(_rollouts([0, 0, 1, 1]), 2) == 2


def test_groups_that_mix_prompts_are_refused():
    from tba_lab.algorithms import check_group_layout

    with pytest.raises(ValueError, match=r"rows 0..1 should be one group .* but row 1 answers "
                                         r"another prompt"):
        check_group_layout(_rollouts([0, 1, 0, 1]), 2)


def test_loss_units_name_num_generations():
    from tba_lab.losses import group_advantages, trajectory_balance_loss

    with pytest.raises(ValueError, match=r"group_size=4 \(training.num_generations; 7 % 4 = 3\)"):
        group_advantages(torch.zeros(7), 4)
    z = torch.zeros(6)
    with pytest.raises(ValueError, match=r"group_size=4 \(training.num_generations; 6 % 4 = 2\)"):
        trajectory_balance_loss(z, z, z, 0.1, 4)


def test_impossible_group_settings_are_refused():
    with pytest.raises(ConfigError, match="training.num_generations=1: group methods"):
        from_dict({"training": {"num_generations": 1}})
    with pytest.raises(ConfigError, match="buffer.capacity_per_prompt=4 is below "
                                          "training.num_generations=8"):
        from_dict({"buffer": {"capacity_per_prompt": 4}})


# ----------------------------------------------------------------------------------------------
# 7. notebook parameter cells
# ----------------------------------------------------------------------------------------------

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def _assigned_names(source: str) -> list[str]:
    """Names bound by the top-level assignments of a cell, in order (``ast``)."""
    names = []
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def test_papermill_rejects_an_equals_sign_in_a_comment():
    """Why the test below exists: papermill's parser drops such a line, silently for the run."""
    translators = pytest.importorskip("papermill.translators")
    cell = {"source": "A = 1\nB = None  # (None = off)\n"}
    names = [p.name for p in translators.PythonTranslator.inspect(cell)]
    assert names == ["A"] and _assigned_names(cell["source"]) == ["A", "B"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_parameter_line_parses_with_papermill(path):
    inspection = pytest.importorskip("papermill.inspection")
    cells = [c for c in json.loads(path.read_text())["cells"]
             if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"{path.name}: one cell tagged `parameters`"
    expected = _assigned_names("".join(cells[0]["source"]))
    assert len(expected) >= 3  # SMOKE, SEED, OUTPUT_DIR at least
    assert list(inspection.inspect_notebook(str(path))) == expected


# ----------------------------------------------------------------------------------------------
# the command line: exit 2, one line, nothing written
# ----------------------------------------------------------------------------------------------

def test_cli_train_missing_model_exits_2_with_one_line(tmp_path):
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "tba_lab", "train", "--model", "some/missing/dir",
                        "--output-dir", str(out), "--no-progress"], capture_output=True,
                       text=True, timeout=120, env=ENV, cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr == (f"tba-lab train: model.path='some/missing/dir' is not a local folder (no "
                        f"folder '{tmp_path / 'some/missing/dir'}') and not a Hugging Face hub id "
                        f"(those look like 'name' or 'org/name'); fix: set model.path (--model) to "
                        f"a folder written by save_pretrained (config.json and tokenizer files)\n")
    assert r.stdout == "" and not out.exists()


def test_cli_train_bad_data_and_duplicate_yaml_exit_2(tmp_path, capsys):
    from tba_lab.cli import main

    out = tmp_path / "run"
    bad = _jsonl(tmp_path / "train.jsonl", lines=["oops\n"])
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"task: {{train_path: '{bad}'}}\noutput_dir: '{out}'\n")
    assert main(["train", "--config", str(cfg), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == (f"tba-lab train: task.train_path='{bad}' does not load: {bad}:7: invalid "
                   f"JSON (Expecting value, column 1); fix: make the line one JSON object or "
                   f"delete it\n")
    cfg.write_text(f"output_dir: '{out}'\nseed: 1\nseed: 2\n")
    assert main(["train", "--config", str(cfg), "--no-progress"]) == 2
    assert capsys.readouterr().err == (f"tba-lab train: {cfg}, line 3: `seed` is given twice "
                                       f"(first on line 2); YAML would silently keep only the "
                                       f"last value, so delete one of them\n")
    assert not out.exists()


def test_cli_eval_refuses_bad_input_with_exit_2(tmp_path, capsys):
    from tba_lab.cli import main

    assert main(["eval", "--model", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.startswith(f"tba-lab eval: model.path='{tmp_path / 'nope'}' "
                                              f"is not a local folder")
    empty = _jsonl(tmp_path / "test.jsonl", rows=[])
    assert main(["eval", "--data", str(empty)]) == 2
    assert capsys.readouterr().err.startswith(f"tba-lab eval: task.test_path='{empty}' has no "
                                              f"problems")
    assert main(["eval", "-n", "0"]) == 2
    assert "-n 0: give the number of held-out problems to score, >= 1" in capsys.readouterr().err


def test_task_modules_import_in_any_order():
    """Importing tba_lab.tasks.gsm8k first (as tests/test_gsm8k.py does alone) and running the
    arithmetic module as a script used to fail with a circular import."""
    for cmd in (["-c", "import tba_lab.tasks.gsm8k as g; from tba_lab.registry import TASKS; "
                       "print(sorted(TASKS.names()))"],
                ["-m", "tba_lab.tasks.arithmetic"]):
        r = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, timeout=120,
                           env=ENV, cwd=REPO)
        assert r.returncode == 0, r.stderr
    assert r.stdout.count("\n#### ") == 4  # four sample problems, each ending in its answer


def test_options_of_a_section_the_run_does_not_read_are_named():
    """grpo.beta with algo tb would be ignored without a word: the message names the field,
    the section's owner and what the run uses. Sections the run reads, and values the task's
    own defaults set, are not reported."""
    from tba_lab.config import unused_sections

    assert unused_sections(from_dict({})) == []
    [msg] = unused_sections(from_dict({"algo": "tb", "grpo": {"beta": 0.5}}))
    assert msg.startswith("grpo.beta=0.5 is set but this run does not read section `grpo`")
    assert "algo: grpo or algo: dr_grpo" in msg and "this run has algo: tb" in msg
    assert unused_sections(from_dict({"algo": "dr_grpo", "grpo": {"beta": 0.5}})) == []
    # the red-teaming task's config_defaults set tb.beta 0.5: not the user's doing
    assert unused_sections(from_dict({"algo": "grpo", "task": {"name": "redteam"}})) == []
    [msg] = unused_sections(from_dict({"algo": "grpo", "task": {"name": "redteam"},
                                       "tb": {"beta": 0.2}}))
    assert msg.startswith("tb.beta=0.2 is set")
    msgs = unused_sections(from_dict({"vllm": {"dtype": "bfloat16"}, "ray": {"address": "auto"}}))
    assert [m.split(" is set")[0] for m in msgs] == ["vllm.dtype='bfloat16'", "ray.address='auto'"]


def test_train_warns_of_unread_options_before_it_starts(tmp_path, monkeypatch):
    import tba_lab.trainer as trainer

    class Started(Exception):
        pass

    def no_run(cfg):
        raise Started

    monkeypatch.setattr(trainer, "_trainer_process", no_run)
    cfg = from_dict({"algo": "tb", "grpo": {"epsilon": 0.3}, "output_dir": str(tmp_path / "r")})
    with pytest.warns(UserWarning, match=r"grpo\.epsilon=0\.3 is set but this run does not read"):
        with pytest.raises(Started):
            trainer.train(cfg, progress=False)
