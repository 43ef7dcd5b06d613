"""Run configuration: one dataclass per concern, YAML loading, validation in one place.

Option names follow TRL's ``GRPOConfig`` where they mean the same thing (``num_generations``,
``beta``, ``epsilon``, ``loss_type``, ``scale_rewards``, ``learning_rate``, ``max_grad_norm``).
A YAML file mirrors the nesting::

    algo: tb
    tb: {beta: 0.05}
    async_: {sync_period: 2}

Unknown keys and bad values raise :class:`ConfigError` naming the field and the fix, before any
process starts.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from tba_lab.models import DEFAULT_MODEL_DIR, DEFAULT_TASK_DIR


class ConfigError(ValueError):
    """A configuration value is missing, unknown or out of range; the message says the fix."""


@dataclass
class ModelConfig:
    path: str = str(DEFAULT_MODEL_DIR)  # HF folder or hub name of the starting policy (= reference policy)
    temperature: float = 0.6            # sampling temperature; policy and reference log-probs use the same
    max_new_tokens: int = 40            # response length cap, tokens


@dataclass
class TaskConfig:
    train_path: str = str(DEFAULT_TASK_DIR / "train.jsonl")  # prompts for the searchers (JSONL, GSM8K rows)
    test_path: str = str(DEFAULT_TASK_DIR / "test.jsonl")    # held-out problems for greedy accuracy
    eval_size: int = 500                # held-out problems scored before and after training
    eval_every_seconds: float = 60.0    # interim held-out evaluation period (0 = none)
    interim_eval_size: int = 200        # problems per interim evaluation


@dataclass
class TrainingConfig:
    num_prompts_per_step: int = 16      # B: prompts per trainer batch (and per searcher generation batch)
    num_generations: int = 8            # K: responses per prompt (group size)
    learning_rate: float = 5e-5         # AdamW peak learning rate (1e-4 and up degrades the tiny model)
    lr_schedule: str = "linear"         # "linear": decay to 0 over the run (time or max_steps); "constant"
    max_grad_norm: float = 1.0          # gradient-norm clipping (0 = off)
    weight_decay: float = 0.0           # AdamW weight decay
    max_steps: int = 0                  # stop after this many trainer updates (0 = time only)


@dataclass
class TBConfig:
    beta: float = 0.1                   # KL coefficient beta at the start (paper Eq. 2)
    beta_final: float | None = None     # annealed to this value (None = constant beta)
    beta_anneal_steps: int = 0          # over this many trainer updates, then constant
    log_z: str = "vargrad"              # "vargrad": per-prompt estimate (Eq. 4); "learned": one scalar parameter
    log_z_lr: float = 0.1               # AdamW learning rate of the learned log Z (torchgfn's usual 0.1)


@dataclass
class GRPOConfig:
    beta: float = 0.0                   # KL coefficient (penalty to the reference); 0 skips it
    epsilon: float = 0.2                # PPO clip range for the importance ratio
    loss_type: str = "grpo"             # "grpo" | "bnpo" | "dr_grpo" aggregation
    scale_rewards: str = "group"        # "group" | "batch" | "none" std division of advantages
    kl_estimator: str = "k3"            # "k1" | "k3"


@dataclass
class RLOOConfig:
    """RLOO (Ahmadian et al. 2024): ``losses.rloo_advantages`` + ``losses.rloo_loss``."""
    beta: float = 0.05                  # KL coefficient, folded into the reward (TRL's RLOOConfig default)
    epsilon: float = 0.2                # PPO clip range of the per-token ratio (off-policy data)


@dataclass
class OnlineDPOConfig:
    """Online DPO (Guo et al. 2024) on each group's best / worst response: ``losses.online_dpo_loss``."""
    beta: float = 0.1                   # DPO temperature beta (TRL's OnlineDPOConfig default)


@dataclass
class BufferConfig:
    capacity_per_prompt: int = 32       # newest rollouts kept per prompt
    recency_prob: float = 0.8           # m: probability of drawing from prompts refreshed since the last sync
    inv_temp: float = 0.0               # reward prioritisation softmax(inv_temp * r); 0 = uniform
    max_prompts: int = 256              # prompts remembered (least recently refreshed evicted); 0 = unbounded
    initial_fill: int = 256             # rollouts in the buffer before the first update (async)


