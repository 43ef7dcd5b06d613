"""Resumable checkpoints of a training run: one file, written atomically.

``output_dir/checkpoint.pt`` holds everything :func:`tba_lab.trainer.train` needs to continue a
run where it stopped (``tba-lab train --resume DIR``):

* the policy's ``state_dict`` and the optimizer's (AdamW moments, step counts), the
  algorithm's own parameters (a learned log Z), the trainer step;
* the schedule position: training seconds used so far (the linear learning-rate schedule and
  the time budget continue from it) and the step (beta's annealing follows the step);
* the replay buffer (items, refreshed set, its sampling RNG), the trainer's RNG states
  (``torch``, ``random``), the run log's counters and summary so far (among them the rows
  generated and the rows trained on, which the replay bound counts on after a resume with
  another B);
* the run's config, to refuse a resume with another model, task or algorithm.

Writing: ``torch.save`` to a temporary file in the same folder, ``fsync``, then ``os.replace``
over ``checkpoint.pt`` (atomic on POSIX), then ``fsync`` of the folder. A SIGKILL or power loss
during a write leaves the previous checkpoint intact and a ``checkpoint.pt.*.tmp`` file, which
the next resume deletes. Reading uses ``torch.load(weights_only=True)``: plain tensors and
containers only, no code runs.

What a resume does NOT restore: the searchers' state. They restart from the newest weights with
new seeds, and whatever was in flight between searchers and trainer is generated again. Async
runs are not bitwise reproducible anyway (they depend on timing).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT = 1
# Fields that must match between the checkpoint and the resuming config (the run's identity).
IDENTITY = (("model", "path"), ("algo",), ("task", "name"), ("training", "num_generations"))
# Fields a resume cannot change either, each with why: the checkpoint's state would replace the
# new value without a word, or the stored rollouts and optimizer state were made under the old
# one. Everything else is read from the resuming config: learning_rate, weight_decay and
# tb.log_z_lr (the optimizer's param groups take them), the beta schedule (evaluated at the
# run's step), lr_schedule and the budgets (counted over the whole run), initial_fill,
# max_replay_ratio, sync_period and the loss options.
FIXED_ON_RESUME = (
    (("seed",), "the checkpoint's RNG states continue the run's random streams"),
    (("model", "temperature"), "the buffer's log-probs were computed at the old temperature"),
    (("tb", "log_z"), "a learned log Z has its own parameter and optimizer state"),
    *((("buffer", name), "the replay buffer's saved state carries its own settings")
      for name in ("capacity_per_prompt", "recency_prob", "inv_temp", "max_prompts", "dedup")),
)


def checkpoint_path(output_dir: str | os.PathLike) -> Path:
    """``output_dir/checkpoint.pt``."""
    return Path(output_dir) / CHECKPOINT_NAME


def nonfinite_weights(named) -> list[str]:
    """Names of the floating-point tensors in ``named`` (``(name, tensor)`` pairs, any device,
    e.g. ``model.named_parameters()`` or ``state_dict().items()``) that hold a NaN or an
    infinity; [] when every one is finite. One device sync per device, not per tensor."""
    by_device: dict = {}
    for n, t in named:
        if torch.is_tensor(t) and t.is_floating_point():
            by_device.setdefault(t.device, []).append((n, t))
    bad = []
    with torch.no_grad():
        for group in by_device.values():
            ok = torch.stack([torch.isfinite(t).all() for _, t in group]).tolist()
            bad += [n for (n, _), good in zip(group, ok) if not good]
    return bad


def check_finite_weights(named, what: str) -> None:
    """Refuse weights that hold a NaN or an infinity before they are published or saved: a
    policy with one such weight generates garbage and poisons every run resumed from it.

    Args:
        named: ``(name, tensor)`` pairs (``model.named_parameters()``, ``state_dict().items()``).
        what: what was about to happen, for the message (``"publish"``, ``"save checkpoint.pt"``).
    Raises:
        FloatingPointError: naming the first non-finite tensors (the trainer skips non-finite
            updates, so this means the weights were corrupted some other way).
    """
    bad = nonfinite_weights(named)
    if bad:
        raise FloatingPointError(
            f"refusing to {what}: {len(bad)} weight tensor(s) hold NaN or inf ({', '.join(bad[:3])}"
            f"{', ...' if len(bad) > 3 else ''}); such weights cannot be sampled from or trained")


def save_checkpoint(output_dir: str | os.PathLike, state: dict) -> Path:
    """Write ``state`` (tensors and plain containers) to ``output_dir/checkpoint.pt`` atomically.

    Returns:
        the checkpoint's path.
    Raises:
        FloatingPointError: ``state["policy"]`` or ``state["algorithm"]`` (a list of tensors)
            holds a NaN or an infinity (:func:`check_finite_weights`); nothing is written, so
            the previous checkpoint stays.
    """
    check_finite_weights([*state.get("policy", {}).items(),
                          *((f"algorithm[{i}]", t) for i, t in enumerate(state.get("algorithm", [])))],
                         f"save {CHECKPOINT_NAME}")
    path = checkpoint_path(output_dir)
    atomic_torch_save({"format": FORMAT, **state}, path)
    return path


def atomic_torch_save(obj, path: str | os.PathLike) -> None:
    """``torch.save(obj, path)`` atomically: a temporary file in the same folder, fsync,
    ``os.replace`` over ``path``, fsync of the folder. A crash or SIGKILL mid-write leaves any
    previous file intact (and a ``<name>.*.tmp`` file). Used for checkpoints and ``buffer.pt``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.absolute().parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    dir_fd = os.open(path.absolute().parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself reaches the disk
    finally:
        os.close(dir_fd)


def load_checkpoint(output_dir: str | os.PathLike) -> dict:
    """Read ``output_dir/checkpoint.pt`` (and delete temporary files of interrupted writes).

    Raises:
        FileNotFoundError: there is no checkpoint in ``output_dir`` (with what to do).
        ValueError: the file is not a checkpoint of a known format.
        FloatingPointError: its policy holds NaN or inf (:func:`check_finite_weights`).
    """
    path = checkpoint_path(output_dir)
    for tmp in path.parent.glob(CHECKPOINT_NAME + ".*.tmp"):
        tmp.unlink()
    if not path.exists():
        raise FileNotFoundError(
            f"--resume {output_dir}: no {CHECKPOINT_NAME} there (a run writes one every "
            f"training.save_seconds / training.save_steps and when it stops); give the "
            f"output_dir of a run that trained for a while, or start a new run without --resume")
    state = torch.load(path, weights_only=True, map_location="cpu")  # a GPU run resumes on a CPU too
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a tba-lab checkpoint of format {FORMAT}")
    check_finite_weights(state.get("policy", {}).items(), f"resume from {path}")  # an old file
    log, config = state.get("log"), state.get("config")
    if isinstance(log, dict) and "trained" not in log and config:
        # a checkpoint written before the run log counted the rows trained on: every update
        # took one batch of the checkpoint's own B x K (sync runs' short batches aside)
        tr = config["training"]
        log["trained"] = state["step"] * tr["num_prompts_per_step"] * tr["num_generations"]
    return state


def check_same_run(saved_config: dict, cfg) -> None:
    """Refuse to resume with another model, algorithm, task or group size, or with a changed
    field of :data:`FIXED_ON_RESUME` (seed, temperature, log Z's kind, the buffer's settings).

    Args:
        saved_config: the checkpoint's ``config`` (``RunConfig.to_dict()``).
        cfg: the resuming :class:`~tba_lab.config.RunConfig`.
    Raises:
        tba_lab.config.ConfigError: naming the field, both values and the fix.
    """
    from tba_lab.config import ConfigError

    now = cfg.to_dict()
    for keys in IDENTITY:
        old, new = saved_config, now
        for k in keys:
            old, new = old.get(k) if isinstance(old, dict) else None, new.get(k)
        if old != new:
            name = ".".join(keys)
            raise ConfigError(
                f"--resume: the checkpoint was trained with {name}={old!r} but this config says "
                f"{name}={new!r}; a resumed run must keep its model, algorithm, task and group "
                f"size. Drop the override to continue the run, or start a new run in another "
                f"output_dir")
    missing = object()
    for keys, why in FIXED_ON_RESUME:
        old, new = saved_config, now
        for k in keys:
            old = old.get(k, missing) if isinstance(old, dict) else missing
            new = new.get(k) if isinstance(new, dict) else None
        if old is not missing and old != new:  # (a checkpoint older than the field: not known)
            name = ".".join(keys)
            raise ConfigError(
                f"--resume: the checkpoint was trained with {name}={old!r} but this config says "
                f"{name}={new!r}; a resumed run cannot change it ({why}). Drop the override to "
                f"continue the run, or start a new run in another output_dir")


def check_budget_left(state: dict, cfg) -> None:
    """Refuse to resume a finished run whose budget is already used up: nothing would train,
    and the final evaluation would run again and add a second "after" row.

    A run counts as finished when its ``summary.json`` records the final held-out evaluation
    (``eval_seconds_after``). A run stopped before or during that evaluation resumes even with no
    budget left, and then only evaluates. Budgets count the run's whole training time and
    updates, resumes included (:func:`tba_lab.trainer.train`).

    Args:
        state: the checkpoint (:func:`load_checkpoint`): ``step`` and the log's
            ``elapsed_saved`` (training seconds used).
        cfg: the resuming :class:`~tba_lab.config.RunConfig` (``max_minutes``,
            ``training.max_steps``, ``output_dir``).
    Raises:
        tba_lab.config.ConfigError: naming each exhausted budget, what was used, and the flag
            that extends it.
    """
    import json

    from tba_lab.config import ConfigError

    step, seconds = int(state["step"]), float(state["log"].get("elapsed_saved", 0.0))
    used = []
    if cfg.training.max_steps and step >= cfg.training.max_steps:
        used.append(f"training.max_steps={cfg.training.max_steps} and it made {step} updates: "
                    f"give --max-steps above {step}")
    if seconds >= 60 * cfg.max_minutes:
        used.append(f"max_minutes={cfg.max_minutes:g} and it trained {seconds:.0f} s: give "
                    f"--max-minutes above {seconds / 60:.2f}")
    if not used:
        return
    try:
        finished = "eval_seconds_after" in json.loads(
            (Path(cfg.output_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        finished = False
    if finished:
        raise ConfigError(f"--resume {cfg.output_dir}: the run has finished its budget "
                          f"({'; and '.join(used)}); nothing was changed")
