"""End a child process when its parent ends, however the parent ends.

``daemon=True``, ``atexit`` and ``finally`` blocks act only when the parent exits normally (or
turns SIGTERM into an exception). SIGKILL (the OOM killer, a kernel restart) runs nothing in
the parent, and neither does SIGTERM without a handler: its children go on, re-parented, with
their model, their cores and the parent's named semaphores in ``/dev/shm``
(``multiprocessing``'s resource tracker unlinks those only once every process using them has
ended). So each child watches its parent itself.

:func:`exit_with_parent`, called in the child, starts a daemon thread that waits for the
parent's end and then sends SIGTERM to the child's main thread, as ``kill`` would: a child
whose SIGTERM handler raises (:func:`raise_system_exit`, the trainer's KeyboardInterrupt) runs
its ``finally`` blocks; one without a handler ends at once. How the end is seen:

* a ``multiprocessing`` child (spawn, forkserver or fork): the parent's sentinel, a pipe whose
  write end only the parent holds, so it reads EOF the moment the parent dies, whatever its
  pid becomes later;
* any other process (started with ``subprocess``): ``os.getppid()``, checked every
  ``POLL_SECONDS`` against the parent's pid, changes when the child is re-parented.
  A kit command started by another (an experiment's ``tba-lab train``) learns its parent from
  ``TBA_LAB_PARENT_PID`` (:func:`child_env`, :func:`exit_with_parent_from_env`); a command
  started from a shell does not watch its shell (``nohup tba-lab train ... &`` outlives it).

Linux and macOS (``signal.pthread_kill``), as the kit's multi-process runs.
"""
from __future__ import annotations

import os
import signal
import threading
import time

PARENT_PID_VAR = "TBA_LAB_PARENT_PID"  # set by a kit process for a kit command it runs
POLL_SECONDS = 0.5                     # how often a subprocess child checks os.getppid()


def raise_system_exit(signum, frame):
    """A SIGTERM handler: unwind with ``SystemExit(128 + signum)`` so ``finally`` blocks run."""
    raise SystemExit(128 + signum)


def exit_with_parent(grace: float | None = 5.0, parent_pid: int | None = None) -> bool:
    """When the parent process ends, send SIGTERM to this process's main thread and, ``grace``
    seconds later, end the process with ``os._exit(1)`` if it is still running (a main thread
    stuck in C code; None: never). Returns False (and watches nothing) when there is no
    parent to watch: not a ``multiprocessing`` child and no ``parent_pid``, e.g. a Ray actor,
    whose lifetime Ray ties to its driver.

    Args:
        grace: seconds from SIGTERM to ``os._exit``; None leaves the exit to the process (a
            trainer whose handler stops its searchers and saves).
        parent_pid: for a process not started by ``multiprocessing``: the pid of the parent to
            watch (a parent that has already ended counts as ended at once).
    """
    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is not None:
        wait = parent.join  # returns when the sentinel reads EOF: the parent has ended
    elif parent_pid is not None:
        def wait():
            while os.getppid() == parent_pid:
                time.sleep(POLL_SECONDS)
    else:
        return False
    main = threading.main_thread().ident

    def watch():
        wait()
        signal.pthread_kill(main, signal.SIGTERM)
        if grace is not None:
            time.sleep(grace)
            os._exit(1)

    threading.Thread(target=watch, name="tba-exit-with-parent", daemon=True).start()
    return True


def child_env(env: dict | None = None) -> dict:
    """``env`` (default: this process's environment) with ``TBA_LAB_PARENT_PID`` set to this
    process: for a kit command run as a subprocess, which then ends when this process ends."""
    return {**(os.environ if env is None else env), PARENT_PID_VAR: str(os.getpid())}


def exit_with_parent_from_env() -> bool:
    """:func:`exit_with_parent` (``grace=None``) for the parent named by ``TBA_LAB_PARENT_PID``,
    if set; the variable is removed, so this process's own children do not inherit it."""
    pid = os.environ.pop(PARENT_PID_VAR, "")
    return exit_with_parent(grace=None, parent_pid=int(pid)) if pid.isdigit() else False
