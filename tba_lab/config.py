"""Run configuration: one dataclass per concern, YAML loading, validation in one place.

Option names follow TRL's ``GRPOConfig`` where they mean the same thing (``num_generations``,
``beta``, ``epsilon``, ``loss_type``, ``scale_rewards``, ``learning_rate``, ``max_grad_norm``).
A YAML file mirrors the nesting::

    algo: tb
    task: {name: arithmetic}
    tb: {beta: 0.05}
    async: {sync_period: 2}

The core sections (``model``, ``task``, ``training``, ``buffer``, ``async``) are defined here.
Each algorithm, task, backend or launcher with options of its own declares them as a dataclass
(``config_class``) under a YAML key (``section``) in its registry entry (:mod:`tba_lab.registry`):
``tb``, ``grpo``, ``rloo`` and ``online_dpo`` live in :mod:`tba_lab.algorithms`. They are read
as ``cfg.tb`` like the core sections, and validated by their own ``validate()``.

Unknown keys and bad values raise :class:`ConfigError` naming the field and the fix, before any
process starts. Importing this module does not import torch; building a config imports the
registered classes (and with them torch) to learn their sections.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from tba_lab.paths import DEFAULT_MODEL_DIR
from tba_lab.registry import ALGORITHMS, BACKENDS, LAUNCHERS, TASKS, section_key


class ConfigError(ValueError):
    """A configuration value is missing, unknown or out of range; the message says the fix."""


@dataclass
class ModelConfig:
    path: str = ""                      # HF folder or hub name of the starting policy (= reference policy); "" = the task's embedded model
    backend: str = "transformers"       # generation backend (tba_lab.registry.BACKENDS)
    temperature: float = 0.6            # sampling temperature; policy and reference log-probs use the same
    max_new_tokens: int = 40            # response length cap, tokens (sampling AND held-out evaluation)


@dataclass
class TaskConfig:
    name: str = "arithmetic"            # the task (tba_lab.registry.TASKS): arithmetic | gsm8k | preference | redteam
    train_path: str = ""                # prompts for the searchers; "" = the task's default
    test_path: str = ""                 # held-out problems; "" = the task's default
    eval_size: int = 500                # held-out problems scored before and after training
    eval_every_seconds: float = 60.0    # interim held-out evaluation period (0 = none)
    interim_eval_size: int = 200        # problems per interim evaluation
    defer_interim_eval: bool = False    # True: at each interim tick only copy the weights (CPU); evaluate the copies after the budget, off the clock


@dataclass
class TrainingConfig:
    num_prompts_per_step: int = 16      # B: prompts per trainer batch (and per searcher generation batch)
    num_generations: int = 8            # K: responses per prompt (group size)
    learning_rate: float = 5e-5         # AdamW peak learning rate (1e-4 and up degrades the tiny model)
    lr_schedule: str = "linear"         # "linear": decay to 0 over the run (time or max_steps); "constant"
    max_grad_norm: float = 1.0          # gradient-norm clipping (0 = off)
    weight_decay: float = 0.0           # AdamW weight decay
    max_steps: int = 0                  # stop after this many trainer updates (0 = time only)
    save_seconds: float = 60.0          # write checkpoint.pt (resumable) every this many seconds (0 = off)
    save_steps: int = 0                 # ... and/or every this many updates (0 = off); always at the end


@dataclass
class BufferConfig:
    capacity_per_prompt: int = 32       # newest rollouts kept per prompt
    recency_prob: float = 1.0           # m: probability of drawing from prompts refreshed since the last sync
    inv_temp: float = 0.0               # reward prioritisation softmax(inv_temp * r); 0 = uniform; acts only on prompts holding > K rollouts
    max_prompts: int = 256              # prompts remembered (least recently refreshed evicted); 0 = unbounded
    initial_fill: int = 256             # rollouts in the buffer before the first update (async)
    max_replay_ratio: float = 1.0       # async: the trainer waits rather than train on more than this many rows per row generated (0 = no bound; docs/log.md)
    dedup: bool = False                 # keep one copy of a repeated response per prompt (off: groups stay samples)


@dataclass
class AsyncConfig:
    mode: str = "async"                 # "async": searchers and trainer overlap; "sync": strict alternation
    launcher: str = "local"             # how searchers run (tba_lab.registry.LAUNCHERS)
    num_searchers: int = 1              # searcher processes
    sync_period: int = 1                # k: publish weights every k trainer updates (sync forces 1)
    queue_size: int = 1                 # batches a searcher may leave untaken by the trainer (its queue's size)
    searcher_threads: int = 0           # torch threads per searcher (0 = auto from the cores: tba_lab.actors.placement)
    trainer_threads: int = 0            # torch threads for the trainer (0 = auto: the cores the searchers leave free)
    reference_pass: str = "auto"        # who scores rollouts under the reference policy: "trainer" (the rows it samples), "searcher" (all it generates), "auto" (searcher when >= 2 searchers have cores or GPUs of their own)
    searcher_timeout: float = 120.0     # seconds without a message before a searcher counts as hung (0 = never)
    max_restarts: int = 2               # restarts per failed searcher; then it is retired (run stops if none left)
    stale_batches: int = 3              # consecutive batches begun on old weights after a newer publish before a searcher counts as stalled (0 = never)
    trainer_device: str = "cpu"         # the trainer's policy and optimizer: "cpu", "cuda" or "cuda:N"
    searcher_devices: list = field(default_factory=list)  # searcher i runs on entry i % len (several may share a GPU); [] = the trainer's device


_REGISTRIES = (ALGORITHMS, TASKS, BACKENDS, LAUNCHERS)


def _chosen(cfg) -> tuple:
    """``(registry, chosen name)`` for the run's algorithm, task, backend and launcher."""
    return tuple(zip(_REGISTRIES, (cfg.algo, cfg.task.name, cfg.model.backend, cfg.async_.launcher)))


