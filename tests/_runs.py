"""Helpers for tests that run ``tba-lab train`` as a separate process."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def sigkill_after_updates(config: Path, run: Path, updates: int, timeout: float = 240) -> int:
    """Start ``tba-lab train --config config --no-progress`` in its own session, wait until
    ``run/metrics.jsonl`` holds ``updates`` rows (or ``timeout`` seconds), then SIGKILL the
    whole group (the trainer and its searchers, as an OOM kill would). Returns the trainer's
    pid (its weight channel's lock file is left behind: nobody is left to remove it)."""
    child = subprocess.Popen([sys.executable, "-m", "tba_lab", "train", "--config", str(config),
                              "--no-progress"], start_new_session=True, cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics, deadline = run / "metrics.jsonl", time.time() + timeout
    while time.time() < deadline:
        if metrics.exists() and sum(1 for line in metrics.read_text().splitlines()
                                    if line.strip() and json.loads(line)) >= updates:
            break
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    return child.pid
