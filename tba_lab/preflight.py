"""Checks of a run's inputs before any process starts and before anything is written.

:func:`preflight` is what :func:`tba_lab.trainer.train` calls first (and ``tba-lab train`` /
``tba-lab eval`` before it): it validates the config, then checks what validation cannot see
without reading files, and raises :class:`~tba_lab.config.ConfigError` naming the field and the
fix, so a bad input never leaves a traceback, a started searcher or a half-written run folder.

* ``model.path``: a local folder with ``config.json`` and tokenizer files (or a Hugging Face hub
  id that is in the local cache or, when downloads are allowed, can be fetched); the tokenizer
  loads and has a pad or an EOS token (:func:`tba_lab.models.load_policy` pads with EOS when
  there is no pad token), and some EOS id is declared (generation ends responses with it).
* the task's splits: they load (a malformed JSONL line is reported with its file and line), the
  train split holds at least ``training.num_prompts_per_step`` problems and the test split is not
  empty (held-out evaluation runs before and after every training run).
* ``output_dir``: not an existing file, and creatable (checked without creating anything).
* ``async.trainer_device`` and ``async.searcher_devices`` (:func:`check_devices`): every
  ``cuda:N`` exists on this machine, and a CUDA weight channel's memory can be exported.

It is cheap: no model weights are loaded; the tokenizer and the task's problems are.
"""
from __future__ import annotations

import os
from pathlib import Path

from tba_lab import paths
from tba_lab.config import ConfigError, RunConfig, validate
from tba_lab.reporting import check_report_to

# Files a tokenizer can be loaded from (fast tokenizers, sentencepiece, BPE/WordPiece vocabs).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
                   "vocab.txt", "spiece.model", "sentencepiece.bpe.model")
_MODEL_FIX = ("set model.path (--model) to a folder written by save_pretrained (config.json and "
              "tokenizer files)")


def _first_line(e: BaseException) -> str:
    """``Type: first non-empty line of the message`` of an exception from a library."""
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _embedded_task(p: Path) -> str | None:
    """The task whose embedded starting policy lives at ``p`` (``Task.default_model``), or None."""
    from tba_lab.registry import TASKS
    from tba_lab.tasks import embedded_model_dir

    where = p.expanduser().resolve()
    if where == Path(paths.DEFAULT_MODEL_DIR).resolve():
        return "arithmetic"
    for name in TASKS.names():
        if where == Path(embedded_model_dir(name)).resolve():
            return name
    return None