def section_classes() -> dict[str, type]:
    """``{YAML key: dataclass}`` of every registered class that has options (imports them).

    Raises:
        ConfigError: two classes claim one section with different dataclasses, or a section is
            named like a core field (``model``, ``task``, ``seed``, ...).
    """
    out: dict[str, type] = {}
    for registry in _REGISTRIES:
        for cls in registry.classes().values():
            config_class = getattr(cls, "config_class", None)
            if config_class is None:
                continue
            key = section_key(cls)
            if key in _RESERVED:
                raise ConfigError(f"{cls.__name__}'s options section {key!r} is a core config "
                                  f"key; set its `section` to another name")
            if out.get(key, config_class) is not config_class:
                raise ConfigError(f"section {key!r} is claimed by {out[key].__name__} and "
                                  f"{config_class.__name__}; give {cls.__name__} its own section")
            out[key] = config_class
    return out


SEED_MAX = 2**32 - 1  # largest run seed; searcher seeds add offsets, which torch (< 2**64) and numpy take


@dataclass
class RunConfig:
    """A whole run. ``sections`` holds the registered option sections by YAML key; read them as
    attributes (``cfg.tb.beta``, ``cfg.grpo.epsilon``)."""
    algo: str = "tb"                    # the loss (tba_lab.registry.ALGORITHMS): tb | grpo | dr_grpo | rloo | online_dpo
    output_dir: str = "runs/default"    # where metrics, summary, curves and the policy go
    max_minutes: float = 9.0            # training wall-clock budget, minutes (evaluation before/after extra)
    seed: int = 0                       # seeds the trainer, the searchers and the buffer
    log_every: int = 1                  # metrics.jsonl (and report_to) every this many updates
    report_to: list = field(default_factory=list)  # live dashboards (TRL's option): tensorboard | wandb | trackio
    status_every_seconds: float = 30.0  # no terminal or live notebook (pipe, papermill): a status line this often
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    async_: AsyncConfig = field(default_factory=AsyncConfig)
    sections: dict = field(default_factory=lambda: {k: c() for k, c in section_classes().items()})

    def __post_init__(self):
        self.sections = dict(self.sections)  # a copy (dataclasses.replace would share it)

    def __setattr__(self, name: str, value) -> None:
        """``cfg.tb = TBConfig(...)`` replaces the section in ``sections``."""
        if name not in _FIELDS and "sections" in self.__dict__ and name in section_classes():
            self.sections[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str):
        """``cfg.tb`` -> ``cfg.sections["tb"]`` (a section registered after this config was built
        gets its defaults)."""
        if name.startswith("_") or "sections" not in self.__dict__:
            raise AttributeError(name)
        if name not in self.sections:
            classes = section_classes()
            if name not in classes:
                raise AttributeError(f"RunConfig has no field or section {name!r}; sections: "
                                     f"{sorted(classes)}")
            self.sections[name] = classes[name]()
        return self.sections[name]

    def section(self, name: str):
        """The options section ``name`` (as ``getattr(cfg, name)``)."""
        return getattr(self, name)

    def to_dict(self) -> dict:
        """Plain nested data, as a YAML file spells it (``async``, sections at the top level).

        Sections of classes registered from outside the package (a notebook, a test, your
        project) are written only when this config selects their class: a ``config.yaml``
        written in a process that registered some other experiment's class must still load in
        ``tba-lab train --config`` of a fresh process."""
        data = dataclasses.asdict(self)
        data["async"] = data.pop("async_")
        sections = data.pop("sections")
        chosen = set()
        for registry, value in _chosen(self):
            if value in registry:
                chosen.add(section_key(registry.get(value)))
        classes = section_classes()
        data.update({k: v for k, v in sections.items()
                     if k in chosen or k not in classes
                     or classes[k].__module__.split(".")[0] == "tba_lab"})
        return data


