"""Which tracker run a run logs to: a new run in a used output folder is a new W&B / trackio run
(and starts its TensorBoard events and summary afresh); only ``--resume`` continues one, the
exact one the checkpoint names, without sending the trackers a step they already have.

W&B and trackio cannot be reached here, so they are stand-ins (injected as the ``wandb`` and
``trackio`` modules) that apply the services' documented rules:

* W&B (docs.wandb.ai, "Resume a run", "Log objects and media: step", "Customize log axes"):
  ``init()`` without ``id`` starts a new run under a generated id; ``init(id=X,
  resume="allow")`` continues run X when it exists (else creates it), ``"must"`` requires it,
  and an existing id without either is an error. A continued run's step counter starts after
  its last logged step. History is one row per step: ``log(step=s)`` with ``s`` below the
  current step is dropped with a warning ("Steps must be monotonically increasing"), ``s`` equal
  to it merges into that step's row (a second value of a key replaces the first), ``s`` above
  it commits the row and moves on; ``log()`` without ``step`` merges into the current row and
  commits it (the step goes up by one). ``define_metric(name, step_metric=m)`` (``name`` may be
  a prefix glob ending in ``*``) draws ``name`` against the value of ``m`` in its rows instead of
  W&B's step.
* trackio (``trackio.init``'s docstring): runs are found by ``name``; ``resume="allow"``
  continues the run of that name when it exists, ``"must"`` requires it, ``"never"`` (the
  default) makes a new run, under a generated name when the name is taken. ``log(step=s)``
  stores every call as given (no step rule: a step sent twice has two values).
"""
from __future__ import annotations

import importlib.machinery
import itertools
import json
import sys
import types
import warnings
from pathlib import Path

import pytest

from tba_lab.buffer import Rollout
from tba_lab.config import from_dict
from tba_lab.rollout.collect import RolloutBatch
from tba_lab.runlog import RunLog, read_jsonl_rows


class _Runs:
    """The stand-in service's store: run key -> {"config", "history": [(step, values)]}."""

    def __init__(self):
        self.runs: dict[str, dict] = {}
        self.current: str | None = None
        self.dropped: list[int] = []  # steps W&B refused ("must only increase")


def _module(name: str) -> types.ModuleType:
    """An empty module that ``importlib.util.find_spec`` (the preflight's check) finds once it is
    in ``sys.modules``."""
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    return mod


def _wandb_standin() -> types.ModuleType:
    mod, store, ids = _module("wandb"), _Runs(), itertools.count()
    mod.store = store

    def init(project=None, name=None, config=None, id=None, resume=None, dir=None, **_):
        if id is None:
            id = f"gen{next(ids):04d}"  # W&B generates a fresh 8-character id
        exists = id in store.runs
        if resume == "must" and not exists:
            raise RuntimeError(f"resume='must' but run {id} does not exist")
        if exists and resume not in ("allow", "must"):
            raise RuntimeError(f"run {id} already exists; resume it with resume='allow'")
        if not exists:
            store.runs[id] = {"name": name, "config": config, "history": [], "axes": {}, "row": {}}
        commit_row(store.runs[id])  # the last row of a process killed before finish() is kept
        history = store.runs[id]["history"]
        store.runs[id]["step"] = (max(s for s, _ in history) + 1) if history else 0
        store.runs[id]["row"] = {}  # the current step's row, not committed yet
        store.current = id
        return types.SimpleNamespace(id=id, name=name)

    def define_metric(name, step_metric=None, **_):
        store.runs[store.current]["axes"][name] = step_metric

    def commit_row(run):
        if run["row"]:
            run["history"].append((run["step"], run["row"]))
            run["row"], run["step"] = {}, run["step"] + 1

    def log(values, step=None, commit=None):
        run = store.runs[store.current]
        if step is not None:
            if step < run["step"]:
                store.dropped.append(step)
                warnings.warn(f"Tried to log to step {step} that is less than the current step "
                              f"{run['step']}. Steps must be monotonically increasing, so this "
                              f"data will be ignored.")
                return
            if step > run["step"]:
                commit_row(run)
                run["step"] = step
        elif commit is None:
            commit = True
        run["row"].update(values)
        if commit:
            commit_row(run)

    def finish():
        commit_row(store.runs[store.current])
        store.current = None

    mod.init, mod.define_metric, mod.log, mod.finish = init, define_metric, log, finish
    return mod


def _trackio_standin() -> types.ModuleType:
    mod, store, names = _module("trackio"), _Runs(), itertools.count()
    mod.store = store

    def init(project, name=None, config=None, resume="never", **_):
        exists = name is not None and name in store.runs
        if resume == "must" and not exists:
            raise ValueError(f"Run '{name}' does not exist in project '{project}'")
        if resume == "never" and exists:
            warnings.warn(f"resume='never' but a run '{name}' already exists; generating a "
                          f"new name")
            name, exists = None, False
        if name is None:
            name = f"brave-sunset-{next(names)}"
        if not exists:
            store.runs[name] = {"config": config, "history": []}
        store.current = name
        return types.SimpleNamespace(name=name)

    def log(metrics, step=None):
        store.runs[store.current]["history"].append((step, dict(metrics)))

    def finish():
        store.current = None

    mod.init, mod.log, mod.finish = init, log, finish
    return mod


