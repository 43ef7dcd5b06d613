"""Helpers for tests that run ``tba-lab train`` as a separate process."""
from __future__ import annotations

import contextlib
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
    pid (its weight channel's lock file is left behind: nobody is left to remove it).

    The group's SIGKILL also ends multiprocessing's resource tracker, which would otherwise
    unlink the run's named semaphores once their users died: they are unlinked here, as
    read from the trainer's memory map before the kill, so the test leaves no /dev/shm entry."""
    child = subprocess.Popen([sys.executable, "-m", "tba_lab", "train", "--config", str(config),
                              "--no-progress"], start_new_session=True, cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics, deadline = run / "metrics.jsonl", time.time() + timeout
    while time.time() < deadline:
        if metrics.exists() and sum(1 for line in metrics.read_text().splitlines()
                                    if line.strip() and json.loads(line)) >= updates:
            break
        time.sleep(0.05)
    semaphores = _shm_semaphores(child.pid)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    for path in semaphores:
        path.unlink(missing_ok=True)
    return child.pid


def _shm_semaphores(pid: int) -> set[Path]:
    """The named POSIX semaphores (``/dev/shm/sem.*``) process ``pid`` has mapped. glibc maps a
    temporary file it then links under the semaphore's name, so the map shows the temporary
    name and the entry is found by its inode."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return set()
    inodes = {int(f[4]) for f in (line.split(maxsplit=5) for line in maps)
              if len(f) == 6 and f[5].startswith("/dev/shm/sem.")}
    found = set()
    for path in Path("/dev/shm").glob("sem.*"):
        with contextlib.suppress(OSError):  # another process's, gone meanwhile
            if path.stat().st_ino in inodes:
                found.add(path)
    return found