_CORE_SECTIONS = {"model": ModelConfig, "task": TaskConfig, "training": TrainingConfig,
                  "buffer": BufferConfig, "async_": AsyncConfig}
_FIELDS = {f.name for f in dataclasses.fields(RunConfig)}
_RESERVED = _FIELDS | {"async"}


def _typed(value, default, name: str, hint: str = ""):
    """``value`` checked against the type of the field's ``default``; :class:`ConfigError` if wrong.

    An int is accepted for a float, ``None`` only where the default is ``None``, and a string
    that parses as a number for a float: PyYAML reads ``5e-5`` (no dot) as the string "5e-5".
    A field whose default is ``None`` takes what its annotation ``hint`` names besides None
    (``str | None`` a string, ``float | None`` a number).
    """
    if default is None and "str" in hint:
        if value is None or isinstance(value, str):
            return value
        raise ConfigError(f"{name}={value!r}: must be a string or null")
    if isinstance(value, str) and (isinstance(default, float) or default is None):
        try:
            value = float(value)
        except ValueError:
            pass
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, bool):
        ok, want = isinstance(value, bool), "true or false"
    elif isinstance(default, int):
        ok, want = number and isinstance(value, int), "an integer"
    elif isinstance(default, float):
        ok, want = number, "a number"
    elif isinstance(default, str):
        ok, want = isinstance(value, str), "a string"
    elif default is None:
        ok, want = value is None or number, "a number or null"
    else:
        ok, want = True, ""
    if not ok:
        raise ConfigError(f"{name}={value!r}: must be {want}")
    return value


REPORT_TO = ("tensorboard", "wandb", "trackio")  # report_to's names (tba_lab.reporting)


def report_to_names(value):
    """``report_to`` in TRL's spellings (a name, a list of names, ``"none"`` or None) as a list
    without ``"none"``; anything else is returned as given, for :func:`validate` to refuse."""
    value = [] if value is None else [value] if isinstance(value, str) else value
    return [v for v in value if v != "none"] if isinstance(value, list) else value

# Options that were removed, with the value that behaves as the kit does now: a saved config
# (a run folder to resume) that holds that value loads; any other value is refused by name.
_REMOVED = {"buffer.recency_fallback": "newest", "async.wait_for_room": True}