STANDINS = {"wandb": _wandb_standin, "trackio": _trackio_standin}


@pytest.fixture
def tracker(request, monkeypatch):
    """``(name, stand-in module)``, the module installed as ``sys.modules[name]``."""
    name = request.param
    mod = STANDINS[name]()
    monkeypatch.setitem(sys.modules, name, mod)
    return name, mod


def _cfg(run: Path, **extra):
    return from_dict({"output_dir": str(run), "training": {"num_prompts_per_step": 1,
                                                           "num_generations": 4}, **extra})


def _batch(i: int, version: int, n: int = 8) -> RolloutBatch:
    rows = [Rollout(prompt_id=0, prompt_ids=[1, 5], response_ids=[7, 2], reward=0.5,
                    ref_token_logps=[-1.0, -1.0], behaviour_token_logps=[-0.5, -0.5],
                    version=version) for _ in range(n)]
    return RolloutBatch(rollouts=rows, completions=[""] * n, version=version,
                        gen_seconds=1.0 + i / 100, score_seconds=0.1)


def _update(log: RunLog, step: int) -> None:
    """Trainer update ``step`` with a fixed batch: loss ``step / 10``."""
    import time

    batch = _batch(step, version=step - 1).rollouts[:4]
    log.update(step, batch, step / 10, {}, 1.0, 1e-5, time.time(), 4)


def _killed(log: RunLog) -> None:
    """What a SIGKILL leaves: every row and event so far on disk, no summary, no finish()."""
    for f in (log.metrics_f, log.searchers_f, log.eval_f):
        f.close()
    for r in log.reporters:
        if hasattr(r, "writer"):
            r.writer.close()


def _points(run: dict, metric: str) -> list[tuple]:
    """``(x, value)`` of ``metric`` in a stand-in run's history, in the order logged, as the
    tracker draws it: x is the row's value of the metric's ``step_metric`` (W&B's
    ``define_metric``: for the name itself, else the longest prefix glob that matches it), else
    the row's step."""
    axes = run.get("axes", {})
    globs = sorted((n for n in axes if n.endswith("*") and metric.startswith(n[:-1])), key=len)
    axis = axes.get(metric) or (axes[globs[-1]] if globs else None)
    return [(values[axis] if axis else step, values[metric])
            for step, values in run["history"] if metric in values]


def _steps(run: dict) -> list:
    """The updates a stand-in run has a loss of, in the order logged."""
    return [x for x, _ in _points(run, "train/loss")]


@pytest.mark.parametrize("tracker", ["wandb", "trackio"], indirect=True)
def test_a_new_run_in_a_used_folder_is_a_new_tracker_run_and_resume_continues_that_one(
        tmp_path, tracker):
    """After allenai/tango#152, wandb#6216, axolotl PR 767: a second run (no --resume) in
    the same output folder used to continue the first one's tracker run (an id made from the
    folder path, ``resume="allow"``), where W&B dropped every log call of the new run ("step
    must only increase"). Now it is a second tracker run with all its updates, the first is
    untouched, and a resume of the second continues the second (the id its checkpoint names)."""
    name, mod = tracker
    run = tmp_path / "default"
    cfg = _cfg(run, report_to=[name])
    first = RunLog(cfg, progress=False)
    for step in (1, 2, 3):
        _update(first, step)
    first.close(3)

    second = RunLog(cfg, progress=False)
    for step in (1, 2):
        _update(second, step)
    state = second.state_dict(2)
    _killed(second)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # W&B's "step must only increase" would raise here
        resumed = RunLog(cfg, progress=False, resume=state)
        _update(resumed, 3)
        resumed.close(3)

    assert len(mod.store.runs) == 2, f"one tracker run for two runs: {list(mod.store.runs)}"
    a, b = mod.store.runs.values()
    assert _steps(a) == [1, 2, 3]  # the first run, untouched by the second
    assert _steps(b) == [1, 2, 3], "the second run's updates were lost"
    assert [v["train/loss"] for _, v in b["history"] if "train/loss" in v] == \
        pytest.approx([0.1, 0.2, 0.3])
    assert state["trackers"] == {name: list(mod.store.runs)[1]}
    assert not getattr(mod.store, "dropped", [])


