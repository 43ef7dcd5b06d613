"""A child process for tests/test_lifetime.py: stdlib only (no torch), so it starts in a blink.

Spawned children re-import the function they run, so it lives in an importable module."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def sleeper(marker_dir: str, on_sigterm: str, grace: float, from_env: bool = False) -> None:
    """Watch the parent (:func:`tba_lab.actors.lifetime.exit_with_parent`; ``from_env``: the
    parent named by ``TBA_LAB_PARENT_PID``), touch ``ready-<pid>``, sleep for an hour; the
    ``finally`` block touches ``finally-<pid>``. ``on_sigterm``: ``"raise"`` (SystemExit) or
    ``"ignore"`` (a process that will not unwind: only ``grace`` ends it)."""
    from tba_lab.actors.lifetime import (exit_with_parent, exit_with_parent_from_env,
                                         raise_system_exit)

    signal.signal(signal.SIGTERM, raise_system_exit if on_sigterm == "raise" else signal.SIG_IGN)
    if from_env:
        assert exit_with_parent_from_env()
    else:
        assert exit_with_parent(grace=grace)
    marker = Path(marker_dir)
    (marker / f"ready-{os.getpid()}").touch()
    try:
        time.sleep(3600)
    finally:
        (marker / f"finally-{os.getpid()}").touch()


# The parent, run as `python -c PARENT MODE MARKER_DIR ON_SIGTERM GRACE`: starts one sleeper
# (MODE "spawn": a multiprocessing child; "subprocess": a Popen'd Python with
# TBA_LAB_PARENT_PID set) and waits for ever.
PARENT = """
import subprocess, sys, time
import multiprocessing as mp
from tba_lab.actors.lifetime import child_env
from tests._lifetime_helpers import sleeper
mode, marker_dir, on_sigterm, grace = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
if mode == "subprocess":
    code = ("import sys; from tests._lifetime_helpers import sleeper; "
            "sleeper(sys.argv[1], sys.argv[2], 0.0, from_env=True)")
    child = subprocess.Popen([sys.executable, "-c", code, marker_dir, on_sigterm], env=child_env())
else:
    child = mp.get_context(mode).Process(target=sleeper, args=(marker_dir, on_sigterm, grace))
    child.start()
time.sleep(3600)
"""
