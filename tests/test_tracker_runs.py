"""Which tracker run a run logs to: a new run in a used output folder is a new W&B / trackio run
(and starts its TensorBoard events and summary afresh); only ``--resume`` continues one, the
exact one the checkpoint names, without sending the trackers a step they already have.

W&B and trackio cannot be reached here, so they are stand-ins (injected as the ``wandb`` and
``trackio`` modules) that apply the services' documented rules:

* W&B (docs.wandb.ai, "Resume a run", "Log objects and media: step"): ``init()`` without
  ``id`` starts a new run under a generated id; ``init(id=X, resume="allow")`` continues run X
  when it exists (else creates it), ``"must"`` requires it, and an existing id without either
  is an error. A continued run's step counter starts after its last logged step, and
  ``log(step=s)`` with ``s`` below the current step is dropped with a warning ("Steps must be
  monotonically increasing"); ``s`` equal to it adds to that step.
* trackio (``trackio.init``'s docstring): runs are found by ``name``; ``resume="allow"``
  continues the run of that name when it exists, ``"must"`` requires it, ``"never"`` (the
  default) makes a new run, under a generated name when the name is taken. ``log(step=s)``
  stores every call as given (no step rule: a step sent twice has two values).
"""
from __future__ import annotations

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
from tba_lab.runlog import RunLog


class _Runs:
    """The stand-in service's store: run key -> {"config", "history": [(step, values)]}."""

    def __init__(self):
        self.runs: dict[str, dict] = {}
        self.current: str | None = None
        self.dropped: list[int] = []  # steps W&B refused ("must only increase")


def _wandb_standin() -> types.ModuleType:
    mod, store, ids = types.ModuleType("wandb"), _Runs(), itertools.count()
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
            store.runs[id] = {"name": name, "config": config, "history": []}
        history = store.runs[id]["history"]
        store.runs[id]["step"] = (max(s for s, _ in history) + 1) if history else 0
        store.current = id
        return types.SimpleNamespace(id=id, name=name)

    def log(values, step=None):
        run = store.runs[store.current]
        if step is not None and step < run["step"]:
            store.dropped.append(step)
            warnings.warn(f"Tried to log to step {step} that is less than the current step "
                          f"{run['step']}. Steps must be monotonically increasing, so this data "
                          f"will be ignored.")
            return
        run["step"] = run["step"] if step is None else step
        run["history"].append((run["step"], dict(values)))

    def finish():
        store.current = None

    mod.init, mod.log, mod.finish = init, log, finish
    return mod


def _trackio_standin() -> types.ModuleType:
    mod, store, names = types.ModuleType("trackio"), _Runs(), itertools.count()
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


def _steps(history) -> list:
    return [s for s, values in history if any(k.startswith("train/") for k in values)]


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
    assert _steps(a["history"]) == [1, 2, 3]  # the first run, untouched by the second
    assert _steps(b["history"]) == [1, 2, 3], "the second run's updates were lost"
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
    assert _steps(runs[0]["history"]) == [1, 2, 3, 4, 5]
    assert not getattr(mod.store, "dropped", [])