def test_a_new_run_in_a_used_folder_starts_its_tensorboard_events_and_summary_afresh(tmp_path):
    """The same mistake with the files keyed by the folder: a second run (no --resume) in a
    folder whose first run wrote 5 updates to ``tensorboard/`` and a ``summary.json`` shows
    only its own 2 updates in TensorBoard, and the first run's summary (which
    ``check_budget_left`` reads to judge a resume) is gone as soon as the new run starts."""
    pytest.importorskip("tensorboard")
    from tba_lab.reporting import read_tensorboard

    run = tmp_path / "default"
    cfg = _cfg(run, report_to=["tensorboard"])
    first = RunLog(cfg, progress=False)
    for step in range(1, 6):
        _update(first, step)
    first.close(5)
    assert (run / "summary.json").exists() and (run / "curves.png").exists()

    second = RunLog(cfg, progress=False)
    assert not (run / "summary.json").exists(), "the first run's summary stands for the second"
    assert not (run / "curves.png").exists()
    for step in (1, 2):
        _update(second, step)
    second.close(2)
    tb = read_tensorboard(run)
    assert [s for s, _ in tb["train/loss"]] == [1, 2], tb["train/loss"]
    assert json.loads((run / "summary.json").read_text())["trainer_steps"] == 2


@pytest.mark.parametrize("tracker", ["wandb", "trackio"], indirect=True)
def test_a_resume_sends_the_tracker_no_step_it_already_has(tmp_path, tracker):
    """Killed at update 4 with its checkpoint at 2, then resumed to 5: the tracker has each
    update once (trackio would store the redone updates 3 and 4 a second time; W&B would drop
    them, one warning per call) and the new ones after."""
    name, mod = tracker
    run = tmp_path / "run"
    cfg = _cfg(run, report_to=[name])
    log = RunLog(cfg, progress=False)
    for step in (1, 2):
        _update(log, step)
        log.received([_batch(step, step)], step)
    state = log.state_dict(2)
    for step in (3, 4):
        _update(log, step)
    _killed(log)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resumed = RunLog(cfg, progress=False, resume=state)
        resumed.received([_batch(9, 2)], 2)
        for step in (3, 4, 5):
            _update(resumed, step)
        resumed.close(5)
    [runs] = [list(mod.store.runs.values())]
    assert len(runs) == 1
    assert _steps(runs[0]) == [1, 2, 3, 4, 5]
    assert not getattr(mod.store, "dropped", [])


def test_deferred_interim_evaluations_reach_every_tracker_at_their_steps(tmp_path, monkeypatch):
    """After ms-swift#7080 and wandb#6077: with ``task.defer_interim_eval`` (the race's setting)
    the interim evaluations of weight copies are sent after the budget, at their copies' steps,
    all below the last update's; W&B dropped each as "step must only increase" (and merged the
    last copy's with the final evaluation, both at the last step), so its eval curve had only the
    first and the last point. A tiny real run reporting to W&B, trackio (stand-ins) and
    TensorBoard (when installed): every row of ``eval.jsonl`` reaches each tracker at its step,
    in order, with its values, and W&B has each update's loss at its step."""
    import importlib.util

    import torch

    from tba_lab.trainer import train

    trackers = {name: STANDINS[name]() for name in ("wandb", "trackio")}
    for name, mod in trackers.items():
        monkeypatch.setitem(sys.modules, name, mod)
    report_to = ["wandb", "trackio"]
    if importlib.util.find_spec("tensorboard") is not None:
        report_to.append("tensorboard")
    torch.set_num_threads(1)
    run = tmp_path / "run"
    cfg = from_dict({"output_dir": str(run), "max_minutes": 3.0, "report_to": report_to,
                     "model": {"max_new_tokens": 16}, "buffer": {"initial_fill": 8},
                     "training": {"max_steps": 6, "num_prompts_per_step": 2, "num_generations": 4},
                     "async": {"mode": "sync", "searcher_threads": 1},
                     "task": {"eval_size": 4, "interim_eval_size": 4, "eval_every_seconds": 1e-3,
                              "defer_interim_eval": True}})
    train(cfg, progress=False)

    evals = read_jsonl_rows(run / "eval.jsonl")
    assert [e["step"] for e in evals] == [0, 1, 2, 3, 4, 5, 6, 6]  # before, copy per update, after
    metrics = [k for k in evals[0] if k not in ("step", "wall_seconds", "n")]
    for name, mod in trackers.items():
        [tracked] = mod.store.runs.values()
        for key in metrics:
            got, want = _points(tracked, f"eval/{key}"), [(e["step"], e[key]) for e in evals]
            assert got == want, f"{name}: eval/{key} at (step, value) {got}, eval.jsonl has {want}"
        assert not mod.store.dropped
    [wandb_run] = trackers["wandb"].store.runs.values()
    losses = [(m["step"], m["loss"]) for m in read_jsonl_rows(run / "metrics.jsonl")]
    assert _points(wandb_run, "train/loss") == losses
    if "tensorboard" in report_to:
        from tba_lab.reporting import read_tensorboard

        tb = read_tensorboard(run)
        for key in metrics:
            assert [s for s, _ in tb[f"eval/{key}"]] == [e["step"] for e in evals]
            assert [v for _, v in tb[f"eval/{key}"]] == pytest.approx([e[key] for e in evals],
                                                                       rel=1e-6)