def _hub_offline() -> bool:
    """True when Hugging Face downloads are switched off (``HF_HUB_OFFLINE`` or
    ``TRANSFORMERS_OFFLINE`` set to 1/true/yes/on, read now, not at import)."""
    truthy = {"1", "true", "yes", "on"}
    return any(os.environ.get(v, "").strip().lower() in truthy
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _is_hub_id(name: str) -> bool:
    """``name`` has the form of a hub repository id (``name`` or ``org/name``), not a path."""
    if name.startswith((".", "/", "~", "\\")) or (os.sep != "/" and os.sep in name):
        return False
    try:
        from huggingface_hub.utils import HFValidationError, validate_repo_id
    except ImportError:  # pragma: no cover - transformers always brings huggingface_hub
        return name.count("/") <= 1
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def _in_hub_cache(repo_id: str) -> bool:
    """True when the local Hugging Face cache holds ``repo_id``'s ``config.json``."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)


def model_path_problem(path) -> str | None:
    """What is wrong with ``path`` as ``model.path``, as one line naming the fix; None if nothing.

    Nothing is loaded: a local folder must hold ``config.json`` and at least one of
    :data:`TOKENIZER_FILES`; a path that is not on disk is accepted only as a hub id (``name``
    or ``org/name``) whose ``config.json`` is in the local Hugging Face cache, or, when
    downloads are allowed (neither ``HF_HUB_OFFLINE`` nor ``TRANSFORMERS_OFFLINE`` set), that
    one request to the hub finds. ``tba-lab sft [--task NAME]`` is suggested only for an
    embedded model (:data:`tba_lab.paths.DEFAULT_MODEL_DIR` or a task's ``default_model``).

    Args:
        path: ``str`` or ``os.PathLike``; ``~`` is expanded, a relative path is taken from the
            current directory.

    Returns:
        ``None`` when the path can be loaded from, else the message (``str``).
    """
    text = str(path)
    shown = f"model.path={text!r}"
    if not text.strip():
        return f"model.path is empty; fix: {_MODEL_FIX}"
    p = Path(text).expanduser()
    task = _embedded_task(p)
    embedded = task is not None
    command = "tba-lab sft" + ("" if task in (None, "arithmetic") else f" --task {task}")
    rebuild = (f"run `{command}` to rebuild the embedded model (about 2 minutes on 2 cores), "
               f"or {_MODEL_FIX}")
    if p.is_dir():
        if not (p / "config.json").is_file():
            inner = sorted(str(c.parent) for c in p.glob("*/config.json"))
            hint = f" (a model folder inside it: {inner[0]!r})" if inner else ""
            fix = rebuild if embedded else (f"point model.path at the folder that holds "
                                            f"config.json{hint}")
            return (f"{shown} is a folder without config.json, so it is not a model saved with "
                    f"save_pretrained; fix: {fix}")
        if not any((p / f).is_file() for f in TOKENIZER_FILES):
            fix = rebuild if embedded else (f"save the model's tokenizer into it "
                                            f"(tokenizer.save_pretrained({text!r}))")
            return (f"{shown} has config.json but no tokenizer files (none of "
                    f"{', '.join(TOKENIZER_FILES[:4])}, ...); fix: {fix}")
        return None
    if p.exists():
        return f"{shown} is a file, not a model folder; fix: {_MODEL_FIX}"
    where = f"no folder {str(p.resolve())!r}"
    if embedded:
        return f"{shown}: the embedded model is missing ({where}); fix: {rebuild}"
    if not _is_hub_id(text):
        return (f"{shown} is not a local folder ({where}) and not a Hugging Face hub id "
                f"(those look like 'name' or 'org/name'); fix: {_MODEL_FIX}")
    if _in_hub_cache(text):
        return None
    top = text.split("/")[0]
    hint = (f"; '{top}' is a local folder here, so this may be a mistyped local path"
            if "/" in text and Path(top).expanduser().is_dir() else "")
    if _hub_offline():
        return (f"{shown} is not a local folder ({where}{hint}); as a Hugging Face hub id it is "
                f"not in the local cache, and HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE forbid "
                f"downloading it; fix: {_MODEL_FIX}, or download it where there is network and "
                f"copy the folder here")
    from huggingface_hub import file_exists

    try:  # one quick request, no retries (a hub download would retry for a minute)
        found = file_exists(text, "config.json")
    except Exception as e:  # network or hub error of any kind
        return (f"{shown} is not a local folder ({where}{hint}), not in the local Hugging Face "
                f"cache, and the hub cannot be asked for it ({_first_line(e)}); fix: "
                f"{_MODEL_FIX}")
    if not found:
        return (f"{shown} is not a local folder ({where}{hint}), and the Hugging Face hub has no "
                f"model {text!r} (or it is private: log in first); fix: {_MODEL_FIX}")
    return None


def check_model(path):
    """Check ``model.path`` and load only its tokenizer; return the tokenizer.

    Args:
        path: the run's ``model.path``.

    Returns:
        the loaded ``transformers`` tokenizer (``PreTrainedTokenizerBase``; no model weights
        are read).

    Raises:
        ConfigError: :func:`model_path_problem` finds a problem, the tokenizer does not load,
            it has neither a pad nor an EOS token (nothing to pad with), or no EOS id is
            declared anywhere (:func:`declared_eos_ids`; the generation backend needs one); the
            message names ``model.path`` and the fix.
    """
    problem = model_path_problem(path)
    if problem:
        raise ConfigError(problem)
    from transformers import AutoTokenizer

    text = str(path)
    p = Path(text).expanduser()
    source = str(p) if p.is_dir() else text
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except Exception as e:  # a library error of any kind: report it with the field
        if not p.is_dir():
            raise ConfigError(
                f"model.path={text!r} is not a local folder (no folder {str(p.resolve())!r}), and "
                f"loading it as a Hugging Face hub id failed ({_first_line(e)}); fix: "
                f"{_MODEL_FIX}") from None
        raise ConfigError(f"model.path={text!r}: the tokenizer does not load ({_first_line(e)}); "
                          f"fix: save a working tokenizer into that folder "
                          f"(tokenizer.save_pretrained)") from None
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is None:
        raise ConfigError(
            f"model.path={text!r}: the tokenizer has neither a pad token nor an EOS token, so "
            f"batches cannot be padded; fix: set pad_token (or eos_token, which then pads too), "
            f"e.g. tokenizer.add_special_tokens({{'pad_token': '<pad>'}}), and save the tokenizer "
            f"into that folder again (tokenizer.save_pretrained)")
    if not declared_eos_ids(source, tokenizer):
        raise ConfigError(
            f"model.path={text!r} declares no EOS token (not in the tokenizer, config.json or "
            f"generation_config.json), so no response could end before model.max_new_tokens; "
            f"fix: set eos_token in the tokenizer (an existing token, e.g. "
            f"tokenizer.eos_token = '</s>') or eos_token_id in config.json, and save it again")
    return tokenizer


def declared_eos_ids(source: str, tokenizer) -> list[int]:
    """Every EOS id ``source`` declares, in the order the generation backend reads them
    (:func:`tba_lab.rollout.backend.eos_token_ids`): the tokenizer's ``eos_token_id``, then
    ``config.json``'s and ``generation_config.json``'s ``eos_token_id`` (int, list or null);
    read without loading weights. A file that is missing or does not load adds nothing.

    Args:
        source: a local model folder or a hub id.
        tokenizer: its loaded tokenizer.

    Returns:
        list of ints, empty when nothing declares an EOS.
    """
    from types import SimpleNamespace

    from transformers import AutoConfig, GenerationConfig

    from tba_lab.rollout.backend import eos_token_ids

    loaded = {}
    for key, cls in (("config", AutoConfig), ("generation_config", GenerationConfig)):
        try:
            loaded[key] = cls.from_pretrained(source)
        except Exception:  # no such file (generation_config.json is optional) or unreadable
            loaded[key] = None
    return eos_token_ids(SimpleNamespace(**loaded), tokenizer)  # the backend's own reading


def _split_field(cfg: RunConfig, task_cls, split: str) -> str:
    """How a message names where ``split`` comes from: the config field and its value (and the
    task's default when the field is empty)."""
    value = getattr(cfg.task, f"{split}_path")
    sources = getattr(task_cls, "sources", None)
    if value:
        return f"task.{split}_path={value!r}"
    if sources is not None:
        return f"task.{split}_path='' (the {cfg.task.name} task's default {sources(cfg)[split]!r})"
    return f"the {split} split of task.name={cfg.task.name!r}"


def check_task_data(cfg: RunConfig, splits: tuple[str, ...] = ("train", "test")) -> dict[str, int]:
    """Load the task's ``splits`` and check their sizes; return ``{split: number of problems}``.

    Args:
        cfg: a validated run config.
        splits: which of "train" and "test" to check (``tba-lab eval`` reads only "test").

    Raises:
        ConfigError: a split does not load (a malformed line: the message gives the file and
            line), the train split has fewer than ``training.num_prompts_per_step`` problems,
            or the test split is empty; the message names ``task.train_path`` /
            ``task.test_path`` (or the task) and the fix.
    """
    from tba_lab.registry import TASKS

    task_cls = TASKS.get(cfg.task.name)
    task = task_cls(cfg)
    sizes = {}
    for split in splits:
        where = _split_field(cfg, task_cls, split)
        field = f"task.{split}_path"
        try:
            problems = task.load(split)
        except Exception as e:  # any reader's error, reported with the field that chose the data
            # the kit's readers raise ValueError/FileNotFoundError whose message names the file
            # (and line) and often the fix; another library's error is shown with its type
            ours = type(e) in (ValueError, FileNotFoundError)
            inner = " ".join(str(e).split()) if ours else _first_line(e)
            fix = "" if "; fix:" in inner else (f"; fix: correct the data or point {field} at "
                                                f"a GSM8K-format .jsonl file")
            raise ConfigError(f"{where} does not load: {inner}{fix}") from None
        n = len(problems)
        if split == "train" and n < cfg.training.num_prompts_per_step:
            b = cfg.training.num_prompts_per_step
            raise ConfigError(
                f"{where} has {n} problem{'s' * (n != 1)}, fewer than "
                f"training.num_prompts_per_step={b} (each generation batch takes {b} different "
                f"prompts); fix: give {field} at least {b} problems or lower "
                f"training.num_prompts_per_step")
        if split == "test" and n == 0:
            raise ConfigError(
                f"{where} has no problems, but held-out evaluation scores up to "
                f"task.eval_size={cfg.task.eval_size} of them before and after training; fix: "
                f"point {field} at a non-empty GSM8K-format .jsonl file")
        sizes[split] = n
    return sizes


def check_output_dir(output_dir: str) -> None:
    """Raise :class:`ConfigError` if ``output_dir`` cannot become a run folder; create nothing.

    Raises:
        ConfigError: ``output_dir`` is empty, is an existing file, or its nearest existing
            ancestor is a file or not writable.
    """
    if not str(output_dir).strip():
        raise ConfigError("output_dir is empty; give a folder (e.g. runs/my_run)")
    p = Path(output_dir).expanduser()
    if p.exists():
        if not p.is_dir():
            raise ConfigError(f"output_dir={str(output_dir)!r} is a file; fix: choose a folder "
                              f"(--output-dir DIR)")
        return
    parent = p.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"output_dir={str(output_dir)!r} cannot be created ({str(parent)!r} is "
                          f"{'not a folder' if not parent.is_dir() else 'not writable'}); fix: "
                          f"choose a folder you can write (--output-dir DIR)")


def check_devices(cfg: RunConfig) -> None:
    """Raise :class:`ConfigError` if a device of ``async.trainer_device`` or
    ``async.searcher_devices`` does not exist here; imports torch only when a CUDA device is
    asked for. Searcher devices are checked only for a launcher whose searchers run on this
    machine (its class attribute ``same_machine``, True when absent; the Ray launcher's is False).

    Raises:
        ConfigError: a CUDA device on a machine without CUDA (or a CPU-only torch), an index
            at or above the number of visible GPUs (the message lists the ones there are), or
            ``expandable_segments:True`` in ``PYTORCH_CUDA_ALLOC_CONF`` when the weights would
            travel through the CUDA IPC channel (trainer and searchers on GPUs).
    """
    from tba_lab.registry import LAUNCHERS

    a = cfg.async_
    # searchers of a launcher that may place them on other machines (Ray: its placement group
    # reserves their GPUs, and says so when the cluster has too few) are not checked here
    here = getattr(LAUNCHERS.get(a.launcher), "same_machine", True)
    fields = [("async.trainer_device", a.trainer_device)] + [
        (f"async.searcher_devices[{i}]", d) for i, d in enumerate(a.searcher_devices) if here]
    asked = [(name, d) for name, d in fields if d.startswith("cuda")]
    if not asked:
        return
    import torch

    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    for name, device in asked:
        index = int(device.split(":")[1]) if ":" in device else 0
        if count == 0:
            why = ("this torch is built without CUDA" if torch.version.cuda is None
                   else "no CUDA GPU is visible (driver, CUDA_VISIBLE_DEVICES)")
            raise ConfigError(f"{name}={device!r}: {why} (torch {torch.__version__}); fix: set "
                              f"{name} to 'cpu' (and async.searcher_devices to [] or [cpu]), or "
                              f"run on a machine with a GPU and a CUDA build of torch")
        if index >= count:
            there = ", ".join(f"cuda:{i}" for i in range(count))
            raise ConfigError(f"{name}={device!r}: this machine has {count} GPU"
                              f"{'s' * (count != 1)} ({there}); fix: use one of {there}, or "
                              f"'cpu'")
    from tba_lab.config import searcher_device
    from tba_lab.actors.weights import expandable_segments_on

    searchers = {searcher_device(cfg, i) for i in range(a.num_searchers)}
    if (a.trainer_device.startswith("cuda") and all(d.startswith("cuda") for d in searchers)
            and expandable_segments_on()):
        raise ConfigError(
            f"async.trainer_device={a.trainer_device!r} with searchers on GPUs sends weights "
            f"through CUDA IPC, which cannot export memory from expandable segments, but "
            f"PYTORCH_CUDA_ALLOC_CONF asks for expandable_segments:True; fix: unset it (or set "
            f"expandable_segments:False) for this run")


def preflight(cfg: RunConfig, splits: tuple[str, ...] = ("train", "test"),
              output: bool = True) -> dict:
    """Check a run's inputs before any process starts and anything is written.

    In order: :func:`~tba_lab.config.validate` (fields set after construction included), when
    ``output`` the devices (:func:`check_devices`), ``output_dir`` (:func:`check_output_dir`) and
    the packages ``report_to`` needs (:func:`~tba_lab.reporting.check_report_to`),
    ``model.path`` and its tokenizer (:func:`check_model`), the task's data
    (:func:`check_task_data`). Loads the tokenizer and the task's problems, no model weights (a
    fraction of a second for the embedded model and task).

    Args:
        cfg: the run's config.
        splits: the task splits to check ("train" and "test" for training; "test" for eval).
        output: check the devices and ``output_dir`` too (False for ``tba-lab eval``, which
            writes nothing and runs on the CPU).

    Returns:
        ``{"model_path": str, "train_problems": int, "test_problems": int}`` (a split not
        checked is absent).

    Raises:
        ConfigError: the first problem found; the message names the field and the fix.
    """
    validate(cfg)
    if output:  # a training run (tba-lab eval evaluates on the CPU, whatever the config says)
        check_devices(cfg)
        check_output_dir(cfg.output_dir)
        check_report_to(cfg.report_to)  # the package each report_to entry needs
    check_model(cfg.model.path)
    sizes = check_task_data(cfg, splits)
    return {"model_path": str(cfg.model.path), **{f"{k}_problems": v for k, v in sizes.items()}}


__all__ = ["TOKENIZER_FILES", "check_devices", "check_model", "check_output_dir", "check_task_data",
           "declared_eos_ids", "model_path_problem", "preflight"]