def _fill(cls, data, where: str):
    """``cls(**data)`` with every value type-checked; unknown keys name the key and the known ones."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where.rstrip('.') or 'config'} must be a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in fields and (where + key) in _REMOVED:
            if value != _REMOVED[where + key]:
                raise ConfigError(f"{where + key}={value!r}: this option was removed; only "
                                  f"{_REMOVED[where + key]!r}, what the kit does now, is accepted "
                                  f"(delete the key)")
            continue
        if key not in fields:
            raise ConfigError(f"unknown config key {where + key!r}; known keys: {sorted(fields)}")
        kwargs[key] = _typed(value, fields[key].default, where + key, str(fields[key].type))
    return cls(**kwargs)


def from_dict(data: dict | None) -> RunConfig:
    """Build a validated :class:`RunConfig` from nested plain data (as read from YAML).

    Raises:
        ConfigError: an unknown key, a wrong type, a section given twice (``async`` and
            ``async_``), or a value out of range (see :func:`validate`).
    """
    if not isinstance(data or {}, dict):
        raise ConfigError(f"config must be a mapping, got {type(data).__name__}")
    data = dict(data or {})
    if "async" in data and "async_" in data:
        raise ConfigError("both `async` and `async_` are given; they are one section, keep one "
                          "(YAML files spell it `async`)")
    if "async" in data:
        data["async_"] = data.pop("async")
    if "sections" in data:
        raise ConfigError("unknown config key 'sections': write each section at the top level "
                          "(e.g. `tb: {beta: 0.05}`)")
    data = _with_task_defaults(data)
    classes = section_classes()
    top = {f.name: f for f in dataclasses.fields(RunConfig) if f.name not in _CORE_SECTIONS}
    del top["sections"]
    kwargs, sections = {}, {k: c() for k, c in classes.items()}
    for key, value in data.items():
        shown = "async" if key == "async_" else key
        if key in _CORE_SECTIONS:
            kwargs[key] = _fill(_CORE_SECTIONS[key], value, f"{shown}.")
        elif key in classes:
            sections[key] = _fill(classes[key], value, f"{key}.")
        elif key == "report_to":
            kwargs[key] = report_to_names(value)
        elif key in top:
            kwargs[key] = _typed(value, top[key].default, key)
        else:
            known = sorted([*top, "model", "task", "training", "buffer", "async", *classes])
            raise ConfigError(f"unknown config key {key!r}; known keys: {known}")
    cfg = RunConfig(**kwargs, sections=sections)
    validate(cfg)
    return cfg


def _with_task_defaults(data: dict) -> dict:
    """``data`` over the chosen task's ``config_defaults`` (:class:`tba_lab.tasks.Task`): a value
    the user gives wins. An unknown task name is left for :func:`validate` to report."""
    task = data.get("task")
    name = task.get("name", TaskConfig.name) if isinstance(task, dict) else TaskConfig.name
    if name not in TASKS.names():
        return data
    defaults = TASKS.get(name).config_defaults
    return merge(defaults, data) if defaults else data


def _check_unique_keys(node, source: str, where: str = "", seen_nodes=None) -> None:
    """Raise :class:`ConfigError` if a YAML mapping under ``node`` gives one key twice.

    PyYAML keeps the last of two equal keys without a word, so ``tb: {beta: 0.1, beta: 0.5}``
    (or one section written twice) would silently drop a value. Keys compare by resolved tag
    and text (``1`` and ``'1'`` differ); merge keys (``<<: *base``) may still be overridden,
    as YAML intends.
    """
    import yaml

    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:  # an alias of a node already checked (or a recursive one)
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first_line: dict[tuple, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            name = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            line = key_node.start_mark.line + 1
            if isinstance(key_node, yaml.ScalarNode):
                ident = (key_node.tag, key_node.value)
                if ident in first_line:
                    raise ConfigError(
                        f"{source}, line {line}: `{where + name}` is given twice (first on line "
                        f"{first_line[ident]}); YAML would silently keep only the last value, "
                        f"so delete one of them")
                first_line[ident] = line
            _check_unique_keys(value_node, source, f"{where}{name}.", seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_unique_keys(item, source, f"{where.rstrip('.')}[{i}].", seen_nodes)


def load_yaml(path: str | Path) -> RunConfig:
    """Read a YAML config file into a validated :class:`RunConfig`.

    Raises:
        FileNotFoundError: ``path`` is not a file.
        ConfigError: as :func:`read_yaml_data`, or the content fails :func:`from_dict`.
    """
    return from_dict(read_yaml_data(path))


def read_yaml_data(path: str | Path) -> dict:
    """The nested plain data of a YAML config file (``{}`` for an empty file), not yet checked
    by :func:`from_dict`.

    Raises:
        FileNotFoundError: ``path`` is not a file.
        ConfigError: the file is not valid YAML, or gives one key twice in a mapping (the
            message names the key and both lines).
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"config file {str(p)!r} not found")
    loader = yaml.SafeLoader(p.read_text())
    loader.name = str(p)  # error marks name the file
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_unique_keys(node, str(p))
        data = None if node is None else loader.construct_document(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = " ".join(x for x in (getattr(e, "problem", None), getattr(e, "context", None)) if x)
        raise ConfigError(f"config file {str(p)!r}{where} is not valid YAML: "
                          f"{what or ' '.join(str(e).split())}; fix the syntax there") from None
    finally:
        loader.dispose()
    return data or {}


def write_yaml(cfg: RunConfig, path: str | Path, header: str = "") -> None:
    """Write ``cfg`` as YAML that :func:`load_yaml` reads back to an equal config, after
    ``header`` (comment lines, each starting with ``#``)."""
    import yaml

    Path(path).write_text(header + yaml.safe_dump(cfg.to_dict(), sort_keys=False))


# Core float options where +inf reads as "no limit" in the code that uses them (the same as 0
# for each): every other float option must be finite, and none may be NaN or -inf. A registered
# section's dataclass names its own in a class attribute ``inf_means_no_limit`` ({field: what
# +inf means}), e.g. ``grpo.epsilon``.
INF_MEANS_NO_LIMIT = {
    "status_every_seconds": "no status lines",
    "task.eval_every_seconds": "no interim evaluation",
    "training.save_seconds": "no checkpoint by time",
    "async.searcher_timeout": "a silent searcher never counts as hung",
    "training.max_grad_norm": "no gradient clipping",
}


def inf_means_no_limit() -> dict[str, str]:
    """``{dotted option: what +inf means}`` of every float option that takes +inf: the core
    ones (:data:`INF_MEANS_NO_LIMIT`) and those the registered sections declare."""
    out = dict(INF_MEANS_NO_LIMIT)
    for key, cls in section_classes().items():
        out.update({f"{key}.{f}": what for f, what in getattr(cls, "inf_means_no_limit", {}).items()})
    return out


def _float_options(cfg) -> list[tuple[str, float]]:
    """``(dotted name, value)`` of every float value in ``cfg``: the top-level fields, the core
    sections and every registered section."""
    out = []

    def add(prefix: str, obj) -> None:
        out.extend((prefix + f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)
                   if isinstance(getattr(obj, f.name), float))

    add("", cfg)  # model, task, ... and sections are not floats: skipped
    for key in _CORE_SECTIONS:
        add(f"{'async' if key == 'async_' else key}.", getattr(cfg, key))
    for key, section in cfg.sections.items():
        if dataclasses.is_dataclass(section):
            add(f"{key}.", section)
    return out


def check_finite(cfg) -> None:
    """:class:`ConfigError` naming the first float option of ``cfg`` that is NaN or -inf, or
    +inf where +inf is not "no limit" (:data:`INF_MEANS_NO_LIMIT`). YAML spells these ``.nan``,
    ``.inf`` and ``-.inf``; a comparison such as ``beta > 0`` lets +inf through.

    Raises:
        ConfigError: the message names the option, the value and the fix.
    """
    import math

    no_limit = inf_means_no_limit()
    for name, value in _float_options(cfg):
        if math.isfinite(value) or (name in no_limit and value == math.inf):
            continue
        fix = f"; +inf is allowed here ({no_limit[name]})" if name in no_limit else ""
        default = _default_of(name)
        hint = f", e.g. the default {default!r}" if isinstance(default, (int, float)) else ""
        raise ConfigError(f"{name}={value}: give a finite number{hint} (YAML's .nan, .inf and "
                          f"-.inf are not values of this option){fix}")


def _default_of(name: str):
    """The default of option ``name`` (dotted, as YAML nests it), or None if unknown."""
    section, _, field = name.rpartition(".")
    if not section:
        cls = RunConfig
    elif section in ("async", *_CORE_SECTIONS):
        cls = _CORE_SECTIONS["async_" if section == "async" else section]
    else:
        cls = section_classes().get(section)
    fields = {f.name: f for f in dataclasses.fields(cls)} if cls else {}
    return fields[field].default if field in fields else None


def check(ok: bool, msg: str) -> None:
    """Raise :class:`ConfigError` with ``msg`` (which names the field and the fix) unless ``ok``."""
    if not ok:
        raise ConfigError(msg)


def check_choice(value, choices, name: str) -> None:
    """:class:`ConfigError` unless ``value`` is one of ``choices`` (taken from where they are
    defined, e.g. ``tba_lab.losses.GRPO_LOSS_TYPES``)."""
    check(value in choices, f"{name}={value!r}: choose one of {list(choices)}")


def searcher_device(cfg, searcher_id: int) -> str:
    """The device (a string: "cpu" or "cuda:N") searcher ``searcher_id`` is configured for: ``async.searcher_devices[i % len]``,
    or ``async.trainer_device`` when the list is empty; ``"cuda"`` reads as ``"cuda:0"``."""
    a = cfg.async_
    devices = list(a.searcher_devices) or [a.trainer_device]
    device = devices[searcher_id % len(devices)]
    return "cuda:0" if device == "cuda" else device


def _check_device(value, name: str) -> None:
    """:class:`ConfigError` unless ``value`` is "cpu", "cuda" or "cuda:N" (whether this machine
    has that GPU is checked by :func:`tba_lab.preflight.check_devices`, not here)."""
    import re

    check(isinstance(value, str) and re.fullmatch(r"cpu|cuda(:\d+)?", value) is not None,
          f"{name}={value!r}: a device is 'cpu', 'cuda' (= cuda:0) or 'cuda:N' (N = the GPU's "
          f"index among the devices this process sees, as torch numbers them)")


def validate(cfg: RunConfig) -> RunConfig:
    """Check every field's range; raise :class:`ConfigError` naming the field and the fix.

    Every float option must be finite (:func:`check_finite`; +inf only where it means no
    limit, :func:`inf_means_no_limit`). Core sections are checked here; each registered
    section by its own ``validate()``, and the chosen algorithm, task, generation backend and
    launcher by their ``check_config(cfg)`` (cross-section rules, data paths, an optional
    extra that is not installed).
    """
    for registry, value in _chosen(cfg):
        check_choice(value, registry.names(), registry.config_key)
    check_finite(cfg)
    if not cfg.model.path:  # "" = the task's embedded starting policy (Task.default_model)
        from tba_lab.tasks import embedded_model_dir

        cfg.model.path = str(embedded_model_dir(cfg.task.name))
    check(cfg.max_minutes > 0, f"max_minutes={cfg.max_minutes}: give a positive number of minutes")
    check(0 <= cfg.seed <= SEED_MAX, f"seed={cfg.seed}: give an integer from 0 to {SEED_MAX} "
                                     f"(2**32 - 1; numpy and torch generators take no sign)")
    check(cfg.log_every >= 1, f"log_every={cfg.log_every}: must be >= 1")
    check(cfg.status_every_seconds > 0, f"status_every_seconds={cfg.status_every_seconds}: must "
                                        f"be > 0 (seconds between status lines)")
    check(isinstance(cfg.report_to, list), f"report_to={cfg.report_to!r}: give a list of names, "
                                           f"e.g. [tensorboard]")
    for name in cfg.report_to:  # whether its package is installed: the preflight's check
        check(name in REPORT_TO, f"report_to: {name!r} is not one of {list(REPORT_TO)}; fix: use "
                                 f"those names, or none for the JSONL files only")
    m, t, tr = cfg.model, cfg.task, cfg.training
    check(m.temperature > 0, f"model.temperature={m.temperature}: must be > 0 (sampling temperature)")
    check(m.max_new_tokens >= 1, f"model.max_new_tokens={m.max_new_tokens}: must be >= 1")
    check(t.eval_size >= 1, f"task.eval_size={t.eval_size}: must be >= 1")
    check(t.interim_eval_size >= 1, f"task.interim_eval_size={t.interim_eval_size}: must be >= 1")
    check(t.eval_every_seconds >= 0, f"task.eval_every_seconds={t.eval_every_seconds}: must be >= 0 "
                                  f"(0 turns it off)")
    check(tr.num_prompts_per_step >= 1,
          f"training.num_prompts_per_step={tr.num_prompts_per_step}: must be >= 1")
    check(tr.num_generations >= 2, f"training.num_generations={tr.num_generations}: group "
                                   f"methods (TB's VarGrad log Z, GRPO advantages) need K >= 2")
    check(tr.learning_rate > 0, f"training.learning_rate={tr.learning_rate}: must be > 0")
    check_choice(tr.lr_schedule, ("linear", "constant"), "training.lr_schedule")
    check(tr.max_grad_norm >= 0, f"training.max_grad_norm={tr.max_grad_norm}: must be >= 0 (0 = no clipping)")
    check(tr.max_steps >= 0, f"training.max_steps={tr.max_steps}: must be >= 0 (0 = bounded by time only)")
    check(tr.save_seconds >= 0, f"training.save_seconds={tr.save_seconds}: must be >= 0 (0 turns it off)")
    check(tr.save_steps >= 0, f"training.save_steps={tr.save_steps}: must be >= 0 (0 turns it off)")
    b = cfg.buffer
    check(b.capacity_per_prompt >= 1, f"buffer.capacity_per_prompt={b.capacity_per_prompt}: must be >= 1")
    check(b.capacity_per_prompt >= tr.num_generations,
          f"buffer.capacity_per_prompt={b.capacity_per_prompt} is below training.num_generations="
          f"{tr.num_generations}: every group of K would repeat rows; keep at least K per prompt")
    check(0 <= b.recency_prob <= 1, f"buffer.recency_prob={b.recency_prob}: must be in [0, 1]")
    check(b.inv_temp >= 0, f"buffer.inv_temp={b.inv_temp}: must be >= 0 (0 = uniform)")
    check(b.initial_fill >= 0, f"buffer.initial_fill={b.initial_fill}: must be >= 0")
    check(b.max_replay_ratio == 0 or b.max_replay_ratio >= 1,
          f"buffer.max_replay_ratio={b.max_replay_ratio}: rows trained per row generated; use 0 "
          f"(no bound) or a value >= 1 (1 = every rollout trained on once on average)")
    check(b.max_prompts == 0 or b.max_prompts >= tr.num_prompts_per_step,
          f"buffer.max_prompts={b.max_prompts}: keep at least num_prompts_per_step prompts (0 = unbounded)")
    a = cfg.async_
    check_choice(a.mode, ("async", "sync"), "async.mode")
    check(a.num_searchers >= 1, f"async.num_searchers={a.num_searchers}: need at least one searcher")
    check(a.sync_period >= 1, f"async.sync_period={a.sync_period}: must be >= 1")
    check(a.queue_size >= 1, f"async.queue_size={a.queue_size}: must be >= 1")
    check(a.searcher_threads >= 0, f"async.searcher_threads={a.searcher_threads}: must be >= 0 (0 = automatic)")
    check(a.trainer_threads >= 0, f"async.trainer_threads={a.trainer_threads}: must be >= 0 (0 = automatic)")
    check_choice(a.reference_pass, ("auto", "searcher", "trainer"), "async.reference_pass")
    check(a.searcher_timeout >= 0, f"async.searcher_timeout={a.searcher_timeout}: give seconds "
                                   f"(> 0), or 0 to never treat a silent searcher as hung")
    check(a.max_restarts >= 0, f"async.max_restarts={a.max_restarts}: must be >= 0")
    check(a.stale_batches >= 0, f"async.stale_batches={a.stale_batches}: must be >= 0 (0 = never)")
    _check_device(a.trainer_device, "async.trainer_device")
    check(isinstance(a.searcher_devices, (list, tuple)),
          f"async.searcher_devices={a.searcher_devices!r}: give a list of devices, e.g. "
          f"[cuda:0, cuda:1] or [cpu] ([] = the trainer's device)")
    for i, device in enumerate(a.searcher_devices):
        _check_device(device, f"async.searcher_devices[{i}]")
    if a.mode == "sync":
        check(a.sync_period == 1, f"async.sync_period={a.sync_period} with mode=sync: strict "
                                  f"alternation publishes after every update; set sync_period 1")
        check(a.num_searchers == 1, f"async.num_searchers={a.num_searchers} with mode=sync: "
                                    f"strict alternation uses one searcher; use mode=async")
    for section in cfg.sections.values():
        if hasattr(section, "validate"):
            section.validate()
    for registry, value in _chosen(cfg):
        cls = registry.get(value)
        if hasattr(cls, "check_config"):
            cls.check_config(cfg)
    return cfg


def unused_sections(cfg: RunConfig) -> list[str]:
    """Options sections changed from their defaults that this run does not read, one message
    each: ``grpo.beta=0.5`` with ``algo: tb`` trains TB with ``tb.beta`` and would otherwise
    ignore the value without a word. ``tba_lab.trainer.train`` warns with these at its start.

    A section is read when it belongs to the chosen algorithm, task, generation backend or
    launcher (the class's ``section``, or its name). A value the chosen task's
    ``config_defaults`` sets (the red-teaming task's ``tb.beta``) counts as a default.
    """
    task_defaults = getattr(TASKS.get(cfg.task.name), "config_defaults", None) or {}
    chosen = dict(_chosen(cfg))
    used, owners = set(), {}
    for registry in _REGISTRIES:
        for name, cls in registry.classes().items():
            if getattr(cls, "config_class", None) is None:
                continue
            key = section_key(cls)
            owners.setdefault(key, []).append(f"{registry.config_key}: {name}")
            if chosen[registry] == name:
                used.add(key)
    out = []
    for key, cls in section_classes().items():
        section = cfg.sections.get(key)
        if key in used or section is None:
            continue
        given = task_defaults.get(key)
        default = cls(**given) if isinstance(given, dict) else cls()
        changed = [f"{key}.{f.name}={getattr(section, f.name)!r}" for f in dataclasses.fields(cls)
                   if getattr(section, f.name) != getattr(default, f.name)]
        if changed:
            out.append(f"{', '.join(changed)} is set but this run does not read section `{key}` "
                       f"(it is for {' or '.join(owners[key])}; this run has algo: {cfg.algo}, "
                       f"task.name: {cfg.task.name}, model.backend: {cfg.model.backend}, "
                       f"async.launcher: {cfg.async_.launcher}); move the value to the section "
                       f"the run reads, or remove it")
    return out


def merge(base: dict, extra: dict) -> dict:
    """Nested merge of two override dicts (``extra`` wins; neither is modified)."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def short_run(output_dir: str | Path, seconds: float, overrides: dict | None = None, seed: int = 0,
              eval_size: int = 200, interim_eval_size: int = 100,
              eval_every_seconds: float = 20.0) -> RunConfig:
    """A validated :class:`RunConfig` for a run of a minute or two (notebooks, explorer, benches).

    Defaults suited to such a budget, which ``overrides`` (nested, as a YAML file) win over:
    ``eval_size`` held-out problems before and after, ``interim_eval_size`` every
    ``eval_every_seconds`` (0 = none) in between, and a first update after one generation batch
    (``buffer.initial_fill`` = B*K).

    Args:
        output_dir: the run directory.
        seconds: training budget (``max_minutes = seconds / 60``); evaluation and start-up extra.
        overrides: nested config data, e.g. ``{"algo": "grpo", "async": {"mode": "sync"}}``.
        seed: the run's seed.

    Raises:
        ConfigError: as :func:`from_dict` (``overrides`` giving both ``async`` and ``async_``
            included).
    """
    overrides = dict(overrides or {})
    if "async_" in overrides:
        if "async" in overrides:
            raise ConfigError("both `async` and `async_` are given in overrides; they are one "
                              "section, keep one (YAML files spell it `async`)")
        overrides["async"] = overrides.pop("async_")
    tr = merge({"num_prompts_per_step": 16, "num_generations": 8}, overrides.get("training", {}))
    base = {"output_dir": str(output_dir), "max_minutes": float(seconds) / 60.0, "seed": int(seed),
            "task": {"eval_size": eval_size, "interim_eval_size": interim_eval_size,
                     "eval_every_seconds": float(eval_every_seconds)},
            "buffer": {"initial_fill": tr["num_prompts_per_step"] * tr["num_generations"]}}
    return from_dict(merge(base, overrides))