@dataclass
class AsyncConfig:
    mode: str = "async"                 # "async": searchers and trainer overlap; "sync": strict alternation
    num_searchers: int = 1              # searcher processes
    sync_period: int = 1                # k: publish weights every k trainer updates (sync forces 1)
    queue_size: int = 2                 # generation batches in flight between searchers and trainer
    searcher_threads: int = 0           # torch threads per searcher (0 = auto: 1 async, all cores sync)
    trainer_threads: int = 0            # torch threads for the trainer (0 = auto, as above)


@dataclass
class RunConfig:
    algo: str = "tb"                    # "tb" (paper Eq. 5) | "grpo" | "dr_grpo" | "rloo" | "online_dpo"
    output_dir: str = "runs/default"    # where metrics, summary, curves and the policy go
    max_minutes: float = 9.0            # training wall-clock budget, minutes (evaluation before/after extra)
    seed: int = 0                       # seeds the trainer, the searchers and the buffer
    log_every: int = 1                  # metrics.jsonl and tqdm every this many updates
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    tb: TBConfig = field(default_factory=TBConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)  # also dr_grpo (forces loss_type and scale_rewards)
    rloo: RLOOConfig = field(default_factory=RLOOConfig)
    online_dpo: OnlineDPOConfig = field(default_factory=OnlineDPOConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    async_: AsyncConfig = field(default_factory=AsyncConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


ALGOS = ("tb", "grpo", "dr_grpo", "rloo", "online_dpo")


def needs_reference(algo: str, grpo_beta: float) -> bool:
    """Whether the loss reads reference log-probs: TB (Eq. 3), RLOO (KL in the reward), online
    DPO, and GRPO / Dr. GRPO only with a KL penalty (beta > 0). Searchers skip the reference
    forward pass otherwise, as TRL does at beta 0."""
    return algo in ("tb", "rloo", "online_dpo") or grpo_beta > 0


def _typed(value, default, name: str):
    """``value`` checked against the type of the field's ``default``; :class:`ConfigError` if wrong.

    An int is accepted for a float, ``None`` only where the default is ``None``, and a string
    that parses as a number for a float: PyYAML reads ``5e-5`` (no dot) as the string "5e-5".
    """
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


def _fill(cls, data: dict, where: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{where.rstrip('.') or 'config'} must be a mapping, got {type(data).__name__}")
    names = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        name = "async_" if key == "async" else key
        if name not in names:
            raise ConfigError(f"unknown config key {where + key!r}; known keys: {sorted(names)}")
        sub = names[name].default_factory if names[name].default_factory is not dataclasses.MISSING else None
        if sub is not None and dataclasses.is_dataclass(sub):
            kwargs[name] = _fill(sub, value, f"{where}{key}.")
        else:
            kwargs[name] = _typed(value, names[name].default, where + key)
    return cls(**kwargs)


def from_dict(data: dict) -> RunConfig:
    """Build a validated :class:`RunConfig` from nested plain data (as read from YAML)."""
    cfg = _fill(RunConfig, data or {}, "")
    validate(cfg)
    return cfg


def load_yaml(path: str | Path) -> RunConfig:
    """Read a YAML config file. Raises FileNotFoundError, or :class:`ConfigError` on bad content."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"config file {str(p)!r} not found")
    return from_dict(yaml.safe_load(p.read_text()) or {})


def _check(ok: bool, msg: str) -> None:
    if not ok:
        raise ConfigError(msg)


def validate(cfg: RunConfig) -> RunConfig:
    """Check every field's range; raise :class:`ConfigError` naming the field and the fix."""
    _check(cfg.algo in ALGOS, f"algo={cfg.algo!r}: choose one of {ALGOS}")
    _check(cfg.max_minutes > 0, f"max_minutes={cfg.max_minutes}: give a positive number of minutes")
    m, t, tr = cfg.model, cfg.task, cfg.training
    _check(m.temperature > 0, f"model.temperature={m.temperature}: must be > 0 (sampling temperature)")
    _check(m.max_new_tokens >= 1, f"model.max_new_tokens={m.max_new_tokens}: must be >= 1")
    for name in ("train_path", "test_path"):
        path = getattr(t, name)
        _check(Path(path).is_file(), f"task.{name}={path!r} does not exist; run `tba-lab sft` to "
                                     f"write the embedded task or point it at a GSM8K-format JSONL")
    _check(t.eval_size >= 1, f"task.eval_size={t.eval_size}: must be >= 1")
    _check(t.interim_eval_size >= 1, f"task.interim_eval_size={t.interim_eval_size}: must be >= 1")
    _check(t.eval_every_seconds >= 0, "task.eval_every_seconds must be >= 0 (0 turns it off)")
    _check(tr.num_prompts_per_step >= 1, "training.num_prompts_per_step must be >= 1")
    _check(tr.num_generations >= 2, f"training.num_generations={tr.num_generations}: group "
                                    f"methods (TB's VarGrad log Z, GRPO advantages) need K >= 2")
    _check(tr.learning_rate > 0, f"training.learning_rate={tr.learning_rate}: must be > 0")
    _check(tr.lr_schedule in ("linear", "constant"), f"training.lr_schedule={tr.lr_schedule!r}: "
                                                     f"choose linear or constant")
    _check(tr.max_grad_norm >= 0, "training.max_grad_norm must be >= 0 (0 = no clipping)")
    _check(tr.max_steps >= 0, "training.max_steps must be >= 0 (0 = bounded by time only)")
    _check(cfg.tb.beta > 0, f"tb.beta={cfg.tb.beta}: the KL coefficient must be > 0")
    _check(cfg.tb.beta_final is None or cfg.tb.beta_final > 0, "tb.beta_final must be > 0 or null")
    _check(cfg.tb.beta_anneal_steps >= 0, "tb.beta_anneal_steps must be >= 0")
    _check(cfg.tb.log_z in ("vargrad", "learned"), f"tb.log_z={cfg.tb.log_z!r}: choose vargrad or learned")
    _check(cfg.tb.log_z_lr > 0, f"tb.log_z_lr={cfg.tb.log_z_lr}: must be > 0")
    _check(cfg.rloo.beta >= 0 and cfg.rloo.epsilon >= 0, "rloo.beta and rloo.epsilon must be >= 0")
    _check(cfg.online_dpo.beta > 0, f"online_dpo.beta={cfg.online_dpo.beta}: must be > 0")
    g = cfg.grpo
    _check(g.loss_type in ("grpo", "bnpo", "dr_grpo"), f"grpo.loss_type={g.loss_type!r}: "
                                                      f"choose grpo, bnpo or dr_grpo")
    _check(g.scale_rewards in ("group", "batch", "none"), "grpo.scale_rewards: group, batch or none")
    _check(g.kl_estimator in ("k1", "k3"), "grpo.kl_estimator: k1 or k3")
    _check(g.beta >= 0 and g.epsilon >= 0, "grpo.beta and grpo.epsilon must be >= 0")
    b = cfg.buffer
    _check(b.capacity_per_prompt >= 1, "buffer.capacity_per_prompt must be >= 1")
    _check(0 <= b.recency_prob <= 1, f"buffer.recency_prob={b.recency_prob}: must be in [0, 1]")
    _check(b.inv_temp >= 0, "buffer.inv_temp must be >= 0 (0 = uniform)")
    _check(b.initial_fill >= 0, "buffer.initial_fill must be >= 0")
    _check(b.max_prompts == 0 or b.max_prompts >= tr.num_prompts_per_step,
           f"buffer.max_prompts={b.max_prompts}: keep at least num_prompts_per_step prompts (0 = unbounded)")
    a = cfg.async_
    _check(a.mode in ("async", "sync"), f"async.mode={a.mode!r}: choose async or sync")
    _check(a.num_searchers >= 1, f"async.num_searchers={a.num_searchers}: need at least one searcher")
    _check(a.sync_period >= 1, f"async.sync_period={a.sync_period}: must be >= 1")
    _check(a.queue_size >= 1, "async.queue_size must be >= 1")
    _check(a.searcher_threads >= 0 and a.trainer_threads >= 0, "thread counts must be >= 0")
    if a.mode == "sync":
        _check(a.sync_period == 1, f"async.sync_period={a.sync_period} with mode=sync: strict "
                                   f"alternation publishes after every update; set sync_period 1")
        _check(a.num_searchers == 1, f"async.num_searchers={a.num_searchers} with mode=sync: "
                                     f"strict alternation uses one searcher; use mode=async")
    return cfg
