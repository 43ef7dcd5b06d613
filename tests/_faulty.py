"""A fault-injecting task for the reliability tests (``task.name: faulty_test``).

It is the arithmetic task, except that inside a searcher process its reward function fails as
the ``fault`` options section says. Spawned searchers import this module by name (the task
class travels by reference), so it lives in the ``tests`` package, not in a test file.

Kinds (``fault.kind``): ``raise`` (an exception), ``exit`` (the process kills itself with
SIGKILL), ``exit_in_pull`` (the process kills itself with SIGKILL at its next weight
pull, inside the copy the channel makes under its lock; a ``pulled-<pid>`` marker says so),
``hang`` (sleeps for an hour), ``nan`` (rewards 0 and 1 of each batch are +inf and
NaN), ``nan_all`` (every reward NaN), ``zero`` (every reward is 0). ``fault.times`` limits how many searcher processes fail (counted
with marker files in ``fault.marker_dir``; 0 = every time), ``fault.searcher`` picks the
searcher id that fails (-1 = any), ``fault.after`` lets that many reward calls pass first.
``fault.hold_others`` makes every other searcher wait (at most 120 s) until the chosen one has
failed, so a test does not depend on which searcher process starts first.
"""
from __future__ import annotations

import math
import multiprocessing
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from tba_lab.registry import TASKS
from tba_lab.tasks.arithmetic import ArithmeticTask


class FaultInjected(RuntimeError):
    pass


@dataclass
class FaultConfig:
    kind: str = "raise"
    times: int = 0
    searcher: int = -1
    after: int = 0
    marker_dir: str = ""
    hold_others: bool = False

    def validate(self) -> None:
        pass


@TASKS.register
class FaultyTask(ArithmeticTask):
    name = "faulty_test"
    config_class = FaultConfig
    section = "fault"

    def __init__(self, cfg=None):
        super().__init__(cfg)
        self.fault = cfg.fault if cfg is not None else FaultConfig()
        self.calls = 0

    def _armed(self) -> bool:
        """Whether this call fails: once a searcher process is chosen to fail (``times``
        counts processes), every later call in it fails too, so a row-by-row retry of the
        batch cannot hide the fault."""
        if getattr(self, "failing", False):
            return True
        name = multiprocessing.current_process().name
        if not name.startswith("tba-searcher-"):
            return False  # the trainer's own evaluation never fails
        if self.fault.searcher >= 0 and name != f"tba-searcher-{self.fault.searcher}":
            if self.fault.hold_others:
                self._wait_for_a_failure()
            return False
        self.calls += 1
        if self.calls <= self.fault.after:
            return False
        markers = Path(self.fault.marker_dir)
        if self.fault.times and len(list(markers.glob("failed-*"))) >= self.fault.times:
            return False
        if self.fault.marker_dir:
            (markers / f"failed-{os.getpid()}").touch()
        self.failing = True
        return True

    def _wait_for_a_failure(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not list(Path(self.fault.marker_dir).glob("failed-*")):
            if time.monotonic() > deadline:
                raise TimeoutError("fault.hold_others: the chosen searcher never failed")
            time.sleep(0.05)
        self.fault.hold_others = False  # once is enough

    def rewards(self, problems, completions):
        rewards = super().rewards(problems, completions)
        if self.fault.kind == "zero":
            return [0.0] * len(rewards)
        if not self._armed():
            return rewards
        kind = self.fault.kind
        if kind == "exit_in_pull":
            _die_at_next_pull(self.fault.marker_dir)
            return rewards
        if kind == "raise":
            raise FaultInjected("injected reward failure")
        if kind == "exit":
            os.kill(os.getpid(), signal.SIGKILL)
        if kind == "hang":
            time.sleep(3600)
        if kind == "nan_all":
            return [math.nan] * len(rewards)
        if kind == "nan":  # the first prompt's first two rows
            return [math.inf, math.nan] + list(rewards[2:])
        raise ValueError(f"fault.kind={kind!r}")


def _die_at_next_pull(marker_dir: str) -> None:
    """Replace, in this process only, the copy both weight channels make under their lock by a
    SIGKILL (what the OOM killer does to a process allocating that copy)."""
    from tba_lab.actors.weights import FlatWeights, SharedWeights

    def copy_out(self, *args):
        if marker_dir:
            (Path(marker_dir) / f"pulled-{os.getpid()}").touch()
        os.kill(os.getpid(), signal.SIGKILL)

    SharedWeights._copy_out = FlatWeights._copy_out = copy_out
