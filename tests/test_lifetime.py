"""tba_lab.actors.lifetime: a child ends when its parent ends, however the parent ends.

A parent process starts one child (a ``multiprocessing`` spawn child, or a ``subprocess`` child
told its parent by ``TBA_LAB_PARENT_PID``) that sleeps for an hour, and is then killed alone
(SIGKILL: nothing runs in it; SIGTERM without a handler: the same). The child must be gone
within a few seconds, with its ``finally`` block run (its SIGTERM handler raises); a child that
ignores SIGTERM is ended ``grace`` seconds later. No torch: each case takes a second or two.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._lifetime_helpers import PARENT

psutil = pytest.importorskip("psutil")
REPO = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _run(tmp_path, mode: str, on_sigterm: str, grace: float, sig) -> tuple[int, float]:
    """Start the parent, wait for its child, kill the parent with ``sig``; returns the child's
    pid and the seconds until it was gone (the test fails after 10 s)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode, str(tmp_path), on_sigterm,
                               str(grace)], cwd=REPO, env=env, start_new_session=True)
    child = None
    try:
        deadline = time.time() + 60
        while not (ready := list(tmp_path.glob("ready-*"))):
            assert parent.poll() is None, f"the parent exited with {parent.returncode}"
            assert time.time() < deadline, "the child never started"
            time.sleep(0.05)
        child = int(ready[0].name.split("-")[1])
        assert psutil.Process(child).ppid() == parent.pid
        parent.send_signal(sig)
        parent.wait(timeout=10)
        t0 = time.time()
        while _alive(child) and time.time() - t0 < 10:
            time.sleep(0.05)
        seconds = time.time() - t0
        assert not _alive(child), f"the child outlived its parent by {seconds:.0f} s"
        return child, seconds
    finally:
        for pid in (parent.pid, child):
            if pid is not None and _alive(pid):
                os.kill(pid, signal.SIGKILL)
        parent.wait(timeout=10)


@pytest.mark.parametrize("mode", ["spawn", "subprocess"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_the_child_unwinds_when_its_parent_dies(tmp_path, mode, sig):
    child, seconds = _run(tmp_path, mode, "raise", 5.0, sig)
    assert (tmp_path / f"finally-{child}").exists(), "the child's finally block did not run"
    assert seconds < 2.0, f"{seconds:.1f} s"


def test_a_child_that_does_not_unwind_is_ended_after_the_grace(tmp_path):
    child, seconds = _run(tmp_path, "spawn", "ignore", 1.0, signal.SIGKILL)
    assert not (tmp_path / f"finally-{child}").exists()
    assert 0.9 < seconds < 4.0, f"{seconds:.1f} s"


def test_no_parent_to_watch():
    """Not a multiprocessing child and no parent pid (a Ray actor, a command run from a
    shell): nothing is watched; TBA_LAB_PARENT_PID is read once and removed."""
    from tba_lab.actors import lifetime

    assert lifetime.exit_with_parent() is False
    os.environ.pop(lifetime.PARENT_PID_VAR, None)
    assert lifetime.exit_with_parent_from_env() is False
    assert lifetime.child_env({})[lifetime.PARENT_PID_VAR] == str(os.getpid())
